"""Exact sub-sampling to a target label distribution (Spark's ``sampleBy`` is only approximate).

The plan is computed from the label histograms (one row per label, so safe on the driver): the
quota of each stratum is within one row of ``N * p_label`` and never above what the stratum holds.
The draw is exact and deterministic by seed: each row gets a hash-based uniform key, a generous
per-stratum threshold keeps only a few more candidates than the quota, and a ``row_number`` over the
candidates keeps exactly the quota. Only the candidates (about the sample's size) are sorted.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from common.platform.errors import InputError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class SamplingError(InputError):
    """The target cannot be met (no overlap, or N larger than the largest matching sample)."""


@dataclass(frozen=True)
class SamplePlan:
    """How many rows to draw from each stratum, and how close that gets to the target."""

    quotas: dict[str, int]
    counts: dict[str, int]
    target: dict[str, float]
    n: int
    largest: int
    tvd_before: float
    tvd_after: float
    target_labels_missing: list[str] = field(default_factory=list)


def normalise(weights: Mapping[str, float]) -> dict[str, float]:
    """Weights scaled to sum to 1 (non-positive weights dropped)."""
    positive = {k: float(v) for k, v in weights.items() if v and v > 0}
    total = sum(positive.values())
    if total <= 0:
        raise SamplingError("target distribution has no positive weight")
    return {k: v / total for k, v in positive.items()}


def total_variation(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """Total-variation distance ½·Σ|p−q| between two distributions (each normalised first)."""
    p, q = normalise(p), normalise(q)
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def plan_sample(counts: Mapping[str, int], target: Mapping[str, float], n: Optional[int] = None) -> SamplePlan:
    """Quotas per stratum for the largest sample matching ``target`` (or exactly ``n`` rows).

    Target labels absent from ``counts`` cannot be drawn: the target is renormalised over the labels
    that exist (they are listed in ``target_labels_missing``, and ``tvd_after`` shows the cost).
    Quotas use largest-remainder rounding: each is floor or ceil of ``n * p``, and they sum to ``n``.
    """
    counts = {k: int(v) for k, v in counts.items() if v > 0}
    full_target = normalise(target)
    usable = {k: v for k, v in full_target.items() if k in counts}
    if not usable:
        raise SamplingError(
            f"no label of the target occurs in the data (target labels: {sorted(full_target)[:5]}, "
            f"data labels: {sorted(counts)[:5]})"
        )
    p = normalise(usable)
    largest = min(math.floor(counts[k] / p[k] + 1e-9) for k in p)
    if n is None:
        n = largest
    elif n > largest:
        raise SamplingError(f"n={n} rows cannot match the target: the largest matching sample has {largest} rows")
    exact = {k: n * p[k] for k in p}
    quotas = {k: math.floor(v + 1e-9) for k, v in exact.items()}
    short = n - sum(quotas.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - quotas[k]), k))[:short]:
        quotas[k] += 1
    return SamplePlan(
        quotas=quotas,
        counts=counts,
        target=full_target,
        n=n,
        largest=largest,
        tvd_before=total_variation(counts, full_target),
        tvd_after=total_variation(quotas, full_target) if n > 0 else 1.0,
        target_labels_missing=sorted(set(full_target) - set(counts)),
    )


def histogram(df: "DataFrame", label_col: str) -> dict[str, int]:
    """``{label: rows}`` of a frame (one row per label reaches the driver; null labels are skipped)."""
    from pyspark.sql import functions as F

    rows = df.filter(F.col(label_col).isNotNull()).groupBy(label_col).count().collect()
    return {r[label_col]: int(r["count"]) for r in rows}


def seeded_first(df: "DataFrame", n: int, seed: int, key_cols: Sequence[str]) -> "DataFrame":
    """``n`` rows of ``df`` (all of them when it has fewer): the first by a seeded hash of ``key_cols`` (ties by
    the keys), so the same rows on every run, partitioning and cluster. A generation budget's sample
    (``cga.sources``, ``query_reformulation.sources``)."""
    from pyspark.sql import functions as F

    return df.orderBy(F.xxhash64(*[F.col(c) for c in key_cols], F.lit(seed)), *key_cols).limit(n)


def draw(
    df: "DataFrame",
    label_col: str,
    quotas: Mapping[str, int],
    seed: int,
    key_cols: Sequence[str],
    counts: Optional[Mapping[str, int]] = None,
) -> "DataFrame":
    """Exactly ``quotas[label]`` rows of each label, the same rows for the same seed and data.

    ``key_cols`` identify a row (their hash with ``seed`` orders the rows within a stratum). ``counts``, the
    frame's :func:`histogram` when the caller has it, saves a Spark job.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = df.sparkSession
    counts = histogram(df, label_col) if counts is None else counts
    thresholds = {
        k: min(1.0, (q + 6.0 * math.sqrt(q) + 10.0) / counts[k]) for k, q in quotas.items() if q > 0 and k in counts
    }
    plan = spark.createDataFrame(
        [(k, quotas[k], t) for k, t in thresholds.items()], f"{label_col} string, _quota long, _threshold double"
    )
    u = F.pmod(F.xxhash64(F.lit(seed), *[F.col(c) for c in key_cols]), F.lit(1 << 53)) / float(1 << 53)
    keyed = df.withColumn("_u", u).join(F.broadcast(plan), label_col)
    candidates = keyed.filter(F.col("_u") < F.col("_threshold"))
    # A stratum whose threshold is 1 keeps all its rows as candidates (_u < 1 always): only the others
    # need counting.
    thinned = [k for k, t in thresholds.items() if t < 1.0]
    found = {k: counts[k] for k, t in thresholds.items() if t >= 1.0}
    if thinned:
        found.update(histogram(candidates.filter(F.col(label_col).isin(thinned)), label_col))
    short = [k for k, q in quotas.items() if q > 0 and found.get(k, 0) < q]
    if short:
        # A 6-sigma margin almost never falls short; when it does, those strata use all their rows.
        log.info("sampling: %d strata fall back to a full sort", len(short))
        candidates = keyed.filter((F.col("_u") < F.col("_threshold")) | F.col(label_col).isin(short))
    order = Window.partitionBy(label_col).orderBy("_u", *key_cols)
    return (
        candidates.withColumn("_rank", F.row_number().over(order))
        .filter(F.col("_rank") <= F.col("_quota"))
        .drop("_u", "_quota", "_threshold", "_rank")
    )


def subsample(
    df: "DataFrame",
    label_col: str,
    target: Mapping[str, float],
    seed: int,
    key_cols: Sequence[str],
    n: Optional[int] = None,
) -> tuple["DataFrame", SamplePlan]:
    """Plan and draw in one call: returns (sample, plan)."""
    counts = histogram(df, label_col)
    plan = plan_sample(counts, target, n)
    log.info(
        "sub-sample: %d of %d rows, TVD %.4f -> %.4f, missing target labels %s",
        plan.n,
        sum(plan.counts.values()),
        plan.tvd_before,
        plan.tvd_after,
        plan.target_labels_missing,
    )
    return draw(df, label_col, plan.quotas, seed, key_cols, counts), plan
