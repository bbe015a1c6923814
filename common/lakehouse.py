"""The lakehouse: every dataset version the suite produces is one version of a named Delta table.

Two write paths, one contract:

* **native** (cluster, Databricks): Spark's own Delta writer, path tables or catalog tables.
* **delta-rs** (this machine, no Delta jar): Spark executors write the Parquet data files in parallel
  into a fresh folder inside the table; the driver reads only their footers and commits them with
  delta-rs as ONE new table version. Rows never pass through the driver.

Every commit carries lineage (job, run id, config hash, input versions) in ``commitInfo.userMetadata``,
which both Spark's ``DESCRIBE HISTORY`` and delta-rs ``history()`` show. A write whose lineage key is
already in the table's history is skipped (idempotent re-runs) unless forced.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Literal, Optional

from common.config import LakehouseConfig
from common.storage import filesystem, list_files, remove_tree

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

WriteMode = Literal["overwrite", "append"]
LINEAGE_MARK = "augment.lineage"


class LakehouseError(RuntimeError):
    """A table is missing, a version does not exist, or a write cannot be committed."""


@dataclass(frozen=True)
class Lineage:
    """Where a table version came from: the job, its run, its config and the versions it read.

    ``inputs`` maps each input (a table name or a file path) to its version (a Delta version number,
    or a fingerprint of a file listing).
    """

    job: str
    config_hash: str
    inputs: dict[str, str] = field(default_factory=dict)
    run_id: Optional[str] = None

    def key(self, table: str) -> str:
        """The idempotence key: same job, table, config and input versions give the same key."""
        payload = json.dumps(
            {"job": self.job, "table": table, "config_hash": self.config_hash, "inputs": self.inputs},
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:24]

    def to_metadata(self, table: str) -> str:
        """The JSON string stored as the commit's userMetadata."""
        return json.dumps(
            {
                LINEAGE_MARK: 1,
                "key": self.key(table),
                "job": self.job,
                "table": table,
                "run_id": self.run_id,
                "config_hash": self.config_hash,
                "inputs": self.inputs,
            },
            sort_keys=True,
        )


@dataclass(frozen=True)
class WriteResult:
    """The outcome of :meth:`Lakehouse.write`: the version holding the data, and whether it was new."""

    table: str
    version: int
    skipped: bool
    num_rows: Optional[int]


@dataclass(frozen=True)
class Commit:
    """One entry of a table's history, with its lineage parsed (None for foreign commits)."""

    version: int
    timestamp_ms: Optional[int]
    operation: Optional[str]
    lineage: Optional[dict[str, Any]]


@dataclass(frozen=True)
class TableInfo:
    """A table in the lakehouse: name, latest version, row count at that version and location."""

    name: str
    version: int
    num_rows: Optional[int]
    location: str
    last_job: Optional[str]


