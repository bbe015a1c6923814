"""Train/test leakage: no evaluation text may sit, as an exact copy, on the training side of a split, and no
generated augmentation may copy one.

Texts are compared by :func:`text_key` (trimmed, whitespace runs as one space, case-folded), the same
normalisation ingest's duplicate detection uses. Every function here is a DataFrame transform or one bounded
aggregate; the split jobs call :func:`with_copies` to keep copies on one side, :func:`leak_count` to check the
result (and log it), and :func:`mark_test_copies` to reject augmentations that copy a test text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.platform.errors import InputError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# The reject reason of a generated or augmented text that equals an evaluation text.
COPIES_TEST = "copies a test text"
_KEY = "_leak_key"


class LeakageError(InputError):
    """A split put a copy of an evaluation text on the training side."""


def text_key(column: "Column") -> "Column":
    """The normalised text two copies share: trimmed, whitespace runs as one space, case-folded."""
    from pyspark.sql import functions as F

    return F.lower(F.regexp_replace(F.trim(column), r"\s+", " "))


def _keys(df: "DataFrame", column: str) -> "DataFrame":
    return df.select(text_key(df[column]).alias(_KEY)).where(f"{_KEY} IS NOT NULL").distinct()


def with_copies(sample: "DataFrame", population: "DataFrame", column: str) -> "DataFrame":
    """The rows of ``population`` whose ``column`` text is one of ``sample``'s (``sample`` is drawn from
    ``population``): a drawn test set grown by every copy of its texts, so all copies land on the test side.
    Equal to ``sample`` when no text repeats."""
    from pyspark.sql import functions as F

    keyed = population.withColumn(_KEY, text_key(F.col(column)))
    return keyed.join(_keys(sample, column), _KEY, "left_semi").drop(_KEY)


def without_copies(df: "DataFrame", column: str, test: "DataFrame", test_column: str) -> "DataFrame":
    """``df``'s rows whose ``column`` text is none of ``test``'s ``test_column`` texts."""
    from pyspark.sql import functions as F

    return df.withColumn(_KEY, text_key(F.col(column))).join(_keys(test, test_column), _KEY, "left_anti").drop(_KEY)


def groups_with_copies(
    items: "DataFrame", group_column: str, column: str, test: "DataFrame", test_column: str
) -> "DataFrame":
    """The distinct ``group_column`` values of ``items`` whose groups hold one of ``test``'s ``test_column`` texts
    in ``column``: the catalog groups a group-disjoint split keeps off the test side (a group that holds a training
    title would test a title the classifier was trained on)."""
    from pyspark.sql import functions as F

    keyed = items.select(group_column, text_key(F.col(column)).alias(_KEY))
    return keyed.join(_keys(test, test_column), _KEY, "left_semi").select(group_column).distinct()


def leak_count(train: "DataFrame", column: str, test: "DataFrame", test_column: str) -> int:
    """How many distinct texts of ``test`` also occur in ``train`` (one bounded count)."""
    return _keys(test, test_column).join(_keys(train, column), _KEY, "left_semi").count()


def check_no_leak(train: "DataFrame", column: str, test: "DataFrame", test_column: str, what: str) -> int:
    """:func:`leak_count`, raising :class:`LeakageError` (naming ``what``) when it is not zero; returns it."""
    leaked = leak_count(train, column, test, test_column)
    if leaked:
        raise LeakageError(
            f"{what}: {leaked} evaluation texts also occur on the training side (compared "
            "trimmed and case-folded); keep ingest.dedup.exact on and ingest.dedup.conflicts: "
            "quarantine, or give each copy one split"
        )
    return leaked


def mark_test_copies(
    df: "DataFrame",
    column: str,
    test: "DataFrame",
    test_column: str,
    reason_column: str = "reason",
    override: bool = False,
) -> "DataFrame":
    """``df`` with ``reason_column`` set to :data:`COPIES_TEST` where ``column`` copies one of ``test``'s texts
    (an augmentation that would put an evaluation text into training) and the reason was null, or whatever it
    was with ``override`` (where rejected rows still train a variant: BoostAug's unfiltered ones)."""
    from pyspark.sql import functions as F

    if reason_column not in df.columns:
        df = df.withColumn(reason_column, F.lit(None).cast("string"))
    copies = _keys(test, test_column).withColumn("_leak_hit", F.lit(True))
    marked = df.withColumn(_KEY, text_key(F.col(column))).join(copies, _KEY, "left")
    hit = F.when(F.col("_leak_hit"), F.lit(COPIES_TEST))
    reason = F.coalesce(hit, F.col(reason_column)) if override else F.coalesce(F.col(reason_column), hit)
    return marked.withColumn(reason_column, reason).drop(_KEY, "_leak_hit")
