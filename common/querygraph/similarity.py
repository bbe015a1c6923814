"""Query-to-query similarities through shared products (PMI / NPMI), hub-capped.

Hub products are capped before the self-join, so the join costs at most ``cap`` pairs per query
occurrence: linear in the log, not quadratic in hub sizes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.querygraph.config import QueryGraphConfig
from common.querygraph.specificity import within_tolerance

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def product_queries(interactions: "DataFrame", cfg: QueryGraphConfig) -> tuple["DataFrame", "DataFrame"]:
    """The queries leading to each product through the co-occurrence interactions, hub-capped.

    Returns (pairs ``product_id, query, count``, caps ``product_id, n_queries, kept``): a product with more
    than ``max_queries_per_product`` queries keeps its most frequent ones (ties by query) and is recorded.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pq = (
        interactions.filter(F.col("interaction").isin(cfg.cooccurrence_interactions))
        .groupBy("product_id", "query")
        .agg(F.sum("count").alias("count"))
    )
    ranked = pq.withColumn(
        "_rank", F.row_number().over(Window.partitionBy("product_id").orderBy(F.col("count").desc(), F.col("query")))
    ).withColumn("_n", F.count("*").over(Window.partitionBy("product_id")))
    caps = (
        ranked.filter(F.col("_n") > cfg.max_queries_per_product)
        .groupBy("product_id")
        .agg(F.first("_n").alias("n_queries"))
        .withColumn("kept", F.lit(cfg.max_queries_per_product))
    )
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
    pairs = (
        a.join(b, "product_id")
        .filter(F.col("a.query") != F.col("b.query"))
        .groupBy(F.col("a.query").alias("query"), F.col("b.query").alias("similar_query"))
        .agg(F.count("*").alias("cooccurrence"))
        .filter(F.col("cooccurrence") >= cfg.min_support)
    )
    scored = (
        pairs.join(per_query, "query")
        .join(per_query.select(F.col("query").alias("similar_query"), F.col("_nq").alias("_ns")), "similar_query")
        .crossJoin(F.broadcast(n_products))
        .withColumn("pmi", F.log(F.col("cooccurrence") * F.col("_N") / (F.col("_nq") * F.col("_ns"))))
        .withColumn(
            "npmi",
            F.when(
                F.col("cooccurrence") < F.col("_N"), F.col("pmi") / -F.log(F.col("cooccurrence") / F.col("_N"))
            ).otherwise(F.lit(1.0)),
        )
    )
    ranked = scored.withColumn("score", F.col(cfg.similarity)).withColumn(
        "rank", F.row_number().over(Window.partitionBy("query").orderBy(F.col("score").desc(), F.col("similar_query")))
    )
    top = ranked.filter(F.col("rank") <= cfg.top_k)
    s = spec.select("query", "specificity")
    return (
        top.join(s, "query")
        .join(
            s.select(F.col("query").alias("similar_query"), F.col("specificity").alias("similar_specificity")),
            "similar_query",
        )
        .filter(
            within_tolerance(
                F.col("similar_specificity"), F.col("specificity"), cfg.specificity_tolerance, cfg.tolerance_mode
            )
        )
        .select(
            "query",
            "similar_query",
            "cooccurrence",
            "pmi",
            "npmi",
            "score",
            "rank",
            "specificity",
            "similar_specificity",
        )
    )
