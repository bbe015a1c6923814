"""The BoostAug jobs (paper 3, METHODS.md section 3): four thin jobs, the third (``boostaug-filter``) in
:mod:`jobs.boostaug.boostaug_filter`, the fourth (``boostaug-evaluate``) in :mod:`jobs.boostaug.boostaug_evaluate`, the
tables they all use in :mod:`jobs.boostaug.boostaug_tables`.

* ``boostaug-splits`` reads ``texts``; labels cut to ``boostaug.label_level``; writes ``boostaug_texts``
  (source_id, text, label, split, fold): the input's split where it has one, else an exact stratified draw
  by seed; training rows dealt into ``boostaug.folds`` stratified folds.
* ``boostaug-augment`` reads ``boostaug_texts``; writes ``boostaug_candidates``: ``2 * boostaug.n_aug``
  candidates per training text and backend (source_id, fold, source_text, label, backend, aug_idx, text).
  The ``contextual`` backend first fine-tunes its infiller on ``boostaug_infill_pairs`` (masked training
  texts), samples a fill per ``boostaug_infill_prompts`` row into ``boostaug_infill_generated``; prompts
  whose generation failed land in ``boostaug_contextual_rejects`` with the reason.
* ``boostaug-filter`` trains one surrogate per boosting fold in Ray tasks (k - 2 folds train it, one
  validates it, it judges the last one), plus the MonoAug surrogate for the ablation; scores every candidate
  with its fold's surrogate (fastText: in Spark; encoder and features: on a Ray Data actor pool) into
  ``boostaug_scored`` (features: from ``boostaug_candidate_embeddings``, written once per candidates version
  and encoder); writes ``boostaug_kept`` (the filtered augmentations, with scores) and ``boostaug_rejects``
  (the rest, each with its ``reason``); candidates = kept + rejected. A change of the filter settings alone
  re-filters the scored version without retraining or rescoring.
* ``boostaug-evaluate`` writes ``boostaug_eval_sets`` (each method's augmentation rows) and trains the
  evaluation classifiers in Ray tasks, ``boostaug.eval.repeats`` seeds each, on the training split plus a
  method's rows, scored on the test split: ``boostaug_results`` (method, backend, model, n_aug, repeat, seed,
  accuracy, macro_f1, n_train, n_augmented) and a report (Table 2 and the Figure 3 curve).
"""

from __future__ import annotations

import logging
from dataclasses import asdict

from common.platform.runner.job import JobContext, JobResult, JobRun, hash_of, job, run_jobs
from jobs import entry_point
from jobs.boostaug.boostaug_evaluate import evaluate_job
from jobs.boostaug.boostaug_filter import AccountingError, filter_job
from jobs.boostaug.boostaug_tables import (  # noqa: F401  (the pipeline's tables, also by this module's name)
    CANDIDATES,
    CONTEXTUAL_REJECTS,
    EMBEDDINGS,
    EVAL_SETS,
    GENERATED,
    INFILL_PAIRS,
    KEPT,
    PROMPTS,
    REJECTS,
    RESULT_SCHEMA,
    RESULTS,
    SCORED,
    TEXTS,
)

log = logging.getLogger(__name__)


