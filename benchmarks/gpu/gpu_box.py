"""The GPU box's half of :mod:`gpu_stage` (a machine with torch and transformers, no Spark or Ray): fine-tune and
generate a recorded ``generate`` stage, or run a recorded classifier stage; results into ``--out``. Run through
``gpu_stage.py generate|classify`` (its docstring has the whole round trip)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import time
from pathlib import Path

from gpu_bundle import SOURCES, Bundle, _filters, _sources


def _pool_map(function, calls: list[tuple], workers: int):
    """``function(*call)`` for each of ``calls``, in order, as they finish: in this process with one worker, else
    in ``workers`` spawned processes sharing the GPU (spawn: CUDA cannot be used in forked children)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if workers == 1 or not calls:
        yield from (function(*call) for call in calls)
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield from pool.map(function, *zip(*calls))


def _generate_part(
    bundle_root: str, models_dir: str, indices: list[int], threads: int, batch: int, bucket_size: int, out: str
) -> dict:
    """Fine-tune the recorded generators ``indices`` (in this process or a pool's), then generate the prompts
    routed to them into ``out`` (a Parquet file); returns their fine-tune figures by ``out_uri``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
    from common.models.generation.on_ray.fine_tune_ray import _fine_tune_task
    from common.models.generation.on_ray.pool import GenerationSpec, ModelRoutedGenerator

    tf32()
    bundle = Bundle(bundle_root)
    stage, request = bundle.stage("generate"), bundle.request("generate")
    train = TrainSpec(**request["train"])
    folders, figures = {}, {}
    for i in indices:
        model = request["models"][i]
        spec = ModelSpec(**{**model["spec"], "prefix_labels": tuple(model["spec"]["prefix_labels"])})
        folder = str(Path(models_dir) / f"model-{i}")
        result = _fine_tune_task(
            [str(stage / f) for f in request["files"]],
            request["source_col"],
            request["target_col"],
            folder,
            spec,
            train,
            threads,
            None,
            None,
            0,
            _filters(model["filters"]),
        )
        folders[model["out_uri"]] = folder
        figures[model["out_uri"]] = {**dataclasses.asdict(result), "path": model["out_uri"]}
        print(
            f"fine-tuned {model['out_uri']}: {result.examples} examples in {result.seconds:.1f} s on "
            f"{result.device} ({result.dtype}), loss {result.step_losses[0]:.2f} -> {result.step_losses[-1]:.2f}",
            flush=True,
        )
    spec_values = request["generation"]
    if spec_values["engine"] == "ctranslate2" and importlib.util.find_spec("ctranslate2") is None:
        print("no ctranslate2 on this machine: generating with transformers (engine hf)", flush=True)
        spec_values = {**spec_values, "engine": "hf"}
    if bucket_size:  # rows sample alike in any bucket (row_sampling): only the speed changes
        spec_values = {**spec_values, "bucket_size": bucket_size}
    generator = ModelRoutedGenerator(GenerationSpec(**spec_values), cache_models=len(folders))
    prompts = pq.read_table(stage / "prompts.parquet")
    prompts = prompts.filter(pc.is_in(prompts.column("model_path"), pa.array(list(folders))))
    paths = [folders[p] for p in prompts.column("model_path").to_pylist()]
    prompts = prompts.set_column(prompts.schema.get_field_index("model_path"), "model_path", pa.array(paths))
    start = time.perf_counter()
    parts = [
        generator({c: prompts.column(c).slice(s, batch).to_numpy(zero_copy_only=False) for c in prompts.column_names})
        for s in range(0, prompts.num_rows, batch)
    ]
    if parts:
        table, seconds = pa.concat_tables(parts), time.perf_counter() - start
        pq.write_table(table, out)
        tokens = sum(table.column("generated_tokens").to_pylist())
        print(
            f"generated {table.num_rows} rows for {prompts.num_rows} prompts of {len(folders)} models in "
            f"{seconds:.1f} s ({tokens / seconds:,.0f} tokens/s)",
            flush=True,
        )
    return figures


def generate(args) -> None:
    """Fine-tune the recorded generators and generate for the recorded prompts (``--workers`` processes
    sharing the GPU, each a share of the models); ``fine_tune.json`` and ``generated.parquet`` in ``--out``."""
    import os
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n_models = len(Bundle(args.bundle).request("generate")["models"])
    workers = max(1, min(args.workers, n_models))
    shares = [list(range(w, n_models, workers)) for w in range(workers)]
    threads = max(1, (os.cpu_count() or 1) // workers)
    parts_dir = tempfile.mkdtemp(prefix="generated-")
    calls = [
        (args.bundle, args.models, share, threads, args.batch, args.bucket_size, f"{parts_dir}/part-{w}.parquet")
        for w, share in enumerate(shares)
    ]
    start = time.perf_counter()
    results = list(_pool_map(_generate_part, calls, workers))
    seconds = time.perf_counter() - start
    figures = {uri: f for part in results for uri, f in part.items()}
    (out / "fine_tune.json").write_text(json.dumps(figures, indent=1, default=str))
    table = pa.concat_tables([pq.read_table(c[-1]) for c in calls if Path(c[-1]).exists()])
    pq.write_table(table, out / "generated.parquet")
    tokens = sum(table.column("generated_tokens").to_pylist())
    print(
        f"{n_models} generators fine-tuned and {table.num_rows} rows generated in {seconds:.1f} s, {workers} at a "
        f"time ({tokens:,} tokens; {table.num_rows - table.column('reason').null_count} with a reason)",
        flush=True,
    )


def _classify_one(bundle_root: str, stage_name: str, out: str, i: int, threads: int) -> str:
    """Run recorded job ``i`` of the stage (in this process or a pool's); writes its result file."""
    import torch

    from common.models.classifier_config import EncoderConfig

    tf32()
    bundle = Bundle(bundle_root)
    stage, request = bundle.stage(stage_name), bundle.request(stage_name)
    job = {k: _sources(stage, v) if k in SOURCES else v for k, v in request["jobs"][i].items()}
    # This box's devices, whatever the cluster setting recorded.
    device = {"num_cpus": threads, "num_gpus": float(torch.cuda.is_available())}
    start = time.perf_counter()
    import pyarrow.parquet as pq

    if request["function"] == "multilabel":
        from common.models.classifiers.multilabel import fit_and_predict

        if job["kind"] == "encoder":
            job["params"] = {**job["params"], **device}
        table = fit_and_predict(**job)
        pq.write_table(table, Path(out) / f"result-{i:04d}.parquet")
        said = f"{table.column('n_train')[0]} training rows, {table.num_rows} predicted"
    else:
        from common.models.classifiers.encoder_classifier import fit_and_evaluate

        spec, tag = EncoderConfig(**{**job["spec"], **device}), job.get("tag")
        found = fit_and_evaluate(job["train"], job["test"], spec, job["seed"], tag=tag)
        figures, predictions = found if tag else (found, None)
        (Path(out) / f"result-{i:04d}.json").write_text(json.dumps(figures))
        if predictions is not None:  # the test rows' predictions (a Parquet file the results listing leaves out)
            pq.write_table(predictions, Path(out) / f"result-{i:04d}.predictions")
        said = f"{figures['rows']} training rows, macro-F1 {figures['macro_f1']:.4f} on {figures['n_test']}"
    keys = job.get("keys") or {"seed": job["seed"], "train": [f for _, f in job["train"]]}
    return (
        f"{stage_name} job {i + 1}/{len(request['jobs'])} {json.dumps(keys)}: {said}, "
        f"{time.perf_counter() - start:.1f} s"
    )


def classify(args) -> None:
    """Run the stage's recorded classifier jobs ``--start``..``--stop`` (``--workers`` at a time: a small
    encoder leaves most of a big GPU idle); one result file per job in ``--out``."""
    import os

    Path(args.out).mkdir(parents=True, exist_ok=True)
    jobs = Bundle(args.bundle).request(args.stage)["jobs"]
    todo = range(args.start, min(args.stop, len(jobs)) if args.stop else len(jobs))
    threads = max(1, (os.cpu_count() or 1) // args.workers)
    start = time.perf_counter()
    for line in _pool_map(
        _classify_one, [(args.bundle, args.stage, args.out, i, threads) for i in todo], args.workers
    ):
        print(line, flush=True)
    print(
        f"{len(todo)} {args.stage} jobs in {time.perf_counter() - start:.1f} s, {args.workers} at a time", flush=True
    )


def tf32() -> None:
    """TF32 matrix products on GPUs that have them (Ampere or newer); nothing on a CPU."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
