"""``boostaug-evaluate`` (paper 3, METHODS.md section 3): ``boostaug_eval_sets`` (each method's augmentation rows)
and the evaluation classifiers trained in Ray tasks, ``boostaug.eval.repeats`` seeds each, on the training split plus
a method's rows, scored on the test split: ``boostaug_results`` and a report (Table 2 and the Figure 3 curve); the
main variants' seed-0 classifiers shipped."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.boostaug.boostaug_tables import EVAL_SETS, KEPT, REJECTS, RESULT_SCHEMA, RESULTS, TEXTS

log = logging.getLogger(__name__)


@job("boostaug-evaluate")
def evaluate_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``boostaug-evaluate``: each method's classifiers, R seeds, accuracy and macro-F1 on the test split."""
    from pyspark.sql import functions as F

    from common.boostaug.evaluation import NONE, eval_sets, summary_table, variants
    from common.boostaug.filtering import unjudged_labels
    from common.data.leakage import COPIES_TEST
    from common.models.classifiers.text_classifier import evaluate_many
    from common.registry.candidates import method_candidates, task_scoring
    from common.registry.naming import classifier_name
    from common.registry.ship import resume, ship

    cfg = ctx.cfg.boostaug
    texts, kept, rejects = tr.read(TEXTS), tr.read(KEPT), tr.read(REJECTS)
    config_hash = hash_of(asdict(cfg), ctx.cfg.seed)
    if tr.already_written(RESULTS, config_hash):
        print(summary_table(tr.written(RESULTS).toPandas(), cfg.n_aug))
        resume(ctx, tr)  # what an earlier run left unshipped: shipped now, nothing trained
        return None
    # Augmentations that copy an evaluation text join no variant, unfiltered ones included.
    scored = (
        kept.withColumn("reason", F.lit(None).cast("string"))
        .unionByName(rejects)
        .filter(F.col("reason").isNull() | (F.col("reason") != COPIES_TEST))
    )
    has_perplexity = scored.filter(F.col("perplexity").isNotNull()).limit(1).count() > 0
    all_variants = variants(cfg, has_perplexity)
    unjudged = unjudged_labels(texts, cfg.filter.min_class_support)
    sets = tr.write(eval_sets(scored, cfg, all_variants, unjudged), EVAL_SETS, config_hash)
    # One row per variant: a bounded aggregate.
    n_aug_rows = {
        (r["method"], r["n_aug"]): r["count"]
        for r in ctx.lakehouse.read(EVAL_SETS, sets.version).groupBy("method", "n_aug").count().collect()
    }
    text_files = ctx.lakehouse.file_uris(TEXTS, tr.versions[TEXTS])
    set_files = ctx.lakehouse.file_uris(EVAL_SETS, sets.version)
    train = (text_files, [("split", "=", "train")])
    test = [(text_files, [("split", "=", "test")])]
    # The main variants' seed-0 classifier of each model: shipped.
    keep = {
        (model, v.method): ctx.models_dir(
            f"boostaug_{classifier_name(v.method, model)}", hash_of(config_hash, tr.inputs, sets.version)
        )
        for model in cfg.eval.models
        for v in all_variants
        if ctx.cfg.registry.ships("boostaug", model) and v.n_aug in (0, cfg.n_aug) and " w/o " not in v.method
    }
    keys, figures = [], []
    for model in cfg.eval.models:
        jobs = []
        for v in all_variants:
            sources = (
                [train]
                if v.method == NONE
                else [train, (set_files, [("method", "=", v.method), ("n_aug", "=", v.n_aug)])]
            )
            for repeat in range(cfg.eval.repeats):
                seed = ctx.cfg.seed + repeat
                kept = keep.get((model, v.method)) if not repeat and v.n_aug in (0, cfg.n_aug) else None
                jobs.append({"train": sources, "test": test, "seed": seed, **({"keep": kept} if kept else {})})
                keys.append((v, model, repeat, seed))
        log.info(
            "boostaug evaluate (%s): %d variants x %d repeats = %d classifiers",
            model,
            len(all_variants),
            cfg.eval.repeats,
            len(jobs),
        )
        figures += evaluate_many(ctx.ray(), model, jobs, cfg.eval.fasttext, cfg.eval.encoder)
    rows = []
    for (v, model, repeat, seed), f in zip(keys, figures):
        n_aug_rows_v = int(n_aug_rows.get((v.method, v.n_aug), 0))
        rows.append(
            (
                tr.run_id,
                v.method,
                v.backend,
                model,
                v.n_aug,
                repeat,
                seed,
                f["accuracy"],
                f["macro_f1"],
                int(f["rows"]),
                n_aug_rows_v,
            )
        )
    frame = ctx.spark.createDataFrame(rows, RESULT_SCHEMA)
    tr.write(frame, RESULTS, config_hash)
    pdf = frame.toPandas()
    report(ctx, tr, pdf)
    if keep:
        ship(
            ctx,
            tr,
            method_candidates(
                "boostaug",
                pdf[pdf["n_aug"].isin([0, cfg.n_aug])],
                keep,
                ("accuracy", "macro_f1"),
                lambda m: {TEXTS: tr.data_versions[TEXTS], **({EVAL_SETS: sets.version} if m != NONE else {})},
                test={TEXTS: tr.data_versions[TEXTS]},
                lineage={"config_hash": config_hash},
                examples=[r["text"] for r in texts.filter(F.col("split") == "test").select("text").limit(3).collect()],
                scoring=task_scoring(test, cfg.eval.encoder),
            ),
        )
    main = pdf[(pdf["n_aug"] == cfg.n_aug) | (pdf["method"] == NONE)].groupby(["model", "method"])
    # MLflow metric names allow no "+": eda+boostaug -> eda_boostaug. The first model keeps the short names.
    return {
        f"mean.{'' if model == cfg.eval.models[0] else model + '.'}{m.replace('+', '_')}.{k}": v
        for (model, m), row in main[["accuracy", "macro_f1"]].mean().iterrows()
        for k, v in row.items()
    }


def report(ctx: JobContext, tr: JobRun, pdf) -> None:
    """Write Table 2 (markdown) and the Figure 3 curve (PNG); log both to MLflow; print the table."""
    from common.boostaug.evaluation import plot_curve, summary_table

    cfg = ctx.cfg.boostaug
    folder = Path(ctx.reports_dir("boostaug"))
    table = summary_table(pdf, cfg.n_aug)
    print(table)
    files = [folder / "report.md"]
    text = (
        f"# BoostAug results\n\nMLflow run `{tr.run_id}`; table `{RESULTS}`; accuracy and macro-F1 on the test "
        f"split, mean ± sample std over {cfg.eval.repeats} seeds; {cfg.n_aug} augmentations per source.\n\n"
        f"```\n{table}\n```\n"
    )
    backend = cfg.eval.ablation_backend
    if backend in cfg.backends and len(cfg.eval.curve) > 1:
        chart = folder / "accuracy_vs_n_aug.png"
        plot_curve(pdf, backend, cfg.eval.models, cfg.eval.repeats, chart)
        files.append(chart)
        text += "\n![accuracy vs augmentations](accuracy_vs_n_aug.png)\n"
    files[0].write_text(text, encoding="utf-8")
    for path in files:
        tr.log_artifact(str(path), "report")


main = entry_point("boostaug-evaluate", evaluate_job, __doc__)

if __name__ == "__main__":
    main()
