"""The delta-rs write path: Spark's executors (or Ray's workers) write Parquet files into a fresh folder
inside the table; the driver reads only their footers and commits them with delta-rs as ONE table version.
Rows never pass through the driver. Also the table log's metadata: commit infos, path-table listing and a table's
latest version and row count. The readers (a version's file list for Spark's Parquet reader) are
:mod:`common.platform.lakehouse.delta_rs_read`.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, Callable, Optional

from common.platform.lakehouse.delta_files import add_actions_for, schema_of
from common.platform.lakehouse.tables import (
    RECENT_COMMITS,
    LakehouseError,
    TableInfo,
    WriteMode,
    WriteResult,
    check_same_schema,
    parse_lineage,
)
from common.platform.storage import filesystem, remove_tree

log = logging.getLogger(__name__)

# How often a commit that lost a race to a concurrent writer of another lineage is retried.
COMMIT_RETRIES = 5


def open_table(name: str, location: str, storage: Optional[dict[str, str]]):
    """The delta-rs ``DeltaTable`` at ``location``; raises :class:`LakehouseError` naming ``name`` if none."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(location, storage_options=storage):
        raise LakehouseError(f"table {name!r} does not exist at {location}")
    return DeltaTable(location, storage_options=storage)


def commit_files(
    table: str,
    location: str,
    storage: Optional[dict[str, str]],
    mode: WriteMode,
    metadata: Optional[str],
    write_files: Callable[[str], Any],
    arrow_schema=None,
    app_id: Optional[str] = None,
    retries: int = COMMIT_RETRIES,
) -> WriteResult:
    """Let ``write_files(folder)`` write Parquet files into a fresh folder inside the table at ``location``,
    then commit them with delta-rs as ONE version with ``metadata`` as userMetadata. A failure removes the
    folder; no version is created. Returns the new version and its row count (from the file footers).

    Concurrent writers: with ``app_id`` (the lineage's idempotence key) the commit carries it as a Delta
    transaction id (``txn``), so of two runs of one job only one commits; the other finds the id in the log
    and returns the winner's version with ``skipped=True``. A commit that loses a race to a different
    lineage (two overwrites) is retried against the new table state, up to ``retries`` times.
    """
    from deltalake.exceptions import CommitFailedError, DeltaError

    # A fresh folder per write: files of a failed write are never referenced by the log, and are
    # removed below; a later VACUUM would drop them too (and those a killed process leaves behind).
    batch_dir = f"w{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    staging = f"{location}/{batch_dir}"
    try:
        write_files(staging)
        actions = add_actions_for(staging, batch_dir)
        if arrow_schema is None:
            arrow_schema = schema_of(staging)
        for attempt in range(retries + 1):
            try:
                skipped = _commit_once(table, location, storage, mode, metadata, actions, arrow_schema, app_id)
                break
            except (CommitFailedError, DeltaError) as exc:
                # CommitFailedError: a concurrent commit conflicts with this one; DeltaError "already exists":
                # a concurrent writer created the table first. Either way the next attempt sees its commit.
                if attempt == retries or not (isinstance(exc, CommitFailedError) or "already exists" in str(exc)):
                    raise
                log.warning(
                    "commit to %s lost a race to a concurrent writer (%s); retrying (%d/%d)",
                    table,
                    str(exc).splitlines()[0],
                    attempt + 1,
                    retries,
                )
        if skipped is not None:
            remove_tree(staging)
            return skipped
    except BaseException:
        remove_tree(staging)
        raise
    version = _version_holding(location, storage, metadata, "userMetadata")
    num_rows = sum(json.loads(a.stats)["numRecords"] for a in actions)
    log.info("committed %s version %s (%d rows, %d files)", table, version, num_rows, len(actions))
    return WriteResult(table, version, skipped=False, num_rows=num_rows)


