"""What a fine-tune takes and gives: which model (:class:`ModelSpec`: a seq2seq kind, a causal LM, a served
endpoint, and a scratch model's shape), how it trains (:class:`TrainSpec`: epochs or a step bound, rate, batches,
seed), what came out (:class:`FineTuneResult`: the losses and throughput), and the file that marks a folder as a
saved model (:data:`MODEL_MARKER`). Read by the fine-tune loop (:mod:`common.models.generation.kinds.seq2seq`), its Ray
tasks (:mod:`common.models.generation.on_ray.fine_tune_ray`) and the stages and jobs that start them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from common.models.config import FineTuneConfig, T5ModelConfig

MODEL_MARKER = "config.json"  # a folder holding this file is a saved model


@dataclass(frozen=True)
class ModelSpec:
    """Which model to fine-tune (``kind``), and the shape of a scratch model."""

    kind: str = "scratch_t5"
    model_name_or_path: Optional[str] = None
    vocab_size: int = 2000
    d_model: int = 64
    d_ff: int = 128
    num_layers: int = 2
    num_heads: int = 4
    max_source_length: int = 48
    max_target_length: int = 48
    # Label-specific prefixes (:mod:`common.models.generation.kinds.label_prefix`): with labels, a source text is a
    # label set (names joined by ``prefix_separator``) and the encoder reads its labels' learned blocks.
    prefix_labels: tuple[str, ...] = ()
    prefix_length: int = 0
    prefix_separator: str = ","
    # Causal kinds (common.models.generation.kinds.causal_lm): the prompt template ({source} is filled in), LoRA's rank
    # (0: every weight trains), and the examples an in-context generator's prompt holds.
    prompt: str = "{source}\n"
    lora_r: int = 16
    lora_alpha: int = 32
    in_context: int = 4
    endpoint: Optional[dict] = None  # kind endpoint: EndpointConfig's fields (the key's variable, never the key)

    @classmethod
    def from_config(cls, cfg: "T5ModelConfig") -> "ModelSpec":
        """The spec of a ``*.model`` config section (a checkpoint when ``name_or_path`` is set)."""
        shape = (
            {}
            if cfg.kind != "scratch_t5"
            else {
                "vocab_size": cfg.scratch.vocab_size,
                "d_model": cfg.scratch.d_model,
                "d_ff": cfg.scratch.d_ff,
                "num_layers": cfg.scratch.num_layers,
                "num_heads": cfg.scratch.num_heads,
            }
        )
        return cls(
            kind=cfg.kind,
            model_name_or_path=cfg.name_or_path,
            max_source_length=cfg.max_source_length,
            max_target_length=cfg.max_target_length,
            prompt=cfg.prompt,
            lora_r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            in_context=cfg.in_context_examples,
            endpoint=asdict(cfg.endpoint) if cfg.served else None,
            **shape,
        )

    @property
    def causal(self) -> bool:
        """True for a decoder-only language model (``smollm2``, ``causal_checkpoint``)."""
        from common.models.generation.kinds.causal_lm import is_causal

        return is_causal(self.kind)


@dataclass(frozen=True)
class TrainSpec:
    """Optimisation: epochs, learning rate, per-step batch and gradient accumulation (effective batch =
    ``batch_size * grad_accumulation``), seed."""

    epochs: int = 3
    learning_rate: float = 3e-4
    batch_size: int = 32
    grad_accumulation: int = 1
    seed: int = 42
    # Length-grouped batches (common.models.generation.kinds.batching): about 2x the steps/s on title pairs, at a
    # slightly higher loss per step; off by default, as the papers' epochs and rates assume random batches.
    group_by_length: bool = False
    # A bound on optimiser steps (transformers' ``max_steps``): > 0 replaces ``epochs`` by as many passes
    # over the pairs as the steps need, the last one cut short; 0 trains ``epochs`` epochs.
    max_steps: int = 0

    @classmethod
    def from_config(cls, cfg: "FineTuneConfig", seed: int) -> "TrainSpec":
        """The spec of a ``*.fine_tune`` config section."""
        return cls(
            epochs=cfg.epochs,
            learning_rate=cfg.learning_rate,
            batch_size=cfg.batch_size,
            grad_accumulation=cfg.grad_accumulation,
            seed=seed,
            group_by_length=cfg.group_by_length,
            max_steps=cfg.max_steps,
        )

    def steps_per_epoch(self, n_pairs: int) -> int:
        """Optimiser steps in one pass over ``n_pairs`` pairs (the last step may take fewer micro-batches)."""
        return math.ceil(math.ceil(n_pairs / self.batch_size) / self.grad_accumulation)

    def planned_epochs(self, n_pairs: int) -> int:
        """How many passes over ``n_pairs`` pairs the run makes: ``epochs``, or with ``max_steps`` the passes
        that hold that many optimiser steps (the last pass may stop early)."""
        return math.ceil(self.max_steps / self.steps_per_epoch(n_pairs)) if self.max_steps else self.epochs


@dataclass
class FineTuneResult:
    """Where the model went, the mean loss of each optimiser step, and throughput."""

    path: str
    step_losses: list[float] = field(default_factory=list)
    examples: int = 0
    seconds: float = 0.0
    device: str = "cpu"
    dtype: str = "float32"
    tokens: int = 0  # source and target tokens trained on, padding not counted (tokens/s = tokens / seconds)
    padded_tokens: int = 0  # the same with padding: tokens / padded_tokens is the batches' fill rate
