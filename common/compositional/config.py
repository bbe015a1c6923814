"""Compositional multi-label augmentation's config (paper 4, METHODS.md section 4): the compositional
split, the label-composition generator, the conditional text generators, quality control and the
evaluation. Defaults are the paper's settings where it fixes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from common.models.classifier_config import EncoderConfig, FastTextConfig
from common.models.config import (
    FineTuneConfig,
    GenerationConfig,
    T5ModelConfig,
    check_generator,
    in_context,
)
from common.models.generator_summary import generator_facts
from common.platform.config import check

GENERATORS = ("concat", "t5_labels", "label_prefix")
Classifier = Literal["fasttext", "encoder"]


def classifier_encoder() -> EncoderConfig:
    """The multi-label encoder classifier: MiniLM here, BERT in the paper, whose classifier trains at a
    learning rate of 2e-5 (its appendix); a plain classifier, so no masked-LM loss."""
    return EncoderConfig(learning_rate=2e-5, mlm_weight=0.0)


@dataclass
class SplitConfig:
    """The compositional (CG) split and its iid twin of the same sizes."""

    # The paper: 20 label compositions (label sets of >= 2 labels) go to the test side, a support set of
    # N_s = 50 test-side examples joins training.
    compositions: int = 20
    # N_s: training examples kept per test composition's labels (the paper's 50).
    support: int = 50
    # A test composition has at least this many labels.
    min_labels: int = 2
    # A composition goes to the test side only with this many examples (support and test both draw on it).
    min_examples: int = 20
    # ... and at most this many (None: no bound). Drawn at random, a few very frequent compositions can
    # put most of a small corpus on the test side; the paper's SemEval split keeps 13% there (1,403 test
    # examples of 10,983).
    max_examples: Optional[int] = None

    def __post_init__(self) -> None:
        check(self.compositions >= 1, "compositional.split.compositions", "must be >= 1")
        check(self.support >= 1, "compositional.split.support", "must be >= 1")
        check(self.min_labels >= 2, "compositional.split.min_labels", "must be >= 2 (a composition has 2+ labels)")
        check(self.min_examples >= 1, "compositional.split.min_examples", "must be >= 1")
        check(
            self.max_examples is None or self.max_examples >= self.min_examples,
            "compositional.split.max_examples",
            "must be >= min_examples (or null)",
        )


@dataclass
class LabelGeneratorConfig:
    """P(y), the label-composition generator: a sequence model over the support set's label phrases (the
    paper fine-tunes GPT2; here a first-order Markov chain over labels in vocabulary order, start to end,
    with add-alpha smoothing so that compositions the support set never showed keep some probability)."""

    # How new label sets are drawn: markov (a chain over the training sets' labels).
    kind: Literal["markov"] = "markov"
    # Add-alpha smoothing of the label chain's transitions.
    smoothing: float = 0.1
    # Label sets longer than this are redrawn.
    max_labels: int = 6
    # Draws stop after this many, even when fewer than the target were novel.
    max_draws: int = 200_000

    def __post_init__(self) -> None:
        check(self.smoothing >= 0, "compositional.label_generator.smoothing", "must be >= 0")
        check(self.max_labels >= 2, "compositional.label_generator.max_labels", "must be >= 2")
        check(self.max_draws >= 1, "compositional.label_generator.max_draws", "must be >= 1")


def _generation() -> GenerationConfig:
    # One text per prompt: the prompts themselves follow P(y), one per accepted draw.
    return GenerationConfig(
        n_samples=1,
        mode="sample",
        top_k=50,
        top_p=0.95,
        max_new_tokens=48,
        max_source_tokens=48,
        bucket_size=64,
        batch_size=128,
    )


@dataclass
class TextGeneratorConfig:
    """P(x | y), trained on train ∪ support: ``concat`` (single-label training texts of each label, joined),
    ``t5_labels`` (a seq2seq model fed the label phrases: the Flan-T5 baseline) and ``label_prefix`` (LS-PT:
    one learned prefix block of ``prefix_length`` vectors per label, concatenated in label order as the
    encoder's input, so a label's representation never depends on its co-labels)."""

    # The generators compared: concat (real single-label texts joined), t5_labels (label names -> text), label_prefix
    # (LS-PT, learned label prefixes).
    methods: list[Literal["concat", "t5_labels", "label_prefix"]] = field(default_factory=lambda: list(GENERATORS))
    # A causal kind: t5_labels writes a text after this prompt with the label names in it; label_prefix puts the
    # labels' learned blocks ahead of the text instead (the paper's prefix-tuned GPT-2).
    model: T5ModelConfig = field(
        default_factory=lambda: T5ModelConfig(prompt="Labels: {source}\nA text with these labels:")
    )
    # The paper: learning rate 5e-5 for LS-PT (GPT2, 110M); a higher rate suits the smaller models here.
    fine_tune: FineTuneConfig = field(
        default_factory=lambda: FineTuneConfig(epochs=3, learning_rate=1e-4, batch_size=32, checkpoint_every=0)
    )
    generation: GenerationConfig = field(default_factory=_generation)
    # LS-PT: prefix vectors per label (L).
    prefix_length: int = 8

    def __post_init__(self) -> None:
        check(bool(self.methods), "compositional.generator.methods", "must name at least one generator")
        check(self.prefix_length >= 1, "compositional.generator.prefix_length", "must be >= 1")
        check_generator(self.model, self.fine_tune, "compositional.generator")
        # In-context generation trains nothing, and LS-PT's label prefixes are weights that must be learned.
        check(
            "label_prefix" not in self.methods or not in_context(self.model, self.fine_tune),
            "compositional.generator.methods",
            "label_prefix (LS-PT) learns a prefix per label, so it needs a "
            "fine-tune (fine_tune.epochs >= 1 or max_steps); in-context generation (epochs 0) serves t5_labels only",
        )


@dataclass
class QualityConfig:
    """Quality control: over-generate ``overgenerate`` x ``target`` texts per generator, predict their labels
    with a multi-label classifier trained on train ∪ support, keep the ``target`` with the highest
    Jaccard(predicted, intended) (the paper, SemEval: 2,000 -> 1,000). The paper's filter is a BERT
    classifier (``model: encoder``, ``encoder`` its settings); fastText is the cheap CPU default."""

    # Synthetic texts kept per generator after the quality filter.
    target: int = 1000
    # Candidates generated per kept text.
    overgenerate: float = 2.0
    # The QC classifier: fasttext or encoder (the paper's kind: a fine-tuned encoder).
    model: Classifier = "fasttext"
    encoder: EncoderConfig = field(default_factory=classifier_encoder)
    # One-vs-all sums a binary loss per label: fastText's usual lr 0.5 diverges (NaN) on small inputs.
    fasttext: FastTextConfig = field(default_factory=lambda: FastTextConfig(loss="ova", epoch=25, lr=0.2))

    def __post_init__(self) -> None:
        check(self.target >= 1, "compositional.qc.target", "must be >= 1")
        check(self.overgenerate >= 1, "compositional.qc.overgenerate", "must be >= 1")


@dataclass
class EvalConfig:
    """The multi-label classifiers: ``no_aug`` and each generator, on the CG and iid splits, R seeds, for
    each of ``models``: fastText one-vs-all (cheap, CPU) and/or ``encoder`` (the paper's BERT classifier:
    MiniLM with a sigmoid head here, any HF encoder by ``encoder.name_or_path``; GPU by ``encoder.num_gpus``)."""

    # The evaluation classifiers (fasttext, encoder).
    models: list[Classifier] = field(default_factory=lambda: ["fasttext"])
    # Classifier trainings per row, each with its own seed.
    repeats: int = 5
    # The paper reserves 5% of the training data for validation: the decision threshold is chosen there.
    validation_fraction: float = 0.05
    fasttext: FastTextConfig = field(default_factory=lambda: FastTextConfig(loss="ova", epoch=25, lr=0.2))
    # The Figure-4 curve: each generator also at these shares of its kept synthetic texts (CG split).
    curve: list[float] = field(default_factory=lambda: [0.25, 0.5])
    encoder: EncoderConfig = field(default_factory=classifier_encoder)

    def __post_init__(self) -> None:
        check(bool(self.models), "compositional.eval.models", "must name at least one classifier")
        check(self.repeats >= 1, "compositional.eval.repeats", "must be >= 1")
        check(0 < self.validation_fraction < 0.5, "compositional.eval.validation_fraction", "must lie in (0, 0.5)")
        check(all(0 < c < 1 for c in self.curve), "compositional.eval.curve", "shares must lie in (0, 1)")


@dataclass
class CompositionalConfig:
    """Compositional multi-label augmentation (METHODS.md section 4)."""

    split: SplitConfig = field(default_factory=SplitConfig)
    label_generator: LabelGeneratorConfig = field(default_factory=LabelGeneratorConfig)
    generator: TextGeneratorConfig = field(default_factory=TextGeneratorConfig)
    qc: QualityConfig = field(default_factory=QualityConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def card_facts(self) -> tuple[dict, dict]:
        """(generator, filter) as the kept synthetic dataset's card shows them."""
        g, qc = self.generator, self.qc
        generator = {
            "methods": g.methods,
            "label sets": f"drawn by {self.label_generator.kind}",
            **generator_facts(g.model, g.fine_tune, g.generation),
        }
        return generator, {
            "QC classifier": qc.model,
            "kept per method": qc.target,
            "candidates per kept text": qc.overgenerate,
        }
