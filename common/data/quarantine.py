"""Row validation for ingest: each row gets a ``reason`` (null when valid); valid rows are normalised
into the contract's types, rejected rows keep their raw values for the quarantine table.

Every rule is a Column expression, so validation is one narrow Spark stage; rows in = kept + rejected
by construction, since ``kept`` and ``rejected`` are the two sides of one ``reason IS NULL`` predicate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from common.data.config import IngestConfig
from common.data.raw_input import CORRUPT_COL, LABEL_ERROR_COL, MALFORMED_LINE, SOURCE_COL, InputSchemaError, reading
from common.data.schemas import SPLITS, Contract
from common.data.taxonomy import canonical_col, depth_col, malformed_col

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

REASON_COL = "reason"
# Duplicate detection's reasons (common.data.duplicates): ``duplicate of <id>`` names the kept copy, so the
# reasons are counted by kind (:func:`reason_kind`) to stay a bounded set.
DUPLICATE = "duplicate of "
# The reason of a text copy in a contract without ids (texts): no id to name.
DUPLICATE_TEXT = "duplicate of an earlier copy of this text"
# C0 controls (but tab/newline/CR), DEL, and U+FFFD, the mark of an undecodable byte sequence.
_INVALID_CHARS = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F\x{FFFD}]"


def _blank(column: "Column") -> "Column":
    from pyspark.sql import functions as F

    return column.isNull() | (F.trim(column) == "")


# Text columns whose markup ``inputs.<name>.strip_markup`` removes; the cleaned value is validated and kept
# in ``_clean_<column>``, while the quarantine keeps the raw one.
TEXT_COLUMNS = ("title", "query", "text")
# An HTML/XML tag: <p/>, <br>, </li>, <a href="...">, <!-- -->; bounded so a stray "<" cannot eat a document.
_TAG = r"<[A-Za-z/!?][^<>]{0,500}>"
# The named entities that survive in scraped catalog text, decoded after the tags are gone (so an escaped
# "&lt;b&gt;" stays the literal text "<b>"); &amp; last, so "&amp;lt;" stays "&lt;".
_ENTITIES = (
    ("&nbsp;", " "),
    ("&lt;", "<"),
    ("&gt;", ">"),
    ("&quot;", '"'),
    ("&#39;", "'"),
    ("&apos;", "'"),
    ("&amp;", "&"),
)


def clean_column(name: str) -> str:
    """The column that holds ``name``'s markup-free value in a :func:`with_reasons` frame."""
    return f"_clean_{name}"


def strip_markup(column: "Column") -> "Column":
    """``column`` with HTML/XML tags replaced by a space and the common named entities decoded."""
    from pyspark.sql import functions as F

    out = F.regexp_replace(column, _TAG, " ")
    for entity, char in _ENTITIES:
        out = F.regexp_replace(out, entity, char)
    return out


def _text_rules(name: str, limit: int, clean: bool = False) -> list[tuple["Column", str]]:
    from pyspark.sql import functions as F

    raw = F.col(name)
    column = F.col(clean_column(name)) if clean else raw
    blank = [(_blank(raw), f"empty {name}")]
    if clean:
        blank.append((_blank(column), f"empty {name} after markup removal"))
    return blank + [
        (column.rlike(_INVALID_CHARS), f"invalid text in {name}: control or undecodable characters"),
        (~column.rlike(r"[\p{L}\p{N}]"), f"invalid text in {name}: no letters or digits"),
        (F.length(column) > limit, f"{name} longer than {limit} characters"),
    ]


