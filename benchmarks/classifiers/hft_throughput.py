"""Benchmark: HFT training throughput (words/s/thread per level) vs one plain fastText model, same data.

Data: the demo's labeled titles at ``scale`` (default 4: 24k titles, 4-level labels). Plain fastText is
one model on the full (leaf) labels in this process; HFT trains its 4 level models in parallel in Ray
actors (1 thread each). Prints words/s/thread for each model and the wall time of both.
Run: .venv/bin/python benchmarks/classifiers/hft_throughput.py [scale]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

from common.data.config import DemoConfig
from common.data.demo import rows as demo_rows
from common.models.classifier_config import FastTextConfig
from common.models.classifiers.fasttext_training import fasttext_params
from common.models.classifiers.hft import HFTTrainerPool, train_hft, train_level
from common.platform.compute.ray_runtime import RayRuntime
from common.platform.config import RayConfig


def main(scale: float = 4.0) -> None:
    cfg = DemoConfig(scale=scale)
    n = cfg.scaled(cfg.n_labeled)
    rows = demo_rows.labeled_rows(cfg, 0, n)
    folder = tempfile.mkdtemp(prefix="bench-hft-")
    path = os.path.join(folder, "train.parquet")
    pq.write_table(pa.Table.from_pandas(rows), path)
    ft = FastTextConfig(bucket=100_000)
    print(f"{n} titles, {rows.title.str.split().str.len().sum()} tokens, epochs {ft.epoch}")

    start = time.perf_counter()
    plain = train_level([path], 4, fasttext_params(ft), 1, os.path.join(folder, "plain"))
    plain_wall = time.perf_counter() - start

    with RayRuntime(RayConfig(num_cpus=2)) as runtime:
        pool = HFTTrainerPool(runtime)
        train_hft(pool, [path], 1, ft, 1, os.path.join(folder, "warmup"))  # worker start-up is not training
        start = time.perf_counter()
        _, stats = train_hft(pool, [path], 4, ft, 1, os.path.join(folder, "hft"))
        hft_wall = time.perf_counter() - start

    print(f"{'model':<16} {'labels':>6} {'train s':>8} {'words/s/thread':>15}")
    print(
        f"{'plain fastText':<16} {plain.labels:>6} {plain.seconds:>8.2f} {plain.words_per_second_per_thread:>15,.0f}"
    )
    for s in stats:
        print(f"{'HFT f' + str(s.level):<16} {s.labels:>6} {s.seconds:>8.2f} {s.words_per_second_per_thread:>15,.0f}")
    total = sum(s.seconds for s in stats)
    print(
        f"wall: plain {plain_wall:.2f} s (incl. file prep); HFT {hft_wall:.2f} s on 2 actors "
        f"({total:.2f} s of training, {total / plain.seconds:.2f}x plain's training time)"
    )


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 4.0)
