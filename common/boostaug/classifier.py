"""fastText text classifiers for BoostAug, trained and evaluated inside Ray tasks.

A task reads its rows straight from the Parquet files of Delta table versions (``sources``: a list of
(files, pyarrow filters) so one table can hold many folds or methods), trains with
:func:`common.models.hft.fit_fasttext`, and returns figures; nothing passes through the driver. The
surrogates of cross-boosting are saved in the HFT layout (``level_1.bin``, ``labels_1.json``) so Spark
scores candidates with :func:`common.models.hft.predict_texts`.
"""
from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any, Optional, Sequence

from common.models.hft import SAFE_MALLOC_ENV, HFTModel, TrainingDataError, fit_fasttext, load_levels
from common.data.text import normalize_title
from common.platform.storage import put_file

if TYPE_CHECKING:
    from common.platform.ray_runtime import RayRuntime

# (Parquet files, pyarrow filters or None), e.g. (files, [("fold", "in", [0, 1, 2])]).
Source = tuple[Sequence[str], Optional[list]]


def read_rows(sources: Sequence[Source], text_col: str = "text", label_col: str = "label") -> list[tuple[str, str]]:
    """(text, label) rows of every source, sorted (so the row order never depends on file order)."""
    import pyarrow.parquet as pq

    rows: list[tuple[str, str]] = []
    for files, filters in sources:
        if not files:
            continue
        table = pq.ParquetDataset(list(files), filters=filters or None).read(columns=[text_col, label_col])
        rows += zip(table.column(text_col).to_pylist(), table.column(label_col).to_pylist())
    return sorted(rows)


def accuracy_and_macro_f1(gold: Sequence[str], predicted: Sequence[str]) -> tuple[float, float]:
    """Accuracy and macro-F1 (mean over the gold and predicted labels of per-label F1)."""
    if not gold:
        return float("nan"), float("nan")
    labels = sorted(set(gold) | set(predicted))
    f1s = []
    for label in labels:
        tp = sum(g == label and p == label for g, p in zip(gold, predicted))
        fp = sum(g != label and p == label for g, p in zip(gold, predicted))
        fn = sum(g == label and p != label for g, p in zip(gold, predicted))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(g == p for g, p in zip(gold, predicted)) / len(gold), sum(f1s) / len(f1s)


def fit(train: Sequence[Source], params: dict[str, Any], seed: int, out_dir: str,
        text_col: str = "text", label_col: str = "label") -> dict[str, Any]:
    """Train a flat fastText classifier on ``train`` rows (seeded shuffle of the sorted rows); save it under
    ``out_dir`` in the HFT layout. Returns {rows, tokens, seconds}; raises TrainingDataError on no rows."""
    import numpy as np

    rows = read_rows(train, text_col, label_col)
    if not rows:
        raise TrainingDataError(f"no training rows for {out_dir}")
    order = np.random.default_rng(seed).permutation(len(rows))
    with tempfile.TemporaryDirectory(prefix="boostaug-") as tmp:
        tokens, _, seconds = fit_fasttext([rows[i][0] for i in order], [rows[i][1] for i in order], params, seed,
                                          tmp, "level_1")
        for name in ("level_1.bin", "labels_1.json"):
            put_file(os.path.join(tmp, name), f"{out_dir.rstrip('/')}/{name}")
    return {"rows": len(rows), "tokens": tokens, "seconds": seconds}


def evaluate(model_dir: str, test: Sequence[Source], text_col: str = "text",
             label_col: str = "label") -> dict[str, float]:
    """Accuracy and macro-F1 of a saved classifier on ``test`` rows."""
    models, maps = load_levels(HFTModel(model_dir, 1))
    rows = read_rows(test, text_col, label_col)
    tokens, _ = models[0].predict([normalize_title(t) for t, _ in rows], k=1)
    accuracy, macro_f1 = accuracy_and_macro_f1([g for _, g in rows], [maps[0][t[0]] for t in tokens])
    return {"accuracy": accuracy, "macro_f1": macro_f1, "n_test": len(rows)}


def fit_and_evaluate(train: Sequence[Source], test: Sequence[Source], params: dict[str, Any], seed: int,
                     out_dir: Optional[str] = None) -> dict[str, Any]:
    """Train on ``train``, evaluate on ``test``; the model is kept under ``out_dir`` or discarded when None.
    Returns fit's and evaluate's figures together."""
    with tempfile.TemporaryDirectory(prefix="boostaug-model-") as tmp:
        folder = out_dir or tmp
        figures = fit(train, params, seed, folder)
        figures.update(evaluate(folder, test))
    return figures


def choose_and_fit(train: Sequence[Source], validation: Sequence[Source], params: dict[str, Any],
                   epochs: Sequence[int], seed: int, out_dir: str) -> dict[str, Any]:
    """Model choice on a validation set: one model per epoch count under ``<out_dir>/epoch-<n>``; the most
    accurate on ``validation`` wins (ties: fewer epochs). Without validation rows, the first epoch count.
    Returns the winner's figures with ``epoch``, ``val_accuracy`` and ``uri`` (its folder)."""
    has_validation = bool(read_rows(validation))
    best: Optional[dict[str, Any]] = None
    for epoch in (epochs if has_validation else epochs[:1]):
        folder = f"{out_dir.rstrip('/')}/epoch-{epoch}"
        run = {**params, "epoch": epoch}
        figures = fit_and_evaluate(train, validation, run, seed, folder) if has_validation \
            else fit(train, run, seed, folder)
        score = figures.get("accuracy", float("nan"))
        if best is None or score > best["val_accuracy"]:
            best = {**figures, "epoch": epoch, "val_accuracy": score, "uri": folder}
    assert best is not None
    return best


def run_tasks(runtime: "RayRuntime", function, jobs: Sequence[dict[str, Any]]) -> list[Any]:
    """Run ``function(**job)`` for every job as Ray tasks of one CPU each (fastText single-threaded, so
    deterministic per seed); results in job order."""
    import ray

    runtime.start()
    remote = ray.remote(num_cpus=1, max_retries=2, runtime_env={"env_vars": SAFE_MALLOC_ENV})(function)
    return ray.get([remote.remote(**job) for job in jobs])
