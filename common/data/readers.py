"""Readers for the suite's inputs: CSV, Parquet, JSON lines, Delta paths and catalog table names.

A reader returns the raw rows with the contract's column names (renamed and checked), plus
``_source`` (file path or table@version) and ``_corrupt_record`` (text-format lines that did not parse),
so that validation can quarantine rows instead of dropping them. Missing or mistyped columns raise
:class:`InputSchemaError` naming the file and the column.
"""

from __future__ import annotations

import glob
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from common.data.config import FILE_FORMATS, InputSpec, looks_like_table_name
from common.data.schemas import Contract
from common.platform.errors import InputError, one_line
from common.platform.lakehouse import fingerprint_files, read_delta_rs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SOURCE_COL = "_source"
CORRUPT_COL = "_corrupt_record"
MALFORMED_LINE = "malformed line: could not be parsed"
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
ROW_COL = "_row"


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


def resolve_format(spec: InputSpec) -> str:
    """The concrete format of ``spec``: the configured one, or detected from the path.

    Raises :class:`InputSchemaError` when the path does not exist or its format cannot be told.
    """
    if spec.format != "auto":
        return spec.format
    if looks_like_table_name(spec.path):
        return "table"
    if "://" in spec.path:
        if spec.path.rstrip("/").endswith(tuple(FILE_FORMATS)):
            return FILE_FORMATS[Path(spec.path).suffix.lower()]
        return _folder_format(spec.path)
    if any(ch in spec.path for ch in "*?["):
        matches = sorted(glob.glob(spec.path))
        if not matches:
            raise InputSchemaError(f"input not found: no file matches {spec.path}")
        formats = {FILE_FORMATS.get(Path(m).suffix.lower()) for m in matches}
        if len(formats) != 1 or None in formats:
            raise InputSchemaError(f"{spec.path}: matches files of several or unknown formats; set format")
        return formats.pop()
    path = Path(spec.path)
    if not path.exists():
        raise InputSchemaError(f"input not found: {spec.path}")
    if path.is_dir():
        return _folder_format(spec.path)
    fmt = FILE_FORMATS.get(path.suffix.lower())
    if not fmt:
        raise InputSchemaError(f"{spec.path}: unknown file suffix {path.suffix!r}; set format: csv|parquet|json|delta")
    return fmt


def _folder_format(folder: str) -> str:
    """The format of a folder of input files, on a local disk or an object store: ``delta`` when it holds a Delta
    log, else the one format its files' suffixes name (hidden and ``_`` files aside, as Spark skips them). Raises
    :class:`InputSchemaError` when it holds no file, or files of no or several known formats."""
    from common.platform.storage import filesystem, list_files

    base = filesystem(folder)[1].rstrip("/") + "/"
    names = [info.path[len(base) :] if info.path.startswith(base) else info.base_name for info in list_files(folder)]
    if not names:
        raise InputSchemaError(f"input not found: {folder} (no files)")
    if any(name.startswith("_delta_log/") for name in names):
        return "delta"
    suffixes = {
        Path(name).suffix.lower() for name in names if not any(part.startswith((".", "_")) for part in name.split("/"))
    }
    formats = {FILE_FORMATS[s] for s in suffixes if s in FILE_FORMATS}
    if len(formats) == 1:
        return formats.pop()
    raise InputSchemaError(
        f"{folder}: cannot tell the format of this folder (found {sorted(suffixes)}); "
        "set format: csv|parquet|json|delta"
    )


def read_input(
    spark: "SparkSession",
    spec: InputSpec,
    contract: Contract,
    native_delta: bool = False,
    since: Optional[str] = None,
    label_separator: str = ",",
) -> RawInput:
    """Read ``spec`` and shape it to ``contract``.

    Returns a :class:`RawInput` whose DataFrame has every contract column (optional ones null-filled),
    with text formats read as strings (typed per row later, so bad values are quarantined, not fatal),
    plus ``_source`` and, for text formats, ``_corrupt_record``. With ``since`` (a source version read
    before) and a Delta path input whose commits after it only appended rows, only those rows are read
    (``RawInput.since`` says so); otherwise every row is. A multi-label input's ``labels`` arrives as one
    string joined by ``label_separator`` (folded from ``spec.label_columns``, or joined from an array), with
    ``_label_error`` naming an indicator column that is not 0/1. Engine errors while reading (a truncated
    Parquet footer, a duplicated column) raise :class:`InputSchemaError` naming the input; rows that fail
    only when an action reads them are the caller's to wrap in :func:`reading`.
    """
    fmt = resolve_format(spec)
    with reading(spec.path):
        return _shape(spark, spec, contract, fmt, native_delta, since, label_separator)


