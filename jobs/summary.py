"""Job ``results-summary``: one screen of headline results, each method against its baseline.

Reads (whichever exist): ``consistency_results`` (weighted F1 and consistency rate per method and repeat:
baseline, CS-Blind, CST, CGA), ``matcher_results`` (query -> product matcher trained on the original vs
the augmented interaction log, precision/recall @k), ``boostaug_results`` (accuracy with unfiltered vs
filtered augmentation), ``genre_results`` (genre macro-F1 trained on-topic, off-topic, off-topic + synthetic)
and ``compositional_results`` (exact-set accuracy and Jaccard on the CG and iid splits per generator), and one
sample per generator from each generative method's generation table. Aggregates them per method with Spark (a
handful of rows reach the driver), prints the summary with the report folders, and writes it to
``<lakehouse.root>/reports/summary.md`` (also an MLflow artifact). Writes no table.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from common.catalog.metrics import by_method
from common.platform.job import JobContext, JobRun, job
from jobs import entry_point

log = logging.getLogger(__name__)

NAME = "results-summary"
CONSISTENCY = "consistency_results"
MATCHER = "matcher_results"
BOOSTAUG = "boostaug_results"
GENRE = "genre_results"
COMPOSITIONAL = "compositional_results"
# Each generative method's generation table (the shared generation schema: source_text, generated_text,
# sample_idx, model_version, reason) and what its source and output are.
GENERATED = (("cga_generated", "CGA", "title", "title variant"),
             ("query_reformulations", "query reformulation", "query", "reformulation"),
             ("boostaug_infill_generated", "BoostAug contextual", "text with a gap", "fill"),
             ("genre_generated", "genre transfer", "keywords", "document"),
             ("cg_generated", "compositional", "labels", "text"))
SAMPLE_CHARS = 160  # one screen: longer texts are cut with an ellipsis


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """Summarise the result tables that exist; returns each method's mean headline metric and its lift."""
    from pyspark.sql import functions as F

    sections, metrics = [], {}
    if ctx.lakehouse.exists(CONSISTENCY):
        rows = by_method(tr.read(CONSISTENCY)).collect()
        by = {r["method"]: r for r in rows}
        base = by.get("baseline")
        lines = ["Consistency paper (weighted F1 on the accuracy test, consistency rate on the consistency test; "
                 "mean ± std over R runs, lift vs the baseline):",
                 f"  {'method':<10} {'F1':>17} {'lift':>8} {'consistency':>17} {'lift':>8} {'R':>3}"]
        for method in sorted(by, key=lambda m: (m != "baseline", m)):
            r = by[method]
            f1_lift = _lift(r["f1"], base["f1"] if base else None)
            cons_lift = _lift(r["consistency"], base["consistency"] if base else None)
            lines.append(f"  {method:<10} {r['f1']:>8.4f} ± {r['f1_std']:.4f} {f1_lift:>8} "
                         f"{r['consistency']:>8.4f} ± {r['consistency_std']:.4f} {cons_lift:>8} {r['runs']:>3}")
            metrics[f"{method}.f1_weighted"] = r["f1"]
            metrics[f"{method}.consistency_rate"] = r["consistency"]
        sections.append("\n".join(lines))
    if ctx.lakehouse.exists(MATCHER):
        rows = tr.read(MATCHER).groupBy("variant", "k").agg(F.avg("precision").alias("p"),
                                                            F.avg("recall").alias("r")).collect()
        by = {(r["variant"], r["k"]): r for r in rows}
        lines = ["Query reformulation paper (query -> product matcher on held-out queries, trained on the original "
                 "vs the augmented interaction log):",
                 f"  {'k':>3} {'P@k original':>13} {'P@k augmented':>14} {'lift':>8} {'R@k original':>13} "
                 f"{'R@k augmented':>14} {'lift':>8}"]
        for k in sorted({k for _, k in by}):
            o, a = by.get(("original", k)), by.get(("augmented", k))
            if o is None or a is None:
                continue
            lines.append(f"  {k:>3} {o['p']:>13.4f} {a['p']:>14.4f} {_lift(a['p'], o['p']):>8} "
                         f"{o['r']:>13.4f} {a['r']:>14.4f} {_lift(a['r'], o['r']):>8}")
            metrics[f"matcher.original.precision_at_{k}"] = o["p"]
            metrics[f"matcher.augmented.precision_at_{k}"] = a["p"]
        sections.append("\n".join(lines))
    if ctx.lakehouse.exists(BOOSTAUG):
        n_aug = ctx.cfg.boostaug.n_aug
        results = tr.read(BOOSTAUG).filter((F.col("n_aug") == n_aug) | (F.col("method") == "none"))
        rows = results.groupBy("method").agg(F.avg("accuracy").alias("acc"), F.stddev("accuracy").alias("std"),
                                            F.avg("macro_f1").alias("f1"), F.count("*").alias("runs")).collect()
        by = {r["method"]: r for r in rows}
        base = by.get("none")
        lines = [f"BoostAug paper (test accuracy and macro-F1 of fastText trained with {n_aug} augmentations per "
                 "text, unfiltered vs BoostAug-filtered; mean ± std over R seeds, lift vs no augmentation):",
                 f"  {'method':<34} {'accuracy':>17} {'lift':>8} {'macro-F1':>9} {'R':>3}"]
        for method in sorted(by, key=lambda m: (m != "none", m)):
            r = by[method]
            lines.append(f"  {method:<34} {r['acc']:>8.4f} ± {r['std'] or 0.0:.4f} "
                         f"{_lift(r['acc'], base['acc'] if base else None):>8} {r['f1']:>9.4f} {r['runs']:>3}")
            metrics[f"boostaug.{method.replace('+', '_')}.accuracy"] = r["acc"]
        sections.append("\n".join(lines))
    if ctx.lakehouse.exists(GENRE):
        # One row per (model, method): bounded.
        rows = tr.read(GENRE).groupBy("model", "method").agg(
            F.avg("macro_f1").alias("f1"), F.stddev("macro_f1").alias("std"), F.count("*").alias("runs")).collect()
        by = {(r["model"], r["method"]): r for r in rows}
        lines = ["Genre transfer paper (genre macro-F1 on on-topic test documents, mean over topics, N and seeds; "
                 "lift vs off-topic training):",
                 f"  {'model':<8} {'method':<14} {'macro-F1':>17} {'lift':>8} {'runs':>5}"]
        order = ("on_topic", "off_topic", "augmented", "off_keywords", "synthetic_only")
        for model, method in sorted(by, key=lambda k: (k[0] != "fasttext", k[0], order.index(k[1])
                                                       if k[1] in order else len(order), k[1])):
            r, base = by[(model, method)], by.get((model, "off_topic"))
            lines.append(f"  {model:<8} {method:<14} {r['f1']:>8.4f} ± {r['std'] or 0.0:.4f} "
                         f"{_lift(r['f1'], base['f1'] if base else None):>8} {r['runs']:>5}")
            metrics[f"genre.{'' if model == 'fasttext' else model + '.'}{method}.macro_f1"] = r["f1"]
        sections.append("\n".join(lines))
    if ctx.lakehouse.exists(COMPOSITIONAL):
        res = tr.read(COMPOSITIONAL)
        keys = ["model", "split_kind", "method"]
        full = res.join(res.groupBy(*keys).agg(F.max("size").alias("size")), [*keys, "size"])
        rows = full.groupBy(*keys).agg(
            F.avg("accuracy").alias("acc"), F.stddev("accuracy").alias("std"), F.avg("jaccard").alias("jac"),
            F.max("n_augmented").alias("n_aug"), F.count("*").alias("runs")).collect()
        by = {(r["model"], r["split_kind"], r["method"]): r for r in rows}
        lines = ["Compositional paper (multi-label exact-set accuracy and Jaccard on test label sets never seen in "
                 "training (cg) and on a random split (iid); mean ± std over R seeds, lift vs no_aug):",
                 f"  {'model':<8} {'split':<5} {'method':<13} {'accuracy':>17} {'lift':>9} {'Jaccard':>8} "
                 f"{'synthetic':>9} {'R':>3}"]
        for model, kind, method in sorted(by, key=lambda k: (k[0], k[1], k[2] != "no_aug", k[2])):
            r, base = by[(model, kind, method)], by.get((model, kind, "no_aug"))
            lines.append(f"  {model:<8} {kind:<5} {method:<13} {r['acc']:>8.4f} ± {r['std'] or 0.0:.4f} "
                         f"{_lift(r['acc'], base['acc'] if base else None):>9} {r['jac']:>8.4f} {r['n_aug']:>9} "
                         f"{r['runs']:>3}")
            metrics[f"compositional.{model}.{kind}.{method}.accuracy"] = r["acc"]
        sections.append("\n".join(lines))
    samples = _samples(ctx, tr)
    if samples and sections:
        sections.append(samples)
    reports = Path(ctx.cfg.lakehouse.root) / "reports"
    if not sections:
        log.info("no result tables yet (%s, %s): nothing to summarise", CONSISTENCY, MATCHER)
        return None
    folders = sorted(p for p in reports.glob("*") if p.is_dir()) if reports.is_dir() else []
    sections.append("Reports (Markdown and charts): " + (", ".join(str(p) for p in folders) or "none yet"))
    text = "\n\n".join(sections)
    print("\n" + text + "\n", flush=True)
    reports.mkdir(parents=True, exist_ok=True)
    path = reports / "summary.md"
    path.write_text(f"# Results summary ({ctx.cfg.name})\n\n```\n{text}\n```\n", encoding="utf-8")
    tr.log_artifact(str(path), "report")
    return metrics


