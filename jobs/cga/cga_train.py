"""Job ``cga-train`` of the CGA pipeline (:mod:`jobs.cga.cga` holds ``cga-pairs`` and ``cga-generate``,
:mod:`jobs.cga.cga_sweep` the Figure-2 sweep): D_aug = the generated samples with s >= ``cga.threshold`` (sub-sampled
to ``cga.n``) with their source's label, written as ``cga_augmented``; ``cga_test_copies`` (samples that copy an
title of either test, with their reason: never in D_aug); ``train_cga`` (D_L ∪ D_aug); HFT trained
``consistency.repeats`` times and evaluated like ``consistency-train``, its ``cga`` rows put into
``consistency_results`` (replacing earlier ``cga`` rows; lifts vs the baseline rows); its predictions
(``cga_predictions``) paired with the baseline's (``consistency_predictions``) and judged (``cga_evidence``).
Also the tables every CGA training reads (:func:`evaluation_inputs`)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Optional

from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.consistency.consistency_results import RESULTS

log = logging.getLogger(__name__)

TEST_COPIES = "cga_test_copies"
PREDICTIONS = "cga_predictions"  # the cga models' per-row predictions (the baseline's are consistency-train's)
EVIDENCE = "cga_evidence"  # cga against the baseline on the same rows


def _base_results_version(ctx: JobContext) -> int:
    """The ``consistency_results`` version that ``consistency-train`` wrote last (the one CGA rows join):
    the latest version, or the version a later ``cga-train`` commit names as its base."""
    from common.platform.lakehouse.lakehouse import LakehouseError

    if not ctx.lakehouse.exists(RESULTS):
        raise LakehouseError(f"{RESULTS} does not exist: run consistency-train first (CGA joins its baseline)")
    latest = next(c for c in ctx.lakehouse.history(RESULTS) if c.changes_data)
    if latest.lineage and latest.lineage.get("job") == "cga-train":
        return int(latest.lineage["inputs"][RESULTS])
    return latest.version


def baseline_predictions(ctx: JobContext, tr: JobRun):
    """The baseline's per-row predictions CGA pairs with: the latest ``consistency_predictions`` (only
    consistency-train writes it), checked to be on the test versions this run reads (a rerun split with no
    consistency-train since would pair CGA with another test's rows)."""
    from common.platform.errors import InputError
    from jobs.consistency.consistency_results import PREDICTIONS

    if not ctx.lakehouse.exists(PREDICTIONS):
        raise InputError(f"{PREDICTIONS} does not exist: run consistency-train first (CGA pairs with its baseline)")
    rows = tr.read(PREDICTIONS)
    commit = ctx.lakehouse.data_commit(PREDICTIONS, tr.versions[PREDICTIONS])
    made_on = ((commit.lineage if commit else None) or {}).get("inputs", {})
    for test in ("accuracy_test", "consistency_test"):
        if str(made_on.get(test)) != tr.inputs[test]:
            raise InputError(
                f"{PREDICTIONS}: the baseline was scored on {test} v{made_on.get(test)}, this run reads "
                f"v{tr.inputs[test]}: run consistency-train again first"
            )
    return rows


def evaluation_inputs(tr: JobRun):
    """The tables every CGA training reads (their versions become ``tr.inputs``): (D_L, generated, accuracy
    test, consistency pairs). A generated title that copies a title of either test gets the reason
    ``copies a test text`` here, so no D_aug holds it (the test item would be trained on)."""
    from common.data.leakage import mark_test_copies

    accuracy_test, pairs = tr.read("accuracy_test"), tr.read("consistency_test")
    generated = mark_test_copies(tr.read("cga_generated"), "generated_text", accuracy_test, "title")
    for side in ("title_1", "title_2"):
        generated = mark_test_copies(generated, "generated_text", pairs, side)
    return tr.read("labeled_train"), generated, accuracy_test, pairs


@job("cga-train")
def train_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``cga-train``: D_aug at (cga.threshold, cga.n), HFT on D_L ∪ D_aug, the ``cga`` rows of the results."""
    from pyspark.sql import functions as F

    from common.catalog.cga import augmentation_set, training_set
    from common.data.leakage import COPIES_TEST
    from common.evaluation.predictions import value
    from common.models.generator_summary import generator_facts
    from common.registry.candidates import generator_lineage
    from common.registry.ship import resume, ship
    from jobs.consistency.consistency_hft import model_jobs, predictions, train_levels, training_stats
    from jobs.consistency.consistency_registry import candidate, comparer
    from jobs.consistency.consistency_results import (
        JUDGED,
        RESULT_SCHEMA,
        judge,
        reference,
        report,
        summary_table,
        with_lifts,
    )

    cfg = ctx.cfg.cga
    repeats = ctx.cfg.consistency.repeats
    d_l, generated, accuracy_test, pairs = evaluation_inputs(tr)
    existing = tr.read(RESULTS, _base_results_version(ctx))
    baseline_rows = baseline_predictions(ctx, tr)
    config_hash = hash_of(cfg.threshold, cfg.n, asdict(ctx.cfg.consistency.fasttext), repeats, ctx.cfg.seed)
    if tr.already_written(RESULTS, config_hash, latest_only=True) and tr.all_written(
        (PREDICTIONS, EVIDENCE), config_hash
    ):
        resume(ctx, tr, comparer(ctx))  # what an earlier run left unshipped: shipped now, nothing trained
        return None

    tr.write(augmentation_set(generated, d_l, cfg.threshold, cfg.n, ctx.cfg.seed), "cga_augmented", config_hash)
    # One model per generated version: a bounded read.
    versions = [r[0] for r in generated.select("model_version").distinct().limit(3).collect()]
    tr.write_card(
        "cga_augmented",
        generator_facts(cfg.model, cfg.fine_tune, cfg.generation)
        | {"model version": ", ".join(sorted(v for v in versions if v))},
        {"scorer": cfg.scorer, "threshold T": cfg.threshold, "sub-sample N": cfg.n},
    )
    # evaluation_inputs marked the samples that copy a test title, so no D_aug holds them: they are kept,
    # with their reason, in the job's rejects table.
    tr.write(generated.filter(F.col("reason") == COPIES_TEST), TEST_COPIES, config_hash)
    tr.log_metrics({"cga.test_copies_dropped": tr.written_rows(TEST_COPIES)})
    written = tr.write(training_set(d_l, tr.written("cga_augmented")), "train_cga", config_hash)
    n_rows, n_aug, depth = training_stats(ctx, "train_cga", written.version)
    models, jobs = model_jobs(ctx, "train_cga", written.version, depth, "hft_cga", config_hash, repeats)
    train_levels(ctx, tr, jobs)

    base = reference(ctx.cfg.consistency.methods)
    cells, found = judge(
        ctx,
        tr,
        predictions([("cga", repeat, model, None) for repeat, _, model in models], accuracy_test, pairs),
        (PREDICTIONS, EVIDENCE),
        config_hash,
        [base, "cga"],
        baseline_rows.where(F.col("method") == base),
    )
    rows = []
    for repeat, seed, _ in models:
        f1, consistency = (value(metric, cells.get(("cga", repeat), {})) for metric in JUDGED)
        rows.append((tr.run_id, "cga", repeat, seed, f1, consistency, n_rows, n_aug))
        tr.log_metrics({"cga.f1_weighted": f1, "cga.consistency_rate": consistency}, step=repeat)
        log.info("cga repeat %d: F1 %.4f consistency %.4f (D_aug %d)", repeat, f1, consistency, n_aug)
    base = existing.filter(F.col("method") == "baseline").agg(F.avg("f1_weighted"), F.avg("consistency_rate")).first()
    baseline = (base[0], base[1]) if base[0] is not None else None
    cga_rows = ctx.spark.createDataFrame(with_lifts(rows, baseline), RESULT_SCHEMA)
    tr.write(existing.filter(F.col("method") != "cga").unionByName(cga_rows), RESULTS, config_hash)
    pdf = tr.written(RESULTS).toPandas()
    report(ctx, tr, pdf, found)
    log.info("consistency results with CGA:\n%s", summary_table(pdf))
    if ctx.cfg.registry.ships("consistency"):  # CGA's classifier ships as the consistency pipeline's "cga"
        ship(
            ctx,
            tr,
            [
                candidate(
                    ctx,
                    tr,
                    "cga",
                    models[0][2],
                    pdf,
                    [],
                    [r["title"] for r in accuracy_test.select("title").limit(3).collect()],
                    {"cga.config_hash": config_hash, **generator_lineage(cfg.model, versions)},
                )
            ],
            compare_of=comparer(ctx),
        )
    cga = pdf[pdf.method == "cga"]
    return {
        "mean.cga.f1_weighted": cga.f1_weighted.mean(),
        "mean.cga.consistency_rate": cga.consistency_rate.mean(),
        "mean.cga.n_augmented": n_aug,
    }


main = entry_point("cga-train", train_job, __doc__)

if __name__ == "__main__":
    main()
