"""Concurrent writers on both write paths: one lineage commits once, different lineages both commit.

Two runs of one job at the same time (a retried batch that overlaps the original) must leave exactly one
version; the other run reports it as already written. Two different jobs overwriting one table must both
commit (the loser retries against the new state), and every version must hold one writer's full output.
Threads on the session's Spark test the write paths; three ``augment run ingest`` processes (slow), two of
one lineage and one of another, test the whole job, each with its own Spark driver or delta-rs writer, on a
fresh lakehouse (the tables' creation races too).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import killable_job
import pytest
from deltalake import DeltaTable
from ingest_world import REPO, ingest_args
from pyspark.sql import functions as F

from common.platform.config import LakehouseConfig
from common.platform.lakehouse import delta_native, delta_rs
from common.platform.lakehouse.lakehouse import Lakehouse, Lineage


def _frame(spark, n: int, tag: str):
    return spark.range(n).select(F.col("id").cast("string").alias("item_id"), F.lit(tag).alias("writer"))


def _together(calls):
    """Run the callables in threads released by one barrier; returns (results, errors)."""
    barrier, results, errors = threading.Barrier(len(calls)), [None] * len(calls), []

    def run(i, call):
        try:
            barrier.wait(timeout=60)
            results[i] = call()
        except Exception as exc:  # surfaced by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results, errors


def _versions_and_writers(lakehouse, table):
    """{version: (row count, set of writer tags)} of every data version of ``table``, read by Spark."""
    out = {}
    for commit in lakehouse.history(table):
        rows = lakehouse.read(table, commit.version).groupBy("writer").count().collect()
        out[commit.version] = (sum(r["count"] for r in rows), {r["writer"] for r in rows})
    return out


@pytest.mark.parametrize("rounds", [3])
def test_two_runs_of_one_lineage_commit_exactly_once(spark, lakehouse, rounds):
    """Both runs pass the lakehouse's history check at the same moment; Delta's transaction id lets one commit."""
    lakehouse.write(_frame(spark, 5, "seed"), "items")
    for r in range(rounds):
        lineage = Lineage(job="ingest", config_hash=f"cfg{r}", inputs={"raw": f"files:{r}"})
        runs = [Lineage(lineage.job, lineage.config_hash, lineage.inputs, run_id=f"run-{r}-{i}") for i in range(2)]
        results, errors = _together(
            [lambda ln=ln: lakehouse.write(_frame(spark, 40, "same"), "items", lineage=ln) for ln in runs]
        )
        assert not errors, errors
        assert sorted(res.skipped for res in results) == [False, True], results
        assert results[0].version == results[1].version == r + 1
    history = _versions_and_writers(lakehouse, "items")
    assert sorted(history) == list(range(rounds + 1))  # one version per lineage, none duplicated
    assert all(history[v] == (40, {"same"}) for v in range(1, rounds + 1))


def test_the_transaction_id_stops_a_run_that_missed_the_history_check(spark, lakehouse):
    """The guard behind the history check: a second commit of one lineage, issued straight to the write path
    after the first committed (the window between check and commit), is skipped, not duplicated."""
    lineage = Lineage(job="ingest", config_hash="cfg", inputs={"raw": "files:1"})
    app_id = f"augment-{lineage.key('items')}"
    first = lakehouse.write(_frame(spark, 30, "a"), "items", lineage=lineage)
    late = Lineage(lineage.job, lineage.config_hash, lineage.inputs, run_id="late").to_metadata("items")
    location = lakehouse.location("items")
    if lakehouse.native_delta:
        second = delta_native.write(
            spark, _frame(spark, 30, "b"), "items", location, f"delta.`{location}`", False, "overwrite", late, app_id
        )
    else:
        second = delta_rs.commit_files(
            "items",
            location,
            None,
            "overwrite",
            late,
            lambda folder: _frame(spark, 30, "b").write.parquet(folder),
            None,
            app_id,
        )
    assert second.skipped and second.version == first.version == 0
    assert lakehouse.version("items") == 0
    assert DeltaTable(location).to_pyarrow_table().column("writer").unique().to_pylist() == ["a"]
    # The losing write's files were never committed; on the delta-rs path they are removed at once.
    if not lakehouse.native_delta:
        folders = {p.name for p in Path(location).iterdir() if not p.name.startswith("_")}
        referenced = {
            Path("/" + u.removeprefix("file://").lstrip("/")).relative_to(location).parts[0]
            for u in DeltaTable(location).file_uris()
        }
        assert folders == referenced


@pytest.mark.parametrize("same_lineage", [True, False])
def test_two_runs_creating_a_table_at_once(spark, lakehouse, same_lineage):
    """Two writers of a table that does not exist yet: both race to write version 0 (Delta's
    ProtocolChangedException on Spark's writer, "already exists" on delta-rs'). One lineage: one version, the
    other run reports it; two lineages: both commit, the loser as version 1."""
    lineages = [
        Lineage(
            job="ingest",
            config_hash="cfg" if same_lineage else f"cfg{i}",
            inputs={"raw": "files:1"},
            run_id=f"run-{i}",
        )
        for i in range(2)
    ]
    results, errors = _together(
        [
            lambda ln=ln, i=i: lakehouse.write(_frame(spark, 30, f"w{i}"), "items", lineage=ln)
            for i, ln in enumerate(lineages)
        ]
    )
    assert not errors, errors
    history = _versions_and_writers(lakehouse, "items")
    if same_lineage:
        assert sorted(res.skipped for res in results) == [False, True] and {r.version for r in results} == {0}
        assert sorted(history) == [0] and history[0][0] == 30
    else:
        assert sorted((res.version, res.skipped) for res in results) == [(0, False), (1, False)]
        assert sorted(history) == [0, 1] and all(n == 30 and len(w) == 1 for n, w in history.values())


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_delta_rs_commits_of_one_lineage_racing_for_one_version_commit_once(tmp_path, mode):
    """Two delta-rs commits of one lineage released at the same moment, 12 times: on a table not created yet
    (both race for version 0) and on an existing one (both for version 1). delta-rs rebases a commit that
    lost its version and retries it without looking at the transaction ids; the lakehouse turns that retry
    off and rechecks the ids itself, so the loser skips and no lineage is committed twice."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def parquet(folder: str, rows: int) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"n": list(range(rows))}), f"{folder}/part-0.parquet")

    for round_ in range(12):
        location = str(tmp_path / f"t{round_}")
        if round_ % 2:
            delta_rs.commit_files("items", location, None, "overwrite", None, lambda folder: parquet(folder, 1))
        lineage = Lineage(job="ingest", config_hash=f"cfg{round_}", inputs={"raw": "files:1"})
        barrier = threading.Barrier(2)

        def write_files(folder, barrier=barrier):
            parquet(folder, 3)
            barrier.wait(timeout=60)  # both runs' files are written; their commits start together

        results, errors = _together(
            [
                lambda i=i, location=location, lineage=lineage, write_files=write_files: delta_rs.commit_files(
                    "items",
                    location,
                    None,
                    mode,
                    Lineage(lineage.job, lineage.config_hash, lineage.inputs, run_id=f"run{i}").to_metadata("items"),
                    write_files,
                    None,
                    f"augment-{lineage.key('items')}",
                )
                for i in range(2)
            ]
        )
        assert not errors, errors
        assert sorted(res.skipped for res in results) == [False, True], (round_, results)
        assert DeltaTable(location).version() == round_ % 2, f"round {round_}: the lineage was committed twice"


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_different_lineages_both_commit_and_nothing_is_lost(spark, lakehouse, mode):
    lakehouse.write(_frame(spark, 5, "seed"), "items")
    writers = ["a", "b", "c"]
    results, errors = _together(
        [
            lambda w=w, i=i: lakehouse.write(
                _frame(spark, 20 + i, w), "items", mode, Lineage(job=f"job-{w}", config_hash=w, inputs={"raw": w})
            )
            for i, w in enumerate(writers)
        ]
    )
    assert not errors, errors
    assert not any(res.skipped for res in results)
    assert sorted(res.version for res in results) == [1, 2, 3]
    history = _versions_and_writers(lakehouse, "items")
    by_version = {res.version: (w, 20 + i) for i, (w, res) in enumerate(zip(writers, results))}
    if mode == "overwrite":  # each version holds exactly its writer's full output
        assert all(history[v] == (n, {w}) for v, (w, n) in by_version.items())
    else:  # appends accumulate: the last version holds the seed and every writer's rows
        assert history[3] == (5 + 20 + 21 + 22, {"seed", *writers})


