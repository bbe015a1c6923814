"""Click-entropy query specificity (query-reformulation paper, section 3) and the specificity window.

The global maximum entropy is a one-row aggregate cross-joined back: nothing reaches the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def specificity(interactions: "DataFrame", click_types: list[str]) -> "DataFrame":
    """Click entropy and specificity per query: ``query, clicks, n_products, entropy, specificity``.

    H(q) = -Σ_p P(p|q) log P(p|q) = log C - (Σ_p c_p log c_p) / C with C = Σ_p c_p, in one aggregate;
    s(q) = 1 - H(q) / max_q' H(q') (1 for every query when no query has entropy).
    """
    from pyspark.sql import functions as F

    clicks = (
        interactions.filter(F.col("interaction").isin(click_types))
        .groupBy("query", "product_id")
        .agg(F.sum("count").alias("c"))
        .filter(F.col("c") > 0)
    )
    per_query = clicks.groupBy("query").agg(
        F.sum("c").alias("clicks"),
        F.count("*").alias("n_products"),
        F.sum(F.col("c") * F.log(F.col("c"))).alias("_clogc"),
    )
    entropy = per_query.withColumn(
        "entropy", F.greatest(F.lit(0.0), F.log(F.col("clicks")) - F.col("_clogc") / F.col("clicks"))
    ).drop("_clogc")
    max_entropy = entropy.agg(F.max("entropy").alias("_max"))
    return (
        entropy.crossJoin(F.broadcast(max_entropy))
        .withColumn(
            "specificity", F.when(F.col("_max") > 0, 1 - F.col("entropy") / F.col("_max")).otherwise(F.lit(1.0))
        )
        .drop("_max")
    )


def within_tolerance(value: "Column", seed: "Column", tolerance: float, mode: str) -> "Column":
    """Column: ``value`` lies within ``tolerance`` of ``seed`` (relative: of seed's value; absolute: plain)."""
    from pyspark.sql import functions as F

    bound = F.abs(seed) * tolerance if mode == "relative" else F.lit(tolerance)
    return F.abs(value - seed) <= bound + F.lit(1e-12)
