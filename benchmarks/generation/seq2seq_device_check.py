"""Check and time the T5 stages' model code on whatever device torch sees (a lent GPU box needs no Spark or
Ray): :func:`common.models.generation.kinds.seq2seq.fine_tune` (bf16 autocast on GPUs that have it) and one generation
actor (:class:`common.models.generation.on_ray.pool.T5Generator`, the Ray Data pool's callable) on the same pairs.

Task: SST-2 training sentences (``--data``), source = the sentence's first five words, target = the sentence,
so the loss and the generations show whether training moved the model. Per model (scratch_t5 in the demo's
shape, warm_minilm): fine-tune examples/s and tokens/s, the first and last step losses, then generation of
``--prompts`` inputs x n = 8 samples, generated tokens/s, and three samples.

Run: python3 benchmarks/generation/seq2seq_device_check.py [--pairs N] [--epochs 2] [--prompts 256] [--json PATH]
(measured on the H100 with --pairs 4000 --prompts 1024)
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fine_tune_throughput import RATES, SHAPES  # noqa: E402  (the same two model shapes and rates)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "sst2" / "train.csv"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--pairs", type=int, default=None, help="default: 4000 on a GPU, 400 on a CPU")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--models", default="scratch_t5,warm_minilm")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)

    import pyarrow as pa
    import torch

    from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
    from common.models.generation.kinds.seq2seq import fine_tune
    from common.models.generation.on_ray.pool import GenerationSpec, T5Generator

    with open(args.data, newline="", encoding="utf-8") as fh:
        texts = [r["text"] for r in csv.DictReader(fh)][: args.pairs or (4000 if torch.cuda.is_available() else 400)]
    pairs = [(" ".join(t.split()[:5]), t) for t in texts]
    figures: dict = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            result = fine_tune(
                pairs,
                tmp,
                ModelSpec(kind=name, **SHAPES[name]),
                TrainSpec(epochs=args.epochs, learning_rate=RATES[name], batch_size=32),
            )
            out = {
                "dtype": result.dtype,
                "train_device": result.device,
                "examples_per_s": result.examples / result.seconds,
                "tokens_per_s": result.tokens / result.seconds,
                "first_loss": result.step_losses[0],
                "last_loss": sum(result.step_losses[-20:]) / len(result.step_losses[-20:]),
            }
            generator = T5Generator(tmp, "check", GenerationSpec(n_samples=8, bucket_size=256, max_new_tokens=48))
            prompts = [s for s, _ in pairs[: args.prompts]]
            batch = {"source_id": [str(i) for i in range(len(prompts))], "source_text": prompts}
            generator({k: v[:8] for k, v in batch.items()})  # warm-up: kernels and caches
            start = time.perf_counter()
            table: pa.Table = generator(batch)
            seconds = time.perf_counter() - start
            out.update(
                {
                    "generated_rows": table.num_rows,
                    "generation_s": seconds,
                    "generated_tokens_per_s": sum(table.column("generated_tokens").to_pylist()) / seconds,
                    "quarantined": table.num_rows - table.column("reason").null_count,
                    "samples": table.column("generated_text").to_pylist()[:3],
                }
            )
            figures[name] = out
            print(name, json.dumps(out, default=str), flush=True)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(figures, indent=2, default=str))
    return figures


if __name__ == "__main__":
    main()
