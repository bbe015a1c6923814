"""Filtering generated samples against their sources (the CGA filter): score, reject with reasons, keep s >= T.

Runs per batch on Ray Data (``map_batches`` with Arrow tables), so it is vectorised and never gathers the
data. Every input row leaves either in the kept set or in the rejected set with a ``reason``:
``empty output``, ``copy of the source``, ``score below T`` (T on the 0..1 scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

Scorer = Literal["bleu", "minilm"]


@dataclass(frozen=True)
class FilterSpec:
    """The score function and threshold; the consistency paper's best is T = 0.7."""

    scorer: Scorer = "bleu"
    # None: score only (threshold-free reasons), so several thresholds can be applied later (CGA sweeps).
    threshold: Optional[float] = 0.7
    model_path: Optional[str] = None  # a sentence-transformers model for "minilm" (default: the packaged MiniLM)
    # the "minilm" encoder's engine: auto | ctranslate2 | torch (common.models.generation.quality.scoring)
    encoder_engine: str = "auto"


def score_batch(table, spec: FilterSpec):
    """Add ``score`` and ``reason`` (null when kept) to an Arrow batch of generated rows.

    A row that already has a ``reason`` (a quarantined generation input) keeps it and gets no score.
    """
    import pyarrow as pa

    from common.models.generation.quality.scoring import bleu_scores, cosine_scores

    sources = [s or "" for s in table.column("source_text").to_pylist()]
    outputs = [g or "" for g in table.column("generated_text").to_pylist()]
    earlier = table.column("reason").to_pylist() if "reason" in table.column_names else [None] * len(outputs)
    live = [
        i
        for i, (s, g, r) in enumerate(zip(sources, outputs, earlier))
        if r is None and g.strip() and g.strip().lower() != s.strip().lower()
    ]
    scores: list[Optional[float]] = [None] * len(outputs)
    if live:
        hyps, refs = [outputs[i] for i in live], [sources[i] for i in live]
        if spec.scorer == "bleu":
            values = bleu_scores(hyps, refs)
        else:
            values = cosine_scores(hyps, refs, spec.model_path, engine=spec.encoder_engine)
        for i, value in zip(live, values):
            scores[i] = value
    reasons = []
    for s, g, value, before in zip(sources, outputs, scores, earlier):
        if before is not None:
            reasons.append(before)
        elif not g.strip():
            reasons.append("empty output")
        elif g.strip().lower() == s.strip().lower():
            reasons.append("copy of the source")
        elif spec.threshold is not None and value < spec.threshold - 1e-12:
            reasons.append(f"score below T={spec.threshold:g}")
        else:
            reasons.append(None)
    table = table.drop_columns([c for c in ("score", "reason") if c in table.column_names])
    return table.append_column("score", pa.array(scores, pa.float64())).append_column(
        "reason", pa.array(reasons, pa.string())
    )


def score_generated(ds, spec: FilterSpec, batch_size: int = 1024):
    """``ds`` with ``score`` and ``reason`` on every row (one pass; nothing is split off)."""
    return ds.map_batches(score_batch, batch_format="pyarrow", fn_kwargs={"spec": spec}, batch_size=batch_size)


def filter_generated(ds, spec: FilterSpec, batch_size: int = 1024):
    """(kept, rejected) Ray Datasets: every row is scored once; rejected rows carry their ``reason``."""
    from common.models.generation.on_ray.pool import split_quarantine

    return split_quarantine(score_generated(ds, spec, batch_size))