def _shape(
    spark: "SparkSession",
    spec: InputSpec,
    contract: Contract,
    fmt: str,
    native_delta: bool,
    since: Optional[str],
    label_separator: str,
) -> RawInput:
    """:func:`read_input`'s body, its engine errors turned into one-line errors by the caller."""
    from pyspark.sql import functions as F

    df, location, version, malformed = _read_raw(spark, spec, fmt, native_delta)
    if since is not None:
        df, since = _appended_since(spark, df, spec, fmt, since, version)
    for old, new in spec.rename.items():
        if old not in df.columns:
            raise InputSchemaError(f"{location}: rename source column {old!r} not found; columns: {df.columns}")
        df = df.withColumnRenamed(old, new)
    for name, pattern in spec.from_path.items():
        if fmt not in ("csv", "json", "parquet"):
            raise InputSchemaError(f"{location}: from_path needs a file input (csv, json, parquet), not {fmt}")
        value = F.regexp_extract(F.col("_metadata.file_path"), pattern, 1)
        df = df.withColumn(name, F.when(value != "", value))
    for name, value in spec.defaults.items():
        if name not in df.columns:
            df = df.withColumn(name, F.lit(value))
    if spec.label_columns:
        df = _fold_label_columns(df, spec.label_columns, label_separator, location)
    if (
        "labels" in contract.column_names
        and "labels" in df.columns
        and df.schema["labels"].dataType.typeName() == "array"
    ):
        df = df.withColumn("labels", F.array_join("labels", label_separator))
    missing = [c.name for c in contract.required if c.name not in df.columns]
    if missing:
        found = [c for c in df.columns if c != CORRUPT_COL]
        unparsed = "; no line of it parses as a JSON object" if fmt == "json" and not found else ""
        raise InputSchemaError(
            f"{location}: missing required column {missing[0]!r} for {contract.name} "
            f"(needs {', '.join(c.name for c in contract.required)}; found {', '.join(found) or 'no columns'})"
            + _separator_hint(found)
            + unparsed
        )
    if fmt != "csv":
        # JSON primitives arrive as strings (typed per row later); its arrays and objects do not.
        df = _check_types(df, contract, location, strings_ok=fmt == "json")
    absent = tuple(c.name for c in contract.columns if c.name not in df.columns)
    for name in absent:
        df = df.withColumn(name, F.lit(None).cast("string"))
    if CORRUPT_COL not in df.columns:
        df = df.withColumn(CORRUPT_COL, F.lit(None).cast("string"))
    if fmt in ("csv", "json", "parquet"):
        df = df.withColumn(SOURCE_COL, F.col("_metadata.file_path"))
    else:
        df = df.withColumn(SOURCE_COL, F.lit(f"{location}@v{version}"))
    # Read order within the scan (increasing along each file): which of two copies came first, for ingest's
    # duplicate detection. The same files give the same ids, so the kept copy is the same on every run.
    df = df.withColumn(ROW_COL, F.monotonically_increasing_id())
    return RawInput(
        df=df, location=location, version=version, format=fmt, since=since, absent=absent, malformed=malformed
    )


LABEL_ERROR_COL = "_label_error"


def _fold_label_columns(df: "DataFrame", columns: list[str], separator: str, location: str) -> "DataFrame":
    """Multi-hot 0/1 ``columns`` -> ``labels`` (the names of those holding 1, joined by ``separator``) and
    ``_label_error`` (the first column holding anything but 0 or 1, for the quarantine)."""
    from pyspark.sql import functions as F

    absent = [c for c in columns if c not in df.columns]
    if absent:
        raise InputSchemaError(
            f"{location}: label column {absent[0]!r} (inputs.multilabel.label_columns) not found; "
            f"columns: {', '.join(df.columns)}"
        )
    value = {c: F.trim(F.col(c).cast("string")) for c in columns}
    labels = F.concat_ws(separator, *[F.when(value[c] == "1", F.lit(c)) for c in columns])
    error = F.coalesce(
        *[F.when(value[c].isNull() | ~value[c].isin("0", "1"), F.lit(f"label column {c} is not 0/1")) for c in columns]
    )
    return df.withColumn("labels", labels).withColumn(LABEL_ERROR_COL, error)


