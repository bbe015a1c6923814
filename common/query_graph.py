"""Query-graph transforms (the query-reformulation paper, section 3) as pure DataFrame functions.

Sizes that reach the driver: none grow with the log. Global scalars (max entropy, number of products)
are one-row aggregates cross-joined back; hub products are capped before the self-join, so the join
costs at most ``cap`` pairs per query occurrence: linear in the log, not quadratic in hub sizes.
"""
from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING

import pandas as pd  # a core dependency; pandas UDF type hints must resolve at run time

from common.config import QueryGraphConfig

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

CLUSTER_SCHEMA = ("product_id string, cluster_id string, members array<string>, size int, internal_edges int, "
                  "pruned int, merge_rounds int, subgraph_vertices int, subgraph_edges int")


def normalize_query(text: str | None) -> str:
    """NFKC, case-folded, single spaces, trimmed (other scripts are kept as they are)."""
    if not text:
        return ""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def normalize_query_col(query: "Column") -> "Column":
    """Column form of :func:`normalize_query` (a vectorised pandas UDF: Spark has no NFKC function)."""
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("string")
    def _normalize(values: pd.Series) -> pd.Series:
        return values.map(normalize_query)

    return _normalize(query)


def normalize_interactions(df: "DataFrame", cfg: QueryGraphConfig) -> tuple["DataFrame", "DataFrame"]:
    """Normalise queries, aggregate per (query, product_id, interaction), apply the activity thresholds.

    Returns (kept, rejected). kept: ``query, product_id, interaction, count, n_rows``; rejected: the same
    plus ``reason`` (an empty query after normalisation, or below the interaction's threshold). ``n_rows``
    counts input rows, so rows in = sum(kept.n_rows) + sum(rejected.n_rows).
    """
    from pyspark.sql import functions as F

    normalized = df.select(normalize_query_col(F.col("query")).alias("query"), "product_id",
                           F.lower(F.trim(F.col("interaction"))).alias("interaction"), "count")
    empty = normalized.filter(F.col("query") == "").groupBy("query", "product_id", "interaction").agg(
        F.sum("count").alias("count"), F.count("*").alias("n_rows")) \
        .withColumn("reason", F.lit("empty query after normalisation"))
    aggregated = normalized.filter(F.col("query") != "").groupBy("query", "product_id", "interaction").agg(
        F.sum("count").alias("count"), F.count("*").alias("n_rows"))
    kept, below = apply_activity_threshold(aggregated, cfg)
    return kept, below.unionByName(empty)


BELOW_THRESHOLD = "below activity threshold"


def apply_activity_threshold(tuples: "DataFrame", cfg: QueryGraphConfig) -> tuple["DataFrame", "DataFrame"]:
    """(tuples with ``count`` >= their interaction's threshold, the others with a ``reason``)."""
    from pyspark.sql import functions as F

    thresholds = F.create_map(*[x for k, v in sorted(cfg.activity_threshold.items()) for x in (F.lit(k), F.lit(v))]) \
        if cfg.activity_threshold else None
    threshold = F.coalesce(thresholds[F.col("interaction")] if thresholds is not None else F.lit(None),
                           F.lit(cfg.default_activity_threshold))
    with_threshold = tuples.withColumn("_threshold", threshold)
    kept = with_threshold.filter(F.col("count") >= F.col("_threshold")).drop("_threshold")
    below = with_threshold.filter(F.col("count") < F.col("_threshold")).withColumn(
        "reason", F.concat(F.lit(f"{BELOW_THRESHOLD} for "), F.col("interaction"), F.lit(": count "),
                           F.col("count").cast("string"), F.lit(" < "), F.col("_threshold").cast("string"))
    ).drop("_threshold")
    return kept, below


def specificity(interactions: "DataFrame", click_types: list[str]) -> "DataFrame":
    """Click entropy and specificity per query: ``query, clicks, n_products, entropy, specificity``.

    H(q) = -Σ_p P(p|q) log P(p|q) = log C - (Σ_p c_p log c_p) / C with C = Σ_p c_p, in one aggregate;
    s(q) = 1 - H(q) / max_q' H(q') (1 for every query when no query has entropy).
    """
    from pyspark.sql import functions as F

    clicks = interactions.filter(F.col("interaction").isin(click_types)).groupBy("query", "product_id") \
        .agg(F.sum("count").alias("c")).filter(F.col("c") > 0)
    per_query = clicks.groupBy("query").agg(
        F.sum("c").alias("clicks"), F.count("*").alias("n_products"),
        F.sum(F.col("c") * F.log(F.col("c"))).alias("_clogc"))
    entropy = per_query.withColumn(
        "entropy", F.greatest(F.lit(0.0), F.log(F.col("clicks")) - F.col("_clogc") / F.col("clicks"))).drop("_clogc")
    max_entropy = entropy.agg(F.max("entropy").alias("_max"))
    return entropy.crossJoin(F.broadcast(max_entropy)).withColumn(
        "specificity", F.when(F.col("_max") > 0, 1 - F.col("entropy") / F.col("_max")).otherwise(F.lit(1.0))
    ).drop("_max")