def _samples(ctx: JobContext, tr: JobRun) -> Optional[str]:
    """One generated sample per generator of each generative method whose table exists (the first by source
    id: the same rows from run to run), source and output side by side; None when no method generated."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lines = []
    for table, method, source, output in GENERATED:
        if not ctx.lakehouse.exists(table):
            continue
        written = tr.read(table).filter((F.col("sample_idx") >= 0) & F.col("reason").isNull()
                                        & (F.length(F.trim("generated_text")) > 0))
        first = Window.partitionBy("model_version").orderBy("source_id", "sample_idx")
        # One row per generator reaches the driver (a few per method).
        rows = (written.withColumn("rank", F.row_number().over(first)).filter("rank = 1")
                .orderBy("model_version").select("source_text", "generated_text").limit(6).collect())
        for r in rows:
            lines.append(f"  {method} ({source} -> {output}):\n"
                         f"    {_cut(r['source_text'])}\n    -> {_cut(r['generated_text'])}")
    if not lines:
        return None
    return "\n".join(["Generated samples (one per generator; what the method's generator wrote, before its filter):",
                      *lines])


def _cut(text: str) -> str:
    """``text`` on one line, at most SAMPLE_CHARS characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= SAMPLE_CHARS else flat[:SAMPLE_CHARS - 1] + "…"


def _lift(value: Optional[float], base: Optional[float]) -> str:
    """``+3.10%`` relative to ``base``; ``-`` when there is no base."""
    if value is None or not base:
        return "-"
    return f"{(value - base) / base:+.2%}"


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
