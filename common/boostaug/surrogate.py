"""Cross-boosting (paper section 2.1): one surrogate per boosting fold, and scoring every candidate with the
surrogate of its own fold.

For boosting fold i of k: the validation fold is (i + 1) mod k and the training folds are the other k - 2,
so the surrogate that judges fold i's augmentations never saw fold i's texts. ``mono`` (the paper's MonoAug
ablation, w/o cross-boosting) is one surrogate trained on every fold, validated on the dev split.

Scoring: fastText surrogates score in Spark (:func:`score`, ``mapInPandas``); encoder surrogates on a Ray Data
actor pool (:func:`score_on_ray`), where each actor loads every fold's model once (and a GPU when lent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

from common.models.classifiers.hft import HFTModel, predict_texts

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

    from common.models.classifier_config import EncoderConfig


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
    :data:`common.models.classifiers.training_rows.Source` form (files, pyarrow filters): the plan's training folds
    of the train split; its validation fold, or the dev split for the mono surrogate."""
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

    fields = [
        T.StructField("confidence", T.DoubleType()),
        T.StructField("pred_label", T.StringType()),
        T.StructField("perplexity", T.DoubleType()),
    ]
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


class EncoderPoolScorer:
    """A Ray Data actor of the encoder scoring pool: loads every fold's surrogate (and the MonoAug one) once,
    then scores Arrow batches of candidates (with ``fold`` and ``text``) with their fold's surrogate.

    Adds confidence, pred_label, perplexity and perplexity_limit (the surrogate's calibrated threshold when
    ``quantile`` is set, else null), and the same four ``mono_*`` columns from the MonoAug surrogate."""

    def __init__(
        self,
        surrogates: dict[int, str],
        mono: Optional[str],
        perplexity: bool,
        quantile: Optional[float],
        threads: int = 0,
    ):
        import torch

        from common.models.classifiers.encoder_surrogate import EncoderScorer

        if threads and not torch.cuda.is_available():
            torch.set_num_threads(threads)
        self.models = {int(fold): EncoderScorer(uri) for fold, uri in surrogates.items()}
        self.mono = EncoderScorer(mono) if mono else None
        self.perplexity = perplexity
        self.limits = {fold: m.perplexity_limit(quantile) for fold, m in self.models.items()}
        self.mono_limit = self.mono.perplexity_limit(quantile) if self.mono else None

    def _judge(self, model, texts: list[str]) -> tuple[list, list, list]:
        labels, conf = zip(*model.classify(texts)) if texts else ((), ())
        ppl = model.pseudo_perplexity(texts) if self.perplexity and model.has_mlm else [None] * len(texts)
        return list(conf), list(labels), ppl

    def __call__(self, batch):
        import pyarrow as pa

        texts = [t or "" for t in batch.column("text").to_pylist()]
        folds = batch.column("fold").to_pylist()
        n = len(texts)
        conf, label, ppl, limit = [0.0] * n, [""] * n, [None] * n, [None] * n
        for fold in sorted(set(folds)):
            if int(fold) not in self.models:
                raise KeyError(f"no surrogate for fold {fold}")
            rows = [i for i, f in enumerate(folds) if f == fold]
            out = self._judge(self.models[int(fold)], [texts[i] for i in rows])
            for i, c, lab, p in zip(rows, *out):
                conf[i], label[i], ppl[i], limit[i] = c, lab, p, self.limits[int(fold)]
        columns = {
            "confidence": (conf, pa.float64()),
            "pred_label": (label, pa.string()),
            "perplexity": (ppl, pa.float64()),
            "perplexity_limit": (limit, pa.float64()),
        }
        if self.mono is not None:
            m_conf, m_label, m_ppl = self._judge(self.mono, texts)
            columns.update(
                {
                    "mono_confidence": (m_conf, pa.float64()),
                    "mono_label": (m_label, pa.string()),
                    "mono_perplexity": (m_ppl, pa.float64()),
                    "mono_perplexity_limit": ([self.mono_limit] * n, pa.float64()),
                }
            )
        for name, (values, kind) in columns.items():
            batch = batch.append_column(name, pa.array(values, type=kind))
        return batch


def score_on_ray(
    ds,
    surrogates: dict[int, str],
    mono: Optional[str],
    cfg: "EncoderConfig",
    perplexity: bool,
    quantile: Optional[float],
):
    """``ds`` (Ray Dataset of candidates) scored by :class:`EncoderPoolScorer` on a pool of
    ``cfg.concurrency`` actors with ``cfg.num_cpus`` CPUs and ``cfg.num_gpus`` GPUs each. The input is cut
    into blocks of ``cfg.score_batch_size`` rows so the pool starts at once and the write streams."""
    from common.platform.compute.ray_stages import actor_pool_size, fit_cpus, map_batches_on_actors

    concurrency = actor_pool_size(cfg.concurrency, cfg.num_gpus, cfg.num_cpus, stage="boostaug scoring")
    cpus = fit_cpus(cfg.num_cpus, "boostaug scoring")
    return map_batches_on_actors(
        ds.repartition(target_num_rows_per_block=cfg.score_batch_size),
        EncoderPoolScorer,
        batch_format="pyarrow",
        batch_size=cfg.score_batch_size,
        concurrency=concurrency,
        num_cpus=cpus,
        num_gpus=cfg.num_gpus or None,
        fn_constructor_kwargs={
            "surrogates": surrogates,
            "mono": mono,
            "perplexity": perplexity,
            "quantile": quantile,
            "threads": cfg.num_cpus,
        },
    )
