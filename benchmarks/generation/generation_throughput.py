"""Benchmark: T5 generation throughput, naive per-row loop vs the HF and CTranslate2 actor pools, and peak memory.

1. The same model, inputs and decoding settings through (a) a naive loop of one ``model.generate`` per
   input in this process, (b) the Ray Data actor pool of ``common.models.generation.on_ray.pool.generate`` with the HF
   engine and (c) the same pool with CTranslate2 (int8; length buckets, one actor, one CPU thread each); the
   pools read the inputs from a Parquet file, as the jobs read a table version.
   Prints sequences/s, tokens/s, the BLEU-0.7 filter's keep-rate of the samples and peak RSS, for the
   demo-CGA-shaped tiny model, the ``warm_minilm`` and ``smollm2`` generators (each trained briefly to rewrite
   titles; SmolLM2 with LoRA, prompted as CGA prompts it) and a t5-small-shaped one (random weights).
2. Peak memory of the generation stage (driver + Ray workers, sampled every 0.2 s) while the actor pool
   streams growing inputs from a Delta table to a new Delta version (the jobs' path): it must stay flat.
3. With a CUDA device: a t5-small-shaped model (random weights; d_model 512, 6+6 layers, 32k vocab) at
   batch 128 in bf16/fp16, HF ``generate`` with sampling, tokens/s.

Models are built from scratch (no downloads): a tokenizer trained on demo titles and a T5Config model;
random weights rarely emit </s>, so every sequence runs to ``max_new_tokens``: tokens/s is comparable.
Run: .venv/bin/python benchmarks/generation/generation_throughput.py [--inputs 512] [--warm-inputs 128] [--large-inputs
64]
     [--smollm2-inputs 64]
     [--skip-naive] [--skip-memory]
     [--sizes 500,2000,8000] [--gpu-only] [--json PATH]   (JSON: {model: {naive|hf_pool|ct2_pool: figures}})
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def titles(n: int) -> list[str]:
    """``n`` demo product titles (the synthetic world's labeled rows, repeated if needed)."""
    from common.data.config import DemoConfig
    from common.data.demo.rows import labeled_rows

    base = labeled_rows(DemoConfig(), 0, min(n, 6000)).title.tolist()
    return [base[i % len(base)] for i in range(n)]


def build(path: str, shape: str, corpus: list[str]) -> str:
    """Save a scratch T5 (``tiny``: the demo's CGA shape; ``t5-small``: t5-small's dimensions) to ``path``."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    from common.models.generation.kinds.unigram import train_tokenizer

    torch.manual_seed(0)
    dims = {
        "tiny": dict(d_model=64, d_ff=128, num_layers=2, num_heads=4, vocab=2000),
        "t5-small": dict(d_model=512, d_ff=2048, num_layers=6, num_heads=8, vocab=8000),
    }[shape]
    tok = train_tokenizer(corpus, dims["vocab"])
    vocab = 32128 if shape == "t5-small" else len(tok)  # t5-small's embedding and output layer size
    config = T5Config(
        vocab_size=vocab,
        d_model=dims["d_model"],
        d_kv=dims["d_model"] // dims["num_heads"],
        d_ff=dims["d_ff"],
        num_layers=dims["num_layers"],
        num_decoder_layers=dims["num_layers"],
        num_heads=dims["num_heads"],
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    T5ForConditionalGeneration(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


class PeakRSS:
    """Samples the resident memory of this process and all its descendants (Ray's workers included)."""

    def __init__(self):
        import psutil

        self.root = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import psutil

        while not self._stop.is_set():
            total = 0
            for proc in [self.root] + self.root.children(recursive=True):
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def train_copy_model(path: str, corpus: list[str]) -> str:
    """The demo-CGA-shaped tiny T5 fine-tuned (8 epochs) to rewrite titles into themselves (as CGA's version
    pairs nearly do), so that its samples pass the BLEU filter at some rate (about 13% of them) and the
    engines' keep-rates can be compared; in a Ray task, as the jobs fine-tune."""
    import ray

    from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
    from common.models.generation.kinds.seq2seq import fine_tune

    task = ray.remote(num_cpus=1, max_calls=1)(fine_tune)
    ray.get(
        task.remote(
            [(t, t) for t in corpus],
            path,
            ModelSpec(vocab_size=2000, max_source_length=48),
            TrainSpec(epochs=8, batch_size=32, learning_rate=0.003),
        )
    )
    return path


def train_warm_copy_model(path: str, corpus: list[str], steps: int = 120) -> str:
    """The suite's offline pretrained generator (``warm_minilm``: BART warm-started from MiniLM, 37M
    parameters) fine-tuned for ``steps`` batches of 16 to rewrite titles into themselves, in a Ray task with
    both CPUs (about 80 s). 120 steps teach it to write catalog titles, not yet to copy its input (its fresh
    cross-attention needs more): few samples pass the 0.7 filter, so their mean BLEU (about 0.08) is the
    engines' quality comparison here."""
    import ray

    from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
    from common.models.generation.kinds.seq2seq import fine_tune

    task = ray.remote(num_cpus=2, max_calls=1)(fine_tune)
    ray.get(
        task.remote(
            [(t, t) for t in corpus[: steps * 16]],
            path,
            ModelSpec(kind="warm_minilm", max_source_length=48, max_target_length=48),
            TrainSpec(epochs=1, batch_size=16, learning_rate=3e-4),
        )
    )
    return path


def train_smollm2_model(path: str, corpus: list[str], steps: int = 30) -> str:
    """SmolLM2-135M (the ``smollm2`` kind, LoRA r 16, CGA's prompt) fine-tuned ``steps`` batches of 8 to write a
    catalog title after the prompt, in a Ray task with both CPUs (about 2 minutes): the causal generator whose
    HF and CTranslate2 pools are compared."""
    import ray

    from common.catalog.config import CGA_PROMPT
    from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
    from common.models.generation.kinds.seq2seq import fine_tune

    task = ray.remote(num_cpus=2, max_calls=1)(fine_tune)
    ray.get(
        task.remote(
            [(t, t) for t in corpus[: steps * 8]],
            path,
            ModelSpec(kind="smollm2", prompt=CGA_PROMPT, max_source_length=48, max_target_length=48),
            TrainSpec(epochs=1, batch_size=8, learning_rate=5e-4),
        )
    )
    return path


def _pool_figures(name: str, ds, seconds: float, peak: int) -> dict:
    from common.models.generation.quality.filtering import FilterSpec, score_generated

    rows = ds.to_pandas()
    scored = score_generated(ds, FilterSpec(threshold=0.7)).to_pandas()
    counted = rows.generated_tokens.notna().all()
    # keep_rate: the share of samples the CGA filter (BLEU to the source >= 0.7) keeps; mean_score: their mean
    # BLEU, which still compares the engines' samples where few pass the threshold.
    figures = {
        "seq_per_s": len(rows) / seconds,
        "tok_per_s": float(rows.generated_tokens.sum()) / seconds if counted else None,
        "keep_rate": float(scored.reason.isna().mean()),
        "mean_score": float(scored.score.mean()),
        "peak_rss_gb": peak / 2**30,
        "seconds": seconds,
    }
    tokens = f"{figures['tok_per_s']:9.0f} tokens/s" if counted else "    (no count)"
    print(
        f"  {name:<22}: {seconds:7.1f} s  {figures['seq_per_s']:8.1f} sequences/s  {tokens}  keep-rate "
        f"{figures['keep_rate']:.3f}  mean BLEU {figures['mean_score']:.3f}  peak RSS {figures['peak_rss_gb']:.2f} "
        f"GiB"
    )
    return figures


def cpu_comparison(model: str, n_inputs: int, naive: bool = True) -> dict:
    """Naive per-row HF, the batched HF actor pool and the CTranslate2 (int8) actor pool on the same model,
    inputs and decoding settings, one CPU thread each. Returns {engine: figures}."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray
    import torch

    from common.models.generation.engines.ct2_conversion import prepare
    from common.models.generation.on_ray.pool import GenerationSpec, generate, naive_generate

    torch.set_num_threads(1)
    spec = GenerationSpec(n_samples=8, max_new_tokens=24, max_source_tokens=64, bucket_size=64)
    texts = titles(n_inputs)
    # The pools read their inputs from a Parquet file, as the jobs read a table version's files
    # (Lakehouse.read_ray): a from_items Dataset would add hundreds of tiny blocks and seconds of tasks.
    inputs = os.path.join(os.path.dirname(model), f"inputs-{n_inputs}.parquet")  # main() removes the folder
    pq.write_table(pa.table({"source_id": [str(i) for i in range(n_inputs)], "source_text": texts}), inputs)
    print(
        f"{model.rsplit('/', 1)[-1]}: {n_inputs} inputs x {spec.n_samples} samples, max {spec.max_new_tokens} new "
        f"tokens, 1 CPU thread each (pools: incl. actor start)"
    )
    out = {}
    if naive:
        with PeakRSS() as rss:
            start = time.perf_counter()
            samples = naive_generate(model, texts, spec)
            seconds = time.perf_counter() - start
        rows = [
            {
                "source_id": str(i),
                "source_text": t,
                "generated_text": g,
                "sample_idx": k,
                "model_version": "naive",
                "generated_tokens": None,
                "reason": None,
            }
            for i, (t, gs) in enumerate(zip(texts, samples))
            for k, g in enumerate(gs)
        ]
        # The loop keeps no token counts (tokens/s: None).
        out["naive"] = _pool_figures("naive per-row HF", ray.data.from_items(rows).materialize(), seconds, rss.peak)
    for name, engine in (("hf_pool", "hf"), ("ct2_pool", "ctranslate2")):
        engine_spec = GenerationSpec(**{**spec.__dict__, "engine": engine})
        if engine == "ctranslate2":
            # Once per model, as generate() does before its pool starts; later runs of the model skip it.
            start = time.perf_counter()
            prepare(model, engine_spec)
            out["ct2_conversion_s"] = time.perf_counter() - start
            print(f"  one-off conversion    : {out['ct2_conversion_s']:7.1f} s (Ray task; not in the pool's time)")
        with PeakRSS() as rss:
            start = time.perf_counter()
            ds = generate(
                ray.data.read_parquet(inputs), model, "bench", engine_spec, concurrency=1, batch_size=256
            ).materialize()
            seconds = time.perf_counter() - start
        out[name] = _pool_figures(f"{engine} actor pool", ds, seconds, rss.peak)
    if naive:
        print(
            f"  speed-up over naive    : hf pool {out['naive']['seconds'] / out['hf_pool']['seconds']:.1f}x, "
            f"ctranslate2 pool {out['naive']['seconds'] / out['ct2_pool']['seconds']:.1f}x"
        )
    return out


def memory_flatness(model: str, sizes: list[int]) -> None:
    import pyarrow as pa

    from common.models.generation.on_ray.pool import GenerationSpec, generate
    from common.models.generation.quality.filtering import FilterSpec, score_generated
    from common.platform.config import LakehouseConfig
    from common.platform.lakehouse.lakehouse import Lakehouse

    root = tempfile.mkdtemp(prefix="bench-gen-")
    lakehouse = Lakehouse(LakehouseConfig(root=root))
    spec = GenerationSpec(n_samples=2, max_new_tokens=16)
    print("peak memory of generation, Delta -> actor pool -> scorer -> Delta (driver + Ray workers):")
    try:
        for n in sizes:
            import deltalake

            texts = titles(n)
            deltalake.write_deltalake(
                lakehouse.location(f"inputs_{n}"),
                pa.table({"source_id": [str(i) for i in range(n)], "source_text": texts}),
            )
            ds = lakehouse.read_ray(f"inputs_{n}")
            out = score_generated(
                generate(ds, model, "bench", spec, concurrency=1, batch_size=256), FilterSpec(threshold=None)
            )
            with PeakRSS() as rss:
                start = time.perf_counter()
                written = lakehouse.write_ray(out, f"generated_{n}")
                seconds = time.perf_counter() - start
            print(
                f"  {n:>7,} inputs -> {written.num_rows:>8,} rows in {seconds:6.1f} s  peak RSS "
                f"{rss.peak / 2**30:.2f} GiB"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def gpu_throughput(folder: str, batch: int = 128) -> None:
    import torch
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    from common.models.generation.kinds.seq2seq import device_and_dtype

    if not torch.cuda.is_available():
        print("GPU: no CUDA device visible here; skipped (run this script on a GPU node)")
        return
    device, dtype = device_and_dtype()
    path = build(os.path.join(folder, "t5-small-shape"), "t5-small", titles(6000))
    tok = AutoTokenizer.from_pretrained(path)
    model = T5ForConditionalGeneration.from_pretrained(path, dtype=dtype).to(device).eval()
    enc = tok(titles(batch), padding=True, return_tensors="pt").to(device)
    for new_tokens in (32, 64):
        with torch.inference_mode():
            model.generate(**enc, max_new_tokens=8, do_sample=True, top_k=50, top_p=0.95)  # warm-up
            torch.cuda.synchronize()
            start = time.perf_counter()
            out = model.generate(
                **enc, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True, top_k=50, top_p=0.95
            )
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
        produced = int((out[:, 1:] != tok.pad_token_id).sum())
        print(
            f"GPU {torch.cuda.get_device_name()} {str(dtype).removeprefix('torch.')}: t5-small shape, batch "
            f"{batch}, "
            f"{new_tokens} new tokens: {produced / seconds:,.0f} tokens/s ({seconds:.2f} s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=512, help="inputs for the tiny model (0: skip)")
    parser.add_argument("--large-inputs", type=int, default=64, help="inputs for the t5-small-shaped model (0: skip)")
    parser.add_argument("--warm-inputs", type=int, default=128, help="inputs for the warm_minilm model (0: skip)")
    parser.add_argument("--smollm2-inputs", type=int, default=64, help="inputs for the smollm2 model (0: skip)")
    parser.add_argument("--skip-naive", action="store_true", help="only the two actor pools")
    parser.add_argument("--sizes", default="500,2000,8000")
    parser.add_argument("--gpu-only", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--json", help="write the engines' figures here")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-t5-")
    figures = {}
    try:
        if not args.gpu_only:
            from common.platform.compute.ray_runtime import RayRuntime
            from common.platform.config import RayConfig

            with RayRuntime(RayConfig(num_cpus=2)):
                if args.inputs:
                    tiny = train_copy_model(os.path.join(folder, "tiny"), titles(2000))
                    figures["tiny"] = cpu_comparison(tiny, args.inputs, naive=not args.skip_naive)
                if args.warm_inputs:
                    warm = train_warm_copy_model(os.path.join(folder, "warm_minilm"), titles(2000))
                    figures["warm_minilm"] = cpu_comparison(warm, args.warm_inputs, naive=not args.skip_naive)
                if args.smollm2_inputs:
                    smol = train_smollm2_model(os.path.join(folder, "smollm2"), titles(2000))
                    figures["smollm2"] = cpu_comparison(smol, args.smollm2_inputs, naive=not args.skip_naive)
                if args.large_inputs:
                    large = build(os.path.join(folder, "t5-small"), "t5-small", titles(6000))
                    figures["t5-small"] = cpu_comparison(large, args.large_inputs, naive=not args.skip_naive)
                if not args.skip_memory and args.inputs:
                    memory_flatness(tiny, [int(s) for s in args.sizes.split(",")])
        gpu_throughput(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        import json

        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=2)


if __name__ == "__main__":
    main()