class Lakehouse:
    """Named Delta tables under ``cfg.root`` (path tables) or in ``cfg.catalog`` (catalog tables).

    ``spark`` may be None for metadata-only use (``tables``, ``history``, ``version``) of path tables;
    reads and writes need it. ``native_delta`` selects Spark's Delta writer over delta-rs commits.
    """

    def __init__(self, cfg: LakehouseConfig, spark: "SparkSession | None" = None, native_delta: bool = False):
        if cfg.catalog and not native_delta:
            raise LakehouseError(
                "lakehouse.catalog is set but this Spark session has no Delta support: catalog tables need "
                "Spark's Delta writer (spark.delta: native, with the delta-spark jar on the classpath)"
            )
        self.cfg = cfg
        self.spark = spark
        self.native_delta = native_delta

    # ------------------------------------------------------------------ naming
    def location(self, table: str) -> str:
        """The table's path (path tables) or fully qualified name (catalog tables)."""
        _check_name(table)
        if self.cfg.catalog:
            return f"{self.cfg.catalog}.{table}"
        return f"{self.cfg.root.rstrip('/')}/{table}"

    def _ident(self, table: str) -> str:
        """A Spark SQL identifier for the table."""
        return self.location(table) if self.cfg.catalog else f"delta.`{self.location(table)}`"

    # ------------------------------------------------------------------ metadata
    def exists(self, table: str) -> bool:
        """Whether the table has at least one committed version."""
        return self.version(table) is not None

    def version(self, table: str) -> Optional[int]:
        """The latest version number, or None when the table does not exist."""
        if self.native_delta:
            if not self._native_exists(table):
                return None
            row = self._require_spark().sql(f"DESCRIBE HISTORY {self._ident(table)} LIMIT 1").first()
            return int(row["version"])
        from deltalake import DeltaTable

        location = self.location(table)
        if not DeltaTable.is_deltatable(location, storage_options=self.cfg.storage_options or None):
            return None
        return DeltaTable(location, storage_options=self.cfg.storage_options or None).version()

    def history(self, table: str) -> list[Commit]:
        """All commits, newest first, with lineage parsed from userMetadata."""
        if self.native_delta:
            if not self._native_exists(table):
                raise LakehouseError(f"table {table!r} does not exist at {self.location(table)}")
            rows = self._require_spark().sql(f"DESCRIBE HISTORY {self._ident(table)}").collect()
            commits = [
                Commit(
                    version=int(r["version"]),
                    timestamp_ms=int(r["timestamp"].timestamp() * 1000) if r["timestamp"] else None,
                    operation=r["operation"],
                    lineage=_parse_lineage(r["userMetadata"]),
                )
                for r in rows
            ]
        else:
            dt = self._delta_rs_table(table)
            commits = [
                Commit(
                    version=int(entry.get("version", -1)),
                    timestamp_ms=entry.get("timestamp"),
                    operation=entry.get("operation"),
                    lineage=_parse_lineage(entry.get("userMetadata")),
                )
                for entry in dt.history()
            ]
        return sorted(commits, key=lambda c: c.version, reverse=True)

    def tables(self) -> list[TableInfo]:
        """Every table in the lakehouse with its latest version and row count."""
        if self.cfg.catalog:
            spark = self._require_spark()
            names = sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN {self.cfg.catalog}").collect())
            infos = []
            for name in names:
                history = self.history(name)
                infos.append(TableInfo(name, history[0].version, self.read(name).count(), self.location(name),
                                       (history[0].lineage or {}).get("job")))
            return infos
        return [self._path_table_info(name) for name in self._path_table_names()]

    def find_version(self, table: str, lineage: Lineage) -> Optional[int]:
        """The version whose commit carries ``lineage``'s key, or None."""
        if not self.exists(table):
            return None
        key = lineage.key(table)
        for commit in self.history(table):
            if commit.lineage and commit.lineage.get("key") == key:
                return commit.version
        return None

    # ------------------------------------------------------------------ read
    def read(self, table: str, version: Optional[int] = None) -> "DataFrame":
        """The table as a DataFrame, at ``version`` or the latest one."""
        spark = self._require_spark()
        if self.native_delta:
            reader = spark.read.format("delta")
            if version is not None:
                reader = reader.option("versionAsOf", version)
            if self.cfg.catalog:
                return reader.table(self.location(table))
            return reader.load(self.location(table))
        return read_delta_rs(spark, self.location(table), version, self.cfg.storage_options, name=table)

    def file_uris(self, table: str, version: Optional[int] = None) -> list[str]:
        """The data files of a table version, for readers outside Spark (Ray actors read them directly)."""
        if self.native_delta:
            return sorted(self.read(table, version).inputFiles())
        from deltalake import DeltaTable

        location = self.location(table)
        self._delta_rs_table(table)  # clear error when missing
        return sorted(DeltaTable(location, version=version, storage_options=self.cfg.storage_options or None)
                      .file_uris())

    # ------------------------------------------------------------------ write
    def write(
        self,
        df: "DataFrame",
        table: str,
        mode: WriteMode = "overwrite",
        lineage: Optional[Lineage] = None,
        force: bool = False,
    ) -> WriteResult:
        """Write ``df`` as ONE new version of ``table`` and return that version.

        With ``lineage`` and not ``force``, a table that already holds a commit with the same lineage
        key is left alone and the existing version is returned (``skipped=True``). ``overwrite``
        replaces the content (and schema); ``append`` adds rows and requires the same schema.
        """
        if mode not in ("overwrite", "append"):
            raise LakehouseError(f"write mode must be 'overwrite' or 'append', got {mode!r}")
        _check_name(table)
        done = self._already_written(table, lineage, force)
        if done is not None:
            return done
        metadata = lineage.to_metadata(table) if lineage else None
        if self.native_delta:
            return self._write_native(df, table, mode, metadata)
        return self._write_delta_rs(df, table, mode, metadata)

    def _already_written(self, table: str, lineage: Optional[Lineage], force: bool) -> Optional[WriteResult]:
        """The skipped-write result when ``table`` already holds ``lineage``'s output (and not ``force``)."""
        if lineage is None or force:
            return None
        existing = self.find_version(table, lineage)
        if existing is None:
            return None
        log.info("skip write of %s: version %s already holds this job output (lineage key %s)",
                 table, existing, lineage.key(table))
        return WriteResult(table, existing, skipped=True, num_rows=None)

    def _write_native(self, df: "DataFrame", table: str, mode: WriteMode, metadata: Optional[str]) -> WriteResult:
        writer = df.write.format("delta").mode(mode)
        if mode == "overwrite":
            writer = writer.option("overwriteSchema", "true")
        if metadata:
            writer = writer.option("userMetadata", metadata)
        if self.cfg.catalog:
            writer.saveAsTable(self.location(table))
        else:
            writer.save(self.location(table))
        row = self._require_spark().sql(f"DESCRIBE HISTORY {self._ident(table)} LIMIT 1").first()
        metrics = row["operationMetrics"] or {}
        rows = metrics.get("numOutputRows")
        return WriteResult(table, int(row["version"]), skipped=False, num_rows=int(rows) if rows else None)

    def _write_delta_rs(self, df: "DataFrame", table: str, mode: WriteMode, metadata: Optional[str]) -> WriteResult:
        from pyspark.sql.pandas.types import to_arrow_schema

        def spark_writes(staging: str) -> None:
            (df.write.mode("errorifexists")
             .option("compression", "snappy")
             .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
             .parquet(staging))

        return self._commit_written(table, mode, metadata, spark_writes, to_arrow_schema(df.schema))

    def _commit_written(self, table: str, mode: WriteMode, metadata: Optional[str], write_files, arrow_schema=None
                        ) -> WriteResult:
        """Let ``write_files(folder)`` write Parquet files into a fresh folder inside the table, then commit
        them with delta-rs as ONE version. A failure removes the folder; no version is created."""
        from deltalake import DeltaTable
        from deltalake.transaction import CommitProperties, create_table_with_add_actions

        location = self.location(table)
        storage = self.cfg.storage_options or None
        # A fresh folder per write: files of a failed write are never referenced by the log, and are
        # removed below; a later VACUUM would drop them too.
        batch_dir = f"w{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        staging = f"{location}/{batch_dir}"
        try:
            write_files(staging)
            actions = _add_actions_for(staging, batch_dir)
            if arrow_schema is None:
                arrow_schema = _schema_of(staging)
            properties = CommitProperties(custom_metadata={"userMetadata": metadata} if metadata else None)
            if DeltaTable.is_deltatable(location, storage_options=storage):
                dt = DeltaTable(location, storage_options=storage)
                if mode == "append":
                    _check_same_schema(table, dt, arrow_schema)
                dt.create_write_transaction(actions, mode, arrow_schema, commit_properties=properties)
            else:
                from deltalake import Schema

                create_table_with_add_actions(location, Schema.from_arrow(arrow_schema), actions, mode="error",
                                              name=table, storage_options=storage, commit_properties=properties)
        except BaseException:
            remove_tree(staging)
            raise
        version = DeltaTable(location, storage_options=storage).version()
        num_rows = sum(json.loads(a.stats)["numRecords"] for a in actions)
        log.info("committed %s version %s (%d rows, %d files)", table, version, num_rows, len(actions))
        return WriteResult(table, version, skipped=False, num_rows=num_rows)

    # ------------------------------------------------------------------ Ray handoff
    def read_ray(self, table: str, version: Optional[int] = None, columns: Optional[list[str]] = None):
        """The table version as a Ray Dataset read from its Parquet files by Ray's workers (no driver copy)."""
        import ray

        return ray.data.read_parquet(self.file_uris(table, version), columns=columns)

    def write_ray(self, ds, table: str, mode: WriteMode = "overwrite", lineage: Optional[Lineage] = None,
                  force: bool = False) -> WriteResult:
        """Write a Ray Dataset as ONE new version of a path table: Ray's workers write the Parquet files,
        the driver commits them with delta-rs (lineage and idempotence as in :meth:`write`)."""
        if self.cfg.catalog:
            raise LakehouseError("Ray writes go to path tables; catalog tables are written through Spark")
        _check_name(table)
        done = self._already_written(table, lineage, force)
        if done is not None:
            return done
        metadata = lineage.to_metadata(table) if lineage else None
        return self._commit_written(table, mode, metadata, lambda staging: ds.write_parquet(staging))

    # ------------------------------------------------------------------ helpers
    def _require_spark(self) -> "SparkSession":
        if self.spark is None:
            raise LakehouseError("this lakehouse operation needs a SparkSession")
        return self.spark

    def _native_exists(self, table: str) -> bool:
        spark = self._require_spark()
        if self.cfg.catalog:
            return spark.catalog.tableExists(self.location(table))
        try:
            spark.sql(f"DESCRIBE HISTORY {self._ident(table)} LIMIT 1").first()
            return True
        except Exception:
            return False

    def _delta_rs_table(self, table: str):
        from deltalake import DeltaTable

        location = self.location(table)
        storage = self.cfg.storage_options or None
        if not DeltaTable.is_deltatable(location, storage_options=storage):
            raise LakehouseError(f"table {table!r} does not exist at {location}")
        return DeltaTable(location, storage_options=storage)

    def _path_table_names(self) -> list[str]:
        import pyarrow.fs as pafs

        fs, root = filesystem(self.cfg.root)
        info = fs.get_file_info(root)
        if info.type != pafs.FileType.Directory:
            return []
        names = []
        for entry in fs.get_file_info(pafs.FileSelector(root, recursive=False)):
            if entry.type == pafs.FileType.Directory and \
                    fs.get_file_info(f"{entry.path}/_delta_log").type == pafs.FileType.Directory:
                names.append(entry.base_name)
        return sorted(names)

    def _path_table_info(self, name: str) -> TableInfo:
        dt = self._delta_rs_table(name)
        adds = dt.get_add_actions(flatten=True)
        import pyarrow as pa

        adds = pa.table(adds)
        num_rows = int(sum(v for v in adds.column("num_records").to_pylist() if v is not None)) \
            if "num_records" in adds.column_names else None
        last = dt.history(1)
        lineage = _parse_lineage(last[0].get("userMetadata")) if last else None
        return TableInfo(name, dt.version(), num_rows, self.location(name), (lineage or {}).get("job"))


