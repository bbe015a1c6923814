"""Job ``results-summary``: one screen of headline results, each method against its baseline.

Reads (whichever exist): ``consistency_results`` (weighted F1 and consistency rate per method and repeat:
baseline, CS-Blind, CST, CGA), ``matcher_results`` (query -> product matcher trained on the original vs
the augmented interaction log, precision/recall @k), ``boostaug_results`` (accuracy with unfiltered vs
filtered augmentation), ``genre_results`` (genre macro-F1 trained on-topic, off-topic, off-topic + synthetic)
and ``compositional_results`` (exact-set accuracy and Jaccard on the CG and iid splits per generator), and one
sample per generator from each generative method's generation table, and one line per registered model (its
champion and the newest version's gate decision). Aggregates them per method with Spark (a
handful of rows reach the driver), prints the summary with the report folders, and writes it to
``<lakehouse.root>/reports/summary.md`` (also an MLflow artifact). Each results table also gets its results
page (:mod:`common.platform.results_pages`): ``<lakehouse.root>/reports/results/<pipeline>.md`` with the
pipeline's report charts, naming the table version its numbers come from, and the same page in
``results_pages_dir`` when the config sets one (the docs site's ``docs/results/<config>/``). Writes no table.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

from common.catalog.metrics import by_method
from common.platform.job import JobContext, JobRun, job
from common.platform.results_pages import ResultsTable, beyond_std, fmt_mean, lift, page, text_block
from common.registry.listing import registry_lines
from jobs import entry_point
from jobs.summary_facts import cga_facts, cut, matcher_facts, test_facts

log = logging.getLogger(__name__)

NAME = "results-summary"
CONSISTENCY = "consistency_results"
MATCHER = "matcher_results"
BOOSTAUG = "boostaug_results"
GENRE = "genre_results"
COMPOSITIONAL = "compositional_results"
# Each generative method's generation table (the shared generation schema: source_text, generated_text,
# sample_idx, model_version, reason) and what its source and output are.
# (table, method, source, output, the config section of its generator: model and fine_tune).
GENERATED = (
    ("cga_generated", "CGA", "title", "title variant", lambda c: c.cga),
    ("query_reformulations", "query reformulation", "query", "reformulation", lambda c: c.query_reformulation),
    ("boostaug_infill_generated", "BoostAug contextual", "text with a gap", "fill", lambda c: c.boostaug.contextual),
    ("genre_generated", "genre transfer", "keywords", "document", lambda c: c.genre.generator),
    ("cg_generated", "compositional", "labels", "text", lambda c: c.compositional.generator),
)
# What each paper reports for the comparison its section shows, so a reader can place the figure
# (../shared/docs/METHODS.md and the papers' tables).
PAPER = {
    CONSISTENCY: "the paper (184k labeled titles, 5 runs): F1 0.665 baseline, CST-SS 0.661, CGA 0.667; consistency "
    "0.738 baseline, CST-Full 0.813, CST-SS 0.790, CGA 0.771",
    MATCHER: "the paper (a large e-commerce click log, T5 reformulations): +19.6% product accuracy of the semantic "
    "matcher trained on the augmented log",
    BOOSTAUG: "the paper (SST-2, 5 seeds): BERT accuracy 92.47 with no augmentation, 92.48 with BoostAug; larger "
    "gains on small sets and weak models (LSTM), and plain EDA can lower accuracy",
    GENRE: "the paper (t5-small generators, 25 topics): +2 to +4 macro-F1 points for augmented over off-topic "
    "training",
    COMPOSITIONAL: "the paper (SemEval CG split, BERT): exact-set accuracy 2.85 with no augmentation, 8.29 with "
    "LS-PT's and 8.01 with Flan-T5's quality-controlled synthetic texts",
}
# Each results table's page, and the report folders (<root>/reports/<name>) whose charts it shows.
PAGES = {
    CONSISTENCY: ("consistency", ("consistency", "cga")),
    MATCHER: ("query-reformulation", ("query_reformulation",)),
    BOOSTAUG: ("boostaug", ("boostaug",)),
    GENRE: ("genre-transfer", ("genre",)),
    COMPOSITIONAL: ("compositional", ("compositional",)),
}


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """Summarise the result tables that exist and write their pages; returns each method's mean headline
    metric (and, for the matcher, precision@k per variant)."""
    metrics: dict[str, float] = {}
    sections = [
        build(ctx, tr, metrics)
        for table, build in (
            (CONSISTENCY, _consistency),
            (MATCHER, _matcher),
            (BOOSTAUG, _boostaug),
            (GENRE, _genre),
            (COMPOSITIONAL, _compositional),
        )
        if ctx.lakehouse.exists(table)
    ]
    reports = Path(ctx.reports_dir(""))  # <root>/reports, or a scratch folder published to it
    if not sections:
        log.info("no result tables yet (%s): nothing to summarise", ", ".join(PAGES))
        return None
    blocks = [f"{text_block(s)}\n  for comparison, {PAPER[s.table]}" for s in sections]
    samples = _samples(ctx, tr)
    if samples:
        blocks.append(samples)
    models = registry_lines(ctx)
    if models:
        blocks.append(
            "Registered models (the gate's metric over the seeds; common.registry):\n"
            + "\n".join(f"  {cut(line, 220)}" for line in models)
        )
    folders = [ctx.reports.uri(name) for name in ctx.reports.names()]
    blocks.append("Reports (Markdown and charts): " + (", ".join(folders) or "none yet"))
    text = "\n\n".join(blocks)
    print("\n" + text + "\n", flush=True)
    reports.mkdir(parents=True, exist_ok=True)
    path = reports / "summary.md"
    path.write_text(f"# Results summary ({ctx.cfg.name})\n\n```\n{text}\n```\n", encoding="utf-8")
    tr.log_artifact(str(path), "report")
    targets = [reports / "results"] + ([Path(ctx.cfg.results_pages_dir)] if ctx.cfg.results_pages_dir else [])
    for section in sections:
        _write_page(ctx, section, targets)
    tr.log_artifacts(str(reports / "results"), "results")
    return metrics


def _write_page(ctx: JobContext, section: ResultsTable, folders: list[Path]) -> None:
    """Write ``section``'s page to ``<folder>/<pipeline>.md``, with its report charts in ``<folder>/<pipeline>/``,
    in each of ``folders`` (the page and its commit are made once)."""
    import shutil

    charts = [chart for report in PAGES[section.table][1] for chart in ctx.reports.files(report, ".png")]
    text = page(
        section,
        ctx.lakehouse.data_commit(section.table, section.version),
        ctx.cfg.name,
        [f"{section.pipeline}/{chart.name}" for chart in charts],
    )
    for folder in folders:
        for chart in charts:
            (folder / section.pipeline).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(chart, folder / section.pipeline / chart.name)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{section.pipeline}.md").write_text(text, encoding="utf-8")


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


def _consistency(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
    """Weighted F1 and consistency rate per method, mean ± std over the repeats, lift vs the baseline."""
    results, version = tr.read(CONSISTENCY), tr.versions[CONSISTENCY]
    # One read of the version's commit: its test inputs, and CGA's run and generated samples.
    commit = ctx.lakehouse.data_commit(CONSISTENCY, version)
    by = {r["method"]: r for r in by_method(results).collect()}
    base = by.get("baseline")
    rows = []
    for method in sorted(by, key=lambda m: (m != "baseline", m)):
        r = by[method]
        other = base if method != "baseline" else None
        rows.append(
            [
                method,
                fmt_mean(r["f1"], r["f1_std"]),
                lift(r["f1"], base["f1"] if base else None),
                _beyond(r, other, "f1", "f1_std"),
                fmt_mean(r["consistency"], r["consistency_std"]),
                lift(r["consistency"], base["consistency"] if base else None),
                _beyond(r, other, "consistency", "consistency_std"),
                str(r["runs"]),
            ]
        )
        metrics[f"{method}.f1_weighted"] = r["f1"]
        metrics[f"{method}.consistency_rate"] = r["consistency"]
    return _section(
        tr,
        CONSISTENCY,
        "Consistency paper (weighted F1 on the accuracy test, consistency rate on "
        "the consistency test; mean ± std over R runs, lift vs the baseline; > std: the difference to the "
        "baseline exceeds both rows' std):",
        ["method", "F1", "lift", "> std", "consistency", "lift", "> std", "R"],
        rows,
        [
            *test_facts(ctx, CONSISTENCY, version, results, commit),
            *(cga_facts(ctx, results, version, commit) if "cga" in by else ()),
        ],
    )


def _matcher(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
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


def _boostaug(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
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


def _genre(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
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


def _compositional(ctx: JobContext, tr: JobRun, metrics: dict[str, float]) -> ResultsTable:
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


def _samples(ctx: JobContext, tr: JobRun) -> Optional[str]:
    """One generated sample per generator of each generative method whose table exists: the row whose source
    is of median length among that generator's (ties: by source id, then sample), so a reader sees the typical
    input rather than the shortest (a model number among queries) and the same row from run to run; source and
    output side by side under the generator that wrote them (the model, how it learned the task, its version);
    None when no method generated."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from common.models.config import describe_generator

    lines = []
    for table, method, source, output, section in GENERATED:
        if not ctx.lakehouse.exists(table):
            continue
        generator = describe_generator(section(ctx.cfg).model, section(ctx.cfg).fine_tune)
        written = tr.read(table).filter(
            (F.col("sample_idx") >= 0) & F.col("reason").isNull() & (F.length(F.trim("generated_text")) > 0)
        )
        by_length = Window.partitionBy("model_version").orderBy(F.length("source_text"), "source_id", "sample_idx")
        rows_of = Window.partitionBy("model_version")
        # One row per generator reaches the driver (a few per method).
        rows = (
            written.withColumn("rank", F.row_number().over(by_length))
            .withColumn("n", F.count("*").over(rows_of))
            .filter("rank = floor((n + 1) / 2)")
            .orderBy("model_version")
            .select("source_text", "generated_text", "model_version")
            .limit(6)
            .collect()
        )
        for r in rows:
            lines.append(
                f"  {method} ({source} -> {output}), written by {generator} [{r['model_version']}]:\n"
                f"    {cut(r['source_text'])}\n    -> {cut(r['generated_text'])}"
            )
    if not lines:
        return None
    return "\n".join(
        ["Generated samples (one per generator; what the method's generator wrote, before its filter):", *lines]
    )


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
