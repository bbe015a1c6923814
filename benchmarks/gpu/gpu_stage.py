"""A pipeline's model stages on a machine that has torch and transformers but neither Spark nor Ray (a lent GPU
box), with the pipeline's own functions, replayed into the pipeline's own run.

The pipeline runs here (``pipeline``) with hooks. Each stage's hook replays the bundle's GPU results when they
are there; when they are not, it records what the stage needs into the bundle folder and stops the run:

* ``generate``: ``common.models.generation.on_ray.fine_tune_ray.fine_tune_many_on_ray`` (the generators' fine-tunes:
the
  pairs' Parquet files, filters, model and training specs) and ``common.models.generation.on_ray.pool.generate_routed``
  (the routed prompts and the generation spec): the compositional and genre-transfer generators; and their one-model
  forms ``fine_tune_on_ray`` and ``generate`` (every prompt routed to the one model): CGA's and query reformulation's
  generator;
* ``qc`` / ``evaluate``: ``fit_and_predict_many`` of ``jobs.compositional.compositional`` and
``jobs.compositional.compositional_evaluate``
  (every multi-label classifier job: its training and prediction sources' Parquet files, filters, kind, parameters,
  seed, keys);
* ``encoder-eval``: ``common.models.classifiers.text_classifier.run_tasks`` when it runs the encoder classifier's
  ``fit_and_evaluate`` (genre transfer's and BoostAug's ``eval.models: [encoder]``); other tasks run here.

On the GPU box (``benchmarks/gpu/gpu_box.py``), ``generate`` fine-tunes each generator with the Ray task's own body
(:func:`common.models.generation.on_ray.fine_tune_ray._fine_tune_task`) and generates with the Ray Data pool's own
callable (:class:`common.models.generation.on_ray.pool.ModelRoutedGenerator`; ``--workers`` processes share the GPU,
each fine-tuning and generating a share of the models); ``classify`` runs the stage's recorded jobs
(:func:`common.models.classifiers.multilabel.fit_and_predict` or
:func:`common.models.classifiers.encoder_classifier.fit_and_evaluate`; ``--start``/``--stop`` split them over calls of
a time limit, ``--workers`` runs several at once). Their outputs go back into the bundle (``<stage>/results/``), and
the next ``pipeline`` run replays them (checked: the same prompts, the same jobs), so the tables, their lineage, the
reports and the MLflow runs are the pipeline's. What differs from a run on a GPU cluster: the routed prompts'
``model_path`` names the models' folders here, where they never land (the models stay on the GPU box; their fine-tune
figures are logged), and the stage runs through this tool, not Ray.

Run (issue 13: the encoder as compositional QC filter and evaluation classifier):
  .venv/bin/python benchmarks/gpu/gpu_stage.py pipeline --bundle B -- run compositional \\
      --conf conf/compositional_semeval.yaml --set compositional.qc.model=encoder 'compositional.eval.models=[encoder]'
  python3 benchmarks/gpu/gpu_stage.py generate --bundle B --out O              (GPU box; O's files ->
  B/generate/results) (pipeline again: replays the generation, records QC) python3 benchmarks/gpu/gpu_stage.py classify
  --bundle B --stage qc --out O (GPU box) (pipeline again: replays QC, records the evaluation) python3
  benchmarks/gpu/gpu_stage.py classify --bundle B --stage evaluate --out O --workers 4 (pipeline again: replays the
  evaluation, writes compositional_results and the report)
Issue 14 (genre's encoder rows): ``pipeline --bundle B --local-generation -- run genre-transfer --conf
conf/genre_brown.yaml --set 'genre.eval.models=[fasttext,encoder]'`` trains the config's generators here and
records ``encoder-eval``; without ``--local-generation`` it records ``generate`` first (the generators on the
GPU box).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpu_bundle import SOURCES, Bundle  # noqa: E402  (after the path insert)


class StageRecorded(Exception):
    """Raised by a hook after recording its stage: the pipeline stops there until the GPU results exist."""


def _table_rows(ds):
    """A Ray Dataset's rows as one Arrow table (a replay tool run once, not a pipeline stage)."""
    import pyarrow as pa
    import ray

    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def _routed_to(table, path: str, version: str):
    """An Arrow batch of (source_id, source_text) with every row routed to one model (``model_path``,
    ``model_version``)."""
    import pyarrow as pa

    return table.append_column("model_path", pa.array([path] * table.num_rows, pa.string())).append_column(
        "model_version", pa.array([version] * table.num_rows, pa.string())
    )


