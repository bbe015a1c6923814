"""The production path: Spark's own Delta Lake beside delta-rs commits, read across; Delta's idempotent
writes under concurrency; catalog tables; GraphFrames where present; the doctor. (spark-submit end to end: the cluster
tier,
tests/cluster.)"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from common.platform.compute.session import class_archive, driver_java_options
from common.platform.config import LakehouseConfig, SparkConfig
from common.platform.lakehouse import delta_native
from common.platform.lakehouse.lakehouse import Lakehouse, Lineage

BIN = Path(sys.executable).parent


@pytest.fixture
def native_only(capabilities):
    if not capabilities.native_delta:
        pytest.skip("no native Delta in this session: `make install` resolves jvm/pom.xml into .venv/jars")


def _frame(spark, n, offset=0):
    return spark.range(offset, offset + n).select(
        F.col("id").cast("string").alias("item_id"), (F.col("id") * 3).alias("count")
    )


def _pair(spark, root):
    return (
        Lakehouse(LakehouseConfig(root=str(root)), spark, native_delta=True),
        Lakehouse(LakehouseConfig(root=str(root)), spark, native_delta=False),
    )


def test_a_table_written_by_one_path_reads_the_same_by_the_other(spark, native_only, tmp_path):
    native, rs = _pair(spark, tmp_path / "lh")
    native.write(_frame(spark, 40).repartition(3), "by_native")
    rs.write(_frame(spark, 25).repartition(2), "by_rs")
    native.write(_frame(spark, 5, offset=100), "by_rs", mode="append")  # native commits onto a delta-rs table
    rs.write(_frame(spark, 6, offset=200), "by_native", mode="append")  # and the other way round
    for table, sizes in (("by_native", (40, 46)), ("by_rs", (25, 30))):
        for version, size in enumerate(sizes):
            by_spark = spark.sql(f"SELECT * FROM delta.`{native.location(table)}` VERSION AS OF {version}")
            by_rs = rs.read(table, version)
            assert by_spark.count() == size
            assertDataFrameEqual(by_spark, by_rs)
            assertDataFrameEqual(native.read(table, version), by_rs)
            arrow = DeltaTable(native.location(table), version=version).to_pyarrow_table()
            assert sorted(arrow.column("item_id").to_pylist()) == sorted(r.item_id for r in by_rs.collect())
    engines = [h.get("engineInfo", "") for h in DeltaTable(native.location("by_native")).history()]
    assert engines[-1].startswith("Apache-Spark/") and "Delta-Lake/" in engines[-1]
    assert [c.version for c in native.history("by_rs")] == [c.version for c in rs.history("by_rs")] == [1, 0]


def test_concurrent_retries_of_one_lineage_commit_once(spark, native_only, tmp_path):
    """Two writers that both passed the history check: Delta's txnAppId lets only one commit."""
    native, _ = _pair(spark, tmp_path / "lh")
    native.write(_frame(spark, 3), "items")  # an existing table (v0) both retries overwrite
    lineage = Lineage(job="ingest", config_hash="cfg", inputs={"raw": "files:1"})
    app_id = f"augment-{lineage.key('items')}"
    barrier, results, errors = threading.Barrier(2), [], []

    def retry(run_id):
        metadata = Lineage(lineage.job, lineage.config_hash, lineage.inputs, run_id=run_id).to_metadata("items")
        try:
            barrier.wait(timeout=60)
            results.append(
                delta_native.write(
                    spark,
                    _frame(spark, 50),
                    "items",
                    native.location("items"),
                    f"delta.`{native.location('items')}`",
                    False,
                    "overwrite",
                    metadata,
                    app_id,
                )
            )
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=retry, args=(f"run-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert sorted(r.skipped for r in results) == [False, True]
    assert {r.version for r in results} == {1}
    assert native.version("items") == 1 and native.read("items").count() == 50
    # A third retry after the fact is skipped by the lakehouse's own history check, and a forced one commits.
    assert native.write(_frame(spark, 50), "items", lineage=lineage).skipped
    assert native.write(_frame(spark, 50), "items", lineage=lineage, force=True).version == 2


def test_catalog_tables_by_name(spark, native_only, tmp_path):
    catalog = f"spark_catalog.augment_{tmp_path.name.replace('-', '_')[-20:]}"
    lake = Lakehouse(LakehouseConfig(root=str(tmp_path / "lh"), catalog=catalog), spark, native_delta=True)
    lineage = Lineage(job="ingest", config_hash="cfg", inputs={"raw": "files:1"}, run_id="r1")
    first = lake.write(_frame(spark, 12), "items", lineage=lineage)
    assert (first.version, first.num_rows, first.skipped) == (0, 12, False)
    assert lake.write(_frame(spark, 12), "items", lineage=lineage).skipped
    lake.write(_frame(spark, 3, offset=50), "items", mode="append")
    assert lake.location("items") == f"{catalog}.items"
    assert spark.table(f"{catalog}.items").count() == 15 and lake.read("items", 0).count() == 12
    assert [t.name for t in lake.tables()] == ["items"] and lake.tables()[0].version == 1
    assert lake.history("items")[-1].lineage["run_id"] == "r1"
    assert len(lake.file_uris("items", 0)) >= 1 and all(Path(f).is_file() for f in lake.file_uris("items", 0))


def test_a_job_writes_and_reads_catalog_tables(spark, capabilities, native_only, app_config, tmp_path):
    from common.platform.runner.job_context import build_context
    from jobs import run_pipeline

    app_config.lakehouse.catalog = f"spark_catalog.jobs_{tmp_path.name.replace('-', '_')[-20:]}"
    ctx = build_context(app_config, spark=spark, capabilities=capabilities)
    try:
        results = run_pipeline(ctx, "foundation")
    finally:
        ctx.close()
    ingest = results[-1]
    assert ingest.outputs["labeled_products"].version == 0
    assert (
        spark.table(f"{app_config.lakehouse.catalog}.labeled_products").count() == ingest.metrics["labeled.rows_kept"]
    )
    assert {"labeled_products", "labeled_products_quarantine", "catalog"} <= {t.name for t in ctx.lakehouse.tables()}


def test_graphframes_and_the_dataframe_algorithms_agree(spark, capabilities):
    if not capabilities.graphframes:
        pytest.skip(
            "GraphFrames' jar is not on this classpath (it cannot be resolved on these machines); the "
            "suite's DataFrame algorithms are what runs here. On a cluster: --packages "
            "io.graphframes:graphframes-spark4_2.13:<version>"
        )
    from common.algorithms.graph import connected_components, triangle_counts

    edges = spark.createDataFrame(
        [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("x", "y")], "src string, dst string"
    )
    ours = connected_components(edges, use_graphframes=False)
    theirs = connected_components(edges, use_graphframes=True)

    def as_sets(df):
        rows = df.groupBy("component").agg(F.collect_set("id").alias("members")).collect()
        return sorted(sorted(r.members) for r in rows)

    assert as_sets(ours) == as_sets(theirs) == [["a", "b", "c", "d"], ["x", "y"]]
    assertDataFrameEqual(
        triangle_counts(edges, use_graphframes=False).select("id", "triangles"),
        triangle_counts(edges, use_graphframes=True).select("id", "triangles"),
    )


def test_a_cluster_session_takes_the_configs_shuffle_partitions(spark):
    """On a cluster the session is spark-submit's, whose default is Spark's 200 partitions: a configured
    ``spark.shuffle_partitions`` replaces it, then ``spark.conf``; unset, the session's own value stays."""
    from common.platform.compute.session import get_spark

    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        assert get_spark(SparkConfig(mode="cluster", shuffle_partitions=7)) is spark
        assert spark.conf.get("spark.sql.shuffle.partitions") == "7"
        get_spark(SparkConfig(mode="databricks"))
        assert spark.conf.get("spark.sql.shuffle.partitions") == "7"
        get_spark(SparkConfig(mode="cluster", shuffle_partitions=7, conf={"spark.sql.shuffle.partitions": "5"}))
        assert spark.conf.get("spark.sql.shuffle.partitions") == "5"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    assert SparkConfig().local_partitions == 4 and SparkConfig(shuffle_partitions=2).local_partitions == 2


def test_a_context_that_starts_its_session_opens_mlflow_beside_it(spark, capabilities, tmp_path):
    """``build_context`` without a session opens MLflow (import, store, experiment) while the session starts,
    so the experiment exists before any run; given a session, MLflow waits for the first run."""
    import mlflow

    from common.config import load_config
    from common.platform.runner.job_context import build_context

    cfg = load_config(
        None,
        [
            "spark.mode=cluster",
            f"lakehouse.root={tmp_path / 'lh'}",
            "spark.shuffle_partitions=3",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            "tracking.experiment=beside-jvm",
        ],
    )
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    given = started = None
    try:
        # a notebook's (or a Databricks job's) own session still gets the suite's settings on a cluster
        given = build_context(cfg, spark=spark, capabilities=capabilities)
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
        assert given.tracker._experiment_id is None
        started = build_context(cfg)  # cluster mode: the session is the running one, got with getOrCreate
        assert started.spark is spark and started.tracker._experiment_id is not None
        assert (
            mlflow.MlflowClient(cfg.tracking_uri).get_experiment_by_name("beside-jvm").experiment_id
            == started.tracker._experiment_id
        )
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
        for context in (started, given):
            if context is not None:
                context.close()


def test_doctor_reports_and_fails_on_what_the_config_needs(capabilities, tmp_path):
    augment = str(BIN / "augment")
    ok = subprocess.run(
        [augment, "doctor", "--set", f"lakehouse.root={tmp_path / 'lh'}"], capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    for piece in (
        "python",
        "spark",
        "java",
        "delta",
        "graphframes",
        "jvm archive",
        "ray",
        "torch",
        "mlflow",
        "lakehouse",
        "minilm",
    ):
        assert f" {piece} " in ok.stdout
    expected = "native: Spark's Delta Lake" if capabilities.native_delta else "delta-rs commits"
    assert expected in ok.stdout
    missing = subprocess.run(
        [
            augment,
            "doctor",
            "--set",
            "spark.delta=native",
            f"spark.jars_dir={tmp_path / 'none'}",
            f"lakehouse.root={tmp_path / 'lh'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 1
    assert "FAIL delta" in missing.stdout and "make install" in missing.stdout
    # no class archive in that jars folder: reported with its fix, but not required (JVMs only start slower)
    assert "--   jvm archive  none at" in missing.stdout and "fix: make jvm-archive" in missing.stdout


def test_local_driver_jvm_options_and_the_class_archive(spark, tmp_path):
    """The driver's JVM options keep Derby's home first, add the class archive only where it exists and the
    switch is on, then spark.java_options and a spark.conf extraJavaOptions (appended, not replacing). The
    test session's JVM maps make install's archive when there is one."""
    import dataclasses

    cfg = SparkConfig(
        jars_dir=str(tmp_path),
        java_options="-XX:TieredStopAtLevel=1",
        conf={"spark.driver.extraJavaOptions": "-Dmine=1"},
    )
    assert driver_java_options(cfg, "/ck", cpus=8) == "-Dderby.system.home=/ck -XX:TieredStopAtLevel=1 -Dmine=1"
    archive = tmp_path / "spark-driver.jsa"
    archive.write_bytes(b"x")
    assert class_archive(cfg) == str(archive)
    assert (
        driver_java_options(cfg, "/ck", cpus=8)
        == f"-Dderby.system.home=/ck -XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1 -Dmine=1"
    )
    assert "SharedArchive" not in driver_java_options(dataclasses.replace(cfg, class_data_sharing=False), "/ck")
    # On two CPUs the serial collector, unless the options name a collector of their own
    assert (
        driver_java_options(cfg, "/ck", cpus=2)
        == f"-Dderby.system.home=/ck -XX:SharedArchiveFile={archive} -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dmine=1"
    )
    g1 = dataclasses.replace(cfg, java_options="-XX:+UseG1GC")
    assert "Serial" not in driver_java_options(g1, "/ck", cpus=2)
    assert driver_java_options(g1, "/ck", cpus=2).endswith("-XX:+UseG1GC -Dmine=1")

    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    installed = class_archive(SparkConfig())
    assert (f"-XX:SharedArchiveFile={installed}" in args) == os.path.isfile(installed), args
    if os.path.isfile(installed):
        assert "sharing" in jvm.System.getProperty("java.vm.info")  # the JVM accepted and mapped it
    collectors = {bean.getName() for bean in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()}
    # the serial collector's two generations ("Copy", "MarkSweepCompact") where the session has <= 2 CPUs
    assert ("MarkSweepCompact" in collectors) == (len(os.sched_getaffinity(0)) <= 2), collectors
