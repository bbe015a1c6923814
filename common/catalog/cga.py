"""Consistent Generative Augmentation (CGA, METHODS.md section 1) as DataFrame transforms.

D_pairs: ordered pairs of different versions of one catalog group (T5 learns the versioning function).
D_aug: samples generated from D_L, scored against their source, kept at s >= T, optionally sub-sampled
to N, labelled with their source's category. The sweep points reproduce the paper's Figure 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from common.catalog.config import CGASweepConfig

# Reasons that do not depend on T (set while scoring); a score below T is decided per threshold here.
THRESHOLD_FREE = "reason IS NULL"


def group_version_pairs(items: "DataFrame", max_pairs_per_group: Optional[int], seed: int) -> "DataFrame":
    """Ordered pairs of different titles within each group: ``group_id, source_text, target_text``.

    ``items`` has ``group_id, title``. A group of s distinct titles gives s(s-1) pairs; with
    ``max_pairs_per_group`` each group keeps that many, chosen by a seeded hash (deterministic).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    titles = items.select("group_id", F.trim(F.col("title")).alias("title")).filter(F.col("title") != "").distinct()
    a = titles.select("group_id", F.col("title").alias("source_text"))
    b = titles.select("group_id", F.col("title").alias("target_text"))
    pairs = a.join(b, "group_id").filter(F.col("source_text") != F.col("target_text"))
    if max_pairs_per_group is None:
        return pairs
    ranked = pairs.withColumn(
        "_r",
        F.row_number().over(
            Window.partitionBy("group_id").orderBy(
                F.xxhash64(F.lit(seed), "source_text", "target_text"), "source_text", "target_text"
            )
        ),
    )
    return ranked.filter(F.col("_r") <= max_pairs_per_group).drop("_r")


def generation_inputs(labeled: "DataFrame") -> "DataFrame":
    """D_L as generation inputs: ``source_id`` (the item id) and ``source_text`` (the title)."""
    from pyspark.sql import functions as F

    return labeled.select(F.col("item_id").cast("string").alias("source_id"), F.col("title").alias("source_text"))


def augmentation_set(
    generated: "DataFrame", labeled: "DataFrame", threshold: float, n: Optional[int], seed: int
) -> "DataFrame":
    """D_aug: ``item_id, title, category, source_title, score, sample_idx``.

    ``generated`` is the scored generation table (``score`` and threshold-free ``reason`` per row); rows
    without a reason and with score >= ``threshold`` are kept, repeated samples of one source collapse to
    one, each takes its source's category from ``labeled``, and with ``n`` exactly min(n, kept) rows are
    drawn uniformly (seeded).
    """
    from pyspark.sql import functions as F

    from common.catalog.consistency import uniform_sample

    kept = (
        generated.filter(THRESHOLD_FREE)
        .filter(F.col("score") >= F.lit(threshold) - F.lit(1e-12))
        .groupBy("source_id", "generated_text")
        .agg(
            F.min("sample_idx").alias("sample_idx"),
            F.max("score").alias("score"),
            F.first("source_text").alias("source_title"),
        )
    )
    labels = labeled.select(F.col("item_id").cast("string").alias("source_id"), "category")
    aug = kept.join(labels, "source_id").select(
        F.concat_ws("#", "source_id", F.col("sample_idx").cast("string")).alias("item_id"),
        F.col("generated_text").alias("title"),
        "category",
        "source_title",
        "score",
        "sample_idx",
    )
    if n is None:
        return aug
    total = aug.count()
    return uniform_sample(aug, min(n, total), seed, ["item_id"], total)


def training_set(labeled: "DataFrame", aug: "DataFrame") -> "DataFrame":
    """D_L ∪ D_aug as ``title, category, source`` (``labeled`` or ``generated``)."""
    from pyspark.sql import functions as F

    return labeled.select("title", "category", F.lit("labeled").alias("source")).unionByName(
        aug.select("title", "category", F.lit("generated").alias("source"))
    )


@dataclass(frozen=True)
class SweepPoint:
    """One CGA training: threshold T, sub-sample size N (None: all filtered samples), and the experiment
    of Figure 2 it belongs to (``threshold``, ``size`` or ``tradeoff``; a point may serve several)."""

    threshold: float
    n: Optional[int]
    experiments: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"T={self.threshold:g} N={'all' if self.n is None else self.n}"


def sweep_points(cfg: "CGASweepConfig") -> list[SweepPoint]:
    """The paper's three experiments: T at N = fixed_size; N at T = fixed_threshold; T without sub-sampling.

    Shared points (T = 0.7, N = 200k) are trained once and belong to both experiments.
    """
    points: dict[tuple[float, Optional[int]], list[str]] = {}
    for t in cfg.thresholds:
        points.setdefault((t, cfg.fixed_size), []).append("threshold")
    for n in cfg.sizes:
        points.setdefault((cfg.fixed_threshold, n), []).append("size")
    for t in cfg.thresholds:
        points.setdefault((t, None), []).append("tradeoff")
    return [SweepPoint(t, n, tuple(e)) for (t, n), e in points.items()]
