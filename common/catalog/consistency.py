"""Transforms of the consistency paper's experiment: splits, group pseudo-labels (CST), version pairs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional, Sequence

from common.data.sampling import draw, histogram

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def sample_size(spec: float, total: int) -> int:
    """A size from config: a fraction (< 1) of ``total``, or a count (>= 1), capped at ``total``."""
    size = int(round(spec * total)) if spec < 1 else int(spec)
    return max(0, min(size, total))


def uniform_sample(
    df: "DataFrame", size: int, seed: int, key_cols: Sequence[str], total: Optional[int] = None
) -> "DataFrame":
    """Exactly ``size`` rows drawn uniformly, deterministic by seed (an exact draw with one stratum).
    ``total``, the frame's row count when the caller has it, saves a Spark job."""
    from pyspark.sql import functions as F

    one = df.withColumn("_stratum", F.lit("all"))
    counts = None if total is None else {"all": total}
    return draw(one, "_stratum", {"all": size}, seed, key_cols, counts).drop("_stratum")


def group_labels(
    predicted: "DataFrame",
    rule: Literal["max_confidence", "majority"],
    label_col: str = "pred_label",
    confidence_col: str = "pred_confidence",
) -> "DataFrame":
    """One pseudo-label per group, h(X_i; f_base): ``(group_id, group_label, group_confidence)``.

    ``max_confidence`` (the paper's best): the group's single most confident prediction.
    ``majority``: the most frequent prediction; ties go to the larger summed confidence. Remaining
    ties go to the smaller label, so the result is deterministic.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if rule == "max_confidence":
        candidates = predicted.select(
            "group_id", F.col(label_col).alias("group_label"), F.col(confidence_col).alias("group_confidence")
        )
        order = [F.col("group_confidence").desc(), F.col("group_label")]
    elif rule == "majority":
        candidates = predicted.groupBy("group_id", F.col(label_col).alias("group_label")).agg(
            F.count("*").alias("votes"),
            F.sum(confidence_col).alias("confidence_sum"),
            F.avg(confidence_col).alias("group_confidence"),
        )
        order = [F.col("votes").desc(), F.col("confidence_sum").desc(), F.col("group_label")]
    else:
        raise ValueError(f"consistency.pseudo_label: unknown rule {rule!r}; allowed: max_confidence, majority")
    ranked = candidates.withColumn("_r", F.row_number().over(Window.partitionBy("group_id").orderBy(*order)))
    return ranked.filter("_r = 1").select("group_id", "group_label", "group_confidence")


def version_pairs(items: "DataFrame", seed: int) -> "DataFrame":
    """One pair of versions with different titles per group, chosen by a seeded hash.

    Returns ``(group_id, item_id_1, title_1, item_id_2, title_2)``; groups whose versions all share one
    title give no pair.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keyed = items.select(
        "group_id",
        "item_id",
        "title",
        F.xxhash64(F.lit(seed), F.col("item_id")).alias("_h"),
        F.lower(F.trim(F.col("title"))).alias("_t"),
    )
    by_hash = Window.partitionBy("group_id").orderBy("_h", "item_id")
    first = (
        keyed.withColumn("_r", F.row_number().over(by_hash))
        .filter("_r = 1")
        .select(
            "group_id", F.col("item_id").alias("item_id_1"), F.col("title").alias("title_1"), F.col("_t").alias("_t1")
        )
    )
    others = keyed.join(first, "group_id").filter(F.col("_t") != F.col("_t1"))
    second = others.withColumn("_r", F.row_number().over(by_hash)).filter("_r = 1")
    return second.select(
        "group_id", "item_id_1", "title_1", F.col("item_id").alias("item_id_2"), F.col("title").alias("title_2")
    )


def truncated(df: "DataFrame", col: str, level: int, alias: str) -> "DataFrame":
    """``df`` plus ``alias``: ``col`` truncated to ``level`` levels."""
    from pyspark.sql import functions as F

    from common.data.taxonomy import truncate_col

    return df.withColumn(alias, truncate_col(F.col(col), level))


def level_histogram(df: "DataFrame", col: str, level: int) -> dict[str, int]:
    """``{label truncated to level: rows}`` (one row per label reaches the driver)."""
    return histogram(truncated(df, col, level, "_level_label"), "_level_label")
