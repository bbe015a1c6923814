"""Concurrent writers on both write paths: one lineage commits once, different lineages both commit.

Two runs of one job at the same time (a retried batch that overlaps the original) must leave exactly one
version; the other run reports it as already written. Two different jobs overwriting one table must both
commit (the loser retries against the new state), and every version must hold one writer's full output.
"""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from common.platform import delta_native, delta_rs
from common.platform.lakehouse import Lineage


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
        results, errors = _together([lambda ln=ln: lakehouse.write(_frame(spark, 40, "same"), "items", lineage=ln)
                                     for ln in runs])
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
        second = delta_native.write(spark, _frame(spark, 30, "b"), "items", location, f"delta.`{location}`", False,
                                    "overwrite", late, app_id)
    else:
        second = delta_rs.commit_files("items", location, None, "overwrite", late,
                                       lambda folder: _frame(spark, 30, "b").write.parquet(folder), None, app_id)
    assert second.skipped and second.version == first.version == 0
    assert lakehouse.version("items") == 0
    assert DeltaTable(location).to_pyarrow_table().column("writer").unique().to_pylist() == ["a"]
    # The losing write's files were never committed; on the delta-rs path they are removed at once.
    if not lakehouse.native_delta:
        folders = {p.name for p in Path(location).iterdir() if not p.name.startswith("_")}
        referenced = {Path("/" + u.removeprefix("file://").lstrip("/")).relative_to(location).parts[0]
                      for u in DeltaTable(location).file_uris()}
        assert folders == referenced


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_different_lineages_both_commit_and_nothing_is_lost(spark, lakehouse, mode):
    lakehouse.write(_frame(spark, 5, "seed"), "items")
    writers = ["a", "b", "c"]
    results, errors = _together([
        lambda w=w, i=i: lakehouse.write(_frame(spark, 20 + i, w), "items", mode,
                                    Lineage(job=f"job-{w}", config_hash=w, inputs={"raw": w}))
        for i, w in enumerate(writers)])
    assert not errors, errors
    assert not any(res.skipped for res in results)
    assert sorted(res.version for res in results) == [1, 2, 3]
    history = _versions_and_writers(lakehouse, "items")
    by_version = {res.version: (w, 20 + i) for i, (w, res) in enumerate(zip(writers, results))}
    if mode == "overwrite":  # each version holds exactly its writer's full output
        assert all(history[v] == (n, {w}) for v, (w, n) in by_version.items())
    else:  # appends accumulate: the last version holds the seed and every writer's rows
        assert history[3] == (5 + 20 + 21 + 22, {"seed", *writers})
