"""Benchmark: the Spark -> Ray -> Delta handoff, in seconds per GB.

A Spark-written table version of synthetic title rows is read by Ray Data from its Parquet files
(``Lakehouse.read_ray``), passed through an identity ``map_batches`` (materialised), and written back as
one new Delta version (``Lakehouse.write_ray``). Prints on-disk GB, read and write seconds, and s/GB.
Run: .venv/bin/python benchmarks/data/ray_handoff.py [rows]   (default 4,000,000: about 0.3 GB of Parquet)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time

from pyspark.sql import functions as F

from common.platform.compute.ray_runtime import RayRuntime
from common.platform.compute.session import detect_capabilities, get_spark
from common.platform.config import LakehouseConfig, RayConfig, SparkConfig
from common.platform.lakehouse.lakehouse import Lakehouse
from common.platform.storage import list_files


def main(rows: int = 4_000_000) -> None:
    spark = get_spark(SparkConfig(master="local[2]", shuffle_partitions=4))
    root = tempfile.mkdtemp(prefix="bench-handoff-")
    lakehouse = Lakehouse(LakehouseConfig(root=root), spark, detect_capabilities(spark, SparkConfig()).native_delta)
    df = spark.range(rows, numPartitions=8).select(
        F.col("id").cast("string").alias("source_id"),
        F.concat_ws(
            " ",
            F.lit("Acme"),
            F.sha2(F.col("id").cast("string"), 256).substr(1, 12),
            F.lit("cotton t-shirt"),
            (F.col("id") % 97).cast("string"),
            F.lit("- navy, XL"),
        ).alias("source_text"),
    )
    lakehouse.write(df, "sources")
    gigabytes = sum(f.size for f in list_files(lakehouse.location("sources"))) / 1e9
    with RayRuntime(RayConfig(num_cpus=2)):
        start = time.perf_counter()
        ds = lakehouse.read_ray("sources").map_batches(lambda b: b, batch_format="pyarrow").materialize()
        read_s = time.perf_counter() - start
        start = time.perf_counter()
        result = lakehouse.write_ray(ds, "copied")
        write_s = time.perf_counter() - start
    assert result.num_rows == rows
    print(f"rows {rows:,}  parquet {gigabytes:.3f} GB")
    print(f"Delta -> Ray Dataset (read + materialise): {read_s:.2f} s = {read_s / gigabytes:.1f} s/GB")
    print(f"Ray Dataset -> Delta version (write + commit): {write_s:.2f} s = {write_s / gigabytes:.1f} s/GB")
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(int(float(sys.argv[1])) if len(sys.argv) > 1 else 4_000_000)
