"""BoostAug's encoder stages on a machine that has torch and transformers but neither Spark nor Ray (a lent
GPU box), with the pipeline's own functions, from a bundle exported from the pipeline's Delta tables.

1. ``export`` (here): the latest ``boostaug_texts`` and ``boostaug_candidates`` versions of a lakehouse, read
   with delta-rs, into a bundle folder of Parquet files (candidates: their key, fold and text only).
2. ``score`` (the GPU box): the k cross-boosting surrogates and the MonoAug one fine-tuned
   (:func:`common.models.classifiers.encoder_classifier.fit_surrogate` on
   :func:`common.boostaug.surrogate.surrogate_sources`, the
   plans of :func:`fold_plans` / :func:`mono_plan`), then every candidate scored by one
   :class:`common.boostaug.surrogate.EncoderPoolScorer` (the Ray Data pool's actor) in batches; writes
   ``scores.parquet`` and ``surrogates.json`` and prints training and scoring rates (the benchmark figures).
3. ``load`` (here): runs ``augment run boostaug`` with the encoder surrogate settings, its surrogate training
   and scoring replaced by the bundle's results (checked to be the same candidates version and rows), so the
   ``boostaug_scored`` version, the filters, the evaluation, the tables' lineage and the MLflow runs are the
   pipeline's own.
4. ``evaluate`` (the GPU box): the encoder classifier (``boostaug.eval.encoder`` defaults) on the training
   split plus each exported method's rows, R seeds, scored on the test split (``eval_results.json``).

Run:
  .venv/bin/python benchmarks/gpu/boostaug_encoder_stage.py export --root ROOT --bundle DIR [--eval-sets M ...]
  python3 benchmarks/gpu/boostaug_encoder_stage.py score --bundle DIR --out DIR [--encoder FOLDER] [--set K=V ...]
  .venv/bin/python benchmarks/gpu/boostaug_encoder_stage.py load --bundle DIR --scores DIR -- [augment args]
  python3 benchmarks/gpu/boostaug_encoder_stage.py evaluate --bundle DIR --out DIR [--encoder F] [--repeats R]
``--set`` takes ``EncoderConfig`` fields (``max_batch_tokens=32768``) and ``quantile=0.95``; ``load`` must be
given the same (as ``boostaug.surrogate.encoder.*`` / ``boostaug.filter.perplexity_quantile``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gpu_stage import split_argv, tf32  # noqa: E402  (this folder: the tools' shared argv and TF32 switches)

KEY = ["source_id", "backend", "aug_idx"]
SCORE_COLUMNS = [
    "confidence",
    "pred_label",
    "perplexity",
    "perplexity_limit",
    "mono_confidence",
    "mono_label",
    "mono_perplexity",
    "mono_perplexity_limit",
]


def export(args) -> None:
    """Write texts.parquet, candidates.parquet (key, fold, text), eval sets and versions.json to the bundle."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    bundle = Path(args.bundle)
    bundle.mkdir(parents=True, exist_ok=True)
    versions = {}
    for name in ("boostaug_texts", "boostaug_candidates"):
        table = DeltaTable(f"{args.root}/{name}")
        versions[name] = table.version()
        data = table.to_pyarrow_table()
        if name == "boostaug_candidates":
            data = data.select([*KEY, "fold", "text"]).sort_by([(k, "ascending") for k in KEY])
        else:
            data = data.select(["source_id", "text", "label", "split", "fold"])
        pq.write_table(data, bundle / f"{name.split('_')[1]}.parquet", compression="zstd", compression_level=19)
    if args.eval_sets:
        table = DeltaTable(f"{args.root}/boostaug_eval_sets")
        versions["boostaug_eval_sets"] = table.version()
        data = table.to_pyarrow_table()
        wanted = pc.is_in(data["method"], value_set=pa.array(args.eval_sets))
        data = data.filter(pc.and_(wanted, pc.equal(data["n_aug"], args.n_aug)))
        pq.write_table(
            data.select(["method", "text", "label"]),
            bundle / "eval_sets.parquet",
            compression="zstd",
            compression_level=19,
        )
    (bundle / "versions.json").write_text(json.dumps(versions))
    print(json.dumps(versions), {p.name: p.stat().st_size for p in bundle.iterdir()})


