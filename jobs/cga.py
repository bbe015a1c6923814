"""The CGA jobs (consistency paper, Consistent Generative Augmentation): one module, four thin jobs.

* ``cga-pairs`` reads ``unlabeled_pool`` (D_U: the catalog groups outside the consistency test); writes
  ``cga_pairs`` (D_pairs: ordered pairs of different versions within a group).
* ``cga-generate`` reads ``cga_pairs``, ``labeled_train``; fine-tunes the generator (``cga.model``) in a Ray
  task (checkpoints and model to MLflow), generates ``cga.generation.n_samples`` samples per D_L title (or
  per title of ``cga_sources``, a seeded sample of ``cga.sources`` of them) on a Ray Data actor pool, scores
  each against its source (BLEU or MiniLM cosine); writes ``cga_generated``
  (every sample with ``score`` and, for empty outputs and copies, ``reason``) and ``cga_generated_quarantine``
  (bad inputs).
* ``cga-train`` reads ``cga_generated``, ``labeled_train``, ``accuracy_test``, ``consistency_test``,
  ``consistency_results``; D_aug = samples with s >= ``cga.threshold`` (sub-sampled to ``cga.n``) with
  their source's label; writes ``cga_augmented``, ``cga_test_copies`` (samples that copy an accuracy-test
  title, with their reason: never in D_aug), ``train_cga`` (D_L ∪ D_aug); trains HFT
  ``consistency.repeats`` times, evaluates like ``consistency-train`` and puts the ``cga`` rows into
  ``consistency_results`` (replacing earlier ``cga`` rows; lifts vs the baseline rows).
* ``cga-sweep`` reads the same; one MLflow child run per Figure-2 point (T at fixed N, N at T = 0.7, T
  without sub-sampling); writes ``cga_sweep_results`` and the chart ``reports/cga/figure2.png``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from common.models.generation.served.checks import served_preflight
from common.platform.job import JobContext, JobResult, JobRun, hash_of, job, run_jobs, when_set
from jobs import entry_point

log = logging.getLogger(__name__)

RESULTS = "consistency_results"
TEST_COPIES = "cga_test_copies"
SOURCES = "cga_sources"  # the D_L titles generated from, with cga.sources set
SWEEP_RESULTS = "cga_sweep_results"
SWEEP_SCHEMA = (
    "run_id string, point string, threshold double, n long, experiments string, repeat int, seed long, "
    "f1_weighted double, consistency_rate double, n_train long, n_augmented long"
)


def _model_hash(ctx: JobContext) -> str:
    cfg = ctx.cfg.cga
    return hash_of(asdict(cfg.model), asdict(cfg.fine_tune), ctx.cfg.seed)


def _generation_hash(ctx: JobContext) -> str:
    cfg = ctx.cfg.cga
    # The encoder engine only changes minilm scores (bleu's hash stays as it was).
    scorer = [cfg.scorer, cfg.scorer_engine] if cfg.scorer == "minilm" else [cfg.scorer]
    return hash_of(_model_hash(ctx), asdict(cfg.generation), *scorer, *when_set(cfg.sources))


@job("cga-pairs")
def pairs_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``cga-pairs``: D_pairs, ordered pairs of different versions within each D_U group."""
    from pyspark.sql import functions as F

    from common.catalog.cga import group_version_pairs

    pairs = group_version_pairs(tr.read("unlabeled_pool"), ctx.cfg.cga.max_pairs_per_group, ctx.cfg.seed)
    tr.write(pairs, "cga_pairs", hash_of(ctx.cfg.cga.max_pairs_per_group, ctx.cfg.seed))
    stats = (
        tr.written("cga_pairs").agg(F.count("*").alias("pairs"), F.countDistinct("group_id").alias("groups")).first()
    )
    return {"pairs": stats["pairs"], "groups_with_pairs": stats["groups"]}