def rules(
    contract: Contract,
    cfg: IngestConfig,
    has_taxonomy: bool = False,
    cleaned: bool = False,
    malformed: str = MALFORMED_LINE,
) -> list[tuple["Column", str]]:
    """The ordered (failure predicate, reason) rules for ``contract``; the first that holds wins. ``cleaned``:
    text columns are validated on their ``_clean_*`` (markup-free) value; ``malformed``: the reason of a record the
    reader could not parse (``RawInput.malformed``)."""
    from pyspark.sql import functions as F

    checks: list[tuple["Column", str]] = [(F.col(CORRUPT_COL).isNotNull(), malformed)]
    names = contract.column_names
    for id_col in ("item_id", "product_id", "doc_id"):
        if id_col in names:
            checks.append((_blank(F.col(id_col)), f"empty {id_col}"))
    # Titles and queries are short by nature; documents (text) get their own bound.
    limits = {"title": cfg.max_title_chars, "query": cfg.max_title_chars, "text": cfg.max_text_chars}
    checks += [rule for name in TEXT_COLUMNS if name in names for rule in _text_rules(name, limits[name], cleaned)]
    for label in ("label", "genre"):
        if label in names:
            checks.append((_blank(F.col(label)), f"empty {label}"))
    if "labels" in names:
        checks += _label_rules(cfg)
    if "split" in names:
        checks.append(
            (
                F.col("split").isNotNull() & ~F.lower(F.trim(F.col("split"))).isin(*SPLITS),
                f"unknown split (allowed: {', '.join(SPLITS)})",
            )
        )
    if "category" in names:
        category = F.col("category")
        checks += [
            (_blank(category), "empty category"),
            (malformed_col(category, cfg.category_separator), "malformed category path: empty level"),
            (
                depth_col(category, cfg.category_separator) > cfg.max_category_depth,
                f"category deeper than {cfg.max_category_depth} levels",
            ),
        ]
        if has_taxonomy:
            checks.append((F.col("_in_taxonomy").isNull(), "category not in taxonomy"))
    if "interaction" in names:
        checks.append((_blank(F.col("interaction")), "empty interaction"))
    if "count" in names:
        count = F.col("count")
        as_long = F.trim(count.cast("string")).try_cast("long")
        checks += [
            (count.isNull(), "missing count"),
            (as_long.isNull(), "count is not an integer"),
            (as_long < 0, "negative count"),
        ]
    return checks


def label_array(column: "Column", separator: str) -> "Column":
    """A ``labels`` string -> its sorted, distinct, trimmed, non-empty label names (array<string>)."""
    import re

    from pyspark.sql import functions as F

    parts = F.transform(F.split(F.coalesce(column, F.lit("")), re.escape(separator)), lambda x: F.trim(x))
    return F.array_sort(F.array_distinct(F.filter(parts, lambda x: x != "")))


def _label_rules(cfg: IngestConfig) -> list[tuple["Column", str]]:
    from pyspark.sql import functions as F

    labels = label_array(F.col("labels"), cfg.label_separator)
    checks = []
    if not cfg.allow_empty_labels:
        checks.append((F.size(labels) == 0, "no labels"))
    if cfg.label_vocabulary:
        allowed = F.array(*[F.lit(v) for v in cfg.label_vocabulary])
        checks.append((F.size(F.array_except(labels, allowed)) > 0, "unknown label (not in ingest.label_vocabulary)"))
    return checks


def with_reasons(
    df: "DataFrame",
    contract: Contract,
    cfg: IngestConfig,
    taxonomy_paths: Optional["DataFrame"] = None,
    markup: bool = False,
    malformed: str = MALFORMED_LINE,
) -> "DataFrame":
    """Add the ``reason`` column (null for valid rows) to a raw input frame.

    ``taxonomy_paths``: an optional one-column (``path``) frame of allowed canonical category paths;
    it is broadcast-joined, so labels outside it get ``category not in taxonomy``. ``markup``: the input's
    ``strip_markup``; each text column's markup-free value is added as ``_clean_<column>``, validated, and
    what :func:`kept` keeps (a text that was only markup: ``empty text after markup removal``).
    """
    from pyspark.sql import functions as F

    if markup:
        for name in TEXT_COLUMNS:
            if name in contract.column_names:
                df = df.withColumn(clean_column(name), strip_markup(F.col(name)))

    has_taxonomy = taxonomy_paths is not None and "category" in contract.column_names
    if has_taxonomy:
        allowed = (
            taxonomy_paths.select(F.col("path").alias("_tax_path")).distinct().withColumn("_in_taxonomy", F.lit(True))
        )
        df = df.join(
            F.broadcast(allowed),
            canonical_col(F.col("category"), cfg.category_separator) == F.col("_tax_path"),
            "left",
        ).drop("_tax_path")
    checks = rules(contract, cfg, has_taxonomy, cleaned=markup, malformed=malformed)
    if LABEL_ERROR_COL in df.columns:
        # A bad 0/1 indicator column: the row's label set is unknown.
        checks.insert(1, (F.col(LABEL_ERROR_COL).isNotNull(), F.col(LABEL_ERROR_COL)))
    reason = F.coalesce(
        *[F.when(predicate, text if not isinstance(text, str) else F.lit(text)) for predicate, text in checks]
    )
    df = df.withColumn(REASON_COL, reason)
    return df.drop("_in_taxonomy") if has_taxonomy else df