_HOLD_LOCK = """import sys, time
from common.platform.lakehouse.commit_flock import local_commit_lock
with local_commit_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    open(sys.argv[3], "w").write(repr(time.time()))
"""


def _hold_commit_lock(location: str, seconds: float, released: Path) -> subprocess.Popen:
    """A process holding ``location``'s commit lock for ``seconds`` (then writing the time to ``released``),
    returned once it holds it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, location, str(seconds), str(released)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_native_commit_to_a_local_table_waits_for_a_writer_in_another_process(spark, lakehouse, tmp_path):
    """Spark's Delta log store on a local disk commits by check-then-rename, and a POSIX rename replaces: two
    processes committing one version at once could both succeed, one silently replaced (a CI run met it as a
    ChecksumException on the version file). Native commits to a local table hold its commit lock: while
    another process holds it, a write waits, and commits once the lock is let go. delta-rs' own commit is an
    atomic no-replace rename and takes no lock."""
    location, released = lakehouse.location("items"), tmp_path / "released"
    holder = _hold_commit_lock(location, 3, released)
    result = lakehouse.write(_frame(spark, 5, "a"), "items")
    finished = time.time()
    holder.wait(timeout=60)
    assert result.version == 0 and lakehouse.read("items").count() == 5
    if lakehouse.native_delta:
        assert finished >= float(released.read_text()), "the commit did not wait for the other process's lock"
    else:
        assert finished < float(released.read_text()), "delta-rs' commit waited for a lock it does not need"
    # The kernel lets go of a dead holder's lock: a killed writer never blocks the table.
    killed = _hold_commit_lock(location, 600, tmp_path / "never")
    killed.kill()
    killed.wait(timeout=60)
    assert lakehouse.write(_frame(spark, 7, "b"), "items").version == 1


def test_a_mount_without_locks_commits_unserialized_and_says_so(tmp_path, monkeypatch, caplog):
    """Some FUSE mounts refuse ``flock`` (ENOLCK): the commit goes ahead as Spark alone would, with a warning,
    rather than failing every write."""
    import errno
    import fcntl
    import logging

    from common.platform.lakehouse.commit_flock import local_commit_lock

    def refuse(handle, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    ran = []
    with caplog.at_level(logging.WARNING, logger="common.platform.lakehouse.commit_flock"):
        with local_commit_lock(str(tmp_path / "items")):
            ran.append(True)
    assert ran == [True]
    assert "not serialized" in caplog.text


def _run_together(runs: list[tuple[Path, Path, Path]], base: Path, path: str, barrier: Path) -> list[str]:
    """Run ``augment run ingest`` once per (lakehouse root, landing folder, log file) in processes of their own,
    held together at each table's write (killable_job's barrier); returns each run's output."""
    barrier.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AUGMENT_FAULT_BARRIER": str(barrier),
        "AUGMENT_FAULT_PARTIES": str(len(runs)),
    }
    procs = []
    for root, landing, log in runs:
        with open(log, "w") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, killable_job.__file__, *ingest_args(root, base, path, landing)],
                    cwd=REPO,
                    env={**env, "AUGMENT_FAULT_MARKER": str(log.with_suffix(".marker"))},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
    for proc in procs:
        proc.wait(timeout=600)
    outputs = [log.read_text() for _, _, log in runs]
    for proc, output in zip(procs, outputs):
        assert proc.returncode == 0, output[-4000:]
    return outputs


