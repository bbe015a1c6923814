"""The input contracts: which columns each kind of dataset must have, with which types.

These are the schemas docs/reference/input-schemas.md documents; readers check them on read and name the file and
column
that break them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

ColumnType = Literal["string", "long"]


@dataclass(frozen=True)
class ColumnSpec:
    """One column of a contract. Optional columns are added as nulls when the source lacks them."""

    name: str
    type: ColumnType = "string"
    required: bool = True


@dataclass(frozen=True)
class Dedup:
    """What makes two rows of a contract copies of one another at ingest (see ``common.data.duplicates``).

    ``id``: the source's id column; rows repeating an id are copies of one record (null ids are never
    compared). ``text``: for corpora, the text column whose normalised copies are duplicates whatever their
    ids (catalogs leave it unset: one title legitimately sits under several items). ``labels``: the columns
    that, when they differ between copies of the same content, make a conflict rather than a duplicate."""

    id: Optional[str] = None
    text: Optional[str] = None
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Contract:
    """A dataset kind: its name (also the Delta table it is ingested into), its columns, and what makes two
    of its rows copies (``dedup``)."""

    name: str
    columns: tuple[ColumnSpec, ...]
    dedup: Dedup = Dedup()

    @property
    def column_names(self) -> list[str]:
        """All contract columns in order (required and optional)."""
        return [c.name for c in self.columns]

    @property
    def required(self) -> list[ColumnSpec]:
        """Columns the source must have."""
        return [c for c in self.columns if c.required]

    @property
    def quarantine_table(self) -> str:
        """Name of the table that receives this dataset's rejected rows."""
        return f"{self.name}_quarantine"


LABELED = Contract(
    "labeled_products",
    (ColumnSpec("item_id"), ColumnSpec("title"), ColumnSpec("category")),
    Dedup(id="item_id", labels=("category",)),
)
CATALOG = Contract(
    "catalog",
    (
        ColumnSpec("item_id"),
        ColumnSpec("title"),
        ColumnSpec("group_id", required=False),
        ColumnSpec("gtin", required=False),
        ColumnSpec("mpn", required=False),
        ColumnSpec("brand", required=False),
    ),
    Dedup(id="item_id"),
)
# A log row is an event (count 1) or an aggregate; two equal rows are two events unless the source names
# its events: then a repeated ``event_id`` is one event delivered twice.
INTERACTIONS = Contract(
    "interactions",
    (
        ColumnSpec("query"),
        ColumnSpec("product_id"),
        ColumnSpec("interaction"),
        ColumnSpec("count", "long"),
        ColumnSpec("event_id", required=False),
    ),
    Dedup(id="event_id"),
)
PRODUCTS = Contract("products", (ColumnSpec("product_id"), ColumnSpec("title")), Dedup(id="product_id"))
# Labeled sentences or documents for the text-classification papers (BoostAug): ``split`` is
# train|dev|test when the source has one (else the pipeline draws a stratified split by seed).
TEXTS = Contract(
    "texts",
    (ColumnSpec("text"), ColumnSpec("label"), ColumnSpec("split", required=False)),
    Dedup(text="text", labels=("label",)),
)
# Documents with a non-topical label (genre, register, sentiment...) for the genre-transfer pipeline.
DOCUMENTS = Contract(
    "documents",
    (ColumnSpec("doc_id"), ColumnSpec("text"), ColumnSpec("genre")),
    Dedup(id="doc_id", text="text", labels=("genre",)),
)
# A topically diverse corpus the genre pipeline's topic model may be fit on instead of the documents.
TOPIC_CORPUS = Contract("topic_corpus", (ColumnSpec("doc_id"), ColumnSpec("text")), Dedup(id="doc_id", text="text"))
# Multi-label texts for the compositional pipeline: ``labels`` is one string of label names joined by
# ``ingest.label_separator`` (or an array of strings in Parquet/Delta, or 0/1 indicator columns folded by
# ``inputs.multilabel.label_columns``); ingest stores it as a sorted array. ``example_id`` defaults to a hash
# of text and labels.
MULTILABEL = Contract(
    "multilabel",
    (ColumnSpec("example_id", required=False), ColumnSpec("text"), ColumnSpec("labels")),
    Dedup(id="example_id", text="text", labels=("labels",)),
)

CONTRACTS: dict[str, Contract] = {
    "labeled": LABELED,
    "catalog": CATALOG,
    "interactions": INTERACTIONS,
    "products": PRODUCTS,
    "texts": TEXTS,
    "documents": DOCUMENTS,
    "topic_corpus": TOPIC_CORPUS,
    "multilabel": MULTILABEL,
}
# The catalog datasets the ``ingest`` job takes; the others have their own pipeline's ingest job.
CATALOG_KINDS = ("labeled", "catalog", "interactions", "products")
# The inputs the demo world stands in for when unset (``texts``: its labeled titles); documents never come
# from it, so configuring them does not stop the demo generation.
DEMO_KINDS = CATALOG_KINDS + ("texts",)
SPLITS = ("train", "dev", "test")
