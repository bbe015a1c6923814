"""The results summary's sections of the papers whose evaluation classifiers run as Ray tasks (BoostAug, genre
transfer, compositional): each aggregates its results table per method with Spark (a handful of rows reach the
driver), lays it out with each method's evidence against its baseline (:mod:`jobs.summary.summary_facts`), and records
each method's headline metric. The others are :mod:`jobs.summary.summary_sections`."""

from __future__ import annotations

from common.platform.reports.results_pages import ResultsTable, beyond_std, fmt_mean, lift
from common.platform.runner.job import JobContext, JobRun
from jobs.summary.summary_facts import evidence_cells, evidence_rows, record_evidence, test_facts
from jobs.summary.summary_sections import section
from jobs.summary.summary_tables import BOOSTAUG, BOOSTAUG_EVIDENCE, COMPOSITIONAL, GENRE, GENRE_EVIDENCE


def boostaug_section(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
    """Accuracy and macro-F1 per augmentation method at the config's n_aug (per classifier model where there are
    several), lift vs no augmentation, and each method against none on the same rows (``boostaug_evidence``): the
    accuracy effect with its 95% interval, the MDE and the verdict."""
    from pyspark.sql import functions as F

    n_aug = ctx.cfg.boostaug.n_aug
    results = tr.read(BOOSTAUG).filter((F.col("n_aug") == n_aug) | (F.col("method") == "none"))
    agg = results.groupBy("model", "method").agg(
        F.avg("accuracy").alias("acc"),
        F.stddev("accuracy").alias("std"),
        F.avg("macro_f1").alias("f1"),
        F.count("*").alias("runs"),
    )
    by = {(r["model"], r["method"]): r for r in agg.collect()}
    models = sorted({m for m, _ in by}, key=lambda m: (m != "fasttext", m))
    rows = []
    for model in models:
        judged = evidence_rows(ctx, tr, BOOSTAUG_EVIDENCE, results, f"model={model}", BOOSTAUG)
        base = by.get((model, "none"))
        for method in sorted((m for k, m in by if k == model), key=lambda m: (m != "none", m)):
            r, e = by[(model, method)], judged.get((method, "accuracy"))
            rows.append(
                [
                    method if len(models) == 1 else f"{method} ({model})",
                    fmt_mean(r["acc"], r["std"]),
                    lift(r["acc"], base["acc"] if base else None),
                    *evidence_cells(e, paper=False),
                    f"{r['f1']:.4f}",
                    str(r["runs"]),
                ]
            )
            # The first model keeps the short names.
            name = method.replace("+", "_") if model == models[0] else f"{model}.{method.replace('+', '_')}"
            metrics[f"boostaug.{name}.accuracy"] = r["acc"]
            record_evidence(metrics, f"boostaug.{name}.accuracy", e)
    return section(
        tr,
        BOOSTAUG,
        f"BoostAug paper (test accuracy and macro-F1 of the evaluation classifier trained with {n_aug} "
        "augmentations per text, unfiltered vs BoostAug-filtered; mean ± std over R seeds, lift vs no "
        "augmentation; Δ: the method minus none on the same test rows, in accuracy points, with its 95% interval "
        "pooled over the seeds; MDE: the smallest accuracy effect this test sees at 80% power; the paper gives no "
        "figure for these classifiers):",
        ["method", "accuracy", "lift", "Δ accuracy [95%]", "MDE", "verdict", "macro-F1", "R"],
        rows,
        test_facts(
            ctx, BOOSTAUG, tr.versions[BOOSTAUG], results, ctx.lakehouse.data_commit(BOOSTAUG, tr.versions[BOOSTAUG])
        ),
    )


def genre_section(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
    """Genre macro-F1 per (model, training set), over every topic and per topic: mean ± std over the seeds,
    lift vs off-topic training, each method's gain over off-topic training paired by seed, and, over every topic,
    the method against off-topic on the same rows (``genre_evidence``: the effect with its 95% interval pooled over
    topics, N and seeds, the MDE, the paper's effect scaled to this baseline and the verdict)."""
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
    judged = {
        model: evidence_rows(ctx, tr, GENRE_EVIDENCE, results, f"model={model}", GENRE) for model in {k[0] for k in by}
    }
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
        e = judged[model].get((method, "macro_f1")) if topic == "all" else None
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
                *evidence_cells(e),
                str(r["seeds"]),
            ]
        )
        if topic == "all":
            name = f"genre.{'' if model == 'fasttext' else model + '.'}{method}.macro_f1"
            metrics[name] = r["f1"]
            record_evidence(metrics, name, e)
    return section(
        tr,
        GENRE,
        "Genre transfer paper (genre macro-F1 on on-topic test documents; topic all: each "
        "seed's mean over topics and N, then mean ± std over the seeds; per topic: over seeds (and N); "
        "lift vs off-topic training on the same topics; gain: the method - off_topic in points, paired "
        "by seed, mean ± std (seeds above off_topic / seeds); Δ: the method minus off_topic on the same test "
        "rows, pooled over topics, N and seeds, with its 95% interval; MDE: the smallest macro-F1 effect this "
        "test sees at 80% power; paper: Table 4's gain scaled to this baseline):",
        [
            "model",
            "topic",
            "method",
            "macro-F1",
            "lift",
            "gain (points)",
            "Δ [95%]",
            "MDE",
            "paper",
            "verdict",
            "seeds",
        ],
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
    return section(
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
    (BOOSTAUG, boostaug_section),
    (GENRE, genre_section),
    (COMPOSITIONAL, compositional_section),
)
