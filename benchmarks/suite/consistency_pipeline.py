"""Benchmark: wall time and peak memory of ``augment run consistency`` at three demo sizes.

Each size runs in a fresh lakehouse as a subprocess; peak memory is the largest sum of RSS over the
process tree (driver, JVM, Python workers, Ray workers), sampled every 0.25 s. Prints a table and the
growth exponent of wall time in the data size (log-log slope between the smallest and largest size).
Run: .venv/bin/python benchmarks/suite/consistency_pipeline.py [scale ...]   (default 0.5 1 2)
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run(scale: float) -> tuple[float, float, int]:
    root = tempfile.mkdtemp(prefix=f"bench-consistency-{scale}-")
    cmd = [
        str(Path(sys.executable).parent / "augment"),
        "run",
        "consistency",
        "--conf",
        str(REPO / "conf/local.yaml"),
        "--set",
        f"lakehouse.root={root}",
        f"demo.scale={scale}",
        "consistency.repeats=1",
        "--log-level",
        "WARNING",
    ]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO)
    handle = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(handle))
        time.sleep(0.25)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.read().decode()[-3000:])
    items = 0
    from deltalake import DeltaTable

    for table in ("labeled_products", "catalog"):
        items += DeltaTable(f"{root}/{table}").to_pyarrow_table(columns=["item_id"]).num_rows
    shutil.rmtree(root, ignore_errors=True)
    return wall, peak / 2**30, items


def main(scales: list[float]) -> None:
    print(f"{'scale':>6} {'items':>8} {'wall s':>8} {'peak GiB':>9}")
    results = []
    for scale in scales:
        wall, peak, items = run(scale)
        results.append((items, wall))
        print(f"{scale:>6} {items:>8} {wall:>8.1f} {peak:>9.2f}", flush=True)
    (n0, t0), (n1, t1) = results[0], results[-1]
    print(
        f"growth exponent of wall time in items: {math.log(t1 / t0) / math.log(n1 / n0):.2f} "
        "(1.0 = linear; fixed start-up costs pull it below 1 at small sizes)"
    )


if __name__ == "__main__":
    main([float(a) for a in sys.argv[1:]] or [0.5, 1.0, 2.0])
