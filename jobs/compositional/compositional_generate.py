"""Job ``compositional-generate`` of the compositional pipeline (:mod:`jobs.compositional.compositional` holds the
split, the label sets and QC, :mod:`jobs.compositional.compositional_evaluate` the evaluation): one prompt per accepted
label-set draw and generator (``cg_prompts``), the Concat texts (Spark), the seq2seq generators (``t5_labels``,
``label_prefix``) fine-tuned on train ∪ support (``cg_gen_pairs``; concurrent Ray tasks, reused by key) and generating
on one Ray Data actor pool (``cg_generated``): ``cg_candidates``, one row per prompt, with a reason where nothing
usable came out."""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from typing import Optional

from common.models.generation.served.checks import served_preflight
from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.compositional.compositional_tables import (
    CANDIDATES,
    CG_SUPPORT,
    CG_TRAIN,
    GENERATED,
    LABEL_SETS,
    PAIRS,
    PROMPTS,
    SEQ2SEQ,
)

log = logging.getLogger(__name__)


def _fine_tune_generators(
    ctx: JobContext, tr: JobRun, pairs_version: int, methods: list[str], vocabulary: list[str], config_hash: str
) -> dict[str, tuple[str, str]]:
    """Fine-tune (or reuse) one seq2seq generator per method in ``methods``; returns {method: (path, version)}."""
    from common.compositional.generation import PHRASE_JOIN
    from common.models.generation.fine_tune_specs import MODEL_MARKER, ModelSpec, TrainSpec
    from common.models.generation.on_ray.fine_tune_ray import fine_tune_many_on_ray
    from common.platform.storage import exists

    gen = ctx.cfg.compositional.generator
    base = ModelSpec.from_config(gen.model)
    out, todo = {}, []
    for method in methods:
        key = hash_of(config_hash, tr.inputs, method)
        uri = ctx.models_dir(f"cg_{method}", key)
        out[method] = (uri, f"cg_{method}-{key}")
        if ctx.force or not exists(f"{uri}/{MODEL_MARKER}"):
            spec = (
                base
                if method == "t5_labels"
                else replace(
                    base,
                    prefix_labels=tuple(vocabulary),
                    prefix_length=gen.prefix_length,
                    prefix_separator=PHRASE_JOIN.strip(),
                )
            )
            todo.append((method, uri, spec))
    log.info("generators: %d to fine-tune, %d reused (same config and inputs)", len(todo), len(methods) - len(todo))
    if todo:
        results = fine_tune_many_on_ray(
            ctx.ray(),
            ctx.lakehouse.file_uris(PAIRS, pairs_version),
            [(None, uri) for _, uri, _ in todo],
            [spec for _, _, spec in todo],
            TrainSpec.from_config(gen.fine_tune, ctx.cfg.seed),
            num_cpus=gen.fine_tune.num_cpus,
            num_gpus=gen.fine_tune.num_gpus,
        )
        for (method, _, _), result in zip(todo, results):
            loss = {f"fine_tune.{method}.final_loss": result.step_losses[-1]} if result.step_losses else {}
            tr.log_metrics({**loss, f"fine_tune.{method}.seconds": result.seconds})
    return out


@job("compositional-generate", preflight=served_preflight(lambda cfg: cfg.compositional.generator.model))
def generate_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``compositional-generate``: prompts from the sampled label sets; Concat and seq2seq candidates."""
    from pyspark.sql import functions as F

    from common.compositional.generation import candidates, concat_texts, generator_pairs, prompts
    from common.compositional.split import label_vocabulary
    from common.stages.generation import generate_routed_stage

    cfg = ctx.cfg.compositional
    gen = cfg.generator
    label_sets, train, support = tr.read(LABEL_SETS), tr.read(CG_TRAIN), tr.read(CG_SUPPORT)
    config_hash = hash_of(asdict(gen), ctx.cfg.seed)
    if tr.already_written(CANDIDATES, config_hash):
        return None
    methods = list(dict.fromkeys(gen.methods))
    prompt_rows = tr.write(prompts(label_sets, methods), PROMPTS, config_hash)
    prompt_df = ctx.lakehouse.read(PROMPTS, prompt_rows.version)
    pool = train.unionByName(support)
    concat_rows = concat_texts(prompt_df.filter(F.col("method") == "concat"), pool, ctx.cfg.seed)
    seq2seq = [m for m in methods if m in SEQ2SEQ]
    if seq2seq:
        pairs = tr.write(generator_pairs(train, support), PAIRS, config_hash)
        vocabulary = label_vocabulary(pool)
        models = _fine_tune_generators(ctx, tr, pairs.version, seq2seq, vocabulary, config_hash)
        routes = ctx.spark.createDataFrame(
            [(m, p, v) for m, (p, v) in models.items()], "method string, model_path string, model_version string"
        )
        # Sorted by model and read in that order: batches hold few models, and the same rows whatever the layout.
        routed = (
            prompt_df.join(routes, "method")
            .select(F.col("example_id").alias("source_id"), "source_text", "model_path", "model_version")
            .orderBy("model_path", "source_id")
        )
        route_rows = tr.write(routed, f"{PROMPTS}_routed", config_hash)
        written = generate_routed_stage(
            ctx,
            tr,
            f"{PROMPTS}_routed",
            route_rows.version,
            gen.generation,
            [p for p, _ in models.values()],
            len(models),
            GENERATED,
            config_hash,
        )
        generated = ctx.lakehouse.read(GENERATED, written.version)
    else:
        generated = ctx.spark.createDataFrame(
            [], "source_id string, generated_text string, generated_tokens long, reason string"
        )
    written = tr.write(candidates(prompt_df, concat_rows, generated), CANDIDATES, config_hash)
    rows = ctx.lakehouse.read(CANDIDATES, written.version)
    # One row per (method, reason): bounded.
    counts = {(r["method"], r["reason"]): r["count"] for r in rows.groupBy("method", "reason").count().collect()}
    n_prompts = prompt_df.count()
    if sum(counts.values()) != n_prompts:
        raise RuntimeError(f"{n_prompts} prompts != {sum(counts.values())} candidates")
    for (method, reason), n in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        log.info("candidates %-12s %6d %s", method, n, reason or "ok")
    return {f"{m}.candidates": float(sum(n for (mm, _), n in counts.items() if mm == m)) for m in methods} | {
        f"{m}.failed": float(sum(n for (mm, r), n in counts.items() if mm == m and r)) for m in methods
    }


main = entry_point("compositional-generate", generate_job, __doc__)

if __name__ == "__main__":
    main()
