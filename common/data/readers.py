"""Readers for the suite's inputs: CSV, Parquet, JSON lines, Delta paths and catalog table names.

A reader returns the raw rows with the contract's column names (renamed and checked), plus
``_source`` (file path or table@version) and ``_corrupt_record`` (text-format lines that did not parse),
so that validation can quarantine rows instead of dropping them. Missing or mistyped columns raise
:class:`InputSchemaError` naming the file and the column.

The reading and shaping live here; :mod:`common.data.raw_input` holds what a reader returns and raises,
:mod:`common.data.input_formats` an input's format and version, :mod:`common.data.csv_input` the CSV reading.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from common.data.config import InputSpec
from common.data.csv_input import read_csv, separator_hint
from common.data.input_formats import file_entries, fingerprint, resolve_format, table_version
from common.data.raw_input import (
    CORRUPT_COL,
    LABEL_ERROR_COL,
    MALFORMED_LINE,
    ROW_COL,
    SOURCE_COL,
    InputSchemaError,
    RawInput,
    reading,
)
from common.data.schemas import Contract
from common.platform.lakehouse.lakehouse import read_delta_rs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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
            + separator_hint(found)
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
    from common.platform.lakehouse.delta_rs_read import appended_files

    if fmt != "delta" or not since.isdigit() or int(since) >= int(version):
        return df, None
    files = appended_files(spec.path, int(since), int(version))
    if files is None:
        return df, None
    return read_delta_rs(spark, spec.path, int(version), files=files), since


def _read_raw(
    spark: "SparkSession", spec: InputSpec, fmt: str, native_delta: bool
) -> tuple["DataFrame", str, str, str]:
    if fmt == "table":
        df = spark.read.table(spec.path)
        return df, spec.path, table_version(spark, spec.path), MALFORMED_LINE
    if fmt == "delta":
        if native_delta:
            df = spark.read.format("delta").load(spec.path)
            version = str(spark.sql(f"DESCRIBE HISTORY delta.`{spec.path}` LIMIT 1").first()["version"])
        else:
            from deltalake import DeltaTable

            version = str(DeltaTable(spec.path).version())
            df = read_delta_rs(spark, spec.path, int(version))
        return df, spec.path, version, MALFORMED_LINE
    entries = file_entries(spec.path)
    if entries and all(e.size == 0 for e in entries):
        raise InputSchemaError(f"{spec.path}: empty input: {len(entries)} file(s), all of 0 bytes")
    version = fingerprint(entries)
    if fmt == "parquet":
        return spark.read.options(**spec.options).parquet(spec.path), spec.path, version, MALFORMED_LINE
    if fmt == "json":
        # Strings for every primitive: values are typed per row by validation, so a bad value is a
        # quarantined row rather than a failed job.
        reader = spark.read.options(
            primitivesAsString="true", mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT_COL, **spec.options
        )
        return reader.json(spec.path), spec.path, version, MALFORMED_LINE
    df, malformed = read_csv(spark, spec)
    return df, spec.path, version, malformed


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
