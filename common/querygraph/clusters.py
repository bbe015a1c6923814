"""Per-product query subgraphs, their clustering in ``applyInPandas``, and the reformulation pairs.

Each product's subgraph is small and clustered independently in Python (:mod:`common.querygraph.subgraph`);
the graph around it is built with joins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd  # a core dependency; pandas UDF type hints must resolve at run time

from common.querygraph.config import QueryGraphConfig
from common.querygraph.specificity import within_tolerance

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CLUSTER_SCHEMA = (
    "product_id string, cluster_id string, members array<string>, size int, internal_edges int, "
    "pruned int, merge_rounds int, subgraph_vertices int, subgraph_edges int"
)


def subgraphs(pq: "DataFrame", sims: "DataFrame") -> "DataFrame":
    """Per product p: V_p = queries leading to p plus their similarities; E_p = similarity edges inside V_p.

    Returns rows ``product_id, u, v``: one per vertex (``v`` null) and one per undirected edge (u < v).
    """
    from pyspark.sql import functions as F

    vq = pq.select("product_id", F.col("query").alias("vertex"))
    vn = vq.join(sims.select(F.col("query").alias("vertex"), "similar_query"), "vertex").select(
        "product_id", F.col("similar_query").alias("vertex")
    )
    vertices = vq.unionByName(vn).distinct()
    edges = sims.select(
        F.least("query", "similar_query").alias("u"), F.greatest("query", "similar_query").alias("v")
    ).distinct()
    inside = (
        vertices.withColumnRenamed("vertex", "u")
        .join(edges, "u")
        .join(vertices.select("product_id", F.col("vertex").alias("v")), ["product_id", "v"])
    )
    return vertices.select(
        "product_id", F.col("vertex").alias("u"), F.lit(None).cast("string").alias("v")
    ).unionByName(inside.select("product_id", "u", "v"))


def cluster_products(rows: "DataFrame", cfg: QueryGraphConfig) -> "DataFrame":
    """Cluster every product's subgraph independently (``applyInPandas`` keyed by product): CLUSTER_SCHEMA rows."""
    from common.querygraph.subgraph import cluster_subgraph

    params = (cfg.c3_threshold, cfg.theta, cfg.prune_ratio, cfg.max_cluster_size)

    def per_product(group: pd.DataFrame) -> pd.DataFrame:
        product = group["product_id"].iloc[0]
        vertex_rows = group[group["v"].isna()]
        edge_rows = group[group["v"].notna()]
        clusters = cluster_subgraph(vertex_rows["u"].tolist(), list(zip(edge_rows["u"], edge_rows["v"])), *params)
        return pd.DataFrame(
            {
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
            }
        )

    return rows.groupBy("product_id").applyInPandas(per_product, CLUSTER_SCHEMA)


def reformulation_pairs(
    clusters: "DataFrame", spec: "DataFrame", sims: "DataFrame", cfg: QueryGraphConfig
) -> "DataFrame":
    """Ordered pairs of different queries of one cluster whose specificities are within the tolerance.

    Returns ``source_query, target_query, product_id, cluster_id, pmi`` (null when the pair has no direct
    similarity edge), ``source_specificity, target_specificity``.
    """
    from pyspark.sql import functions as F

    exploded = clusters.select("product_id", "cluster_id", F.explode("members").alias("q"))
    a, b = exploded.alias("a"), exploded.alias("b")
    pairs = (
        a.join(b, ["product_id", "cluster_id"])
        .filter(F.col("a.q") != F.col("b.q"))
        .select("product_id", "cluster_id", F.col("a.q").alias("source_query"), F.col("b.q").alias("target_query"))
    )
    s = spec.select("query", "specificity")
    with_spec = pairs.join(
        s.select(F.col("query").alias("source_query"), F.col("specificity").alias("source_specificity")),
        "source_query",
    ).join(
        s.select(F.col("query").alias("target_query"), F.col("specificity").alias("target_specificity")),
        "target_query",
    )
    kept = with_spec.filter(
        within_tolerance(
            F.col("target_specificity"), F.col("source_specificity"), cfg.specificity_tolerance, cfg.tolerance_mode
        )
    )
    pmi = sims.select(F.col("query").alias("source_query"), F.col("similar_query").alias("target_query"), "pmi")
    return kept.join(pmi, ["source_query", "target_query"], "left").select(
        "source_query", "target_query", "product_id", "cluster_id", "pmi", "source_specificity", "target_specificity"
    )
