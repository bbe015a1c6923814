"""The lakehouse: every dataset version the suite produces is one version of a named Delta table.

Two write paths, one contract (this module is the table API; each path has its own module):

* **native** (:mod:`common.platform.lakehouse.delta_native`; cluster, Databricks): Spark's own Delta writer, path
tables or
  catalog tables.
* **delta-rs** (:mod:`common.platform.lakehouse.delta_rs`; no Delta jar): Spark executors write the Parquet data files
in
  parallel into a fresh folder inside the table; the driver reads only their footers and commits them with
  delta-rs as ONE new table version. Rows never pass through the driver.

Ray Datasets come in and go out through the same contract (:mod:`common.platform.lakehouse.ray_io`); a table's metadata
(versions, history, lineage look-ups) is :mod:`common.platform.lakehouse.metadata`.

Every commit carries lineage (job, run id, config hash, input versions) in ``commitInfo.userMetadata``,
which both Spark's ``DESCRIBE HISTORY`` and delta-rs ``history()`` show. A write whose lineage key is
already in the table's history is skipped (idempotent re-runs) unless forced.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING, Iterable, Optional

from common.platform.config import LakehouseConfig
from common.platform.lakehouse import delta_native, delta_rs
from common.platform.lakehouse.delta_rs_read import read_delta_rs
from common.platform.lakehouse.metadata import TableMetadata
from common.platform.lakehouse.ray_io import RayHandoff
from common.platform.lakehouse.tables import (
    LINEAGE_MARK,
    Commit,
    LakehouseError,
    Lineage,
    TableInfo,
    WriteMode,
    WriteResult,
    app_id,
    check_name,
)
from common.platform.storage import arrow_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "Lakehouse",
    "LakehouseError",
    "Lineage",
    "WriteResult",
    "WriteMode",
    "Commit",
    "TableInfo",
    "LINEAGE_MARK",
    "read_delta_rs",
    "fingerprint_files",
]

log = logging.getLogger(__name__)


class Lakehouse(TableMetadata, RayHandoff):
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
        check_name(table)
        if self.cfg.catalog:
            return f"{self.cfg.catalog}.{table}"
        return f"{self.cfg.root.rstrip('/')}/{table}"

    def _ident(self, table: str) -> str:
        """A Spark SQL identifier for the table."""
        return self.location(table) if self.cfg.catalog else f"delta.`{self.location(table)}`"

    # ------------------------------------------------------------------ read
    def read(self, table: str, version: Optional[int] = None) -> "DataFrame":
        """The table as a DataFrame, at ``version`` or the latest one."""
        spark = self._require_spark()
        if self.native_delta:
            if not self.exists(table):
                raise LakehouseError(f"table {table!r} does not exist at {self.location(table)}")
            reader = spark.read.format("delta")
            if version is not None:
                reader = reader.option("versionAsOf", version)
            try:
                return reader.table(self.location(table)) if self.cfg.catalog else reader.load(self.location(table))
            except Exception as exc:
                if version is not None and "time travel" in str(exc).lower():
                    raise LakehouseError(f"table {table!r} has no version {version}: {exc}") from exc
                raise
        return read_delta_rs(spark, self.location(table), version, self.cfg.storage_options, name=table)

    def file_uris(self, table: str, version: Optional[int] = None) -> list[str]:
        """The data files of a table version, for readers outside Spark (Ray actors read them directly), named as
        pyarrow names them (:func:`~common.platform.storage.arrow_uri`: a table Spark wrote through s3a:// is read
        from s3://). Path tables are resolved by delta-rs whichever path wrote them; catalog tables by Spark."""
        if self.cfg.catalog:
            return sorted(arrow_uri(_local_path(uri)) for uri in self.read(table, version).inputFiles())
        from deltalake import DeltaTable

        location = self.location(table)
        self._delta_rs_table(table)  # clear error when missing
        return sorted(
            arrow_uri(uri)
            for uri in DeltaTable(
                location, version=version, storage_options=self.cfg.storage_options or None
            ).file_uris()
        )

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
        check_name(table)
        done = self.already_written(table, lineage, force)
        if done is not None:
            return done
        metadata = lineage.to_metadata(table) if lineage else None
        if self.native_delta:
            return self._write_native(df, table, mode, metadata, app_id(table, lineage, force))
        return self._write_delta_rs(df, table, mode, metadata, app_id(table, lineage, force))

    def already_written(self, table: str, lineage: Optional[Lineage], force: bool) -> Optional[WriteResult]:
        """The skipped-write result when ``table`` already holds ``lineage``'s output (and not ``force``)."""
        if lineage is None or force:
            return None
        existing = self.find_version(table, lineage)
        if existing is None:
            return None
        log.info(
            "skip write of %s: version %s already holds this job output (lineage key %s)",
            table,
            existing,
            lineage.key(table),
        )
        return WriteResult(table, existing, skipped=True, num_rows=None)

    def _write_native(
        self, df: "DataFrame", table: str, mode: WriteMode, metadata: Optional[str], app_id: Optional[str] = None
    ) -> WriteResult:
        if self.cfg.catalog:
            self._require_spark().sql(f"CREATE SCHEMA IF NOT EXISTS {self.cfg.catalog}")
        started = time.monotonic()
        result = delta_native.write(
            self._require_spark(),
            df,
            table,
            self.location(table),
            self._ident(table),
            bool(self.cfg.catalog),
            mode,
            metadata,
            app_id,
            self.cfg.storage_options or None,
            self.cfg.lease,
        )
        # The time covers computing the frame and writing its files as well as the commit.
        log.info(
            "committed %s version %s with Spark's Delta writer (%s rows) in %.1f s%s",
            table,
            result.version,
            result.num_rows,
            time.monotonic() - started,
            " - already written by a concurrent run" if result.skipped else "",
        )
        return result

    def _write_delta_rs(
        self, df: "DataFrame", table: str, mode: WriteMode, metadata: Optional[str], app_id: Optional[str] = None
    ) -> WriteResult:
        from pyspark.sql.pandas.types import to_arrow_schema

        def spark_writes(staging: str) -> None:
            (
                df.write.mode("errorifexists")
                .option("compression", "snappy")
                .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
                .parquet(staging)
            )

        return self._commit_written(table, mode, metadata, spark_writes, to_arrow_schema(df.schema), app_id)

    def _commit_written(
        self,
        table: str,
        mode: WriteMode,
        metadata: Optional[str],
        write_files,
        arrow_schema=None,
        app_id: Optional[str] = None,
    ) -> WriteResult:
        return delta_rs.commit_files(
            table,
            self.location(table),
            self.cfg.storage_options or None,
            mode,
            metadata,
            write_files,
            arrow_schema,
            app_id,
        )

    # ------------------------------------------------------------------ helpers
    def _require_spark(self) -> "SparkSession":
        if self.spark is None:
            raise LakehouseError("this lakehouse operation needs a SparkSession")
        return self.spark


def _local_path(uri: str) -> str:
    """``file:/x`` and ``file:///x`` as the plain path ``/x`` (Ray and pyarrow take both); other URIs unchanged."""
    if uri.startswith("file:"):
        return "/" + uri[len("file:") :].lstrip("/")
    return uri


def fingerprint_files(paths: Iterable[tuple[str, int, float]]) -> str:
    """A version string for file inputs: a hash of (path, size, mtime) of every file in the listing."""
    digest = hashlib.sha256()
    for path, size, mtime in sorted(paths):
        digest.update(f"{path}\0{size}\0{mtime:.3f}\n".encode())
    return "files:" + digest.hexdigest()[:16]
