"""The suite's typed configuration: nested dataclasses whose defaults are the embedded local setup
and the papers' parameter values (see ``../shared/docs/METHODS.md``).

Load it with :func:`load_config` from a YAML file in ``conf/`` plus ``--set a.b=value`` overrides.
Every value is validated here, at start-up, so a job never fails halfway on a typo.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from common.config_loader import ConfigError, apply_overrides, flatten, from_mapping, load_yaml, to_mapping

DEFAULT_CONF_ENV = "AUGMENT_CONF"


def _is_uri(path: str) -> bool:
    return "://" in path or path.startswith("dbfs:")


def _absolute(path: str) -> str:
    """Local relative paths become absolute (so Spark executors and Ray workers agree); URIs stay."""
    return path if _is_uri(path) else str(Path(path).expanduser().resolve())


def _check(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"{key}: {message}")


@dataclass
class SparkConfig:
    """How to get the SparkSession. ``local`` builds one; ``cluster``/``databricks`` take the existing one."""

    mode: Literal["local", "cluster", "databricks"] = "local"
    master: str = "local[*]"
    app_name: str = "catalog-augment"
    shuffle_partitions: int = 4
    # auto: use Spark's Delta writer when its jar is on the classpath, else delta-rs commits.
    delta: Literal["auto", "native", "delta-rs"] = "auto"
    graphframes: Literal["auto", "on", "off"] = "auto"
    checkpoint_dir: Optional[str] = None
    driver_memory: str = "4g"
    conf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check(self.shuffle_partitions >= 1, "spark.shuffle_partitions", "must be >= 1")


@dataclass
class RayConfig:
    """Where Ray runs: a local runtime, an existing cluster address, or Ray on Spark (Databricks)."""

    mode: Literal["local", "address", "spark"] = "local"
    address: Optional[str] = None
    num_cpus: Optional[int] = None
    num_gpus: Optional[int] = None
    object_store_memory_mb: Optional[int] = None
    # Ray on Spark (ray.util.spark.setup_ray_cluster) sizing.
    spark_max_worker_nodes: int = 2
    spark_num_cpus_per_node: Optional[int] = None
    spark_num_gpus_per_node: Optional[int] = None

    def __post_init__(self) -> None:
        if self.mode == "address":
            _check(bool(self.address), "ray.address", "is required when ray.mode is 'address'")
        for name in ("num_cpus", "num_gpus"):
            value = getattr(self, name)
            _check(value is None or value >= 0, f"ray.{name}", "must be >= 0")


@dataclass
class LakehouseConfig:
    """Where Delta tables live: path tables under ``root``, or catalog tables ``<catalog>.<name>``."""

    root: str = "./lakehouse"
    # e.g. "main.augment" on Databricks Unity Catalog; when set, tables are catalog tables (native Delta).
    catalog: Optional[str] = None
    storage_options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check(bool(self.root), "lakehouse.root", "must not be empty")
        self.root = _absolute(self.root)


@dataclass
class TrackingConfig:
    """MLflow tracking. With no ``uri`` the local default is SQLite inside the lakehouse folder."""

    uri: Optional[str] = None
    experiment: str = "catalog-augmentation"


@dataclass
class InputSpec:
    """One input dataset: a file/folder path (CSV, Parquet, JSON lines, Delta) or a catalog table name."""

    path: str
    format: Literal["auto", "csv", "parquet", "json", "delta", "table"] = "auto"
    header: bool = True
    # Column names for a header-less CSV, in file order.
    columns: Optional[list[str]] = None
    # Map source column names onto the suite's schema names, e.g. {product_name: title}.
    rename: dict[str, str] = field(default_factory=dict)
    # Constant values for contract columns the source lacks, e.g. {interaction: click, count: "1"} for a
    # raw click log with one row per click.
    defaults: dict[str, str] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_shorthand(cls, path: str) -> "InputSpec":
        """``inputs.labeled=PATH`` on the command line means ``InputSpec(path=PATH)``."""
        return cls(path=path)

    def __post_init__(self) -> None:
        _check(bool(self.path), "inputs.*.path", "must not be empty")
        if self.format != "table" and not looks_like_table_name(self.path):
            self.path = _absolute(self.path)


# File suffixes the readers know, and the format each means.
FILE_FORMATS = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".parquet": "parquet", ".json": "json",
                ".jsonl": "json", ".ndjson": "json"}


def looks_like_table_name(path: str) -> bool:
    """True for ``catalog.schema.table``-style names: no slash, no URI scheme, no file suffix, no such file."""
    return (not _is_uri(path) and "/" not in path and "." in path
            and Path(path).suffix.lower() not in FILE_FORMATS and not Path(path).exists())


@dataclass
class InputsConfig:
    """The user's datasets. A missing entry means the demo generator's landing files."""

    labeled: Optional[InputSpec] = None
    catalog: Optional[InputSpec] = None
    interactions: Optional[InputSpec] = None
    products: Optional[InputSpec] = None


@dataclass
class IngestConfig:
    """Validation rules applied on ingest; failing rows go to ``<table>_quarantine`` with a reason."""

    max_title_chars: int = 512
    max_category_depth: int = 7
    category_separator: str = ">"
    # A Google-Product-Taxonomy-format file; when set, labels outside it are quarantined.
    taxonomy: Optional[str] = None

    def __post_init__(self) -> None:
        _check(self.max_title_chars > 0, "ingest.max_title_chars", "must be > 0")
        _check(self.max_category_depth >= 1, "ingest.max_category_depth", "must be >= 1")
        _check(bool(self.category_separator.strip()), "ingest.category_separator", "must not be blank")
        if self.taxonomy:
            self.taxonomy = _absolute(self.taxonomy)


@dataclass
class DemoConfig:
    """The synthetic e-commerce dataset. Sizes scale linearly with ``scale`` (the size knob)."""

    seed: int = 7
    scale: float = 1.0
    n_labeled: int = 6000
    n_groups: int = 3000
    # Group sizes: 2 + geometric, clipped to [group_size_min, group_size_max]; mean ~3.6 as in the paper.
    group_size_min: int = 2
    group_size_max: int = 192
    group_size_mean: float = 3.6
    # Share of labeled titles whose colour/size follow their category (the planted spurious correlation).
    spurious_strength: float = 0.9
    # Share of labeled titles that carry the true discriminating word (e.g. "women's").
    signal_rate: float = 0.35
    # Share of catalog groups given without group_id (to be recovered from gtin/mpn/brand+model).
    null_group_fraction: float = 0.2
    n_sessions: int = 8000
    # Share of rows in each landing file made invalid on purpose (exercises the quarantine).
    bad_row_fraction: float = 0.01
    partitions: int = 4

    def __post_init__(self) -> None:
        _check(self.scale > 0, "demo.scale", "must be > 0")
        for name in ("n_labeled", "n_groups", "n_sessions", "partitions"):
            _check(getattr(self, name) >= 1, f"demo.{name}", "must be >= 1")
        _check(2 <= self.group_size_min <= self.group_size_max, "demo.group_size_min",
               "must satisfy 2 <= group_size_min <= group_size_max")
        _check(self.group_size_min < self.group_size_mean <= self.group_size_max, "demo.group_size_mean",
               "must lie in (group_size_min, group_size_max]")
        for name in ("spurious_strength", "signal_rate", "null_group_fraction", "bad_row_fraction"):
            value = getattr(self, name)
            _check(0.0 <= value <= 1.0, f"demo.{name}", f"must be in [0, 1], got {value}")

    def scaled(self, n: int) -> int:
        """``n`` times the size knob, at least 1."""
        return max(1, int(round(n * self.scale)))


@dataclass
class GroupingConfig:
    """Catalog grouping: given group_id, else connected components over shared identifiers."""

    identifiers: list[Literal["gtin", "mpn", "brand_model"]] = field(
        default_factory=lambda: ["gtin", "mpn", "brand_model"])
    # Consistency paper: group sizes 2..192. Groups outside go to quarantine.
    min_size: int = 2
    max_size: int = 192
    # An identifier value shared by more items than this ("N/A", a dummy GTIN) is ignored and reported.
    max_items_per_identifier: int = 192
    max_iterations: int = 100

    def __post_init__(self) -> None:
        _check(2 <= self.min_size <= self.max_size, "grouping.min_size", "must satisfy 2 <= min_size <= max_size")
        _check(self.max_items_per_identifier >= 2, "grouping.max_items_per_identifier", "must be >= 2")
        _check(bool(self.identifiers), "grouping.identifiers", "must name at least one identifier")


@dataclass
class SubsampleConfig:
    """The reusable ``subsample`` job: draw rows of ``table`` to match a target label distribution."""

    table: Optional[str] = None
    label_column: str = "category"
    # Compare labels truncated to this level (None: the whole label).
    level: Optional[int] = 1
    # Target: the label histogram of another table ...
    target_table: Optional[str] = None
    target_column: str = "category"
    # ... or explicit weights {label: weight}.
    weights: dict[str, float] = field(default_factory=dict)
    # None: the largest sample that matches the target.
    n: Optional[int] = None
    key_columns: list[str] = field(default_factory=lambda: ["item_id"])
    output: Optional[str] = None
    seed: int = 42

    def __post_init__(self) -> None:
        _check(self.level is None or self.level >= 1, "subsample.level", "must be >= 1")
        _check(self.n is None or self.n >= 0, "subsample.n", "must be >= 0")
        _check(not (self.target_table and self.weights), "subsample.weights",
               "give either subsample.target_table or subsample.weights, not both")


@dataclass
class FastTextConfig:
    """fastText hyperparameters of every HFT level (the paper does not fix them)."""

    epoch: int = 20
    lr: float = 0.5
    word_ngrams: int = 2
    dim: int = 50
    min_count: int = 1
    # fastText's default of 2M hash buckets costs 2M x dim floats per model; 200k is plenty for titles.
    bucket: int = 200_000
    loss: Literal["softmax", "hs", "ova", "ns"] = "softmax"
    minn: int = 0
    maxn: int = 0
    # One thread per model keeps training deterministic for a seed; levels train in parallel instead.
    thread: int = 1

    def __post_init__(self) -> None:
        for name in ("epoch", "dim", "thread", "bucket"):
            _check(getattr(self, name) >= 1, f"consistency.fasttext.{name}", "must be >= 1")
        _check(self.lr > 0, "consistency.fasttext.lr", "must be > 0")


ConsistencyMethod = Literal["baseline", "cs_blind", "cst_full", "cst_ss"]


@dataclass
class ConsistencyConfig:
    """The consistency paper's experiment (METHODS.md section 1); defaults are the paper's."""

    methods: list[ConsistencyMethod] = field(default_factory=lambda: ["baseline", "cs_blind", "cst_full", "cst_ss"])
    # h(X_i; f_base): the group's most confident prediction (paper's best) or the majority vote.
    pseudo_label: Literal["max_confidence", "majority"] = "max_confidence"
    # Accuracy test: 23k of 184k labeled items (a fraction < 1, or a count >= 1).
    accuracy_test: float = 0.125
    # Consistency test: 9k of 363k groups, one pair of different titles each (fraction or count).
    consistency_test: float = 0.025
    # The catalog is matched to D_L's histogram at this level before the consistency test (paper: L1),
    # and CST-SS matches D_U at this level too.
    match_level: int = 1
    repeats: int = 5
    colours: str = "conf/dictionaries/colours.txt"
    sizes: str = "conf/dictionaries/sizes.txt"
    fasttext: FastTextConfig = field(default_factory=FastTextConfig)

    def __post_init__(self) -> None:
        _check(bool(self.methods), "consistency.methods", "must name at least one method")
        _check(self.accuracy_test > 0, "consistency.accuracy_test", "must be > 0 (fraction < 1 or count)")
        _check(self.consistency_test > 0, "consistency.consistency_test", "must be > 0 (fraction < 1 or count)")
        _check(self.repeats >= 1, "consistency.repeats", "must be >= 1")
        _check(self.match_level >= 1, "consistency.match_level", "must be >= 1")


@dataclass
class QueryGraphConfig:
    """The query-reformulation paper's mining half (METHODS.md section 2); defaults are the paper's."""

    # Minimum aggregated count per (query, product, interaction) to keep, by interaction type.
    activity_threshold: dict[str, int] = field(default_factory=lambda: {"click": 1, "add_to_cart": 1, "purchase": 1})
    default_activity_threshold: int = 1
    # Interaction types whose counts form P(p|q) for the click entropy.
    click_interactions: list[str] = field(default_factory=lambda: ["click"])
    # Two queries co-occur when they lead to this interaction with the same product (paper: purchase).
    cooccurrence_interactions: list[str] = field(default_factory=lambda: ["purchase"])
    similarity: Literal["pmi", "npmi"] = "pmi"
    min_support: int = 1
    # The paper shows each query's top 6 similarities.
    top_k: int = 6
    # Hub guard: at most this many queries per product enter the self-join (the most frequent ones).
    max_queries_per_product: int = 1000
    # Similar queries and training pairs keep specificity within 10% of the seed's (relative: |s - s0| <= 0.1 s0).
    specificity_tolerance: float = 0.1
    tolerance_mode: Literal["relative", "absolute"] = "relative"
    c3_threshold: float = 0.33
    theta: float = 0.4
    prune_ratio: float = 0.5
    # Keep clusters with fewer than this many vertices (paper: < 10), and at least 2 (a pair).
    max_cluster_size: int = 10
    # Product subgraphs larger than this are skipped (and reported) rather than clustered.
    max_subgraph_vertices: int = 5000

    def __post_init__(self) -> None:
        for name in ("min_support", "top_k", "max_queries_per_product", "max_cluster_size", "max_subgraph_vertices",
                     "default_activity_threshold"):
            _check(getattr(self, name) >= 1, f"query_graph.{name}", "must be >= 1")
        for name, value in self.activity_threshold.items():
            _check(value >= 0, f"query_graph.activity_threshold.{name}", "must be >= 0")
        _check(0 <= self.specificity_tolerance <= 1, "query_graph.specificity_tolerance", "must be in [0, 1]")
        _check(0 <= self.c3_threshold <= 1, "query_graph.c3_threshold", "must be in [0, 1]")
        _check(0 < self.theta <= 1, "query_graph.theta", "must be in (0, 1]")
        _check(self.prune_ratio >= 0, "query_graph.prune_ratio", "must be >= 0")
        _check(bool(self.click_interactions), "query_graph.click_interactions", "must not be empty")
        _check(bool(self.cooccurrence_interactions), "query_graph.cooccurrence_interactions", "must not be empty")


@dataclass
class ScratchT5Config:
    """The shape of a T5 trained from scratch (with a tokenizer trained on the pairs): the local default,
    since no pretrained weights can be downloaded here (../shared/docs/ENVIRONMENT.md)."""

    vocab_size: int = 2000
    d_model: int = 64
    d_ff: int = 128
    num_layers: int = 2
    num_heads: int = 4

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "d_ff", "num_layers", "num_heads"):
            _check(getattr(self, name) >= 1, f"*.{name}", "must be >= 1")
        _check(self.d_model % self.num_heads == 0, "*.d_model", "must be a multiple of num_heads")


@dataclass
class T5ModelConfig:
    """Which T5 to fine-tune. ``name_or_path`` (t5-small, t5-base, flan-t5-*, a local folder) is the
    production path and wins when set; otherwise ``scratch`` describes a tiny model trained from scratch."""

    name_or_path: Optional[str] = None
    scratch: Optional[ScratchT5Config] = field(default_factory=ScratchT5Config)
    max_source_length: int = 48
    max_target_length: int = 48

    def __post_init__(self) -> None:
        _check(bool(self.name_or_path) or self.scratch is not None, "*",
               "set model.name_or_path (a checkpoint) or model.scratch (a from-scratch model)")
        _check(self.max_source_length >= 1 and self.max_target_length >= 1, "*.max_source_length",
               "lengths must be >= 1")


@dataclass
class FineTuneConfig:
    """Seq2seq optimisation. Effective batch = ``batch_size * grad_accumulation``. The run is one Ray task
    with ``num_cpus`` CPUs and ``num_gpus`` GPUs (bf16/fp16 autocast when a GPU is visible)."""

    epochs: int = 3
    learning_rate: float = 3e-4
    batch_size: int = 32
    grad_accumulation: int = 1
    num_cpus: int = 1
    num_gpus: float = 0.0
    # Log a checkpoint (model + tokenizer) to MLflow every this many epochs (0: none); the final model
    # is always logged.
    checkpoint_every: int = 1

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "grad_accumulation", "num_cpus"):
            _check(getattr(self, name) >= 1, f"*.{name}", "must be >= 1")
        _check(self.checkpoint_every >= 0, "*.checkpoint_every", "must be >= 0 (0: no checkpoints)")
        _check(self.learning_rate > 0, "*.learning_rate", "must be > 0")
        _check(self.num_gpus >= 0, "*.num_gpus", "must be >= 0")


@dataclass
class GenerationConfig:
    """Batched generation on a Ray Data actor pool (``concurrency`` actors, ``num_gpus`` each)."""

    n_samples: int = 8
    mode: Literal["sample", "beam"] = "sample"
    top_k: int = 50
    top_p: float = 0.95
    num_beams: int = 8
    max_new_tokens: int = 48
    # Longer inputs are quarantined (reason names the length) rather than silently truncated.
    max_source_tokens: int = 64
    # Inputs of one Ray Data batch are sorted by length and generated this many at a time.
    bucket_size: int = 64
    batch_size: int = 256
    concurrency: int = 1
    num_gpus: float = 0.0

    def __post_init__(self) -> None:
        for name in ("n_samples", "top_k", "num_beams", "max_new_tokens", "max_source_tokens", "bucket_size",
                     "batch_size", "concurrency"):
            _check(getattr(self, name) >= 1, f"*.{name}", "must be >= 1")
        _check(0 < self.top_p <= 1, "*.top_p", "must be in (0, 1]")
        _check(self.num_gpus >= 0, "*.num_gpus", "must be >= 0")


@dataclass
class CGASweepConfig:
    """The paper's Figure 2: T at a fixed N, N at T = 0.7, and T without sub-sampling."""

    enabled: bool = True
    thresholds: list[float] = field(default_factory=lambda: [0.5, 0.6, 0.7, 0.8])
    sizes: list[int] = field(default_factory=lambda: [50_000, 100_000, 200_000, 400_000])
    fixed_size: int = 200_000
    fixed_threshold: float = 0.7
    # HFT trainings per sweep point (the main CGA row uses consistency.repeats).
    repeats: int = 1

    def __post_init__(self) -> None:
        _check(all(0 <= t <= 1 for t in self.thresholds), "cga.sweep.thresholds", "must lie in [0, 1]")
        _check(all(n >= 1 for n in self.sizes) and self.fixed_size >= 1, "cga.sweep.sizes", "must be >= 1")
        _check(self.repeats >= 1, "cga.sweep.repeats", "must be >= 1")


