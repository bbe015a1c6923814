"""The compositional pipeline's model stages on a machine that has torch and transformers but neither Spark nor
Ray (a lent GPU box), with the pipeline's own functions, replayed into the pipeline's own run.

The pipeline runs here (``pipeline``) with three hooks. Each stage's hook replays the bundle's GPU results when
they are there; when they are not, it records what the stage needs into the bundle folder and stops the run:

* generation: ``common.models.seq2seq.fine_tune_many_on_ray`` (the seq2seq generators' fine-tunes: the pairs'
  Parquet files, filters, model and training specs) and ``common.models.generation.generate_routed`` (the
  routed prompts and the generation spec);
* ``compositional-qc`` and ``compositional-evaluate``: ``jobs.compositional._run_classifiers`` (every
  classifier job: its training and prediction sources' Parquet files, filters, kind, parameters, seed, keys).

On the GPU box, ``generate`` fine-tunes each generator with the Ray task's own body
(:func:`common.models.seq2seq._fine_tune_task`) and generates with the Ray Data pool's own callable
(:class:`common.models.generation.ModelRoutedGenerator`); ``classify`` runs
:func:`common.models.multilabel.fit_and_predict` for the stage's jobs (``--start``/``--stop`` to split them
over calls of a time limit). Their outputs go back into the bundle (``results/`` of the stage), and the next
``pipeline`` run replays them (checked: the same prompts, the same jobs), so the tables (``cg_candidates``,
``cg_synthetic`` / ``cg_rejects``, ``compositional_results``), their lineage, the report and the MLflow runs
are the pipeline's. What differs from a run on a GPU cluster: the routed prompts' ``model_path`` names the
models' folders here, where they never land (the models stay on the GPU box; their fine-tune figures are
logged), and the stage runs through this tool, not Ray.

Run (the issue-13 measurement: the encoder as QC filter and evaluation classifier):
  .venv/bin/python benchmarks/compositional_gpu_stage.py pipeline --bundle B -- \\
      --conf conf/compositional_semeval.yaml --set compositional.qc.model=encoder 'compositional.eval.models=[encoder]'
  python3 benchmarks/compositional_gpu_stage.py generate --bundle B --out O        (GPU box; O -> B/generate/results)
  (pipeline again: replays the generation, records QC)
  python3 benchmarks/compositional_gpu_stage.py classify --bundle B --stage qc --out O          (GPU box)
  (pipeline again: replays QC, records the evaluation)
  python3 benchmarks/compositional_gpu_stage.py classify --bundle B --stage evaluate --out O --start 0 --stop 30
  (pipeline again: replays the evaluation, writes compositional_results and the report)
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STAGES = ("generate", "qc", "evaluate")


class StageRecorded(Exception):
    """Raised by a hook after recording its stage: the pipeline stops there until the GPU results exist."""


def _local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


class Bundle:
    """The bundle folder: per stage a ``request.json``, the input files it names (``files/``, relative paths)
    and the GPU's outputs (``results/``)."""

    def __init__(self, root: str):
        self.root = Path(root)

    def stage(self, name: str) -> Path:
        return self.root / name

    def results(self, name: str) -> list[Path]:
        folder = self.stage(name) / "results"
        return sorted(folder.glob("*.parquet")) if folder.is_dir() else []

    def copy_files(self, name: str, uris, copied: dict) -> list[str]:
        """Copy each of ``uris`` into the stage's ``files/`` once; returns their paths relative to the stage."""
        out = []
        for uri in uris:
            if uri not in copied:
                target = self.stage(name) / "files" / f"{len(copied):05d}.parquet"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(_local(uri), target)
                copied[uri] = str(target.relative_to(self.stage(name)))
            out.append(copied[uri])
        return out

    def write_request(self, name: str, request: dict) -> None:
        path = self.stage(name) / "request.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(request, indent=1, default=str))

    def request(self, name: str) -> dict:
        return json.loads((self.stage(name) / "request.json").read_text())


def _filters(value):
    """pyarrow filters back from JSON (tuples became lists)."""
    return [tuple(f) for f in value] if value else None


def _sources(stage: Path, sources) -> list:
    return [([str(stage / f) for f in files], _filters(filters)) for files, filters in sources]


def _table_rows(ds):
    """A Ray Dataset's rows as one Arrow table (a replay tool run once, not a pipeline stage)."""
    import pyarrow as pa
    import ray

    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


# ---------------------------------------------------------------- here: the pipeline with its hooks

