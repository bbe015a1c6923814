"""The data domain's config: input datasets, ingest validation rules, the demo world, sub-sampling."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from common.platform.config import absolute, check, is_uri


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
    # Columns taken from each row's file path by a regex's first group, e.g. {split: "(train|dev|test)\\.csv$"}
    # for a folder of train/dev/test files (file formats only; no match gives null).
    from_path: dict[str, str] = field(default_factory=dict)
    # Multi-label inputs in multi-hot form: these 0/1 columns become the ``labels`` set (the names of the
    # columns holding 1), e.g. SemEval-2018 E-c's eleven emotion columns.
    label_columns: list[str] = field(default_factory=list)
    # Remove HTML/XML tags (<p/>, <br>, <li>...) and decode the common named entities (&amp;, &nbsp;...) from the
    # text columns (title, query, text) before validation: scraped product descriptions, web pages such as
    # MT-GINCO's "<p/>" paragraph marks. The quarantine keeps the raw text.
    strip_markup: bool = False

    @classmethod
    def from_shorthand(cls, path: str) -> "InputSpec":
        """``inputs.labeled=PATH`` on the command line means ``InputSpec(path=PATH)``."""
        return cls(path=path)

    def __post_init__(self) -> None:
        check(bool(self.path), "inputs.*.path", "must not be empty")
        if self.format != "table" and not looks_like_table_name(self.path):
            self.path = absolute(self.path)


# File suffixes the readers know, and the format each means.
FILE_FORMATS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "csv",
    ".parquet": "parquet",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}


def looks_like_table_name(path: str) -> bool:
    """True for ``catalog.schema.table``-style names: no slash, no URI scheme, no file suffix, no such file."""
    return (
        not is_uri(path)
        and "/" not in path
        and "." in path
        and Path(path).suffix.lower() not in FILE_FORMATS
        and not Path(path).exists()
    )


@dataclass
class InputsConfig:
    """The user's datasets. A missing entry means the demo generator's landing files."""

    # The labeled titles (D_L: item_id, title, category path): consistency, CGA, BoostAug on titles. null: the demo
    # world's.
    labeled: Optional[InputSpec] = None
    # The catalog items to group into versions (item_id, title, identifiers or group_id). null: the demo world's.
    catalog: Optional[InputSpec] = None
    # The search log (session, query, product, interaction, count) of query graph and reformulation. null: the demo
    # world's.
    interactions: Optional[InputSpec] = None
    # Product titles by product id for the query pipelines' matcher. null: the demo world's.
    products: Optional[InputSpec] = None
    # Labeled texts (text, label, optional split) for the BoostAug pipeline; unset: the demo's labeled titles.
    texts: Optional[InputSpec] = None
    # Documents (doc_id, text, genre) for the genre-transfer pipeline, and optionally a separate topic
    # corpus (doc_id, text) the topic model is fit on (unset: the documents themselves).
    documents: Optional[InputSpec] = None
    # Genre transfer's unlabeled topic corpus for the topic model (defaults to the documents).
    topic_corpus: Optional[InputSpec] = None
    # Multi-label texts (text, labels, optional example_id) for the compositional pipeline.
    multilabel: Optional[InputSpec] = None
    # Where this platform reads the files of local input folders: {local folder: the location of its copy}, e.g.
    # {../shared/data: ${AUGMENT_BUCKET}/raw}. Every input under a listed folder is read from the copy at the same
    # relative path, with the same options: a cluster config extends a local config's world and says only where its
    # files went (conf/cluster_demo.yaml), instead of naming each input again and drifting from it.
    relocate: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for spec in vars(self).values():
            if isinstance(spec, InputSpec):
                spec.path = relocated(spec.path, self.relocate)


def relocated(path: str, relocate: dict[str, str]) -> str:
    """``path`` (an input's, already absolute) read from the copy of the local folder it lies under
    (:attr:`InputsConfig.relocate`: ``{local folder: its copy}``), at the same relative path; unchanged when it lies
    under none, or is a URI or a table name."""
    if is_uri(path):
        return path
    for local, copy in relocate.items():
        folder = absolute(local).rstrip("/")
        if path == folder or path.startswith(folder + "/"):
            return copy.rstrip("/") + path[len(folder) :]
    return path


@dataclass
class DedupConfig:
    """Exact duplicates at ingest (``common.data.duplicates``): which rows are copies is the contract's own
    (``schemas.Dedup``); texts are compared normalised (trimmed, whitespace runs as one space, case-folded)."""

    # Rows repeating an earlier row's id or (for corpora: texts, documents, multilabel) its text with the same
    # labels go to the quarantine as ``duplicate of <id>``; the first copy is kept. False: every row is kept.
    exact: bool = True
    # Copies that differ only in their labels: ``quarantine`` every copy (``conflicting labels``; the label is
    # unknown, so no copy is trusted), or ``keep`` them all (multi-annotator data where disagreement is signal).
    conflicts: Literal["quarantine", "keep"] = "quarantine"
    # Near duplicates (opt-in; texts, documents, topic corpus, multilabel): MinHash LSH over ``near_shingle``-word
    # shingles finds texts whose shingle sets have Jaccard similarity >= ``near_threshold``; each cluster keeps
    # its smallest id, the others go to ``<input>_near_duplicates`` with their cluster id. An incremental input is
    # then ingested in full.
    near: bool = False
    # Near duplicates: the Jaccard similarity of shingle sets from which two texts are one.
    near_threshold: float = 0.8
    # Near duplicates: words per shingle.
    near_shingle: int = 3
    # Near duplicates: MinHash LSH bands. Each band holds as many MinHash values as still find a pair at
    # near_threshold with probability 0.99; more bands allow more per band, so fewer pairs to check.
    near_tables: int = 10

    def __post_init__(self) -> None:
        check(self.conflicts in ("quarantine", "keep"), "ingest.dedup.conflicts", "must be quarantine or keep")
        check(0.0 < self.near_threshold <= 1.0, "ingest.dedup.near_threshold", "must be in (0, 1]")
        check(self.near_shingle >= 1, "ingest.dedup.near_shingle", "must be >= 1")
        check(self.near_tables >= 1, "ingest.dedup.near_tables", "must be >= 1")


@dataclass
class IngestConfig:
    """Validation rules applied on ingest; failing rows go to ``<table>_quarantine`` with a reason."""

    # Longer titles go to quarantine (a title is a line, not a description).
    max_title_chars: int = 512
    # Sentences and documents (the ``texts`` input) may be far longer than titles.
    max_text_chars: int = 100_000
    # Category paths deeper than this go to quarantine.
    max_category_depth: int = 7
    # The separator of a category path's levels (Amazon: >).
    category_separator: str = ">"
    # A Google-Product-Taxonomy-format file; when set, labels outside it are quarantined.
    taxonomy: Optional[str] = None
    # Delta path inputs whose commits since the last ingest only appended rows: validate and append only
    # those rows (false: every run re-reads and overwrites). Any other change means a full re-ingest.
    incremental: bool = True
    # Multi-label inputs: the separator of a ``labels`` string; the allowed label names (None: any); whether
    # a row without labels is kept (False: quarantined as ``no labels``).
    label_separator: str = ","
    # Multi-label inputs: the allowed label names (null: any); a row naming another goes to quarantine.
    label_vocabulary: Optional[list[str]] = None
    # Multi-label inputs: keep rows with no label (false: quarantine them).
    allow_empty_labels: bool = False
    dedup: DedupConfig = field(default_factory=DedupConfig)

    def __post_init__(self) -> None:
        check(bool(self.label_separator), "ingest.label_separator", "must not be empty")
        check(self.max_title_chars > 0, "ingest.max_title_chars", "must be > 0")
        check(self.max_text_chars > 0, "ingest.max_text_chars", "must be > 0")
        check(self.max_category_depth >= 1, "ingest.max_category_depth", "must be >= 1")
        check(bool(self.category_separator.strip()), "ingest.category_separator", "must not be blank")
        if self.taxonomy:
            self.taxonomy = absolute(self.taxonomy)


@dataclass
class DemoConfig:
    """The synthetic e-commerce dataset. Sizes scale linearly with ``scale`` (the size knob)."""

    # The demo world's own seed (the world stays the same when the run's seed changes).
    seed: int = 7
    # Multiplies every count below (the size knob).
    scale: float = 1.0
    # Labeled titles generated (before scale).
    n_labeled: int = 6000
    # Catalog groups (products with several versions) generated (before scale).
    n_groups: int = 3000
    # Group sizes: 2 + geometric, clipped to [group_size_min, group_size_max]; mean ~3.6 as in the paper.
    group_size_min: int = 2
    # The largest group (the consistency paper's 192).
    group_size_max: int = 192
    # Mean group size (the consistency paper's catalog: about 3.6).
    group_size_mean: float = 3.6
    # Share of labeled titles whose colour/size follow their category (the planted spurious correlation).
    spurious_strength: float = 0.9
    # Share of labeled titles that carry the true discriminating word (e.g. "women's").
    signal_rate: float = 0.35
    # Share of catalog groups given without group_id (to be recovered from gtin/mpn/brand+model).
    null_group_fraction: float = 0.2
    # Search sessions in the interaction log (before scale).
    n_sessions: int = 8000
    # Share of rows in each landing file made invalid on purpose (exercises the quarantine).
    bad_row_fraction: float = 0.01
    # Spark partitions the generator writes each table in.
    partitions: int = 4
    # When generate-demo writes the world: auto (only when no input is configured: a run on the user's own
    # data generates nothing) or catalog (the catalog world whenever no catalog input is configured, beside
    # configured texts, documents or multi-label inputs: conf/demo.yaml's BoostAug on SST-2).
    generate: Literal["auto", "catalog"] = "auto"

    def __post_init__(self) -> None:
        check(self.scale > 0, "demo.scale", "must be > 0")
        for name in ("n_labeled", "n_groups", "n_sessions", "partitions"):
            check(getattr(self, name) >= 1, f"demo.{name}", "must be >= 1")
        check(
            2 <= self.group_size_min <= self.group_size_max,
            "demo.group_size_min",
            "must satisfy 2 <= group_size_min <= group_size_max",
        )
        check(
            self.group_size_min < self.group_size_mean <= self.group_size_max,
            "demo.group_size_mean",
            "must lie in (group_size_min, group_size_max]",
        )
        for name in ("spurious_strength", "signal_rate", "null_group_fraction", "bad_row_fraction"):
            value = getattr(self, name)
            check(0.0 <= value <= 1.0, f"demo.{name}", f"must be in [0, 1], got {value}")

    def scaled(self, n: int) -> int:
        """``n`` times the size knob, at least 1."""
        return max(1, int(round(n * self.scale)))


@dataclass
class SubsampleConfig:
    """The reusable ``subsample`` job: draw rows of ``table`` to match a target label distribution."""

    # The table to sub-sample (null: the job is not configured).
    table: Optional[str] = None
    # The column holding the category path.
    label_column: str = "category"
    # Compare labels truncated to this level (None: the whole label).
    level: Optional[int] = 1
    # Target: the label histogram of another table ...
    target_table: Optional[str] = None
    # The target table's category column, whose distribution the sample matches.
    target_column: str = "category"
    # ... or explicit weights {label: weight}.
    weights: dict[str, float] = field(default_factory=dict)
    # None: the largest sample that matches the target.
    n: Optional[int] = None
    # The columns that identify a row (the sample is deterministic in them and the seed).
    key_columns: list[str] = field(default_factory=lambda: ["item_id"])
    # The output table (null: <table>_subsampled).
    output: Optional[str] = None
    # The sampling seed.
    seed: int = 42

    def __post_init__(self) -> None:
        check(self.level is None or self.level >= 1, "subsample.level", "must be >= 1")
        check(self.n is None or self.n >= 0, "subsample.n", "must be >= 0")
        check(
            not (self.target_table and self.weights),
            "subsample.weights",
            "give either subsample.target_table or subsample.weights, not both",
        )
