"""kill -9 mid-write, on both write paths: a real job (``augment run ingest``) and a Ray ``write_ray`` stage
run in a process of their own and are SIGKILLed, with every process they started, at seeded moments while
Spark's or Ray's files are written and while the commit runs.

After each kill: every table reads (Spark and delta-rs agree), no version holds partial data (each version
holds the clean run's row count), a rerun completes and the table ends with exactly one version holding the
job's lineage, with the clean run's rows; files the killed writer left are referenced by no version and are
removed by VACUUM (``augment run maintain``), after which the tables read the same.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import killable_job
import psutil
import pytest
from deltalake import DeltaTable
from ingest_world import REPO, ingest_args, ingest_config

from common.platform.config import MaintenanceConfig
from common.platform.lakehouse.lakehouse import Lakehouse
from common.platform.lakehouse.maintenance import maintain_table, remove_stale_staging
from common.platform.runner.job_context import build_context
from jobs.foundation import ingest

SEED = 20261123
# Kill points per write path (tests below): ingest kills + Ray-stage kills >= 20 over both paths.
INGEST_KILLS = 5
RAY_KILLS = 5
RAY_ROWS = 4000
pytestmark = pytest.mark.slow
OUTCOMES: Counter = Counter()  # (path, stage, outcome) -> kills; printed at the end for the README table


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print("\nkill -9 outcomes:", dict(sorted(OUTCOMES.items())))


def _start(cmd: list[str], marker: Path, log: Path) -> subprocess.Popen:
    """Start ``cmd`` (killable_job) in a session of its own: it starts its engines, then waits for the file
    ``marker.go`` before running its job (see :func:`_kill_at`), so that it starts while the test checks the
    last kill."""
    env = {
        **os.environ,
        "AUGMENT_FAULT_MARKER": str(marker),
        "AUGMENT_FAULT_GO": f"{marker}.go",
        "PYTHONPATH": str(REPO),
    }
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` with every process it started, and wait for them."""
    try:
        everything = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        everything = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for p in everything:  # Ray's daemons may run in sessions of their own
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=60)
    psutil.wait_procs([p for p in everything if p.pid != proc.pid], timeout=30)


def _kill_at(proc: subprocess.Popen, marker: Path, event: str, delay: float, log: Path, timeout: float = 300) -> bool:
    """Let ``proc`` (from :func:`_start`) run its job; when ``event`` appears in ``marker``, wait ``delay``
    seconds and SIGKILL it with every process it started. Returns False when it finished before the kill
    point."""
    Path(f"{marker}.go").touch()
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if marker.exists() and any(
            line.split(" ", 1)[1].strip() == event for line in marker.read_text().splitlines() if " " in line
        ):
            time.sleep(delay)
            _stop(proc)
            return True
        if time.monotonic() > deadline:
            _stop(proc)
            raise AssertionError(f"{proc.args} never reached {event!r}: see {log}\n{log.read_text()[-3000:]}")
        time.sleep(0.002)
    assert proc.returncode == 0, f"{proc.args} failed before its kill point:\n{log.read_text()[-3000:]}"
    return False


class _OneAhead:
    """The kill loop's processes: ``start(i)`` starts process ``i`` (:func:`_start`) and returns it with its
    marker and log files; each is started while the test checks the kill before it. On exit, one still
    waiting is killed."""

    def __init__(self, n: int, start):
        self.n, self.start, self.waiting = n, start, None

    def kill_at(self, i: int, event: str, delay: float) -> bool:
        """:func:`_kill_at` on process ``i``, then start process ``i + 1``. Returns whether ``i`` was killed."""
        proc, marker, log = self.waiting or self.start(i)
        self.waiting = None
        killed = _kill_at(proc, marker, event, delay, log)
        if i + 1 < self.n:
            self.waiting = self.start(i + 1)
        return killed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.waiting is not None:
            _stop(self.waiting[0])


def _parquet_files(location: str) -> set[str]:
    return {str(p) for p in Path(location).rglob("*.parquet") if "_delta_log" not in p.parts}


def _referenced(location: str) -> set[str]:
    """Every data file any version of the table references."""
    if not DeltaTable.is_deltatable(location):
        return set()
    files = set()
    for version in range(DeltaTable(location).version() + 1):
        uris = DeltaTable(location, version=version).file_uris()
        files |= {"/" + u.removeprefix("file://").lstrip("/") for u in uris}
    return files


def _check_tables(lakehouse: Lakehouse, expected: dict[str, int]) -> None:
    """Every table reads with Spark and delta-rs, and every version holds the clean run's rows."""
    for table in lakehouse.table_names():
        location = lakehouse.location(table)
        for version in range(DeltaTable(location).version() + 1):
            n_spark = lakehouse.read(table, version).count()
            n_rs = DeltaTable(location, version=version).to_pyarrow_dataset().count_rows()
            assert n_spark == n_rs == expected[table], (table, version, n_spark, n_rs, expected[table])


def _outcome(location: str, before: set[str]) -> str:
    """What the kill left at the table it interrupted: a commit, uncommitted files, or nothing yet."""
    if DeltaTable.is_deltatable(location) and _referenced(location) - before:
        return "committed"
    return "uncommitted files" if _parquet_files(location) - _referenced(location) else "no files yet"


