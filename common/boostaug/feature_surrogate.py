"""BoostAug's CPU surrogate (``boostaug.surrogate.kind: features``): a classifier head per cross-boosting fold
on frozen sentence embeddings.

The sentence encoder (all-MiniLM-L6-v2 by default; CTranslate2 where it can run the model) is never trained,
so a text's embedding is the same for every surrogate: the training texts are embedded once, and each
surrogate is a head on the embeddings of its own training folds (``boostaug.surrogate.features.head``: a
multinomial logistic regression, its L2 strength chosen on its validation fold, or a one-hidden-layer MLP
trained to convergence). The cross-boosting property holds (the head that judges fold i's candidates never
saw fold i's texts), and k fold surrogates plus MonoAug cost one embedding pass over the training texts and
seconds of fitting. The candidates are embedded once per candidates version (:class:`CandidateEmbedder`, the
``boostaug_candidate_embeddings`` table), and every head judges those stored embeddings
(:class:`FeatureHeadScorer`), so a new head or C grid re-scores in minutes instead of re-encoding. The
surrogate gives confidence and label; it has no language-model head, so no perplexity (the perplexity filter
passes its candidates, as with fastText).
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from common.models.classifiers.text_classifier import LABEL, TEXT
from common.models.classifiers.training_rows import read_rows
from common.platform.storage import local_copy, put_file, worker_scratch

if TYPE_CHECKING:
    from common.boostaug.config import FeatureSurrogateConfig

HEAD_FILE = "head.npz"
REPORT_FILE = "surrogate.json"


def sentence_encoder(spec: "FeatureSurrogateConfig"):
    """The frozen sentence encoder of ``spec`` (``encoder``: a sentence-transformers folder, None: the packaged
    all-MiniLM-L6-v2) on ``spec.engine``, with ``spec.compute_type`` where it runs on CTranslate2, on
    ``spec.threads`` threads (0: ``spec.num_cpus``), truncating at ``spec.max_tokens`` word pieces (0: the
    model's own limit), its first ``spec.layers`` layers (0: all), its batches in parallel on CPU unless
    ``spec.parallel_batches`` is False."""
    from common.models.generation.quality.scoring import _encoder, minilm_path

    return _encoder(
        spec.encoder or minilm_path(),
        None,
        spec.engine,
        spec.compute_type,
        spec.threads or spec.num_cpus,
        spec.max_tokens or None,
        spec.parallel_batches,
        spec.layers or None,
    )


def embed(encoder, texts: Sequence[str], batch_size: int = 256, batch_tokens: Optional[int] = None) -> np.ndarray:
    """(len(texts), dim) unit-length float32 embeddings of ``texts`` (None as the empty text), in encoder batches
    of at most ``batch_size`` texts and, on CTranslate2, ``batch_tokens`` tokens (None: the device's default)."""
    from common.models.generation.quality.sentence_encoder import CT2SentenceEncoder

    budget = {"max_batch_tokens": batch_tokens} if isinstance(encoder, CT2SentenceEncoder) else {}
    return encoder.encode(
        [t or "" for t in texts], batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, **budget
    )


def fit_head(
    x: np.ndarray, y: Sequence[str], x_val: np.ndarray, y_val: Sequence[str], c_grid: Sequence[float], seed: int
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A multinomial logistic regression of ``y`` on ``x`` for each L2 strength C in ``c_grid``; the one with
    the best accuracy on (``x_val``, ``y_val``) is kept (ties: the smaller C; no validation rows: the largest).
    Returns (head arrays: coef, intercept, labels; figures: C, val_accuracy, rows, classes)."""
    from sklearn.linear_model import LogisticRegression

    labels = np.array(sorted(set(y)))
    if len(labels) < 2:
        raise ValueError(f"a surrogate head needs at least two classes; the training rows have {list(labels)}")
    best: Optional[tuple[float, float, Any]] = None
    for c in sorted(c_grid):
        model = LogisticRegression(C=float(c), max_iter=1000, random_state=seed).fit(x, np.asarray(y))
        accuracy = float((model.predict(x_val) == np.asarray(y_val)).mean()) if len(y_val) else float("nan")
        if best is None or (len(y_val) and accuracy > best[1]) or not len(y_val):
            best = (float(c), accuracy, model)
    c, accuracy, model = best
    coef, intercept = model.coef_, model.intercept_
    if len(labels) == 2:  # sklearn keeps one row for two classes: logits (0, z) give the same softmax
        coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.concatenate([[0.0], intercept])
    head = {"coef": coef.astype(np.float32), "intercept": intercept.astype(np.float32), "labels": labels}
    return head, {"C": c, "val_accuracy": accuracy, "rows": len(y), "classes": len(labels)}


def fit_mlp_head(
    x: np.ndarray, y: Sequence[str], x_val: np.ndarray, y_val: Sequence[str], hidden: int, max_iter: int, seed: int
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A one-hidden-layer ReLU MLP (``hidden`` units, Adam, scikit-learn's default L2) of ``y`` on ``x``, trained
    until its training loss stops falling or ``max_iter`` epochs, with no early stopping: like the paper's
    fine-tuned surrogates it ends sure of in-distribution text, which is the scale its 0.99 confidence
    threshold assumes. Returns (head arrays: w1, b1, w2, b2, labels; figures: hidden, epochs, val_accuracy,
    rows, classes)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    labels = np.array(sorted(set(y)))
    if len(labels) < 2:
        raise ValueError(f"a surrogate head needs at least two classes; the training rows have {list(labels)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter is the budget, not an error
        model = MLPClassifier(hidden_layer_sizes=(hidden,), max_iter=max_iter, random_state=seed).fit(x, np.asarray(y))
    w2, b2 = model.coefs_[1], model.intercepts_[1]
    if len(labels) == 2:  # one logistic output for two classes: logits (0, z) give the same probabilities
        w2, b2 = np.hstack([np.zeros_like(w2), w2]), np.concatenate([[0.0], b2])
    head = {
        "w1": model.coefs_[0].astype(np.float32),
        "b1": model.intercepts_[0].astype(np.float32),
        "w2": w2.astype(np.float32),
        "b2": b2.astype(np.float32),
        "labels": labels,
    }
    accuracy = float((model.predict(x_val) == np.asarray(y_val)).mean()) if len(y_val) else float("nan")
    return head, {
        "hidden": hidden,
        "epochs": int(model.n_iter_),
        "val_accuracy": accuracy,
        "rows": len(y),
        "classes": len(labels),
    }


def predict(head: dict[str, np.ndarray], x: np.ndarray) -> tuple[list[str], list[float]]:
    """(predicted labels, confidences = top softmax probabilities) of ``head`` (logistic or MLP) on
    embeddings ``x``."""
    if not len(x):  # an empty block (its embeddings have no width to multiply)
        return [], []
    if "w1" in head:
        logits = np.maximum(x @ head["w1"] + head["b1"], 0.0) @ head["w2"] + head["b2"]
    else:
        logits = x @ head["coef"].T + head["intercept"]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    top = probs.argmax(axis=1)
    return [str(v) for v in head["labels"][top]], [float(v) for v in probs[np.arange(len(top)), top]]


def fit_surrogates(plans: Sequence[dict[str, Any]], spec: "FeatureSurrogateConfig", seed: int) -> list[dict[str, Any]]:
    """Fit one head per plan (``train``, ``validation``: :data:`~common.models.classifiers.training_rows.Source`
    lists of (text, label) rows; ``out_dir``: where its head goes, local path or URI). Every distinct text is embedded
    once for all plans; ``spec.head`` says which head. Returns per plan {rows, epoch (0: the head's epochs are
    not the surrogate's epoch choice), C (logistic) or hidden and epochs (mlp), val_accuracy, seconds,
    embed_seconds, uri}; raises ValueError for a plan without training rows."""
    start = time.perf_counter()
    rows = [(read_rows(p["train"], TEXT, LABEL), read_rows(p["validation"], TEXT, LABEL)) for p in plans]
    texts = sorted({t or "" for train, val in rows for t, _ in [*train, *val]})
    encoder = sentence_encoder(spec)
    vectors = embed(encoder, texts, spec.batch_size, spec.batch_tokens)
    index = {t: i for i, t in enumerate(texts)}
    embed_seconds = time.perf_counter() - start
    out = []
    for plan, (train, val) in zip(plans, rows):
        if not train:
            raise ValueError(f"no training rows for the features surrogate {plan['out_dir']}")
        began = time.perf_counter()
        x = vectors[[index[t or ""] for t, _ in train]]
        x_val = vectors[[index[t or ""] for t, _ in val]] if val else np.zeros((0, vectors.shape[1]), np.float32)
        y, y_val = [lab for _, lab in train], [lab for _, lab in val]
        head, figures = (
            fit_mlp_head(x, y, x_val, y_val, spec.hidden, spec.max_iter, seed)
            if spec.head == "mlp"
            else fit_head(x, y, x_val, y_val, spec.c_grid, seed)
        )
        figures.update(epoch=0, seconds=time.perf_counter() - began, embed_seconds=embed_seconds, uri=plan["out_dir"])
        with worker_scratch("feature-head-") as tmp:
            np.savez(os.path.join(tmp, HEAD_FILE), **head)
            with open(os.path.join(tmp, REPORT_FILE), "w", encoding="utf-8") as fh:
                json.dump(figures, fh)
            for name in (HEAD_FILE, REPORT_FILE):
                put_file(os.path.join(tmp, name), f"{plan['out_dir'].rstrip('/')}/{name}")
        out.append(figures)
    return out


def load_head(uri: str) -> dict[str, np.ndarray]:
    """The head saved under ``uri`` by :func:`fit_surrogates`."""
    with np.load(os.path.join(local_copy(uri), HEAD_FILE), allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


EMBEDDING = "embedding"


def embeddings_of(column) -> np.ndarray:
    """(rows, dim) float32 array of an Arrow list<float> column of equal-length embeddings."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    values = array.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    return values.reshape(len(array), -1) if len(array) else np.zeros((0, 0), np.float32)


class CandidateEmbedder:
    """A Ray Data actor of the embedding pool: loads the frozen encoder once and adds to each Arrow batch of
    candidates an ``embedding`` column (list<float>, unit length), one encoder pass per distinct text."""

    def __init__(self, spec: "FeatureSurrogateConfig"):
        from common.platform.process.native_heap import hold_native_heap

        if spec.hold_heap:
            hold_native_heap()  # else each encoder batch's activations go back to the OS and fault in anew
        self.encoder = sentence_encoder(spec)
        self.batch_size, self.batch_tokens = spec.batch_size, spec.batch_tokens

    def __call__(self, batch):
        import pyarrow as pa

        texts = [t or "" for t in batch.column("text").to_pylist()]
        distinct = sorted(set(texts))  # augmentations repeat: each text is encoded once per batch
        index = {t: i for i, t in enumerate(distinct)}
        x = embed(self.encoder, distinct, self.batch_size, self.batch_tokens)[[index[t] for t in texts]]
        dim = x.shape[1] if x.size else 0
        offsets = pa.array(np.arange(0, len(texts) * dim + 1, max(dim, 1))[: len(texts) + 1], pa.int32())
        return batch.append_column(EMBEDDING, pa.ListArray.from_arrays(offsets, pa.array(x.ravel(), pa.float32())))


class FeatureHeadScorer:
    """A Ray Data actor of the ``features`` scoring pool: loads every fold's head (and the MonoAug head) once,
    then judges Arrow batches of embedded candidates (``fold``, ``embedding``: :class:`CandidateEmbedder`'s
    rows) with their fold's head. Replaces the embedding with confidence, pred_label, perplexity and
    perplexity_limit (null: no language model), and the same four ``mono_*`` columns with ``mono``."""

    def __init__(self, surrogates: dict[int, str], mono: Optional[str]):
        self.heads = {int(fold): load_head(uri) for fold, uri in surrogates.items()}
        self.mono = load_head(mono) if mono else None

    def __call__(self, batch):
        import pyarrow as pa

        folds = np.asarray(batch.column("fold").to_pylist())
        x = embeddings_of(batch.column(EMBEDDING))
        batch = batch.drop_columns([EMBEDDING])
        n = len(folds)
        conf, label = [0.0] * n, [""] * n
        for fold in sorted(set(folds.tolist())):
            if int(fold) not in self.heads:
                raise KeyError(f"no surrogate for fold {fold}")
            rows = np.flatnonzero(folds == fold)
            for i, lab, c in zip(rows, *predict(self.heads[int(fold)], x[rows])):
                conf[i], label[i] = c, lab
        nulls = pa.nulls(n, pa.float64())
        columns = [
            ("confidence", pa.array(conf, pa.float64())),
            ("pred_label", pa.array(label, pa.string())),
            ("perplexity", nulls),
            ("perplexity_limit", nulls),
        ]
        if self.mono is not None:
            m_label, m_conf = predict(self.mono, x)
            columns += [
                ("mono_confidence", pa.array(m_conf, pa.float64())),
                ("mono_label", pa.array(m_label, pa.string())),
                ("mono_perplexity", nulls),
                ("mono_perplexity_limit", nulls),
            ]
        for name, values in columns:
            batch = batch.append_column(name, values)
        return batch


def embed_on_ray(ds, spec: "FeatureSurrogateConfig"):
    """``ds`` (Ray Dataset of candidates) with an ``embedding`` column, from :class:`CandidateEmbedder` on
    ``spec.concurrency`` actors of ``spec.num_cpus`` CPUs (``spec.num_gpus`` GPUs) each, in blocks of
    ``spec.batch_size`` rows so the pool starts at once and the write streams, ``spec.calls_per_actor`` blocks
    at once on each actor."""
    import ray

    from common.platform.compute.ray_stages import actor_pool_size, fit_cpus, map_batches_on_actors

    concurrency = actor_pool_size(spec.concurrency, spec.num_gpus, spec.num_cpus, stage="boostaug candidate embedding")
    # the actors' threads stay spec's (the embeddings depend on them); the request fits the largest node
    cpus = fit_cpus(spec.num_cpus, "boostaug candidate embedding")
    # An actor's calls share its encoder (CTranslate2 takes concurrent batches) and its thread pool.
    pool = ray.data.ActorPoolStrategy(
        size=concurrency,
        max_concurrent_calls_per_actor=spec.calls_per_actor,
        enable_true_multi_threading=spec.calls_per_actor > 1,
    )
    return map_batches_on_actors(
        ds.repartition(target_num_rows_per_block=spec.batch_size),
        CandidateEmbedder,
        batch_format="pyarrow",
        batch_size=spec.batch_size,
        compute=pool,
        num_cpus=cpus,
        num_gpus=spec.num_gpus or None,
        fn_constructor_kwargs={"spec": spec},
    )


def score_on_ray(ds, surrogates: dict[int, str], mono: Optional[str], spec: "FeatureSurrogateConfig"):
    """``ds`` (Ray Dataset of embedded candidates, :func:`embed_on_ray`'s rows) judged by
    :class:`FeatureHeadScorer` on one CPU actor (heads are small matrix products), in blocks of
    ``spec.batch_size`` rows."""
    from common.platform.compute.ray_stages import map_batches_on_actors

    return map_batches_on_actors(
        ds,
        FeatureHeadScorer,
        batch_format="pyarrow",
        batch_size=spec.batch_size,
        concurrency=1,
        num_cpus=1,
        fn_constructor_kwargs={"surrogates": surrogates, "mono": mono},
    )