def pipeline(args, augment_args) -> int:
    """``augment run compositional`` with the generation and classifier stages recorded or replayed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import common.models.generation as generation
    import common.models.seq2seq as seq2seq
    import jobs.compositional as compositional
    from jobs.cli import main as augment

    bundle = Bundle(args.bundle)
    original_run_classifiers = compositional._run_classifiers

    def fine_tune_many_on_ray(runtime, files, models, model, train, source_col="source_text",
                              target_col="target_text", **_):
        specs = [model] * len(models) if isinstance(model, seq2seq.ModelSpec) else list(model)
        if bundle.results("generate"):
            done = json.loads((bundle.stage("generate") / "results" / "fine_tune.json").read_text())
            return [seq2seq.FineTuneResult(**{k: v for k, v in done[out_uri].items()
                                               if k in seq2seq.FineTuneResult.__dataclass_fields__})
                    for _, out_uri in models]
        copied: dict = {}
        bundle.write_request("generate", {
            "files": bundle.copy_files("generate", files, copied), "source_col": source_col,
            "target_col": target_col, "train": dataclasses.asdict(train),
            "models": [{"filters": filters, "out_uri": out_uri, "spec": dataclasses.asdict(spec)}
                       for (filters, out_uri), spec in zip(models, specs)]})
        # Not trained here: the run stops at generation, before anything reads these figures.
        return [seq2seq.FineTuneResult(path=out_uri, step_losses=[float("nan")], seconds=0.0)
                for _, out_uri in models]

    def generate_routed(ds, spec, **_):
        import ray

        routed = _table_rows(ds)
        if bundle.results("generate"):
            generated = pa.concat_tables([pq.read_table(p) for p in bundle.results("generate")
                                          if p.name.startswith("generated")])
            asked = pq.read_table(bundle.stage("generate") / "prompts.parquet")
            if sorted(routed.column("source_id").to_pylist()) != sorted(asked.column("source_id").to_pylist()):
                raise SystemExit("the bundle generated for other prompts than the pipeline's: record again")
            return ray.data.from_arrow(generated)
        request = bundle.request("generate")
        request["generation"] = dataclasses.asdict(spec)
        bundle.write_request("generate", request)
        pq.write_table(routed, bundle.stage("generate") / "prompts.parquet")
        raise StageRecorded(f"generation recorded ({routed.num_rows} prompts, {len(request['models'])} models): "
                            f"run `generate --bundle {bundle.root}` on the GPU box")

    def run_classifiers(ctx, jobs, encoder):
        import ray

        stage = "evaluate" if any("split_kind" in job["keys"] for job in jobs) else "qc"
        if jobs and all(job["kind"] == "fasttext" for job in jobs) and not args.fasttext_too:
            return original_run_classifiers(ctx, jobs, encoder)
        keys = [json.dumps(job["keys"], sort_keys=True) for job in jobs]
        if bundle.results(stage):
            if json.loads((bundle.stage(stage) / "keys.json").read_text()) != keys:
                raise SystemExit(f"the bundle's {stage} jobs are not the pipeline's: record again")
            table = pa.concat_tables([pq.read_table(p) for p in bundle.results(stage)])
            found = {json.dumps(row, sort_keys=True) for row in table.select(list(jobs[0]["keys"])).to_pylist()}
            missing = set(keys) - found
            if missing:
                raise SystemExit(f"{len(missing)} of the {stage} jobs have no results in the bundle, e.g. "
                                 f"{sorted(missing)[0]}: run `classify` for them")
            return ray.data.from_arrow(table)
        copied: dict = {}
        recorded = [{**{k: v for k, v in job.items() if k not in ("train", "predict")},
                     "train": [(bundle.copy_files(stage, files, copied), filters) for files, filters in job["train"]],
                     "predict": [(bundle.copy_files(stage, files, copied), filters)
                                 for files, filters in job["predict"]]} for job in jobs]
        bundle.write_request(stage, {"jobs": recorded})
        (bundle.stage(stage) / "keys.json").write_text(json.dumps(keys))
        raise StageRecorded(f"{stage} recorded ({len(jobs)} classifiers): run `classify --bundle {bundle.root} "
                            f"--stage {stage}` on the GPU box")

    seq2seq.fine_tune_many_on_ray = fine_tune_many_on_ray
    generation.generate_routed = generate_routed
    compositional._run_classifiers = run_classifiers
    try:
        return augment(["run", "compositional", *augment_args])
    except StageRecorded as stop:
        print(f"stopped: {stop}", flush=True)
        return 0


# ---------------------------------------------------------------- the GPU box

def generate(args) -> None:
    """Fine-tune the recorded generators, generate for the recorded prompts; results in ``--out``."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from common.models.generation import GenerationSpec, ModelRoutedGenerator
    from common.models.seq2seq import ModelSpec, TrainSpec, _fine_tune_task

    stage, out = Bundle(args.bundle).stage("generate"), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    request = Bundle(args.bundle).request("generate")
    train = TrainSpec(**request["train"])
    folders, figures = {}, {}
    for i, model in enumerate(request["models"]):
        spec = ModelSpec(**{**model["spec"], "prefix_labels": tuple(model["spec"]["prefix_labels"])})
        folder = str(Path(args.models) / f"model-{i}")
        result = _fine_tune_task([str(stage / f) for f in request["files"]], request["source_col"],
                                 request["target_col"], folder, spec, train, torch.get_num_threads(), None, None, 0,
                                 _filters(model["filters"]))
        folders[model["out_uri"]] = folder
        figures[model["out_uri"]] = {**dataclasses.asdict(result), "path": model["out_uri"]}
        print(f"fine-tuned {model['out_uri']}: {result.examples} examples in {result.seconds:.1f} s on "
              f"{result.device} ({result.dtype}), loss {result.step_losses[0]:.2f} -> {result.step_losses[-1]:.2f}",
              flush=True)
    (out / "fine_tune.json").write_text(json.dumps(figures, indent=1, default=str))
    spec_values = request["generation"]
    if spec_values["engine"] == "ctranslate2" and importlib.util.find_spec("ctranslate2") is None:
        print("no ctranslate2 on this machine: generating with transformers (engine hf)", flush=True)
        spec_values = {**spec_values, "engine": "hf"}
    generator = ModelRoutedGenerator(GenerationSpec(**spec_values), cache_models=len(folders))
    prompts = pq.read_table(stage / "prompts.parquet")
    paths = [folders[p] for p in prompts.column("model_path").to_pylist()]
    prompts = prompts.set_column(prompts.schema.get_field_index("model_path"), "model_path", pa.array(paths))
    start, parts = time.perf_counter(), []
    for s in range(0, prompts.num_rows, args.batch):
        batch = {c: prompts.column(c).slice(s, args.batch).to_numpy(zero_copy_only=False)
                 for c in prompts.column_names}
        parts.append(generator(batch))
    seconds = time.perf_counter() - start
    table = pa.concat_tables(parts)
    pq.write_table(table, out / "generated.parquet")
    tokens = sum(table.column("generated_tokens").to_pylist())
    print(f"generated {table.num_rows} rows for {prompts.num_rows} prompts in {seconds:.1f} s ({tokens / seconds:,.0f} "
          f"tokens/s; {table.num_rows - table.column('reason').null_count} with a reason)", flush=True)


