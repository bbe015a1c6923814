"""Benchmark: a lakehouse write on each path (Spark's Delta writer; Spark Parquet files + one delta-rs commit)
vs a plain Parquet write of the same rows.

Prints seconds and rows/s per path at several sizes, best of 3, alternating so JIT warm-up favours none.
The native column needs the Delta jars (`make install`); without them it is left out.
Run: .venv/bin/python benchmarks/data/lakehouse_write.py [max_rows]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time

from pyspark.sql import functions as F

from common.platform.compute.session import detect_capabilities, get_spark
from common.platform.config import LakehouseConfig, SparkConfig
from common.platform.lakehouse.lakehouse import Lakehouse


def frame(spark, n: int):
    return spark.range(n, numPartitions=8).select(
        F.col("id").cast("string").alias("item_id"),
        F.concat(F.lit("Acme cotton t-shirt "), (F.col("id") % 997).cast("string"), F.lit(" - blue, XL")).alias(
            "title"
        ),
        (F.col("id") % 5000).cast("string").alias("group_id"),
        (F.rand(1) * 100).cast("long").alias("count"),
    )


def main(max_rows: int = 4_000_000) -> None:
    spark = get_spark(SparkConfig(master="local[2]", shuffle_partitions=4))
    caps = detect_capabilities(spark, SparkConfig())
    root = tempfile.mkdtemp(prefix="bench-lakehouse-")
    paths = {"rs": Lakehouse(LakehouseConfig(root=f"{root}/rs"), spark, native_delta=False)}
    if caps.native_delta:
        paths = {"native": Lakehouse(LakehouseConfig(root=f"{root}/native"), spark, native_delta=True), **paths}
    else:
        print("no Delta jars in this session: native path left out (make install resolves them)")
    frame(spark, 1000).write.mode("overwrite").parquet(f"{root}/warmup")
    header = f"{'rows':>10} {'parquet s':>10}" + "".join(f" {p + ' s':>10} {p + ' rows/s':>14}" for p in paths)
    print(header)
    n = 250_000
    while n <= max_rows:
        best = {name: float("inf") for name in ["parquet", *paths]}
        for repeat in range(3):
            t0 = time.perf_counter()
            frame(spark, n).write.mode("overwrite").parquet(f"{root}/plain_{n}")
            best["parquet"] = min(best["parquet"], time.perf_counter() - t0)
            for name, lakehouse in paths.items():
                t0 = time.perf_counter()
                result = lakehouse.write(frame(spark, n), f"bench_{n}")
                best[name] = min(best[name], time.perf_counter() - t0)
                assert result.num_rows == n and result.version == repeat
        print(f"{n:>10} {best['parquet']:>10.2f}" + "".join(f" {best[p]:>10.2f} {n / best[p]:>14,.0f}" for p in paths))
        n *= 4
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000)
