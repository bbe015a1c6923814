"""The results summary's sections (:mod:`jobs.summary.summary`), one per results table: each aggregates its table per
method with Spark (a handful of rows reach the driver), lays it out as a
:class:`~common.platform.reports.results_pages.ResultsTable` (mean ± std, lift and the gap to the baseline) with the
run behind it (:mod:`jobs.summary.summary_facts`), and records each method's headline metric."""

from __future__ import annotations

from typing import Sequence

from common.catalog.metrics import by_method
from common.platform.reports.results_pages import ResultsTable, beyond_std, effect_cell, fmt_mean, lift, points
from common.platform.runner.job import JobContext, JobRun
from jobs.summary.summary_facts import EVIDENCE_FIGURES, cga_facts, evidence_rows, matcher_facts, test_facts
from jobs.summary.summary_tables import (
    BOOSTAUG,
    COMPOSITIONAL,
    CONSISTENCY,
    CONSISTENCY_EVIDENCE,
    GENRE,
    MATCHER,
    PAGES,
)


def _section(
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
                effect_cell(cons),
                points(cons["mde"] if cons else None),
                points(cons["paper_effect"] if cons else None, signed=True),
                cons["verdict"] if cons else "-",
                str(r["runs"]),
            ]
        )
        metrics[f"{method}.f1_weighted"] = r["f1"]
        metrics[f"{method}.consistency_rate"] = r["consistency"]
        for metric, e in (("f1_weighted", f1), ("consistency_rate", cons)):
            if e is not None:
                metrics.update({f"{method}.{metric}.{k}": e[k] for k in EVIDENCE_FIGURES})
    return _section(
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
    return _section(
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


def boostaug_section(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
    """Accuracy and macro-F1 per augmentation method at the config's n_aug, lift vs no augmentation."""
    from pyspark.sql import functions as F

    n_aug = ctx.cfg.boostaug.n_aug
    results = tr.read(BOOSTAUG).filter((F.col("n_aug") == n_aug) | (F.col("method") == "none"))
    agg = results.groupBy("method").agg(
        F.avg("accuracy").alias("acc"),
        F.stddev("accuracy").alias("std"),
        F.avg("macro_f1").alias("f1"),
        F.count("*").alias("runs"),
    )
    by = {r["method"]: r for r in agg.collect()}
    base = by.get("none")
    rows = []
    for method in sorted(by, key=lambda m: (m != "none", m)):
        r = by[method]
        rows.append(
            [
                method,
                fmt_mean(r["acc"], r["std"]),
                lift(r["acc"], base["acc"] if base else None),
                _beyond(r, base if method != "none" else None, "acc", "std"),
                f"{r['f1']:.4f}",
                str(r["runs"]),
            ]
        )
        metrics[f"boostaug.{method.replace('+', '_')}.accuracy"] = r["acc"]
    return _section(
        tr,
        BOOSTAUG,
        f"BoostAug paper (test accuracy and macro-F1 of fastText trained with {n_aug} "
        "augmentations per text, unfiltered vs BoostAug-filtered; mean ± std over R seeds, lift vs no "
        "augmentation; > std: the difference to none exceeds both rows' std):",
        ["method", "accuracy", "lift", "> std", "macro-F1", "R"],
        rows,
        test_facts(
            ctx, BOOSTAUG, tr.versions[BOOSTAUG], results, ctx.lakehouse.data_commit(BOOSTAUG, tr.versions[BOOSTAUG])
        ),
    )


def genre_section(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
    """Genre macro-F1 per (model, training set), over every topic and per topic: mean ± std over the seeds,
    lift vs off-topic training, and each method's gain over off-topic training paired by seed."""
    from pyspark.sql import functions as F

    results = tr.read(GENRE)
    # Each seed's mean over the topics (and N) first: the "all" rows' ± is then the seed std of that mean, the
    # spread the paper's Table 4 gives and the one a gain must clear, not the spread between topics.
    seeds = (
        results.groupBy("model", "method", "repeat")
        .agg(F.avg("macro_f1").alias("f1"))
        .withColumn("topic", F.lit("all"))
        .unionByName(
            results.groupBy("model", F.col("topic").cast("string").alias("topic"), "method", "repeat").agg(
                F.avg("macro_f1").alias("f1")
            )
        )
    )
    base = seeds.filter(F.col("method") == "off_topic").select("model", "topic", "repeat", F.col("f1").alias("base"))
    gain = F.col("f1") - F.col("base")
    # One row per (model, method) and per (model, topic, method): bounded by the config's topics.
    agg = (
        seeds.join(base, ["model", "topic", "repeat"], "left")
        .groupBy("model", "topic", "method")
        .agg(
            F.avg("f1").alias("f1"),
            F.stddev("f1").alias("std"),
            F.avg(gain).alias("gain"),
            F.stddev(gain).alias("gain_std"),
            F.sum((gain > 0).cast("int")).alias("up"),
            F.count("*").alias("seeds"),
        )
    )
    by = {(r["model"], r["topic"], r["method"]): r for r in agg.collect()}
    order = ("on_topic", "off_topic", "augmented", "off_keywords", "synthetic_only", "off_topic_balanced")
    rows = []
    for model, topic, method in sorted(
        by,
        key=lambda k: (
            k[0] != "fasttext",
            k[0],
            k[1] != "all",
            int(k[1]) if k[1] != "all" else 0,
            order.index(k[2]) if k[2] in order else len(order),
            k[2],
        ),
    ):
        r, base_row = by[(model, topic, method)], by.get((model, topic, "off_topic"))
        paired = (
            ""
            if method == "off_topic" or r["gain"] is None
            else f"{100 * r['gain']:+.1f} ± {100 * (r['gain_std'] or 0.0):.1f} ({r['up']}/{r['seeds']})"
        )
        rows.append(
            [
                model,
                topic,
                method,
                fmt_mean(r["f1"], r["std"]),
                lift(r["f1"], base_row["f1"] if base_row else None),
                paired,
                str(r["seeds"]),
            ]
        )
        if topic == "all":
            metrics[f"genre.{'' if model == 'fasttext' else model + '.'}{method}.macro_f1"] = r["f1"]
    return _section(
        tr,
        GENRE,
        "Genre transfer paper (genre macro-F1 on on-topic test documents; topic all: each "
        "seed's mean over topics and N, then mean ± std over the seeds; per topic: over seeds (and N); "
        "lift vs off-topic training on the same topics; gain: the method - off_topic in points, paired "
        "by seed, mean ± std (seeds above off_topic / seeds)):",
        ["model", "topic", "method", "macro-F1", "lift", "gain (points)", "seeds"],
        rows,
        test_facts(ctx, GENRE, tr.versions[GENRE], results),
    )


def compositional_section(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
    """Exact-set accuracy and Jaccard per (model, split, method) at the largest size, lift vs no_aug."""
    from pyspark.sql import functions as F

    res = tr.read(COMPOSITIONAL)
    keys = ["model", "split_kind", "method"]
    full = res.join(res.groupBy(*keys).agg(F.max("size").alias("size")), [*keys, "size"])
    agg = full.groupBy(*keys).agg(
        F.avg("accuracy").alias("acc"),
        F.stddev("accuracy").alias("std"),
        F.avg("jaccard").alias("jac"),
        F.max("n_augmented").alias("n_aug"),
        F.count("*").alias("runs"),
    )
    by = {(r["model"], r["split_kind"], r["method"]): r for r in agg.collect()}
    rows = []
    for model, kind, method in sorted(by, key=lambda k: (k[0], k[1], k[2] != "no_aug", k[2])):
        r, base = by[(model, kind, method)], by.get((model, kind, "no_aug"))
        rows.append(
            [
                model,
                kind,
                method,
                fmt_mean(r["acc"], r["std"]),
                lift(r["acc"], base["acc"] if base else None),
                _beyond(r, base if method != "no_aug" else None, "acc", "std"),
                f"{r['jac']:.4f}",
                str(r["n_aug"]),
                str(r["runs"]),
            ]
        )
        metrics[f"compositional.{model}.{kind}.{method}.accuracy"] = r["acc"]
    return _section(
        tr,
        COMPOSITIONAL,
        "Compositional paper (multi-label exact-set accuracy and Jaccard on test "
        "label sets never seen in training (cg) and on a random split (iid); mean ± std over R seeds, "
        "lift vs no_aug; > std: the difference to no_aug exceeds both rows' std):",
        ["model", "split", "method", "accuracy", "lift", "> std", "Jaccard", "synthetic", "R"],
        rows,
        test_facts(ctx, COMPOSITIONAL, tr.versions[COMPOSITIONAL], res),
    )


def _beyond(row, base, mean: str, std: str) -> str:
    """:func:`beyond_std` of aggregated ``row`` against ``base`` (None: the base row itself), by column name."""
    return beyond_std(row[mean], row[std], base[mean], base[std]) if base is not None else "-"


# Each results table and its section, in the summary's order.
SECTIONS = (
    (CONSISTENCY, consistency_section),
    (MATCHER, matcher_section),
    (BOOSTAUG, boostaug_section),
    (GENRE, genre_section),
    (COMPOSITIONAL, compositional_section),
)
