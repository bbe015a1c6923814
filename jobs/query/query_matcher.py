"""Job ``query-matcher`` of the query-reformulation pipeline (the downstream check;
:mod:`jobs.query.query_reformulation`
holds the other two): the queries split by a seeded hash (``matcher.holdout_fraction``); a second T5 fine-tuned on
the pairs whose queries are both outside the hold-out, augmenting the training queries only (all, or a seeded
``sources`` of them; so nothing about a held-out query reaches training); fastText matchers over product ids trained
on the original and on the augmented training log (``matcher.repeats`` seeds each). Writes ``matcher_results``
(precision/recall/hit @k on the held-out queries, one row per variant, k and seed), ``matcher_test_copies``
(reformulations that are a held-out query, with their reason: never trained on) and the matcher report."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from common.models.generation.served.checks import served_preflight
from common.platform.reports.results_pages import fmt_mean
from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.query.query_reformulation_inputs import (
    generator_hash,
    interaction_tables,
    queries_to_reformulate,
    reformulations_hash,
)

log = logging.getLogger(__name__)

MATCHER_RESULTS = "matcher_results"
# One row per (variant, k, repeat): the matcher trained on the original or the augmented log with seed ``seed``.
MATCHER_SCHEMA = (
    "run_id string, variant string, k int, repeat int, seed long, precision double, recall double, "
    "hit_rate double, n_queries long, n_train_tuples long"
)


@job("query-matcher", preflight=served_preflight(lambda cfg: cfg.query_reformulation.model))
def matcher_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``query-matcher``: fastText matcher on the original vs the augmented log, precision@k on held-out queries."""
    from pyspark.sql import functions as F

    from common.data.leakage import COPIES_TEST, mark_test_copies
    from common.models.classifiers.hft import HFTModel, HFTTrainerPool, level_jobs
    from common.models.generation.quality.filtering import FilterSpec
    from common.querygraph.matcher import evaluate, fasttext_config, is_holdout, relevant_products
    from common.querygraph.reformulation import augment_interactions, usable_reformulations
    from common.stages.generation import fine_tune_stage, generate_stage

    cfg = ctx.cfg.query_reformulation
    m = cfg.matcher
    pairs = tr.read("reformulation_pairs")
    tuples, local = interaction_tables(tr)
    # Each output is keyed by what it depends on: the split's tables by the hold-out (the model's key adds the
    # generator), the reformulations by the generator and decoding, the matchers by all of the matcher section.
    # Another decoding regenerates without a fine-tune; other fastText settings or repeats retrain matchers only.
    split_hash = hash_of(m.holdout_fraction, asdict(ctx.cfg.query_graph), ctx.cfg.seed)
    generation_hash = hash_of(reformulations_hash(ctx), split_hash)
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
        generator_hash(ctx),
        {"matcher_pairs": str(out["matcher_pairs"].version)},
        "source_query",
        "target_query",
    )
    inputs_hash = split_hash if cfg.sources is None else hash_of(split_hash, cfg.sources)  # unbudgeted: as before
    tr.write(queries_to_reformulate(ctx, train_tuples), "matcher_inputs", inputs_hash)
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


main = entry_point("query-matcher", matcher_job, __doc__)

if __name__ == "__main__":
    main()