def _spec(args, **overrides):
    from common.models.classifier_config import EncoderConfig

    values = dict(kv.split("=", 1) for kv in args.set or [])
    quantile = float(values.pop("quantile")) if "quantile" in values else None
    fields = EncoderConfig.__dataclass_fields__
    typed = {
        k: type(getattr(EncoderConfig(), k))(v) if getattr(EncoderConfig(), k) is not None else v
        for k, v in values.items()
        if k in fields
    }
    unknown = set(values) - set(fields)
    if unknown:
        raise SystemExit(f"unknown --set keys: {sorted(unknown)}")
    return EncoderConfig(**{"name_or_path": args.encoder, **typed, **overrides}), quantile


def score(args) -> None:
    """Train the fold and mono surrogates, score every candidate; write scores.parquet and surrogates.json."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import torch

    from common.boostaug.surrogate import EncoderPoolScorer, fold_plans, mono_plan, surrogate_sources
    from common.models.classifiers.encoder_classifier import fit_surrogate

    bundle, out = Path(args.bundle), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec, quantile = _spec(args, num_cpus=torch.get_num_threads())
    texts = [str(bundle / "texts.parquet")]
    folds = int(pc.max(pq.read_table(texts[0], columns=["fold"]).column("fold")).as_py()) + 1  # dev/test: null
    report, uris = {}, {}
    for plan in fold_plans(folds) + [mono_plan(folds)]:
        name = "mono" if plan.boost is None else f"fold{plan.boost}"
        train, validation = surrogate_sources(texts, plan)
        figures = fit_surrogate(train, validation, spec, args.seed, str(out / "models" / name))
        report[name] = figures
        uris[plan.boost] = figures["uri"]
        print(
            f"surrogate {name}: {figures['rows']} rows, epoch {figures['epoch']}, val accuracy "
            f"{figures['val_accuracy']:.4f}, {figures['seconds']:.1f} s on {figures['device']}, "
            f"perplexity median {figures['val_perplexity_median']:.1f}",
            flush=True,
        )
    (out / "surrogates.json").write_text(json.dumps(report, indent=2))
    candidates = pq.read_table(bundle / "candidates.parquet")
    if args.limit:
        candidates = candidates.slice(0, args.limit)
    scorer = EncoderPoolScorer({f: u for f, u in uris.items() if f is not None}, uris[None], True, quantile)
    start, parts = time.perf_counter(), []
    for s in range(0, candidates.num_rows, args.batch):
        parts.append(scorer(candidates.slice(s, args.batch)).drop_columns(["text", "fold"]))
        done = s + parts[-1].num_rows
        if len(parts) % 20 == 0 or done == candidates.num_rows:
            print(f"scored {done:,} candidates, {done / (time.perf_counter() - start):,.0f}/s", flush=True)
    seconds = time.perf_counter() - start
    pq.write_table(pa.concat_tables(parts), out / "scores.parquet", compression="zstd")
    timing = {
        "candidates": candidates.num_rows,
        "scoring_s": seconds,
        "device": report["mono"]["device"],
        "candidates_per_s_per_actor": candidates.num_rows / seconds,
        "surrogate_rows_per_s": {k: v["rows"] * v["epoch"] / v["seconds"] for k, v in report.items()},
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "spec": {k: str(v) for k, v in vars(spec).items()},
        "quantile": quantile,
        "tf32": bool(args.tf32),
    }
    (out / "timing.json").write_text(json.dumps(timing, indent=2))
    print(json.dumps(timing, indent=2))


def load(args, augment_args) -> int:
    """Run the pipeline with the bundle's surrogates and scores in place of its own training and scoring."""
    import pyarrow.parquet as pq

    import common.boostaug.surrogate as surrogate_module
    import jobs.boostaug.boostaug_filter as boostaug_filter
    from jobs.cli import main as augment

    scores_dir = Path(args.scores)
    report = json.loads((scores_dir / "surrogates.json").read_text())
    versions = json.loads((Path(args.bundle) / "versions.json").read_text())

    def surrogates(ctx, tr, key, with_mono):
        if tr.versions["boostaug_candidates"] != versions["boostaug_candidates"]:
            raise SystemExit(
                f"the bundle scored boostaug_candidates version {versions['boostaug_candidates']}, "
                f"the pipeline reads {tr.versions['boostaug_candidates']}"
            )
        tr.log_dict({**report, "scored_on": json.loads((scores_dir / "timing.json").read_text())}, "surrogates.json")
        folds = {int(name[4:]): f["uri"] for name, f in report.items() if name != "mono"}
        return folds, report["mono"]["uri"] if with_mono else None

    def score_on_ray(ds, *_, **__):
        import pyarrow as pa
        import ray

        scores = pq.read_table(scores_dir / "scores.parquet")
        candidates = ds.to_arrow_refs()
        # The candidates gathered here: this is a replay tool run once, not a pipeline stage.
        table = pa.concat_tables(ray.get(candidates))
        joined = table.join(scores, KEY, join_type="left outer")
        if (
            joined.num_rows != table.num_rows
            or scores.num_rows != table.num_rows
            or joined.column("confidence").null_count
        ):
            raise SystemExit(f"{table.num_rows} candidates, {scores.num_rows} scores: not the same rows")
        return ray.data.from_arrow(joined.select([*table.column_names, *SCORE_COLUMNS]))

    boostaug_filter._surrogates = surrogates
    surrogate_module.score_on_ray = score_on_ray
    return augment(["run", "boostaug", *augment_args])