def _recover(lakehouse: Lakehouse, expected: dict[str, int], rerun) -> int:
    """Rerun; check one version per table with the clean rows; VACUUM what the kill left. Returns orphans."""
    rerun()
    orphans = 0
    for table in expected:
        location = lakehouse.location(table)
        assert DeltaTable(location).version() == 0, f"{table}: the rerun added a second version"
        assert lakehouse.history(table)[0].lineage, table
        left = _parquet_files(location) - _referenced(location)
        if left:
            orphans += len(left)
            maintain_table(lakehouse, table, MaintenanceConfig(compact=False, retention_hours=0, force_retention=True))
            assert _parquet_files(location) == _referenced(location), f"{table}: VACUUM left orphaned files"
    _check_tables(lakehouse, expected)
    return orphans


# How long after a write starts its phases run (measured on 2 cores): the seeded delays span them, so kills land
# before, inside and after the file writes and the commit. delta-rs commits take milliseconds.
PHASE_SECONDS = {("native", "ingest"): 1.5, ("rs", "ingest"): 0.5, ("native", "ray"): 2.5, ("rs", "ray"): 1.2}


def _kill_plan(path: str, stage: str, n: int, tables: list[str]) -> list[tuple[str, float]]:
    """Seeded kill points: (marker event, delay after it). Events are each table's file-writing phase and, on
    the delta-rs path, its commit."""
    rng = random.Random(f"{SEED}-{path}-{stage}")
    plan = []
    for i in range(n):
        table = tables[rng.randrange(len(tables))]
        if path == "rs" and i % 2 == 1:
            plan.append((f"commit {table}", rng.uniform(0.0, 0.03)))
        else:
            plan.append((f"files {table}", rng.uniform(0.0, PHASE_SECONDS[(path, stage)])))
    return plan


def test_kill_9_during_ingest_writes(spark, capabilities, write_path, world, tmp_path):
    clean = world["clean"]
    killed = 0
    plan = _kill_plan(write_path, "ingest", INGEST_KILLS, sorted(clean))

    def start(i: int) -> tuple[subprocess.Popen, Path, Path]:
        root, marker, log = tmp_path / f"k{i}", tmp_path / f"marker{i}", tmp_path / f"k{i}.log"
        shutil.copytree(world["landing"], root / "landing")
        cmd = [sys.executable, str(Path(killable_job.__file__)), *ingest_args(root, world["base"], write_path)]
        return _start(cmd, marker, log), marker, log

    with _OneAhead(len(plan), start) as procs:
        for i, (event, delay) in enumerate(plan):
            cfg = ingest_config(tmp_path / f"k{i}", world["base"], write_path)
            lakehouse = Lakehouse(cfg.lakehouse, spark, native_delta=write_path == "native")
            table = event.split()[1]
            before = _referenced(lakehouse.location(table))
            if not procs.kill_at(i, event, delay):
                OUTCOMES[(write_path, "ingest", "finished first")] += 1
                continue
            killed += 1
            OUTCOMES[(write_path, "ingest", _outcome(lakehouse.location(table), before))] += 1
            _check_tables(lakehouse, clean)

            def rerun(cfg=cfg, lakehouse=lakehouse):
                ctx = build_context(cfg, spark=spark, capabilities=capabilities)
                ctx.lakehouse = lakehouse
                try:
                    ingest.run(ctx)
                finally:
                    ctx.close()

            OUTCOMES[(write_path, "ingest", "orphaned files vacuumed")] += _recover(lakehouse, clean, rerun)
    assert killed >= INGEST_KILLS - 1, OUTCOMES


def test_kill_9_during_a_ray_write_stage(spark, write_path, ray_runtime, world, tmp_path):
    from common.platform.config import LakehouseConfig

    killed = 0
    plan = _kill_plan(write_path, "ray", RAY_KILLS, ["generated"])

    def start(i: int) -> tuple[subprocess.Popen, Path, Path]:
        marker, log = tmp_path / f"marker{i}", tmp_path / f"r{i}.log"
        cmd = [
            sys.executable,
            str(Path(killable_job.__file__)),
            "ray-stage",
            str(tmp_path / f"r{i}"),
            str(RAY_ROWS),
            write_path,
        ]
        return _start(cmd, marker, log), marker, log

    with _OneAhead(len(plan), start) as procs:
        for i, (event, delay) in enumerate(plan):
            root = tmp_path / f"r{i}"
            lakehouse = Lakehouse(LakehouseConfig(root=str(root)), spark, native_delta=write_path == "native")
            if not procs.kill_at(i, event, delay):
                OUTCOMES[(write_path, "ray", "finished first")] += 1
                continue
            killed += 1
            OUTCOMES[(write_path, "ray", _outcome(lakehouse.location("generated"), set()))] += 1
            _check_tables(lakehouse, {"generated": RAY_ROWS})
            OUTCOMES[(write_path, "ray", "orphaned files vacuumed")] += _recover(
                lakehouse, {"generated": RAY_ROWS}, lambda lh=lakehouse: killable_job.write_stage(lh, RAY_ROWS)
            )
            # The native path stages Ray's files outside the table; a kill leaves the folder for maintenance.
            staging = root / "_staging"
            left = len(list(staging.iterdir())) if staging.exists() else 0
            OUTCOMES[(write_path, "ray", "staging folders removed by maintain")] += left
            assert remove_stale_staging(str(root), 0) == left and not (staging.exists() and any(staging.iterdir()))
    assert killed >= RAY_KILLS - 1, OUTCOMES
