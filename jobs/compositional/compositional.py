"""The compositional multi-label augmentation jobs (paper 4, METHODS.md section 4): five thin jobs, the third
(``compositional-generate``) in :mod:`jobs.compositional.compositional_generate`, the fifth
(``compositional-evaluate``) in
:mod:`jobs.compositional.compositional_evaluate`, the tables they all use in
:mod:`jobs.compositional.compositional_tables`.

* ``compositional-split`` writes the compositional split of ``multilabel``: ``cg_train``, ``cg_support`` and
  ``cg_test`` (M label compositions on the test side, none of them in training; N_s test-side examples as
  the support set), and its iid twin of the same sizes, ``iid_train`` and ``iid_test``.
* ``compositional-labels`` fits the label-composition generator P(y) on the support set's label sets and
  samples novel ones (not in training) until ``qc.overgenerate x qc.target`` draws were accepted:
  ``cg_label_sets`` (composition, labels, draws, probability).
* ``compositional-generate`` writes one prompt per accepted draw and generator (``cg_prompts``), the Concat
  texts (Spark), fine-tunes the seq2seq generators (``t5_labels``, ``label_prefix``) on train ∪ support
  (``cg_gen_pairs``; concurrent Ray tasks, reused by key) and generates on one Ray Data actor pool
  (``cg_generated``): ``cg_candidates``, one row per prompt, with a reason where nothing usable came out.
* ``compositional-qc`` trains the multi-label QC classifier on train ∪ support in a Ray task, predicts
  every candidate's labels (``cg_qc_predictions``), and keeps each generator's ``qc.target`` candidates with
  the highest Jaccard(predicted, intended): ``cg_synthetic``; the rest go to ``cg_rejects`` with their
  Jaccard and reason (prompts = synthetic + rejects).
* ``compositional-evaluate`` trains the multi-label classifiers in Ray tasks (``no_aug`` and each generator
  on CG, ``no_aug`` on iid, each generator also at the ``eval.curve`` shares of its synthetic texts; R seeds),
  writes their test predictions (``compositional_predictions``) and the per-run metrics as Spark aggregates
  (``compositional_results``), and a report (Table 2, the iid/CG gap, the Figure-4 curve).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict
from typing import Optional

from common.models.classifiers.multilabel import classifier_params, fit_and_predict_many
from common.platform.errors import InputError
from common.platform.runner.job import JobContext, JobResult, JobRun, hash_of, job, run_jobs
from jobs import entry_point
from jobs.compositional.compositional_evaluate import evaluate_job
from jobs.compositional.compositional_generate import generate_job
from jobs.compositional.compositional_tables import (  # noqa: F401  (the pipeline's tables, also by this module's name)
    CANDIDATES,
    CG_SUPPORT,
    CG_TEST,
    CG_TRAIN,
    GENERATED,
    IID_TEST,
    IID_TRAIN,
    LABEL_SETS,
    MULTILABEL,
    PAIRS,
    PREDICTIONS,
    PROMPTS,
    QC_PREDICTIONS,
    REJECTS,
    RESULTS,
    SEQ2SEQ,
    SYNTHETIC,
)

log = logging.getLogger(__name__)


class DuplicateExampleError(InputError):
    """Two rows share an example_id: splits and predictions are per example, so ids must be unique."""


@job("compositional-split")
def split_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``compositional-split``: the CG split (train, support, test) and the iid split of the same sizes."""
    from pyspark.sql import functions as F

    from common.compositional.split import cg_split, iid_split, test_compositions
    from common.data.leakage import check_no_leak

    cfg = ctx.cfg.compositional.split
    rows = tr.read(MULTILABEL)
    config_hash = hash_of(asdict(cfg), ctx.cfg.seed)
    tables = [CG_TRAIN, CG_SUPPORT, CG_TEST, IID_TRAIN, IID_TEST]
    if tr.all_written(tables, config_hash):
        return {}
    dupes = [r["example_id"] for r in rows.groupBy("example_id").count().filter(F.col("count") > 1).limit(5).collect()]
    if dupes:
        raise DuplicateExampleError(
            f"{MULTILABEL}: example_id is not unique (e.g. {', '.join(map(repr, dupes))}); "
            "give each row its own id (inputs.multilabel.rename can map an id column), or "
            "keep "
            "ingest.dedup.exact on so that ingest quarantines the copies"
        )
    # M rows: bounded by the config.
    chosen = ctx.spark.createDataFrame(
        test_compositions(rows, cfg, ctx.cfg.seed).collect(), "composition string, examples long"
    )
    side = chosen.agg(F.count(F.lit(1)), F.sum("examples")).first()
    if side[0] < cfg.compositions or (side[1] or 0) <= cfg.support:
        raise InputError(
            f"compositional.split: only {side[0]} label compositions of >= {cfg.min_labels} labels hold "
            f">= {cfg.min_examples} examples ({side[1] or 0} examples in all; {cfg.compositions} "
            f"compositions and more than {cfg.support} examples are needed): lower "
            "compositional.split.compositions, min_examples or support"
        )
    cg = cg_split(rows, chosen, cfg.support, ctx.cfg.seed)
    written = {
        name: tr.write(cg[part], name, config_hash)
        for name, part in ((CG_TRAIN, "train"), (CG_SUPPORT, "support"), (CG_TEST, "test"))
    }
    sizes = {name: ctx.lakehouse.read(name, w.version).count() for name, w in written.items()}
    iid = iid_split(rows, sizes[CG_TRAIN] + sizes[CG_SUPPORT], sizes[CG_TEST], ctx.cfg.seed)
    tr.write(iid["train"], IID_TRAIN, config_hash)
    tr.write(iid["test"], IID_TEST, config_hash)
    # Ingest keeps one copy of each text; a split that still put one on both sides is refused.
    for train, test in ((CG_TRAIN, CG_TEST), (CG_SUPPORT, CG_TEST), (IID_TRAIN, IID_TEST)):
        check_no_leak(tr.written(train), "text", tr.written(test), "text", f"compositional-split: {test} in {train}")
    # Labels on the test side that training never shows can only be guessed: worth a warning.
    train_labels = ctx.lakehouse.read(CG_TRAIN, written[CG_TRAIN].version).select(F.explode("labels").alias("l"))
    test_labels = ctx.lakehouse.read(CG_TEST, written[CG_TEST].version).select(F.explode("labels").alias("l"))
    unseen = [r["l"] for r in test_labels.distinct().join(train_labels.distinct(), "l", "left_anti").collect()]
    if unseen:
        log.warning("test labels %s never occur in cg_train: the split leaves them to the support set alone", unseen)
    compositions = [r["composition"] for r in chosen.orderBy("composition").collect()]
    log.info(
        "CG split: %d test compositions %s; train %d, support %d, test %d",
        len(compositions),
        compositions,
        sizes[CG_TRAIN],
        sizes[CG_SUPPORT],
        sizes[CG_TEST],
    )
    tr.log_dict({"compositions": compositions, **sizes}, "split.json")
    return {f"{name}.rows": float(n) for name, n in sizes.items()} | {"compositions": float(len(compositions))}


