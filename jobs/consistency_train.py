"""Job ``consistency-train``: train every method R times and evaluate accuracy and consistency.

Reads: ``labeled_train`` (D_L), ``unlabeled_pool`` (D_U with f_base's group pseudo-labels),
``accuracy_test``, ``consistency_test``.
Methods (``consistency.methods``): ``baseline`` (HFT on D_L); ``cs_blind`` (colours and sizes from the
``conf/dictionaries`` replaced by constant tokens, in training and at prediction); ``cst_full`` (D_L ∪
every D_U item with its group's pseudo-label); ``cst_ss`` (the same with D_U's groups sub-sampled
exactly to D_L's histogram at ``consistency.match_level``).
Each method's training set is written as ``train_<method>``; HFT levels train in parallel in Ray
actors, ``consistency.repeats`` times with seeds seed..seed+R-1; prediction runs in Spark.
Writes: ``consistency_results`` (method, repeat, seed, f1_weighted, consistency_rate, lifts vs the
baseline mean); a report (markdown and a PNG chart of F1 vs consistency) to MLflow and
``<lakehouse.root>/reports/consistency/``; each method's first model registered (common.registry).
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from common.platform.errors import ConfigError
from common.platform.job import JobContext, JobRun, hash_of, job
from common.platform.storage import remove_tree
from jobs import entry_point

log = logging.getLogger(__name__)

NAME = "consistency-train"
RESULTS = "consistency_results"
RESULT_SCHEMA = (
    "run_id string, method string, repeat int, seed long, f1_weighted double, consistency_rate double, "
    "f1_lift double, consistency_lift double, n_train long, n_augmented long"
)


def training_set(ctx: JobContext, method: str, d_l, pool, colours, sizes):
    """D_L ∪ D_aug for ``method`` as (title, category, source) rows."""
    from pyspark.sql import functions as F

    from common.catalog.blinding import blind_col
    from common.catalog.consistency import level_histogram
    from common.data.sampling import subsample

    base = d_l.select("title", "category", F.lit("labeled").alias("source"))
    if method == "baseline":
        return base
    if method == "cs_blind":
        return base.withColumn("title", blind_col(F.col("title"), colours, sizes))
    augmented = pool.select(
        "title", F.col("group_label").alias("category"), F.lit("pseudo").alias("source"), "group_id", "match_label"
    )
    if method == "cst_ss":
        level = ctx.cfg.consistency.match_level
        target = level_histogram(d_l, "category", level)
        groups = pool.select("group_id", "match_label").distinct()
        sampled, plan = subsample(groups, "match_label", target, ctx.cfg.seed, ["group_id"])
        log.info(
            "cst_ss: %d of %d groups, TVD %.4f -> %.4f",
            plan.n,
            sum(plan.counts.values()),
            plan.tvd_before,
            plan.tvd_after,
        )
        augmented = augmented.join(sampled.select("group_id"), "group_id")
    elif method != "cst_full":
        raise ConfigError(f"consistency.methods: unknown method {method!r}")
    return base.unionByName(augmented.select("title", "category", "source"))


def evaluate(ctx: JobContext, model, accuracy_test, pairs, blind) -> tuple[float, float]:
    """(weighted F1 on the accuracy test, consistency rate on the pairs) of one model."""
    from pyspark.sql import functions as F

    from common.catalog.metrics import consistency_rate
    from common.models.classifiers.hft import predict
    from common.models.classifiers.metrics import weighted_f1

    text = blind if blind is not None else (lambda c: c)
    acc = predict(accuracy_test.select("category", text(F.col("title")).alias("title")), model)
    f1 = weighted_f1(acc, "category", "pred_label")
    both = pairs.select(text(F.col("title_1")).alias("title_1"), text(F.col("title_2")).alias("title_2"))
    both = predict(predict(both, model, "title_1", "p1"), model, "title_2", "p2")
    return f1, consistency_rate(both, "p1_label", "p2_label")


def evaluate_many(ctx: JobContext, models: list, accuracy_test, pairs, threads: int = 4) -> list[tuple[float, float]]:
    """:func:`evaluate` of each (model, blind) in ``models``, in order; up to ``threads`` at once.

    Each evaluation is a few small Spark jobs whose time goes to scheduling and model loading rather than
    to the cores, so several overlap (Spark runs jobs from concurrent threads side by side)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(models)))) as pool:
        return list(pool.map(lambda mb: evaluate(ctx, mb[0], accuracy_test, pairs, mb[1]), models))


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """Train and evaluate every method; returns the mean F1 and consistency rate per method."""
    from common.catalog.blinding import blind_col, load_dictionary
    from common.registry.ship import resume, ship

    cfg = ctx.cfg.consistency
    d_l, pool = tr.read("labeled_train"), tr.read("unlabeled_pool")
    accuracy_test, pairs = tr.read("accuracy_test"), tr.read("consistency_test")
    config_hash = hash_of(asdict(cfg), ctx.cfg.seed)
    if tr.already_written(RESULTS, config_hash):
        print(summary_table(tr.written(RESULTS).toPandas()))
        resume(ctx, tr, comparer(ctx))  # what an earlier run left unshipped: shipped now, nothing trained
        return None
    colours, sizes = load_dictionary(cfg.colours, "colours"), load_dictionary(cfg.sizes, "sizes")

    def blind(c):
        return blind_col(c, colours, sizes)

    trained: dict[str, tuple[int, int]] = {}  # method -> (n augmented, n rows)
    jobs, keys = [], []
    for method in cfg.methods:
        written = tr.write(training_set(ctx, method, d_l, pool, colours, sizes), f"train_{method}", config_hash)
        n_rows, n_aug, depth = training_stats(ctx, f"train_{method}", written.version)
        trained[method] = (n_aug, n_rows)
        models, level = model_jobs(
            ctx,
            f"train_{method}",
            written.version,
            depth,
            f"hft_{method}",
            hash_of(config_hash, tr.inputs),
            cfg.repeats,
        )
        keys += [(method, repeat, seed, model) for repeat, seed, model in models]
        jobs += level
    train_levels(ctx, tr, jobs)
    rows = []
    scores = evaluate_many(
        ctx, [(model, blind if method == "cs_blind" else None) for method, _, _, model in keys], accuracy_test, pairs
    )
    for (method, repeat, seed, _), (f1, consistency) in zip(keys, scores):
        n_aug, n_train = trained[method]
        rows.append((tr.run_id, method, repeat, seed, f1, consistency, n_train, n_aug))
        tr.log_metrics({f"{method}.f1_weighted": f1, f"{method}.consistency_rate": consistency}, step=repeat)
        log.info("%s repeat %d: F1 %.4f consistency %.4f", method, repeat, f1, consistency)
    frame = ctx.spark.createDataFrame(with_lifts(rows), RESULT_SCHEMA)
    tr.write(frame, RESULTS, config_hash)
    pdf = frame.toPandas()
    report(ctx, tr, pdf)
    first = {method: model for method, repeat, _, model in keys if repeat == 0}
    if ctx.cfg.registry.ships("consistency"):
        examples = [r["title"] for r in accuracy_test.select("title").limit(3).collect()]
        ship(
            ctx,
            tr,
            [
                candidate(ctx, tr, method, model, pdf, blind_rules(method, colours, sizes), examples)
                for method, model in first.items()
            ],
            compare_of=comparer(ctx),
        )
    else:
        for method, model in first.items():
            tr.log_model_folder(model.uri, f"models/{method}")
    for _, repeat, _, model in keys:
        if repeat > 0:
            remove_tree(model.uri)  # repeats only feed the mean ± std
    means = pdf.groupby("method")[["f1_weighted", "consistency_rate"]].mean()
    return {f"mean.{m}.{k}": v for m, row in means.iterrows() for k, v in row.items()}


