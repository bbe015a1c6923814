"""``boostaug-evaluate`` (paper 3, METHODS.md section 3): ``boostaug_eval_sets`` (each method's augmentation rows)
and the evaluation classifiers trained in Ray tasks, ``boostaug.eval.repeats`` seeds each, on the training split plus
a method's rows, scored on the test split: ``boostaug_results``, every classifier's test predictions
(``boostaug_predictions``), each method judged against no augmentation on the same rows (``boostaug_evidence``:
effect, interval, MDE, verdict) and a report (Table 2, the evidence and the Figure 3 curve); the main variants' seed-0
classifiers shipped."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.boostaug.boostaug_tables import (
    EVAL_SETS,
    EVIDENCE,
    JUDGED,
    KEPT,
    PREDICTIONS,
    REJECTS,
    RESULT_SCHEMA,
    RESULTS,
    TEXTS,
)

log = logging.getLogger(__name__)


@job("boostaug-evaluate")
def evaluate_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``boostaug-evaluate``: each method's classifiers, R seeds, accuracy and macro-F1 on the test split."""
    from pyspark.sql import functions as F

    from common.boostaug.evaluation import NONE, eval_sets, summary_table, variants
    from common.boostaug.filtering import unjudged_labels
    from common.data.leakage import COPIES_TEST
    from common.evaluation.predictions import value
    from common.models.classifiers.text_classifier import evaluate_many
    from common.registry.candidates import method_candidates, task_scoring
    from common.registry.naming import classifier_name
    from common.registry.ship import resume, ship
    from common.stages.judging import judge, write_task_predictions

    cfg = ctx.cfg.boostaug
    texts, kept, rejects = tr.read(TEXTS), tr.read(KEPT), tr.read(REJECTS)
    config_hash = hash_of(asdict(cfg), ctx.cfg.seed)
    if tr.all_written((RESULTS, PREDICTIONS, EVIDENCE), config_hash):
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
    # The main variants' seed-0 classifier of each model: shipped; never again where an earlier run wrote the results
    # (and kept them) but not the predictions: its classifiers stay as registered, this run only scores anew.
    shipped = tr.already_written(RESULTS, config_hash)
    keep = {
        (model, v.method): ctx.models_dir(
            f"boostaug_{classifier_name(v.method, model)}", hash_of(config_hash, tr.inputs, sets.version)
        )
        for model in cfg.eval.models
        for v in all_variants
        if ctx.cfg.registry.ships("boostaug", model) and v.n_aug in (0, cfg.n_aug) and " w/o " not in v.method
        if not shipped
    }
    keys, figures, predicted = [], [], []
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
                main = v.n_aug in (0, cfg.n_aug)
                kept = keep.get((model, v.method)) if not repeat and main else None
                # The curve's other sizes are judged as methods of their own.
                tag = {"model": model, "method": v.method if main else f"{v.method} @{v.n_aug}", "repeat": repeat}
                jobs.append(
                    {"train": sources, "test": test, "seed": seed, "tag": tag, **({"keep": kept} if kept else {})}
                )
                keys.append((v, model, repeat, seed, tag["method"]))
        log.info(
            "boostaug evaluate (%s): %d variants x %d repeats = %d classifiers",
            model,
            len(all_variants),
            cfg.eval.repeats,
            len(jobs),
        )
        found, refs = evaluate_many(ctx.ray(), model, jobs, cfg.eval.fasttext, cfg.eval.encoder)
        figures, predicted = figures + found, predicted + refs
    write_task_predictions(tr, predicted, PREDICTIONS, config_hash, ("model",))
    # The repeats reseed the classifier on one split: their rows' noise is one test's.
    cells, judged = judge(
        ctx, tr, tr.written(PREDICTIONS), EVIDENCE, config_hash, "boostaug", NONE, JUDGED, ("model",), _scope
    )
    rows = []
    for (v, model, repeat, seed, label), f in zip(keys, figures):
        n_aug_rows_v = int(n_aug_rows.get((v.method, v.n_aug), 0))
        # Read off the kept predictions (those of an earlier run where it wrote them): the results, the evidence
        # and the predictions always agree.
        accuracy, macro_f1 = (value(m, cells.get((label, (model, repeat)), {})) for m in JUDGED)
        rows.append(
            (
                tr.run_id,
                v.method,
                v.backend,
                model,
                v.n_aug,
                repeat,
                seed,
                accuracy,
                macro_f1,
                int(f["rows"]),
                n_aug_rows_v,
            )
        )
    frame = ctx.spark.createDataFrame(rows, RESULT_SCHEMA)
    tr.write(frame, RESULTS, config_hash)
    pdf = frame.toPandas()
    report(ctx, tr, pdf, judged)
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


def _scope(repeat: tuple) -> str:
    """A repeat's scope: its classifier model (each model judged against its own none)."""
    return f"model={repeat[0]}"


def report(ctx: JobContext, tr: JobRun, pdf, judged: dict) -> None:
    """Write Table 2 (markdown) with each method's evidence (``judged``) and the Figure 3 curve (PNG); log both to
    MLflow; print the table."""
    from common.boostaug.evaluation import plot_curve, summary_table
    from common.stages.judging import evidence_text

    cfg = ctx.cfg.boostaug
    folder = Path(ctx.reports_dir("boostaug"))
    table = summary_table(pdf, cfg.n_aug)
    against = evidence_text(judged)
    print(table + f"\n\n{against}")
    files = [folder / "report.md"]
    text = (
        f"# BoostAug results\n\nMLflow run `{tr.run_id}`; table `{RESULTS}`; accuracy and macro-F1 on the test "
        f"split, mean ± sample std over {cfg.eval.repeats} seeds; {cfg.n_aug} augmentations per source.\n\n"
        f"```\n{table}\n```\n\nEach method against none on the same rows (`{EVIDENCE}`):\n\n```\n{against}\n```\n"
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
