"""Benchmark: seq2seq fine-tuning speed, random batches vs length-grouped batches, same data and steps.

Task: WDC Products title pairs (../shared/data/wdc_products; the training pairs of
``generator_quality.py``'s split: ordered pairs of different titles of one product cluster), the lengths
real product titles have. Models: the demo's CGA shape (a scratch T5, d_model 64, 2 + 2 layers) and the
local default generator (``warm_minilm``, the 49M-parameter BART warm-started from MiniLM). Each model
fine-tunes for ``--steps`` steps of ``--batch`` pairs (one epoch over a seeded sample of that many pairs) on
``--threads`` torch threads (1: a fine-tune task's default ``num_cpus``), once with random batches and once
with length-grouped batches (``fine_tune.group_by_length``), for R seeds.

Per run: steps/s, examples/s, tokens/s (source + target tokens, padding not counted), the batches' fill rate
(tokens / padded tokens), and the loss on 256 held-out pairs of unseen clusters after training (the same
pairs and padding for both batchings), so that speed is not bought with quality. Prints mean ± std over the
seeds; ``--json PATH`` writes ``{model: {random|grouped: {steps_per_s, tokens_per_s, fill_rate, eval_loss,
..._std}}}``.

Run: .venv/bin/python benchmarks/generation/fine_tune_throughput.py [--seeds 2] [--steps 150] [--batch 32] [--threads
1]
     [--models scratch_t5,warm_minilm] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generator_quality import DATA, load_clusters, split  # noqa: E402  (the same WDC split)

# The demo's CGA generator (conf/demo.yaml: cga.model.scratch) and the local default.
SHAPES = {
    "scratch_t5": {"vocab_size": 2000, "d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4},
    "warm_minilm": {},
}
RATES = {"scratch_t5": 3e-3, "warm_minilm": 1e-4}


def eval_loss(folder: str, pairs: list[tuple[str, str]], batch: int = 32) -> float:
    """Mean token loss of the saved model in ``folder`` on ``pairs`` (padding not counted)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    start = getattr(model.config, "decoder_start_token_id", None)
    total, count = 0.0, 0
    with torch.inference_mode():
        for b in range(0, len(pairs), batch):
            chunk = pairs[b : b + batch]
            enc = tok([s for s, _ in chunk], max_length=48, truncation=True, padding=True, return_tensors="pt")
            labels = tok(
                [t for _, t in chunk], max_length=48, truncation=True, padding=True, return_tensors="pt"
            ).input_ids
            if start is not None and bool((labels[:, 0] == start).all()):
                labels = labels[:, 1:].contiguous()
            labels[labels == tok.pad_token_id] = -100
            n = int((labels != -100).sum())
            loss = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, labels=labels).loss
            total, count = total + float(loss) * n, count + n
    return total / count


def run_one(kind: str, pairs, held_out, seed: int, steps: int, batch: int, grouped: bool) -> dict:
    from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
    from common.models.generation.kinds.seq2seq import fine_tune

    rng = random.Random(seed)
    budget = [pairs[rng.randrange(len(pairs))] for _ in range(steps * batch)]
    spec = ModelSpec(kind=kind, max_source_length=48, max_target_length=48, **SHAPES[kind])
    with tempfile.TemporaryDirectory() as out:
        result = fine_tune(
            budget,
            out,
            spec,
            TrainSpec(epochs=1, learning_rate=RATES[kind], batch_size=batch, seed=seed, group_by_length=grouped),
        )
        loss = eval_loss(out, held_out)
    return {
        "steps_per_s": len(result.step_losses) / result.seconds,
        "examples_per_s": len(budget) / result.seconds,
        "tokens_per_s": result.tokens / result.seconds,
        "fill_rate": result.tokens / result.padded_tokens,
        "eval_loss": loss,
        "seconds": result.seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", default="scratch_t5,warm_minilm")
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    clusters = load_clusters(DATA)
    pairs, tests, _ = split(clusters, seed=0)
    held_out = [(s, r) for s, r, _ in tests][:256]
    lengths = sorted(len(s.split()) + len(t.split()) for s, t in pairs)
    print(
        f"WDC title pairs: {len(pairs):,} training pairs (words per pair: median {lengths[len(lengths) // 2]}, "
        f"90th percentile {lengths[int(len(lengths) * 0.9)]}), {len(held_out)} held out; {args.steps} steps x "
        f"{args.batch}, {args.threads} torch thread(s), {args.seeds} seeds"
    )
    figures: dict = {}
    for kind in args.models.split(","):
        figures[kind] = {}
        for name, grouped in (("random", False), ("grouped", True)):
            runs = [
                run_one(kind, pairs, held_out, seed, args.steps, args.batch, grouped) for seed in range(args.seeds)
            ]
            summary = {}
            for key in runs[0]:
                values = [r[key] for r in runs]
                summary[key] = statistics.mean(values)
                summary[f"{key}_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
            figures[kind][name] = summary
            print(
                f"  {kind:<12} {name:<8}: {summary['steps_per_s']:6.2f} ± {summary['steps_per_s_std']:.2f} steps/s  "
                f"{summary['examples_per_s']:7.1f} examples/s  {summary['tokens_per_s']:8.0f} tokens/s  fill "
                f"{summary['fill_rate']:.2f}  held-out loss {summary['eval_loss']:.3f} ± "
                f"{summary['eval_loss_std']:.3f}",
                flush=True,
            )
        ratio = figures[kind]["grouped"]["steps_per_s"] / figures[kind]["random"]["steps_per_s"]
        print(f"  {kind:<12} grouped / random: {ratio:.2f}x steps/s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=2)


if __name__ == "__main__":
    main()
