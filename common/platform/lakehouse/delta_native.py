"""The native write path: Spark's own Delta writer (clusters, Databricks, and locally with the Delta jars),
for path tables and catalog tables, with history and versions from ``DESCRIBE HISTORY``."""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from typing import TYPE_CHECKING, Optional

from common.platform.lakehouse.commit_lease import LeaseSettings, commit_lock
from common.platform.lakehouse.tables import (
    RECENT_COMMITS,
    Commit,
    LakehouseError,
    WriteMode,
    WriteResult,
    check_same_schema,
    parse_lineage,
)

# How often a write that lost a race to a concurrent writer of another lineage is run again.
COMMIT_RETRIES = 5

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def table_exists(spark: "SparkSession", ident: str, catalog_name: Optional[str]) -> bool:
    """Whether the table (catalog name ``catalog_name``, or the path identifier ``ident``) has a version."""
    if catalog_name:
        return spark.catalog.tableExists(catalog_name)
    try:
        spark.sql(f"DESCRIBE HISTORY {ident} LIMIT 1").first()
        return True
    except Exception:
        return False


def latest_version(spark: "SparkSession", ident: str) -> int:
    """The table's latest version number."""
    return int(spark.sql(f"DESCRIBE HISTORY {ident} LIMIT 1").first()["version"])


def history(spark: "SparkSession", ident: str, limit: Optional[int] = None) -> list[Commit]:
    """The table's commits (the newest ``limit``, or all; unsorted), with lineage parsed from userMetadata."""
    return [
        Commit(
            version=int(r["version"]),
            timestamp_ms=int(r["timestamp"].timestamp() * 1000) if r["timestamp"] else None,
            operation=r["operation"],
            lineage=parse_lineage(r["userMetadata"]),
        )
        for r in spark.sql(f"DESCRIBE HISTORY {ident}" + (f" LIMIT {int(limit)}" if limit else "")).collect()
    ]


