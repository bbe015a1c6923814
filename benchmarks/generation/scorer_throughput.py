"""Benchmark: the MiniLM scorer's encoder, sentence-transformers (torch) vs CTranslate2 (int8, float32).

Texts: distinct WDC Products titles (../shared/data/wdc_products), the kind of text the CGA filter scores.
Each engine encodes the same texts in batches of 256 on ``--threads`` threads (1: a Ray task's CPU) and
prints texts/s and the speed-up over torch. Quality: the cosine between each engine's embedding and torch's,
and for pairs of titles (each title with another title of its product, and with a title of another
product) the scorer's cosine on each engine, the largest difference from torch's, and the share of the
CGA filter's keep decisions at T = 0.7 that agree with torch's.

Run: .venv/bin/python benchmarks/generation/scorer_throughput.py [--texts 4000] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generator_quality import DATA, load_clusters  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # CTranslate2's threads (as Ray sets it in a task)
    os.environ.setdefault("AUGMENT_CACHE", tempfile.mkdtemp(prefix="bench-scorer-"))
    import numpy as np
    import torch

    from common.models.generation.quality.scoring import _encoder, minilm_path
    from common.models.generation.quality.sentence_encoder import CT2SentenceEncoder

    torch.set_num_threads(args.threads)
    clusters = load_clusters(DATA)
    rng = random.Random(0)
    texts = list(dict.fromkeys(t for titles in clusters.values() for t in titles))
    rng.shuffle(texts)
    texts = texts[: args.texts]
    ids = sorted(clusters)
    pairs = [(titles[0], titles[1]) for titles in clusters.values()]
    pairs += [(clusters[a][0], clusters[rng.choice(ids)][0]) for a in ids]
    path = minilm_path()
    engines = {"torch": _encoder(path, "cpu", "torch")}
    for kind in ("int8", "float32"):
        start = time.perf_counter()
        engines[f"ct2 {kind}"] = CT2SentenceEncoder(path, device="cpu", compute_type=kind)
        print(f"ct2 {kind}: converted and loaded in {time.perf_counter() - start:.1f} s (once per model)")
    print(f"{len(texts):,} distinct WDC titles, batches of 256, {args.threads} thread(s); {len(pairs):,} title pairs")
    reference, reference_pairs, base = None, None, None
    for name, encoder in engines.items():
        encoder.encode(texts[:64])  # warm-up
        start = time.perf_counter()
        vectors = encoder.encode(texts, batch_size=256, normalize_embeddings=True, convert_to_numpy=True)
        seconds = time.perf_counter() - start
        a = encoder.encode([p for p, _ in pairs], batch_size=256, normalize_embeddings=True, convert_to_numpy=True)
        b = encoder.encode([q for _, q in pairs], batch_size=256, normalize_embeddings=True, convert_to_numpy=True)
        scores = np.clip(np.sum(a * b, axis=1), -1, 1)
        if reference is None:
            reference, reference_pairs, base = vectors, scores, seconds
        agreement = np.sum(vectors * reference, axis=1)
        keep = float(np.mean((scores >= 0.7) == (reference_pairs >= 0.7)))
        print(
            f"  {name:<12}: {len(texts) / seconds:7.1f} texts/s ({base / seconds:.2f}x torch)  embedding cosine to "
            f"torch's min {agreement.min():.4f} mean {agreement.mean():.4f}  pair score max |diff| "
            f"{np.abs(scores - reference_pairs).max():.4f}  keep decisions at T=0.7 as torch: {keep:.2%}"
        )


if __name__ == "__main__":
    main()
