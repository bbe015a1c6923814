"""The same prompts and model through an OpenAI-compatible endpoint and through the in-process CTranslate2 engine.

    python benchmarks/generation/endpoint_generation.py [--sources 32] [--tokens 24] [--in-flight 1 4 16]

The model is the packaged SmolLM2-135M-Instruct, prompted as CGA's in-context generator is (3 demo title pairs ahead
of each title, sampled, at most ``--tokens`` new tokens). In process: the pool's CTranslate2 engine
(:class:`common.models.generation.engines.ct2.CT2Generator`, int8, both cores) on all the titles at once. Through the
endpoint: Hugging Face's ``transformers serve`` of the same weights on loopback (float32 on CPU, as the tests run it),
called by :class:`common.models.generation.served.client.EndpointClient` with 1, 4 and 16 requests in flight. For each:
samples a second, completion tokens a second, and for the endpoint the latency percentiles and the time of a
one-token request (the HTTP round trip and the prompt's prefill, without decoding). Prints one table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "cluster")]

from local_cluster import free_port, start_model_server  # noqa: E402

TITLES = [
    "wooden train set with 40 pieces",
    "stainless steel water bottle 750 ml",
    "kids rain boots yellow size 9",
    "usb c charging cable 2 m braided",
    "ceramic coffee mug blue 350 ml",
    "cotton bath towel set of 4 grey",
    "led desk lamp with dimmer black",
    "yoga mat 6 mm non slip purple",
]
PAIRS = [
    ("red toy car with remote control", "remote control toy car, red"),
    ("non stick frying pan 28 cm", "28 cm frying pan, non-stick"),
    ("wireless mouse silent click", "silent wireless computer mouse"),
]


def in_context_folder(out: str) -> str:
    """CGA's in-context SmolLM2 generator (its prompt with the 3 pairs) saved to ``out``."""
    from common.catalog.config import CGA_PROMPT
    from common.models.generation.fine_tune_specs import ModelSpec
    from common.models.generation.kinds.in_context import in_context_generator

    in_context_generator(
        PAIRS,
        out,
        ModelSpec(kind="smollm2", prompt=CGA_PROMPT, in_context=3, max_source_length=32, max_target_length=32),
        seed=1,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()
    import json

    from common.models.config import EndpointConfig
    from common.models.generation.engines.ct2 import CT2Generator
    from common.models.generation.engines.ct2_conversion import prepare
    from common.models.generation.engines.hf_engine import GenerationSpec
    from common.models.generation.formats import prompt_text
    from common.models.generation.kinds.smollm2 import materialise_smollm2
    from common.models.generation.served.client import EndpointClient, Request, sampling_params

    texts = [
        TITLES[i % len(TITLES)] + (f" pack of {i // len(TITLES) + 1}" if i >= len(TITLES) else "")
        for i in range(args.sources)
    ]
    work = tempfile.mkdtemp(prefix="endpoint-bench-")
    folder = in_context_folder(os.path.join(work, "generator"))
    template = json.load(open(os.path.join(folder, "generator.json")))["prompt"]
    spec = GenerationSpec(n_samples=1, max_new_tokens=args.tokens, engine="ctranslate2", seed=3)
    rows = []

    prepare(folder, spec, 0)
    engine = CT2Generator(folder, "bench", spec)
    batch = {"source_id": [str(i) for i in range(len(texts))], "source_text": texts}
    engine(batch)  # warm: the first batch pays the model's load
    start = time.perf_counter()
    out = engine(batch).to_pylist()
    seconds = time.perf_counter() - start
    tokens = sum(r["generated_tokens"] for r in out)
    rows.append(("ctranslate2 in process (int8, 2 threads)", "-", len(out) / seconds, tokens / seconds, "-", "-"))

    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    server = start_model_server(
        sys.executable, str(materialise_smollm2()), port, Path(work) / "serve.log", Path(work) / "hub"
    )
    try:
        cfg = EndpointConfig(base_url=base, model=str(materialise_smollm2()), max_concurrency=max(args.in_flight))
        prompts = [prompt_text(template, t) for t in texts]
        one = EndpointClient(cfg, {"max_tokens": 1, "temperature": 0.0}, concurrency=1)
        one.run([Request(prompts[0], 0, 0)])  # warm
        first = [o.latency_s for o in one.run([Request(p, 0, 0) for p in prompts[:8]])]
        for in_flight in args.in_flight:
            client = EndpointClient(cfg, sampling_params(spec), concurrency=in_flight)
            start = time.perf_counter()
            outcomes = client.run([Request(p, in_flight, 3) for p in prompts])
            seconds = time.perf_counter() - start
            ok = [o for o in outcomes if o.ok]
            latencies = sorted(o.latency_s for o in ok)
            rows.append(
                (
                    f"endpoint, {in_flight} in flight (transformers serve, float32)",
                    in_flight,
                    len(ok) / seconds,
                    sum(o.completion_tokens for o in ok) / seconds,
                    f"{statistics.median(latencies):.2f} / {latencies[int(0.9 * (len(latencies) - 1))]:.2f}",
                    f"{statistics.median(first):.2f}",
                )
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(
        f"{args.sources} CGA title prompts ({len(template.split())} words of examples and template), 1 sample "
        f"each, at most {args.tokens} new tokens, SmolLM2-135M-Instruct, {os.cpu_count()} cores"
    )
    print(f"{'engine':<56} {'samples/s':>9} {'tokens/s':>9} {'latency p50/p90 s':>18} {'1-token s':>9}")
    for name, _, sps, tps, lat, first_s in rows:
        print(f"{name:<56} {sps:>9.2f} {tps:>9.1f} {lat:>18} {first_s:>9}")


if __name__ == "__main__":
    main()
