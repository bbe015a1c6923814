"""Exact sub-sampling: plans against hand-computed quotas, properties, and exact deterministic draws."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.data.sampling import SamplingError, draw, plan_sample, seeded_first, subsample, total_variation


def test_largest_sample_matching_the_target_by_hand():
    # A can give 100/0.5 = 200, B 50/0.3 = 166.7, C 10/0.2 = 50: C limits the sample to 50 rows.
    plan = plan_sample({"A": 100, "B": 50, "C": 10}, {"A": 5, "B": 3, "C": 2})
    assert plan.n == plan.largest == 50
    assert plan.quotas == {"A": 25, "B": 15, "C": 10}
    assert plan.tvd_after == pytest.approx(0.0)
    # Before: data is 100/160, 50/160, 10/160 vs 0.5/0.3/0.2 -> 0.5 * (0.125 + 0.0125 + 0.1375) = 0.1375.
    assert plan.tvd_before == pytest.approx(0.1375)


def test_largest_remainder_rounding_for_a_given_n():
    # n = 10 over thirds: exact 3.33 each; one stratum gets the leftover row (smallest label on ties).
    plan = plan_sample({"x": 50, "y": 50, "z": 50}, {"x": 1, "y": 1, "z": 1}, n=10)
    assert plan.quotas == {"x": 4, "y": 3, "z": 3}
    with pytest.raises(SamplingError, match="largest matching sample has 150 rows"):
        plan_sample({"x": 50, "y": 50, "z": 50}, {"x": 1, "y": 1, "z": 1}, n=151)


def test_missing_target_labels_are_reported_and_renormalised():
    plan = plan_sample({"A": 40, "B": 40}, {"A": 0.5, "B": 0.25, "Z": 0.25})
    assert plan.target_labels_missing == ["Z"]
    assert plan.quotas == {"A": 40, "B": 20}
    assert plan.tvd_after == pytest.approx(0.5 * (abs(40 / 60 - 0.5) + abs(20 / 60 - 0.25) + 0.25))
    with pytest.raises(SamplingError, match="no label of the target occurs"):
        plan_sample({"A": 1}, {"B": 1.0})


def test_total_variation_by_hand():
    assert total_variation({"a": 1, "b": 1}, {"a": 1}) == pytest.approx(0.5)
    assert total_variation({"a": 3, "b": 1}, {"a": 1, "b": 3}) == pytest.approx(0.5)


@settings(max_examples=200, deadline=None)
@given(
    counts=st.dictionaries(st.sampled_from("abcdefgh"), st.integers(1, 500), min_size=1),
    weights=st.dictionaries(st.sampled_from("abcdefgh"), st.floats(0.01, 10), min_size=1),
    share=st.floats(0, 1),
)
def test_quotas_are_within_one_row_and_never_exceed_the_data(counts, weights, share):
    try:
        largest = plan_sample(counts, weights).largest
    except SamplingError:
        assert not set(counts) & set(weights)
        return
    n = int(share * largest)
    plan = plan_sample(counts, weights, n)
    usable = {k: w for k, w in weights.items() if k in counts}
    total = sum(usable.values())
    assert sum(plan.quotas.values()) == n
    for label, quota in plan.quotas.items():
        assert abs(quota - n * usable[label] / total) < 1.0
        assert 0 <= quota <= counts[label]
    assert math.isfinite(plan.tvd_after)


def test_draw_is_exact_and_deterministic(spark):
    from common.data.sampling import histogram

    # A and B are thinned by the hash threshold; C (20 rows for 15) keeps every row as a candidate.
    rows = [(f"i{i:04d}", "A" if i % 3 else "B") for i in range(900)] + [(f"c{i:02d}", "C") for i in range(20)]
    df = spark.createDataFrame(rows, "item_id string, label string")
    quotas = {"A": 123, "B": 77, "C": 15}
    first = draw(df, "label", quotas, seed=5, key_cols=["item_id"]).collect()
    # The caller's histogram, when it has one, draws the same rows.
    again = draw(df, "label", quotas, seed=5, key_cols=["item_id"], counts=histogram(df, "label")).collect()
    other = draw(df, "label", quotas, seed=6, key_cols=["item_id"]).collect()
    assert sorted(r.item_id for r in first) == sorted(r.item_id for r in again)
    assert sorted(r.item_id for r in first) != sorted(r.item_id for r in other)
    assert {k: sum(1 for r in first if r.label == k) for k in quotas} == quotas
    assert first[0].asDict().keys() == {"item_id", "label"}


def test_seeded_first_is_seeded_exact_and_layout_free(spark):
    rows = spark.createDataFrame([(f"i{k:03d}", f"title {k}") for k in range(100)], "item_id string, title string")
    ids = {r.item_id for r in seeded_first(rows, 10, 42, ["item_id"]).collect()}
    assert len(ids) == 10 and ids == {
        r.item_id for r in seeded_first(rows.repartition(7), 10, 42, ["item_id"]).collect()
    }
    assert ids != {r.item_id for r in seeded_first(rows, 10, 43, ["item_id"]).collect()}  # another seed, other rows
    assert seeded_first(rows, 500, 42, ["item_id"]).count() == 100


def test_subsample_matches_a_skewed_target_exactly(spark):
    rows = [(f"i{i:05d}", ["toys", "home", "garden"][i % 10 % 3]) for i in range(3000)]
    df = spark.createDataFrame(rows, "item_id string, label string")
    sample, plan = subsample(df, "label", {"toys": 0.6, "home": 0.3, "garden": 0.1}, seed=1, key_cols=["item_id"])
    got = {r.label: r["count"] for r in sample.groupBy("label").count().collect()}
    assert got == plan.quotas and sum(got.values()) == plan.n
    assert plan.tvd_after < 1e-3 < plan.tvd_before


def test_subsample_job_matches_another_tables_histogram(ctx):
    from common.data.config import SubsampleConfig
    from common.data.sampling import SamplingError
    from jobs.foundation import subsample as job

    spark = ctx.spark
    items = [(f"i{i:04d}", ["Toys > Dolls", "Toys > Blocks", "Home > Mugs"][i % 3]) for i in range(900)]
    ctx.lakehouse.write(spark.createDataFrame(items, "item_id string, category string"), "pool")
    target = [(f"t{i}", "Toys > Dolls" if i < 30 else "Home > Mugs") for i in range(40)]  # L1: Toys 75%, Home 25%
    ctx.lakehouse.write(spark.createDataFrame(target, "item_id string, category string"), "reference")
    ctx.cfg.subsample = SubsampleConfig(table="pool", target_table="reference", level=1)
    result = job.run(ctx)
    sample = ctx.lakehouse.read("pool_subsample")
    by_l1 = {
        r.l1: r["count"] for r in sample.selectExpr("split(category, ' > ')[0] AS l1").groupBy("l1").count().collect()
    }
    assert by_l1 == {"Toys": 600, "Home": 200}  # Home (300 rows) allows 400 at 75/25; Toys (600) allows 800
    assert result.metrics["tvd_after"] == pytest.approx(0.0) and result.metrics["tvd_before"] > 0.08
    assert ctx.lakehouse.history("pool_subsample")[0].lineage["inputs"] == {"pool": "0", "reference": "0"}
    ctx.cfg.subsample = SubsampleConfig(table="pool", weights={"Home": 1.0}, n=50, level=1, output="mugs")
    job.run(ctx)
    assert ctx.lakehouse.read("mugs").filter("category = 'Home > Mugs'").count() == 50
    ctx.cfg.subsample = SubsampleConfig(table="pool")
    with pytest.raises(SamplingError, match="set subsample.target_table"):
        job.run(ctx)
    ctx.cfg.subsample = SubsampleConfig(table="pool", weights={"Home": 1.0}, key_columns=["sku"])
    with pytest.raises(SamplingError, match="has no column 'sku'"):
        job.run(ctx)
