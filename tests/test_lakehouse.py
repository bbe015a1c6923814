"""Lakehouse: versions, reads, history, lineage, idempotence, failure cleanup, and delta-rs readability."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from common.platform.config import LakehouseConfig
from common.platform.lakehouse.lakehouse import Lakehouse, LakehouseError, Lineage


def _frame(spark, n, offset=0):
    return spark.range(offset, offset + n).select(
        F.col("id").cast("string").alias("item_id"),
        F.concat(F.lit("title "), F.col("id").cast("string")).alias("title"),
        (F.col("id") * 2).alias("count"),
        F.timestamp_seconds(F.col("id")).alias("seen_at"),
    )


def test_each_write_is_one_version_and_versions_stay_readable(spark, lakehouse):
    assert lakehouse.version("items") is None and not lakehouse.exists("items")
    first = lakehouse.write(_frame(spark, 50).repartition(3), "items")
    second = lakehouse.write(_frame(spark, 20, offset=100), "items", mode="append")
    third = lakehouse.write(_frame(spark, 5), "items", mode="overwrite")
    assert (first.version, second.version, third.version) == (0, 1, 2)
    assert (first.num_rows, second.num_rows, third.num_rows) == (50, 20, 5)
    assert lakehouse.read("items", 0).count() == 50
    assert lakehouse.read("items", 1).count() == 70
    assert lakehouse.read("items").count() == 5
    assertDataFrameEqual(lakehouse.read("items", 0), _frame(spark, 50))
    assert [c.version for c in lakehouse.history("items")] == [2, 1, 0]
    with pytest.raises(LakehouseError, match="has no version 7"):
        lakehouse.read("items", 7)
    with pytest.raises(LakehouseError, match="does not exist"):
        lakehouse.read("missing_table")


def test_delta_rs_reads_what_was_written(spark, lakehouse):
    lakehouse.write(_frame(spark, 30).repartition(2), "items")
    dt = DeltaTable(lakehouse.location("items"))
    table = dt.to_pyarrow_table()
    assert table.num_rows == 30
    assert sorted(table.column("item_id").to_pylist(), key=int) == [str(i) for i in range(30)]
    assert str(table.schema.field("seen_at").type) == "timestamp[us, tz=UTC]"
    # The log holds exactly one commit with add actions whose stats count the rows.
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
    assert sum(adds["num_records"]) == 30 and dt.version() == 0
    protocol = dt.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)


def test_lineage_is_in_every_commit_and_reruns_are_skipped(spark, lakehouse):
    lineage = Lineage(job="ingest", config_hash="abc123", inputs={"raw/labeled.csv": "files:01"}, run_id="run-1")
    first = lakehouse.write(_frame(spark, 10), "items", lineage=lineage)
    again = lakehouse.write(_frame(spark, 10), "items", lineage=lineage)
    assert not first.skipped and again.skipped and again.version == first.version == 0
    assert lakehouse.version("items") == 0  # no duplicate version
    forced = lakehouse.write(_frame(spark, 10), "items", lineage=lineage, force=True)
    assert forced.version == 1 and not forced.skipped
    new_input = Lineage(job="ingest", config_hash="abc123", inputs={"raw/labeled.csv": "files:02"}, run_id="run-2")
    assert lakehouse.write(_frame(spark, 10), "items", lineage=new_input).version == 2
    commit = lakehouse.history("items")[-1]
    assert commit.lineage["job"] == "ingest" and commit.lineage["run_id"] == "run-1"
    assert commit.lineage["config_hash"] == "abc123"
    assert commit.lineage["inputs"] == {"raw/labeled.csv": "files:01"}
    # The lineage is plain commit metadata, visible to any Delta reader (delta-rs here).
    raw = [h for h in DeltaTable(lakehouse.location("items")).history() if h["version"] == 0][0]
    assert json.loads(raw["userMetadata"])["key"] == lineage.key("items")
    assert lakehouse.find_version("items", new_input) == 2


def test_failed_write_leaves_no_version_and_no_files(spark, lakehouse):
    lakehouse.write(_frame(spark, 10), "items")
    table_dir = Path(lakehouse.location("items"))
    before = sorted(p.name for p in table_dir.iterdir())
    referenced = sorted(DeltaTable(str(table_dir)).file_uris())

    @F.udf("string")
    def explode_on_seven(value):
        if value == "7":
            raise ValueError("boom")
        return value

    broken = _frame(spark, 10).withColumn("item_id", explode_on_seven("item_id"))
    with pytest.raises(Exception, match="boom"):
        lakehouse.write(broken, "items")
    assert lakehouse.version("items") == 0
    assert sorted(DeltaTable(str(table_dir)).file_uris()) == referenced
    if not lakehouse.native_delta:
        # delta-rs path: the failed write's folder is removed at once. Spark's Delta writer may leave the
        # data files of failed tasks in the table folder, never referenced by the log: VACUUM removes them.
        assert sorted(p.name for p in table_dir.iterdir()) == before
    assert lakehouse.read("items").count() == 10


def test_append_with_other_schema_is_refused(spark, lakehouse):
    lakehouse.write(_frame(spark, 3), "items")
    with pytest.raises(LakehouseError, match=r"different schema: missing columns \['seen_at'\]"):
        lakehouse.write(_frame(spark, 3).drop("seen_at"), "items", mode="append")
    replaced = lakehouse.write(_frame(spark, 3).drop("seen_at"), "items", mode="overwrite")
    assert lakehouse.read("items", replaced.version).columns == ["item_id", "title", "count"]


def test_empty_frames_and_tables_listing(spark, lakehouse):
    empty = lakehouse.write(_frame(spark, 0), "empty_items")
    assert empty.num_rows == 0 and lakehouse.read("empty_items").count() == 0
    lakehouse.write(_frame(spark, 4), "items")
    infos = {t.name: t for t in lakehouse.tables()}
    assert set(infos) == {"empty_items", "items"}
    assert infos["items"].num_rows == 4 and infos["items"].version == 0
    # Metadata needs no SparkSession for path tables.
    offline = Lakehouse(LakehouseConfig(root=lakehouse.cfg.root))
    assert [t.name for t in offline.tables()] == ["empty_items", "items"]
    assert offline.version("items") == 0
    with pytest.raises(LakehouseError, match="needs a SparkSession"):
        offline.read("items")


def test_bad_names_and_modes_are_refused(spark, lakehouse):
    with pytest.raises(LakehouseError, match="letters, digits and '_'"):
        lakehouse.write(_frame(spark, 1), "../escape")
    with pytest.raises(LakehouseError, match="write mode"):
        lakehouse.write(_frame(spark, 1), "items", mode="merge")
    with pytest.raises(LakehouseError, match="catalog tables need"):
        Lakehouse(LakehouseConfig(root="/tmp/x", catalog="main.augment"), spark, native_delta=False)


def test_history_shows_the_lineage_in_describe_history(spark, lakehouse):
    lineage = Lineage(job="ingest", config_hash="cfg", inputs={"labeled": "3"}, run_id="run-9")
    lakehouse.write(_frame(spark, 4), "items", lineage=lineage)
    [row] = (
        spark.sql(f"DESCRIBE HISTORY delta.`{lakehouse.location('items')}`").collect()
        if lakehouse.native_delta
        else [None]
    )
    engine = DeltaTable(lakehouse.location("items")).history()[0].get("engineInfo", "")
    if lakehouse.native_delta:
        assert json.loads(row["userMetadata"])["run_id"] == "run-9"
        assert engine.startswith("Apache-Spark/") and "Delta-Lake/" in engine
    else:
        assert "delta-rs" in engine
    assert lakehouse.history("items")[0].lineage["inputs"] == {"labeled": "3"}


def test_a_job_that_finds_its_output_at_an_older_version_feeds_that_version_downstream(spark, ctx):
    # Config A, then B, then A again: the third run's writer skips (version 0 holds A's output), and the job
    # after it must read A's rows, not B's (the latest), or it would label B's data with A's config.
    from common.platform.runner.job import JobResult, JobRun

    def writer(config: str) -> int:
        with ctx.tracked("writer") as tracked:
            run = JobRun(ctx, tracked, JobResult("writer"))
            if not run.all_written(["items"], config):
                run.write(_frame(spark, 3 if config == "A" else 7).repartition(3), "items", config)
            return run.result.outputs["items"].version

    def reader() -> tuple[int, int]:
        with ctx.tracked("reader") as tracked:
            run = JobRun(ctx, tracked, JobResult("reader"))
            rows = run.read("items").count()
            return rows, run.versions["items"]

    assert writer("A") == 0 and reader() == (3, 0)
    assert writer("B") == 1 and reader() == (7, 1)
    assert writer("A") == 0 and reader() == (3, 0)  # the latest is still B's version 1
    assert ctx.lakehouse.version("items") == 1
    # a maintenance commit after the chosen version holds the same data: the latest is read again
    assert writer("B") == 1
    from common.platform.config import MaintenanceConfig
    from common.platform.lakehouse.maintenance import maintain_table

    maintain_table(ctx.lakehouse, "items", MaintenanceConfig(min_files=2, vacuum=False))
    assert ctx.lakehouse.version("items") > 1 and reader() == (7, ctx.lakehouse.version("items"))