def within_tolerance(value: "Column", seed: "Column", tolerance: float, mode: str) -> "Column":
    """Column: ``value`` lies within ``tolerance`` of ``seed`` (relative: of seed's value; absolute: plain)."""
    from pyspark.sql import functions as F

    bound = F.abs(seed) * tolerance if mode == "relative" else F.lit(tolerance)
    return F.abs(value - seed) <= bound + F.lit(1e-12)


def product_queries(interactions: "DataFrame", cfg: QueryGraphConfig) -> tuple["DataFrame", "DataFrame"]:
    """The queries leading to each product through the co-occurrence interactions, hub-capped.

    Returns (pairs ``product_id, query, count``, caps ``product_id, n_queries, kept``): a product with more
    than ``max_queries_per_product`` queries keeps its most frequent ones (ties by query) and is recorded.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pq = interactions.filter(F.col("interaction").isin(cfg.cooccurrence_interactions)) \
        .groupBy("product_id", "query").agg(F.sum("count").alias("count"))
    ranked = pq.withColumn("_rank", F.row_number().over(
        Window.partitionBy("product_id").orderBy(F.col("count").desc(), F.col("query")))) \
        .withColumn("_n", F.count("*").over(Window.partitionBy("product_id")))
    caps = ranked.filter(F.col("_n") > cfg.max_queries_per_product).groupBy("product_id") \
        .agg(F.first("_n").alias("n_queries")).withColumn("kept", F.lit(cfg.max_queries_per_product))
    return ranked.filter(F.col("_rank") <= cfg.max_queries_per_product).drop("_rank", "_n"), caps


def similarities(pq: "DataFrame", spec: "DataFrame", cfg: QueryGraphConfig) -> "DataFrame":
    """Query-to-query similarities by shared products (item-to-item CF over queries).

    With N products, n(q) products per query and c(a, b) shared products: PMI(a, b) = ln(c·N / (n(a)·n(b)));
    NPMI = PMI / -ln(c / N). Pairs with c >= ``min_support`` are ranked per seed query by ``similarity``
    (then by the other query), the top ``top_k`` are kept, then those whose specificity is not within the
    tolerance of the seed's are dropped. Returns ``query, similar_query, cooccurrence, pmi, npmi, score,
    rank, specificity, similar_specificity``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    basket = pq.select("product_id", "query")
    n_products = basket.agg(F.countDistinct("product_id").alias("_N"))
    per_query = basket.groupBy("query").agg(F.count("*").alias("_nq"))
    a, b = basket.alias("a"), basket.alias("b")
    pairs = a.join(b, "product_id").filter(F.col("a.query") != F.col("b.query")) \
        .groupBy(F.col("a.query").alias("query"), F.col("b.query").alias("similar_query")) \
        .agg(F.count("*").alias("cooccurrence")).filter(F.col("cooccurrence") >= cfg.min_support)
    scored = pairs.join(per_query, "query").join(
        per_query.select(F.col("query").alias("similar_query"), F.col("_nq").alias("_ns")), "similar_query") \
        .crossJoin(F.broadcast(n_products)) \
        .withColumn("pmi", F.log(F.col("cooccurrence") * F.col("_N") / (F.col("_nq") * F.col("_ns")))) \
        .withColumn("npmi", F.when(F.col("cooccurrence") < F.col("_N"),
                                   F.col("pmi") / -F.log(F.col("cooccurrence") / F.col("_N"))).otherwise(F.lit(1.0)))
    ranked = scored.withColumn("score", F.col(cfg.similarity)).withColumn("rank", F.row_number().over(
        Window.partitionBy("query").orderBy(F.col("score").desc(), F.col("similar_query"))))
    top = ranked.filter(F.col("rank") <= cfg.top_k)
    s = spec.select("query", "specificity")
    return top.join(s, "query").join(
        s.select(F.col("query").alias("similar_query"), F.col("specificity").alias("similar_specificity")),
        "similar_query").filter(
        within_tolerance(F.col("similar_specificity"), F.col("specificity"), cfg.specificity_tolerance,
                         cfg.tolerance_mode)
    ).select("query", "similar_query", "cooccurrence", "pmi", "npmi", "score", "rank", "specificity",
             "similar_specificity")


