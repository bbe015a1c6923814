"""Job ``cga-sweep`` of the CGA pipeline (:mod:`jobs.cga.cga` holds the others): the paper's Figure-2 experiments, one
MLflow child run per point (T at fixed N, N at T = 0.7, T without sub-sampling) on the tables ``cga-train`` reads;
writes ``cga_sweep_results`` and the chart ``reports/cga/figure2.png`` with its markdown table."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.cga.cga_train import evaluation_inputs

log = logging.getLogger(__name__)

SWEEP_RESULTS = "cga_sweep_results"
SWEEP_SCHEMA = (
    "run_id string, point string, threshold double, n long, experiments string, repeat int, seed long, "
    "f1_weighted double, consistency_rate double, n_train long, n_augmented long"
)


@job("cga-sweep")
def sweep_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``cga-sweep``: the Figure-2 experiments, one MLflow child run per (T, N) point."""
    from common.catalog.cga import THRESHOLD_FREE, augmentation_set, sweep_points, training_set
    from jobs.consistency.consistency_hft import evaluate_many, model_jobs, train_levels, training_stats

    cfg = ctx.cfg.cga
    if not cfg.sweep.enabled:
        log.info("cga.sweep.enabled is false: no sweep")
        return None
    d_l, generated, accuracy_test, pairs = evaluation_inputs(tr)
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


main = entry_point("cga-sweep", sweep_job, __doc__)

if __name__ == "__main__":
    main()
