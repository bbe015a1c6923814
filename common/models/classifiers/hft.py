"""Hierarchical fastText (HFT), the consistency paper's classifier (Appendix F).

HFT is D fastText models; f_i is trained on the labels truncated to levels 1..i. Inference: predict
with f_1; for i = 2..D, take f_i's prediction if it agrees with the current one on the first i-1
levels, else stop and return the current one; reaching f_D returns f_D's prediction. D follows the
data (the deepest label), so a flat taxonomy gives a single model.

Training runs as Ray tasks, one level per task, in parallel; a task reads the training table's Parquet
files itself (nothing passes through the driver). Prediction runs in Spark ``mapInPandas``;
each Python worker loads the models once and keeps them for every later batch.

Training one level is :mod:`common.models.classifiers.fasttext_training`'s (what every fastText classifier of the
suite shares); its rows come as :mod:`common.models.classifiers.training_rows` reads them.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from common.models.classifier_config import FastTextConfig
from common.models.classifiers.fasttext_training import FASTTEXT_TASK_ENV, fasttext_params, fit_rows
from common.models.classifiers.training_rows import TrainingDataError, read_rows
from common.platform.storage import local_copy
from common.pyfunc.hft import load_level_files, score_levels, truncate_label

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

    from common.platform.compute.ray_runtime import RayRuntime


@dataclass(frozen=True)
class HFTModel:
    """A trained HFT: a folder (local path or URI) with ``level_<i>.bin`` and ``labels_<i>.json``."""

    uri: str
    depth: int


@dataclass(frozen=True)
class LevelStats:
    """What training one level did: rows, tokens, distinct labels, seconds, and words/s/thread."""

    level: int
    rows: int
    tokens: int
    labels: int
    seconds: float
    words_per_second_per_thread: float


# ----------------------------------------------------------------------------- training (Ray)
def train_level(
    files: Sequence[str],
    level: int,
    params: dict[str, Any],
    seed: int,
    out_dir: str,
    text_col: str = "title",
    label_col: str = "category",
) -> LevelStats:
    """Train f_level on the Parquet ``files`` (columns ``text_col``, ``label_col``); save it under ``out_dir``.

    Writes ``level_<level>.bin`` and ``labels_<level>.json`` (fastText label token -> category path).
    Raises :class:`TrainingDataError` for empty data.
    """
    rows = [(text, truncate_label(label, level)) for text, label in read_rows([(files, None)], text_col, label_col)]
    tokens, n_labels, seconds = fit_rows(rows, params, seed, out_dir, level)
    threads = max(1, int(params.get("thread", 1)))
    rate = tokens * int(params.get("epoch", 5)) / max(seconds, 1e-9) / threads
    return LevelStats(level, len(rows), tokens, n_labels, seconds, rate)


@functools.lru_cache(maxsize=1)
def _train_level_task():
    import ray

    # A worker running it is titled ``ray::train_level`` (Ray names a busy worker after its task).
    return ray.remote(num_cpus=1, runtime_env=FASTTEXT_TASK_ENV)(train_level)


class HFTTrainerPool:
    """HFT levels trained in parallel as Ray tasks in fastText's worker pool, at most ``size`` at a time (one
    per CPU by default).

    Ray keeps those workers between trainings, so fastText and pyarrow are imported once per worker and run,
    not once per training: a pool of fresh actors cost about 2 s a training on 2 cores, and a CGA sweep trains
    once per point. A task whose worker dies (OOM, a killed process) runs again in a new worker up to
    ``ray.actor_task_retries`` times; the retry rewrites every file the killed attempt had begun.
    """

    def __init__(self, runtime: "RayRuntime", size: Optional[int] = None):
        runtime.start()
        cpus = int(runtime.resources().get("CPU", 1))
        self.size = max(1, min(size or cpus, cpus))
        self.retries = runtime.fault_tolerance()["max_task_retries"]

    def train(self, jobs: Sequence[dict[str, Any]]) -> list[LevelStats]:
        """Run training jobs (kwargs of :func:`train_level`) on the workers; results in job order."""
        import ray

        from common.platform.compute.ray_waits import wait_any

        task = _train_level_task().options(max_retries=self.retries)
        waiting, running, results = list(enumerate(jobs)), {}, {}
        while waiting or running:
            while waiting and len(running) < self.size:
                i, job = waiting.pop(0)
                running[
                    task.remote(
                        job["files"],
                        job["level"],
                        job["params"],
                        job["seed"],
                        job["out_dir"],
                        job.get("text_col", "title"),
                        job.get("label_col", "category"),
                    )
                ] = i
            done = wait_any(list(running), "HFT level training tasks", {"CPU": 1})
            results[running.pop(done[0])] = ray.get(done[0])
        return [results[i] for i in range(len(jobs))]


def level_jobs(
    files: Sequence[str],
    depth: int,
    cfg: FastTextConfig,
    seed: int,
    out_dir: str,
    text_col: str = "title",
    label_col: str = "category",
) -> list[dict[str, Any]]:
    """One :meth:`HFTTrainerPool.train` job per level 1..``depth`` of an HFT saved under ``out_dir``."""
    if depth < 1:
        raise TrainingDataError("labels have no levels")
    params = fasttext_params(cfg)
    return [
        {
            "files": list(files),
            "level": level,
            "params": params,
            "seed": seed,
            "out_dir": out_dir,
            "text_col": text_col,
            "label_col": label_col,
        }
        for level in range(1, depth + 1)
    ]


def train_hft(
    pool: HFTTrainerPool,
    files: Sequence[str],
    depth: int,
    cfg: FastTextConfig,
    seed: int,
    out_dir: str,
    text_col: str = "title",
    label_col: str = "category",
) -> tuple[HFTModel, list[LevelStats]]:
    """Train all ``depth`` levels in parallel on the pool; returns the model and per-level stats."""
    stats = pool.train(level_jobs(files, depth, cfg, seed, out_dir, text_col, label_col))
    return HFTModel(uri=out_dir, depth=depth), stats


# ----------------------------------------------------------------------------- prediction (Spark)
_LOADED: dict[str, tuple[list[Any], list[dict[str, str]]]] = {}


def load_levels(model: HFTModel) -> tuple[list[Any], list[dict[str, str]]]:
    """The level models and label maps, loaded once per process (later calls reuse them)."""
    if model.uri not in _LOADED:
        _LOADED[model.uri] = load_level_files(local_copy(model.uri), model.depth)
    return _LOADED[model.uri]


def predict_texts(model: HFTModel, texts: Sequence[str]) -> list[tuple[str, float, int]]:
    """HFT predictions (label, confidence, level used) for raw titles (:func:`common.pyfunc.hft.score_levels`,
    what a registered model of it predicts)."""
    models, maps = load_levels(model)
    return score_levels(models, maps, texts)


def predict(df: "DataFrame", model: HFTModel, text_col: str = "title", prefix: str = "pred") -> "DataFrame":
    """``df`` plus ``<prefix>_label``, ``<prefix>_confidence``, ``<prefix>_level`` from the HFT model.

    Runs in ``mapInPandas``: each Python worker loads the models once (see :func:`load_levels`).
    """
    from pyspark.sql import types as T

    schema = T.StructType(
        df.schema.fields
        + [
            T.StructField(f"{prefix}_label", T.StringType()),
            T.StructField(f"{prefix}_confidence", T.DoubleType()),
            T.StructField(f"{prefix}_level", T.IntegerType()),
        ]
    )

    def score(batches: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        for batch in batches:
            out = predict_texts(model, batch[text_col].fillna("").tolist())
            batch[f"{prefix}_label"] = [o[0] for o in out]
            batch[f"{prefix}_confidence"] = [o[1] for o in out]
            batch[f"{prefix}_level"] = [o[2] for o in out]
            yield batch

    return df.mapInPandas(score, schema)


def stats_dict(stats: Sequence[LevelStats]) -> list[dict[str, Any]]:
    """Level stats as plain dicts (for MLflow and reports)."""
    return [asdict(s) for s in stats]