def _classify_one(bundle_root: str, stage_name: str, out: str, i: int, threads: int) -> str:
    """Run recorded job ``i`` of the stage (in this process or a pool's); writes its predictions file."""
    import pyarrow.parquet as pq
    import torch

    from common.models.multilabel import fit_and_predict

    _tf32()
    bundle = Bundle(bundle_root)
    stage, jobs = bundle.stage(stage_name), bundle.request(stage_name)["jobs"]
    job, params = jobs[i], dict(jobs[i]["params"])
    if job["kind"] == "encoder":
        # This box's devices, whatever the cluster setting recorded.
        params.update(num_cpus=threads, num_gpus=float(torch.cuda.is_available()))
    start = time.perf_counter()
    table = fit_and_predict(_sources(stage, job["train"]), _sources(stage, job["predict"]), params, job["seed"],
                            job["validation_fraction"], job["keys"], kind=job["kind"])
    pq.write_table(table, Path(out) / f"predictions-{i:04d}.parquet")
    return (f"{stage_name} job {i + 1}/{len(jobs)} {json.dumps(job['keys'])}: {table.column('n_train')[0]} training "
            f"rows, {table.num_rows} predicted, {time.perf_counter() - start:.1f} s")


def classify(args) -> None:
    """Run the stage's recorded classifier jobs ``--start``..``--stop`` (``--workers`` at a time: a small
    encoder leaves most of a big GPU idle); one Parquet file of predictions per job in ``--out``."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    Path(args.out).mkdir(parents=True, exist_ok=True)
    jobs = Bundle(args.bundle).request(args.stage)["jobs"]
    todo = range(args.start, min(args.stop, len(jobs)) if args.stop else len(jobs))
    threads = max(1, (os.cpu_count() or 1) // args.workers)
    start = time.perf_counter()
    if args.workers == 1:
        for i in todo:
            print(_classify_one(args.bundle, args.stage, args.out, i, threads), flush=True)
    else:
        # spawn: CUDA cannot be used in forked children.
        with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for line in pool.map(_classify_one, *zip(*[(args.bundle, args.stage, args.out, i, threads)
                                                        for i in todo])):
                print(line, flush=True)
    print(f"{len(todo)} {args.stage} jobs in {time.perf_counter() - start:.1f} s, {args.workers} at a time",
          flush=True)


def _tf32() -> None:
    import torch

    # TF32 matrix products on GPUs that have them (Ampere or newer; the BoostAug replay's setting); none on a CPU.
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    augment_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pipeline", help="here: augment run compositional, stages recorded or replayed")
    p.add_argument("--bundle", required=True)
    p.add_argument("--fasttext-too", action="store_true",
                   help="record/replay fastText classifier stages too (default: they run here)")
    p = sub.add_parser("generate", help="GPU box: fine-tune the generators and generate")
    p.add_argument("--bundle", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="/tmp/compositional-models", help="where the fine-tuned models go")
    p.add_argument("--batch", type=int, default=512, help="prompts per generation call")
    p = sub.add_parser("classify", help="GPU box: the stage's classifier jobs")
    p.add_argument("--bundle", required=True)
    p.add_argument("--stage", required=True, choices=STAGES[1:])
    p.add_argument("--out", required=True)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--stop", type=int, default=0, help="0: to the last job")
    p.add_argument("--workers", type=int, default=1, help="jobs at a time (processes sharing the GPU)")
    args = parser.parse_args(argv)
    if args.command == "pipeline":
        return pipeline(args, augment_args)
    _tf32()
    generate(args) if args.command == "generate" else classify(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
