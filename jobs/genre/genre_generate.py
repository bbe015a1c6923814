"""Job ``genre-generate`` of the genre-transfer pipeline (:mod:`jobs.genre.genre` holds the topics and splits,
:mod:`jobs.genre.genre_evaluate` the evaluation): one keywords-to-text generator fine-tuned per (topic, N, genre) on
that genre's off-topic passages only (``genre_gen_pairs``; the models in ``genre_generators``), in concurrent Ray tasks
(with ``genre.generator.per_genre: false``, one genre-conditioned generator per (topic, N)); then one Ray Data pass
generates a synthetic document per genre from the keywords of on-topic test documents (``genre_prompts`` ->
``genre_generated``), kept in ``genre_synthetic`` or quarantined in ``genre_synthetic_quarantine`` with a reason
(prompts = kept + quarantined)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Optional

from common.models.generation.served.checks import served_preflight
from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.genre.genre_tables import GENERATED, GENERATORS, PAIRS, PASSAGES, PROMPTS, QUARANTINE, SPLITS, SYNTHETIC

log = logging.getLogger(__name__)


def _fine_tune_generators(ctx: JobContext, tr: JobRun, pairs_version: int):
    """Fine-tune (or reuse) one generator per (topic, n, genre) of the pairs table; returns a DataFrame of
    (topic, n, genre, pairs, model_path, model_version, reused)."""
    from pyspark.sql import functions as F

    from common.models.generation.fine_tune_specs import MODEL_MARKER, ModelSpec, TrainSpec
    from common.models.generation.on_ray.fine_tune_ray import fine_tune_many_on_ray
    from common.platform.storage import exists

    gen = ctx.cfg.genre.generator
    pairs = ctx.lakehouse.read(PAIRS, pairs_version)
    # One row per (topic, n, genre): bounded by topics x sizes x genres. A genre-conditioned generator (not
    # per_genre) is one model per (topic, n) that every genre's row names.
    keys = (
        pairs.groupBy("topic", "n", "genre")
        .agg(F.count(F.lit(1)).alias("pairs"))
        .orderBy("topic", "n", "genre")
        .collect()
    )
    # A model depends on what it learns from and how, not on how it is later prompted or decoded: a new
    # synthetic_ratio or sampling setting reuses the fine-tuned generators. (per_genre enters the hash only
    # when false, so the per-genre generators of earlier runs keep their keys.)
    model_hash = hash_of(
        asdict(gen.model),
        asdict(gen.fine_tune),
        gen.max_passages_per_doc,
        ctx.cfg.seed,
        *([] if gen.per_genre else ["genre-conditioned"]),
    )
    rows, todo, started = [], [], set()
    for r in keys:
        model_key = (r["topic"], r["n"], r["genre"] if gen.per_genre else None)
        key = hash_of(model_hash, tr.inputs, *(k for k in model_key if k is not None))
        uri = ctx.models_dir("genre_generator", key)
        reused = not ctx.force and exists(f"{uri}/{MODEL_MARKER}")
        rows.append((r["topic"], r["n"], r["genre"], r["pairs"], uri, f"genre_generator-{key}", reused))
        if not reused and uri not in started:
            started.add(uri)
            filters = [("topic", "=", r["topic"]), ("n", "=", r["n"])]
            todo.append((filters + ([("genre", "=", r["genre"])] if gen.per_genre else []), uri))
    log.info(
        "generators: %d for %d genre rows, %d to fine-tune, %d reused (same config and inputs)",
        len({r[4] for r in rows}),
        len(rows),
        len(todo),
        len({r[4] for r in rows if r[6]}),
    )
    if todo:
        results = fine_tune_many_on_ray(
            ctx.ray(),
            ctx.lakehouse.file_uris(PAIRS, pairs_version),
            todo,
            ModelSpec.from_config(gen.model),
            TrainSpec.from_config(gen.fine_tune, ctx.cfg.seed),
            num_cpus=gen.fine_tune.num_cpus,
            num_gpus=gen.fine_tune.num_gpus,
        )
        losses = [r.step_losses[-1] for r in results if r.step_losses]  # none for in-context generators
        tr.log_metrics(
            {
                "fine_tune.generators": float(len(results)),
                "fine_tune.seconds": float(sum(r.seconds for r in results)),
                **({"fine_tune.mean_final_loss": float(sum(losses) / len(losses))} if losses else {}),
            }
        )
    return ctx.spark.createDataFrame(
        rows, "topic int, n int, genre string, pairs long, model_path string, model_version string, reused boolean"
    )


@job("genre-generate", preflight=served_preflight(lambda cfg: cfg.genre.generator.model))
def generate_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``genre-generate``: per-genre generators on off-topic passages; synthetic on-topic documents."""
    from pyspark.sql import functions as F

    from common.genre.generation import generator_pairs, prompts, synthetic
    from common.models.generator_summary import generator_facts
    from common.stages.generation import generate_routed_stage

    cfg = ctx.cfg.genre
    gen = cfg.generator
    splits, passages = tr.read(SPLITS), tr.read(PASSAGES)
    config_hash = hash_of(asdict(gen), ctx.cfg.seed)
    if tr.all_written([SYNTHETIC, QUARANTINE], config_hash):
        return None
    pairs = tr.write(generator_pairs(splits, passages, gen.max_passages_per_doc, gen.per_genre), PAIRS, config_hash)
    generators = tr.write(_fine_tune_generators(ctx, tr, pairs.version), GENERATORS, config_hash)
    prompt_rows = tr.write(
        prompts(
            splits,
            passages,
            ctx.lakehouse.read(GENERATORS, generators.version),
            ctx.cfg.seed,
            gen.synthetic_ratio,
            gen.off_topic_control,
            gen.per_genre,
        ),
        PROMPTS,
        config_hash,
    )
    # one generator per genre: a bounded read
    paths = [r[0] for r in ctx.lakehouse.read(GENERATORS, generators.version).select("model_path").collect()]
    generated = generate_routed_stage(
        ctx, tr, PROMPTS, prompt_rows.version, gen.generation, paths, gen.cache_models, GENERATED, config_hash
    )
    rows = synthetic(
        ctx.lakehouse.read(GENERATED, generated.version), ctx.lakehouse.read(PROMPTS, prompt_rows.version)
    )
    kept = tr.write(rows.filter(F.col("reason").isNull()).drop("reason"), SYNTHETIC, config_hash)
    rejected = tr.write(rows.filter(F.col("reason").isNotNull()), QUARANTINE, config_hash)
    n_prompts = ctx.lakehouse.read(PROMPTS, prompt_rows.version).count()
    n_kept = ctx.lakehouse.read(SYNTHETIC, kept.version).count()
    n_rejected = ctx.lakehouse.read(QUARANTINE, rejected.version).count()
    if n_kept + n_rejected != n_prompts:
        raise RuntimeError(f"{n_prompts} prompts != {n_kept} synthetic documents + {n_rejected} quarantined")
    # One row per reason: bounded.
    reasons = {
        r["reason"]: r["count"]
        for r in ctx.lakehouse.read(QUARANTINE, rejected.version).groupBy("reason").count().collect()
    }
    tokens = ctx.lakehouse.read(SYNTHETIC, kept.version).agg(F.sum("generated_tokens")).first()[0] or 0
    log.info(
        "genre generate: %d prompts = %d synthetic documents + %d quarantined %s",
        n_prompts,
        n_kept,
        n_rejected,
        reasons,
    )
    tr.log_dict(
        {"prompts": n_prompts, "synthetic": n_kept, "quarantined": n_rejected, "reasons": reasons}, "generate.json"
    )
    tr.write_card(
        SYNTHETIC,
        generator_facts(gen.model, gen.fine_tune, gen.generation)
        | {
            "generators": "one per genre" if gen.per_genre else "one genre-conditioned generator",
            "synthetic per real document": gen.synthetic_ratio,
        },
        {"quarantined": "empty outputs and copies of their prompt"},
        {"prompts": n_prompts, **reasons},
    )
    return {
        "prompts": float(n_prompts),
        "synthetic": float(n_kept),
        "quarantined": float(n_rejected),
        "generated_tokens": float(tokens),
    }


main = entry_point("genre-generate", generate_job, __doc__)

if __name__ == "__main__":
    main()