def write(
    spark: "SparkSession",
    df: "DataFrame",
    table: str,
    location: str,
    ident: str,
    as_catalog_table: bool,
    mode: WriteMode,
    metadata: Optional[str],
    txn_app_id: Optional[str] = None,
    storage: Optional[dict[str, str]] = None,
    lease: LeaseSettings = LeaseSettings(),  # noqa: B008  (frozen: one shared default is safe)
) -> WriteResult:
    """Write ``df`` with Spark's Delta writer as one new version (``overwrite`` replaces the schema too).

    With ``txn_app_id``, the write is one of Delta's idempotent writes (``txnAppId``/``txnVersion`` 0): Delta
    skips it when the table has already seen that app id, even when a concurrent writer committed it a moment
    ago. Returns the version this write committed, or, when Delta skipped it, the version holding the same
    ``metadata``'s lineage with ``skipped=True``. Path tables' logs are read with delta-rs (no Spark job per
    look-up); catalog tables' with ``DESCRIBE HISTORY``. A path table's write holds its commit lock (a local
    table's flock, an S3 table's commit lease with ``lease``'s timings: :func:`commit_lease.commit_lock`).
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    writer = df.write.format("delta").mode(mode)
    if mode == "overwrite":
        writer = writer.option("overwriteSchema", "true")
    if metadata:
        writer = writer.option("userMetadata", metadata)
    if metadata and not txn_app_id:
        # A forced write still has to leave a commit carrying its lineage; Delta records no commit for an
        # empty overwrite of an empty table (skipRecordingEmptyCommits) unless it holds an action: a
        # transaction id of its own is one.
        txn_app_id = f"augment-forced-{uuid.uuid4().hex}"
    if txn_app_id:
        writer = writer.option("txnAppId", txn_app_id).option("txnVersion", 0)
    key = (parse_lineage(metadata) or {}).get("key")
    # Spark's log store has no atomic put-if-absent on a local file system, nor across drivers on S3: see
    # commit_lease.commit_lock.
    with contextlib.nullcontext() if as_catalog_table else commit_lock(location, table, lease):
        for attempt in range(COMMIT_RETRIES + 1):
            if mode == "append":
                # Checked under the lock and before every attempt: a concurrent overwrite that changed the
                # schema since the last look gets this clear error, not Delta's schema-mismatch one.
                current = _arrow_schema(spark, location, ident, as_catalog_table, storage)
                if current is not None:
                    check_same_schema(table, current, to_arrow_schema(df.schema))
            try:
                if as_catalog_table:
                    writer.saveAsTable(location)
                else:
                    writer.save(location)
                break
            except Exception as exc:
                conflict = _conflict(exc)
                if conflict is None:
                    raise
                # Two writers of one lineage at once: Delta's idempotent-write check fails the later one; its
                # work is the winner's, so it reports the winner's version below.
                if (
                    txn_app_id
                    and key
                    and any(
                        (parse_lineage(m) or {}).get("key") == key
                        for _, m, _ in _recent_commits(spark, location, ident, as_catalog_table, storage)
                    )
                ):
                    break
                # A writer of another lineage committed first (two overwrites conflict): run the write again
                # against the new table state, as Delta's own retry advice says.
                if attempt == COMMIT_RETRIES:
                    raise LakehouseError(
                        f"write to {table!r} lost {attempt + 1} commit races to concurrent writers: {conflict}"
                    ) from exc
                log.warning(
                    "write to %s lost a commit race to a concurrent writer (%s); retrying (%d/%d)",
                    table,
                    conflict,
                    attempt + 1,
                    COMMIT_RETRIES,
                )
        recent = _recent_commits(spark, location, ident, as_catalog_table, storage)
        for version, user_metadata, metrics in recent:  # newest first: this write's commit carries exactly its
            if metadata is None or user_metadata == metadata:  # metadata (the run id included)
                rows = (metrics or {}).get("numOutputRows")
                return WriteResult(table, version, skipped=False, num_rows=int(rows) if rows is not None else None)
        for version, user_metadata, _ in recent:
            if key and (parse_lineage(user_metadata) or {}).get("key") == key:
                return WriteResult(table, version, skipped=True, num_rows=None)
        raise LakehouseError(f"write to {table!r} committed nothing and no recent version holds its lineage")


def _conflict(exc: Exception) -> Optional[str]:
    """The name and message of Delta's concurrent-modification exception inside ``exc``, or None when ``exc``
    is another failure (Delta's ``ConcurrentModificationException`` family: ``Concurrent*Exception`` for
    append, delete-read, transaction, ..., and ``ProtocolChanged``/``MetadataChanged``, which two writers
    creating one table at once meet)."""
    match = re.search(
        r"(\w*Concurrent\w*Exception|ProtocolChangedException|MetadataChangedException)\W*"
        r"([^\n]{0,160})",
        f"{type(exc).__name__}: {exc}",
    )
    return f"{match.group(1)}: {match.group(2)}".rstrip(": ") if match else None


def _arrow_schema(spark, location: str, ident: str, as_catalog_table: bool, storage):
    """The table's current Arrow schema, or None when it does not exist yet."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    if as_catalog_table:
        return to_arrow_schema(spark.table(location).schema) if spark.catalog.tableExists(location) else None
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(location, storage_options=storage):
        return None
    return pa.schema(DeltaTable(location, storage_options=storage).schema().to_arrow())


def _recent_commits(spark, location: str, ident: str, as_catalog_table: bool, storage) -> list[tuple]:
    """(version, userMetadata, operationMetrics) of the table's last RECENT_COMMITS commits, newest first."""
    if as_catalog_table:
        rows = spark.sql(f"DESCRIBE HISTORY {ident} LIMIT {RECENT_COMMITS}").collect()
        return [(int(r["version"]), r["userMetadata"], r["operationMetrics"]) for r in rows]
    from common.platform.lakehouse.delta_rs import commit_infos

    return [
        (int(e["version"]), e.get("userMetadata"), e.get("operationMetrics"))
        for e in commit_infos(location, storage, RECENT_COMMITS)
    ]
