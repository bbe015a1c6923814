"""Hierarchical fastText (HFT), the consistency paper's classifier (Appendix F).

HFT is D fastText models; f_i is trained on the labels truncated to levels 1..i. Inference: predict
with f_1; for i = 2..D, take f_i's prediction if it agrees with the current one on the first i-1
levels, else stop and return the current one; reaching f_D returns f_D's prediction. D follows the
data (the deepest label), so a flat taxonomy gives a single model.

Training runs as Ray tasks, one level per task, in parallel; a task reads the training table's Parquet
files itself (nothing passes through the driver). Prediction runs in Spark ``mapInPandas``;
each Python worker loads the models once and keeps them for every later batch.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from common.data.text import normalize_title
from common.models.config import FastTextConfig
from common.platform.errors import ClusterError, InputError
from common.platform.native_heap import glibc
from common.platform.storage import local_copy, put_file, read_parquet_files, worker_scratch
from common.pyfunc.hft import fasttext_module as _fasttext
from common.pyfunc.hft import load_level_files, score_levels, truncate_label
from common.pyfunc.multilabel import LABEL_PREFIX

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

    from common.platform.ray_runtime import RayRuntime

log = logging.getLogger(__name__)

# fasttext-numpy2 0.10.4 trains on uninitialised memory: its matrices come from posix_memalign unzeroed,
# and the input matrix's seeded init fills only thread/10 of it (upstream fastText's std::vector zeroes the
# rest). Recycled heap memory there makes a model differ between runs on the same rows and seed, or fail
# with "Encountered NaN". Training therefore runs with glibc's M_PERTURB set so every allocation comes back
# zeroed (:func:`zeroed_allocations`); a fixed mmap threshold (read by glibc at process start; trainer tasks
# get it through their runtime_env) keeps big matrices on fresh zeroed pages where mallopt is missing, and a
# NaN failure is still retried in a new process.
SAFE_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}
# fastText's Ray tasks and actors run in this runtime environment, torch's in theirs (ray_stages.TORCH_TASK_ENV):
# Ray keeps a worker pool per environment, so no worker whose heap torch shaped ever trains fastText.
FASTTEXT_TASK_ENV = {"env_vars": SAFE_MALLOC_ENV}


def task_options(torch: bool, num_gpus: float = 0.0, num_cpus: Optional[int] = None) -> dict[str, Any]:
    """Ray options of a classifier task: torch's workers (``torch_task_options``: one that imported torch serves
    the next; with a GPU each exits after its task) when ``torch``, else fastText's (:data:`FASTTEXT_TASK_ENV`);
    with ``num_cpus``, that request fitted to the largest node (``fit_cpus``)."""
    from common.platform.ray_stages import fit_cpus, torch_task_options

    options = torch_task_options(num_gpus) if torch else {"runtime_env": FASTTEXT_TASK_ENV}
    return options if num_cpus is None else {**options, "num_cpus": fit_cpus(num_cpus, "classifier training")}


class TrainingDataError(InputError):
    """Training data a classifier cannot learn from (no rows, a single class)."""


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
# (Parquet files, pyarrow filters or None), e.g. (files, [("fold", "in", [0, 1, 2])]): one table version can
# hold many folds or training sets, and a Ray task reads just its own rows.
Source = tuple[Sequence[str], Optional[list]]


def read_rows(sources: Sequence[Source], text_col: str, label_col: str) -> list[tuple[str, str]]:
    """(text, label) rows of every source, sorted, so their order never depends on the files' order."""
    rows: list[tuple[str, str]] = []
    for files, filters in sources:
        if not files:
            continue
        table = read_parquet_files(files, [text_col, label_col], filters)
        rows += zip(table.column(text_col).to_pylist(), table.column(label_col).to_pylist())
    return sorted(rows, key=lambda r: (r[0] or "", r[1] or ""))


def fit_rows(
    rows: Sequence[tuple[str, str]], params: dict[str, Any], seed: int, out_dir: str, level: int = 1
) -> tuple[int, int, float]:
    """Train one fastText classifier on sorted (text, label) ``rows`` and save ``level_<level>.bin`` and
    ``labels_<level>.json`` under ``out_dir`` (local path or URI). Returns (tokens, labels, seconds); raises
    :class:`TrainingDataError` for no rows."""
    if not rows:
        raise TrainingDataError(f"no training rows for {out_dir} (level {level})")
    # fastText learns in file order, and Spark's shuffles make the files' row order vary between runs:
    # a seeded permutation of the sorted rows makes the model depend on the rows and the seed only.
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(rows))
    with worker_scratch("hft-") as tmp:
        figures = fit_fasttext(
            [rows[i][0] for i in order], [rows[i][1] for i in order], params, seed, tmp, f"level_{level}"
        )
        for name in (f"level_{level}.bin", f"labels_{level}.json"):
            put_file(os.path.join(tmp, name), f"{out_dir.rstrip('/')}/{name}")
    return figures


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


