"""BoostAug's contextual-substitution backend: a span of words masked, and filled by a seq2seq model.

The infiller is the suite's seq2seq generator (``boostaug.contextual.model``: the MiniLM-warm-started model
here, a T5 checkpoint in production), fine-tuned on the training texts themselves with T5's objective cut to
one span: the text with a span replaced by the mask token in, the span out. Candidate ``i`` of a text masks
a span drawn by the same seeded generator the edit-based backends use (seed, source id, backend, i), of
``max(1, round(p * n_words))`` words (p = ``boostaug.augment.token_prob``, the paper's 0.1) capped at
``max_span_words``; the model's sampled fill replaces it. Pure DataFrame transforms: the fine-tuning and
the generation run in the job (Ray), on the tables these build.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from common.boostaug.backends import n_changes, rng_for

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

BACKEND = "contextual"
# The training pairs draw their spans from another stream than the candidates (same text, other spans).
_TRAIN_STREAM = "contextual-train"
PAIR_SCHEMA = "pair_id string, source_text string, target_text string"
PROMPT_SCHEMA = (
    "prompt_id string, source_id string, fold int, source_text string, label string, aug_idx int, "
    "left_text string, right_text string, prompt string"
)


def mask_span(text: str, rng, p: float, max_span: int) -> tuple[str, str, str]:
    """(words left of the span, the span, words right of it) of ``text`` split on whitespace: a span of
    ``min(max_span, max(1, round(p * n)))`` words at a uniformly drawn start. A text of one word is all span."""
    words = text.split()
    length = min(max_span, n_changes(len(words), p), len(words))
    start = rng.randrange(len(words) - length + 1)
    return " ".join(words[:start]), " ".join(words[start : start + length]), " ".join(words[start + length :])


def masked(left: str, right: str, mask: str) -> str:
    """The model's input: the text with its span replaced by ``mask``."""
    return " ".join(part for part in (left, mask, right) if part)


def infill_pairs(train: "DataFrame", per_text: int, p: float, max_span: int, mask: str, seed: int) -> "DataFrame":
    """``train`` (source_id, text) -> the infiller's fine-tuning pairs (:data:`PAIR_SCHEMA`): ``per_text``
    masked copies of each text (source_text the masked text, target_text the span)."""

    def make(batches: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd

        for batch in batches:
            rows = []
            for sid, text in zip(batch["source_id"], batch["text"]):
                for j in range(per_text):
                    left, span, right = mask_span(text, rng_for(seed, sid, _TRAIN_STREAM, j), p, max_span)
                    rows.append((f"{sid}:{j}", masked(left, right, mask), span))
            yield pd.DataFrame(rows, columns=["pair_id", "source_text", "target_text"])

    return train.select("source_id", "text").mapInPandas(make, PAIR_SCHEMA)


def infill_prompts(train: "DataFrame", n: int, p: float, max_span: int, mask: str, seed: int) -> "DataFrame":
    """``train`` (source_id, fold, text, label) -> ``n`` prompts per text (:data:`PROMPT_SCHEMA`): candidate
    ``aug_idx`` masks the span drawn by ``rng_for(seed, source_id, "contextual", aug_idx)``; ``prompt_id`` is
    ``source_id:aug_idx``."""

    def make(batches: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd

        for batch in batches:
            rows = []
            for sid, fold, text, label in zip(batch["source_id"], batch["fold"], batch["text"], batch["label"]):
                for i in range(n):
                    left, _, right = mask_span(text, rng_for(seed, sid, BACKEND, i), p, max_span)
                    rows.append((f"{sid}:{i}", sid, int(fold), text, label, i, left, right, masked(left, right, mask)))
            yield pd.DataFrame(
                rows,
                columns=[
                    "prompt_id",
                    "source_id",
                    "fold",
                    "source_text",
                    "label",
                    "aug_idx",
                    "left_text",
                    "right_text",
                    "prompt",
                ],
            )

    return train.select("source_id", "fold", "text", "label").mapInPandas(make, PROMPT_SCHEMA)


def contextual_candidates(prompts: "DataFrame", generated: "DataFrame") -> "DataFrame":
    """Join the prompts with the model's fills (a :func:`common.models.generation.on_ray.pool.generate` output keyed by
    ``prompt_id``): rows of the candidate schema plus ``reason``, null for candidates; a prompt whose
    generation was quarantined keeps the generation's reason, one without a generated row gets ``no
    generation``, and one whose fill leaves no text ``empty text``; the candidate text is the fill between the
    span's neighbours, whitespace normalised (an empty fill deletes the span). One row per prompt (one sample
    each), so prompts = candidates + rejected."""
    from pyspark.sql import functions as F

    fills = generated.select(
        F.col("source_id").alias("prompt_id"),
        F.col("generated_text").alias("fill"),
        F.col("reason").alias("_gen_reason"),
    )
    text = F.trim(
        F.regexp_replace(F.concat_ws(" ", "left_text", F.coalesce("fill", F.lit("")), "right_text"), r"\s+", " ")
    )
    reason = (
        F.when(F.col("_gen_reason").isNotNull(), F.col("_gen_reason"))
        .when(F.col("fill").isNull(), F.lit("no generation"))
        .when(F.length(text) == 0, F.lit("empty text"))
    )
    return prompts.join(fills, "prompt_id", "left").select(
        "source_id",
        "fold",
        "source_text",
        "label",
        F.lit(BACKEND).alias("backend"),
        "aug_idx",
        text.alias("text"),
        "fill",
        reason.alias("reason"),
    )