def _appended_since(
    spark: "SparkSession", df: "DataFrame", spec: InputSpec, fmt: str, since: str, version: str
) -> tuple["DataFrame", Optional[str]]:
    """(the rows appended to a Delta path input after ``since``, ``since``) when its commits since then only
    appended; else (``df``, None): every row."""
    from common.platform.delta_rs import appended_files

    if fmt != "delta" or not since.isdigit() or int(since) >= int(version):
        return df, None
    files = appended_files(spec.path, int(since), int(version))
    if files is None:
        return df, None
    return read_delta_rs(spark, spec.path, int(version), files=files), since


def _read_raw(
    spark: "SparkSession", spec: InputSpec, fmt: str, native_delta: bool
) -> tuple["DataFrame", str, str, str]:
    from pyspark.sql import types as T

    if fmt == "table":
        df = spark.read.table(spec.path)
        return df, spec.path, _table_version(spark, spec.path), MALFORMED_LINE
    if fmt == "delta":
        if native_delta:
            df = spark.read.format("delta").load(spec.path)
            version = str(spark.sql(f"DESCRIBE HISTORY delta.`{spec.path}` LIMIT 1").first()["version"])
        else:
            from deltalake import DeltaTable

            version = str(DeltaTable(spec.path).version())
            df = read_delta_rs(spark, spec.path, int(version))
        return df, spec.path, version, MALFORMED_LINE
    entries = _file_entries(spec.path)
    if entries and all(e.size == 0 for e in entries):
        raise InputSchemaError(f"{spec.path}: empty input: {len(entries)} file(s), all of 0 bytes")
    version = _fingerprint(entries)
    if fmt == "parquet":
        return spark.read.options(**spec.options).parquet(spec.path), spec.path, version, MALFORMED_LINE
    if fmt == "json":
        # Strings for every primitive: values are typed per row by validation, so a bad value is a
        # quarantined row rather than a failed job.
        reader = spark.read.options(
            primitivesAsString="true", mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT_COL, **spec.options
        )
        return reader.json(spec.path), spec.path, version, MALFORMED_LINE
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
    return df, spec.path, version, MALFORMED_CSV.get(chosen, MALFORMED_CSV["true"])


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


def _separator_hint(found: list[str]) -> str:
    """A hint when a single column's name holds another separator (a TSV or ;-separated file read as CSV)."""
    if len(found) == 1:
        for sep, name in (("\t", "\\t"), (";", ";"), ("|", "|")):
            if sep in found[0]:
                return f"; the header is one column holding '{name}': set options: {{sep: '{name}'}}"
    return ""


def _check_types(df: "DataFrame", contract: Contract, location: str, strings_ok: bool = False) -> "DataFrame":
    """Typed sources: strings may arrive as integers (ids) and are cast; anything else is an error.
    ``strings_ok``: a string is fine for any column (JSON primitives, typed per row by validation)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    integral = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
    types = {f.name: f.dataType for f in df.schema.fields}
    for column in contract.columns:
        if column.name not in types:
            continue
        actual = types[column.name]
        if strings_ok and isinstance(actual, T.StringType):
            continue
        if column.type == "string":
            if isinstance(actual, T.StringType):
                continue
            if isinstance(actual, integral):
                df = df.withColumn(column.name, F.col(column.name).cast("string"))
                continue
        elif isinstance(actual, integral):
            df = df.withColumn(column.name, F.col(column.name).cast("long"))
            continue
        raise InputSchemaError(
            f"{location}: column {column.name!r} has type {actual.simpleString()}, expected {column.type}"
        )
    return df


def file_version(path: str) -> str:
    """Fingerprint of the files under ``path`` (size and mtime): re-reading unchanged files gives the same."""
    return _fingerprint(_file_entries(path))


def _file_entries(path: str) -> list:
    """The files under ``path`` (a file, folder or local glob) with their sizes and times."""
    from common.platform.storage import list_files

    paths = sorted(glob.glob(path)) if any(ch in path for ch in "*?[") and "://" not in path else [path]
    return [e for p in paths for e in list_files(p)]


def _fingerprint(entries: list) -> str:
    return fingerprint_files((e.path, e.size, e.mtime.timestamp() if e.mtime else 0.0) for e in entries)


def _table_version(spark: "SparkSession", name: str) -> str:
    try:
        return str(spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["version"])
    except Exception:
        return "unversioned"  # a non-Delta catalog table (e.g. a Hive table)
