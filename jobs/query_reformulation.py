"""The query-reformulation jobs (query-reformulation paper, section 4): one module, three thin jobs.

* ``query-reformulate`` reads ``reformulation_pairs``, ``query_interactions`` and
  ``query_interactions_quarantine``; fine-tunes T5 on the pairs in a Ray task (checkpoints and model to
  MLflow); writes ``reformulation_inputs`` (every distinct collected query, or a seeded sample of
  ``query_reformulation.sources`` of them) and ``query_reformulations``
  (``query_reformulation.generation.n_samples`` per query, scored by BLEU against the query; empty outputs
  and copies carry a ``reason``) with ``query_reformulations_quarantine`` (bad inputs).
* ``query-augment`` reads the interaction tables and ``query_reformulations``; attaches every
  reformulation of a collected tuple's query to its product and interaction, re-applies the activity
  threshold; writes ``augmented_interactions`` and ``augmented_interactions_rejected``; reports the
  growth factor (augmented tuples / original tuples over the threshold).
* ``query-matcher`` (downstream check) splits the queries (seeded hash, ``matcher.holdout_fraction``),
  fine-tunes a second T5 on the pairs whose queries are both outside the hold-out and augments the training
  queries only (all, or a seeded ``sources`` of them; so nothing about a held-out query reaches training),
  trains fastText matchers over product ids on the original and on the augmented training log
  (``matcher.repeats`` seeds each), and writes
  ``matcher_results`` (precision/recall/hit @k on the held-out queries, one row per variant, k and seed) and
  ``matcher_test_copies`` (reformulations that are a held-out query, with their reason: never trained on).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from common.models.generation.served.checks import served_preflight
from common.platform.job import JobContext, JobResult, JobRun, hash_of, job, run_jobs, when_set
from common.platform.results_pages import fmt_mean
from jobs import entry_point

log = logging.getLogger(__name__)

MATCHER_RESULTS = "matcher_results"
# One row per (variant, k, repeat): the matcher trained on the original or the augmented log with seed ``seed``.
MATCHER_SCHEMA = (
    "run_id string, variant string, k int, repeat int, seed long, precision double, recall double, "
    "hit_rate double, n_queries long, n_train_tuples long"
)


def _model_hash(ctx: JobContext) -> str:
    cfg = ctx.cfg.query_reformulation
    return hash_of(asdict(cfg.model), asdict(cfg.fine_tune), ctx.cfg.seed)


def _generation_hash(ctx: JobContext) -> str:
    cfg = ctx.cfg.query_reformulation
    return hash_of(_model_hash(ctx), asdict(cfg.generation), *when_set(cfg.sources))


def _inputs(ctx: JobContext, tuples):
    """The distinct queries of ``tuples`` to reformulate: all of them, or ``query_reformulation.sources`` of them
    (a seeded sample, the same on every run)."""
    from common.data.sampling import seeded_first
    from common.querygraph.reformulation import distinct_queries

    queries, n = distinct_queries(tuples), ctx.cfg.query_reformulation.sources
    return queries if n is None else seeded_first(queries, n, ctx.cfg.seed, ["query"])


def _interaction_tables(tr: JobRun):
    """(collected tuples, local tuples over the threshold); their versions become ``tr.inputs``."""
    from common.querygraph.reformulation import collected_tuples

    kept, quarantine = tr.read("query_interactions"), tr.read("query_interactions_quarantine")
    return collected_tuples(kept, quarantine), kept


@job("query-reformulate", preflight=served_preflight(lambda cfg: cfg.query_reformulation.model))
def reformulate_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``query-reformulate``: fine-tune the reformulation T5 and reformulate the collected queries (all, or a
    seeded ``sources`` of them)."""
    from common.models.generation.filtering import FilterSpec
    from common.models.generation.stages import fine_tune_stage, generate_stage

    cfg = ctx.cfg.query_reformulation
    tr.read("reformulation_pairs", as_input=False)
    v_pairs = tr.versions["reformulation_pairs"]
    pairs_lineage = {"reformulation_pairs": str(tr.data_versions["reformulation_pairs"])}
    tuples, _ = _interaction_tables(tr)
    config_hash = _generation_hash(ctx)
    model = fine_tune_stage(
        ctx,
        tr,
        "reformulation_pairs",
        v_pairs,
        "qr",
        cfg.model,
        cfg.fine_tune,
        _model_hash(ctx),
        pairs_lineage,
        "source_query",
        "target_query",
    )
    inputs = tr.write(_inputs(ctx, tuples), "reformulation_inputs", config_hash)
    tr.result.outputs["query_reformulations"], stats = generate_stage(
        ctx,
        tr,
        "reformulation_inputs",
        inputs.version,
        "query",
        "query",
        model,
        cfg.generation,
        FilterSpec(scorer="bleu", threshold=None),
        "query_reformulations",
        config_hash,
        {**tr.inputs, **pairs_lineage},
    )
    return stats.metrics()


