"""Query graph: hand-computed entropy, specificity, PMI and windows; bad input; the real click sample."""

from __future__ import annotations

import math

import pytest
from pyspark.sql import functions as F

from common.data.config import InputSpec
from common.querygraph.clusters import reformulation_pairs
from common.querygraph.config import QueryGraphConfig
from common.querygraph.normalization import normalize_interactions, normalize_query
from common.querygraph.similarity import product_queries, similarities
from common.querygraph.specificity import specificity, within_tolerance
from jobs import PIPELINES, run_pipeline

SCHEMA = "query string, product_id string, interaction string, count long"


def test_entropy_and_specificity_by_hand(spark):
    log = spark.createDataFrame(
        [
            ("q1", "p1", "click", 2),
            ("q1", "p2", "click", 2),  # H = ln 2
            ("q2", "p1", "click", 4),
            ("q2", "p1", "purchase", 9),  # H = 0 (purchases are not clicks)
            ("q3", "p1", "click", 1),
            ("q3", "p2", "click", 1),
            ("q3", "p3", "click", 1),
            ("q3", "p4", "click", 1),
        ],
        SCHEMA,
    )
    got = {r.query: r for r in specificity(log, ["click"]).collect()}
    assert got["q1"].entropy == pytest.approx(math.log(2)) and got["q3"].entropy == pytest.approx(math.log(4))
    assert got["q2"].entropy == pytest.approx(0.0) and got["q2"].clicks == 4
    assert got["q1"].specificity == pytest.approx(0.5)  # 1 - ln2 / ln4
    assert got["q2"].specificity == pytest.approx(1.0) and got["q3"].specificity == pytest.approx(0.0)


def test_pmi_and_the_specificity_window_by_hand(spark):
    log = spark.createDataFrame(
        [
            # purchases: P1 {a, b}, P2 {a, b}, P3 {a, c}, P4 {d}: N = 4, n(a) = 3, n(b) = 2, n(c) = n(d) = 1
            ("a", "P1", "purchase", 1),
            ("b", "P1", "purchase", 1),
            ("a", "P2", "purchase", 1),
            ("b", "P2", "purchase", 1),
            ("a", "P3", "purchase", 1),
            ("c", "P3", "purchase", 1),
            ("d", "P4", "purchase", 1),
            # clicks: a, b one product each (s = 1); c two products; e four products (the max entropy): s(c) = 0.5
            ("a", "P1", "click", 1),
            ("b", "P1", "click", 1),
            ("c", "P1", "click", 1),
            ("c", "P2", "click", 1),
            ("e", "P1", "click", 1),
            ("e", "P2", "click", 1),
            ("e", "P3", "click", 1),
            ("e", "P4", "click", 1),
        ],
        SCHEMA,
    )
    cfg = QueryGraphConfig()
    spec = specificity(log, cfg.click_interactions)
    pq, caps = product_queries(log, cfg)
    sims = {(r.query, r.similar_query): r for r in similarities(pq, spec, cfg).collect()}
    assert sims[("a", "b")].cooccurrence == 2
    assert sims[("a", "b")].pmi == pytest.approx(math.log(2 * 4 / (3 * 2)))
    assert sims[("b", "a")].pmi == pytest.approx(math.log(4 / 3))
    assert sims[("a", "b")].npmi == pytest.approx(math.log(4 / 3) / -math.log(2 / 4))
    # a -> c has PMI ln(4/3) too, but s(c) = 0.5 is not within 10% of s(a) = 1: dropped.
    assert ("a", "c") not in sims and ("c", "a") not in sims
    assert set(sims) == {("a", "b"), ("b", "a")}
    assert caps.count() == 0


def test_ten_percent_window_is_relative_to_the_seed(spark):
    df = spark.createDataFrame([(0.9, 1.0), (0.89, 1.0), (0.55, 0.5), (0.56, 0.5)], "s double, seed double")
    relative = [
        r.ok for r in df.select(within_tolerance(F.col("s"), F.col("seed"), 0.1, "relative").alias("ok")).collect()
    ]
    assert relative == [True, False, True, False]
    absolute = [
        r.ok for r in df.select(within_tolerance(F.col("s"), F.col("seed"), 0.1, "absolute").alias("ok")).collect()
    ]
    assert absolute == [True, False, True, True]


