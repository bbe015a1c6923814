"""The two T5 stages a generative job runs: fine-tune on a pairs table, then generate from a table.

Both hand data from Delta to Ray and back without the driver holding rows: the fine-tuning task reads the
pairs table's Parquet files itself; generation streams the input table's files through a Ray Data actor
pool and the scorer, and Ray's workers write the output files that the driver commits as ONE Delta
version (with lineage, so re-running the same config on the same inputs writes nothing). What a generation stage
reports (its counts, a served model's usage and card) is :mod:`common.stages.accounting`'s.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from common.platform.lakehouse.lakehouse import Lineage, WriteResult
from common.platform.runner.job import JobContext, hash_of
from common.stages.accounting import GenerationStats, endpoint_accounting

if TYPE_CHECKING:
    from common.models.config import FineTuneConfig, GenerationConfig, T5ModelConfig
    from common.models.generation.quality.filtering import FilterSpec
    from common.platform.tracking.tracker import TrackedRun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainedModel:
    """Where a fine-tuned model lives and the version string its generated rows carry."""

    uri: str
    version: str
    reused: bool


def reusable_model(uri: str) -> bool:
    """Whether the model folder ``uri`` holds a whole saved model to reuse: :func:`~common.platform.storage.put_folder`
    finished it, or it predates the marks and holds its ``config.json``. A folder a kill, an outage or a full disk cut
    short is never loaded: the caller trains the model again and writes it over (not removed first: another run of
    the same config may be writing it, the same model)."""
    from common.models.generation.fine_tune_specs import MODEL_MARKER
    from common.platform.storage import exists, folder_state

    state = folder_state(uri)
    if state == "incomplete":
        log.warning("%s is incomplete (cut short while it was written, or being written): trained again", uri)
        return False
    return state == "complete" or (state == "unmarked" and exists(f"{uri}/{MODEL_MARKER}"))


def fine_tune_stage(
    ctx: JobContext,
    tr: "TrackedRun",
    table: str,
    version: int,
    role: str,
    model_cfg: "T5ModelConfig",
    ft_cfg: "FineTuneConfig",
    config_hash: str,
    inputs: Mapping[str, str],
    source_col: str = "source_text",
    target_col: str = "target_text",
) -> TrainedModel:
    """Fine-tune the ``model_cfg`` generator on ``table`` v``version`` in a Ray task, or reuse the model already
    trained from the same config and input versions (unless forced). Logs losses, throughput, checkpoints and
    the model to the MLflow run ``tr``. The model version is ``<kind>_<role>-<key>`` (``smollm2_cga-…``: what
    the generator is and what it does), also its folder's name under ``<lakehouse>/models/``."""
    from common.models.config import skipped_fine_tune
    from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
    from common.models.generation.on_ray.fine_tune_ray import fine_tune_on_ray

    name = f"{model_cfg.kind}_{role}"
    key = hash_of(config_hash, dict(inputs), ctx.cfg.seed)
    notice = skipped_fine_tune(model_cfg, ft_cfg)
    if notice:  # the card (generator_facts) and the summary (describe_generator) say it too
        log.warning("%s: %s", role, notice)
        tr.set_tags({"model.fine_tune": "skipped: a served model"})
    uri = ctx.models_dir(name, key)
    model_version = f"{name}-{key}"
    source = model_cfg.endpoint.model if model_cfg.served else model_cfg.name_or_path or model_cfg.kind
    tr.set_tags({"model.uri": uri, "model.version": model_version, "model.source": source})
    if not ctx.force and reusable_model(uri):
        log.info("reusing %s (trained from the same config and inputs) at %s", model_version, uri)
        tr.set_tags({"model.reused": "true"})
        return TrainedModel(uri, model_version, reused=True)
    if ctx.force:  # a forced retrain starts from an empty folder: no file or conversion of the old model survives
        from common.platform.storage import remove_tree

        remove_tree(uri)
    n_pairs = ctx.lakehouse.read(table, version).count()
    if n_pairs == 0:
        raise ValueError(f"{table} v{version} has no (source, target) pairs: nothing to fine-tune {name} on")
    budget = (
        "a served model's prompt"
        if model_cfg.served
        else f"{ft_cfg.max_steps} steps"
        if ft_cfg.max_steps
        else f"{ft_cfg.epochs} epochs"
    )
    log.info(
        "fine-tuning %s on %d pairs of %s v%d (%s, %s, effective batch %d)",
        name,
        n_pairs,
        table,
        version,
        model_cfg.name_or_path or model_cfg.kind,
        budget,
        ft_cfg.batch_size * ft_cfg.grad_accumulation,
    )
    result = fine_tune_on_ray(
        ctx.ray(),
        ctx.lakehouse.file_uris(table, version),
        uri,
        ModelSpec.from_config(model_cfg),
        TrainSpec.from_config(ft_cfg, ctx.cfg.seed),
        source_col,
        target_col,
        num_cpus=ft_cfg.num_cpus,
        num_gpus=ft_cfg.num_gpus,
        tracking_uri=ctx.cfg.tracking_uri,
        run_id=tr.run_id,
        checkpoint_every=ft_cfg.checkpoint_every,
    )
    tr.set_tags({"model.device": result.device, "model.dtype": result.dtype})
    losses = (
        {"fine_tune.first_loss": result.step_losses[0], "fine_tune.final_loss": result.step_losses[-1]}
        if result.step_losses
        else {}
    )  # an in-context generator trains no step
    tr.log_metrics(
        {
            "fine_tune.pairs": n_pairs,
            "fine_tune.steps": len(result.step_losses),
            "fine_tune.seconds": result.seconds,
            "fine_tune.examples_per_second": result.examples / max(result.seconds, 1e-9),
            **losses,
        }
    )
    return TrainedModel(uri, model_version, reused=False)


