"""Query reformulation: growth accounting by hand, the ranking metrics, the hold-out, and the pipeline."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from worlds import QR_SOURCES, check_card

from common.querygraph.config import QueryGraphConfig
from common.querygraph.matcher import is_holdout, ranking_metrics
from common.querygraph.reformulation import (
    augment_interactions,
    collected_tuples,
    distinct_queries,
    usable_reformulations,
)

TUPLES = "query string, product_id string, interaction string, count long"


def test_growth_accounting_by_hand(spark):
    cfg = QueryGraphConfig(activity_threshold={"click": 1, "purchase": 2})
    kept = spark.createDataFrame(
        [("red mug", "P1", "purchase", 2), ("red mug", "P2", "click", 1), ("blue lamp", "P3", "click", 1)], TUPLES
    ).withColumn("n_rows", F.lit(1))
    quarantine = spark.createDataFrame(
        [
            ("crimson mug", "P1", "purchase", 1, 1, "below activity threshold for purchase: count 1 < 2"),
            ("", "P9", "click", 4, 4, "empty query after normalisation"),
        ],
        TUPLES + ", n_rows long, reason string",
    )
    tuples = collected_tuples(kept, quarantine)
    assert tuples.count() == 4  # the empty query is not a collected tuple
    refs = spark.createDataFrame(
        [("red mug", "crimson mug"), ("red mug", "mug red"), ("crimson mug", "scarlet mug")],
        "query string, reformulation string",
    )
    out = augment_interactions(tuples, refs, cfg)
    kept_rows = {
        (r.query, r.product_id, r.interaction): (r["count"], r.original_count, r.reformulated_count, r.origin)
        for r in out.kept.collect()
    }
    assert kept_rows == {
        ("red mug", "P1", "purchase"): (2, 2, 0, "original"),
        ("red mug", "P2", "click"): (1, 1, 0, "original"),
        ("blue lamp", "P3", "click"): (1, 1, 0, "original"),
        # collected below the threshold (1 < 2); red mug's reformulation adds its count 2: lifted over it
        ("crimson mug", "P1", "purchase"): (3, 1, 2, "lifted"),
        ("crimson mug", "P2", "click"): (1, 0, 1, "new"),
        ("mug red", "P1", "purchase"): (2, 0, 2, "new"),
        ("mug red", "P2", "click"): (1, 0, 1, "new"),
    }
    rejected = out.rejected.collect()
    # crimson mug's own reformulation carries its count 1 to a purchase: still below 2.
    assert [(r.query, r["count"], r.reason) for r in rejected] == [
        ("scarlet mug", 1, "below activity threshold for purchase: count 1 < 2")
    ]
    assert out.reformulated.count() == 5
    aggregated = tuples.unionByName(out.reformulated).select("query", "product_id", "interaction").distinct().count()
    assert aggregated == len(kept_rows) + len(rejected)  # every aggregated tuple is kept or rejected
    assert len(kept_rows) / kept.count() == pytest.approx(7 / 3)  # growth factor


def test_usable_reformulations_drop_rejects_copies_and_normalise(spark):
    generated = spark.createDataFrame(
        [
            ("red mug", "Crimson  MUG", 0, None),
            ("red mug", "red mug", 1, None),
            ("red mug", "RED MUG!", 2, None),
            ("red mug", "", 3, "empty output"),
            ("x" * 300, None, -1, "input longer than 64 tokens (300)"),
        ],
        "source_text string, generated_text string, sample_idx long, reason string",
    )
    rows = {(r.query, r.reformulation) for r in usable_reformulations(generated).collect()}
    assert ("red mug", "crimson mug") in rows and ("red mug", "red mug") not in rows
    assert all(q == "red mug" for q, _ in rows) and len(rows) <= 2


def test_ranking_metrics_by_hand():
    m = ranking_metrics(["P1", "P7", "P2", "P9"], ["P2", "P1", "P3"], [1, 2, 4])
    assert m["precision_at_1"] == 1.0 and m["recall_at_1"] == pytest.approx(1 / 3) and m["hit_at_1"] == 1.0
    assert m["precision_at_2"] == 0.5 and m["precision_at_4"] == 0.5 and m["recall_at_4"] == pytest.approx(2 / 3)
    assert ranking_metrics(["P5"], ["P1"], [1]) == {"precision_at_1": 0.0, "recall_at_1": 0.0, "hit_at_1": 0.0}


def test_holdout_is_seeded_and_near_its_fraction(spark):
    queries = spark.range(20000).select(F.concat(F.lit("query "), F.col("id").cast("string")).alias("query"))
    share = queries.filter(is_holdout(F.col("query"), 0.2, 42)).count() / 20000
    assert 0.18 < share < 0.22
    first = {r.query for r in queries.filter(is_holdout(F.col("query"), 0.2, 42)).collect()}
    assert first == {r.query for r in queries.filter(is_holdout(F.col("query"), 0.2, 42)).collect()}
    assert first != {r.query for r in queries.filter(is_holdout(F.col("query"), 0.2, 43)).collect()}


@pytest.mark.slow  # a whole pipeline, minutes on 2 cores: make test runs it, make test-fast not
def test_query_reformulation_pipeline_end_to_end(small_world):
    # The world's settings (tests/worlds.py): a tiny scratch T5, 2 reformulations per query, matcher P@1, P@5.
    ctx = small_world.ctx
    results = small_world.run("query-reformulation")
    lh = ctx.lakehouse
    growth = results["query-augment"].metrics
    card = check_card(small_world, results["query-augment"], "augmented_interactions")
    assert "| kind | `scratch_t5` |" in card and f"| growth_factor | `{growth['growth_factor']}` |" in card
    local = lh.read("query_interactions").count()
    augmented = lh.read("augmented_interactions")
    assert growth["local_tuples"] == local and growth["augmented_tuples"] == augmented.count()
    assert growth["growth_factor"] == pytest.approx(augmented.count() / local)
    assert growth["aggregated_tuples"] == growth["augmented_tuples"] + growth["rejected_tuples"]
    assert growth["augmented_original"] == local  # every original tuple survives: counts only grow
    assert growth["augmented_original"] + growth["augmented_lifted"] + growth["augmented_new"] == augmented.count()
    queries = lh.read("reformulation_inputs").count()
    assert results["query-reformulate"].metrics["generation.inputs"] == queries
    # query_reformulation.sources: a seeded sample of that many of the collected queries, in both jobs.
    collected = distinct_queries(
        collected_tuples(lh.read("query_interactions"), lh.read("query_interactions_quarantine"))
    )
    assert collected.count() > QR_SOURCES == queries == lh.read("matcher_inputs").count()
    assert lh.read("reformulation_inputs").subtract(collected).count() == 0
    assert lh.read("query_reformulations").filter("sample_idx >= 0").count() == 2 * queries
    versions = {r[0] for r in lh.read("query_reformulations").select("model_version").distinct().collect()}
    assert {v.split("-")[0] for v in versions if v} == {"scratch_t5_qr"}

    # The matcher never saw a held-out query: not in its pairs, not as a generation input.
    pairs = lh.read("matcher_pairs")
    held = F.col("q")
    for column in ("source_query", "target_query"):
        assert pairs.select(F.col(column).alias("q")).filter(is_holdout(held, 0.2, ctx.cfg.seed)).count() == 0
    assert lh.read("matcher_inputs").filter(is_holdout(F.col("query"), 0.2, ctx.cfg.seed)).count() == 0
    # ... and not as a generated reformulation in the augmented log (those are dropped and counted).
    held_out = lh.read("query_interactions").filter(is_holdout(F.col("query"), 0.2, ctx.cfg.seed)).select("query")
    assert lh.read("matcher_train_augmented").join(held_out.distinct(), "query").count() == 0
    # Reformulations that are a held-out query sit in matcher_test_copies with their reason (count checked
    # against the held-out set, case- and space-folded as the check folds them).
    held_keys = held_out.select(F.lower(F.regexp_replace(F.trim("query"), r"\s+", " ")).alias("k")).distinct()
    generated = lh.read("matcher_reformulations").filter(F.col("reason").isNull())
    expected = generated.join(
        held_keys, F.lower(F.regexp_replace(F.trim("generated_text"), r"\s+", " ")) == held_keys.k
    )
    copies = lh.read("matcher_test_copies")
    assert copies.count() == expected.count() == results["query-matcher"].metrics["test_copies_dropped"]
    assert copies.filter(F.col("reason") != "copies a test text").count() == 0
    res = lh.read("matcher_results").toPandas()
    # One row per variant, k and seed (repeats=2: the run's seed and the next).
    assert sorted(zip(res.variant, res.k, res.seed)) == [
        (v, k, s) for v in ("augmented", "original") for k in (1, 5) for s in (ctx.cfg.seed, ctx.cfg.seed + 1)
    ]
    assert sorted(set(zip(res.seed, res["repeat"]))) == [(ctx.cfg.seed, 0), (ctx.cfg.seed + 1, 1)]
    assert res.precision.between(0, 1).all() and (res.n_queries > 0).all()
    tuples = {variant: res[res.variant == variant].n_train_tuples.iloc[0] for variant in ("augmented", "original")}
    assert tuples["augmented"] >= tuples["original"]
    before = {t.name: t.version for t in lh.tables()}
    again = small_world.rerun("query-reformulation")
    assert {t.name: t.version for t in lh.tables()} == before
    assert all(out.skipped for r in again for out in r.outputs.values())
    # The graph and augmentation jobs found their tables written before computing anything (no clustering,
    # no triangle counts, no growth accounting: their metrics come only from a computed run).
    rerun = {r.job: r for r in again}
    for name in ("query-normalize", "query-specificity", "query-similarity", "query-clusters", "query-augment"):
        assert rerun[name].outputs and not rerun[name].metrics, name


@pytest.mark.slow  # generation and matchers again on a copy of the world
def test_another_decoding_regenerates_the_matchers_reformulations_without_a_fine_tune(small_world, tmp_path):
    from dataclasses import replace
    from pathlib import Path

    from common.models.generation.fine_tune_specs import MODEL_MARKER
    from jobs.query.query_matcher import matcher_job

    small_world.run("query-reformulation")
    ctx = small_world.copy(tmp_path)
    try:
        lake = ctx.lakehouse
        before = {t.name: t.version for t in lake.tables()}
        model = lake.read("matcher_reformulations").select("model_version").first()[0]
        marker = Path(ctx.cfg.lakehouse.root) / "models" / model / MODEL_MARKER
        trained_at = marker.stat().st_mtime_ns
        ctx.cfg.query_reformulation.generation = replace(ctx.cfg.query_reformulation.generation, top_k=5)
        matcher_job(ctx)
        after = {t.name: t.version for t in lake.tables()}
        # the split and the generator stand; the reformulations, training logs and results are new versions
        assert after["matcher_pairs"] == before["matcher_pairs"]
        assert after["matcher_inputs"] == before["matcher_inputs"]
        assert marker.stat().st_mtime_ns == trained_at
        versions = lake.read("matcher_reformulations").select("model_version").distinct().collect()
        assert {r[0] for r in versions} == {model}
        for table in ("matcher_reformulations", "matcher_train_augmented", "matcher_results"):
            assert after[table] == before[table] + 1, table
    finally:
        ctx.close()
