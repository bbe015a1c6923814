"""Benchmark: ingest's near-duplicate step (``ingest.dedup.near``) on the demo catalog's titles, at growing sizes.

The demo's catalog (``common.data.demo.rows.catalog_rows``, generated on the executors with ``mapInPandas`` as
``generate-demo`` does) is the hard case for MinHash LSH: short templated titles over a small vocabulary, so
many titles share shingles and LSH buckets without being near duplicates. Each size N (catalog rows, about
3.6 per group) runs in a process of its own with a time budget: the titles are written to Parquet, exact
copies dropped (ingest's exact step comes first), then ``split_near_duplicates`` (the step ingest runs) writes the
staying rows and the near duplicates to Parquet.
Prints per N: wall time of the step, peak memory of the process tree (driver JVM and Python), near
duplicates, clusters, the share of clusters inside one catalog group, the growth exponent of the time, and
the driver JVM's peak heap use (what a collect to the driver would inflate).

Run: .venv/bin/python benchmarks/data/near_duplicates_scaling.py [--budget S] [--threshold J] [N ...]
     (default 1e4 1e5 1e6, budget 600 s, Jaccard 0.8 as ingest's default)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from budget import growth_exponent, run_in_budget  # noqa: E402 (benchmarks/, beside this file)

BUDGET_S = 600
MEAN_GROUP = 3.6  # the demo's mean catalog group size (DemoConfig.group_size_mean)


def run(n: int, threshold: float, out: dict) -> None:
    from pyspark.sql import functions as F

    from common.algorithms.near_duplicates import CLUSTER_COL, split_near_duplicates
    from common.data.config import DedupConfig, DemoConfig
    from common.data.demo import rows as demo_rows
    from common.platform.compute.session import get_spark
    from common.platform.config import SparkConfig

    spark = get_spark(SparkConfig(master="local[2]", shuffle_partitions=8, driver_memory="4g"))
    cfg = DemoConfig(n_groups=max(1, int(n / MEAN_GROUP)))
    folder = tempfile.mkdtemp(prefix="bench-near-")
    groups = cfg.n_groups
    ranges = spark.createDataFrame(
        [(s, min(s + 2000, groups)) for s in range(0, groups, 2000)], "start long, stop long"
    ).repartition(8)

    def gen(batches):
        for batch in batches:
            for start, stop in zip(batch["start"], batch["stop"]):
                yield demo_rows.catalog_rows(cfg, int(start), int(stop))[["item_id", "title", "group_id"]]

    ranges.mapInPandas(gen, "item_id string, title string, group_id string").write.parquet(f"{folder}/titles")
    # As ingest does, the exact step first: one copy of each normalised title (the demo's templates without a
    # model number repeat a title across products).
    titles = spark.read.parquet(f"{folder}/titles")
    out["rows"] = titles.count()
    titles = (
        titles.withColumn("_norm", F.lower(F.trim(F.regexp_replace("title", r"\s+", " "))))
        .dropDuplicates(["_norm"])
        .drop("_norm")
    )
    titles.write.parquet(f"{folder}/unique")
    titles = spark.read.parquet(f"{folder}/unique")
    out["unique"] = titles.count()
    d = DedupConfig()
    t0 = time.perf_counter()
    staying, near = split_near_duplicates(titles, "item_id", "title", threshold, d.near_shingle, d.near_tables)
    staying.write.parquet(f"{folder}/staying")
    near.write.parquet(f"{folder}/near")
    out["seconds"] = time.perf_counter() - t0
    near = spark.read.parquet(f"{folder}/near")
    out["near"] = near.count()
    # A cluster's id is its smallest item_id, the member that stayed. Item ids are C<group>-<version>, the
    # generator's true group even where the catalog gives none (its null-group share): same prefix, same item.
    group = F.substring_index(CLUSTER_COL, "-", 1) == F.substring_index("item_id", "-", 1)
    per_cluster = near.groupBy(CLUSTER_COL).agg(F.min(group.cast("int")).alias("one_group"))
    row = per_cluster.agg(F.count("*").alias("clusters"), F.sum("one_group").alias("one_group")).first()
    out["clusters"], out["one_group"] = row["clusters"], row["one_group"] or 0
    heap = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
    out["heap_gib"] = sum(p.getPeakUsage().getUsed() for p in heap if str(p.getType()) == "Heap memory") / 2**30


def measure(n: int, threshold: float) -> dict:
    out, peak, timed_out = run_in_budget(run, (n, threshold), BUDGET_S)
    return {"timeout": timed_out, "peak_gib": peak, **out}


def main(sizes: list[int], threshold: float) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    print(f"Jaccard >= {threshold}, {os.cpu_count()} CPUs, budget {BUDGET_S} s per size")
    print(
        f"{'N':>9} {'rows':>9} {'unique':>9} {'step s':>8} {'peak GiB':>9} {'heap GiB':>9} {'near':>7} "
        f"{'clusters':>9} "
        f"{'in one group':>13}"
    )
    done = []
    for n in sizes:
        r = measure(n, threshold)
        if r["timeout"] or "seconds" not in r:
            print(
                f"{n:>9} {r.get('rows', '-'):>9} {'timeout' if r['timeout'] else 'failed':>8} {r['peak_gib']:>9.2f}",
                flush=True,
            )
            continue
        share = f"{r['one_group'] / r['clusters']:.1%}" if r["clusters"] else "-"
        print(
            f"{n:>9} {r['rows']:>9} {r['unique']:>9} {r['seconds']:>8.1f} {r['peak_gib']:>9.2f} "
            f"{r['heap_gib']:>9.2f} "
            f"{r['near']:>7} {r['clusters']:>9} {share:>13}",
            flush=True,
        )
        done.append((r["unique"], r["seconds"]))
    if len(done) >= 2:
        print(
            f"growth exponent (step time vs unique titles, {done[0][0]}..{done[-1][0]}): "
            f"{growth_exponent(done[0], done[-1]):.2f}"
        )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=float, default=[1e4, 1e5, 1e6])
    parser.add_argument("--budget", type=int, default=BUDGET_S, help="seconds per size (default 600)")
    parser.add_argument("--threshold", type=float, default=0.8, help="Jaccard similarity (default 0.8)")
    args = parser.parse_args()
    BUDGET_S = args.budget
    main([int(n) for n in args.sizes], args.threshold)