def _commit_once(
    table: str,
    location: str,
    storage: Optional[dict[str, str]],
    mode: WriteMode,
    metadata: Optional[str],
    actions: list,
    arrow_schema,
    app_id: Optional[str],
) -> Optional[WriteResult]:
    """One commit attempt against the table's current state: None when committed, or the skipped result when
    the table already holds ``app_id``'s transaction (a concurrent run of the same job committed first)."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.transaction import CommitProperties, Transaction, create_table_with_add_actions

    # max_commit_retries=0: delta-rs would rebase a commit that lost its version onto the winner's and commit
    # it without looking at the winner's transaction ids (two runs of one lineage racing to create a table,
    # or two appends, both committed). The loss comes back to commit_files, which rechecks the ids first.
    properties = CommitProperties(
        custom_metadata={"userMetadata": metadata} if metadata else None,
        app_transactions=[Transaction(app_id, 0)] if app_id else None,
        max_commit_retries=0,
    )
    if not DeltaTable.is_deltatable(location, storage_options=storage):
        from deltalake import Schema

        create_table_with_add_actions(
            location,
            Schema.from_arrow(arrow_schema),
            actions,
            mode="error",
            name=table,
            storage_options=storage,
            commit_properties=properties,
        )
        return None
    dt = DeltaTable(location, storage_options=storage)
    if app_id and dt.transaction_version(app_id) is not None:
        version = _version_holding(location, storage, metadata, "key")
        log.info("skip commit to %s: a concurrent run of the same job committed it as version %s", table, version)
        return WriteResult(table, version, skipped=True, num_rows=None)
    if mode == "append":
        check_same_schema(table, pa.schema(dt.schema().to_arrow()), arrow_schema)
    dt.create_write_transaction(actions, mode, arrow_schema, commit_properties=properties)
    return None


def _version_holding(location: str, storage: Optional[dict[str, str]], metadata: Optional[str], match: str) -> int:
    """The newest recent version whose userMetadata equals ``metadata`` (``match="userMetadata"``: this write's
    own commit, run id included) or carries its lineage key (``match="key"``); the latest version when
    ``metadata`` is None (no concurrent writer can be told apart then)."""
    from deltalake import DeltaTable

    if metadata is None:
        return DeltaTable(location, storage_options=storage).version()
    key = (parse_lineage(metadata) or {}).get("key")
    for entry in commit_infos(location, storage, RECENT_COMMITS):
        user_metadata = entry.get("userMetadata")
        same = (
            user_metadata == metadata
            if match == "userMetadata"
            else (parse_lineage(user_metadata) or {}).get("key") == key
        )
        if same:
            return int(entry["version"])
    raise LakehouseError(f"no recent commit of {location} holds this write's lineage")


def commit_infos(
    location: str, storage: Optional[dict[str, str]], limit: Optional[int] = None, newest: Optional[int] = None
) -> list[dict[str, Any]]:
    """The commitInfo of the table's newest ``limit`` commits (all with None), newest first, each with its
    ``version``, read from the commit files themselves: ``_delta_log/<version>.json``.

    Not ``DeltaTable.history``: it numbers commits by position from the version it loaded, so a commit
    another writer lands between its two log reads shifts every number by one (seen with concurrent writers:
    a writer told another's version as its own). Stops at the first commit file log cleanup has removed.
    """
    import pyarrow.fs as pafs
    from deltalake import DeltaTable

    if newest is None:
        newest = DeltaTable(location, storage_options=storage).version()
    fs, root = filesystem(location)
    oldest = 0 if limit is None else max(0, newest - limit + 1)
    infos = []
    for version in range(newest, oldest - 1, -1):
        path = f"{root.rstrip('/')}/_delta_log/{version:020d}.json"
        try:
            with fs.open_input_stream(path) as handle:
                lines = handle.read().decode("utf-8").splitlines()
        except OSError:  # FileNotFoundError included
            if fs.get_file_info(path).type == pafs.FileType.NotFound:
                break
            raise
        info: dict[str, Any] = {}
        for line in lines:
            if '"commitInfo"' in line:
                info = json.loads(line).get("commitInfo") or {}
                break
        infos.append({**info, "version": version})
    return infos


def path_table_names(root: str) -> list[str]:
    """The names of the Delta tables directly under ``root``: folders whose ``_delta_log`` holds a commit or a
    checkpoint. A writer killed while creating a table leaves a ``_delta_log`` without one (Spark makes the
    folder before its first commit); that folder is no table yet, and its next write creates it."""
    import pyarrow.fs as pafs

    fs, root = filesystem(root)
    info = fs.get_file_info(root)
    if info.type != pafs.FileType.Directory:
        return []
    names = []
    for entry in fs.get_file_info(pafs.FileSelector(root, recursive=False)):
        if entry.type == pafs.FileType.Directory and _has_commit(fs, f"{entry.path}/_delta_log"):
            names.append(entry.base_name)
    return sorted(names)


def _has_commit(fs, log_dir: str) -> bool:
    import pyarrow.fs as pafs

    if fs.get_file_info(log_dir).type != pafs.FileType.Directory:
        return False
    return any(
        e.type == pafs.FileType.File
        and e.base_name[:1].isdigit()
        and (e.base_name.endswith(".json") or ".checkpoint" in e.base_name)
        for e in fs.get_file_info(pafs.FileSelector(log_dir, recursive=False))
    )


def path_table_info(name: str, location: str, storage: Optional[dict[str, str]]) -> TableInfo:
    """A path table's latest version, row count (from the add actions' stats) and last writing job."""
    dt = open_table(name, location, storage)
    adds = dt.get_add_actions(flatten=True)
    import pyarrow as pa

    adds = pa.table(adds)
    num_rows = (
        int(sum(v for v in adds.column("num_records").to_pylist() if v is not None))
        if "num_records" in adds.column_names
        else None
    )
    last = commit_infos(location, storage, 1, dt.version())
    lineage = parse_lineage(last[0].get("userMetadata")) if last else None
    return TableInfo(name, dt.version(), num_rows, location, (lineage or {}).get("job"))
