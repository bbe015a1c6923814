"""BoostAug's three instance filters as one DataFrame transform (paper section 2.3).

Applied in this order, the first failing rule giving the candidate's ``reason`` (null = kept):

1. perplexity: dropped when the surrogate's pseudo-perplexity is >= the threshold, or the row's
   ``perplexity_limit`` where the scorer calibrated one (``filter.perplexity_quantile``); surrogates without
   a perplexity, such as fastText, skip this filter;
2. confidence ranking: among a source's candidates of one backend that passed (1), only the ``n_aug``
   most confident are considered; then those with confidence <= the threshold are dropped (switched off:
   the first ``n_aug`` candidates are considered, as unfiltered augmentation takes them); with
   ``filter.confidence_class_quantile`` the threshold of a class is the lower of the fixed one and that
   quantile of the class's considered candidates' confidences (per backend);
3. predicted-label constraint: dropped when the surrogate's label differs from the source's label.

Classes with fewer than ``filter.min_class_support`` training texts skip (2) and (3): a surrogate that saw a
handful of a class's texts cannot judge its augmentations, and would otherwise filter the class out.

Every candidate ends up kept or with a reason, so candidates = kept + rejected by construction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Collection

from common.boostaug.config import FilterConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

REASON_PERPLEXITY = "perplexity >= {t:g}"
REASON_RANK = "not among the {n} most confident of its source"
REASON_CONFIDENCE = "confidence <= {t:g}"
REASON_BEYOND = "beyond the first {n} candidates (no ranking)"
REASON_LABEL = "predicted label differs from the source label"
REASON_UNJUDGED = "beyond the first {n} candidates (class below min_class_support, unjudged)"


def apply_filters(
    scored: "DataFrame",
    n_aug: int,
    cfg: FilterConfig,
    enabled: Collection[str],
    confidence: str = "confidence",
    predicted: str = "pred_label",
    perplexity: str = "perplexity",
    perplexity_limit: str = "perplexity_limit",
    unjudged: Collection[str] = (),
) -> "DataFrame":
    """``scored`` (source_id, backend, aug_idx, label and the score columns) plus ``reason``, null for kept
    candidates. ``enabled``: the filters to apply (a subset of perplexity, confidence, label); a perplexity
    column of nulls means the surrogate has none, and that filter passes everything. ``unjudged``: labels the
    surrogates saw too few texts of to judge (``filter.min_class_support``): their candidates skip the
    confidence and label filters and, like unfiltered augmentation, the first ``n_aug`` are considered."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    unknown = set(enabled) - {"perplexity", "confidence", "label"}
    if unknown:
        raise ValueError(f"boostaug.filter.enabled: unknown filter {sorted(unknown)[0]!r}")
    use_ppl = "perplexity" in enabled and perplexity in scored.columns
    limit = F.lit(float(cfg.perplexity_threshold))
    reason_ppl = F.lit(REASON_PERPLEXITY.format(t=cfg.perplexity_threshold))
    if perplexity_limit in scored.columns:
        limit = F.coalesce(F.col(perplexity_limit), limit)
        reason_ppl = F.when(F.col(perplexity_limit).isNull(), reason_ppl).otherwise(
            F.concat(
                F.lit("perplexity >= "),
                F.round(F.col(perplexity_limit), 2).cast("string"),
                F.lit(" (validation quantile)"),
            )
        )
    ppl_fails = (F.col(perplexity).isNotNull() & (F.col(perplexity) >= limit)) if use_ppl else F.lit(False)
    df = scored.withColumn("_ppl_fails", ppl_fails)
    rules = [(F.col("_ppl_fails"), reason_ppl)]
    # The class-dependent filters apply to judged classes only (``judged`` guards each of their rules).
    judged = ~F.col("label").isin(sorted(unjudged)) if unjudged else F.lit(True)
    if unjudged:
        rules.append((~judged & (F.col("aug_idx") >= n_aug), F.lit(REASON_UNJUDGED.format(n=n_aug))))
    if "confidence" in enabled:
        # Ranked among the survivors of the perplexity filter; ties broken by candidate index.
        rank_window = Window.partitionBy("source_id", "backend", "_ppl_fails").orderBy(
            F.col(confidence).desc(), F.col("aug_idx")
        )
        df = df.withColumn("_rank", F.row_number().over(rank_window))
        threshold = F.lit(float(cfg.confidence_threshold))
        reason_conf = F.lit(REASON_CONFIDENCE.format(t=cfg.confidence_threshold))
        if cfg.confidence_class_quantile is not None:
            considered = judged & ~F.col("_ppl_fails") & (F.col("_rank") <= n_aug)
            if "label" in enabled:
                considered = considered & (F.col(predicted) == F.col("label"))
            df = _with_class_limits(df, considered, confidence, cfg.confidence_class_quantile)
            threshold = F.least(threshold, F.coalesce(F.col("_class_limit"), threshold))
            reason_conf = F.when(
                F.col("_class_limit") < cfg.confidence_threshold,
                F.concat(
                    F.lit("confidence <= "),
                    F.round(F.col("_class_limit"), 4).cast("string"),
                    F.lit(" (class quantile)"),
                ),
            ).otherwise(reason_conf)
        rules += [
            (judged & (F.col("_rank") > n_aug), F.lit(REASON_RANK.format(n=n_aug))),
            (judged & (F.col(confidence) <= threshold), reason_conf),
        ]
    else:
        # Without the ranking, the first n_aug candidates stand in for it, as unfiltered augmentation takes
        # them: the ablation then differs from BoostAug by the ranking alone, not by the number considered.
        rules.append((judged & (F.col("aug_idx") >= n_aug), F.lit(REASON_BEYOND.format(n=n_aug))))
    if "label" in enabled:
        rules.append((judged & (F.col(predicted) != F.col("label")), F.lit(REASON_LABEL)))
    reason = F.coalesce(*[F.when(predicate, text) for predicate, text in rules])
    return df.withColumn("reason", reason).drop("_ppl_fails", "_rank", "_class_limit")


def _with_class_limits(df: "DataFrame", considered, confidence: str, quantile: float) -> "DataFrame":
    """``df`` plus ``_class_limit``: per (backend, label), the ``quantile`` of ``confidence`` over the rows
    where ``considered`` holds (null for a class with none). One row per class and backend: a bounded
    aggregate, broadcast back; the columns keep their order."""
    from pyspark.sql import functions as F

    limits = (
        df.filter(considered)
        .groupBy("backend", "label")
        .agg(F.percentile_approx(confidence, quantile).alias("_class_limit"))
    )
    return df.join(F.broadcast(limits), ["backend", "label"], "left").select(*df.columns, "_class_limit")


def unjudged_labels(texts: "DataFrame", min_support: int) -> list[str]:
    """The labels with fewer than ``min_support`` rows in the train split of ``texts`` (``boostaug_texts``),
    sorted; none when ``min_support`` is 0. One row per label: a bounded aggregate."""
    from pyspark.sql import functions as F

    if min_support <= 0:
        return []
    counts = texts.filter(F.col("split") == "train").groupBy("label").count()
    return sorted(r["label"] for r in counts.filter(F.col("count") < min_support).collect())