def test_normalisation_thresholds_and_accounting(spark):
    assert normalize_query("  Ｎｉｋｅ　ＲＵＮＮＩＮＧ  Shoes ") == "nike running shoes"
    assert normalize_query("Straße") == "strasse" and normalize_query("ランニング　シューズ") == "ランニング シューズ"
    log = spark.createDataFrame(
        [
            ("Red Mug", "p1", "click", 1),
            ("red  mug", "p1", "Click", 2),
            ("\u3000", "p1", "click", 1),
            ("mug", "p2", "purchase", 1),
            ("mug", "p3", "click", 1),
            ("кружка", "p3", "click", 5),
        ],
        SCHEMA,
    )
    cfg = QueryGraphConfig(activity_threshold={"click": 2, "purchase": 1})
    kept, rejected = normalize_interactions(log, cfg)
    kept_rows = {(r.query, r.product_id, r.interaction): (r["count"], r.n_rows) for r in kept.collect()}
    assert kept_rows == {
        ("red mug", "p1", "click"): (3, 2),
        ("mug", "p2", "purchase"): (1, 1),
        ("кружка", "p3", "click"): (5, 1),
    }
    reasons = sorted((r.reason, r.n_rows) for r in rejected.collect())
    assert reasons == [("below activity threshold for click: count 1 < 2", 1), ("empty query after normalisation", 1)]
    assert sum(v[1] for v in kept_rows.values()) + sum(n for _, n in reasons) == 6


def test_hub_products_are_capped_and_cost_stays_linear(spark):
    hub = spark.range(100_000).select(
        F.concat(F.lit("q"), F.col("id").cast("string")).alias("query"),
        F.lit("HUB").alias("product_id"),
        F.lit("purchase").alias("interaction"),
        (F.col("id") % 7 + 1).alias("count"),
    )
    cfg = QueryGraphConfig(max_queries_per_product=200)
    pq, caps = product_queries(hub, cfg)
    assert [(r.product_id, r.n_queries, r.kept) for r in caps.collect()] == [("HUB", 100_000, 200)]
    assert pq.count() == 200 and pq.agg(F.min("count")).first()[0] == 7  # the most frequent queries stay
    spec = specificity(hub.withColumn("interaction", F.lit("click")), ["click"])
    assert similarities(pq, spec, cfg).count() == 200 * cfg.top_k  # top-k of 199 neighbours each


def test_one_product_log_and_pairs_lie_in_one_cluster(spark):
    from common.querygraph.clusters import cluster_products, subgraphs

    log = spark.createDataFrame(
        [(f"mug {w}", "P", kind, 1) for w in ("red", "blue", "big", "cheap") for kind in ("click", "purchase")], SCHEMA
    )
    cfg = QueryGraphConfig()
    spec = specificity(log, cfg.click_interactions)
    assert {r.specificity for r in spec.collect()} == {1.0}  # no query has entropy: all fully specific
    pq, _ = product_queries(log, cfg)
    sims = similarities(pq, spec, cfg)
    assert {r.pmi for r in sims.collect()} == {0.0} and {r.npmi for r in sims.collect()} == {1.0}
    clusters = cluster_products(subgraphs(pq, sims), cfg)
    rows = clusters.collect()
    assert [sorted(r.members) for r in rows] == [["mug big", "mug blue", "mug cheap", "mug red"]]
    pairs = reformulation_pairs(clusters, spec, sims, cfg).collect()
    members = {r.cluster_id: set(r.members) for r in rows}
    assert len(pairs) == 4 * 3
    assert all({p.source_query, p.target_query} <= members[p.cluster_id] for p in pairs)


def test_real_click_sample_runs_through_the_pipeline(ctx, shared_data):
    ctx.cfg.inputs.interactions = InputSpec(
        path=str(shared_data / "bestbuy_clicks" / "clicks_sample.csv"),
        rename={"sku": "product_id"},
        defaults={"interaction": "click", "count": "1"},
    )
    ctx.cfg.query_graph = QueryGraphConfig(cooccurrence_interactions=["click"])
    results = run_pipeline(ctx, "query-graph", PIPELINES["query-graph"])
    ingest, normalize, spec, sims, clusters, pairs = results[1:]
    assert ingest.metrics["interactions.rows_in"] == 999
    assert normalize.metrics["rows_in"] == ingest.metrics["interactions.rows_kept"]
    assert normalize.metrics["rows_in"] == normalize.metrics["rows_kept"] + normalize.metrics["rows_quarantined"]
    assert spec.metrics["queries"] > 100 and 0 <= spec.metrics["mean_specificity"] <= 1
    print("\nbestbuy:", {r.job: r.metrics for r in results[2:]})
    for table in (
        "query_specificity",
        "query_similarity",
        "query_clusters",
        "reformulation_pairs",
        "query_graph_components",
    ):
        assert ctx.lakehouse.exists(table)
    report = ctx.lakehouse.cfg.root + "/reports/query_graph/report.md"
    assert "Top clusters" in open(report).read()