def evaluate(args) -> None:
    """Encoder classifiers on train + each method's rows, R seeds, round-robin so a cut run keeps whole seeds."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import torch

    from common.models.classifiers.encoder_classifier import fit_and_evaluate

    bundle, out = Path(args.bundle), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec, _ = _spec(args, num_cpus=torch.get_num_threads(), mlm_weight=0.0)
    texts = pq.read_table(bundle / "texts.parquet")
    train = texts.filter(pc.equal(texts["split"], "train")).select(["text", "label"])
    sets = pq.read_table(bundle / "eval_sets.parquet")
    pq.write_table(texts.filter(pc.equal(texts["split"], "test")).select(["text", "label"]), out / "test.parquet")
    methods = ["none", *args.methods]
    for method in args.methods:
        rows = sets.filter(pc.equal(sets["method"], method)).select(["text", "label"])
        pq.write_table(pa.concat_tables([train, rows]), out / f"train_{method}.parquet")
    pq.write_table(train, out / "train_none.parquet")
    results = []
    for repeat in range(args.start, args.start + args.repeats):
        for method in methods:
            figures = fit_and_evaluate(
                [([str(out / f"train_{method}.parquet")], None)],
                [([str(out / "test.parquet")], None)],
                spec,
                args.seed + repeat,
            )
            results.append({"method": method, "repeat": repeat, "seed": args.seed + repeat, **figures})
            print(json.dumps(results[-1]), flush=True)
            (out / "eval_results.json").write_text(json.dumps(results, indent=2))
    for method in methods:
        acc = [r["accuracy"] for r in results if r["method"] == method]
        std = statistics.stdev(acc) if len(acc) > 1 else float("nan")
        print(f"{method:<24} accuracy {statistics.mean(acc):.4f} +- {std:.4f} over {len(acc)} seeds")


def main(argv=None) -> int:
    argv, augment_args = split_argv(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export")
    p.add_argument("--root", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--eval-sets", nargs="*", default=[])
    p.add_argument("--n-aug", type=int, default=8)
    for name in ("score", "evaluate"):
        p = sub.add_parser(name)
        p.add_argument("--bundle", required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--encoder", default=None, help="encoder folder (default: the packaged MiniLM)")
        p.add_argument("--set", action="append", help="EncoderConfig field=value, or quantile=Q")
        p.add_argument("--seed", type=int, default=42)
        p.add_argument("--batch", type=int, default=4096, help="candidates per scoring batch")
        p.add_argument("--limit", type=int, default=0, help="score only the first N candidates")
        p.add_argument("--repeats", type=int, default=5)
        p.add_argument("--start", type=int, default=0, help="first repeat (seed = --seed + repeat)")
        p.add_argument("--methods", nargs="*", default=["eda", "eda+boostaug"])
        p.add_argument("--tf32", action="store_true", help="TF32 matrix products on a GPU (Ampere or newer)")
    p = sub.add_parser("load")
    p.add_argument("--bundle", required=True)
    p.add_argument("--scores", required=True)
    args = parser.parse_args(argv)
    if getattr(args, "tf32", False):
        tf32()
    if args.command == "export":
        export(args)
    elif args.command == "score":
        score(args)
    elif args.command == "load":
        return load(args, augment_args)
    else:
        evaluate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
