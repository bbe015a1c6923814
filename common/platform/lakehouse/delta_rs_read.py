"""The delta-rs readers: a Delta table version read with Spark's Parquet reader over the file list delta-rs resolves,
the files an append-only run of commits added (incremental reads), and a folder of Parquet files (what Ray's workers
wrote) as a DataFrame. The write path and the log's metadata are :mod:`common.platform.lakehouse.delta_rs`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

from common.platform.lakehouse.delta_rs import commit_infos
from common.platform.lakehouse.tables import LakehouseError
from common.platform.storage import filesystem, list_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def read_delta_rs(
    spark: "SparkSession",
    location: str,
    version: Optional[int] = None,
    storage_options: Optional[dict[str, str]] = None,
    name: Optional[str] = None,
    files: Optional[list[str]] = None,
) -> "DataFrame":
    """Read a Delta table version with Spark's Parquet reader over the file list delta-rs resolves (or only
    ``files`` of it, e.g. :func:`appended_files`), in the version's schema.

    Only the list of data files goes through the driver; Spark reads the files in parallel.
    Raises :class:`LakehouseError` when the table or version does not exist.
    """
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql.pandas.types import from_arrow_schema

    label = name or location
    storage = storage_options or None
    if not DeltaTable.is_deltatable(location, storage_options=storage):
        raise LakehouseError(f"table {label!r} does not exist at {location}")
    try:
        dt = DeltaTable(location, version=version, storage_options=storage)
    except Exception as exc:
        raise LakehouseError(f"table {label!r} has no version {version}: {exc}") from exc
    schema = from_arrow_schema(pa.schema(dt.schema().to_arrow()))
    files = dt.file_uris() if files is None else files
    if not files:
        return spark.createDataFrame([], schema)
    reader = spark.read.schema(schema)
    if dt.metadata().partition_columns:
        reader = reader.option("basePath", location)  # partition values come from k=v folder names
    return reader.parquet(*files)


# Commits that only add rows: a batch or streaming write in Append mode (Spark's and delta-rs's names).
APPEND_OPERATIONS = frozenset({"WRITE", "STREAMING UPDATE"})


def appended_files(
    location: str, from_version: int, to_version: int, storage_options: Optional[dict[str, str]] = None
) -> Optional[list[str]]:
    """The data files that the commits after ``from_version`` up to ``to_version`` added, when every one of
    them only appended rows; then those files hold exactly the rows ``to_version`` has and ``from_version``
    had not. None when any other commit lies between (an overwrite, DELETE, UPDATE, MERGE, OPTIMIZE, a
    schema change...), when a file of ``from_version`` is gone, or when the log no longer reaches back to
    ``from_version``: only a full read is right then.
    """
    from deltalake import DeltaTable

    storage = storage_options or None
    try:
        history = [
            h
            for h in commit_infos(location, storage, to_version - from_version, to_version)
            if from_version < int(h.get("version", -1)) <= to_version
        ]
        if len(history) != to_version - from_version:
            return None
        for entry in history:
            mode = str((entry.get("operationParameters") or {}).get("mode", "")).strip('"').lower()
            if entry.get("operation") not in APPEND_OPERATIONS or mode != "append":
                log.info(
                    "%s v%s is a %s (%s), not an append: reading the whole table",
                    location,
                    entry.get("version"),
                    entry.get("operation"),
                    mode or "no mode",
                )
                return None
        old = set(DeltaTable(location, version=from_version, storage_options=storage).file_uris())
        new = set(DeltaTable(location, version=to_version, storage_options=storage).file_uris())
    except Exception as exc:  # a version whose log is cleaned up: fall back to the full read
        log.info(
            "%s: no append-only change from v%d to v%d (%s): reading the whole table",
            location,
            from_version,
            to_version,
            exc,
        )
        return None
    return sorted(new - old) if old <= new else None


def read_parquet_folder(spark: "SparkSession", folder: str, schema=None) -> "DataFrame":
    """The Parquet files under ``folder`` (e.g. what Ray's workers wrote) as a DataFrame read by the executors;
    with no files, an empty frame of ``schema``: an Arrow schema, Ray's ``Dataset.schema()``, or a function
    returning either (called only then: a lazy Ray Dataset's ``schema()`` executes it again)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    files = [f for f in list_files(folder) if f.base_name.endswith(".parquet")] if _exists(folder) else []
    if files:
        return spark.read.parquet(folder)
    if callable(schema):
        schema = schema()
    arrow = getattr(schema, "base_schema", schema)
    if arrow is None:
        raise LakehouseError(f"no Parquet files under {folder} and no schema to make an empty table from")
    return spark.createDataFrame([], from_arrow_schema(pa.schema(arrow)))


def _exists(folder: str) -> bool:
    import pyarrow.fs as pafs

    fs, path = filesystem(folder)
    return fs.get_file_info(path).type == pafs.FileType.Directory
