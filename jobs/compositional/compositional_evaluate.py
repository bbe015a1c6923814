"""``compositional-evaluate`` (paper 4, METHODS.md section 4): the multi-label classifiers trained in Ray tasks
(``no_aug`` and each generator on CG, ``no_aug`` on iid, each generator also at the ``eval.curve`` shares of its
synthetic texts; R seeds), their test predictions (``compositional_predictions``), the per-run metrics as Spark
aggregates (``compositional_results``), a report (Table 2, the iid/CG gap, the Figure-4 curve) and the kept CG
classifiers shipped. The job reads top to bottom as its steps: the training sets, the classifiers kept to ship, one
Ray job per (model, training set, seed), the results, the report and the ship."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from common.models.classifiers.multilabel import classifier_params, fit_and_predict_many
from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.compositional.compositional_tables import (
    CG_SUPPORT,
    CG_TEST,
    CG_TRAIN,
    IID_TEST,
    IID_TRAIN,
    PREDICTIONS,
    RESULTS,
    SEQ2SEQ,
    SYNTHETIC,
)

log = logging.getLogger(__name__)

RESULT_COLUMNS = [
    "split_kind",
    "method",
    "model",
    "size",
    "repeat",
    "seed",
    "jaccard",
    "accuracy",
    "correctness",
    "completeness",
    "n_train",
    "n_augmented",
    "n_test",
    "threshold",
]


@job("compositional-evaluate")
def evaluate_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``compositional-evaluate``: no_aug vs each generator on the CG split, no_aug on iid, R seeds."""
    from common.compositional.evaluation import results
    from common.models.classifier_config import used_settings
    from common.registry.ship import resume

    cfg = ctx.cfg.compositional
    for table in (CG_TRAIN, CG_SUPPORT, CG_TEST, IID_TRAIN, IID_TEST, SYNTHETIC):
        tr.read(table)
    config_hash = hash_of(used_settings(cfg.eval, cfg.eval.models), ctx.cfg.seed)
    if tr.already_written(RESULTS, config_hash):
        report(ctx, tr, tr.written(RESULTS).toPandas())
        resume(ctx, tr)  # what an earlier run left unshipped: shipped now, nothing trained
        return None
    files = {t: ctx.lakehouse.file_uris(t, tr.versions[t]) for t in tr.versions}
    kept = synthetic_counts(tr)
    runs = training_sets(cfg.eval.curve, files, kept)
    keep = kept_classifiers(ctx, tr, runs, kept, config_hash)
    jobs = classifier_jobs(ctx, runs, files, keep, kept)
    log.info(
        "compositional evaluate: %d training sets x %d seeds x %d models = %d classifiers",
        len(runs),
        cfg.eval.repeats,
        len(cfg.eval.models),
        len(jobs),
    )
    predictions = tr.write_ray(fit_and_predict_many(ctx.ray(), jobs, cfg.eval.encoder), PREDICTIONS, config_hash)
    frame = results(ctx.lakehouse.read(PREDICTIONS, predictions.version)).select(*RESULT_COLUMNS)
    written = tr.write(frame.orderBy("split_kind", "method", "size", "repeat"), RESULTS, config_hash)
    pdf = ctx.lakehouse.read(RESULTS, written.version).toPandas()
    report(ctx, tr, pdf)
    if keep:
        ship_classifiers(ctx, tr, pdf, keep, kept, config_hash, [(files[CG_TEST], None)])
    return summary_metrics(pdf)


def synthetic_counts(tr: JobRun) -> dict[str, int]:
    """{method: synthetic texts it kept} (one row per method: bounded by the config)."""
    from pyspark.sql import functions as F

    return {
        r["method"]: r["n"] for r in tr.read(SYNTHETIC).groupBy("method").agg(F.count(F.lit(1)).alias("n")).collect()
    }


def training_sets(curve, files: dict, kept: dict[str, int]) -> list[tuple]:
    """(split kind, method, size, training sources, test table) of every classifier to train: ``no_aug`` on iid and
    on CG, and each method on CG with its first ``size`` synthetic texts at each share of ``curve`` and all of them."""
    cg_base = [(files[CG_TRAIN], None), (files[CG_SUPPORT], None)]
    runs = [("iid", "no_aug", 0, [(files[IID_TRAIN], None)], IID_TEST), ("cg", "no_aug", 0, cg_base, CG_TEST)]
    for method in sorted(kept):
        for size in sorted({max(1, round(share * kept[method])) for share in curve} | {kept[method]}):
            synthetic = (files[SYNTHETIC], [("method", "=", method), ("rank", "<=", size)])
            runs.append(("cg", method, size, cg_base + [synthetic], CG_TEST))
    return runs


def kept_classifiers(
    ctx: JobContext, tr: JobRun, runs: list[tuple], kept: dict[str, int], config_hash: str
) -> dict[tuple[str, str], str]:
    """{(model, method): folder} of the classifiers kept to ship: each method's CG classifier on all its synthetic
    texts, first seed, of each model the registry ships."""
    from common.registry.naming import classifier_name

    cfg = ctx.cfg.compositional
    full_cg = list(
        dict.fromkeys(method for kind, method, size, _, _ in runs if kind == "cg" and size == kept.get(method, 0))
    )
    return {
        (model, method): ctx.models_dir(
            f"compositional_{classifier_name(method, model)}", hash_of(config_hash, tr.inputs)
        )
        for model in cfg.eval.models
        if ctx.cfg.registry.ships("compositional", model)
        for method in full_cg
    }