def blind_rules(method: str, colours: list[str], sizes: list[str]) -> list[list[str]]:
    """The substitutions a shipped ``method`` model applies to its input ([] but for cs_blind): what
    :func:`common.catalog.blinding.blind_col` does in Spark, in the order it does it."""
    from common.catalog.blinding import COLOUR_TOKEN, SIZE_TOKEN, dictionary_pattern

    if method != "cs_blind":
        return []
    return [[dictionary_pattern(sizes), SIZE_TOKEN], [dictionary_pattern(colours), COLOUR_TOKEN]]


def candidate(
    ctx: JobContext,
    tr: JobRun,
    method: str,
    model,
    pdf,
    blind: list[list[str]],
    examples: list[str],
    lineage: Optional[dict[str, str]] = None,
):
    """The registry candidate of ``method``: its first repeat's HFT, its R repeats' test metrics (``pdf``: the
    results rows), its lineage (the consistency config's hash, and ``lineage``), and ``examples`` (a few test
    titles) as its input example."""
    from common.registry.candidates import Candidate
    from common.registry.gate import Measure

    rows = pdf[pdf["method"] == method]
    test = {t: tr.data_versions[t] for t in ("accuracy_test", "consistency_test")}  # its scoring: these versions
    return Candidate(
        "consistency",
        method,
        model.uri,
        {"kind": "hft", "depth": model.depth, "substitute": blind},
        {m: Measure.of(rows[m].tolist()) for m in ("f1_weighted", "consistency_rate")},
        train={f"train_{method}": tr.result.outputs[f"train_{method}"].version},
        test=test,
        scoring=dict(test),
        examples=examples,
        lineage={"config_hash": hash_of(asdict(ctx.cfg.consistency), ctx.cfg.seed), **(lineage or {})},
    )


