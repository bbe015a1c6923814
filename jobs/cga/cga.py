"""The CGA jobs (consistency paper, Consistent Generative Augmentation): four thin jobs, ``cga-train`` in
:mod:`jobs.cga.cga_train` and ``cga-sweep`` in :mod:`jobs.cga.cga_sweep`.

* ``cga-pairs`` reads ``unlabeled_pool`` (D_U: the catalog groups outside the consistency test); writes
  ``cga_pairs`` (D_pairs: ordered pairs of different versions within a group).
* ``cga-generate`` reads ``cga_pairs``, ``labeled_train``; fine-tunes the generator (``cga.model``) in a Ray
  task (checkpoints and model to MLflow), generates ``cga.generation.n_samples`` samples per D_L title (or
  per title of ``cga_sources``, a seeded sample of ``cga.sources`` of them) on a Ray Data actor pool, scores
  each against its source (BLEU or MiniLM cosine); writes ``cga_generated``
  (every sample with ``score`` and, for empty outputs and copies, ``reason``) and ``cga_generated_quarantine``
  (bad inputs).
* ``cga-train`` reads ``cga_generated``, ``labeled_train``, ``accuracy_test``, ``consistency_test``,
  ``consistency_results``, ``consistency_predictions``; D_aug = samples with s >= ``cga.threshold``
  (sub-sampled to ``cga.n``) with their source's label; writes ``cga_augmented``, ``cga_test_copies`` (samples
  that copy a title of either test, with their reason: never in D_aug), ``train_cga`` (D_L ∪ D_aug); trains HFT
  ``consistency.repeats`` times, evaluates like ``consistency-train`` and puts the ``cga`` rows into
  ``consistency_results`` (replacing earlier ``cga`` rows; lifts vs the baseline rows); ``cga_predictions``
  and ``cga_evidence`` (cga against the baseline's predictions on the same rows).
* ``cga-sweep`` reads the same; one MLflow child run per Figure-2 point (T at fixed N, N at T = 0.7, T
  without sub-sampling); writes ``cga_sweep_results`` and the chart ``reports/cga/figure2.png``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict

from common.models.generation.served.checks import served_preflight
from common.platform.runner.job import JobContext, JobResult, JobRun, hash_of, job, run_jobs, when_set
from jobs import entry_point
from jobs.cga.cga_sweep import sweep_job
from jobs.cga.cga_train import train_job

log = logging.getLogger(__name__)

SOURCES = "cga_sources"  # the D_L titles generated from, with cga.sources set


def _model_hash(ctx: JobContext) -> str:
    cfg = ctx.cfg.cga
    return hash_of(asdict(cfg.model), asdict(cfg.fine_tune), ctx.cfg.seed)


def _generation_hash(ctx: JobContext) -> str:
    cfg = ctx.cfg.cga
    # The encoder engine only changes minilm scores (bleu's hash stays as it was).
    scorer = [cfg.scorer, cfg.scorer_engine] if cfg.scorer == "minilm" else [cfg.scorer]
    return hash_of(_model_hash(ctx), asdict(cfg.generation), *scorer, *when_set(cfg.sources))


@job("cga-pairs")
def pairs_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``cga-pairs``: D_pairs, ordered pairs of different versions within each D_U group."""
    from pyspark.sql import functions as F

    from common.catalog.cga import group_version_pairs

    pairs = group_version_pairs(tr.read("unlabeled_pool"), ctx.cfg.cga.max_pairs_per_group, ctx.cfg.seed)
    tr.write(pairs, "cga_pairs", hash_of(ctx.cfg.cga.max_pairs_per_group, ctx.cfg.seed))
    stats = (
        tr.written("cga_pairs").agg(F.count("*").alias("pairs"), F.countDistinct("group_id").alias("groups")).first()
    )
    return {"pairs": stats["pairs"], "groups_with_pairs": stats["groups"]}


@job("cga-generate", preflight=served_preflight(lambda cfg: cfg.cga.model))
def generate_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``cga-generate``: fine-tune the generator on D_pairs, generate n samples per D_L title, score them."""
    from common.models.generation.quality.filtering import FilterSpec
    from common.stages.generation import fine_tune_stage, generate_stage

    cfg = ctx.cfg.cga
    tr.read("cga_pairs")
    tr.read("labeled_train")
    v_pairs, v_train = tr.versions["cga_pairs"], tr.versions["labeled_train"]
    model = fine_tune_stage(
        ctx,
        tr,
        "cga_pairs",
        v_pairs,
        "cga",
        cfg.model,
        cfg.fine_tune,
        _model_hash(ctx),
        {"cga_pairs": tr.inputs["cga_pairs"]},
    )
    scorer = FilterSpec(scorer=cfg.scorer, threshold=None, encoder_engine=cfg.scorer_engine)
    source, v_source = "labeled_train", v_train
    if cfg.sources is not None:
        from common.data.sampling import seeded_first

        sample = seeded_first(tr.read("labeled_train"), cfg.sources, ctx.cfg.seed, ["item_id"])
        source, v_source = (
            SOURCES,
            tr.write(
                sample, SOURCES, hash_of(cfg.sources, ctx.cfg.seed), {"labeled_train": tr.inputs["labeled_train"]}
            ).version,
        )
    written, stats = generate_stage(
        ctx,
        tr,
        source,
        v_source,
        "item_id",
        "title",
        model,
        cfg.generation,
        scorer,
        "cga_generated",
        _generation_hash(ctx),
        dict(tr.inputs),
    )
    tr.result.outputs["cga_generated"] = written
    return stats.metrics()


def run(ctx: JobContext) -> JobResult:
    """Run the four CGA jobs in order (the ``cga`` pipeline without its consistency prerequisites)."""
    return run_jobs(ctx, "cga", (pairs_job, generate_job, train_job, sweep_job))


main = entry_point("cga", run, __doc__)

if __name__ == "__main__":
    main()
