"""Exact duplicates at ingest: rows that copy an earlier row get a quarantine ``reason``, the first copy is kept.

What makes two rows copies is the contract's (``schemas.Dedup``):

* **by id**: rows sharing the source's id (``item_id``, ``product_id``, ``doc_id``, ``example_id``,
  ``event_id``) are one record given twice. The same content again: ``duplicate of <id>``. Other content
  under the same id: ``repeated <id column> with other content``. The same content with other labels:
  ``conflicting labels``.
* **by text**, for corpora only (texts, documents, topic corpus, multilabel): rows whose normalised text is
  equal (trimmed, whitespace runs as one space, case-folded), whatever their ids, are duplicates when their
  labels agree (``duplicate of <first copy's id>``) and a conflict when they do not. Catalog titles are never
  compared this way: one title legitimately sits under several items (item versions, merchants); the splits
  group such copies instead.

``ingest.dedup.conflicts`` decides conflicts: ``quarantine`` every copy (the true label is unknown), or
``keep`` them all. The first copy is the earliest in (a given ``split``'s order test, dev, train, none; the
source file; the row's place in it): a text both in a source's test and train files keeps its test copy, so
a given evaluation set is never thinned to fix a leak. Every reason only fills a null one, so rows in = kept +
quarantined still holds; an incremental ingest compares its new rows with the table's kept rows as well
(``prior``), which are kept whatever the new rows hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from common.data.config import IngestConfig
from common.data.leakage import text_key
from common.data.quarantine import DUPLICATE, DUPLICATE_TEXT, REASON_COL, TEXT_COLUMNS, normalized
from common.data.raw_input import ROW_COL, SOURCE_COL
from common.data.schemas import Contract

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

CONFLICT = "conflicting labels"
_SPLIT_ORDER = ("test", "dev", "train")
_ID, _TEXT, _LABELS, _BODY, _OK, _PRIOR, _SPLIT = (
    "_d_id",
    "_d_text",
    "_d_labels",
    "_d_body",
    "_d_ok",
    "_d_prior",
    "_d_split",
)


_REPEATED_TAIL = " with other content (its first row is kept)"


def repeated_id_reason(id_column: str) -> str:
    """The reason of a row whose id an earlier row holds with other content."""
    return f"repeated {id_column}{_REPEATED_TAIL}"


def report(reasons: dict[str, int]) -> dict[str, int]:
    """{duplicate, conflicting, repeated_id: rows} from an ingest's {reason kind: rows} (``quarantine.reason_kind``'s):
    the dedup report logged with every ingested input version and shown by ``augment tables``."""
    return {
        "duplicate": sum(n for r, n in reasons.items() if r and r.startswith(DUPLICATE)),
        "conflicting": sum(n for r, n in reasons.items() if r == CONFLICT),
        "repeated_id": sum(
            n for r, n in reasons.items() if r and r.startswith("repeated ") and r.endswith(_REPEATED_TAIL)
        ),
    }


def _key(name: str, value: "Column") -> "Column":
    """A normalised value as duplicate detection compares it: texts case-folded, label sets joined."""
    from pyspark.sql import functions as F

    if name in TEXT_COLUMNS:
        return text_key(value)  # the leakage checks' key: a text ingest kept once is one text to them too
    if name == "labels":
        return F.array_join(value, "\u0001")
    return value.cast("string")


def _keys(values: dict[str, "Column"], contract: Contract) -> dict[str, "Column"]:
    """The comparison columns of rows whose normalised contract values are ``values``."""
    from pyspark.sql import functions as F

    spec = contract.dedup
    body = [n for n in contract.column_names if n not in (spec.id, "split", *spec.labels)]
    split = F.lower(values["split"]) if "split" in values else F.lit(None).cast("string")
    return {
        _ID: _key(spec.id, values[spec.id]) if spec.id else F.lit(None).cast("string"),
        _TEXT: _key(spec.text, values[spec.text]) if spec.text else F.lit(None).cast("string"),
        # Nulls kept apart from empty strings, so a missing gtin differs from an empty one.
        _LABELS: F.concat_ws("\u0002", *[F.coalesce(_key(n, values[n]), F.lit("\u0003")) for n in spec.labels]),
        _BODY: F.concat_ws("\u0002", *[F.coalesce(_key(n, values[n]), F.lit("\u0003")) for n in body]),
        _SPLIT: F.coalesce(
            F.array_position(F.array(*[F.lit(s) for s in _SPLIT_ORDER]), split), F.lit(len(_SPLIT_ORDER) + 1)
        ),
    }


def with_duplicate_reasons(
    df: "DataFrame",
    contract: Contract,
    cfg: IngestConfig,
    prior: Optional["DataFrame"] = None,
    absent: tuple[str, ...] = (),
) -> "DataFrame":
    """``df`` (a ``quarantine.with_reasons`` frame) with the copies of earlier rows given a ``reason``.

    ``prior``: the contract's table as already ingested (its kept rows, normalised), on an incremental
    ingest; new rows that copy one of them are duplicates too. ``absent``: optional columns the source does
    not have (``RawInput.absent``); an id column among them is not compared (a click log without event ids).
    Returns ``df``'s rows and columns, only ``reason`` changed (filled where it was null); with
    ``ingest.dedup.exact`` off, or nothing to compare, ``df`` itself.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spec = contract.dedup
    by_id = spec.id is not None and spec.id not in absent
    if not cfg.dedup.exact or not (by_id or spec.text):
        return df
    if ROW_COL not in df.columns:
        df = df.withColumn(ROW_COL, F.monotonically_increasing_id())
    rows = df.withColumns(
        {**_keys(normalized(df, contract, cfg), contract), _PRIOR: F.lit(1), _OK: F.col(REASON_COL).isNull()}
    )
    if prior is not None:
        known = prior.select(*[F.col(n) for n in contract.column_names])
        known = known.select(
            *[v.alias(k) for k, v in _keys({n: F.col(n) for n in contract.column_names}, contract).items()]
        )
        rows = rows.unionByName(known.withColumns({_PRIOR: F.lit(0), _OK: F.lit(True)}), allowMissingColumns=True)
    order = [F.col(_PRIOR), F.col(_SPLIT), F.col(SOURCE_COL).asc_nulls_first(), F.col(ROW_COL).asc_nulls_first()]
    quarantine_conflicts = F.lit(cfg.dedup.conflicts == "quarantine")
    unique = F.concat_ws("\u0004", F.lit("\u0004"), F.col(_PRIOR), F.monotonically_increasing_id())

    def fill(frame: "DataFrame", reason: "Column") -> "DataFrame":
        filled = F.coalesce(F.col(REASON_COL), reason)
        return frame.withColumns({REASON_COL: filled, _OK: filled.isNull()})

    def group(key: str) -> "Column":
        # Rows already rejected, and rows without the key, each get a group of their own: they never decide
        # which copy is first, and a log of a million rows without ids is not one window partition.
        return F.when(F.col(_OK) & F.col(key).isNotNull(), F.col(key)).otherwise(unique)

    if by_id:
        rows = rows.withColumn("_d_group", group(_ID))
        record = F.col("_d_group")
        has_id = F.col(_OK) & F.col(_ID).isNotNull()
        first_body = F.first(_BODY).over(Window.partitionBy(record).orderBy(*order))
        label_sets = F.size(F.collect_set(_LABELS).over(Window.partitionBy(record, F.col(_BODY))))
        copy = F.row_number().over(Window.partitionBy(record, F.col(_BODY), F.col(_LABELS)).orderBy(*order))
        rows = fill(
            rows,
            F.coalesce(
                F.when(has_id & (first_body != F.col(_BODY)), F.lit(repeated_id_reason(spec.id))),
                F.when(has_id & (label_sets > 1) & quarantine_conflicts, F.lit(CONFLICT)),
                F.when(has_id & (copy > 1), F.concat(F.lit(DUPLICATE), F.col(_ID))),
            ),
        )
    if spec.text:
        rows = rows.withColumn("_d_group", group(_TEXT))
        text = F.col("_d_group")
        label_sets = F.size(F.collect_set(_LABELS).over(Window.partitionBy(text)))
        same = Window.partitionBy(text, F.col(_LABELS)).orderBy(*order)
        copy = F.row_number().over(same)
        duplicate = F.concat(F.lit(DUPLICATE), F.first(_ID).over(same)) if spec.id else F.lit(DUPLICATE_TEXT)
        rows = fill(
            rows,
            F.coalesce(
                F.when(F.col(_OK) & (label_sets > 1) & quarantine_conflicts, F.lit(CONFLICT)),
                F.when(F.col(_OK) & (copy > 1), duplicate),
            ),
        )
    return rows.filter(F.col(_PRIOR) == 1).select(*df.columns)
