"""What a reader hands to validation, and what a broken input raises.

:class:`RawInput` (the raw rows, where they came from, their version and format), the bookkeeping columns a reader
adds (``_source``, ``_corrupt_record``, ``_row``, ``_label_error``), the quarantine reason of a line that did not
parse, and :class:`InputSchemaError` with the translation of an engine's error into one line naming the input
(:func:`reading`, :func:`engine_reason`).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from common.platform.errors import InputError, one_line

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SOURCE_COL = "_source"
CORRUPT_COL = "_corrupt_record"
MALFORMED_LINE = "malformed line: could not be parsed"
ROW_COL = "_row"
LABEL_ERROR_COL = "_label_error"


class InputSchemaError(InputError):
    """An input lacks a required column or has one of the wrong type; the message names file and column."""


@contextmanager
def reading(location: str):
    """Turn an engine error while reading ``location`` (a truncated Parquet footer, a file that is not what
    its suffix says, a duplicated column) into one :class:`InputSchemaError` line naming the input and
    Spark's reason, instead of a JVM stack trace."""
    try:
        yield
    except InputError:
        raise
    except Exception as exc:
        if not _is_engine_error(exc):
            raise
        raise InputSchemaError(f"{location}: cannot read: {engine_reason(exc)}") from exc


def _is_engine_error(exc: BaseException) -> bool:
    """Spark's (Python or JVM side), delta-rs's and Arrow's errors: what a reader raises on a broken input."""
    from deltalake.exceptions import DeltaError
    from pyarrow import ArrowException
    from pyspark.errors import PySparkException

    return isinstance(exc, (PySparkException, DeltaError, ArrowException)) or type(exc).__name__ == "Py4JJavaError"


def engine_reason(exc: BaseException, limit: int = 400) -> str:
    """The informative part of a Spark error: its error-class line and its root cause, on one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not line.strip().startswith("at ")]
    classified = next((line for line in lines if re.search(r"\[[A-Z][A-Z_.]+\]", line)), lines[0] if lines else "")
    classified = classified[classified.find("[") :] if "[" in classified else classified
    causes = [line.split("Caused by:", 1)[1].strip() for line in lines if "Caused by:" in line]
    root = re.sub(r"^[\w.$]+(Exception|Error):\s*", "", causes[-1]) if causes else ""
    return one_line("; ".join([classified] + ([root] if root and root not in classified else [])), limit)


@dataclass(frozen=True)
class RawInput:
    """What a reader returns: the raw DataFrame, where it came from, its version, and its format; ``since``
    is the source version whose rows it leaves out (only the rows appended after it), None for all rows."""

    df: "DataFrame"
    location: str
    version: str
    format: str
    since: Optional[str] = None
    # Optional contract columns the source does not have (added as nulls).
    absent: tuple[str, ...] = ()
    # The quarantine reason of a record the reader could not parse: it names the reader's mode where an option
    # decides what a record is (CSV's multiLine).
    malformed: str = MALFORMED_LINE
