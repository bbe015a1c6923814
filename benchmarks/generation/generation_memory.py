"""Benchmark: the resident memory of a CTranslate2 generation worker across calls, with and without the heap trim.

A worker serving CGA-shaped calls (titles x 8 samples, sampled, so the translator is rebuilt per call: see
:meth:`common.models.generation.engines.ct2.CT2Generator._seeded_translator`) builds and frees a model copy and a
large decoding state each call. Without :func:`common.platform.process.native_heap.release_free_heap` glibc keeps the
freed memory in its arenas and the process grows call after call (the CGA run's Ray task worker reached
19 GiB); with it, the process returns to its resting size after every call. Prints, per call: rows,
sequences/s, RSS after the call and peak RSS during it (sampled every 0.2 s).

The generator is a causal LM folder (``generator.json``), by default SmolLM2-135M fine-tuned 30 steps on the
titles here (about 2 minutes on 2 cores; in a child process, so that torch's allocations do not shape this
process's heap); ``--model`` takes a fine-tuned one instead (e.g. ``<lakehouse>/models/smollm2_cga-*``).
Run: .venv/bin/python benchmarks/generation/generation_memory.py [--model DIR] [--calls 6] [--size 64] [--no-trim]
     [--titles CSV --column 1]   (default titles: ../shared/data's Amazon UK toys, else the demo world's)
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOYS = os.path.join(
    os.path.dirname(__file__),
    "..",
    "..",
    "..",
    "shared",
    "data",
    "amazon_uk_toys",
    "amazon_co-ecommerce_sample.noheader.csv",
)


def read_titles(path: str, column: int, n: int) -> list[str]:
    """The first ``n`` non-empty values of ``column`` in the CSV at ``path``, else ``n`` demo titles."""
    if os.path.isfile(path):
        with open(path, newline="", encoding="utf-8") as handle:
            values = [row[column] for row in csv.reader(handle) if len(row) > column and row[column].strip()]
        return values[:n]
    from generation_throughput import titles  # beside this file (its folder is on the path)

    return titles(n)


def fine_tuned(path: str, corpus: list[str], steps: int = 30) -> str:
    """SmolLM2-135M fine-tuned ``steps`` batches of 8 to write a title after CGA's prompt, saved to ``path``."""
    from common.catalog.config import CGA_PROMPT
    from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
    from common.models.generation.kinds.seq2seq import fine_tune

    fine_tune(
        [(t, t) for t in corpus[: steps * 8]],
        path,
        ModelSpec(kind="smollm2", prompt=CGA_PROMPT, max_source_length=48, max_target_length=48),
        TrainSpec(epochs=1, batch_size=8, learning_rate=5e-4),
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a fine-tuned causal generator folder (default: fine-tune one here)")
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--size", type=int, default=64, help="titles per call (one length bucket)")
    parser.add_argument("--no-trim", action="store_true", help="skip release_free_heap: the growth it prevents")
    parser.add_argument("--titles", default=TOYS)
    parser.add_argument("--column", type=int, default=1)
    args = parser.parse_args()

    import numpy as np
    import psutil

    from common.models.generation.engines import ct2
    from common.models.generation.engines.hf_engine import GenerationSpec

    corpus = read_titles(args.titles, args.column, max(args.calls * args.size, 240))
    model = args.model
    if model is None:
        model = os.path.join(tempfile.mkdtemp(prefix="bench-genmem-"), "smollm2")
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            pool.submit(fine_tuned, model, corpus).result()
    if args.no_trim:
        ct2.release_free_heap = lambda: False
    # CGA's decoding: 8 samples of at most 48 new tokens, top-k 50 / top-p 0.95, one bucket per call.
    spec = GenerationSpec(n_samples=8, max_new_tokens=48, engine="ctranslate2", bucket_size=args.size)
    generator = ct2.CT2Generator(model, "bench", spec)
    process, peak, stop = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.2)

    threading.Thread(target=sample, daemon=True).start()
    print(
        f"CTranslate2 int8 generation, {args.size} titles x 8 samples a call, heap trim "
        f"{'off' if args.no_trim else 'on'}; resting RSS {process.memory_info().rss / 2**30:.2f} GiB"
    )
    for call in range(args.calls):
        texts = corpus[call * args.size : (call + 1) * args.size]
        peak[0] = 0
        start = time.perf_counter()
        out = generator({"source_id": np.array([str(i) for i in range(len(texts))]), "source_text": np.array(texts)})
        seconds = time.perf_counter() - start
        print(
            f"  call {call + 1}: {out.num_rows:5d} rows  {out.num_rows / seconds:6.1f} sequences/s  RSS after "
            f"{process.memory_info().rss / 2**30:5.2f} GiB  peak {peak[0] / 2**30:5.2f} GiB",
            flush=True,
        )
    stop.set()


if __name__ == "__main__":
    main()