@dataclass
class CGAConfig:
    """Consistent Generative Augmentation (METHODS.md section 1); defaults are the paper's."""

    model: T5ModelConfig = field(default_factory=T5ModelConfig)
    fine_tune: FineTuneConfig = field(default_factory=FineTuneConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    # Ordered pairs of different versions per group: s(s-1) for a group of s titles (a 192-item group
    # gives 36,672); None keeps them all, as the paper does.
    max_pairs_per_group: Optional[int] = None
    scorer: Literal["bleu", "minilm"] = "bleu"
    threshold: float = 0.7
    # Optional sub-sample of the filtered samples into D_aug (None: all of them, the paper's main result).
    n: Optional[int] = None
    sweep: CGASweepConfig = field(default_factory=CGASweepConfig)

    def __post_init__(self) -> None:
        _check(0 <= self.threshold <= 1, "cga.threshold", "must be in [0, 1]")
        _check(self.n is None or self.n >= 1, "cga.n", "must be >= 1 (or null for no sub-sampling)")
        _check(self.max_pairs_per_group is None or self.max_pairs_per_group >= 1, "cga.max_pairs_per_group",
               "must be >= 1 (or null)")


@dataclass
class MatcherConfig:
    """The downstream check of query reformulation: a query -> product fastText matcher (hierarchical
    softmax over product ids, a cheap extreme multi-label model), original log vs augmented log."""

    holdout_fraction: float = 0.2
    ks: list[int] = field(default_factory=lambda: [1, 5, 10])
    epoch: int = 25
    lr: float = 0.5
    dim: int = 50
    word_ngrams: int = 2
    minn: int = 2
    maxn: int = 4
    bucket: int = 200_000

    def __post_init__(self) -> None:
        _check(0 < self.holdout_fraction < 1, "query_reformulation.matcher.holdout_fraction", "must be in (0, 1)")
        _check(bool(self.ks) and all(k >= 1 for k in self.ks), "query_reformulation.matcher.ks", "must be >= 1")


@dataclass
class QueryReformulationConfig:
    """Query reformulation (METHODS.md section 2): T5-base, 2 epochs, batch 32 x accumulation 16, lr 3e-4."""

    model: T5ModelConfig = field(default_factory=T5ModelConfig)
    fine_tune: FineTuneConfig = field(default_factory=lambda: FineTuneConfig(
        epochs=2, learning_rate=3e-4, batch_size=32, grad_accumulation=16))
    # The paper does not say how many reformulations per tuple; 8 samples (as in CGA) by default.
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    matcher: MatcherConfig = field(default_factory=MatcherConfig)


@dataclass
class AppConfig:
    """The whole configuration tree of one invocation."""

    name: str = "local"
    seed: int = 42
    spark: SparkConfig = field(default_factory=SparkConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    lakehouse: LakehouseConfig = field(default_factory=LakehouseConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    inputs: InputsConfig = field(default_factory=InputsConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    demo: DemoConfig = field(default_factory=DemoConfig)
    grouping: GroupingConfig = field(default_factory=GroupingConfig)
    subsample: SubsampleConfig = field(default_factory=SubsampleConfig)
    consistency: ConsistencyConfig = field(default_factory=ConsistencyConfig)
    query_graph: QueryGraphConfig = field(default_factory=QueryGraphConfig)
    cga: CGAConfig = field(default_factory=CGAConfig)
    query_reformulation: QueryReformulationConfig = field(default_factory=QueryReformulationConfig)

    @property
    def tracking_uri(self) -> str:
        """The MLflow tracking URI; the local default is ``sqlite:///<lakehouse.root>/mlflow.db``."""
        if self.tracking.uri:
            return self.tracking.uri
        if _is_uri(self.lakehouse.root):
            raise ConfigError("tracking.uri: must be set when lakehouse.root is not a local folder")
        return f"sqlite:///{Path(self.lakehouse.root) / 'mlflow.db'}"

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain nested dicts."""
        return to_mapping(self)

    def flat(self) -> dict[str, Any]:
        """The configuration flattened to ``{"a.b": value}``, as logged to MLflow params."""
        return flatten(self.to_dict())

    def section_hash(self, *sections: str) -> str:
        """A short stable hash of the named top-level sections (the part of the config a job depends on)."""
        tree = self.to_dict()
        unknown = [s for s in sections if s not in tree]
        if unknown:
            raise ConfigError(f"unknown config section {unknown[0]!r}")
        payload = json.dumps({s: tree[s] for s in sections}, sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def default_conf_path() -> Optional[Path]:
    """``$AUGMENT_CONF``, else ``conf/local.yaml`` in the working directory when present, else None."""
    env = os.environ.get(DEFAULT_CONF_ENV)
    if env:
        return Path(env)
    candidate = Path("conf/local.yaml")
    return candidate if candidate.is_file() else None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> AppConfig:
    """Load ``path`` (default: :func:`default_conf_path`), apply ``a.b=value`` overrides, validate.

    Returns the :class:`AppConfig`; raises :class:`ConfigError` naming the first bad key.
    """
    conf_path = Path(path) if path else default_conf_path()
    tree = load_yaml(conf_path) if conf_path else {}
    tree = apply_overrides(tree, list(overrides or []))
    return from_mapping(AppConfig, tree)
