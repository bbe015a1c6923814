"""The results summary's sections (:mod:`jobs.summary.summary`) of the consistency and query-reformulation papers (the
classifiers' papers are :mod:`jobs.summary.summary_classifiers`), one per results table: each aggregates its table per
method with Spark (a handful of rows reach the driver), lays it out as a
:class:`~common.platform.reports.results_pages.ResultsTable` (mean ± std, lift and the gap to the baseline) with the
run behind it (:mod:`jobs.summary.summary_facts`), and records each method's headline metric."""

from __future__ import annotations

from typing import Sequence

from common.catalog.metrics import by_method
from common.platform.reports.results_pages import ResultsTable, effect_cell, fmt_mean, lift
from common.platform.runner.job import JobContext, JobRun
from jobs.summary.summary_facts import (
    cga_facts,
    evidence_cells,
    evidence_rows,
    matcher_facts,
    record_evidence,
    test_facts,
)
from jobs.summary.summary_tables import (
    CONSISTENCY,
    CONSISTENCY_EVIDENCE,
    MATCHER,
    PAGES,
)


def section(
    tr: JobRun,
    table: str,
    title: str,
    columns: list[str],
    rows: list[list[str]],
    facts: Sequence[tuple[str, str, str]] = (),
) -> ResultsTable:
    return ResultsTable(
        pipeline=PAGES[table][0],
        title=title,
        table=table,
        version=tr.versions[table],
        columns=columns,
        rows=rows,
        facts=facts,
    )


def consistency_section(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
    """Weighted F1 and consistency rate per method, mean ± std over the repeats, and each method against the
    baseline on the same rows (``consistency_evidence``, ``cga_evidence``): the effect in points with its 95%
    interval, the smallest effect the test sees (MDE), the paper's effect scaled to this baseline and the verdict on
    the consistency rate, the paper's headline."""
    results, version = tr.read(CONSISTENCY), tr.versions[CONSISTENCY]
    # One read of the version's commit: its test inputs, and CGA's run and generated samples.
    commit = ctx.lakehouse.data_commit(CONSISTENCY, version)
    by = {r["method"]: r for r in by_method(results).collect()}
    judged = evidence_rows(ctx, tr, CONSISTENCY_EVIDENCE, results)
    rows = []
    for method in sorted(by, key=lambda m: (m != "baseline", m)):
        r = by[method]
        f1, cons = judged.get((method, "f1_weighted")), judged.get((method, "consistency_rate"))
        rows.append(
            [
                method,
                fmt_mean(r["f1"], r["f1_std"]),
                effect_cell(f1),
                fmt_mean(r["consistency"], r["consistency_std"]),
                *evidence_cells(cons),
                str(r["runs"]),
            ]
        )
        metrics[f"{method}.f1_weighted"] = r["f1"]
        metrics[f"{method}.consistency_rate"] = r["consistency"]
        for metric, e in (("f1_weighted", f1), ("consistency_rate", cons)):
            record_evidence(metrics, f"{method}.{metric}", e)
    return section(
        tr,
        CONSISTENCY,
        "Consistency paper (weighted F1 on the accuracy test, consistency rate on the consistency test; mean ± std "
        "over R runs; Δ: the method minus the baseline on the same test rows, in points, with its 95% interval "
        "pooled over the runs; MDE: the smallest consistency effect this test sees at 80% power; paper: the paper's "
        "consistency effect scaled to this baseline):",
        ["method", "F1", "Δ F1 [95%]", "consistency", "Δ [95%]", "MDE", "paper", "verdict", "R"],
        rows,
        [
            *test_facts(ctx, CONSISTENCY, version, results, commit),
            *(cga_facts(ctx, results, version, commit) if "cga" in by else ()),
        ],
    )


def matcher_section(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
    """The matcher's precision and recall @k trained on the original vs the augmented interaction log, mean ±
    std over the matcher's seeds, the augmented log's gain paired by seed, and the run behind them: held-out
    queries and training tuples (from the results table), the click log and the query graph's reformulation
    pairs (from the input versions its commit names). A table written before the matcher had seeds is one
    seed."""
    from pyspark.sql import functions as F

    results = tr.read(MATCHER)
    if "seed" not in results.columns:
        results = results.withColumn("seed", F.lit(0))
    base = results.filter(F.col("variant") == "original").select("k", "seed", F.col("precision").alias("base"))
    gain = F.col("precision") - F.col("base")
    # One row per (variant, k): bounded by the config's ks.
    agg = (
        results.join(base, ["k", "seed"], "left")
        .groupBy("variant", "k")
        .agg(
            F.avg("precision").alias("p"),
            F.stddev("precision").alias("p_std"),
            F.avg("recall").alias("r"),
            F.stddev("recall").alias("r_std"),
            F.avg(gain).alias("gain"),
            F.stddev(gain).alias("gain_std"),
            F.sum((gain > 0).cast("int")).alias("up"),
            F.sum((gain < 0).cast("int")).alias("down"),
            F.countDistinct("seed").alias("seeds"),
            F.max("n_queries").alias("queries"),
            F.max("n_train_tuples").alias("tuples"),
        )
    )
    by = {(r["variant"], r["k"]): r for r in agg.collect()}
    rows = []
    for k in sorted({k for _, k in by}):
        o, a = by.get(("original", k)), by.get(("augmented", k))
        if o is None or a is None:
            continue
        paired = (
            f"{100 * a['gain']:+.2f} ± {100 * (a['gain_std'] or 0.0):.2f} ({a['up']} up, {a['down']} down)"
            if a["gain"] is not None
            else "-"
        )
        rows.append(
            [
                str(k),
                fmt_mean(o["p"], o["p_std"]),
                fmt_mean(a["p"], a["p_std"]),
                lift(a["p"], o["p"]),
                paired,
                fmt_mean(o["r"], o["r_std"]),
                fmt_mean(a["r"], a["r_std"]),
                lift(a["r"], o["r"]),
                str(a["seeds"]),
            ]
        )
        metrics[f"matcher.original.precision_at_{k}"] = o["p"]
        metrics[f"matcher.augmented.precision_at_{k}"] = a["p"]
    return section(
        tr,
        MATCHER,
        "Query reformulation paper (query -> product matcher on held-out queries, "
        "trained on the original vs the augmented interaction log; mean ± std over the matcher's seeds; "
        "gain: augmented - original P@k in points, paired by seed, mean ± std (seeds up, seeds down)):",
        [
            "k",
            "P@k original",
            "P@k augmented",
            "lift",
            "gain (points)",
            "R@k original",
            "R@k augmented",
            "lift",
            "seeds",
        ],
        rows,
        matcher_facts(ctx, tr.versions[MATCHER], by),
    )


SECTIONS = (
    (CONSISTENCY, consistency_section),
    (MATCHER, matcher_section),
)
