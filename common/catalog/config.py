"""The catalog methods' config (consistency paper, METHODS.md section 1): grouping, CST, CGA."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from common.models.classifier_config import FastTextConfig
from common.models.config import (
    FineTuneConfig,
    GenerationConfig,
    T5ModelConfig,
    check_generator,
    ctranslate2_generation,
)
from common.platform.config import check


@dataclass
class GroupingConfig:
    """Catalog grouping: given group_id, else connected components over shared identifiers."""

    # Identifier columns that link items into one group when no group_id is given (connected components over shared
    # values).
    identifiers: list[Literal["gtin", "mpn", "brand_model"]] = field(
        default_factory=lambda: ["gtin", "mpn", "brand_model"]
    )
    # Consistency paper: group sizes 2..192. Groups outside go to quarantine.
    min_size: int = 2
    # The largest group kept (the consistency paper's 192); larger ones go to quarantine.
    max_size: int = 192
    # An identifier value shared by more items than this ("N/A", a dummy GTIN) is ignored and reported.
    max_items_per_identifier: int = 192
    # Connected components: the most label-propagation rounds before the job fails (ConvergenceError).
    max_iterations: int = 100

    def __post_init__(self) -> None:
        check(2 <= self.min_size <= self.max_size, "grouping.min_size", "must satisfy 2 <= min_size <= max_size")
        check(self.max_items_per_identifier >= 2, "grouping.max_items_per_identifier", "must be >= 2")
        check(bool(self.identifiers), "grouping.identifiers", "must name at least one identifier")


ConsistencyMethod = Literal["baseline", "cs_blind", "cst_full", "cst_ss"]


@dataclass
class ConsistencyConfig:
    """The consistency paper's experiment (METHODS.md section 1); defaults are the paper's."""

    # The methods trained and compared: baseline, cs_blind (colour/size words removed), cst_full and cst_ss
    # (consistency training on all groups / on groups sub-sampled to D_L's category distribution).
    methods: list[ConsistencyMethod] = field(default_factory=lambda: ["baseline", "cs_blind", "cst_full", "cst_ss"])
    # h(X_i; f_base): the group's most confident prediction (paper's best) or the majority vote.
    pseudo_label: Literal["max_confidence", "majority"] = "max_confidence"
    # Accuracy test: 23k of 184k labeled items (a fraction < 1, or a count >= 1).
    accuracy_test: float = 0.125
    # Consistency test: 9k of 363k groups, one pair of different titles each (fraction or count).
    consistency_test: float = 0.025
    # Group-disjoint accuracy test: every labeled item whose title shares a catalog group with a drawn test title
    # joins the test (for labeled items drawn from the catalog: a product's other versions then test, not train).
    group_disjoint: bool = False
    # The catalog is matched to D_L's histogram at this level before the consistency test (paper: L1),
    # and CST-SS matches D_U at this level too.
    match_level: int = 1
    # Classifier trainings per method, each with its own seed (mean and std are reported).
    repeats: int = 5
    # cs_blind's colour words: a file on the driver, one per line (``re:`` lines are regexes); null: the suite's own
    # list (common/catalog/dictionaries/colours.txt, shipped inside the package and `make dist`'s archive).
    colours: Optional[str] = None
    # cs_blind's size words, likewise; null: the suite's own (common/catalog/dictionaries/sizes.txt).
    sizes: Optional[str] = None
    fasttext: FastTextConfig = field(default_factory=FastTextConfig)

    def __post_init__(self) -> None:
        check(bool(self.methods), "consistency.methods", "must name at least one method")
        check(self.accuracy_test > 0, "consistency.accuracy_test", "must be > 0 (fraction < 1 or count)")
        check(self.consistency_test > 0, "consistency.consistency_test", "must be > 0 (fraction < 1 or count)")
        check(self.repeats >= 1, "consistency.repeats", "must be >= 1")
        check(self.match_level >= 1, "consistency.match_level", "must be >= 1")


@dataclass
class CGASweepConfig:
    """The paper's Figure 2: T at a fixed N, N at T = 0.7, and T without sub-sampling."""

    # Run the Figure-2 sweep (cga-sweep); false skips it.
    enabled: bool = True
    # The thresholds T of the sweep at fixed_size.
    thresholds: list[float] = field(default_factory=lambda: [0.5, 0.6, 0.7, 0.8])
    # The D_aug sizes N of the sweep at fixed_threshold.
    sizes: list[int] = field(default_factory=lambda: [50_000, 100_000, 200_000, 400_000])
    # N while T varies.
    fixed_size: int = 200_000
    # T while N varies.
    fixed_threshold: float = 0.7
    # HFT trainings per sweep point (the main CGA row uses consistency.repeats).
    repeats: int = 1

    def __post_init__(self) -> None:
        check(all(0 <= t <= 1 for t in self.thresholds), "cga.sweep.thresholds", "must lie in [0, 1]")
        check(all(n >= 1 for n in self.sizes) and self.fixed_size >= 1, "cga.sweep.sizes", "must be >= 1")
        check(self.repeats >= 1, "cga.sweep.repeats", "must be >= 1")


# The causal generators' prompt (kinds smollm2 / causal_checkpoint): a title in, another title of the same
# product out (benchmarks/generation/generator_quality.py measures it on WDC).
CGA_PROMPT = "Product title: {source}\nThe same product, another title:"


@dataclass
class CGAConfig:
    """Consistent Generative Augmentation (METHODS.md section 1); defaults are the paper's."""

    model: T5ModelConfig = field(default_factory=lambda: T5ModelConfig(prompt=CGA_PROMPT))
    fine_tune: FineTuneConfig = field(default_factory=FineTuneConfig)
    generation: GenerationConfig = field(default_factory=ctranslate2_generation)
    # Ordered pairs of different versions per group: s(s-1) for a group of s titles (a 192-item group
    # gives 36,672); None keeps them all, as the paper does.
    max_pairs_per_group: Optional[int] = None
    # The filter's similarity of a sample to its source: bleu (the paper's) or minilm (cosine of MiniLM sentence
    # embeddings).
    scorer: Literal["bleu", "minilm"] = "bleu"
    # The minilm scorer's encoder: CTranslate2 where it can run the model (auto), or the one named.
    scorer_engine: Literal["auto", "ctranslate2", "torch"] = "auto"
    # Samples scoring at least this against their source enter D_aug (the paper's T = 0.7).
    threshold: float = 0.7
    # Optional sub-sample of the filtered samples into D_aug (None: all of them, the paper's main result).
    n: Optional[int] = None
    # The D_L titles the generator writes variants of: all of them (None, the paper), or a seeded sample of
    # this many (table cga_sources): a generation budget, for a prompted generator on CPU or a huge D_L.
    sources: Optional[int] = None
    sweep: CGASweepConfig = field(default_factory=CGASweepConfig)

    def __post_init__(self) -> None:
        check(0 <= self.threshold <= 1, "cga.threshold", "must be in [0, 1]")
        check_generator(self.model, self.fine_tune, "cga")
        check(self.n is None or self.n >= 1, "cga.n", "must be >= 1 (or null for no sub-sampling)")
        check(self.sources is None or self.sources >= 1, "cga.sources", "must be >= 1 (or null for every D_L title)")
        check(
            self.max_pairs_per_group is None or self.max_pairs_per_group >= 1,
            "cga.max_pairs_per_group",
            "must be >= 1 (or null)",
        )
