"""End to end: the consistency pipeline on the demo world, on bad inputs, and on real data."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest

from common.catalog.config import ConsistencyConfig
from common.data.config import InputSpec
from common.models.classifier_config import FastTextConfig
from common.models.classifiers.training_rows import TrainingDataError
from jobs import PIPELINES, run_pipeline
from jobs.consistency import group_catalog


def _demo_sized(ctx, **consistency):
    # `make demo`'s world (conf/demo.yaml): 1,000 labeled titles and 400 catalog groups carry enough versions
    # per label for the CST effect (its summary shows +0.10 to +0.12 consistency); smaller ones do not.
    ctx.cfg.demo.n_labeled, ctx.cfg.demo.n_groups, ctx.cfg.demo.n_sessions = 1000, 400, 400
    ctx.cfg.consistency = ConsistencyConfig(
        consistency_test=200, repeats=2, fasttext=FastTextConfig(epoch=10, bucket=20000), **consistency
    )
    return ctx


def test_demo_pipeline_cst_raises_consistency(ctx):
    results = run_pipeline(_demo_sized(ctx), "consistency", PIPELINES["consistency"])
    train = results[-1]
    rows = ctx.lakehouse.read("consistency_results").toPandas()
    assert len(rows) == 4 * 2 and set(rows.method) == {"baseline", "cs_blind", "cst_full", "cst_ss"}
    assert rows.f1_weighted.between(0, 1).all() and rows.consistency_rate.between(0, 1).all()
    means = rows.groupby("method")[["f1_weighted", "consistency_rate"]].mean()
    # The planted colour/size correlation makes the baseline inconsistent; CST's group labels fix part of it.
    print("\ndemo:", means.to_dict("index"))
    assert means.loc["cst_full", "consistency_rate"] > means.loc["baseline", "consistency_rate"] + 0.03
    assert means.loc["cst_ss", "consistency_rate"] > means.loc["baseline", "consistency_rate"] + 0.03
    assert (rows[rows.method == "baseline"].f1_lift.abs() < 0.02).all()
    # The training sets are table versions: CST adds the pseudo-labelled catalog, baseline does not.
    n_dl = ctx.lakehouse.read("labeled_train").count()
    assert ctx.lakehouse.read("train_baseline").count() == n_dl
    assert ctx.lakehouse.read("train_cst_full").count() == n_dl + ctx.lakehouse.read("unlabeled_pool").count()
    assert ctx.lakehouse.read("consistency_test").count() == 200
    report = Path(ctx.cfg.lakehouse.root) / "reports" / "consistency"
    assert (report / "f1_vs_consistency.png").stat().st_size > 10_000
    assert "cst_full" in (report / "report.md").read_text()
    client = mlflow.tracking.MlflowClient(ctx.cfg.tracking_uri)
    artifacts = {a.path for a in client.list_artifacts(train.run_id, "report")}
    assert artifacts == {"report/f1_vs_consistency.png", "report/report.md"}
    # Each method's HFT shipped as a registered model, each the first version of its name: champion.
    shipped = json.loads(Path(client.download_artifacts(train.run_id, "models/shipped.json")).read_text())
    assert {s["name"] for s in shipped} == {f"{ctx.cfg.registry.name_prefix}consistency_{m}" for m in set(rows.method)}
    assert all(s["champion"] and s["version"] == "1" for s in shipped) and len(train.notes) == 4
    assert client.get_run(train.run_id).data.metrics["mean.cst_full.consistency_rate"] == pytest.approx(
        means.loc["cst_full", "consistency_rate"]
    )
    # Re-running the same config on the same input versions adds nothing.
    before = {t.name: t.version for t in ctx.lakehouse.tables()}
    run_pipeline(ctx, "consistency", PIPELINES["consistency"])
    assert {t.name: t.version for t in ctx.lakehouse.tables()} == before
    # The demo's closing summary: each method's mean against the baseline, from the results table.
    summary = run_pipeline(ctx, "consistency", ["results-summary"])[0]
    assert summary.outputs == {}
    assert summary.metrics["cst_full.consistency_rate"] == pytest.approx(means.loc["cst_full", "consistency_rate"])
    text = (Path(ctx.cfg.lakehouse.root) / "reports" / "summary.md").read_text()
    assert "cst_full" in text and "MDE" in text and "reports/consistency" in text
    # Each method against the baseline on the same rows: CST's +0.10 consistency is beyond its interval.
    judged = ctx.lakehouse.read("consistency_evidence").toPandas().set_index(["method", "metric"])
    assert set(judged.index.get_level_values(0)) == {"cs_blind", "cst_full", "cst_ss"}
    cst = judged.loc[("cst_full", "consistency_rate")]
    assert cst.effect == pytest.approx(
        means.loc["cst_full", "consistency_rate"] - means.loc["baseline", "consistency_rate"]
    )
    assert cst.effect_low > 0 and cst.verdict.startswith("better") and cst.n_test == 200 and cst.repeats == 2
    assert summary.metrics["cst_full.consistency_rate.effect_low"] == pytest.approx(cst.effect_low)
    assert next(line for line in text.splitlines() if line.strip().startswith("cst_full")).count("better") == 1
    page = (Path(ctx.cfg.lakehouse.root) / "reports" / "results" / "consistency.md").read_text()
    version = ctx.lakehouse.version("consistency_results")
    assert f"| results table | `consistency_results` version {version} |" in page
    assert f"| cst_full | {means.loc['cst_full', 'f1_weighted']:.4f} ± " in page


def _ingest_user_data(ctx, tmp_path, labeled_rows, catalog_rows):
    from jobs.foundation import ingest

    labeled = tmp_path / "labeled.csv"
    labeled.write_text(
        "item_id,title,category\n" + "".join(f'{a},"{b}",{c}\n' for a, b, c in labeled_rows), encoding="utf-8"
    )
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(
        "".join(
            json.dumps(dict(zip(["item_id", "title", "group_id"], r)), ensure_ascii=False) + "\n" for r in catalog_rows
        ),
        encoding="utf-8",
    )
    ctx.cfg.inputs.labeled = InputSpec(path=str(labeled))
    ctx.cfg.inputs.catalog = InputSpec(path=str(catalog))
    ingest.run(ctx)


def test_catalog_without_groups_fails_with_a_clear_message(ctx, tmp_path):
    labeled = [(f"l{i}", f"mug {i}", "Home > Mugs" if i % 2 else "Toys > Dolls") for i in range(20)]
    catalog = [(f"c{i}", f"lamp {i}", None) for i in range(10)]
    _ingest_user_data(ctx, tmp_path, labeled, catalog)
    with pytest.raises(ValueError, match=r"no catalog groups of size 2..192: 10 items, 10 of them without"):
        group_catalog.run(ctx)
    assert (
        ctx.lakehouse.read("catalog_groups_quarantine").filter("reason = 'group size 1 below minimum 2'").count() == 10
    )


def test_huge_groups_are_quarantined(ctx, tmp_path):
    labeled = [(f"l{i}", f"mug {i}", "Home > Mugs" if i % 2 else "Toys > Dolls") for i in range(20)]
    catalog = [(f"h{i}", f"cable {i}", "HUGE") for i in range(300)] + [("a", "mug red", "G"), ("b", "mug blue", "G")]
    _ingest_user_data(ctx, tmp_path, labeled, catalog)
    result = group_catalog.run(ctx)
    assert result.metrics["items_quarantined"] == 300 and result.metrics["groups_kept"] == 1
    reasons = ctx.lakehouse.read("catalog_groups_quarantine").select("reason").distinct().collect()
    assert [r.reason for r in reasons] == ["group size 300 above maximum 192"]


def test_single_class_labels_fail_before_training(ctx, tmp_path):
    from jobs.consistency import consistency_splits

    labeled = [(f"l{i}", f"mug {i}", "Home > Mugs") for i in range(20)]
    catalog = [(f"c{i}", f"mug {i}", f"G{i // 2}") for i in range(10)]
    _ingest_user_data(ctx, tmp_path, labeled, catalog)
    group_catalog.run(ctx)
    with pytest.raises(TrainingDataError, match="single category: a classifier needs at least two classes"):
        consistency_splits.run(ctx)


def test_other_scripts_run_through_the_pipeline(ctx, tmp_path):
    vocab = {"Home > Kitchen > Mugs": ["кружка", "マグカップ", "mug"], "Toys > Dolls": ["кукла", "人形", "doll"]}
    labeled = [(f"l{i}", f"{vocab[c][i % 3]} {i % 5} цвет", c) for i in range(120) for c in [list(vocab)[i % 2]]]
    catalog = [
        (f"c{g}-{k}", f"{vocab[list(vocab)[g % 2]][g % 3]} {g} версия {k}", f"G{g}")
        for g in range(40)
        for k in range(3)
    ]
    # Labeled items that are catalog offers (a team labels some of its own): version 0 of every other group, and
    # version 1 too of every fourth. With a group-disjoint split a drawn offer takes its labeled sibling to the test.
    offers = [(f"o{g}-{k}", catalog[3 * g + k][1], list(vocab)[g % 2]) for g in range(0, 40, 2) for k in (0, 1)]
    labeled += [o for o in offers if o[0].endswith("-0") or int(o[0][1:].split("-")[0]) % 4 == 0]
    _ingest_user_data(ctx, tmp_path, labeled, catalog)
    ctx.cfg.consistency = ConsistencyConfig(
        methods=["baseline", "cst_full"],
        repeats=1,
        consistency_test=20,
        group_disjoint=True,
        fasttext=FastTextConfig(epoch=10, bucket=5000),
    )
    results = run_pipeline(ctx, "consistency", PIPELINES["consistency"][2:])
    rows = ctx.lakehouse.read("consistency_results").toPandas()
    assert sorted(rows.method) == ["baseline", "cst_full"]  # a Delta read has no row order
    assert rows.f1_weighted.min() > 0.9  # each script's words name the category
    assert results[1].metrics["consistency_test_pairs"] == 20
    # 120 items share 30 titles: every copy of a test title is on the test side, none in D_L or D_U
    titles = {
        t: {r.title for r in ctx.lakehouse.read(t).collect()}
        for t in ("accuracy_test", "labeled_train", "unlabeled_pool")
    }
    assert titles["accuracy_test"] and titles["labeled_train"]
    assert not titles["accuracy_test"] & (titles["labeled_train"] | titles["unlabeled_pool"])
    assert results[1].metrics["leaked_test_titles"] == 0
    # The consistency test's titles are in neither D_L (nor so CGA's sources) nor D_U (nor so its fine-tuning
    # pairs): the groups holding a D_L offer were set aside, and the guard counts them.
    pairs = ctx.lakehouse.read("consistency_test").collect()
    tested = {p.title_1 for p in pairs} | {p.title_2 for p in pairs}
    assert len(pairs) == 20 and not tested & (titles["labeled_train"] | titles["unlabeled_pool"])
    offered = {o[1] for o in offers} & titles["labeled_train"]
    assert offered and results[1].metrics["guard_groups_holding_d_l_titles"] > 0
    # Group-disjoint: an offer and its labeled sibling sit on one side.
    for g in range(0, 40, 4):
        both = {catalog[3 * g][1], catalog[3 * g + 1][1]}
        assert both <= titles["accuracy_test"] or not both & titles["accuracy_test"], g
    # Each method's evidence against the baseline, on the same rows.
    judged = ctx.lakehouse.read("consistency_evidence").toPandas().set_index(["method", "metric"])
    assert set(judged.index) == {("cst_full", "f1_weighted"), ("cst_full", "consistency_rate")}
    row = judged.loc[("cst_full", "consistency_rate")]
    assert row.n_test == 20 and row.repeats == 1 and row.interval == "McNemar"
    assert row.effect_low <= row.effect <= row.effect_high and row.verdict


def test_real_data_amazon_toys_with_wdc_groups(ctx, shared_data):
    ctx.cfg.inputs.labeled = InputSpec(
        path=str(shared_data / "amazon_uk_toys" / "amazon_co-ecommerce_sample.noheader.csv"),
        header=False,
        columns=[
            "uniq_id",
            "product_name",
            "amazon_category_and_sub_category",
            "manufacturer",
            "price",
            "number_available_in_stock",
            "number_of_reviews",
            "number_of_answered_questions",
            "average_rating",
        ],
        rename={"uniq_id": "item_id", "product_name": "title", "amazon_category_and_sub_category": "category"},
    )
    ctx.cfg.inputs.catalog = InputSpec(
        path=str(shared_data / "wdc_products" / "table[AB].csv"),
        options={"multiLine": "true"},
        rename={"id": "item_id", "cluster_id": "group_id"},
    )
    ctx.cfg.consistency = ConsistencyConfig(
        methods=["baseline", "cst_full"], repeats=1, consistency_test=200, fasttext=FastTextConfig(bucket=50000)
    )
    results = run_pipeline(ctx, "consistency", PIPELINES["consistency"])
    ingest, grouping, splits, train = results[1:]
    assert ingest.metrics["labeled.rows_in"] == 10000 and ingest.metrics["labeled.rows_kept"] == 9308
    # tableB's 4,379 offers are tableA's again (same id, same content): ingest keeps one copy of each.
    assert ingest.metrics["catalog.rows_in"] == 4575 + 4379 and ingest.metrics["catalog.rows_kept"] == 4575
    assert ingest.metrics["catalog.rows_duplicate"] == 4379
    assert grouping.metrics["groups_kept"] == 750  # the WDC clusters
    assert splits.metrics["consistency_test_pairs"] > 0
    rows = ctx.lakehouse.read("consistency_results").toPandas().set_index("method")
    print("\nreal data:", rows[["f1_weighted", "consistency_rate"]].to_dict("index"), splits.metrics)
    assert 0.3 < rows.loc["baseline", "f1_weighted"] < 1
    assert rows.loc["cst_full", "consistency_rate"] > rows.loc["baseline", "consistency_rate"]