def reason_counts(validated: "DataFrame", location: str, allow_empty: bool = False) -> dict[Optional[str], int]:
    """{reason: rows} of a :func:`with_reasons` frame, None counting the valid rows: the first action that
    reads the whole input, so an unreadable file found only now (a truncated Parquet footer in a folder)
    raises :class:`InputSchemaError` naming ``location``, and so does an input with no rows unless
    ``allow_empty`` (an overwrite with no rows would empty the tables). Reasons are a short, bounded list
    (one per rule; ``duplicate of <id>`` counts as one), so the aggregate is safe to collect."""
    with reading(location):
        counts = {
            r["reason"]: r["count"]
            for r in validated.groupBy(reason_kind(REASON_COL).alias(REASON_COL)).count().collect()
        }
    if not counts and not allow_empty:
        raise InputSchemaError(
            f"{location}: no rows to ingest (a header only, or files without data); the tables keep their last version"
        )
    return counts


def reason_kind_of(reason: Optional[str]) -> Optional[str]:
    """A reason with every ``duplicate of <id>`` counted as one (:func:`reason_kind` on one value)."""
    if reason and reason.startswith(DUPLICATE) and reason != DUPLICATE_TEXT:
        return DUPLICATE + "<id>"
    return reason


def reason_kind(column: str) -> "Column":
    """``column`` (a reason) with every ``duplicate of <id>`` counted as one reason: a bounded set to aggregate."""
    from pyspark.sql import functions as F

    reason = F.col(column)
    return F.when(reason.startswith(DUPLICATE) & (reason != DUPLICATE_TEXT), F.lit(DUPLICATE + "<id>")).otherwise(
        reason
    )


def kept(df: "DataFrame", contract: Contract, cfg: IngestConfig) -> "DataFrame":
    """Valid rows in the contract's columns and types, normalised (trimmed text, whitespace runs as one space,
    markup removed where :func:`with_reasons` was asked to, canonical paths)."""
    from pyspark.sql import functions as F

    return df.filter(F.col(REASON_COL).isNull()).select(
        *[value.alias(name) for name, value in normalized(df, contract, cfg).items()]
    )


def normalized(df: "DataFrame", contract: Contract, cfg: IngestConfig) -> dict[str, "Column"]:
    """{contract column: its value as :func:`kept` stores it} for the rows of a :func:`with_reasons` frame
    (meaningful for valid rows); duplicate detection compares rows on these values."""
    from pyspark.sql import functions as F

    out = {}
    for column in contract.columns:
        value = F.col(column.name)
        if column.name in TEXT_COLUMNS:
            if clean_column(column.name) in df.columns:
                value = F.col(clean_column(column.name))
            value = F.regexp_replace(F.trim(value), r"\s+", " ")
        elif column.name == "category":
            value = canonical_col(value, cfg.category_separator)
        elif column.name == "labels":
            value = label_array(value, cfg.label_separator)
        elif column.name == "example_id":
            # Sources without ids: the same text and labels give the same id on every run.
            value = F.coalesce(
                F.when(~_blank(value), F.trim(value.cast("string"))),
                F.substring(F.sha2(F.concat_ws("\u0001", F.col("text"), F.col("labels")), 256), 1, 16),
            )
        elif column.name in ("interaction", "split"):
            value = F.lower(F.trim(value))
        elif column.type == "long":
            value = F.trim(value.cast("string")).try_cast("long")
        else:
            value = F.when(_blank(value), F.lit(None)).otherwise(F.trim(value.cast("string")))
        out[column.name] = value
    return out


def rejected(df: "DataFrame", contract: Contract) -> "DataFrame":
    """Rejected rows: raw contract columns as strings, the raw line when it did not parse, source, reason."""
    from pyspark.sql import functions as F

    columns = [F.col(c).cast("string").alias(c) for c in contract.column_names]
    return df.filter(F.col(REASON_COL).isNotNull()).select(
        *columns, F.col(CORRUPT_COL).alias("raw_line"), F.col(SOURCE_COL).alias("source"), F.col(REASON_COL)
    )