def fit_fasttext(
    texts: Sequence[str], labels: Sequence[str], params: dict[str, Any], seed: int, folder: str, name: str = "level_1"
) -> tuple[int, int, float]:
    """Train one fastText classifier on (text, label) in the given order; write ``<name>.bin`` and the label
    map ``labels_<n>.json`` (fastText label token -> label; ``n`` from ``name``) into the local ``folder``.

    Texts are normalised as at prediction (:func:`normalize_title`). Returns (tokens, labels, seconds).
    A NaN failure (see ``SAFE_MALLOC_ENV``) is retried once in a fresh process.
    """
    vocabulary = sorted(set(labels))
    token_of = {label: f"{LABEL_PREFIX}{i}" for i, label in enumerate(vocabulary)}
    tokens = 0
    train_file = os.path.join(folder, f"{name}.train.txt")
    with open(train_file, "w", encoding="utf-8") as fh:
        for text, label in zip(texts, labels):
            line = normalize_title(text)
            tokens += len(line.split())
            fh.write(f"{token_of[label]} {line}\n")
    out_bin = os.path.join(folder, f"{name}.bin")
    start = time.perf_counter()
    train_file_to_model(train_file, params, seed, out_bin)
    seconds = time.perf_counter() - start
    os.remove(train_file)
    suffix = name.rsplit("_", 1)[-1]
    Path(folder, f"labels_{suffix}.json").write_text(
        json.dumps({tok: label for label, tok in token_of.items()}), encoding="utf-8"
    )
    return tokens, len(vocabulary), seconds


def train_file_to_model(train_file: str, params: dict[str, Any], seed: int, out_bin: str) -> None:
    """Train fastText on the supervised-format ``train_file`` and save ``out_bin``; a NaN failure (see
    ``SAFE_MALLOC_ENV``) is retried once in a fresh process."""
    try:
        _train_file_to_model(train_file, params, seed, out_bin)
    except RuntimeError as exc:
        if "NaN" not in str(exc):
            raise
        log.warning("fastText hit NaN in-process (%s); retrying in a fresh process", out_bin)
        _train_in_fresh_process(train_file, params, seed, out_bin)


_M_PERTURB = -6  # glibc's mallopt parameter: allocations are filled with (byte ^ 0xff), frees with byte
_perturb_lock = threading.Lock()
_perturb_users = 0


@contextmanager
def zeroed_allocations() -> Iterator[None]:
    """While open, every glibc heap allocation in this process comes back zero-filled (M_PERTURB 0xff).

    Nested and concurrent uses are counted; the last one out turns perturbation off. A no-op where the C
    library has no ``mallopt`` (not glibc): there the fixed mmap threshold is the only guard.
    """
    global _perturb_users
    libc = glibc()
    with _perturb_lock:
        _perturb_users += 1
        if libc is not None and _perturb_users == 1:
            libc.mallopt(_M_PERTURB, 0xFF)
    try:
        yield
    finally:
        with _perturb_lock:
            _perturb_users -= 1
            if libc is not None and _perturb_users == 0:
                libc.mallopt(_M_PERTURB, 0)


def _train_file_to_model(train_file: str, params: dict[str, Any], seed: int, out_bin: str) -> None:
    with zeroed_allocations():
        model = _fasttext().train_supervised(input=train_file, seed=seed, verbose=0, **params)
    model.save_model(out_bin)


def _train_in_fresh_process(train_file: str, params: dict[str, Any], seed: int, out_bin: str) -> None:
    import multiprocessing

    os.environ.update(SAFE_MALLOC_ENV)  # inherited by the spawned interpreter at its start
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=_train_file_to_model, args=(train_file, params, seed, out_bin))
    process.start()
    _join_working(process)
    if process.exitcode != 0 or not os.path.isfile(out_bin):
        raise TrainingDataError(
            f"fastText training failed (exit code {process.exitcode}); "
            "NaN usually means a too high learning rate for this data"
        )


# How long a training process may use no CPU at all before it is taken for hung (a deadlock, a stopped process):
# training time grows with the data and is never cut, a process doing nothing is.
STALLED_S = 300.0


def _join_working(process, stalled_s: float = STALLED_S, poll_s: float = 1.0) -> None:
    """Wait for ``process`` (a started multiprocessing Process) to end while it works; one whose CPU time (from
    /proc) did not move for ``stalled_s`` seconds is killed and raises :class:`ClusterError` naming the wait.
    Without /proc the wait is plain."""
    last, since = None, time.monotonic()
    while process.is_alive():
        process.join(poll_s)
        used = _cpu_ticks(process.pid)
        if used is None or used != last:
            last, since = used, time.monotonic()
        elif time.monotonic() - since > stalled_s:
            process.kill()
            process.join(poll_s)
            raise ClusterError(
                f"fastText's training process {process.pid} used no CPU for {stalled_s:g} s "
                "and was killed (hft.STALLED_S)"
            )


def _cpu_ticks(pid: int) -> Optional[int]:
    """The user plus system CPU time of process ``pid`` in clock ticks (``/proc/<pid>/stat``), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def fasttext_params(cfg: FastTextConfig) -> dict[str, Any]:
    """fastText keyword arguments from the config (names as fastText spells them)."""
    return {
        "epoch": cfg.epoch,
        "lr": cfg.lr,
        "wordNgrams": cfg.word_ngrams,
        "dim": cfg.dim,
        "minCount": cfg.min_count,
        "bucket": cfg.bucket,
        "loss": cfg.loss,
        "thread": cfg.thread,
        "minn": cfg.minn,
        "maxn": cfg.maxn,
    }


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

        from common.platform.ray_waits import wait_any

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
