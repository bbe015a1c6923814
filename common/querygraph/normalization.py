"""Query normalisation and activity thresholds (query-reformulation paper, section 3), pure DataFrame functions.

Rows that do not pass go to the caller's quarantine with a ``reason``; ``n_rows`` keeps rows in = kept +
rejected checkable.
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING

import pandas as pd  # a core dependency; pandas UDF type hints must resolve at run time

from common.querygraph.config import QueryGraphConfig

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


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

    normalized = df.select(
        normalize_query_col(F.col("query")).alias("query"),
        "product_id",
        F.lower(F.trim(F.col("interaction"))).alias("interaction"),
        "count",
    )
    empty = (
        normalized.filter(F.col("query") == "")
        .groupBy("query", "product_id", "interaction")
        .agg(F.sum("count").alias("count"), F.count("*").alias("n_rows"))
        .withColumn("reason", F.lit("empty query after normalisation"))
    )
    aggregated = (
        normalized.filter(F.col("query") != "")
        .groupBy("query", "product_id", "interaction")
        .agg(F.sum("count").alias("count"), F.count("*").alias("n_rows"))
    )
    kept, below = apply_activity_threshold(aggregated, cfg)
    return kept, below.unionByName(empty)


BELOW_THRESHOLD = "below activity threshold"


def apply_activity_threshold(tuples: "DataFrame", cfg: QueryGraphConfig) -> tuple["DataFrame", "DataFrame"]:
    """(tuples with ``count`` >= their interaction's threshold, the others with a ``reason``)."""
    from pyspark.sql import functions as F

    thresholds = (
        F.create_map(*[x for k, v in sorted(cfg.activity_threshold.items()) for x in (F.lit(k), F.lit(v))])
        if cfg.activity_threshold
        else None
    )
    threshold = F.coalesce(
        thresholds[F.col("interaction")] if thresholds is not None else F.lit(None),
        F.lit(cfg.default_activity_threshold),
    )
    with_threshold = tuples.withColumn("_threshold", threshold)
    kept = with_threshold.filter(F.col("count") >= F.col("_threshold")).drop("_threshold")
    below = (
        with_threshold.filter(F.col("count") < F.col("_threshold"))
        .withColumn(
            "reason",
            F.concat(
                F.lit(f"{BELOW_THRESHOLD} for "),
                F.col("interaction"),
                F.lit(": count "),
                F.col("count").cast("string"),
                F.lit(" < "),
                F.col("_threshold").cast("string"),
            ),
        )
        .drop("_threshold")
    )
    return kept, below
