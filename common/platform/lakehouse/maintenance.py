"""Table maintenance: compaction and VACUUM of the lakehouse's Delta tables, with a before/after report.

Compaction rewrites many small files into few large ones as one OPTIMIZE commit (Spark's ``OPTIMIZE`` on the
native path, delta-rs ``optimize.compact`` otherwise); the new version reads the same rows. VACUUM deletes the
files no version inside the retention window references; versions younger than the retention keep every
file they read. Neither changes what any readable version returns, and lineage skips maintenance commits
(:attr:`common.platform.lakehouse.tables.Commit.changes_data`), so a compaction never makes a job re-run.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterator, Optional

from common.platform.config import DELTA_SAFE_RETENTION_HOURS, MaintenanceConfig
from common.platform.lakehouse.commit_lease import commit_lock
from common.platform.storage import list_files, remove_tree

if TYPE_CHECKING:
    from common.platform.lakehouse.lakehouse import Lakehouse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileStats:
    """Files and bytes of one table: ``live`` = the latest version's data files; ``stored`` = every data file
    under the table's location (live + those only older versions reference); None where not listable."""

    live_files: int
    live_bytes: int
    stored_files: Optional[int]
    stored_bytes: Optional[int]


@dataclass(frozen=True)
class TableReport:
    """What maintenance did to one table."""

    table: str
    version_before: int
    version_after: int
    compacted: bool
    vacuumed_files: int
    before: FileStats
    after: FileStats

    def as_row(self) -> dict:
        """A flat dict (for MLflow and the printed report)."""
        row = {k: v for k, v in asdict(self).items() if k not in ("before", "after")}
        row.update({f"{k}_before": v for k, v in asdict(self.before).items()})
        row.update({f"{k}_after": v for k, v in asdict(self.after).items()})
        return row


def file_stats(lakehouse: "Lakehouse", table: str) -> FileStats:
    """Live and stored data files of ``table`` (path tables through delta-rs; catalog tables through Spark's
    ``DESCRIBE DETAIL``)."""
    if lakehouse.cfg.catalog:
        detail = lakehouse.spark.sql(f"DESCRIBE DETAIL {lakehouse.location(table)}").first()
        live_files, live_bytes, location = int(detail["numFiles"]), int(detail["sizeInBytes"]), detail["location"]
    else:
        dt = lakehouse._delta_rs_table(table)
        sizes = dt.get_add_actions(flatten=True).column("size_bytes").to_pylist()
        live_files, live_bytes, location = len(sizes), int(sum(sizes)), lakehouse.location(table)
    try:
        stored = [f for f in list_files(location) if "/_delta_log/" not in f.path and f.path.endswith(".parquet")]
        stored_files, stored_bytes = len(stored), int(sum(f.size for f in stored))
    except (OSError, ValueError) as exc:  # managed storage the driver cannot list: live figures only
        log.warning("cannot list %s (%s): stored files not reported", location, exc)
        stored_files = stored_bytes = None
    return FileStats(live_files, live_bytes, stored_files, stored_bytes)


def maintain_table(lakehouse: "Lakehouse", table: str, cfg: MaintenanceConfig) -> TableReport:
    """Compact ``table`` (when it has at least ``cfg.min_files`` live files) and VACUUM it with
    ``cfg.retention_hours``; returns the before/after report."""
    version_before = lakehouse.version(table)
    before = after = file_stats(lakehouse, table)
    compacted = cfg.compact and before.live_files >= cfg.min_files
    if compacted:
        _compact(lakehouse, table)
        after = file_stats(lakehouse, table)
    vacuumed = 0
    if cfg.vacuum:
        _vacuum(lakehouse, table, cfg)
        unvacuumed, after = after, file_stats(lakehouse, table)
        # Deleted data files, by listing before and after (either engine's VACUUM; unknown where not listable).
        if unvacuumed.stored_files is not None and after.stored_files is not None:
            vacuumed = unvacuumed.stored_files - after.stored_files
    report = TableReport(table, version_before, lakehouse.version(table), compacted, vacuumed, before, after)
    log.info(
        "maintain %s: v%s -> v%s, live files %d -> %d, stored files %s -> %s",
        table,
        version_before,
        report.version_after,
        before.live_files,
        after.live_files,
        before.stored_files,
        after.stored_files,
    )
    return report


def remove_stale_staging(root: str, retention_hours: float) -> int:
    """Remove ``<root>/_staging/*`` folders older than ``retention_hours``: what a native-path ``write_ray``
    killed between Ray's write and Spark's commit, or a stage killed inside ``read_ray_ordered``, leaves (a
    finished or failed one removes its own).
    Returns how many were removed; 0 for catalog-only or unlistable roots."""
    import pyarrow.fs as pafs

    from common.platform.storage import filesystem

    staging = f"{root.rstrip('/')}/_staging"
    try:
        fs, path = filesystem(staging)
        if fs.get_file_info(path).type != pafs.FileType.Directory:
            return 0
        stale = [f"{staging}/{name}" for name in _folders_older_than(fs, path, retention_hours)]
    except (OSError, ValueError) as exc:
        log.warning("cannot list %s (%s): staging folders not checked", staging, exc)
        return 0
    for folder in stale:
        remove_tree(folder)
    if stale:
        log.info("removed %d staging folders older than %g hours under %s", len(stale), retention_hours, staging)
    return len(stale)