def comparer(ctx: JobContext):
    """The consistency pipeline's :data:`~common.registry.compare.CompareOf`: two HFTs scored in Spark on the test
    table versions of a candidate's ``scoring`` ({accuracy_test, consistency_test}): the counts of each (category,
    candidate's, champion's prediction) on the accuracy test and of each (candidate predicts the pair alike,
    champion does) on the title pairs (a few cells reach the driver, no row). Each model reads its titles as it
    serves: with its manifest's substitutions (a CS-Blind model's colours and sizes, its own dictionaries)."""
    from pyspark.sql import functions as F

    from common.catalog.blinding import substitute_col
    from common.models.classifiers.hft import HFTModel, predict

    def compare_of(scoring: dict):
        accuracy_test = ctx.lakehouse.read("accuracy_test", scoring["accuracy_test"])
        pairs = ctx.lakehouse.read("consistency_test", scoring["consistency_test"])

        def compare(candidate: str, candidate_manifest: dict, champion: str, champion_manifest: dict) -> dict:
            models = [
                (HFTModel(uri, int(m["depth"])), m.get("substitute") or [])
                for uri, m in ((candidate, candidate_manifest), (champion, champion_manifest))
            ]
            rows = accuracy_test.select(
                "category",
                *(substitute_col(F.col("title"), subs).alias(f"t{i}") for i, (_, subs) in enumerate(models)),
            )
            both = pairs.select(
                *(
                    substitute_col(F.col(f"title_{k}"), subs).alias(f"t{k}{i}")
                    for i, (_, subs) in enumerate(models)
                    for k in (1, 2)
                )
            )
            for i, (model, _) in enumerate(models):
                rows = predict(rows, model, f"t{i}", f"p{i}")
                both = predict(predict(both, model, f"t1{i}", f"p1{i}"), model, f"t2{i}", f"p2{i}")
            row_cells = rows.groupBy("category", "p0_label", "p1_label").count().collect()
            pair_cells = (
                both.groupBy(
                    (F.col("p10_label") == F.col("p20_label")).alias("a"),
                    (F.col("p11_label") == F.col("p21_label")).alias("b"),
                )
                .count()
                .collect()
            )
            return {
                "rows": [((r[0], r[1], r[2]), int(r[3])) for r in row_cells],
                "pairs": [((bool(r[0]), bool(r[1])), int(r[2])) for r in pair_cells],
            }

        return compare

    return compare_of


def training_stats(ctx: JobContext, table: str, version: int) -> tuple[int, int, int]:
    """(rows, augmented rows = source other than ``labeled``, label depth) of a training table version."""
    from pyspark.sql import functions as F

    from common.data.taxonomy import depth_col

    stats = (
        ctx.lakehouse.read(table, version)
        .agg(
            F.count("*").alias("n"),
            F.sum((F.col("source") != "labeled").cast("long")).alias("aug"),
            F.max(depth_col(F.col("category"))).alias("depth"),
        )
        .first()
    )
    return int(stats["n"]), int(stats["aug"] or 0), int(stats["depth"] or 0)


def model_jobs(
    ctx: JobContext, table: str, version: int, depth: int, name: str, key: str, repeats: int, first_repeat: int = 0
):
    """The HFT models of ``repeats`` trainings on a table version (seeds seed+repeat) and their level jobs.

    Returns ([(repeat, seed, HFTModel)], [train_level kwargs]).
    """
    from common.models.classifiers.hft import HFTModel, level_jobs

    files = ctx.lakehouse.file_uris(table, version)
    models, jobs = [], []
    for repeat in range(first_repeat, first_repeat + repeats):
        seed = ctx.cfg.seed + repeat
        out_dir = ctx.models_dir(name, hash_of(key, table, version, repeat))
        models.append((repeat, seed, HFTModel(out_dir, depth)))
        jobs += level_jobs(files, depth, ctx.cfg.consistency.fasttext, seed, out_dir)
    return models, jobs


def train_levels(ctx: JobContext, tr, jobs) -> None:
    """Train HFT level jobs in parallel as Ray tasks; log their stats to the run."""
    from common.models.classifiers.hft import HFTTrainerPool, stats_dict

    level_stats = HFTTrainerPool(ctx.ray()).train(jobs)
    tr.log_dict(stats_dict(level_stats), "models/training_stats.json")
    tr.log_metrics(
        {"fasttext_words_per_second_per_thread": statistics.median(s.words_per_second_per_thread for s in level_stats)}
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


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