@job("cga-generate", preflight=served_preflight(lambda cfg: cfg.cga.model))
def generate_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``cga-generate``: fine-tune the generator on D_pairs, generate n samples per D_L title, score them."""
    from common.models.generation.filtering import FilterSpec
    from common.models.generation.stages import fine_tune_stage, generate_stage

    cfg = ctx.cfg.cga
    tr.read("cga_pairs")
    tr.read("labeled_train")
    v_pairs, v_train = tr.versions["cga_pairs"], tr.versions["labeled_train"]
    model = fine_tune_stage(
        ctx,
        tr,
        "cga_pairs",
        v_pairs,
        "cga",
        cfg.model,
        cfg.fine_tune,
        _model_hash(ctx),
        {"cga_pairs": tr.inputs["cga_pairs"]},
    )
    scorer = FilterSpec(scorer=cfg.scorer, threshold=None, encoder_engine=cfg.scorer_engine)
    source, v_source = "labeled_train", v_train
    if cfg.sources is not None:
        from common.data.sampling import seeded_first

        sample = seeded_first(tr.read("labeled_train"), cfg.sources, ctx.cfg.seed, ["item_id"])
        source, v_source = (
            SOURCES,
            tr.write(
                sample, SOURCES, hash_of(cfg.sources, ctx.cfg.seed), {"labeled_train": tr.inputs["labeled_train"]}
            ).version,
        )
    written, stats = generate_stage(
        ctx,
        tr,
        source,
        v_source,
        "item_id",
        "title",
        model,
        cfg.generation,
        scorer,
        "cga_generated",
        _generation_hash(ctx),
        dict(tr.inputs),
    )
    tr.result.outputs["cga_generated"] = written
    return stats.metrics()


def _base_results_version(ctx: JobContext) -> int:
    """The ``consistency_results`` version that ``consistency-train`` wrote last (the one CGA rows join):
    the latest version, or the version a later ``cga-train`` commit names as its base."""
    from common.platform.lakehouse import LakehouseError

    if not ctx.lakehouse.exists(RESULTS):
        raise LakehouseError(f"{RESULTS} does not exist: run consistency-train first (CGA joins its baseline)")
    latest = next(c for c in ctx.lakehouse.history(RESULTS) if c.changes_data)
    if latest.lineage and latest.lineage.get("job") == "cga-train":
        return int(latest.lineage["inputs"][RESULTS])
    return latest.version


def _evaluation_inputs(tr: JobRun):
    """The tables every CGA training reads (their versions become ``tr.inputs``): (D_L, generated, accuracy
    test, consistency pairs). A generated title that copies an accuracy-test title gets the reason
    ``copies a test text`` here, so no D_aug holds it (the test item would be trained on)."""
    from common.data.leakage import mark_test_copies

    accuracy_test = tr.read("accuracy_test")
    generated = mark_test_copies(tr.read("cga_generated"), "generated_text", accuracy_test, "title")
    return tr.read("labeled_train"), generated, accuracy_test, tr.read("consistency_test")


@job("cga-train")
def train_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``cga-train``: D_aug at (cga.threshold, cga.n), HFT on D_L ∪ D_aug, the ``cga`` rows of the results."""
    from pyspark.sql import functions as F

    from common.catalog.cga import augmentation_set, training_set
    from common.data.leakage import COPIES_TEST
    from common.models.config import generator_facts
    from common.registry.candidates import generator_lineage
    from common.registry.ship import resume, ship
    from jobs.consistency_train import (
        RESULT_SCHEMA,
        candidate,
        comparer,
        evaluate_many,
        model_jobs,
        report,
        summary_table,
        train_levels,
        training_stats,
        with_lifts,
    )

    cfg = ctx.cfg.cga
    repeats = ctx.cfg.consistency.repeats
    d_l, generated, accuracy_test, pairs = _evaluation_inputs(tr)
    existing = tr.read(RESULTS, _base_results_version(ctx))
    config_hash = hash_of(cfg.threshold, cfg.n, asdict(ctx.cfg.consistency.fasttext), repeats, ctx.cfg.seed)
    if tr.already_written(RESULTS, config_hash, latest_only=True):
        resume(ctx, tr, comparer(ctx))  # what an earlier run left unshipped: shipped now, nothing trained
        return None

    tr.write(augmentation_set(generated, d_l, cfg.threshold, cfg.n, ctx.cfg.seed), "cga_augmented", config_hash)
    # One model per generated version: a bounded read.
    versions = [r[0] for r in generated.select("model_version").distinct().limit(3).collect()]
    tr.write_card(
        "cga_augmented",
        generator_facts(cfg.model, cfg.fine_tune, cfg.generation)
        | {"model version": ", ".join(sorted(v for v in versions if v))},
        {"scorer": cfg.scorer, "threshold T": cfg.threshold, "sub-sample N": cfg.n},
    )
    # _evaluation_inputs marked the samples that copy a test title, so no D_aug holds them: they are kept,
    # with their reason, in the job's rejects table.
    tr.write(generated.filter(F.col("reason") == COPIES_TEST), TEST_COPIES, config_hash)
    tr.log_metrics({"cga.test_copies_dropped": tr.written_rows(TEST_COPIES)})
    written = tr.write(training_set(d_l, tr.written("cga_augmented")), "train_cga", config_hash)
    n_rows, n_aug, depth = training_stats(ctx, "train_cga", written.version)
    models, jobs = model_jobs(ctx, "train_cga", written.version, depth, "hft_cga", config_hash, repeats)
    train_levels(ctx, tr, jobs)

    rows = []
    scores = evaluate_many(ctx, [(model, None) for _, _, model in models], accuracy_test, pairs)
    for (repeat, seed, _), (f1, consistency) in zip(models, scores):
        rows.append((tr.run_id, "cga", repeat, seed, f1, consistency, n_rows, n_aug))
        tr.log_metrics({"cga.f1_weighted": f1, "cga.consistency_rate": consistency}, step=repeat)
        log.info("cga repeat %d: F1 %.4f consistency %.4f (D_aug %d)", repeat, f1, consistency, n_aug)
    base = existing.filter(F.col("method") == "baseline").agg(F.avg("f1_weighted"), F.avg("consistency_rate")).first()
    baseline = (base[0], base[1]) if base[0] is not None else None
    cga_rows = ctx.spark.createDataFrame(with_lifts(rows, baseline), RESULT_SCHEMA)
    tr.write(existing.filter(F.col("method") != "cga").unionByName(cga_rows), RESULTS, config_hash)
    pdf = tr.written(RESULTS).toPandas()
    report(ctx, tr, pdf)
    log.info("consistency results with CGA:\n%s", summary_table(pdf))
    if ctx.cfg.registry.ships("consistency"):  # CGA's classifier ships as the consistency pipeline's "cga"
        ship(
            ctx,
            tr,
            [
                candidate(
                    ctx,
                    tr,
                    "cga",
                    models[0][2],
                    pdf,
                    [],
                    [r["title"] for r in accuracy_test.select("title").limit(3).collect()],
                    {"cga.config_hash": config_hash, **generator_lineage(cfg.model, versions)},
                )
            ],
            compare_of=comparer(ctx),
        )
    cga = pdf[pdf.method == "cga"]
    return {
        "mean.cga.f1_weighted": cga.f1_weighted.mean(),
        "mean.cga.consistency_rate": cga.consistency_rate.mean(),
        "mean.cga.n_augmented": n_aug,
    }


