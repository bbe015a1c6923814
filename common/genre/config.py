"""Genre transfer across topics' config (paper 5, METHODS.md section 5): the topic model, keywords, the
off/on-topic splits, the per-genre generators and the evaluation. Defaults are the paper's settings where
it fixes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from common.models.classifier_config import EncoderConfig, FastTextConfig
from common.models.config import (
    FineTuneConfig,
    GenerationConfig,
    T5ModelConfig,
    check_generator,
)
from common.platform.config import check


@dataclass
class TopicModelConfig:
    """The topic model (Spark MLlib LDA; the paper used an embedding topic model, ETM) and its text stages."""

    # The paper: 25 topics (chosen on ukWac by coherence x diversity).
    topics: int = 25
    # The topic model (Spark ML LDA).
    kind: Literal["lda"] = "lda"
    # passages: fit on the corpus cut into ``genre.window_chars`` passages (documents then get their
    # topics from the fitted model); documents: on whole documents. Online LDA on a few hundred long
    # documents (Brown: 500 of 12k characters) collapses into one or two topics (measured: one topic held
    # 97% of the weight with Spark's defaults); on their 6k passages it spreads over all of them.
    fit_on: Literal["passages", "documents"] = "passages"
    # LDA's optimizer: online (variational Bayes, the paper's) or em.
    optimizer: Literal["online", "em"] = "online"
    # LDA iterations.
    max_iter: int = 50
    # Online LDA's tau0 (Spark's default 1024 down-weights early iterations so much that a small corpus
    # never leaves its first collapse) and kappa.
    learning_offset: float = 16.0
    # Online LDA's learning-rate decay (kappa).
    learning_decay: float = 0.51
    # CountVectorizer: the vocabulary's size and document-frequency bounds (a share when < 1).
    vocab_size: int = 20_000
    # Words in fewer documents than this are left out of the vocabulary.
    min_df: float = 2.0
    # A share of the documents (Spark reads 1.0 and above as a count); None: no upper bound.
    max_df: Optional[float] = 0.5
    # Shorter tokens are left out.
    min_token_length: int = 3
    # LDA's input layout: the fit rows are hash-partitioned by their text into this many partitions and
    # sorted within them. Online LDA draws its mini-batches per partition, so the same rows in another
    # layout (another core count, shuffle setting, file count or a compacted table) gave other topics;
    # fixed by the data, they depend on the rows and the seed only. A cluster fitting millions of passages
    # raises it (the parallelism of the fit).
    fit_partitions: int = 4
    # Log the fitted model's log perplexity on the corpus (Spark's variational bound): one more inference
    # pass over every document, about 4 s of the 2-core demo's topic job, which turns it off.
    log_perplexity: bool = True

    def __post_init__(self) -> None:
        check(self.topics >= 2, "genre.topic_model.topics", "must be >= 2")
        for name in ("max_iter", "vocab_size", "min_token_length", "fit_partitions"):
            check(getattr(self, name) >= 1, f"genre.topic_model.{name}", "must be >= 1")
        check(
            self.max_df is None or 0 < self.max_df < 1,
            "genre.topic_model.max_df",
            "must lie in (0, 1) (a share of documents), or be null for no bound",
        )
        check(self.learning_offset > 0, "genre.topic_model.learning_offset", "must be > 0")
        check(0.5 < self.learning_decay <= 1, "genre.topic_model.learning_decay", "must lie in (0.5, 1]")


@dataclass
class SplitConfig:
    """Per topic t and size N: the on-topic test set, the off-topic and on-topic training sets."""

    # N documents per genre (the paper: 30, 100, 1000), capped by what each genre holds: a genre of n
    # documents gives min(test_per_genre, max(1, floor(n * test_fraction))) on-topic test documents and at
    # most half of the rest to each training set, so test, off-topic and on-topic sets never overlap. An N
    # that every genre caps to the same sizes as a smaller N is dropped (it would repeat that row).
    sizes: list[int] = field(default_factory=lambda: [30, 100, 1000])
    # Share of each genre's documents held out as test (at most test_per_genre).
    test_fraction: float = 0.2
    # The paper's on-topic test sets hold 300 documents of each genre.
    test_per_genre: int = 300
    # Topics evaluated: these indices; else the ``max_topics`` most prevalent ones (None: all).
    topics: Optional[list[int]] = None
    # Evaluate only the most prevalent topics, this many (null: every topic).
    max_topics: Optional[int] = None

    def __post_init__(self) -> None:
        check(bool(self.sizes) and all(n >= 1 for n in self.sizes), "genre.split.sizes", "must be >= 1")
        check(0 < self.test_fraction < 1, "genre.split.test_fraction", "must lie in (0, 1)")
        check(self.test_per_genre >= 1, "genre.split.test_per_genre", "must be >= 1")
        check(self.max_topics is None or self.max_topics >= 1, "genre.split.max_topics", "must be >= 1")


def _generator_model() -> T5ModelConfig:
    # The suite's offline pretrained generator. Passages of 1000 characters: ~250 WordPiece tokens.
    # A causal generator (smollm2 / causal_checkpoint) is prompted with a passage's keywords.
    return T5ModelConfig(
        kind="warm_minilm",
        max_source_length=48,
        max_target_length=256,
        prompt="Keywords: {source}\nA text with these keywords:",
    )


def _generator_fine_tune() -> FineTuneConfig:
    # The paper: 16 epochs at learning rate 0.001 (Simple Transformers' Adam on t5-small; conf/databricks.yaml
    # keeps it). The warm-started model takes 1e-4: at 3e-4 it already forgets what it was started from
    # (benchmarks/generation/generator_quality.py's grid), at 1e-3 it writes noise.
    return FineTuneConfig(epochs=16, learning_rate=1e-4, batch_size=16, checkpoint_every=0)


def _generator_generation() -> GenerationConfig:
    # The paper: one sample per prompt, top-k 50, top-p 0.95.
    return GenerationConfig(
        n_samples=1,
        mode="sample",
        top_k=50,
        top_p=0.95,
        max_new_tokens=256,
        max_source_tokens=64,
        bucket_size=32,
        batch_size=64,
    )


@dataclass
class GeneratorConfig:
    """One keywords-to-text model per genre (and per topic and N: each learns from that split's off-topic
    training documents only). The MiniLM-warm-started model by default; t5-small (the paper's) by
    ``model.kind: checkpoint``; the demo configs (local, demo) name small scratch T5s, and the measured CPU
    configs (conf/genre_brown.yaml, conf/genre_ginco.yaml) one genre-conditioned SmolLM2 (``per_genre: false``)."""

    model: T5ModelConfig = field(default_factory=_generator_model)
    fine_tune: FineTuneConfig = field(default_factory=_generator_fine_tune)
    generation: GenerationConfig = field(default_factory=_generator_generation)
    # Training pairs per document: its first this many passages (None: all).
    max_passages_per_doc: Optional[int] = None
    # Synthetic documents per off-topic training document: the paper's 1:1 ("the same number of original and
    # synthetic documents", its best ratio; more was no significant gain, few a significant drop). Per
    # (topic, N), K = max(1, round(ratio x off-topic documents / genres)) on-topic test documents are drawn by
    # seed and every genre's generator writes one document from each one's keywords: K per genre, about
    # ratio x the off-topic set in all. None: every test document prompts every generator (|test| per genre).
    synthetic_ratio: Optional[float] = 1.0
    # The paper's Table-5 control: as many synthetic documents again, from the keywords of off-topic training
    # documents (drawn by seed), evaluated as ``off_keywords`` (off-topic + these). No topic transfer: what
    # more data alone does. Doubles generation.
    off_topic_control: bool = False
    # Fine-tuned models an actor of the generation pool keeps loaded.
    cache_models: int = 4
    # The paper: one generator per genre (per topic and N). false: one genre-conditioned generator per (topic,
    # N), fed "<genre> | <keywords>" (common.genre.generation.conditioned_source) in training and generation: one
    # model learns from every genre's passages, so a pretrained generator gets all the optimiser steps
    # instead of a few per genre, and one model is saved, converted and loaded instead of one per genre.
    per_genre: bool = True

    def __post_init__(self) -> None:
        check(
            self.max_passages_per_doc is None or self.max_passages_per_doc >= 1,
            "genre.generator.max_passages_per_doc",
            "must be >= 1",
        )
        check(
            self.synthetic_ratio is None or self.synthetic_ratio > 0,
            "genre.generator.synthetic_ratio",
            "must be > 0, or null for one synthetic document per test document and genre",
        )
        check(self.cache_models >= 1, "genre.generator.cache_models", "must be >= 1")
        check_generator(self.model, self.fine_tune, "genre.generator")


@dataclass
class EvalConfig:
    """The genre classifiers: on_topic, off_topic and augmented rows per topic and N, R seeds."""

    # fasttext (cheap, CPU) and/or encoder (``eval.encoder`` fine-tuned as a plain classifier, the paper's kind).
    models: list[Literal["fasttext", "encoder"]] = field(default_factory=lambda: ["fasttext"])
    # Classifier trainings per setting, each with its own seed.
    repeats: int = 5
    # 100 epochs: a training set is a few hundred 1000-character windows, and fastText's shared default of
    # 20 epochs leaves it predicting the majority genre there (measured on Brown: macro-F1 0.02).
    fasttext: FastTextConfig = field(default_factory=lambda: FastTextConfig(epoch=100))
    # The paper's classifier: BERT-base fine-tuned at lr 1e-5 for 6 epochs (MiniLM by default here;
    # conf/databricks.yaml names BERT-base); 256 tokens hold a cleaned 1000-character window. A plain
    # classifier: no masked-LM head. The paper keeps the epoch that scored best on a development set; with
    # N = 30 documents per genre none is carved out here, so the last epoch is the model.
    encoder: EncoderConfig = field(
        default_factory=lambda: EncoderConfig(max_length=256, epochs=6, learning_rate=1e-5, mlm_weight=0.0)
    )
    # The paper's Table-5 row "0 original + synthetic": a classifier trained on the synthetic documents alone
    # (``synthetic_only``), as many as the augmented row adds.
    synthetic_only: bool = False
    # Not the paper's: ``off_topic_balanced``, the off-topic documents repeated to the augmented set's count per
    # genre. Synthetic documents come in equal numbers per genre, while off-topic training sets hold 2 to 30
    # documents a genre; under macro-F1 that rebalancing alone can lift the augmented row.
    balanced_control: bool = False

    def __post_init__(self) -> None:
        check(bool(self.models), "genre.eval.models", "must name at least one model")
        check(self.repeats >= 1, "genre.eval.repeats", "must be >= 1")


@dataclass
class GenreConfig:
    """Genre transfer across topics (METHODS.md section 5)."""

    topic_model: TopicModelConfig = field(default_factory=TopicModelConfig)
    # Keywords kept per passage (the paper: 10), in the passage's word order.
    keywords: int = 10
    # Generator passages and classifier windows: this many characters (the paper: 1000-character windows
    # randomly positioned in each document), cut at word boundaries.
    window_chars: int = 1000
    split: SplitConfig = field(default_factory=SplitConfig)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        check(self.keywords >= 1, "genre.keywords", "must be >= 1")
        check(self.window_chars >= 50, "genre.window_chars", "must be >= 50")
        self.check_topics()

    def check_topics(self) -> None:
        """Raises ConfigError when ``split.topics`` names a topic the topic model does not have: at load, and
        again by the split job (a notebook may change the config after loading it)."""
        k = self.topic_model.topics
        bad = [t for t in self.split.topics or [] if not 0 <= t < k]
        check(not bad, "genre.split.topics", f"{bad} are not topics of a {k}-topic model (0..{k - 1})")
