"""Benchmark: how fast this machine is today, in the units the suite's run time is made of.

The same 2-core machine kind ran ``make test`` in 31 minutes on some days and 46 on others with no change to
the code (docs/tests.md). Run times from different days compare only beside a probe of the machine itself:
this one measures, each as the median of a few repeats,

- one core of Python (a pure-Python loop: the drivers, Py4J, Ray's and MLflow's client code),
- two cores of BLAS (torch float32 matmuls on 2 threads: the tiny models' training),
- process starts (``python -c pass`` and ``python -c "import torch, transformers"``: every Ray worker and
  test subprocess pays them),
- the disk (64 MB written and fsynced, and small files written and fsynced one by one, as Delta's commit
  files are),
- with ``--spark`` (about 30 s more): a local[2] Spark session's start, its first Delta write, and a warm
  Delta overwrite of a small table (what every job's commits cost).

Prints one line per figure. Run: .venv/bin/python benchmarks/suite/machine_speed.py [--spark]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def python_loop() -> float:
    """Seconds for 3 million iterations of a pure-Python arithmetic loop (one core)."""

    def loop() -> int:
        total = 0
        for i in range(3_000_000):
            total += i * i % 7
        return total

    return _median_seconds(loop, 3)


def matmul_gflops(threads: int = 2, size: int = 512) -> float:
    """GFLOP/s of float32 ``size`` x ``size`` matmuls on ``threads`` torch threads."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(3):
        a @ b  # warm-up: the first calls pick kernels
    reps = 20
    seconds = _median_seconds(lambda: [a @ b for _ in range(reps)], 3)
    return 2 * size**3 * reps / seconds / 1e9


def process_start(code: str, repeats: int) -> float:
    """Median seconds for a new interpreter to run ``code`` and exit."""
    return _median_seconds(lambda: subprocess.run([sys.executable, "-c", code], check=True), repeats)


def disk(folder: str) -> tuple[float, float]:
    """(MB/s writing and fsyncing one 64 MB file, milliseconds per small file written and fsynced)."""
    block = os.urandom(1 << 20)

    def big() -> None:
        with open(os.path.join(folder, "big.bin"), "wb") as out:
            for _ in range(64):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())

    seconds = _median_seconds(big, 3)
    n = 100

    def small() -> None:
        for i in range(n):
            with open(os.path.join(folder, f"{i:05d}.json"), "w") as out:
                out.write('{"commitInfo": {}}\n')
                out.flush()
                os.fsync(out.fileno())

    return 64 / seconds, _median_seconds(small, 3) / n * 1000


SPARK_PROBE = """
import statistics, sys, time
sys.path.insert(0, {repo!r})
start = time.perf_counter()
from common.platform.config import SparkConfig
from common.platform.compute.session import detect_capabilities, get_spark
spark = get_spark(SparkConfig(master="local[2]", shuffle_partitions=2))
native = detect_capabilities(spark, SparkConfig()).native_delta
started = time.perf_counter()
df = spark.range(1000).selectExpr("id", "concat('title ', id) as title")
fmt = "delta" if native else "parquet"
df.write.format(fmt).mode("overwrite").save({path!r})
first = time.perf_counter()
warm = []
for _ in range(5):
    t = time.perf_counter()
    df.write.format(fmt).mode("overwrite").save({path!r})
    warm.append(time.perf_counter() - t)
print(fmt, started - start, first - started, statistics.median(warm))
"""


def spark_probe(folder: str) -> tuple[str, float, float, float]:
    """(format, session start s, first write s, median warm overwrite s) of a fresh local[2] Spark process:
    Delta when the jars are installed, else Parquet."""
    code = SPARK_PROBE.format(repo=str(REPO), path=os.path.join(folder, "table"))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    fmt, start, first, warm = out.strip().splitlines()[-1].split()
    return fmt, float(start), float(first), float(warm)


def main(argv: list[str]) -> None:
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (figures mean little above 0.5)")
    print(f"python loop, 3M iterations, one core: {python_loop():.3f} s")
    print(f"torch float32 512x512 matmul, 2 threads: {matmul_gflops():.1f} GFLOP/s")
    print(f"process start, python -c pass: {process_start('pass', 5) * 1000:.0f} ms")
    print(
        f"process start, python -c 'import torch, transformers': "
        f"{process_start('import torch, transformers', 2):.2f} s"
    )
    with tempfile.TemporaryDirectory(prefix="machine-speed-") as folder:
        mb_s, ms_per_file = disk(folder)
        print(
            f"disk, 64 MB written and fsynced: {mb_s:.0f} MB/s; small files written and fsynced: "
            f"{ms_per_file:.2f} ms each"
        )
        if "--spark" in argv:
            fmt, start, first, warm = spark_probe(folder)
            print(
                f"spark local[2]: session start {start:.2f} s; first {fmt} write {first:.2f} s; "
                f"warm {fmt} overwrite of 1,000 rows {warm:.3f} s (median of 5)"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