@job("compositional-labels")
def labels_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``compositional-labels``: P(y) fit on the support set, sampled for novel label sets."""
    from pyspark.sql import functions as F

    from common.compositional.labels import MarkovLabelModel, sample_novel
    from common.compositional.split import JOIN, label_vocabulary

    cfg = ctx.cfg.compositional
    support, train = tr.read(CG_SUPPORT), tr.read(CG_TRAIN)
    config_hash = hash_of(asdict(cfg.label_generator), cfg.qc.target, cfg.qc.overgenerate, ctx.cfg.seed)
    if tr.already_written(LABEL_SETS, config_hash):
        return {}
    # Bounded: the support set (N_s rows), the label vocabulary and the training compositions (at most
    # one per subset of the vocabulary that occurs).
    vocabulary = label_vocabulary(train.unionByName(support))
    seen = {tuple(r["labels"]) for r in train.select("labels").distinct().collect()}
    model = MarkovLabelModel(vocabulary, cfg.label_generator.smoothing).fit(
        r["labels"] for r in support.select("labels").collect()
    )
    target = math.ceil(cfg.qc.target * cfg.qc.overgenerate)
    accepted, draws = sample_novel(
        model, seen, target, cfg.label_generator.max_labels, cfg.label_generator.max_draws, ctx.cfg.seed
    )
    if not accepted:
        raise InputError(f"compositional-labels: none of {draws} label sets drawn was new to the training set")
    rows = [(JOIN.join(labels), list(labels), n, model.probability(labels)) for labels, n in sorted(accepted.items())]
    tr.write(
        ctx.spark.createDataFrame(rows, "composition string, labels array<string>, draws long, probability double"),
        LABEL_SETS,
        config_hash,
    )
    support_sets = {
        r["composition"]
        for r in support.select(F.array_join("labels", JOIN).alias("composition")).distinct().collect()
    }
    in_support = sum(n for labels, n in accepted.items() if JOIN.join(labels) in support_sets)
    log.info(
        "P(y): %d draws, %d novel (%d distinct label sets; %d draws of support-set compositions)",
        draws,
        sum(accepted.values()),
        len(accepted),
        in_support,
    )
    tr.log_dict({"vocabulary": vocabulary, "transitions": model.transitions.tolist()}, "label_model.json")
    return {
        "draws": float(draws),
        "accepted": float(sum(accepted.values())),
        "label_sets": float(len(accepted)),
        "support_composition_share": in_support / max(1, sum(accepted.values())),
    }


@job("compositional-qc")
def qc_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``compositional-qc``: rank each generator's candidates by Jaccard(predicted, intended), keep the top K."""
    from pyspark.sql import functions as F

    from common.compositional.evaluation import qc_cut
    from common.data.leakage import mark_test_copies
    from common.models.classifier_config import used_settings

    cfg, qc = ctx.cfg.compositional, ctx.cfg.compositional.qc
    cands, _, _ = tr.read(CANDIDATES), tr.read(CG_TRAIN), tr.read(CG_SUPPORT)
    learned = dict(tr.inputs)  # what the QC classifier learns from and judges
    # Read before the check, as the kept and rejected tables' lineage names them: a rerun trains nothing.
    tests = tr.read(CG_TEST).select("text").unionByName(tr.read(IID_TEST).select("text"))
    config_hash = hash_of(used_settings(qc, [qc.model]), cfg.eval.validation_fraction, ctx.cfg.seed)
    if tr.all_written([SYNTHETIC, REJECTS], config_hash):
        return None
    files = {t: ctx.lakehouse.file_uris(t, tr.versions[t]) for t in (CANDIDATES, CG_TRAIN, CG_SUPPORT)}
    ds = fit_and_predict_many(
        ctx.ray(),
        [
            {
                "train": [(files[CG_TRAIN], None), (files[CG_SUPPORT], None)],
                "predict": [(files[CANDIDATES], None)],
                "kind": qc.model,
                "params": classifier_params(qc.model, qc.fasttext, qc.encoder),
                "seed": ctx.cfg.seed,
                "validation_fraction": cfg.eval.validation_fraction,
                "keys": {"model": qc.model},
            }
        ],
        qc.encoder,
    )
    predictions = ctx.lakehouse.read(QC_PREDICTIONS, tr.write_ray(ds, QC_PREDICTIONS, config_hash, learned).version)
    # A candidate that copies a test text (CG or iid) would be trained on: rejected with that reason.
    cut = mark_test_copies(qc_cut(cands, predictions, cfg.qc.target, ctx.cfg.seed), "text", tests, "text")
    columns = ["method", "example_id", "composition", "labels", "text", "predicted", "jaccard", "rank"]
    kept = tr.write(cut.filter(F.col("reason").isNull()).select(*columns), SYNTHETIC, config_hash)
    rejected = tr.write(cut.filter(F.col("reason").isNotNull()).select(*columns, "reason"), REJECTS, config_hash)
    synth = ctx.lakehouse.read(SYNTHETIC, kept.version)
    n_kept, n_rejected, n_cands = synth.count(), ctx.lakehouse.read(REJECTS, rejected.version).count(), cands.count()
    if n_kept + n_rejected != n_cands:
        raise RuntimeError(f"{n_cands} candidates != {n_kept} synthetic + {n_rejected} rejects")
    # One row per method: bounded.
    stats = {
        r["method"]: (r["n"], r["jaccard"])
        for r in synth.groupBy("method").agg(F.count(F.lit(1)).alias("n"), F.avg("jaccard").alias("jaccard")).collect()
    }
    # Every candidate's Jaccard was computed by the cut; kept and rejected rows together are all of them.
    every = synth.select("method", "jaccard").unionByName(
        ctx.lakehouse.read(REJECTS, rejected.version).select("method", "jaccard")
    )
    all_stats = {
        r["method"]: r["jaccard"] for r in every.groupBy("method").agg(F.avg("jaccard").alias("jaccard")).collect()
    }
    for method, (n, jac) in sorted(stats.items()):
        log.info("QC %-12s kept %d, mean Jaccard %.3f (all candidates %.3f)", method, n, jac, all_stats.get(method, 0))
    tr.write_card(
        SYNTHETIC,
        *cfg.card_facts(),
        {"candidates": n_cands, "rejects": n_rejected} | {f"{m} kept": n for m, (n, _) in stats.items()},
    )
    return (
        {f"{m}.kept": float(n) for m, (n, _) in stats.items()}
        | {f"{m}.kept_jaccard": float(j) for m, (_, j) in stats.items()}
        | {f"{m}.candidate_jaccard": float(j or 0) for m, j in all_stats.items()}
        | {"rejects": float(n_rejected)}
    )


def run(ctx: JobContext) -> JobResult:
    """Run the five jobs in order (the ``compositional`` pipeline without its ingest)."""
    return run_jobs(ctx, "compositional", (split_job, labels_job, generate_job, qc_job, evaluate_job))


main = entry_point("compositional", run, __doc__)

if __name__ == "__main__":
    main()
