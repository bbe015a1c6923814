"""Job ``boostaug-filter`` of the BoostAug pipeline (:mod:`jobs.boostaug.boostaug` holds the others): one surrogate per
boosting fold trained in Ray tasks (k - 2 folds train it, one validates it, it judges the last one), plus the MonoAug
surrogate for the ablation; every candidate scored with its fold's surrogate (fastText: in Spark; encoder and
features: on a Ray Data actor pool) into ``boostaug_scored`` (features: from ``boostaug_candidate_embeddings``,
written once per candidates version and encoder); the filters' verdicts as ``boostaug_kept`` and
``boostaug_rejects`` (each with its ``reason``), checked: candidates = kept + rejected."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Optional

from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.boostaug.boostaug_tables import CANDIDATES, EMBEDDINGS, KEPT, REJECTS, SCORED, TEXTS

log = logging.getLogger(__name__)


class AccountingError(RuntimeError):
    """Candidates != kept + rejected: a bug, never a data problem."""


def _surrogates(ctx: JobContext, tr: JobRun, key: str, with_mono: bool) -> tuple[dict[int, str], Optional[str]]:
    """Train the fold surrogates (and the MonoAug one) in Ray tasks; (fold -> model folder, mono folder)."""
    from common.boostaug.classifier import choose_and_fit
    from common.boostaug.feature_surrogate import fit_surrogates
    from common.boostaug.surrogate import fold_plans, mono_plan, surrogate_sources
    from common.models.classifiers.encoder_classifier import fit_surrogate
    from common.models.classifiers.fasttext_training import fasttext_params
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


main = entry_point("boostaug-filter", filter_job, __doc__)

if __name__ == "__main__":
    main()
