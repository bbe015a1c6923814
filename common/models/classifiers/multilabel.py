"""Multi-label classifiers trained and applied inside Ray tasks (the compositional pipeline's quality-control
filter and its evaluation classifiers): fastText one-vs-all here, the encoder with a sigmoid head in
:mod:`common.models.classifiers.multilabel_encoder`.

:func:`fit_and_predict` reads its training rows straight from the Parquet files of Delta table versions
(``(files, pyarrow filters)`` sources), holds out a seeded validation slice to choose the decision
threshold (the one maximising mean Jaccard there), trains on the rest, and returns its predictions for
the rows to predict as an Arrow table: the caller turns the tasks' tables into a Ray Dataset
(``ray.data.from_arrow_refs``) and writes it, so predictions never pass through the driver.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional, Sequence

from common.data.text import normalize_title
from common.models.classifiers.fasttext_training import train_file_to_model
from common.models.classifiers.label_metrics import best_threshold, decide
from common.models.classifiers.training_rows import Source
from common.platform.storage import read_parquet_files, worker_scratch
from common.pyfunc.hft import fasttext_module
from common.pyfunc.multilabel import LABEL_PREFIX, ova_probabilities

if TYPE_CHECKING:
    from common.models.classifier_config import EncoderConfig, FastTextConfig
    from common.platform.compute.ray_runtime import RayRuntime


def read_examples(
    sources: Sequence[Source], id_col: str = "example_id", text_col: str = "text", labels_col: Optional[str] = "labels"
) -> list[tuple[str, str, list[str]]]:
    """(id, text, labels) of every source, sorted by id (so a model never depends on the files' order);
    ``labels_col`` None gives empty label lists."""
    rows: list[tuple[str, str, list[str]]] = []
    for files, filters in sources:
        if not files:
            continue
        columns = [id_col, text_col] + ([labels_col] if labels_col else [])
        table = read_parquet_files(files, columns, filters)
        labels = table.column(labels_col).to_pylist() if labels_col else [[]] * table.num_rows
        rows += zip(table.column(id_col).to_pylist(), table.column(text_col).to_pylist(), labels)
    return sorted(((str(i), t or "", list(ls or [])) for i, t, ls in rows), key=lambda r: r[0])


class MultiLabelModel:
    """A trained one-vs-all fastText model and its label names."""

    def __init__(self, path: str, labels: Sequence[str]):
        self.path = path
        self.model = fasttext_module().load_model(path)
        self.labels = list(labels)

    def probabilities(self, texts: Sequence[str]) -> list[dict[str, float]]:
        """Each text's probability per label (one-vs-all: independent sigmoids)."""
        return ova_probabilities(self.model, self.labels, texts)

    def save(self, threshold: float, folder: str) -> None:
        """``model.bin`` and the registered-model loader's manifest (:mod:`common.pyfunc.loader`, kind
        ``multilabel``: labels, decision ``threshold``) in ``folder`` (a local path or URI)."""
        from common.models.classifiers.manifest import write_manifest
        from common.platform.storage import put_file

        put_file(self.path, f"{folder.rstrip('/')}/model.bin")
        write_manifest(folder, {"kind": "multilabel", "labels": self.labels, "threshold": threshold})


def fit(rows: Sequence[tuple[str, str, list[str]]], params: dict[str, Any], seed: int, folder: str) -> MultiLabelModel:
    """Train on (id, text, labels) ``rows`` in a seeded order (fastText's ``ova`` loss); model in ``folder``."""
    import numpy as np

    vocabulary = sorted({label for _, _, labels in rows for label in labels})
    token = {label: f"{LABEL_PREFIX}{i}" for i, label in enumerate(vocabulary)}
    train_file = os.path.join(folder, "train.txt")
    with open(train_file, "w", encoding="utf-8") as fh:
        for i in np.random.default_rng(seed).permutation(len(rows)):
            _, text, labels = rows[i]
            if labels:
                fh.write(
                    " ".join(token[label] for label in labels) + " " + normalize_title(text).replace("\n", " ") + "\n"
                )
    out_bin = os.path.join(folder, "model.bin")
    train_file_to_model(train_file, {**params, "loss": "ova"}, seed, out_bin)
    return MultiLabelModel(out_bin, vocabulary)


def fit_and_predict(
    train: Sequence[Source],
    predict: Sequence[Source],
    params: dict[str, Any],
    seed: int,
    validation_fraction: float,
    keys: dict[str, Any],
    predict_id_col: str = "example_id",
    predict_labels_col: Optional[str] = "labels",
    kind: str = "fasttext",
    keep: Optional[str] = None,
):
    """Train a ``kind`` classifier on ``train`` (less a seeded ``validation_fraction`` held out to choose the
    threshold, and for the encoder its epoch), predict ``predict``; returns an Arrow table of (``keys``'
    columns, example_id, gold, predicted, threshold, n_train) with one row per predicted example (gold empty
    when ``predict_labels_col`` is None). With ``keep`` (a folder URI) the model stays there with the loader's
    ``model.json`` (:mod:`common.pyfunc.loader`): fastText's ``model.bin`` (:meth:`MultiLabelModel.save`), or
    the encoder's files (:meth:`~common.models.classifiers.multilabel_encoder.EncoderMultiLabelModel.save`).

    ``kind``: ``fasttext`` (one-vs-all; ``params`` = fastText's arguments) or ``encoder``
    (:mod:`common.models.classifiers.multilabel_encoder`; ``params`` = an :class:`EncoderConfig` as a dict)."""
    import numpy as np
    import pyarrow as pa

    rows = [r for r in read_examples(train) if r[2]]
    if not rows:
        raise ValueError(f"no labelled training rows for {keys}")
    order = np.random.default_rng(seed).permutation(len(rows))
    n_val = int(len(rows) * validation_fraction)
    val = [rows[i] for i in order[:n_val]]
    fit_rows = [rows[i] for i in sorted(order[n_val:])]
    targets = read_examples(predict, predict_id_col, "text", predict_labels_col)
    with worker_scratch("multilabel-") as tmp:
        if kind == "encoder":
            from common.models.classifier_config import EncoderConfig
            from common.models.classifiers.multilabel_encoder import fit as fit_encoder

            model: Any = fit_encoder(fit_rows, val, EncoderConfig(**params), seed)[0]
        elif kind == "fasttext":
            model = fit(fit_rows, params, seed, tmp)
        else:
            raise ValueError(f"unknown multi-label classifier kind {kind!r} (fasttext | encoder)")
        threshold = best_threshold(model.probabilities([t for _, t, _ in val]), [g for _, _, g in val])[0]
        predicted = [decide(p, threshold) for p in model.probabilities([t for _, t, _ in targets])]
        if keep:
            model.save(threshold, keep)
    n = len(targets)
    kinds = {bool: pa.bool_(), int: pa.int64(), float: pa.float64()}
    columns = {name: pa.array([value] * n, kinds.get(type(value), pa.string())) for name, value in keys.items()}
    columns.update(
        {
            "example_id": pa.array([i for i, _, _ in targets], pa.string()),
            "gold": pa.array([g for _, _, g in targets], pa.list_(pa.string())),
            "predicted": pa.array(predicted, pa.list_(pa.string())),
            "threshold": pa.array([threshold] * n, pa.float64()),
            "n_train": pa.array([len(rows)] * n, pa.int64()),
        }
    )
    return pa.table(columns)


def fit_and_predict_many(runtime: "RayRuntime", jobs: list[dict], encoder: "EncoderConfig"):
    """Run :func:`fit_and_predict` for every job as Ray tasks (fastText: one CPU; encoder: ``encoder``'s CPUs and
    GPUs in torch's workers); their prediction tables come back as one Ray Dataset."""
    import ray

    from common.models.classifiers.fasttext_training import task_options

    runtime.start()
    remotes = {
        "fasttext": ray.remote(num_cpus=1, max_retries=2, **task_options(False))(fit_and_predict),
        "encoder": ray.remote(
            num_gpus=encoder.num_gpus or None, max_retries=2, **task_options(True, encoder.num_gpus, encoder.num_cpus)
        )(fit_and_predict),
    }
    return ray.data.from_arrow_refs([remotes[job["kind"]].remote(**job) for job in jobs])


def classifier_params(kind: str, fasttext: "FastTextConfig", encoder: "EncoderConfig") -> dict:
    """:func:`fit_and_predict`'s ``params`` for a ``kind`` classifier: the encoder's config as a dict, or
    fastText's arguments."""
    from dataclasses import asdict

    from common.models.classifiers.fasttext_training import fasttext_params

    return asdict(encoder) if kind == "encoder" else fasttext_params(fasttext)
