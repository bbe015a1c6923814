"""BoostAug's evaluation: the training-set variants each method adds to the real training rows, and the
paper's Table-2-style summary and Figure-3-style curve of the results.

Variants (``method``, ``backend``, ``n_aug``): ``none`` (no augmentation); ``<backend>`` (unfiltered: the
first ``n_aug`` candidates of each source); ``<backend>+boostaug`` (the three filters, ``2 * n_aug``
candidates ranked down to ``n_aug``); on the ablation backend ``... w/o <filter>`` (one filter switched off)
and ``... w/o cross-boosting`` (the MonoAug surrogate's scores); and the curve's other ``n_aug`` points of the
unfiltered and filtered ablation backend.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection, Optional, Sequence

from common.boostaug.config import BoostAugConfig
from common.boostaug.filtering import apply_filters

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

NONE = "none"


@dataclass(frozen=True)
class Variant:
    """One training set: ``method`` on ``backend`` at ``n_aug`` kept per source, with ``filters`` (None:
    unfiltered) scored by the cross-boosted surrogates or, with ``mono``, by the MonoAug surrogate."""

    method: str
    backend: str
    n_aug: int
    filters: Optional[tuple[str, ...]] = None
    mono: bool = False


def variants(cfg: BoostAugConfig, has_perplexity: bool) -> list[Variant]:
    """Every variant the evaluation trains, ``none`` first; ablations of a filter the surrogate cannot
    apply (perplexity without a perplexity) are left out."""
    filters = tuple(f for f in cfg.filter.enabled if f != "perplexity" or has_perplexity)
    out = [Variant(NONE, "-", 0)]
    for backend in cfg.backends:
        out += [Variant(backend, backend, cfg.n_aug), Variant(f"{backend}+boostaug", backend, cfg.n_aug, filters)]
    b = cfg.eval.ablation_backend
    if b in cfg.backends:
        for dropped in filters:
            out.append(Variant(f"{b}+boostaug w/o {dropped}", b, cfg.n_aug, tuple(f for f in filters if f != dropped)))
        out.append(Variant(f"{b}+boostaug w/o cross-boosting", b, cfg.n_aug, filters, mono=True))
        for n in cfg.eval.curve:
            if n not in (0, cfg.n_aug):
                out += [Variant(b, b, n), Variant(f"{b}+boostaug", b, n, filters)]
    return out


def variant_rows(
    scored: "DataFrame", variant: Variant, cfg: BoostAugConfig, unjudged: Collection[str] = ()
) -> "DataFrame":
    """The augmentation rows (method, backend, n_aug, source_id, text, label) of ``variant`` from the scored
    candidates (every candidate with its cross-boosted and, where computed, MonoAug scores); ``unjudged``: the
    labels below ``filter.min_class_support``."""
    from pyspark.sql import functions as F

    mine = scored.filter(F.col("backend") == variant.backend)
    if variant.filters is None:
        kept = mine.filter(F.col("aug_idx") < variant.n_aug)
    else:
        judged = apply_filters(
            mine.filter(F.col("aug_idx") < 2 * variant.n_aug).drop("reason"),
            variant.n_aug,
            cfg.filter,
            variant.filters,
            confidence="mono_confidence" if variant.mono else "confidence",
            predicted="mono_label" if variant.mono else "pred_label",
            perplexity="mono_perplexity" if variant.mono else "perplexity",
            perplexity_limit="mono_perplexity_limit" if variant.mono else "perplexity_limit",
            unjudged=unjudged,
        )
        kept = judged.filter(F.col("reason").isNull())
    return kept.select(
        F.lit(variant.method).alias("method"),
        F.lit(variant.backend).alias("backend"),
        F.lit(variant.n_aug).alias("n_aug"),
        "source_id",
        "text",
        "label",
    )


def eval_sets(
    scored: "DataFrame", cfg: BoostAugConfig, all_variants: Sequence[Variant], unjudged: Collection[str] = ()
) -> "DataFrame":
    """The union of every variant's augmentation rows (``none`` adds none)."""
    from functools import reduce

    parts = [variant_rows(scored, v, cfg, unjudged) for v in all_variants if v.method != NONE]
    return reduce(lambda a, b: a.unionByName(b), parts)


def summary_table(pdf: "pd.DataFrame", n_aug: int) -> str:
    """Table 2 of the paper as text: per method (at ``n_aug``) and model, accuracy and macro-F1 as mean ±
    sample std over the repeats, the augmentations added, and the accuracy change against ``none``."""
    main = pdf[(pdf["n_aug"] == n_aug) | (pdf["method"] == NONE)]
    base = main[main["method"] == NONE].groupby("model")["accuracy"].mean().to_dict()
    lines = [
        f"{'method':<34} {'model':<9} {'accuracy':>17} {'macro-F1':>17} {'vs none':>8} {'augmented':>9} {'runs':>4}"
    ]
    for (method, model), g in main.groupby(["method", "model"], sort=False):
        acc, f1 = g["accuracy"].tolist(), g["macro_f1"].tolist()
        delta = statistics.mean(acc) - base[model] if model in base else float("nan")
        lines.append(
            f"{method:<34} {model:<9} {statistics.mean(acc):>8.4f} ± {_std(acc):.4f} "
            f"{statistics.mean(f1):>8.4f} ± {_std(f1):.4f} {delta:>+8.4f} {int(g['n_augmented'].iloc[0]):>9} "
            f"{len(g):>4}"
        )
    return "\n".join(lines)


def curve_points(
    pdf: "pd.DataFrame", backend: str, model: Optional[str] = None
) -> dict[str, list[tuple[int, float, float]]]:
    """Figure 3's data: for the unfiltered and the BoostAug-filtered ``backend``, (n_aug, mean accuracy,
    sample std) sorted by n_aug, with ``none`` as the point n_aug = 0 of both; of one evaluation ``model``
    when given."""
    if model is not None:
        pdf = pdf[pdf["model"] == model]
    none = pdf[pdf["method"] == NONE]["accuracy"].tolist()
    out = {}
    for method in (backend, f"{backend}+boostaug"):
        points = [(0, statistics.mean(none), _std(none))] if none else []
        for n, g in pdf[pdf["method"] == method].groupby("n_aug"):
            acc = g["accuracy"].tolist()
            points.append((int(n), statistics.mean(acc), _std(acc)))
        out[method] = sorted(points)
    return out


def _std(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def plot_curve(pdf: "pd.DataFrame", backend: str, models: Sequence[str], repeats: int, path) -> None:
    """Figure 3 as a PNG at ``path``: test accuracy per augmentation count of ``backend``'s methods
    (:func:`curve_points` of the results ``pdf``), mean ± std of ``repeats`` seeds, one line per method (and model,
    when there are several)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for model in models:
        for method, points in curve_points(pdf, backend, model).items():
            xs, ys, err = zip(*points)
            ax.errorbar(
                xs, ys, yerr=err, fmt="o-", capsize=3, label=method if len(models) == 1 else f"{method} ({model})"
            )
    ax.set_xlabel("augmentations per source (Ñ)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"Accuracy vs augmentations, mean ± std of {repeats} seeds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