def _reported(output: str) -> dict[str, tuple[int, bool]]:
    """{table: (version, skipped)} from an ``augment run`` summary (``  table vN, R rows - new version``)."""
    lines = re.findall(r"^  (\w+) v(\d+)(?:, \d+ rows)? - (new version|unchanged)", output, re.M)
    return {table: (int(version), state == "unchanged") for table, version, state in lines}


@pytest.mark.slow
def test_three_processes_ingesting_at_once_commit_each_lineage_once(spark, write_path, world, tmp_path):
    """Three `augment run ingest` processes writing each table at the same moment (all past the history
    check): two of one config and one set of inputs (one lineage), the third of another copy of the inputs
    (another lineage). Per table, the two runs of one lineage commit it once, the other reporting it as
    unchanged at the same version, and the other lineage commits too (the loser of the overwrite race
    retries): two versions, each holding its own run's lineage and all of that run's rows. (Two tests of two
    processes each before: one process start fewer per write path.)"""
    root = tmp_path / "lakehouse"
    landings = [root / "landing", tmp_path / "other_landing"]
    for landing in landings:
        shutil.copytree(world["landing"], landing)
    runs = [
        (root, landings[0], tmp_path / "same0.log"),
        (root, landings[0], tmp_path / "same1.log"),
        (root, landings[1], tmp_path / "other.log"),
    ]
    same0, same1, other = (_reported(o) for o in _run_together(runs, world["base"], write_path, tmp_path / "barrier"))
    assert set(same0) == set(same1) == set(other) == set(world["clean"]), (same0, same1, other)
    lakehouse = Lakehouse(LakehouseConfig(root=str(root)), spark, native_delta=write_path == "native")
    for table, rows in world["clean"].items():
        assert sorted([same0[table][1], same1[table][1]]) == [False, True], (table, same0, same1)
        assert same0[table][0] == same1[table][0], (table, same0, same1)
        assert not other[table][1] and {same0[table][0], other[table][0]} == {0, 1}, (table, same0, other)
        assert DeltaTable(lakehouse.location(table)).version() == 1, f"{table}: not exactly two versions"
        history = lakehouse.history(table)
        source = {c.version: Path(next(iter(c.lineage["inputs"]))).parent.name for c in history}
        assert sorted(source.values()) == sorted(landing.name for landing in landings), (table, source)
        # The version both runs of one lineage reported is the one holding their inputs.
        assert source[same0[table][0]] == landings[0].name, (table, source, same0)
        assert [lakehouse.read(table, c.version).count() for c in history] == [rows, rows]


def test_two_runs_logging_one_table_version_at_once_both_record_it(tmp_path):
    """Two MLflow runs (as two processes of one job) log the same table version as a dataset at the same
    moment, 8 times, on one SQLite store: the store's get-or-create races (one insert fails on its unique key);
    the lakehouse's logger retries, and both runs hold the dataset every time."""
    import mlflow
    from mlflow.data.delta_dataset_source import DeltaDatasetSource
    from mlflow.data.meta_dataset import MetaDataset

    from common.platform.tracking.tracker import log_dataset

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        client = mlflow.MlflowClient()
        experiment = client.create_experiment("race")
        for round_ in range(8):
            runs = [client.create_run(experiment).info.run_id for _ in range(2)]
            dataset = MetaDataset(
                source=DeltaDatasetSource(path=str(tmp_path / "items"), delta_table_version=round_),
                name="items",
                digest=f"v{round_}",
            )
            _, errors = _together(
                [lambda run=run, dataset=dataset: log_dataset(run, dataset, "output") for run in runs]
            )
            assert not errors, errors
            assert all(
                [d.dataset.digest for d in client.get_run(run).inputs.dataset_inputs] == [f"v{round_}"] for run in runs
            )
    finally:
        mlflow.set_tracking_uri(None)