def _as_generation_input(batch, id_col: str, text_col: str):
    import pyarrow as pa

    return pa.table(
        {"source_id": batch.column(id_col).cast(pa.string()), "source_text": batch.column(text_col).cast(pa.string())}
    )


def generate_stage(
    ctx: JobContext,
    tr: "TrackedRun",
    source_table: str,
    source_version: int,
    id_col: str,
    text_col: str,
    model: TrainedModel,
    gen_cfg: "GenerationConfig",
    scoring: Optional["FilterSpec"],
    out_table: str,
    config_hash: str,
    inputs: Mapping[str, str],
) -> tuple[WriteResult, GenerationStats]:
    """Generate ``n_samples`` outputs per row of ``source_table`` and score them (``scoring`` None: no
    scores, as for outputs that are not rewrites of their input); write ``out_table``.

    ``out_table`` gets every output row (``source_id, source_text, generated_text, sample_idx,
    model_version, generated_tokens[, score], reason``); a quarantined input is one row with
    ``sample_idx = -1`` and its reason, and ``<out_table>_quarantine`` holds those rows. Checks inputs =
    inputs generated from + inputs quarantined. Returns the write and the counts/throughput.
    """
    from pyspark.sql import functions as F

    from common.models.generation.on_ray.pool import GenerationSpec, generate, pool_options
    from common.models.generation.quality.filtering import score_generated
    from common.models.generation.served.engine import failed_share_check
    from common.stages.served_lease import sending

    columns = list(dict.fromkeys([id_col, text_col]))
    spec = GenerationSpec.from_config(gen_cfg, ctx.cfg.seed)
    lineage = Lineage(job=tr.name, config_hash=config_hash, inputs=dict(inputs), run_id=tr.run_id)
    tag = f"{tr.run_id}/{out_table}"  # what this stage sends to a served model is logged under it
    start = time.perf_counter()
    written = ctx.lakehouse.already_written(out_table, lineage, ctx.force)
    n_in = ctx.lakehouse.read(source_table, source_version).count()
    if written is None:
        ctx.ray()  # only here: a rerun whose output exists starts no Ray runtime
        # Read in id order: the generation batches, and so the samples, do not depend on the table's layout.
        with (
            sending([model.uri], out_table),
            ctx.lakehouse.read_ray_ordered(source_table, source_version, columns, order_by=columns) as ds,
        ):
            ds = ds.map_batches(
                _as_generation_input, batch_format="pyarrow", fn_kwargs={"id_col": id_col, "text_col": text_col}
            )
            out = generate(
                ds,
                model.uri,
                model.version,
                spec,
                concurrency=gen_cfg.concurrency,
                num_gpus=gen_cfg.num_gpus,
                batch_size=gen_cfg.batch_size,
                tag=tag,
                **pool_options(n_in, gen_cfg, ctx.cfg.ray),
            )
            if scoring is not None:
                out = score_generated(out, scoring)
            # No version from a broken server: past max_failed_share, the commit is refused (exit code 6).
            written = ctx.lakehouse.write_ray(
                out,
                out_table,
                lineage=lineage,
                force=ctx.force,
                before_commit=failed_share_check(ctx.spark, [model.uri], tag, out_table),
            )
    seconds = None if written.skipped else time.perf_counter() - start
    tr.log_output_table(out_table, written.version, ctx.lakehouse.location(out_table), skipped=written.skipped)

    table = ctx.lakehouse.read(out_table, written.version)
    quarantine = table.filter(F.col("sample_idx") < 0)
    q_written = ctx.write(tr, quarantine, f"{out_table}_quarantine", config_hash, inputs)
    row = table.agg(
        F.countDistinct(F.when(F.col("sample_idx") >= 0, F.col("source_id"))).alias("ok"),
        F.sum((F.col("sample_idx") < 0).cast("long")).alias("bad"),
        F.sum((F.col("sample_idx") >= 0).cast("long")).alias("seqs"),
        F.sum("generated_tokens").alias("tokens"),
    ).first()
    stats = GenerationStats(
        inputs=n_in,
        quarantined_inputs=int(row["bad"] or 0),
        sequences=int(row["seqs"] or 0),
        tokens=int(row["tokens"] or 0),
        seconds=seconds,
    )
    if int(row["ok"] or 0) + stats.quarantined_inputs != n_in:
        raise RuntimeError(
            f"{out_table}: {n_in} inputs in {source_table} v{source_version} != "
            f"{row['ok']} generated from + {stats.quarantined_inputs} quarantined"
        )
    tr.log_metrics(stats.metrics())
    endpoint_accounting(ctx, tr, [model.uri], tag, out_table, written, quarantine_rows=stats.quarantined_inputs)
    if seconds:
        log.info(
            "generated %d sequences (%d tokens) from %d inputs in %.1f s: %.1f sequences/s, %.0f tokens/s; "
            "%d inputs quarantined (%s v%d)",
            stats.sequences,
            stats.tokens,
            n_in,
            seconds,
            stats.sequences / seconds,
            stats.tokens / seconds,
            stats.quarantined_inputs,
            f"{out_table}_quarantine",
            q_written.version,
        )
    return written, stats


