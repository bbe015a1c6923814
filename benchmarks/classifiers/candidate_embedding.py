"""BoostAug's candidate embedding stage (the ``features`` surrogate's pool,
:func:`common.boostaug.feature_surrogate.embed_on_ray`, as the pipeline runs it) in candidates per second
against text length: the path before beside the path now, in one run.

Candidates are Brown word windows of 20, 40, 80 and 160 words (``../shared/data/brown/documents.csv``), distinct
and seeded, read from a Parquet file and embedded by the pipeline's pool on a local Ray runtime of ``--cpus`` CPUs
with the default ``FeatureSurrogateConfig`` (MiniLM on CTranslate2 int8, one actor). The steady rate excludes the
pool's start and the encoder's load: each variant embeds one text, then n others (n = ``--rows`` x 40 / words, at
least 3 blocks), each in a fresh pool, and the rate is the extra rows over the extra seconds. Variants:
- ``before``: one encoder batch per 512-row block (``batch_tokens: 0``) on every thread, texts cut at MiniLM's 256
  word pieces (``max_tokens: 0``), all 6 layers (``layers: 0``): the pipeline before 2026-12-02;
- ``batched``: texts sorted by token count in batches of at most 512 tokens (``batch_tokens`` unset on CPU), cut
  at 128 word pieces (``max_tokens: 128``), one batch at a time on every thread (``parallel_batches: false``):
  the pipeline of 2026-12-02's first change;
- ``parallel``: batched, cut at 128, and as many batches at once as threads, one thread each: the pipeline of
  2026-12-02's second change;
- ``held heap``: as ``parallel``, with the actor's C heap held for reuse (``hold_heap``): the pipeline of
  2026-12-03;
- ``now``: the defaults: as ``held heap``, two blocks at once on the actor (``calls_per_actor: 2``), so one's
  tokenizing and Arrow work overlaps the other's encoder batches: the pipeline of 2026-12-03's evening;
- ``layers 3``: as ``now``, the embedding taken from MiniLM's third layer of six (``layers: 3``), an opt-in: it
  halves the encoder's work but changes the filter (docs/pipelines/boostaug.md).
Beside them, ``encoder alone``: the defaults' encoder in this process on the same texts in 512-row slices, no Ray:
the most the pool could reach.

Run: ``.venv/bin/python benchmarks/classifiers/candidate_embedding.py [--rows 3072] [--words 20 40 80 160]``
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

# FeatureSurrogateConfig overrides per variant
VARIANTS = {
    "before": {
        "batch_tokens": 0,
        "max_tokens": 0,
        "parallel_batches": False,
        "hold_heap": False,
        "layers": 0,
        "calls_per_actor": 1,
    },
    "batched": {"parallel_batches": False, "hold_heap": False, "layers": 0, "calls_per_actor": 1},
    "parallel": {"hold_heap": False, "layers": 0, "calls_per_actor": 1},
    "held heap": {"layers": 0, "calls_per_actor": 1},
    "now": {},
    "layers 3": {"layers": 3},
}


def windows(n_words: int, rows: int, seed: int = 0) -> list[str]:
    """``rows`` distinct windows of ``n_words`` words drawn (seeded) from Brown's documents, in drawn order."""
    csv.field_size_limit(sys.maxsize)
    with open(REPO.parent / "shared" / "data" / "brown" / "documents.csv", newline="", encoding="utf-8") as handle:
        words = [w for row in csv.DictReader(handle) for w in row["text"].split()]
    rnd, out = random.Random(seed), {}
    while len(out) < rows:
        start = rnd.randrange(len(words) - n_words)
        out.setdefault(" ".join(words[start : start + n_words]), None)
    return list(out)


def seconds(texts: list[str], spec) -> float:
    """Wall seconds of the pipeline's embedding pool over ``texts`` (a fresh pool: its start is included), read
    from a Parquet file as the pipeline reads its candidates version (``Lakehouse.read_ray``): Ray Data's
    ``from_items`` makes blocks of a few dozen rows whose regrouping left the actor waiting between blocks."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray

    from common.boostaug.feature_surrogate import embed_on_ray

    with tempfile.TemporaryDirectory() as folder:
        pq.write_table(pa.table({"text": texts}), f"{folder}/part-0.parquet")
        start = time.perf_counter()
        rows = embed_on_ray(ray.data.read_parquet(folder), spec).materialize().count()
        elapsed = time.perf_counter() - start
    assert rows == len(texts)
    return elapsed


def steady_rate(texts: list[str], spec) -> float:
    """Candidates per second of the pipeline's embedding pool over ``texts`` without its start: the extra rows
    over the extra seconds of a pass over all of ``texts`` against a pass over one of them."""
    started = seconds(texts[:1], spec)
    return (len(texts) - 1) / max(seconds(texts, spec) - started, 1e-9)


def alone_rate(texts: list[str], spec) -> float:
    """Candidates per second of ``spec``'s encoder in this process over ``texts`` in ``spec.batch_size``-row
    slices (its C heap held, as the actor's), after one slice to warm it."""
    from common.boostaug.feature_surrogate import embed, sentence_encoder
    from common.platform.process.native_heap import hold_native_heap

    hold_native_heap()
    encoder, step = sentence_encoder(spec), spec.batch_size
    embed(encoder, texts[:step], step, spec.batch_tokens)
    start = time.perf_counter()
    for i in range(0, len(texts), step):
        embed(encoder, texts[i : i + step], step, spec.batch_tokens)
    return len(texts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=3072)
    parser.add_argument("--words", type=int, nargs="+", default=[20, 40, 80, 160])
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()

    from common.boostaug.config import FeatureSurrogateConfig
    from common.boostaug.feature_surrogate import sentence_encoder
    from common.models.generation.quality.scoring import _encoder
    from common.platform.compute.ray_runtime import RayRuntime
    from common.platform.config import RayConfig

    base = FeatureSurrogateConfig()
    RayRuntime(RayConfig(num_cpus=args.cpus)).start()
    print(
        f"encoder: packaged all-MiniLM-L6-v2, {base.engine} {base.compute_type}, {base.concurrency} actor of "
        f"{base.num_cpus} CPU, {base.threads} threads, blocks of {base.batch_size}; {args.cpus} Ray CPUs; steady "
        f"rate over n distinct candidates per length and variant (n = {args.rows} x 40 / words, >= 3 blocks)"
    )
    print(
        "| words | "
        + " | ".join(f"{v} cand/s" for v in VARIANTS)
        + " | encoder alone | now / before | layers 3 / before | alone / before |"
    )
    print("|---|" + "---|" * (len(VARIANTS) + 4))
    # Each variant's encoder converted once before any is timed: a conversion inside the first (one-text) pass
    # would be subtracted from the steady rate.
    for overrides in VARIANTS.values():
        sentence_encoder(dataclasses.replace(base, **overrides))
    _encoder.cache_clear()
    for n in args.words:
        texts = windows(n, max(3 * base.batch_size, args.rows * 40 // n))
        rates = [steady_rate(texts, dataclasses.replace(base, **overrides)) for overrides in VARIANTS.values()]
        rates.append(alone_rate(texts, base))
        ratios = [rates[list(VARIANTS).index(v)] / rates[0] for v in ("now", "layers 3")] + [rates[-1] / rates[0]]
        print(
            f"| {n} | " + " | ".join(f"{r:.0f}" for r in rates) + "".join(f" | {x:.2f}x" for x in ratios) + " |",
            flush=True,
        )


if __name__ == "__main__":
    main()
