"""Job ``consistency-train``: train every method R times and evaluate accuracy and consistency.

Reads: ``labeled_train`` (D_L), ``unlabeled_pool`` (D_U with f_base's group pseudo-labels),
``accuracy_test``, ``consistency_test``.
Methods (``consistency.methods``): ``baseline`` (HFT on D_L); ``cs_blind`` (colours and sizes from the
``conf/dictionaries`` replaced by constant tokens, in training and at prediction); ``cst_full`` (D_L ∪
every D_U item with its group's pseudo-label); ``cst_ss`` (the same with D_U's groups sub-sampled
exactly to D_L's histogram at ``consistency.match_level``).
Each method's training set is written as ``train_<method>``; HFT levels train in parallel in Ray
actors, ``consistency.repeats`` times with seeds seed..seed+R-1; prediction runs in Spark.
Writes: ``consistency_predictions`` (every model's prediction of every test row and pair),
``consistency_results`` (method, repeat, seed, f1_weighted, consistency_rate, lifts vs the baseline mean),
``consistency_evidence`` (each method against the baseline on the same rows, pooled over the repeats: effect,
interval, MDE, the paper's effect, verdict; also MLflow metrics ``evidence.<method>.<metric>.*``); a report
(markdown and a PNG chart of F1 vs consistency) to MLflow and ``<lakehouse.root>/reports/consistency/``; each
method's first model registered (common.registry).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Optional

from common.platform.errors import ConfigError
from common.platform.runner.job import JobContext, JobRun, hash_of, job
from common.platform.storage import remove_tree
from jobs import entry_point
from jobs.consistency.consistency_hft import model_jobs, predictions, train_levels, training_stats
from jobs.consistency.consistency_registry import blind_rules, candidate, comparer
from jobs.consistency.consistency_results import (
    EVIDENCE,
    JUDGED,
    PREDICTIONS,
    RESULT_SCHEMA,
    RESULTS,
    judge,
    report,
    summary_table,
    with_lifts,
)

log = logging.getLogger(__name__)

NAME = "consistency-train"


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


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """Train and evaluate every method; returns the mean F1 and consistency rate per method."""
    from common.catalog.blinding import blind_col, load_dictionary
    from common.evaluation.predictions import value
    from common.registry.ship import resume, ship

    cfg = ctx.cfg.consistency
    d_l, pool = tr.read("labeled_train"), tr.read("unlabeled_pool")
    accuracy_test, pairs = tr.read("accuracy_test"), tr.read("consistency_test")
    config_hash = hash_of(asdict(cfg), ctx.cfg.seed)
    if tr.all_written((RESULTS, PREDICTIONS, EVIDENCE), config_hash):
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
    runs = [(method, repeat, model, blind if method == "cs_blind" else None) for method, repeat, _, model in keys]
    cells, found = judge(
        ctx, tr, predictions(runs, accuracy_test, pairs), (PREDICTIONS, EVIDENCE), config_hash, cfg.methods
    )
    rows = []
    for method, repeat, seed, _ in keys:
        f1, consistency = (value(metric, cells.get((method, repeat), {})) for metric in JUDGED)
        n_aug, n_train = trained[method]
        rows.append((tr.run_id, method, repeat, seed, f1, consistency, n_train, n_aug))
        tr.log_metrics({f"{method}.f1_weighted": f1, f"{method}.consistency_rate": consistency}, step=repeat)
        log.info("%s repeat %d: F1 %.4f consistency %.4f", method, repeat, f1, consistency)
    frame = ctx.spark.createDataFrame(with_lifts(rows), RESULT_SCHEMA)
    tr.write(frame, RESULTS, config_hash)
    pdf = frame.toPandas()
    report(ctx, tr, pdf, found)
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
            remove_tree(model.uri)  # later repeats' predictions are kept; their models are not shipped
    means = pdf.groupby("method")[["f1_weighted", "consistency_rate"]].mean()
    return {f"mean.{m}.{k}": v for m, row in means.iterrows() for k, v in row.items()}


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
