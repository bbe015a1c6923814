"""The query-reformulation jobs (query-reformulation paper, section 4): three thin jobs, ``query-matcher`` in
:mod:`jobs.query.query_matcher`.

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
from typing import Optional

from common.models.generation.served.checks import served_preflight
from common.platform.runner.job import JobContext, JobResult, JobRun, hash_of, job, run_jobs
from jobs import entry_point
from jobs.query.query_matcher import matcher_job
from jobs.query.query_reformulation_inputs import (
    generator_hash,
    interaction_tables,
    queries_to_reformulate,
    reformulations_hash,
)

log = logging.getLogger(__name__)


@job("query-reformulate", preflight=served_preflight(lambda cfg: cfg.query_reformulation.model))
def reformulate_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``query-reformulate``: fine-tune the reformulation T5 and reformulate the collected queries (all, or a
    seeded ``sources`` of them)."""
    from common.models.generation.quality.filtering import FilterSpec
    from common.stages.generation import fine_tune_stage, generate_stage

    cfg = ctx.cfg.query_reformulation
    tr.read("reformulation_pairs", as_input=False)
    v_pairs = tr.versions["reformulation_pairs"]
    pairs_lineage = {"reformulation_pairs": str(tr.data_versions["reformulation_pairs"])}
    tuples, _ = interaction_tables(tr)
    config_hash = reformulations_hash(ctx)
    model = fine_tune_stage(
        ctx,
        tr,
        "reformulation_pairs",
        v_pairs,
        "qr",
        cfg.model,
        cfg.fine_tune,
        generator_hash(ctx),
        pairs_lineage,
        "source_query",
        "target_query",
    )
    inputs = tr.write(queries_to_reformulate(ctx, tuples), "reformulation_inputs", config_hash)
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
    from common.models.generator_summary import generator_facts
    from common.querygraph.reformulation import augment_interactions, usable_reformulations

    tuples, local = interaction_tables(tr)
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


def run(ctx: JobContext) -> JobResult:
    """Run the three jobs in order (the ``query-reformulation`` pipeline without the query-graph jobs)."""
    return run_jobs(ctx, "query-reformulation", (reformulate_job, augment_job, matcher_job))


main = entry_point("query-reformulation", run, __doc__)

if __name__ == "__main__":
    main()
