"""Benchmark: T5 generation throughput, batched actor pool vs a naive per-row loop, and peak memory.

1. The same model, inputs and decoding settings through (a) a naive loop of one ``model.generate`` per
   input in this process and (b) the Ray Data actor pool of ``common.generation.generate`` (length
   buckets, one actor, one CPU thread each: the same compute). Prints sequences/s and tokens/s.
2. Peak memory of the generation stage (driver + Ray workers, sampled every 0.2 s) while the actor pool
   streams growing inputs from a Delta table to a new Delta version (the jobs' path): it must stay flat.
3. With a CUDA device: a t5-small-shaped model (random weights; d_model 512, 6+6 layers, 32k vocab) at
   batch 128 in bf16/fp16, HF ``generate`` with sampling, tokens/s.

Models are built from scratch (no downloads): a tokenizer trained on demo titles and a T5Config model;
random weights rarely emit </s>, so every sequence runs to ``max_new_tokens``: tokens/s is comparable.
Run: .venv/bin/python benchmarks/generation_throughput.py [--inputs 256] [--sizes 500,2000,8000] [--gpu-only]
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
    from common.data.demo_data import labeled_rows

    base = labeled_rows(DemoConfig(), 0, min(n, 6000)).title.tolist()
    return [base[i % len(base)] for i in range(n)]


def build(path: str, shape: str, corpus: list[str]) -> str:
    """Save a scratch T5 (``tiny``: the demo's CGA shape; ``t5-small``: t5-small's dimensions) to ``path``."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    from common.models.seq2seq import train_tokenizer

    torch.manual_seed(0)
    dims = {"tiny": dict(d_model=64, d_ff=128, num_layers=2, num_heads=4, vocab=2000),
            "t5-small": dict(d_model=512, d_ff=2048, num_layers=6, num_heads=8, vocab=8000)}[shape]
    tok = train_tokenizer(corpus, dims["vocab"])
    vocab = 32128 if shape == "t5-small" else len(tok)  # t5-small's embedding and output layer size
    config = T5Config(vocab_size=vocab, d_model=dims["d_model"], d_kv=dims["d_model"] // dims["num_heads"],
                      d_ff=dims["d_ff"], num_layers=dims["num_layers"], num_decoder_layers=dims["num_layers"],
                      num_heads=dims["num_heads"], pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
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


def cpu_comparison(model: str, n_inputs: int) -> None:
    import ray
    import torch

    from common.models.generation import GenerationSpec, generate, naive_generate

    torch.set_num_threads(1)
    spec = GenerationSpec(n_samples=8, max_new_tokens=24, max_source_tokens=64, bucket_size=64)
    texts = titles(n_inputs)
    start = time.perf_counter()
    naive = naive_generate(model, texts, spec)
    naive_s = time.perf_counter() - start
    naive_seqs = sum(len(x) for x in naive)
    ds = ray.data.from_items([{"source_id": str(i), "source_text": t} for i, t in enumerate(texts)])
    start = time.perf_counter()
    out = generate(ds, model, "bench", spec, concurrency=1, batch_size=256).materialize()
    pool_s = time.perf_counter() - start
    rows = out.to_pandas()
    tokens = int(rows.generated_tokens.sum())
    # The naive loop produces the same number of sequences of the same capped length.
    print(f"{n_inputs} inputs x {spec.n_samples} samples, max {spec.max_new_tokens} new tokens, 1 CPU thread each")
    print(f"  naive per-row generate : {naive_s:7.1f} s  {naive_seqs / naive_s:8.1f} sequences/s")
    print(f"  batched actor pool     : {pool_s:7.1f} s  {len(rows) / pool_s:8.1f} sequences/s  "
          f"{tokens / pool_s:9.0f} tokens/s  (incl. actor start)")
    print(f"  speed-up               : {naive_s / pool_s:.1f}x")


def memory_flatness(model: str, sizes: list[int]) -> None:
    import pyarrow as pa

    from common.platform.config import LakehouseConfig
    from common.models.filtering import FilterSpec, score_generated
    from common.models.generation import GenerationSpec, generate
    from common.platform.lakehouse import Lakehouse

    root = tempfile.mkdtemp(prefix="bench-gen-")
    lakehouse = Lakehouse(LakehouseConfig(root=root))
    spec = GenerationSpec(n_samples=2, max_new_tokens=16)
    print("peak memory of generation, Delta -> actor pool -> scorer -> Delta (driver + Ray workers):")
    try:
        for n in sizes:
            import deltalake

            texts = titles(n)
            deltalake.write_deltalake(lakehouse.location(f"inputs_{n}"),
                                      pa.table({"source_id": [str(i) for i in range(n)], "source_text": texts}))
            ds = lakehouse.read_ray(f"inputs_{n}")
            out = score_generated(generate(ds, model, "bench", spec, concurrency=1, batch_size=256),
                                  FilterSpec(threshold=None))
            with PeakRSS() as rss:
                start = time.perf_counter()
                written = lakehouse.write_ray(out, f"generated_{n}")
                seconds = time.perf_counter() - start
            print(f"  {n:>7,} inputs -> {written.num_rows:>8,} rows in {seconds:6.1f} s  peak RSS {rss.peak / 2**30:.2f} GiB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def gpu_throughput(folder: str, batch: int = 128) -> None:
    import torch
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    from common.models.seq2seq import device_and_dtype

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
            out = model.generate(**enc, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True,
                                 top_k=50, top_p=0.95)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
        produced = int((out[:, 1:] != tok.pad_token_id).sum())
        print(f"GPU {torch.cuda.get_device_name()} {str(dtype).removeprefix('torch.')}: t5-small shape, batch {batch}, "
              f"{new_tokens} new tokens: {produced / seconds:,.0f} tokens/s ({seconds:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=256)
    parser.add_argument("--sizes", default="500,2000,8000")
    parser.add_argument("--gpu-only", action="store_true")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-t5-")
    try:
        if not args.gpu_only:
            from common.platform.config import RayConfig
            from common.platform.ray_runtime import RayRuntime

            model = build(os.path.join(folder, "tiny"), "tiny", titles(6000))
            with RayRuntime(RayConfig(num_cpus=2)):
                cpu_comparison(model, args.inputs)
                memory_flatness(model, [int(s) for s in args.sizes.split(",")])
        gpu_throughput(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
