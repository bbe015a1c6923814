"""Cross-boosting (paper section 2.1): one surrogate per boosting fold, and scoring every candidate with the
surrogate of its own fold.

For boosting fold i of k: the validation fold is (i + 1) mod k and the training folds are the other k - 2,
so the surrogate that judges fold i's augmentations never saw fold i's texts. ``mono`` (the paper's MonoAug
ablation, w/o cross-boosting) is one surrogate trained on every fold, validated on the dev split.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

from common.models.hft import HFTModel, predict_texts

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class FoldPlan:
    """Which folds train, validate and get boosted by one surrogate (``boost`` None: the mono surrogate)."""

    boost: Optional[int]
    validation: Optional[int]
    train: tuple[int, ...]


def fold_plans(k: int) -> list[FoldPlan]:
    """The k cross-boosting plans; each fold is boosted once, validated once, and trains k - 2 surrogates."""
    return [FoldPlan(i, (i + 1) % k, tuple(j for j in range(k) if j not in (i, (i + 1) % k))) for i in range(k)]


def mono_plan(k: int) -> FoldPlan:
    """MonoAug: every fold trains the one surrogate (validated on the dev split)."""
    return FoldPlan(None, None, tuple(range(k)))


def surrogate_sources(files: Sequence[str], plan: FoldPlan) -> tuple[list, list]:
    """(training sources, validation sources) of ``plan`` over the Parquet files of ``boostaug_texts``, in
    :data:`common.models.hft.Source` form (files, pyarrow filters): the plan's training folds of the
    train split; its validation fold, or the dev split for the mono surrogate."""
    train_rows = ("split", "=", "train")
    validation = [("split", "=", "dev")] if plan.boost is None else [train_rows, ("fold", "=", plan.validation)]
    return [(list(files), [train_rows, ("fold", "in", list(plan.train))])], [(list(files), validation)]


def score(candidates: "DataFrame", surrogates: dict[int, str], mono: Optional[str] = None) -> "DataFrame":
    """``candidates`` (with ``fold`` and ``text``) plus ``confidence`` and ``pred_label`` from the surrogate of
    the row's fold (``surrogates``: fold -> model folder), ``perplexity`` (null: a fastText surrogate has
    none) and, with ``mono``, ``mono_confidence`` and ``mono_label`` from the MonoAug surrogate.

    Runs in ``mapInPandas``; each Python worker loads each surrogate once (:func:`load_levels`'s cache).
    """
    from pyspark.sql import types as T

    fields = [T.StructField("confidence", T.DoubleType()), T.StructField("pred_label", T.StringType()),
              T.StructField("perplexity", T.DoubleType())]
    if mono:
        fields += [T.StructField("mono_confidence", T.DoubleType()), T.StructField("mono_label", T.StringType())]
    schema = T.StructType(candidates.schema.fields + fields)
    models = {fold: HFTModel(uri, 1) for fold, uri in surrogates.items()}
    mono_model = HFTModel(mono, 1) if mono else None

    def run(batches: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        for batch in batches:
            batch = batch.reset_index(drop=True)
            conf, label = [0.0] * len(batch), [""] * len(batch)
            for fold, rows in batch.groupby("fold").groups.items():
                if int(fold) not in models:
                    raise KeyError(f"no surrogate for fold {fold}")
                out = predict_texts(models[int(fold)], batch.loc[rows, "text"].fillna("").tolist())
                for i, (lab, c, _) in zip(rows, out):
                    conf[i], label[i] = c, lab
            batch["confidence"], batch["pred_label"], batch["perplexity"] = conf, label, None
            if mono_model is not None:
                out = predict_texts(mono_model, batch["text"].fillna("").tolist())
                batch["mono_confidence"] = [c for _, c, _ in out]
                batch["mono_label"] = [lab for lab, _, _ in out]
            yield batch

    return candidates.mapInPandas(run, schema)
