"""The consistency paper's metric as a Spark aggregate: do versions of one item get one prediction?"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def consistency_rate(df: "DataFrame", first_col: str, second_col: str) -> float:
    """Share of rows (pairs of versions of one item) whose two predictions are equal; 0.0 when empty."""
    from pyspark.sql import functions as F

    row = df.agg(F.avg((F.col(first_col) == F.col(second_col)).cast("double")).alias("rate")).first()
    return float(row["rate"]) if row["rate"] is not None else 0.0


def by_method(results: "DataFrame") -> "DataFrame":
    """A ``consistency_results`` frame per method: ``method, f1, f1_std, consistency, consistency_std, runs``
    (means and population standard deviations over its repeats), one row per method."""
    from pyspark.sql import functions as F

    return results.groupBy("method").agg(
        F.avg("f1_weighted").alias("f1"),
        F.stddev_pop("f1_weighted").alias("f1_std"),
        F.avg("consistency_rate").alias("consistency"),
        F.stddev_pop("consistency_rate").alias("consistency_std"),
        F.count("*").alias("runs"),
    )
