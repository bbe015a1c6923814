"""The BoostAug jobs (paper 3, METHODS.md section 3): four thin jobs, the fourth (``boostaug-evaluate``) in
:mod:`jobs.boostaug_evaluate`, the tables both use in :mod:`jobs.boostaug_tables`.

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
from typing import Optional

from common.platform.job import JobContext, JobResult, JobRun, hash_of, job, run_jobs
from jobs import entry_point
from jobs.boostaug_evaluate import evaluate_job
from jobs.boostaug_tables import (  # noqa: F401  (the pipeline's tables, also by this module's name)
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


class AccountingError(RuntimeError):
    """Candidates != kept + rejected: a bug, never a data problem."""


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
    from common.models.generation.stages import fine_tune_stage, generate_stage

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


def _surrogates(ctx: JobContext, tr: JobRun, key: str, with_mono: bool) -> tuple[dict[int, str], Optional[str]]:
    """Train the fold surrogates (and the MonoAug one) in Ray tasks; (fold -> model folder, mono folder)."""
    from common.boostaug.classifier import choose_and_fit
    from common.boostaug.feature_surrogate import fit_surrogates
    from common.boostaug.surrogate import fold_plans, mono_plan, surrogate_sources
    from common.models.classifiers.encoder_classifier import fit_surrogate
    from common.models.classifiers.hft import fasttext_params
    from common.models.classifiers.text_classifier import run_tasks

    cfg = ctx.cfg.boostaug
    kind = cfg.surrogate.kind
    files = ctx.lakehouse.file_uris(TEXTS, tr.versions[TEXTS])
    plans = fold_plans(cfg.folds) + ([mono_plan(cfg.folds)] if with_mono else [])
    jobs = []
    for plan in plans:
        train, validation = surrogate_sources(files, plan)
        name = "mono" if plan.boost is None else f"fold{plan.boost}"
        model_args = (
            {"spec": cfg.surrogate.encoder}
            if kind == "encoder"
            else {}
            if kind == "features"
            else {"params": fasttext_params(cfg.surrogate.fasttext), "epochs": list(cfg.surrogate.epochs)}
        )
        jobs.append(
            {
                "train": train,
                "validation": validation,
                "seed": ctx.cfg.seed,
                "out_dir": ctx.models_dir("boostaug_surrogate", hash_of(key, name)),
                **model_args,
            }
        )
    if kind == "encoder":
        figures = run_tasks(
            ctx.ray(), fit_surrogate, jobs, cfg.surrogate.encoder.num_cpus, cfg.surrogate.encoder.num_gpus, torch=True
        )
    elif kind == "features":
        # One task embeds every training text once and fits every fold's head on those embeddings.
        spec = cfg.surrogate.features
        figures = run_tasks(
            ctx.ray(),
            fit_surrogates,
            [
                {
                    "plans": [{k: j[k] for k in ("train", "validation", "out_dir")} for j in jobs],
                    "spec": spec,
                    "seed": ctx.cfg.seed,
                }
            ],
            spec.num_cpus,
            spec.num_gpus,
            torch=True,
        )[0]
    else:
        figures = run_tasks(ctx.ray(), choose_and_fit, jobs)
    report = {
        ("mono" if p.boost is None else f"fold{p.boost}"): {**f, "plan": asdict(p)} for p, f in zip(plans, figures)
    }
    tr.log_dict(report, "surrogates.json")
    for name, f in report.items():
        choice = (
            f"C {f['C']:g}" if "C" in f else f"MLP, {f['epochs']} epochs" if "hidden" in f else f"{f['epoch']} epochs"
        )
        log.info("surrogate %s: %d rows, %s, validation accuracy %.4f", name, f["rows"], choice, f["val_accuracy"])
    tr.log_metrics(
        {
            f"surrogate.{name}.{k}": f[k]
            for name, f in report.items()
            for k in ("val_accuracy", "val_perplexity_median")
            if k in f
        }
    )
    folds = {p.boost: f["uri"] for p, f in zip(plans, figures) if p.boost is not None}
    mono = next((f["uri"] for p, f in zip(plans, figures) if p.boost is None), None)
    return folds, mono


def _score(ctx: JobContext, tr: JobRun, candidates, with_mono: bool) -> int:
    """Train the surrogates and score every candidate into a version of ``boostaug_scored`` (skipped when
    the same surrogate settings already scored the same candidates); returns that version."""
    from common.boostaug import feature_surrogate
    from common.boostaug.surrogate import score, score_on_ray

    cfg = ctx.cfg.boostaug
    surrogate = cfg.surrogate
    quantile = cfg.filter.perplexity_quantile if surrogate.kind == "encoder" else None
    config_hash = hash_of(surrogate.kind, surrogate.scoring_settings(), quantile, cfg.folds, with_mono, ctx.cfg.seed)
    if not tr.already_written(SCORED, config_hash):
        folds, mono = _surrogates(ctx, tr, hash_of(config_hash, tr.inputs), with_mono)
        if surrogate.kind == "encoder":
            perplexity = "perplexity" in cfg.filter.enabled and surrogate.encoder.mlm_weight > 0
            candidates = ctx.lakehouse.read_ray(CANDIDATES, tr.versions[CANDIDATES])
            tr.write_ray(
                score_on_ray(candidates, folds, mono, surrogate.encoder, perplexity, quantile), SCORED, config_hash
            )
        elif surrogate.kind == "features":
            # Candidates are embedded once per candidates version and encoder; every head judges those rows.
            spec, embedded = surrogate.features, hash_of(surrogate.features.encoder_settings())
            if not tr.already_written(EMBEDDINGS, embedded):
                candidates = ctx.lakehouse.read_ray(CANDIDATES, tr.versions[CANDIDATES])
                tr.write_ray(feature_surrogate.embed_on_ray(candidates, spec), EMBEDDINGS, embedded)
            embeddings = ctx.lakehouse.read_ray(EMBEDDINGS, tr.result.outputs[EMBEDDINGS].version)
            tr.write_ray(feature_surrogate.score_on_ray(embeddings, folds, mono, spec), SCORED, config_hash)
        else:
            tr.write(score(candidates, folds, mono), SCORED, config_hash)
    return tr.result.outputs[SCORED].version


@job("boostaug-filter")
def filter_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``boostaug-filter``: cross-boosted surrogates score every candidate; the filters keep or reject it."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from common.boostaug.filtering import apply_filters, unjudged_labels
    from common.data.leakage import mark_test_copies

    cfg = ctx.cfg.boostaug
    texts = tr.read(TEXTS)
    candidates = tr.read(CANDIDATES)
    with_mono = cfg.eval.ablation_backend in cfg.backends
    config_hash = hash_of(asdict(cfg.surrogate), asdict(cfg.filter), cfg.n_aug, cfg.folds, with_mono, ctx.cfg.seed)
    if tr.all_written([KEPT, REJECTS], config_hash):
        return {}
    scored = ctx.lakehouse.read(SCORED, _score(ctx, tr, candidates, with_mono))
    unjudged = unjudged_labels(texts, cfg.filter.min_class_support)
    if unjudged:
        log.info(
            "boostaug filter: %d classes below min_class_support = %d pass unjudged: %s",
            len(unjudged),
            cfg.filter.min_class_support,
            unjudged[:20],
        )
    # An augmentation that copies a dev or test text would be trained on: rejected as such, whatever the filters
    # said (the unfiltered variants train on rejected rows too).
    judged = apply_filters(scored, cfg.n_aug, cfg.filter, cfg.filter.enabled, unjudged=unjudged)
    judged = mark_test_copies(judged, "text", texts.filter("split != 'train'"), "text", override=True).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        # One row per backend and reason: a bounded aggregate.
        by_reason = judged.groupBy("backend", "reason").count().collect()
        kept = tr.write(judged.filter(F.col("reason").isNull()).drop("reason"), KEPT, config_hash)
        rejected = tr.write(judged.filter(F.col("reason").isNotNull()), REJECTS, config_hash)
    finally:
        judged.unpersist()
    n_in = sum(r["count"] for r in by_reason)
    n_kept = sum(r["count"] for r in by_reason if r["reason"] is None)
    n_candidates = candidates.count()
    if n_in != n_candidates or (
        kept.num_rows is not None
        and rejected.num_rows is not None
        and kept.num_rows + rejected.num_rows != n_candidates
    ):
        raise AccountingError(f"{n_candidates} candidates != {kept.num_rows} kept + {rejected.num_rows} rejected")
    reasons: dict[str, int] = {}
    metrics = {"candidates": float(n_in), "kept": float(n_kept)}
    for backend in cfg.backends:
        total = sum(r["count"] for r in by_reason if r["backend"] == backend)
        kept_b = sum(r["count"] for r in by_reason if r["backend"] == backend and r["reason"] is None)
        metrics[f"{backend}.keep_rate"] = kept_b / total if total else 0.0
    for r in by_reason:
        if r["reason"] is not None:
            # Calibrated perplexity and class-quantile confidence reasons carry their threshold: one reason each.
            name = (
                "perplexity"
                if r["reason"].startswith("perplexity")
                else "confidence <= class quantile"
                if r["reason"].endswith("(class quantile)")
                else r["reason"]
            )
            reasons[name] = reasons.get(name, 0) + r["count"]
    tr.log_dict({"candidates": n_in, "kept": n_kept, "reasons": reasons}, "filter.json")
    tr.write_card(
        KEPT,
        cfg.card_generator(),
        {"surrogate": cfg.surrogate.kind, **asdict(cfg.filter)},
        {"candidates": n_in, **reasons},
    )
    log.info("boostaug filter: %d candidates = %d kept + %d rejected %s", n_in, n_kept, n_in - n_kept, reasons)
    if reasons.get("perplexity", 0) > 0.9 * n_in:
        log.warning(
            "the perplexity filter rejected %d of %d candidates: the surrogate's pseudo-perplexities sit "
            "above boostaug.filter.perplexity_threshold = %g even for fluent text (an encoder without a "
            "pretrained MLM head); set boostaug.filter.perplexity_quantile to calibrate it per surrogate",
            reasons["perplexity"],
            n_in,
            cfg.filter.perplexity_threshold,
        )
    return metrics


def run(ctx: JobContext) -> JobResult:
    """Run the four jobs in order (the ``boostaug`` pipeline without its ingest)."""
    return run_jobs(ctx, "boostaug", (splits_job, augment_job, filter_job, evaluate_job))


main = entry_point("boostaug", run, __doc__)

if __name__ == "__main__":
    main()