@job("query-augment")
def augment_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``query-augment``: the augmented interaction log, re-thresholded, with its growth factor."""
    from common.models.config import generator_facts
    from common.querygraph.reformulation import augment_interactions, usable_reformulations

    tuples, local = _interaction_tables(tr)
    generated = tr.read("query_reformulations")
    config_hash = hash_of(asdict(ctx.cfg.query_graph))
    if tr.all_written(["augmented_interactions", "augmented_interactions_rejected"], config_hash):
        return None
    # Two writes and the accounting read the reformulations: normalise them (a Python UDF) once.
    refs = usable_reformulations(generated).persist()
    try:
        augmented = augment_interactions(tuples, refs, ctx.cfg.query_graph)
        kept = tr.write(augmented.kept, "augmented_interactions", config_hash)
        rejected = tr.write(augmented.rejected, "augmented_interactions_rejected", config_hash)
        metrics = growth_accounting(ctx, tuples, local, augmented.reformulated, kept.version, rejected.version)
        qr, graph = ctx.cfg.query_reformulation, ctx.cfg.query_graph
        tr.write_card(
            "augmented_interactions",
            generator_facts(qr.model, qr.fine_tune, qr.generation),
            {
                "activity thresholds": graph.activity_threshold,
                "default activity threshold": graph.default_activity_threshold,
            },
            {k: metrics[k] for k in ("local_tuples", "augmented_tuples", "rejected_tuples", "growth_factor")},
        )
    finally:
        refs.unpersist()
    log.info(
        "query augmentation: %d -> %d tuples over the threshold (growth factor %.2fx)",
        metrics["local_tuples"],
        metrics["augmented_tuples"],
        metrics["growth_factor"],
    )
    return metrics


def growth_accounting(
    ctx: JobContext, tuples, local, reformulated, kept_version: int, rejected_version: int
) -> dict[str, float]:
    """The growth figures of an augmentation; fails when aggregated tuples != kept + rejected.

    collected_tuples (before the threshold), local_tuples (over it: the original training data),
    reformulated_tuples (attached reformulations, before aggregation), aggregated_tuples, augmented_tuples
    (kept) by origin, rejected_tuples, growth_factor = augmented / local.
    """
    from pyspark.sql import functions as F

    kept = ctx.lakehouse.read("augmented_interactions", kept_version)
    rejected = ctx.lakehouse.read("augmented_interactions_rejected", rejected_version)
    n_kept, n_rejected = kept.count(), rejected.count()
    aggregated = tuples.unionByName(reformulated).select("query", "product_id", "interaction").distinct().count()
    if aggregated != n_kept + n_rejected:
        raise RuntimeError(f"query-augment: {aggregated} aggregated tuples != {n_kept} kept + {n_rejected} rejected")
    origins = {r["origin"]: r["n"] for r in kept.groupBy("origin").agg(F.count("*").alias("n")).collect()}
    n_local = local.count()
    return {
        "collected_tuples": float(tuples.count()),
        "local_tuples": float(n_local),
        "reformulated_tuples": float(reformulated.count()),
        "aggregated_tuples": float(aggregated),
        "augmented_tuples": float(n_kept),
        "rejected_tuples": float(n_rejected),
        "augmented_original": float(origins.get("original", 0)),
        "augmented_lifted": float(origins.get("lifted", 0)),
        "augmented_new": float(origins.get("new", 0)),
        "growth_factor": n_kept / n_local if n_local else 0.0,
    }


@job("query-matcher", preflight=served_preflight(lambda cfg: cfg.query_reformulation.model))
def matcher_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``query-matcher``: fastText matcher on the original vs the augmented log, precision@k on held-out queries."""
    from pyspark.sql import functions as F

    from common.data.leakage import COPIES_TEST, mark_test_copies
    from common.models.classifiers.hft import HFTModel, HFTTrainerPool, level_jobs
    from common.models.generation.filtering import FilterSpec
    from common.models.generation.stages import fine_tune_stage, generate_stage
    from common.querygraph.matcher import evaluate, fasttext_config, is_holdout, relevant_products
    from common.querygraph.reformulation import augment_interactions, usable_reformulations

    cfg = ctx.cfg.query_reformulation
    m = cfg.matcher
    pairs = tr.read("reformulation_pairs")
    tuples, local = _interaction_tables(tr)
    # Each output is keyed by what it depends on: the split's tables by the hold-out (the model's key adds the
    # generator), the reformulations by the generator and decoding, the matchers by all of the matcher section.
    # Another decoding regenerates without a fine-tune; other fastText settings or repeats retrain matchers only.
    split_hash = hash_of(m.holdout_fraction, asdict(ctx.cfg.query_graph), ctx.cfg.seed)
    generation_hash = hash_of(_generation_hash(ctx), split_hash)
    config_hash = hash_of(generation_hash, asdict(m))
    if tr.already_written(MATCHER_RESULTS, config_hash):
        return None
    held = is_holdout(F.col("query"), m.holdout_fraction, ctx.cfg.seed)
    train_tuples = tuples.filter(~held)
    # No trace of a held-out query may reach training: not as a pair side, not as a generation input.
    train_pairs = pairs.filter(
        ~is_holdout(F.col("source_query"), m.holdout_fraction, ctx.cfg.seed)
        & ~is_holdout(F.col("target_query"), m.holdout_fraction, ctx.cfg.seed)
    )
    out = tr.result.outputs
    tr.write(train_pairs, "matcher_pairs", split_hash)
    model = fine_tune_stage(
        ctx,
        tr,
        "matcher_pairs",
        out["matcher_pairs"].version,
        "qr_matcher",
        cfg.model,
        cfg.fine_tune,
        _model_hash(ctx),
        {"matcher_pairs": str(out["matcher_pairs"].version)},
        "source_query",
        "target_query",
    )
    inputs_hash = split_hash if cfg.sources is None else hash_of(split_hash, cfg.sources)  # unbudgeted: as before
    tr.write(_inputs(ctx, train_tuples), "matcher_inputs", inputs_hash)
    out["matcher_reformulations"], _ = generate_stage(
        ctx,
        tr,
        "matcher_inputs",
        out["matcher_inputs"].version,
        "query",
        "query",
        model,
        cfg.generation,
        FilterSpec(scorer="bleu", threshold=None),
        "matcher_reformulations",
        generation_hash,
        {**tr.inputs, "matcher_pairs": str(out["matcher_pairs"].version)},
    )
    # A reformulation that is itself a held-out query would put that query into training: dropped, with its
    # reason, into matcher_test_copies.
    generated = mark_test_copies(
        tr.written("matcher_reformulations"), "generated_text", local.filter(held).select("query"), "query"
    )
    tr.write(generated.filter(F.col("reason") == COPIES_TEST), "matcher_test_copies", generation_hash)
    copies = tr.written_rows("matcher_test_copies")
    augmented = augment_interactions(train_tuples, usable_reformulations(generated), ctx.cfg.query_graph).kept
    variants = {
        "original": local.filter(~held).select("query", "product_id"),
        "augmented": augmented.select("query", "product_id"),
    }
    n_train, jobs, keys = {}, [], []
    for variant, frame in variants.items():
        table = f"matcher_train_{variant}"
        tr.write(frame, table, config_hash)
        n_train[variant] = tr.written(table).count()
        files = ctx.lakehouse.file_uris(table, out[table].version)
        # One matcher per seed: fastText's ranking moves between seeds by about as much as the two logs differ.
        for repeat in range(m.repeats):
            seed = ctx.cfg.seed + repeat
            folder = ctx.models_dir(f"matcher_{variant}", hash_of(config_hash, tr.inputs, seed))
            jobs += level_jobs(files, 1, fasttext_config(m), seed, folder, text_col="query", label_col="product_id")
            keys.append((variant, repeat, seed, folder))
    HFTTrainerPool(ctx.ray(), size=2).train(jobs)
    heldout = relevant_products(local.filter(held)).persist()
    rows = []
    try:
        for variant, repeat, seed, folder in keys:
            scores = evaluate(heldout, HFTModel(folder, 1), m.ks)
            means = (
                scores.agg(
                    *[F.avg(c).alias(c) for c in scores.columns if c != "query"], F.count("*").alias("n_queries")
                )
                .first()
                .asDict()
            )
            for k in sorted(set(m.ks)):
                rows.append(
                    (
                        tr.run_id,
                        variant,
                        k,
                        repeat,
                        seed,
                        means[f"precision_at_{k}"],
                        means[f"recall_at_{k}"],
                        means[f"hit_at_{k}"],
                        int(means["n_queries"]),
                        n_train[variant],
                    )
                )
            log.info(
                "matcher %s, seed %d (%d training tuples): %s",
                variant,
                seed,
                n_train[variant],
                ", ".join(f"P@{k} {means[f'precision_at_{k}']:.4f}" for k in sorted(set(m.ks))),
            )
    finally:
        heldout.unpersist()
    frame = ctx.spark.createDataFrame(rows, MATCHER_SCHEMA)
    tr.write(frame, MATCHER_RESULTS, config_hash)
    pdf = frame.toPandas()
    matcher_report(ctx, tr, pdf)
    means = pdf.groupby(["variant", "k"])[["precision", "recall"]].mean()
    tr.log_metrics({f"{variant}.recall_at_{k}": r.recall for (variant, k), r in means.iterrows()})
    return {f"{variant}.precision_at_{k}": r.precision for (variant, k), r in means.iterrows()} | {
        "test_copies_dropped": float(copies)
    }