@job("cga-sweep")
def sweep_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``cga-sweep``: the Figure-2 experiments, one MLflow child run per (T, N) point."""
    from common.catalog.cga import THRESHOLD_FREE, augmentation_set, sweep_points, training_set
    from jobs.consistency_train import evaluate_many, model_jobs, train_levels, training_stats

    cfg = ctx.cfg.cga
    if not cfg.sweep.enabled:
        log.info("cga.sweep.enabled is false: no sweep")
        return None
    d_l, generated, accuracy_test, pairs = _evaluation_inputs(tr)
    inputs = dict(tr.inputs)
    sweep_hash = hash_of(asdict(cfg.sweep), asdict(ctx.cfg.consistency.fasttext), ctx.cfg.seed)
    if tr.already_written(SWEEP_RESULTS, sweep_hash):
        return None
    n_available = generated.filter(THRESHOLD_FREE).select("source_id", "generated_text").distinct().count()
    rows = []
    for point in sweep_points(cfg.sweep):
        with ctx.tracker.run(
            f"cga-sweep {point.name}", tags={"job": "cga-sweep", "sweep.point": point.name}, log_config=False
        ) as child:
            child.log_params(
                {"threshold": point.threshold, "n": point.n or "all", "experiments": ",".join(point.experiments)}
            )
            point_hash = hash_of(sweep_hash, point.threshold, point.n)
            aug = augmentation_set(generated, d_l, point.threshold, point.n, ctx.cfg.seed)
            written = ctx.write(child, training_set(d_l, aug), "cga_sweep_train", point_hash, inputs)
            n_rows, n_aug, depth = training_stats(ctx, "cga_sweep_train", written.version)
            models, jobs = model_jobs(
                ctx, "cga_sweep_train", written.version, depth, "hft_cga_sweep", point_hash, cfg.sweep.repeats
            )
            train_levels(ctx, child, jobs)
            scores = evaluate_many(ctx, [(model, None) for _, _, model in models], accuracy_test, pairs)
            for (repeat, seed, _), (f1, consistency) in zip(models, scores):
                child.log_metrics(
                    {"f1_weighted": f1, "consistency_rate": consistency, "n_augmented": n_aug}, step=repeat
                )
                rows.append(
                    (
                        child.run_id,
                        point.name,
                        point.threshold,
                        point.n,
                        ",".join(point.experiments),
                        repeat,
                        seed,
                        f1,
                        consistency,
                        n_rows,
                        n_aug,
                    )
                )
                log.info(
                    "sweep %s repeat %d: F1 %.4f consistency %.4f (D_aug %d)",
                    point.name,
                    repeat,
                    f1,
                    consistency,
                    n_aug,
                )
    frame = ctx.spark.createDataFrame(rows, SWEEP_SCHEMA)
    tr.write(frame, SWEEP_RESULTS, sweep_hash)
    pdf = frame.toPandas()
    figure2(ctx, tr, pdf, cfg.sweep)
    tr.set_tags({"sweep.most_consistent_point": pdf.groupby("point").consistency_rate.mean().sort_values().index[-1]})
    return {"points": pdf.point.nunique(), "filtered_samples_available": n_available}


def figure2(ctx: JobContext, tr, pdf, sweep) -> None:
    """The paper's Figure 2 as one PNG: consistency and F1 vs T (at N = fixed_size), vs N (at T =
    fixed_threshold), and vs T without sub-sampling; plus a markdown table. Both go to MLflow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(ctx.reports_dir("cga"))
    means = (
        pdf.groupby(["point", "threshold", "n", "experiments"], dropna=False)
        .agg(f1=("f1_weighted", "mean"), consistency=("consistency_rate", "mean"), n_aug=("n_augmented", "mean"))
        .reset_index()
    )
    panels = [
        ("threshold", "threshold T", f"N = {sweep.fixed_size}"),
        ("size", "requested N", f"T = {sweep.fixed_threshold:g}"),
        ("tradeoff", "threshold T", "no sub-sampling (N = all)"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (experiment, xlabel, title) in zip(axes, panels):
        part = means[means.experiments.str.contains(experiment)]
        x = "n" if experiment == "size" else "threshold"
        part = part.sort_values(x)
        ax.plot(part[x], part.consistency, "o-", color="tab:blue", label="consistency rate")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("consistency rate", color="tab:blue")
        twin = ax.twinx()
        twin.plot(part[x], part.f1, "s--", color="tab:orange", label="weighted F1")
        twin.set_ylabel("weighted F1", color="tab:orange")
        for _, row in part.iterrows():
            ax.annotate(
                f"|D_aug|={int(row.n_aug)}",
                (row[x], row.consistency),
                textcoords="offset points",
                xytext=(0, 6),
                fontsize=7,
                ha="center",
            )
        ax.set_title(title)
        ax.grid(alpha=0.3)
    fig.suptitle("CGA: filtering threshold T and augmentation size N (cf. the paper's Figure 2)")
    fig.tight_layout()
    chart = folder / "figure2.png"
    fig.savefig(chart, dpi=110)
    plt.close(fig)
    lines = ["| point | experiments | F1 | consistency | D_aug |", "|---|---|---|---|---|"]
    for _, row in means.sort_values(["threshold", "n"], na_position="last").iterrows():
        lines.append(f"| {row.point} | {row.experiments} | {row.f1:.4f} | {row.consistency:.4f} | {int(row.n_aug)} |")
    markdown = folder / "sweep.md"
    markdown.write_text("# CGA sweep\n\n" + "\n".join(lines) + "\n\n![Figure 2](figure2.png)\n", encoding="utf-8")
    print("\n".join(lines))
    tr.log_artifact(str(chart), "report")
    tr.log_artifact(str(markdown), "report")


def run(ctx: JobContext) -> JobResult:
    """Run the four CGA jobs in order (the ``cga`` pipeline without its consistency prerequisites)."""
    return run_jobs(ctx, "cga", (pairs_job, generate_job, train_job, sweep_job))


main = entry_point("cga", run, __doc__)

if __name__ == "__main__":
    main()
