"""The query-graph and query-reformulation config (METHODS.md section 2); defaults are the paper's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from common.models.config import (
    FineTuneConfig,
    GenerationConfig,
    T5ModelConfig,
    check_generator,
    ctranslate2_generation,
)
from common.platform.config import check


@dataclass
class QueryGraphConfig:
    """The query-reformulation paper's mining half (METHODS.md section 2); defaults are the paper's."""

    # Minimum aggregated count per (query, product, interaction) to keep, by interaction type.
    activity_threshold: dict[str, int] = field(default_factory=lambda: {"click": 1, "add_to_cart": 1, "purchase": 1})
    # The minimum count for interaction types activity_threshold does not name.
    default_activity_threshold: int = 1
    # Interaction types whose counts form P(p|q) for the click entropy.
    click_interactions: list[str] = field(default_factory=lambda: ["click"])
    # Two queries co-occur when they lead to this interaction with the same product (paper: purchase).
    cooccurrence_interactions: list[str] = field(default_factory=lambda: ["purchase"])
    # Query-query similarity over shared products: pmi (the paper's) or npmi.
    similarity: Literal["pmi", "npmi"] = "pmi"
    # Query pairs co-occurring on fewer products than this get no similarity.
    min_support: int = 1
    # The paper shows each query's top 6 similarities.
    top_k: int = 6
    # Hub guard: at most this many queries per product enter the self-join (the most frequent ones).
    max_queries_per_product: int = 1000
    # Similar queries and training pairs keep specificity within 10% of the seed's (relative: |s - s0| <= 0.1 s0).
    specificity_tolerance: float = 0.1
    # specificity_tolerance as a share of the seed's specificity (relative) or in specificity units (absolute).
    tolerance_mode: Literal["relative", "absolute"] = "relative"
    # Subgraph clustering: a vertex whose clustering coefficient exceeds this seeds a cluster with its neighbours (the
    # paper's 0.33).
    c3_threshold: float = 0.33
    # Subgraph clustering: two clusters merge when they share at least theta x the smaller one's vertices (the paper's
    # 0.4).
    theta: float = 0.4
    # Subgraph clustering: a vertex whose internal / external degree is below this leaves its cluster (the paper's
    # 0.5).
    prune_ratio: float = 0.5
    # Keep clusters with fewer than this many vertices (paper: < 10), and at least 2 (a pair).
    max_cluster_size: int = 10
    # Product subgraphs larger than this are skipped (and reported) rather than clustered.
    max_subgraph_vertices: int = 5000

    def __post_init__(self) -> None:
        for name in (
            "min_support",
            "top_k",
            "max_queries_per_product",
            "max_cluster_size",
            "max_subgraph_vertices",
            "default_activity_threshold",
        ):
            check(getattr(self, name) >= 1, f"query_graph.{name}", "must be >= 1")
        for name, value in self.activity_threshold.items():
            check(value >= 0, f"query_graph.activity_threshold.{name}", "must be >= 0")
        check(0 <= self.specificity_tolerance <= 1, "query_graph.specificity_tolerance", "must be in [0, 1]")
        check(0 <= self.c3_threshold <= 1, "query_graph.c3_threshold", "must be in [0, 1]")
        check(0 < self.theta <= 1, "query_graph.theta", "must be in (0, 1]")
        check(self.prune_ratio >= 0, "query_graph.prune_ratio", "must be >= 0")
        check(bool(self.click_interactions), "query_graph.click_interactions", "must not be empty")
        check(bool(self.cooccurrence_interactions), "query_graph.cooccurrence_interactions", "must not be empty")


@dataclass
class MatcherConfig:
    """The downstream check of query reformulation: a query -> product fastText matcher (hierarchical
    softmax over product ids, a cheap extreme multi-label model), original log vs augmented log."""

    # Queries held out to evaluate the matcher (never in any training log).
    holdout_fraction: float = 0.2
    # The k of P@k and R@k.
    ks: list[int] = field(default_factory=lambda: [1, 5, 10])
    # Matcher fastText epochs.
    epoch: int = 25
    # Matcher fastText learning rate.
    lr: float = 0.5
    # Matcher fastText vector size.
    dim: int = 50
    # Matcher fastText word n-gram length.
    word_ngrams: int = 2
    # Matcher fastText shortest character n-gram.
    minn: int = 2
    # Matcher fastText longest character n-gram.
    maxn: int = 4
    # Matcher fastText hash buckets for n-grams.
    bucket: int = 200_000
    # Matchers per log, each with its own seed (the run's seed + repeat): on the demo world one seed's P@1 moves
    # by about a point between seeds, as much as the two logs differ, so one matcher cannot tell them apart.
    repeats: int = 5

    def __post_init__(self) -> None:
        check(0 < self.holdout_fraction < 1, "query_reformulation.matcher.holdout_fraction", "must be in (0, 1)")
        check(bool(self.ks) and all(k >= 1 for k in self.ks), "query_reformulation.matcher.ks", "must be >= 1")
        check(self.repeats >= 1, "query_reformulation.matcher.repeats", "must be >= 1")


# The causal generators' prompt (kinds smollm2 / causal_checkpoint): a query in, a reformulation out.
QR_PROMPT = "Search query: {source}\nThe same search in other words:"


@dataclass
class QueryReformulationConfig:
    """Query reformulation (METHODS.md section 2): T5-base, 2 epochs, batch 32 x accumulation 16, lr 3e-4."""

    model: T5ModelConfig = field(default_factory=lambda: T5ModelConfig(prompt=QR_PROMPT))
    fine_tune: FineTuneConfig = field(
        default_factory=lambda: FineTuneConfig(epochs=2, learning_rate=3e-4, batch_size=32, grad_accumulation=16)
    )
    # The paper does not say how many reformulations per tuple; 8 samples (as in CGA) by default.
    generation: GenerationConfig = field(default_factory=ctranslate2_generation)
    matcher: MatcherConfig = field(default_factory=MatcherConfig)
    # The queries reformulated: every distinct collected one (None, the paper), or a seeded sample of this many
    # (reformulation_inputs; matcher_inputs draws its own from the training queries): a generation budget, for
    # a causal generator on CPU or a huge log.
    sources: Optional[int] = None

    def __post_init__(self) -> None:
        check_generator(self.model, self.fine_tune, "query_reformulation")
        check(
            self.sources is None or self.sources >= 1,
            "query_reformulation.sources",
            "must be >= 1 (or null for every collected query)",
        )
