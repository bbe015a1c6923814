"""The ``consistency_results`` table (:mod:`jobs.consistency.consistency_train` writes it, ``cga-train`` adds its
``cga`` rows): its schema, each row's lifts vs the baseline's mean, the paper's Table 1 as text and the report
(markdown and the F1-vs-consistency chart)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

from common.platform.runner.job import JobContext

RESULTS = "consistency_results"
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


def report(ctx: JobContext, tr, pdf) -> None:
    """Write the markdown report and the F1-vs-consistency chart; log both to MLflow; print the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(ctx.reports_dir("consistency"))
    table = summary_table(pdf)
    print(table)
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
    markdown.write_text(
        "# Consistency results\n\n"
        f"MLflow run `{tr.run_id}`; table `{RESULTS}`.\n\n```\n{table}\n```\n\n![F1 vs "
        f"consistency](f1_vs_consistency.png)\n",
        encoding="utf-8",
    )
    tr.log_artifact(str(chart), "report")
    tr.log_artifact(str(markdown), "report")