def read_delta_rs(spark: "SparkSession", location: str, version: Optional[int] = None,
                  storage_options: Optional[dict[str, str]] = None, name: Optional[str] = None) -> "DataFrame":
    """Read a Delta table version with Spark's Parquet reader over the file list delta-rs resolves.

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
    files = dt.file_uris()
    if not files:
        return spark.createDataFrame([], schema)
    reader = spark.read.schema(schema)
    if dt.metadata().partition_columns:
        reader = reader.option("basePath", location)  # partition values come from k=v folder names
    return reader.parquet(*files)


def _add_actions_for(staging: str, batch_dir: str) -> list:
    """AddActions (relative path, size, mtime, stats) for the Parquet files under ``staging``.

    Stats (numRecords, nullCount, min/max) come from each file's footer: one small read per file.
    """
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    fs, root = filesystem(staging)
    files = [f for f in list_files(staging) if f.base_name.endswith(".parquet") and not f.base_name.startswith(".")]
    actions = []
    for info in sorted(files, key=lambda f: f.path):
        with fs.open_input_file(info.path) as handle:
            stats = _parquet_stats(pq.ParquetFile(handle).metadata)
        relative = f"{batch_dir}/{info.path[len(root):].lstrip('/')}"
        mtime_ms = int(info.mtime.timestamp() * 1000) if info.mtime else int(time.time() * 1000)
        actions.append(AddAction(relative, info.size, {}, mtime_ms, True, json.dumps(stats)))
    return actions


def _parquet_stats(meta) -> dict[str, Any]:
    """Delta file statistics from a Parquet footer: numRecords, and per top-level column nullCount/min/max."""
    null_count: dict[str, int] = {}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    complete: dict[str, bool] = {}
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for ci in range(group.num_columns):
            column = group.column(ci)
            name = column.path_in_schema
            if "." in name:  # nested columns: Delta stats for them are optional
                continue
            st = column.statistics
            if st is None or not st.has_null_count:
                complete[name] = False
                continue
            complete.setdefault(name, True)
            null_count[name] = null_count.get(name, 0) + st.null_count
            if st.has_min_max and isinstance(st.min, (int, float, str)) and not isinstance(st.min, bool):
                mins[name] = st.min if name not in mins else min(mins[name], st.min)
                maxs[name] = st.max if name not in maxs else max(maxs[name], st.max)
    stats: dict[str, Any] = {"numRecords": meta.num_rows}
    kept = {k: v for k, v in null_count.items() if complete.get(k)}
    if kept:
        stats["nullCount"] = kept
    # String min/max are left out: Delta truncates them by its own rules, and wrong bounds would prune data.
    numeric_min = {k: v for k, v in mins.items() if complete.get(k) and not isinstance(v, str)}
    if numeric_min:
        stats["minValues"] = numeric_min
        stats["maxValues"] = {k: maxs[k] for k in numeric_min}
    return stats


def _schema_of(folder: str):
    """The Arrow schema of the first Parquet file under ``folder``."""
    import pyarrow.parquet as pq

    fs, _ = filesystem(folder)
    files = sorted((f for f in list_files(folder) if f.base_name.endswith(".parquet")), key=lambda f: f.path)
    if not files:
        raise LakehouseError(f"no Parquet files were written under {folder}")
    with fs.open_input_file(files[0].path) as handle:
        return pq.read_schema(handle)


def _check_same_schema(table: str, dt, arrow_schema) -> None:
    import pyarrow as pa

    current = pa.schema(dt.schema().to_arrow())
    have = {f.name: f.type for f in current}
    want = {f.name: f.type for f in arrow_schema}
    if have != want:
        missing = sorted(set(have) - set(want))
        extra = sorted(set(want) - set(have))
        changed = sorted(k for k in set(have) & set(want) if have[k] != want[k])
        raise LakehouseError(
            f"append to {table!r} with a different schema: missing columns {missing}, new columns {extra}, "
            f"changed types {changed}; write with mode='overwrite' to replace the schema"
        )


def _parse_lineage(user_metadata: Any) -> Optional[dict[str, Any]]:
    if not user_metadata:
        return None
    try:
        parsed = json.loads(user_metadata) if isinstance(user_metadata, str) else user_metadata
    except (TypeError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) and parsed.get(LINEAGE_MARK) else None


def _check_name(table: str) -> None:
    if not table or not all(c.isalnum() or c == "_" for c in table):
        raise LakehouseError(f"table names are letters, digits and '_' only, got {table!r}")


def fingerprint_files(paths: Iterable[tuple[str, int, float]]) -> str:
    """A version string for file inputs: a hash of (path, size, mtime) of every file in the listing."""
    digest = hashlib.sha256()
    for path, size, mtime in sorted(paths):
        digest.update(f"{path}\0{size}\0{mtime:.3f}\n".encode())
    return "files:" + digest.hexdigest()[:16]
