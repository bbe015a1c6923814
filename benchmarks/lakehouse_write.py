"""Benchmark: cost of a lakehouse write (Spark Parquet files + one delta-rs commit) vs a plain Parquet write.

Prints rows/s for both at several sizes, and the commit overhead (footer reads + log write) in seconds.
Run: .venv/bin/python benchmarks/lakehouse_write.py [max_rows]
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time

from pyspark.sql import functions as F

from common.config import LakehouseConfig, SparkConfig
from common.lakehouse import Lakehouse
from common.session import detect_capabilities, get_spark


def frame(spark, n: int):
    return spark.range(n, numPartitions=8).select(
        F.col("id").cast("string").alias("item_id"),
        F.concat(F.lit("Acme cotton t-shirt "), (F.col("id") % 997).cast("string"), F.lit(" - blue, XL")).alias("title"),
        (F.col("id") % 5000).cast("string").alias("group_id"),
        (F.rand(1) * 100).cast("long").alias("count"),
    )


def main(max_rows: int = 4_000_000) -> None:
    spark = get_spark(SparkConfig(master="local[2]", shuffle_partitions=4))
    caps = detect_capabilities(spark, SparkConfig())
    root = tempfile.mkdtemp(prefix="bench-lakehouse-")
    lakehouse = Lakehouse(LakehouseConfig(root=root), spark, native_delta=caps.native_delta)
    frame(spark, 1000).write.mode("overwrite").parquet(f"{root}/warmup")
    print(f"{'rows':>10} {'parquet s':>10} {'lakehouse s':>12} {'overhead s':>11} {'lakehouse rows/s':>17}")
    n = 250_000
    while n <= max_rows:
        plain = delta = float("inf")
        for repeat in range(3):  # best of 3, alternating, so JIT warm-up favours neither side
            t0 = time.perf_counter()
            frame(spark, n).write.mode("overwrite").parquet(f"{root}/plain_{n}")
            plain = min(plain, time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = lakehouse.write(frame(spark, n), f"bench_{n}")
            delta = min(delta, time.perf_counter() - t0)
            assert result.num_rows == n and result.version == repeat
        print(f"{n:>10} {plain:>10.2f} {delta:>12.2f} {delta - plain:>11.2f} {n / delta:>17,.0f}")
        n *= 4
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000)