def generate_routed_stage(
    ctx: JobContext,
    tr: "TrackedRun",
    table: str,
    version: int,
    gen_cfg: "GenerationConfig",
    generator_uris: Sequence[str],
    cache_models: int,
    out_table: str,
    config_hash: str,
) -> WriteResult:
    """Generate from ``table`` v``version`` (:data:`~common.models.generation.on_ray.pool.ROUTED_COLUMNS`: each row
    names its model, one of ``generator_uris``) on one pool
    (:func:`common.models.generation.on_ray.pool.generate_routed`, ``cache_models`` kept per actor), read in (model,
    id) order so batches hold few models and are the same rows whatever the table's layout; write ``out_table``, and
    for served generators their accounting (:func:`~common.stages.accounting.endpoint_accounting`). Returns the
    write."""
    from common.models.generation.on_ray.pool import ROUTED_COLUMNS, GenerationSpec, generate_routed, pool_options
    from common.models.generation.served.engine import failed_share_check
    from common.stages.served_lease import sending

    ctx.ray()  # the configured runtime, also when every generator was reused (no fine-tune started it)
    tag = f"{tr.run_id}/{out_table}"
    with (
        sending(generator_uris, out_table),
        ctx.lakehouse.read_ray_ordered(table, version, ROUTED_COLUMNS, order_by=["model_path", "source_id"]) as ds,
    ):
        out = generate_routed(
            ds,
            GenerationSpec.from_config(gen_cfg, ctx.cfg.seed),
            concurrency=gen_cfg.concurrency,
            num_gpus=gen_cfg.num_gpus,
            batch_size=gen_cfg.batch_size,
            cache_models=cache_models,
            tag=tag,
            generator_uris=generator_uris,
            **pool_options(tr.written_rows(table), gen_cfg, ctx.cfg.ray),
        )
        written = tr.write_ray(
            out, out_table, config_hash, before_commit=failed_share_check(ctx.spark, generator_uris, tag, out_table)
        )
    endpoint_accounting(ctx, tr, sorted(generator_uris), tag, out_table, written)
    return written
