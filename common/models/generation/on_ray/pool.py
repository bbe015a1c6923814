"""Batched generation on Ray Data (seq2seq or causal LM): an actor pool, each actor loading the model once.

The actors' engines are :class:`common.models.generation.engines.hf_engine.T5Generator` (transformers) and
:class:`common.models.generation.engines.ct2.CT2Generator` (CTranslate2); this module picks one and runs the pools.

``generate(ds, ...)`` maps a Dataset of (``source_id``, ``source_text``) over a pool of
:class:`T5Generator` actors (``concurrency`` actors, ``num_gpus`` each). Inside a batch, inputs are sorted
by token length and generated in buckets, so short titles do not pay for the longest one's padding. Each
input gives ``n_samples`` outputs (sampling with top-k/top-p, or beam search). A bad row (empty, longer than
``max_source_tokens``, or one whose decoding fails) becomes one output row with a ``reason`` instead of
failing its batch; :func:`split_quarantine` separates the two kinds. A model saved with a label-prefix
table (:mod:`common.models.generation.kinds.label_prefix`, the compositional pipeline's LS-PT generator) reads each
source text as a label set and feeds its labels' learned blocks to the encoder instead of tokens. A causal LM (a folder
with ``generator.json``, :mod:`common.models.generation.kinds.causal_lm`) gets each source written into the prompt it
was trained on, left-padded, and its samples are what it writes after the prompt. A small CPU stage runs on warm torch
tasks instead of a pool (:mod:`common.models.generation.on_ray.warm_tasks`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from common.models.generation.engines.ct2 import CT2Generator
from common.models.generation.engines.ct2_conversion import prepare

# The engine's names, imported from here by the jobs, benchmarks and tests.
from common.models.generation.engines.hf_engine import OUTPUT_COLUMNS, GenerationSpec, T5Generator, output_schema  # noqa: F401
from common.models.generation.on_ray.warm_tasks import kept, on_warm_tasks, saved_at, warm_tasks_for

if TYPE_CHECKING:
    from common.models.config import GenerationConfig
    from common.platform.config import RayConfig

log = logging.getLogger(__name__)


def generate(
    ds,
    model_path: str,
    model_version: str,
    spec: GenerationSpec,
    concurrency: int = 1,
    num_gpus: float = 0.0,
    batch_size: int = 256,
    warm_tasks: bool = False,
    threads: int = 0,
    tag: str = "",
):
    """``ds`` (source_id, source_text) -> generated rows (OUTPUT_COLUMNS), over an actor pool.

    The input is cut into blocks of exactly ``batch_size`` rows first, in the order it comes (a strict
    streaming repartition): one Parquet file is one block, and its n-fold output would otherwise leave the
    actors as one block that downstream stages (scoring, the write) can only start on once all of it is
    generated. A dataset read in a fixed order (:meth:`common.platform.lakehouse.lakehouse.Lakehouse.read_ray_ordered`)
    so gets the same batches whatever its files: what the ctranslate2 engine's samples depend on, as it
    seeds per length bucket; the hf engine's samples depend on each row alone. On the ctranslate2 engine the model
    is converted first, once, in a Ray task (:func:`~common.models.generation.engines.ct2_conversion.prepare`), not by
    each actor. With ``warm_tasks`` (a small CPU stage:
    :func:`~common.models.generation.on_ray.warm_tasks.warm_tasks_for`), the batches run as torch tasks instead
    (:func:`~common.models.generation.on_ray.warm_tasks.on_warm_tasks`). A CPU actor or task runs ``threads`` threads
    (:func:`common.platform.compute.ray_stages.cpu_threads`; 0: the node's CPUs shared among the pool). A served
    generator (:class:`~common.models.generation.served.engine.ServedGenerator`, read here once) runs on CPU-only
    :class:`~common.models.generation.served.engine.EndpointGenerator` s, at most the endpoint's ``max_concurrency`` of
    them, its response log tagged ``tag`` (the stage run's); a batch that found the endpoint down is not retried
    (:class:`~common.platform.errors.RetriedByRay`).
    """
    from common.models.generation.served.engine import EndpointGenerator, ServedGenerator, pool_size, served_key

    served = ServedGenerator.read(model_path)
    if served is not None:
        concurrency = pool_size(concurrency, [served])
        _outages_as_themselves(ds)
        return _on_pool(
            ds,
            EndpointGenerator,
            {
                "generator": served,
                "model_version": model_version,
                "spec": spec,
                "actors": concurrency,
                "tag": tag,
                "key": served_key([served]),
            },
            concurrency,
            0.0,
            batch_size,
            warm_tasks,
            1,
        )
    if spec.engine == "ctranslate2":
        prepare(model_path, spec, num_gpus)
    return _on_pool(
        ds,
        engine_class(spec),
        {"model_path": model_path, "model_version": model_version, "spec": spec},
        concurrency,
        num_gpus,
        batch_size,
        warm_tasks,
        threads,
    )


def _outages_as_themselves(ds) -> None:
    """Have the stage of ``ds`` (its dataset chain shares one context) hand a batch's own error to the driver rather
    than Ray Data's ``UserCodeException`` around it, whose cause is lost on the way: the served engine's
    :class:`~common.models.generation.served.engine.EndpointDown` then reaches the CLI as itself (exit code 6)."""
    ds.context.raise_original_map_exception = True


def engine_for(
    model_path: str, model_version: str, spec: GenerationSpec, actors: int = 1, tag: str = "", key=None, served=None
):
    """The generator of the model at ``model_path``: an
    :class:`~common.models.generation.served.engine.EndpointGenerator` for a served one (``served``: the
    :class:`~common.models.generation.served.engine.ServedGenerator` the driver read; one of ``actors`` sharing the
    endpoint, its log tagged ``tag``, calling with the driver's ``key``), else ``spec.engine``'s
    (:func:`engine_class`)."""
    if served is not None:
        from common.models.generation.served.engine import EndpointGenerator

        return EndpointGenerator(served, model_version, spec, actors, tag, key)
    return engine_class(spec)(model_path, model_version, spec)


def engine_class(spec: GenerationSpec) -> type:
    """The generator class of ``spec.engine``: :class:`T5Generator` (hf) or
    :class:`common.models.generation.engines.ct2.CT2Generator` (ctranslate2, which serves a model it cannot run with
    hf)."""
    return CT2Generator if spec.engine == "ctranslate2" else T5Generator


def on_actor_pool(
    ds, generator_class, constructor_kwargs: dict, concurrency: int, num_gpus: float, batch_size: int, threads: int = 1
):
    """``ds`` mapped in batches of ``batch_size`` over a pool of ``concurrency`` ``generator_class`` actors
    (:class:`T5Generator`, :class:`ModelRoutedGenerator` or a subclass) built with ``constructor_kwargs``; a CPU
    actor runs :func:`common.platform.compute.ray_stages.cpu_threads` of ``threads`` threads (0: the node's CPUs
    shared)."""
    from common.platform.compute.ray_stages import actor_pool_size, cpu_threads, map_batches_on_actors, threads_env

    concurrency = actor_pool_size(concurrency, num_gpus, stage="generation")
    threads = 1 if num_gpus else cpu_threads(threads, concurrency)
    # one thread: the pool's actors in the job's own environment, as before there was a thread setting
    env = {"runtime_env": threads_env(threads)} if threads > 1 else {}
    # A killed actor restarts and its batch is retried (ray.actor_max_restarts / actor_task_retries): the
    # batch's rows are produced once, by the retry, as the killed attempt's output never left the actor.
    return map_batches_on_actors(
        ds.repartition(target_num_rows_per_block=batch_size, strict=True),
        generator_class,
        fn_constructor_kwargs=constructor_kwargs,
        concurrency=concurrency,
        num_gpus=num_gpus or None,
        batch_size=batch_size,
        batch_format="numpy",
        **env,
    )


def _on_pool(
    ds,
    generator_class,
    constructor_kwargs: dict,
    concurrency: int,
    num_gpus: float,
    batch_size: int,
    warm_tasks: bool,
    threads: int,
):
    """:func:`~common.models.generation.on_ray.warm_tasks.on_warm_tasks` for a CPU stage that asked for them, else
    :func:`on_actor_pool`."""
    if warm_tasks and not num_gpus:
        return on_warm_tasks(ds, generator_class, constructor_kwargs, concurrency, batch_size, threads)
    return on_actor_pool(ds, generator_class, constructor_kwargs, concurrency, num_gpus, batch_size, threads)


def pool_options(rows: int, generation: "GenerationConfig", ray: "RayConfig") -> dict[str, Any]:
    """:func:`generate`'s (and :func:`generate_routed`'s) pool keywords for a stage of ``rows`` inputs with the
    ``generation`` section's settings: ``warm_tasks``
    (:func:`~common.models.generation.on_ray.warm_tasks.warm_tasks_for`) and ``threads``
    (``ray.generation_threads``)."""
    return {"warm_tasks": warm_tasks_for(rows, generation, ray), "threads": ray.generation_threads}


class ModelRoutedGenerator:
    """A Ray Data callable class for many fine-tuned models in one pass: each row names its model
    (``model_path``, ``model_version``); an actor keeps the ``cache_models`` most recently used
    :class:`T5Generator` instances loaded and routes each batch's rows to theirs. Rows sorted by model
    before the pass arrive in batches of few models, so each model loads about once per actor."""

    def __init__(
        self, spec: GenerationSpec, cache_models: int = 4, actors: int = 1, tag: str = "", key=None, served=None
    ):
        self.spec, self.actors, self.tag, self.key, self.served = spec, actors, tag, key, dict(served or {})
        self.cache_models = cache_models
        self.models: "OrderedDict[str, T5Generator]" = OrderedDict()  # CT2Generator is one too

    def _model(self, path: str, version: str) -> T5Generator:
        key = f"{path}@{version}@{saved_at(path)}"  # a model saved again in place is loaded again
        return kept(
            self.models,
            key,
            self.cache_models,
            lambda: engine_for(path, version, self.spec, self.actors, self.tag, self.key, self.served.get(path)),
        )

    def __call__(self, batch: dict[str, np.ndarray]):
        import pyarrow as pa

        paths = [str(p) for p in batch["model_path"]]
        versions = [str(v) for v in batch["model_version"]]
        tables = []
        for path in dict.fromkeys(paths):
            rows = [i for i, p in enumerate(paths) if p == path]
            sub = {"source_id": batch["source_id"][rows], "source_text": batch["source_text"][rows]}
            tables.append(self._model(path, versions[rows[0]])(sub))
        return pa.concat_tables(tables) if tables else output_schema().empty_table()


ROUTED_COLUMNS = ("source_id", "source_text", "model_path", "model_version")


def generate_routed(
    ds,
    spec: GenerationSpec,
    concurrency: int = 1,
    num_gpus: float = 0.0,
    batch_size: int = 256,
    cache_models: int = 4,
    warm_tasks: bool = False,
    threads: int = 0,
    tag: str = "",
    generator_uris=(),
):
    """``ds`` (source_id, source_text, model_path, model_version) -> generated rows (OUTPUT_COLUMNS), each
    input generated by the model its row names, over one actor pool (:class:`ModelRoutedGenerator`), or with
    ``warm_tasks`` on warm torch tasks (:func:`~common.models.generation.on_ray.warm_tasks.on_warm_tasks`), each of
    ``threads`` threads (see :func:`generate`).
    The served ones among ``generator_uris`` (read here once,
    :func:`~common.models.generation.served.engine.served_generators`) cap the pool at their smallest
    ``max_concurrency`` (one budget for the stage: :func:`~common.models.generation.served.engine.pool_size`), share
    their endpoint among its workers, tag their response log ``tag`` and call with the key the driver read."""
    from common.models.generation.served.engine import pool_size, served_generators, served_key

    served = served_generators(generator_uris)
    if served:
        concurrency = pool_size(concurrency, list(served.values()))
        _outages_as_themselves(ds)
    return _on_pool(
        ds,
        ModelRoutedGenerator,
        {
            "spec": spec,
            "cache_models": cache_models,
            "actors": concurrency,
            "tag": tag,
            "key": served_key(list(served.values())),
            "served": served,
        },
        concurrency,
        num_gpus,
        batch_size,
        warm_tasks,
        threads,
    )


def rows_by_reason(table, quarantined: bool):
    """The rows of an Arrow batch with a ``reason`` (``quarantined``) or without one."""
    import pyarrow.compute as pc

    return table.filter(pc.is_valid(table["reason"]) if quarantined else pc.is_null(table["reason"]))


def split_quarantine(ds):
    """(rows without a ``reason``, rows with one) of a :func:`generate` or filter output.

    Filters with Arrow in ``map_batches`` (a row-wise ``filter`` would re-infer the schema from Python
    values and type an all-null column as ``null``)."""
    return (
        ds.map_batches(rows_by_reason, batch_format="pyarrow", fn_kwargs={"quarantined": False}),
        ds.map_batches(rows_by_reason, batch_format="pyarrow", fn_kwargs={"quarantined": True}),
    )


def naive_generate(model_path: str, texts: list[str], spec: GenerationSpec) -> list[list[str]]:
    """The per-row baseline: one ``model.generate`` call per input, in this process (for benchmarks)."""
    generator = T5Generator(model_path, "naive", spec)
    return [[text for text, _ in generator._generate([t])[0]] for t in texts]