# ---------------------------------------------------------------- here: the pipeline with its hooks


def pipeline(args, augment_args) -> int:
    """``augment <augment_args>`` with the generation and classifier stages recorded or replayed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import common.models.classifiers.text_classifier as text_classifier
    import common.models.generation.on_ray.fine_tune_ray as fine_tune_ray
    import common.models.generation.on_ray.pool as generation
    import jobs.compositional.compositional as compositional
    import jobs.compositional.compositional_evaluate as compositional_evaluate
    from common.models.classifiers import encoder_classifier
    from common.models.generation.fine_tune_specs import FineTuneResult, ModelSpec
    from jobs.cli import main as augment

    bundle = Bundle(args.bundle)
    original_run_classifiers, original_run_tasks = compositional.fit_and_predict_many, text_classifier.run_tasks

    def fine_tune_many_on_ray(
        runtime, files, models, model, train, source_col="source_text", target_col="target_text", **_
    ):
        specs = [model] * len(models) if isinstance(model, ModelSpec) else list(model)
        if bundle.results("generate"):
            done = json.loads((bundle.stage("generate") / "results" / "fine_tune.json").read_text())
            return [
                FineTuneResult(**{k: v for k, v in done[out_uri].items() if k in FineTuneResult.__dataclass_fields__})
                for _, out_uri in models
            ]
        copied: dict = {}
        bundle.write_request(
            "generate",
            {
                "files": bundle.copy_files("generate", files, copied),
                "source_col": source_col,
                "target_col": target_col,
                "train": dataclasses.asdict(train),
                "models": [
                    {"filters": filters, "out_uri": out_uri, "spec": dataclasses.asdict(spec)}
                    for (filters, out_uri), spec in zip(models, specs)
                ],
            },
        )
        # Not trained here: the run stops at generation, before anything reads these figures.
        return [FineTuneResult(path=out_uri, step_losses=[float("nan")], seconds=0.0) for _, out_uri in models]

    def fine_tune_on_ray(
        runtime, files, out_uri, model, train, source_col="source_text", target_col="target_text", **_
    ):
        # One generator (CGA, query reformulation): the many-model request with a single model, no filters.
        return fine_tune_many_on_ray(runtime, files, [(None, out_uri)], model, train, source_col, target_col)[0]

    def generate_one(ds, model_path, model_version, spec, **_):
        # Every row routed to the one model, so the GPU box runs the routed pool's own callable.
        return generate_routed(
            ds.map_batches(
                _routed_to, batch_format="pyarrow", fn_kwargs={"path": model_path, "version": model_version}
            ),
            spec,
        )

    def generate_routed(ds, spec, **_):
        import ray

        routed = _table_rows(ds)
        if bundle.results("generate"):
            generated = pq.read_table(bundle.stage("generate") / "results" / "generated.parquet")
            asked = pq.read_table(bundle.stage("generate") / "prompts.parquet")
            if sorted(routed.column("source_id").to_pylist()) != sorted(asked.column("source_id").to_pylist()):
                raise SystemExit("the bundle generated for other prompts than the pipeline's: record again")
            return ray.data.from_arrow(generated)
        request = bundle.request("generate")
        request["generation"] = dataclasses.asdict(spec)
        bundle.write_request("generate", request)
        pq.write_table(routed, bundle.stage("generate") / "prompts.parquet")
        raise StageRecorded(
            f"generation recorded ({routed.num_rows} prompts, {len(request['models'])} models): "
            f"run `generate --bundle {bundle.root}` on the GPU box"
        )

    def replay_or_record(stage: str, function: str, jobs: list[dict]) -> list:
        """The stage's results, one per job in job order (Arrow tables or figure dicts), from the bundle; or
        the jobs recorded (their sources' files copied) and the run stopped."""
        keys = [
            json.dumps(
                {
                    k: (
                        dataclasses.asdict(v)
                        if dataclasses.is_dataclass(v)
                        else [f for _, f in v]
                        if k in SOURCES
                        else v
                    )
                    for k, v in job.items()
                },
                sort_keys=True,
                default=str,
            )
            for job in jobs
        ]
        if bundle.results(stage):
            if json.loads((bundle.stage(stage) / "keys.json").read_text()) != keys:
                raise SystemExit(f"the bundle's {stage} jobs are not the pipeline's: record again")
            found = {int(p.stem.split("-")[1]): p for p in bundle.results(stage)}
            missing = [i for i in range(len(jobs)) if i not in found]
            if missing:
                raise SystemExit(
                    f"{len(missing)} of the {len(jobs)} {stage} jobs have no results in the bundle "
                    f"(first: {missing[0]}): run `classify --stage {stage}` for them"
                )
            return [
                pq.read_table(found[i]) if found[i].suffix == ".parquet" else json.loads(found[i].read_text())
                for i in range(len(jobs))
            ]
        copied: dict = {}
        recorded = [
            {
                k: (
                    [(bundle.copy_files(stage, files, copied), filters) for files, filters in v]
                    if k in SOURCES
                    else dataclasses.asdict(v)
                    if dataclasses.is_dataclass(v)
                    else v
                )
                for k, v in job.items()
            }
            for job in jobs
        ]
        bundle.write_request(stage, {"function": function, "jobs": recorded})
        (bundle.stage(stage) / "keys.json").write_text(json.dumps(keys))
        raise StageRecorded(
            f"{stage} recorded ({len(jobs)} classifiers): run `classify --bundle {bundle.root} "
            f"--stage {stage}` on the GPU box"
        )

    def run_classifiers(runtime, jobs, encoder):
        import ray

        if all(job["kind"] == "fasttext" for job in jobs) and not args.fasttext_too:
            return original_run_classifiers(runtime, jobs, encoder)
        stage = "evaluate" if any("split_kind" in job["keys"] for job in jobs) else "qc"
        return ray.data.from_arrow(pa.concat_tables(replay_or_record(stage, "multilabel", jobs)))

    def run_tasks(runtime, function, jobs, *rest, **options):
        if function is not encoder_classifier.fit_and_evaluate:
            return original_run_tasks(runtime, function, jobs, *rest, **options)
        figures = replay_or_record("encoder-eval", "encoder", jobs)
        if options.get("outputs", 1) == 1:
            return figures
        import ray  # tagged jobs: their predictions too, recorded beside their figures

        folder = bundle.stage("encoder-eval") / "results"
        return figures, [ray.put(pq.read_table(folder / f"result-{i:04d}.predictions")) for i in range(len(jobs))]

    if not args.local_generation:
        fine_tune_ray.fine_tune_many_on_ray = fine_tune_many_on_ray
        generation.generate_routed = generate_routed
        fine_tune_ray.fine_tune_on_ray = fine_tune_on_ray
        generation.generate = generate_one
    compositional.fit_and_predict_many = compositional_evaluate.fit_and_predict_many = run_classifiers
    text_classifier.run_tasks = run_tasks
    try:
        return augment(augment_args)
    except StageRecorded as stop:
        print(f"stopped: {stop}", flush=True)
        return 0


def split_argv(argv) -> tuple[list[str], list[str]]:
    """(the tool's arguments, the ``augment`` arguments after ``--``) of ``argv`` (default: the command line)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        return argv, []
    return argv[: argv.index("--")], argv[argv.index("--") + 1 :]


def main(argv=None) -> int:
    argv, augment_args = split_argv(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pipeline", help="here: augment <args after -->, stages recorded or replayed")
    p.add_argument("--bundle", required=True)
    p.add_argument(
        "--fasttext-too",
        action="store_true",
        help="record/replay fastText multi-label stages too (default: they run here)",
    )
    p.add_argument(
        "--local-generation",
        action="store_true",
        help="fine-tune and generate here (a scratch T5), not on the GPU box",
    )
    p = sub.add_parser("generate", help="GPU box: fine-tune the generators and generate")
    p.add_argument("--bundle", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="/tmp/compositional-models", help="where the fine-tuned models go")
    p.add_argument("--batch", type=int, default=512, help="prompts per generation call")
    p.add_argument("--bucket-size", type=int, default=0, help="rows generated at a time (0: the recorded spec's)")
    p.add_argument("--workers", type=int, default=1, help="processes sharing the GPU, each a share of the models")
    p = sub.add_parser("classify", help="GPU box: the stage's classifier jobs")
    p.add_argument("--bundle", required=True)
    p.add_argument("--stage", required=True, choices=["qc", "evaluate", "encoder-eval"])
    p.add_argument("--out", required=True)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--stop", type=int, default=0, help="0: to the last job")
    p.add_argument("--workers", type=int, default=1, help="jobs at a time (processes sharing the GPU)")
    args = parser.parse_args(argv)
    if args.command == "pipeline":
        return pipeline(args, augment_args)
    from gpu_box import classify, generate, tf32  # the GPU box's half (benchmarks/gpu/gpu_box.py)

    tf32()
    generate(args) if args.command == "generate" else classify(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