def _folders_older_than(fs, path: str, hours: float, inside: str = "") -> list[str]:
    """Names of the folders directly under ``path`` (their ``inside`` subfolder, when given, must exist) whose
    modification time (of that subfolder) is at least ``hours`` old."""
    import time

    import pyarrow.fs as pafs

    cutoff = time.time() - hours * 3600
    names = []
    for entry in fs.get_file_info(pafs.FileSelector(path, recursive=False)):
        if entry.type != pafs.FileType.Directory:
            continue
        info = fs.get_file_info(f"{entry.path}/{inside}") if inside else entry
        if info.type == pafs.FileType.Directory and info.mtime and info.mtime.timestamp() <= cutoff:
            names.append(entry.base_name)
    return names


def _compact(lakehouse: "Lakehouse", table: str) -> None:
    if lakehouse.native_delta:
        with _commit_lock(lakehouse, table):
            lakehouse.spark.sql(f"OPTIMIZE {lakehouse._ident(table)}").collect()
    else:
        lakehouse._delta_rs_table(table).optimize.compact()


def _vacuum(lakehouse: "Lakehouse", table: str, cfg: MaintenanceConfig) -> None:
    hours = cfg.retention_hours
    if lakehouse.native_delta:
        with (
            _retention_check_off(lakehouse.spark, hours < DELTA_SAFE_RETENTION_HOURS),
            _commit_lock(lakehouse, table),
        ):  # Spark's VACUUM commits too (VACUUM START / END)
            # Spark's VACUUM takes hours as a number; it refuses below the safety default unless told not to.
            lakehouse.spark.sql(f"VACUUM {lakehouse._ident(table)} RETAIN {hours:g} HOURS").collect()
    else:
        # full: also delete files no version references (a killed write's committed-to-folder task files), as
        # Spark's VACUUM does; delta-rs's default "lite" mode deletes only files a commit removed.
        lakehouse._delta_rs_table(table).vacuum(
            retention_hours=int(math.ceil(hours)),
            dry_run=False,
            enforce_retention_duration=hours >= DELTA_SAFE_RETENTION_HOURS,
            full=True,
        )
        # VACUUM skips hidden folders; Spark's ``_temporary`` inside a write folder of a killed rs-path write
        # holds its uncommitted task files (a finished Spark write removes it; no version references it).
        from common.platform.storage import filesystem

        location = lakehouse.location(table).rstrip("/")
        fs, path = filesystem(location)
        for name in _folders_older_than(fs, path, hours, inside="_temporary"):
            if name.startswith("w"):  # the rs path's write folders (delta_rs.commit_files)
                remove_tree(f"{location}/{name}/_temporary")


def _commit_lock(lakehouse: "Lakehouse", table: str):
    """The lock Spark's Delta commits to a path table take (commit_lease.commit_lock: a local table's flock, an S3
    table's commit lease); none for catalog tables (a local catalog is Spark's embedded Derby metastore, which one
    process holds at a time; a cluster's catalog coordinates its own commits)."""
    if lakehouse.cfg.catalog:
        return contextlib.nullcontext()
    return commit_lock(lakehouse.location(table), table, lakehouse.cfg.lease)


@contextlib.contextmanager
def _retention_check_off(spark, off: bool) -> Iterator[None]:
    key = "spark.databricks.delta.retentionDurationCheck.enabled"
    if not off:
        yield
        return
    previous = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.set(key, previous)


def format_report(reports: list[TableReport]) -> str:
    """A fixed-width per-table report: versions, live and stored files/bytes before -> after."""
    header = f"{'table':<30} {'versions':>9} {'live files':>13} {'live MB':>15} {'stored files':>13} {'stored MB':>15}"
    lines = [header, "-" * len(header)]

    def pair(a, b, mb=False):
        if a is None or b is None:
            return "?"
        return f"{a / 1e6:.2f}->{b / 1e6:.2f}" if mb else f"{a}->{b}"

    for r in reports:
        lines.append(
            f"{r.table:<30} {f'{r.version_before}->{r.version_after}':>9} "
            f"{pair(r.before.live_files, r.after.live_files):>13} "
            f"{pair(r.before.live_bytes, r.after.live_bytes, True):>15} "
            f"{pair(r.before.stored_files, r.after.stored_files):>13} "
            f"{pair(r.before.stored_bytes, r.after.stored_bytes, True):>15}"
        )
    return "\n".join(lines)