def classifier_jobs(
    ctx: JobContext, runs: list[tuple], files: dict, keep: dict[tuple[str, str], str], kept: dict[str, int]
) -> list[dict]:
    """One Ray job per (model, training set, seed): its training sources, test rows, parameters and result keys;
    the first seed of a kept classifier also names the folder it is kept in."""
    cfg = ctx.cfg.compositional
    jobs = []
    for model in cfg.eval.models:
        params = classifier_params(model, cfg.eval.fasttext, cfg.eval.encoder)
        for kind, method, size, train, test in runs:
            for repeat in range(cfg.eval.repeats):
                seed = ctx.cfg.seed + repeat
                keys = {
                    "split_kind": kind,
                    "method": method,
                    "model": model,
                    "size": size,
                    "repeat": repeat,
                    "seed": seed,
                    "n_augmented": size,
                }
                full = (repeat, kind, size) == (0, "cg", kept.get(method, 0))
                shipped = keep.get((model, method)) if full else None
                jobs.append(
                    {
                        "train": train,
                        "predict": [(files[test], None)],
                        "kind": model,
                        "params": params,
                        "seed": seed,
                        "validation_fraction": cfg.eval.validation_fraction,
                        "keys": keys,
                        **({"keep": shipped} if shipped else {}),
                    }
                )
    return jobs


def summary_metrics(pdf) -> dict[str, float]:
    """{model.kind.method.metric: mean} of exact-set accuracy and Jaccard at each method's full size."""
    keys = ["model", "split_kind", "method"]
    full = pdf[pdf["size"] == pdf.groupby(keys)["size"].transform("max")]
    means = full.groupby(keys)[["accuracy", "jaccard"]].mean()
    return {
        f"{model}.{kind}.{method}.{metric}": float(means.loc[(model, kind, method), metric])
        for model, kind, method in means.index
        for metric in ("accuracy", "jaccard")
    }


def ship_classifiers(
    ctx: JobContext,
    tr: JobRun,
    pdf,
    keep: dict[tuple[str, str], str],
    kept: dict[str, int],
    config_hash: str,
    test: list,
) -> None:
    """Ship (:func:`common.registry.ship.ship`) each kept (model, method) CG classifier with its seeds' exact-set
    accuracy and Jaccard (``pdf``: the results; ``kept``: each method's synthetic texts; ``test``: CG_TEST's rows)."""
    from common.registry.candidates import generator_lineage, method_candidates, task_scoring
    from common.registry.ship import ship

    cg = pdf[pdf["split_kind"] == "cg"]
    full = cg[cg["size"] == cg["method"].map(lambda m: kept.get(m, 0))]
    base = {CG_TRAIN: tr.data_versions[CG_TRAIN], CG_SUPPORT: tr.data_versions[CG_SUPPORT]}
    examples = [r["text"] for r in ctx.lakehouse.read(CG_TEST, tr.versions[CG_TEST]).select("text").limit(3).collect()]
    candidates = method_candidates(
        "compositional",
        full,
        keep,
        ("accuracy", "jaccard"),
        lambda m: {**base, **({SYNTHETIC: tr.data_versions[SYNTHETIC]} if m != "no_aug" else {})},
        test={CG_TEST: tr.data_versions[CG_TEST]},
        examples=examples,
        lineage={"config_hash": config_hash},
        scoring=task_scoring(test, ctx.cfg.compositional.eval.encoder, multilabel=True),
    )
    for c in candidates:
        if c.method in SEQ2SEQ:  # the generative methods
            c.lineage.update(generator_lineage(ctx.cfg.compositional.generator.model))
    ship(ctx, tr, candidates)


def report(ctx: JobContext, tr: JobRun, pdf) -> None:
    """Write the Table-2 summary and the Figure-4 curve (markdown and PNG), log them to MLflow, print the
    summary."""
    from common.compositional.evaluation import curve_table, plot_curve, summary_table

    folder = Path(ctx.reports_dir("compositional"))
    table = summary_table(pdf).to_string(index=False)
    print(table)
    curve = curve_table(pdf)
    text = (
        f"# Compositional multi-label augmentation\n\nMLflow run `{tr.run_id}`; table `{RESULTS}`. Per-example "
        f"metrics (points) averaged over the test set, mean ± sample std over "
        f"{ctx.cfg.compositional.eval.repeats} "
        f"seeds; `cg`: the compositional split (test label sets never seen in training), `iid`: a random split "
        f"of the same sizes. Gain: exact-set accuracy over `no_aug` of the same split.\n\n```\n{table}\n```\n\n"
        f"## Accuracy vs synthetic size (CG)\n\n```\n{curve.to_string(index=False)}\n```\n"
    )
    chart = folder / "accuracy_vs_synthetic.png"
    plot_curve(curve, chart)
    text += "\n![accuracy vs synthetic size](accuracy_vs_synthetic.png)\n"
    path = folder / "report.md"
    path.write_text(text, encoding="utf-8")
    for file in (path, chart):
        tr.log_artifact(str(file), "report")


main = entry_point("compositional-evaluate", evaluate_job, __doc__)

if __name__ == "__main__":
    main()
