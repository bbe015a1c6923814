"""The local driver JVM's class-data-sharing (CDS) archive, dumped once by ``make install``.

A local session's JVM spends seconds of its start on 2 cores loading, parsing and verifying Spark's
classes, and every ``augment`` command, scheduled local batch and test subprocess starts one. Java's
dynamic CDS (JDK 13+) writes the classes one run loaded into an archive that later JVMs map instead:
measured on 2 cores, an ``augment run ingest`` of the small reliability world reached its first write
after 8.4-10.0 s instead of 10.6-13.9 s (README, Tests). :func:`common.platform.compute.session.get_spark` passes the
archive to local sessions when it exists (``spark.class_data_sharing``). The JVM checks the archive itself: one from
another JDK build or Spark version is refused with a one-line warning and the JVM starts as before.

    python -m common.platform.compute.jvm_archive      # what make install runs; prints the archive and its size
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time

from common.platform.compute.session import _uses_native_jars, class_archive, get_spark
from common.platform.config import SparkConfig


def _workload(spark, folder: str, native_delta: bool) -> None:
    """What the suite's jobs make the driver load: CSV and Parquet I/O, joins, windows, aggregations, an
    Arrow pandas UDF with its Python workers, and Spark's Delta writer and reader when the jars are present."""
    import pandas as pd
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pd.DataFrame({"id": range(200), "title": [f"item {i % 17} title" for i in range(200)]}).to_csv(
        os.path.join(folder, "in.csv"), index=False
    )
    df = spark.read.option("header", True).csv(os.path.join(folder, "in.csv"))
    df = df.withColumn("group", F.col("id").cast("int") % 7).withColumn("words", F.split("title", " "))
    ranked = df.withColumn("rank", F.row_number().over(Window.partitionBy("group").orderBy("id")))
    joined = ranked.join(df.groupBy("group").agg(F.count("*").alias("n")), "group")

    def per_group(pdf: pd.DataFrame) -> pd.DataFrame:
        return pdf.assign(n=len(pdf))[["group", "n"]].head(1)

    joined.groupBy("group").applyInPandas(per_group, "group int, n long").toPandas()
    joined.write.mode("overwrite").parquet(os.path.join(folder, "parquet"))
    if native_delta:
        path = os.path.join(folder, "delta")
        joined.write.format("delta").mode("overwrite").save(path)
        spark.read.format("delta").load(path).count()
        spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()


def build(cfg: SparkConfig | None = None) -> str:
    """Dump the class archive of a local session with ``cfg`` (default: a local[2] session with the Delta jars
    when present) to :func:`~common.platform.compute.session.class_archive`, replacing any older one. Must run in a
    process without a SparkSession (the archive is written when the JVM exits). Returns the archive's path."""
    from pyspark import SparkContext

    cfg = cfg or SparkConfig(master="local[2]")
    if SparkContext._active_spark_context is not None:
        raise RuntimeError("jvm_archive.build needs a process without a SparkSession: the JVM must start and exit")
    target = class_archive(cfg)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    partial = f"{target}.{os.getpid()}.partial"
    dumping = dataclasses.replace(
        cfg,
        class_data_sharing=False,
        java_options=f"{cfg.java_options} -XX:ArchiveClassesAtExit={partial} "
        # thousands of "class skipped" warnings otherwise
        "-Xlog:cds=off -Xlog:cds+dynamic=off".strip(),
    )
    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as folder:
        spark = get_spark(dataclasses.replace(dumping, checkpoint_dir=os.path.join(folder, "checkpoints")))
        _workload(spark, folder, _uses_native_jars(cfg))
        spark.stop()
        # The gateway JVM exits when its stdin closes, and dumps the archive on the way out.
        jvm = SparkContext._gateway.proc
        jvm.stdin.close()
        jvm.wait(timeout=600)
    if not os.path.isfile(partial):
        raise RuntimeError(f"the JVM exited ({jvm.returncode}) without writing {partial}")
    os.replace(partial, target)  # atomic: a session starting meanwhile maps the old archive or the new one
    return target


if __name__ == "__main__":
    start = time.monotonic()
    path = build()
    print(f"jvm class archive: {path} ({os.path.getsize(path) / 1e6:.0f} MB) in {time.monotonic() - start:.0f}s")
    sys.exit(0)