@job("boostaug-splits")
def splits_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``boostaug-splits``: source ids, the train/dev/test split and the cross-boosting folds."""
    from pyspark.sql import functions as F

    from common.boostaug.data import assign_splits, cut_label, with_source_ids
    from common.data.leakage import check_no_leak

    cfg = ctx.cfg.boostaug
    texts = tr.read("texts").withColumn(
        "label", cut_label(F.col("label"), cfg.label_level, ctx.cfg.ingest.category_separator)
    )
    config_hash = hash_of(cfg.folds, cfg.dev_fraction, cfg.test_fraction, cfg.label_level, ctx.cfg.seed)
    if tr.already_written(TEXTS, config_hash):
        return {}
    written = tr.write(assign_splits(with_source_ids(texts), cfg, ctx.cfg.seed), TEXTS, config_hash)
    rows = ctx.lakehouse.read(TEXTS, written.version)
    # One row per split: a bounded aggregate.
    counts = {f"{r['split']}": r["count"] for r in rows.groupBy("split").count().collect()}
    check_no_leak(
        rows.filter("split = 'train'"),
        "text",
        rows.filter("split != 'train'"),
        "text",
        f"boostaug-splits: dev and test texts in train ({TEXTS} v{written.version})",
    )
    log.info("boostaug splits: %s", counts)
    return {f"rows.{k}": v for k, v in counts.items()}


def _contextual_candidates(ctx: JobContext, tr: JobRun, train, config_hash: str):
    """The contextual backend: fine-tune (or reuse) the infiller on masked training texts, sample a fill per
    candidate prompt; writes ``boostaug_infill_pairs``, ``boostaug_infill_prompts``,
    ``boostaug_infill_generated`` (+ its quarantine) and ``boostaug_contextual_rejects``. Returns (the
    candidates as a DataFrame of the candidate schema, metrics); checks prompts = candidates + rejected."""
    from pyspark.sql import functions as F

    from common.boostaug.contextual import contextual_candidates, infill_pairs, infill_prompts
    from common.stages.generation import fine_tune_stage, generate_stage

    cfg, seed = ctx.cfg.boostaug, ctx.cfg.seed
    c, p = cfg.contextual, cfg.augment.token_prob
    pairs = tr.write(
        infill_pairs(train, c.pairs_per_text, p, c.max_span_words, c.mask, seed), INFILL_PAIRS, config_hash
    )
    model_hash = hash_of(asdict(c.model), asdict(c.fine_tune), c.pairs_per_text, c.max_span_words, c.mask, p)
    model = fine_tune_stage(
        ctx,
        tr,
        INFILL_PAIRS,
        pairs.version,
        "boostaug_infiller",
        c.model,
        c.fine_tune,
        model_hash,
        {TEXTS: tr.inputs[TEXTS]},
    )
    prompts = tr.write(infill_prompts(train, 2 * cfg.n_aug, p, c.max_span_words, c.mask, seed), PROMPTS, config_hash)
    generated, stats = generate_stage(
        ctx,
        tr,
        PROMPTS,
        prompts.version,
        "prompt_id",
        "prompt",
        model,
        c.generation,
        None,
        GENERATED,
        hash_of(config_hash, model.version),
        dict(tr.inputs),
    )
    rows = contextual_candidates(
        ctx.lakehouse.read(PROMPTS, prompts.version), ctx.lakehouse.read(GENERATED, generated.version)
    )
    rejected = tr.write(rows.filter(F.col("reason").isNotNull()), CONTEXTUAL_REJECTS, config_hash)
    kept = rows.filter(F.col("reason").isNull())
    # One row: a bounded aggregate.
    counts = kept.agg(
        F.count(F.lit(1)).alias("n"), F.sum((F.col("text") == F.col("source_text")).cast("long")).alias("unchanged")
    ).first()
    n_prompts, n_rejected = stats.inputs, ctx.lakehouse.read(CONTEXTUAL_REJECTS, rejected.version).count()
    if counts["n"] + n_rejected != n_prompts:
        raise AccountingError(f"{n_prompts} contextual prompts != {counts['n']} candidates + {n_rejected} rejected")
    log.info(
        "contextual backend: %d prompts = %d candidates + %d rejected (%s); %d candidates equal their source",
        n_prompts,
        counts["n"],
        n_rejected,
        CONTEXTUAL_REJECTS,
        counts["unchanged"] or 0,
    )
    metrics = {
        "contextual.prompts": float(n_prompts),
        "contextual.rejected": float(n_rejected),
        "contextual.unchanged_share": (counts["unchanged"] or 0) / max(counts["n"], 1),
        **stats.metrics(),
    }
    return kept.drop("fill", "reason"), metrics


@job("boostaug-augment")
def augment_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``boostaug-augment``: every backend's 2·Ñ candidates per training text."""
    from pyspark.sql import functions as F

    from common.boostaug.backends import BACKENDS
    from common.boostaug.contextual import BACKEND as CONTEXTUAL
    from common.boostaug.data import candidates

    cfg = ctx.cfg.boostaug
    train = tr.read(TEXTS).filter(F.col("split") == "train")
    contextual = CONTEXTUAL in cfg.backends
    # The contextual section joins the hash only when that backend runs (earlier versions stay valid).
    config_hash = hash_of(
        cfg.backends, cfg.n_aug, asdict(cfg.augment), ctx.cfg.seed, *([asdict(cfg.contextual)] if contextual else [])
    )
    if tr.already_written(CANDIDATES, config_hash):
        return {}
    frames, metrics = [], {}
    if any(b in BACKENDS for b in cfg.backends):
        frames.append(candidates(train, cfg, ctx.cfg.seed))
    if contextual:
        rows, metrics = _contextual_candidates(ctx, tr, train, config_hash)
        frames.append(rows)
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    written = tr.write(union, CANDIDATES, config_hash)
    return {"candidates": float(written.num_rows or 0), **metrics}


def run(ctx: JobContext) -> JobResult:
    """Run the four jobs in order (the ``boostaug`` pipeline without its ingest)."""
    return run_jobs(ctx, "boostaug", (splits_job, augment_job, filter_job, evaluate_job))


main = entry_point("boostaug", run, __doc__)

if __name__ == "__main__":
    main()
