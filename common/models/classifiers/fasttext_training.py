"""Training one fastText classifier, as every fastText classifier of the suite does (HFT's levels, the text and
multi-label classifiers, BoostAug's fastText surrogates): its rows shuffled by the seed, written in fastText's
format with a label map beside the model, fastText's arguments from the config, and the Ray options of a
classifier task.

fastText's training is guarded against its own uninitialised memory (:data:`SAFE_MALLOC_ENV`,
:func:`zeroed_allocations`); a NaN failure is retried once in a fresh process, killed if it stops using CPU
(:data:`STALLED_S`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from common.data.text import normalize_title
from common.models.classifier_config import FastTextConfig
from common.models.classifiers.training_rows import TrainingDataError
from common.platform.errors import ClusterError
from common.platform.process.native_heap import glibc
from common.platform.storage import put_file, worker_scratch
from common.pyfunc.hft import fasttext_module as _fasttext
from common.pyfunc.multilabel import LABEL_PREFIX

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
    from common.platform.compute.ray_stages import fit_cpus, torch_task_options

    options = torch_task_options(num_gpus) if torch else {"runtime_env": FASTTEXT_TASK_ENV}
    return options if num_cpus is None else {**options, "num_cpus": fit_cpus(num_cpus, "classifier training")}


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
                "and was killed (fasttext_training.STALLED_S)"
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
