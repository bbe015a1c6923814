"""The ``consistency_results`` table (:mod:`jobs.consistency.consistency_train` writes it, ``cga-train`` adds its
``cga`` rows): its schema, each row's lifts vs the baseline's mean, the paper's Table 1 as text and the report
(markdown and the F1-vs-consistency chart); and the judgement (:func:`judge`): every model's per-row predictions
kept (``consistency_predictions``; CGA's in ``cga_predictions``), each method paired with the baseline on the same
rows and judged (``consistency_evidence``, ``cga_evidence``: effect, interval, MDE, the paper's effect, verdict)."""

from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Optional

from common.platform.runner.job import JobContext, JobRun

log = logging.getLogger(__name__)

RESULTS = "consistency_results"
PREDICTIONS = "consistency_predictions"
EVIDENCE = "consistency_evidence"
# The metrics each method is judged on, as the paper's Table 1 reports them.
JUDGED = ("f1_weighted", "consistency_rate")
RESULT_SCHEMA = (
    "run_id string, method string, repeat int, seed long, f1_weighted double, consistency_rate double, "
    "f1_lift double, consistency_lift double, n_train long, n_augmented long"
)


def with_lifts(rows: list[tuple], baseline: Optional[tuple[float, float]] = None) -> list[tuple]:
    """Append relative lifts vs the baseline's mean (the paper's Table 1 percentages) to result rows.

    ``rows``: (run_id, method, repeat, seed, f1, consistency, n_train, n_augmented). ``baseline`` is the
    (F1, consistency) mean to compare with; by default the mean of the ``baseline`` rows among ``rows``.
    Lifts are None when there is no baseline.
    """
    if baseline is None:
        base = [r for r in rows if r[1] == "baseline"]
        baseline = (statistics.mean(r[4] for r in base), statistics.mean(r[5] for r in base)) if base else None
    f1_base, cons_base = baseline or (None, None)
    out = []
    for run_id, method, repeat, seed, f1, cons, n_train, n_aug in rows:
        f1_lift = (f1 - f1_base) / f1_base if f1_base else None
        cons_lift = (cons - cons_base) / cons_base if cons_base else None
        out.append((run_id, method, repeat, seed, f1, cons, f1_lift, cons_lift, n_train, n_aug))
    return out


def summary_table(pdf) -> str:
    """The paper's Table 1 as text: per method mean ± std of F1 and consistency, and mean lifts."""
    grouped = pdf.groupby("method", sort=False)
    lines = [
        f"{'method':<10} {'F1 (weighted)':>17} {'lift':>8} {'consistency':>17} {'lift':>8} {'n_train':>8} "
        f"{'repeats':>7}"
    ]
    for method, g in grouped:
        f1s, cons = g["f1_weighted"], g["consistency_rate"]
        f1_lift = g["f1_lift"].mean() if g["f1_lift"].notna().any() else float("nan")
        cons_lift = g["consistency_lift"].mean() if g["consistency_lift"].notna().any() else float("nan")
        lines.append(
            f"{method:<10} {f1s.mean():>8.4f} ± {f1s.std(ddof=0):.4f} {f1_lift:>+8.2%} "
            f"{cons.mean():>8.4f} ± {cons.std(ddof=0):.4f} {cons_lift:>+8.2%} {int(g['n_train'].iloc[0]):>8} "
            f"{len(g):>7}"
        )
    return "\n".join(lines)


def report(ctx: JobContext, tr, pdf, found=None) -> None:
    """Write the markdown report (with ``found``'s evidence lines, :func:`judge`) and the F1-vs-consistency chart;
    log both to MLflow; print the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(ctx.reports_dir("consistency"))
    table = summary_table(pdf)
    from common.stages.judging import evidence_text

    judged = evidence_text(found or {})
    print(table + (f"\n\n{judged}" if judged else ""))
    stats = (
        pdf.groupby("method", sort=False)
        .agg(
            f1=("f1_weighted", "mean"),
            f1_std=("f1_weighted", "std"),
            cons=("consistency_rate", "mean"),
            cons_std=("consistency_rate", "std"),
        )
        .fillna(0.0)
    )
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for method, row in stats.iterrows():
        ax.errorbar(row["f1"], row["cons"], xerr=row["f1_std"], yerr=row["cons_std"], fmt="o", capsize=3, label=method)
        ax.annotate(method, (row["f1"], row["cons"]), textcoords="offset points", xytext=(6, 4))
    ax.set_xlabel("weighted F1 (accuracy test)")
    ax.set_ylabel("consistency rate (consistency test)")
    ax.set_title(f"Accuracy vs consistency, mean ± std of {int(pdf['repeat'].max()) + 1} runs")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    chart = folder / "f1_vs_consistency.png"
    fig.savefig(chart, dpi=120)
    plt.close(fig)
    markdown = folder / "report.md"
    against = f"Each method against the baseline on the same rows (`{EVIDENCE}`):\n\n```\n{judged}\n```\n\n"
    markdown.write_text(
        "# Consistency results\n\n"
        f"MLflow run `{tr.run_id}`; table `{RESULTS}`.\n\n```\n{table}\n```\n\n"
        + (against if judged else "")
        + "![F1 vs consistency](f1_vs_consistency.png)\n",
        encoding="utf-8",
    )
    tr.log_artifact(str(chart), "report")
    tr.log_artifact(str(markdown), "report")


def reference(methods) -> str:
    """The method every other is paired with: ``baseline``, or the first method where a config trains none (its
    values are then read off its cells, and no method is judged against a paper)."""
    return "baseline" if "baseline" in methods else list(methods)[0]


def judge(
    ctx: JobContext,
    tr: JobRun,
    predictions,
    tables: tuple[str, str],
    config_hash: str,
    methods,
    baseline_rows=None,
):
    """Write ``predictions`` (:func:`jobs.consistency.consistency_hft.predictions`) as ``tables[0]``; pair each
    method with the reference's rows of the same repeat (``baseline_rows``: the reference's predictions kept by an
    earlier job, else among ``predictions``) and judge it on :data:`JUDGED` (:func:`common.stages.judging.judge`:
    ``tables[1]``, the run's metrics). The repeats share one split, so their rows' noise is one test's
    (``same_rows``). Returns (cells by (method, repeat), evidence by scope "", then by (method, metric))."""
    from common.stages.judging import judge as judge_rows

    table, evidence_table = tables
    tr.write(predictions, table, config_hash)
    rows = tr.written(table)
    if baseline_rows is not None:
        rows = rows.unionByName(baseline_rows)
    base = reference(methods)
    # Without the baseline, no method is judged: the reference is only where values are read off.
    judged = JUDGED if base == "baseline" else ()
    return judge_rows(ctx, tr, rows, evidence_table, config_hash, "consistency", base, judged)