def matcher_report(ctx: JobContext, tr, pdf) -> None:
    """A markdown table of precision/recall/hit @k, original vs augmented, mean ± std over the matcher's seeds;
    logged to MLflow."""
    lines = [
        "| variant | training tuples | k | precision@k | recall@k | hit@k | held-out queries | seeds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    agg = pdf.groupby(["k", "variant"]).agg(
        tuples=("n_train_tuples", "max"),
        queries=("n_queries", "max"),
        seeds=("seed", "nunique"),
        **{f"{c}_{f}": (c, f) for c in ("precision", "recall", "hit_rate") for f in ("mean", "std")},
    )
    for (k, variant), r in agg.sort_index(ascending=[True, False]).iterrows():
        cells = [
            fmt_mean(r[f"{c}_mean"], None if r["seeds"] < 2 else r[f"{c}_std"])
            for c in ("precision", "recall", "hit_rate")
        ]
        lines.append(
            f"| {variant} | {int(r.tuples)} | {k} | {' | '.join(cells)} | {int(r.queries)} | {int(r.seeds)} |"
        )
    text = "# Query -> product matcher: original vs augmented log\n\n" + "\n".join(lines) + "\n"
    path = Path(ctx.reports_dir("query_reformulation")) / "matcher.md"
    path.write_text(text, encoding="utf-8")
    tr.log_artifact(str(path), "report")
    print("\n".join(lines))


def run(ctx: JobContext) -> JobResult:
    """Run the three jobs in order (the ``query-reformulation`` pipeline without the query-graph jobs)."""
    return run_jobs(ctx, "query-reformulation", (reformulate_job, augment_job, matcher_job))


main = entry_point("query-reformulation", run, __doc__)

if __name__ == "__main__":
    main()
