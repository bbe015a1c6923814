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