def subgraphs(pq: "DataFrame", sims: "DataFrame") -> "DataFrame":
    """Per product p: V_p = queries leading to p plus their similarities; E_p = similarity edges inside V_p.

    Returns rows ``product_id, u, v``: one per vertex (``v`` null) and one per undirected edge (u < v).
    """
    from pyspark.sql import functions as F

    vq = pq.select("product_id", F.col("query").alias("vertex"))
    vn = vq.join(sims.select(F.col("query").alias("vertex"), "similar_query"), "vertex") \
        .select("product_id", F.col("similar_query").alias("vertex"))
    vertices = vq.unionByName(vn).distinct()
    edges = sims.select(F.least("query", "similar_query").alias("u"), F.greatest("query", "similar_query").alias("v")) \
        .distinct()
    inside = vertices.withColumnRenamed("vertex", "u").join(edges, "u") \
        .join(vertices.select("product_id", F.col("vertex").alias("v")), ["product_id", "v"])
    return vertices.select("product_id", F.col("vertex").alias("u"), F.lit(None).cast("string").alias("v")) \
        .unionByName(inside.select("product_id", "u", "v"))


def cluster_products(rows: "DataFrame", cfg: QueryGraphConfig) -> "DataFrame":
    """Cluster every product's subgraph independently (``applyInPandas`` keyed by product): CLUSTER_SCHEMA rows."""
    from common.subgraph import cluster_subgraph

    params = (cfg.c3_threshold, cfg.theta, cfg.prune_ratio, cfg.max_cluster_size)

    def per_product(group: pd.DataFrame) -> pd.DataFrame:
        product = group["product_id"].iloc[0]
        vertex_rows = group[group["v"].isna()]
        edge_rows = group[group["v"].notna()]
        clusters = cluster_subgraph(vertex_rows["u"].tolist(), list(zip(edge_rows["u"], edge_rows["v"])), *params)
        return pd.DataFrame({
            "product_id": pd.Series([product] * len(clusters), dtype=object),
            "cluster_id": pd.Series([f"{product}#{i}" for i in range(len(clusters))], dtype=object),
            # An explicit object dtype: an empty list column would otherwise be float64, which Arrow
            # cannot turn into array<string>.
            "members": pd.Series([list(c.members) for c in clusters], dtype=object),
            "size": [len(c.members) for c in clusters],
            "internal_edges": [c.internal_edges for c in clusters],
            "pruned": [c.pruned for c in clusters],
            "merge_rounds": [c.merge_rounds for c in clusters],
            "subgraph_vertices": [len(vertex_rows)] * len(clusters),
            "subgraph_edges": [len(edge_rows)] * len(clusters),
        })

    return rows.groupBy("product_id").applyInPandas(per_product, CLUSTER_SCHEMA)


def reformulation_pairs(clusters: "DataFrame", spec: "DataFrame", sims: "DataFrame",
                        cfg: QueryGraphConfig) -> "DataFrame":
    """Ordered pairs of different queries of one cluster whose specificities are within the tolerance.

    Returns ``source_query, target_query, product_id, cluster_id, pmi`` (null when the pair has no direct
    similarity edge), ``source_specificity, target_specificity``.
    """
    from pyspark.sql import functions as F

    exploded = clusters.select("product_id", "cluster_id", F.explode("members").alias("q"))
    a, b = exploded.alias("a"), exploded.alias("b")
    pairs = a.join(b, ["product_id", "cluster_id"]).filter(F.col("a.q") != F.col("b.q")).select(
        "product_id", "cluster_id", F.col("a.q").alias("source_query"), F.col("b.q").alias("target_query"))
    s = spec.select("query", "specificity")
    with_spec = pairs.join(s.select(F.col("query").alias("source_query"), F.col("specificity").alias("source_specificity")),
                           "source_query").join(
        s.select(F.col("query").alias("target_query"), F.col("specificity").alias("target_specificity")), "target_query")
    kept = with_spec.filter(within_tolerance(F.col("target_specificity"), F.col("source_specificity"),
                                             cfg.specificity_tolerance, cfg.tolerance_mode))
    pmi = sims.select(F.col("query").alias("source_query"), F.col("similar_query").alias("target_query"), "pmi")
    return kept.join(pmi, ["source_query", "target_query"], "left").select(
        "source_query", "target_query", "product_id", "cluster_id", "pmi", "source_specificity", "target_specificity")
