"""Reading a CSV (or TSV) input: every column as a string beside ``_corrupt_record``, record by record (RFC 4180:
a quoted field may hold line breaks) where the file reads cleanly so, else line by line; the header checked (text,
each name once), a hint when a header is one column holding another separator, and the quarantine reason of a
record that did not parse, naming the way the file was read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.data.config import InputSpec
from common.data.raw_input import CORRUPT_COL, InputSchemaError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# RFC 4180 lets a quoted field hold line breaks, so a CSV is read record by record (multiLine) unless the user says
# otherwise or the file cannot be (:func:`_record_by_record`); the reason of a record that does not parse says which
# way the file was read, since the two ways part it into records differently.
MALFORMED_CSV = {
    "true": "malformed record: could not be parsed (CSV read record by record, multiLine on: a quoted "
    "field may span lines)",
    "false": "malformed line: could not be parsed (CSV read line by line, multiLine off: a quoted line "
    "break splits its record)",
    "auto": "malformed line: could not be parsed (CSV read line by line: read record by record, a quote "
    "left open or unescaped in the file would join the lines after it into one record)",
}


def read_csv(spark: "SparkSession", spec: InputSpec) -> tuple["DataFrame", str]:
    """(the CSV input ``spec`` read as strings with ``_corrupt_record``, the quarantine reason of a record that does
    not parse, which names the way the file was read)."""
    from pyspark.sql import types as T

    options = {
        "escape": '"',
        "quote": '"',
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": CORRUPT_COL,
        "multiLine": "false",
    }
    if spec.path.endswith(".tsv"):
        options["sep"] = "\t"
    options.update(spec.options)
    if spec.columns:
        names = list(spec.columns)
        header = spec.header
    else:
        if not spec.header:
            raise InputSchemaError(f"{spec.path}: a CSV without a header needs 'columns' (names in file order)")
        # The header line as written (Spark's own header parsing renames duplicated names to title1, title2).
        first = spark.read.options(**options).option("header", "false").csv(spec.path).first()
        names = [str(c).strip() for c in first if c is not None] if first else []
        _check_header(spec.path, names)
        header = True
    schema = T.StructType(
        [T.StructField(n, T.StringType()) for n in names] + [T.StructField(CORRUPT_COL, T.StringType())]
    )
    chosen = {k.lower(): str(v).lower() for k, v in spec.options.items()}.get("multiline")
    if chosen is None:  # neither said: record by record where the file reads so cleanly
        chosen = "true" if _record_by_record(spark, options, header, schema, spec.path, names[0]) else "auto"
    options = {k: v for k, v in options.items() if k.lower() != "multiline"}
    reader = spark.read.options(**options).option("multiLine", "true" if chosen == "true" else "false")
    df = reader.option("header", str(header).lower()).schema(schema).csv(spec.path)
    return df, MALFORMED_CSV.get(chosen, MALFORMED_CSV["true"])


def _record_by_record(spark: "SparkSession", options: dict, header: bool, schema, path: str, first: str) -> bool:
    """Whether the CSV at ``path`` reads record by record (multiLine) with every record parsed and no quote unescaped
    in a quoted field (a valid RFC 4180 file: its quoted line breaks must not split records). Else an open quote would
    take the lines after it into one record: it is read line by line, each bad line quarantined alone. One pass."""
    from pyspark.sql import functions as F

    probe = (
        spark.read.options(**{**options, "multiLine": "true", "unescapedQuoteHandling": "RAISE_ERROR"})
        .option("header", str(header).lower())
        .schema(schema)
        .csv(path)
    )
    try:
        # The corrupt column alone may not be asked for (Spark refuses it): counted beside the first column.
        found = probe.select(
            F.count(F.col(first)).alias("n"), F.sum(F.col(CORRUPT_COL).isNotNull().cast("int")).alias("bad")
        ).first()
    except Exception as exc:  # an unescaped quote: univocity stops the read
        if "Unescaped quote" in str(exc) or "TextParsingException" in str(exc):
            return False
        raise
    return not found["bad"]


def _check_header(path: str, names: list[str]) -> None:
    """A CSV header must be text and name each column once (Spark would silently rename duplicates)."""
    if any("\x00" in name for name in names):
        raise InputSchemaError(
            f"{path}: the header holds NUL bytes: the file is not UTF-8 (UTF-16?); "
            "set options: {encoding: UTF-16} or re-encode it"
        )
    seen: set[str] = set()
    for position, name in enumerate(names, start=1):
        if name in seen:
            raise InputSchemaError(f"{path}: column {name!r} appears twice in the header (column {position})")
        seen.add(name)


def separator_hint(found: list[str]) -> str:
    """A hint when a single column's name holds another separator (a TSV or ;-separated file read as CSV)."""
    if len(found) == 1:
        for sep, name in (("\t", "\\t"), (";", ";"), ("|", "|")):
            if sep in found[0]:
                return f"; the header is one column holding '{name}': set options: {{sep: '{name}'}}"
    return ""
