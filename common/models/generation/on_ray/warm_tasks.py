"""A small CPU generation stage on warm torch tasks instead of an actor pool
(:mod:`common.models.generation.on_ray.pool`
picks them): which stages take them (:func:`warm_tasks_for`), the Ray Data task map (:func:`on_warm_tasks`), and the
generators a worker keeps loaded between batches and stages (:func:`kept`, keyed with the model's :func:`saved_at`;
the pool's model-routed actors keep theirs the same way).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Optional

from common.models.generation.fine_tune_specs import MODEL_MARKER

if TYPE_CHECKING:
    from common.models.config import GenerationConfig
    from common.platform.config import RayConfig


def warm_tasks_for(rows: int, generation: "GenerationConfig", ray: "RayConfig") -> bool:
    """Whether a generation stage of ``rows`` inputs with the ``generation`` section's pool settings runs on
    warm torch tasks rather than an actor pool: a CPU stage of at most ``ray.warm_task_rows`` rows."""
    return not generation.num_gpus and 0 < rows <= ray.warm_task_rows


# The generators a worker process loaded for earlier batches of warm torch tasks (on_warm_tasks), the most
# recently used last: a worker serves a stage's next batch, or the next stage of one model, without loading it
# again. Two: a stage's model and the one before it; each holds a model's weights while the worker idles.
_WARM_GENERATORS: "OrderedDict[str, object]" = OrderedDict()
_WARM_CACHE = 2


def kept(cache: "OrderedDict[str, Any]", key: str, limit: int, build: Callable[[], Any]) -> Any:
    """``cache[key]``, built with ``build()`` when missing, evicting the least recently used entry beyond
    ``limit``; the entry becomes the most recent."""
    if key in cache:
        cache.move_to_end(key)
    else:
        while len(cache) >= limit:
            cache.popitem(last=False)
        cache[key] = build()
    return cache[key]


def saved_at(model_path: str) -> Optional[int]:
    """When the model at ``model_path`` was last saved (its config file's mtime in ns), or None for a path
    that is not a local folder: part of a kept generator's key, so that a model fine-tuned again in place (a
    forced run) is loaded again, not served from a worker's cache."""
    try:
        return os.stat(os.path.join(model_path, MODEL_MARKER)).st_mtime_ns
    except OSError:
        return None


def _warm_generator(generator_class: type, constructor_kwargs: dict):
    """This worker's ``generator_class(**constructor_kwargs)``, built on first use and kept (LRU)."""
    path = constructor_kwargs.get("model_path")
    key = (
        f"{generator_class.__module__}.{generator_class.__qualname__}({constructor_kwargs!r})"
        f"@{saved_at(path) if path else ''}"
    )
    return kept(_WARM_GENERATORS, key, _WARM_CACHE, lambda: generator_class(**constructor_kwargs))


def _generate_batch(batch, generator_class: type, constructor_kwargs: dict):
    """One batch through this worker's cached generator (a Ray Data task function)."""
    return _warm_generator(generator_class, constructor_kwargs)(batch)


def on_warm_tasks(ds, generator_class, constructor_kwargs: dict, concurrency: int, batch_size: int, threads: int = 1):
    """``ds`` mapped in batches of ``batch_size`` (the same batches as
    :func:`~common.models.generation.on_ray.pool.on_actor_pool`) by Ray tasks in the torch runtime environment
    (:data:`common.platform.compute.ray_stages.TORCH_TASK_ENV`), at most ``concurrency`` at a time. Ray hands them the
    workers that already imported torch for the run's fine-tunes and conversions, and each worker keeps the generator
    it built (:func:`_warm_generator`), so a small stage pays neither a process start nor a second model load. Retries
    are bounded as the actor pool's are: a batch whose worker died, or whose code raised (``ray.retry_exceptions``),
    runs again at most ``ray.actor_task_retries`` times, then fails the stage (Ray Data's tasks would otherwise retry
    forever). Each task runs :func:`common.platform.compute.ray_stages.cpu_threads` of ``threads`` threads: above 1
    that is another runtime environment, so the stage's first task starts a worker of its own (kept for the next stages
    that run as many threads)."""
    import warnings

    from ray.data import DataContext, TaskPoolStrategy

    from common.platform.compute.ray_stages import (
        actor_fault_tolerance,
        cpu_threads,
        retried_errors,
        torch_task_options,
    )

    retries = {
        "max_retries": actor_fault_tolerance()["max_task_retries"],
        "retry_exceptions": retried_errors(bool(DataContext.get_current().actor_task_retry_on_errors)),
    }
    with warnings.catch_warnings():  # Ray 2.60 names no replacement yet (see map_batches_on_actors)
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        return ds.repartition(target_num_rows_per_block=batch_size, strict=True).map_batches(
            _generate_batch,
            fn_kwargs={"generator_class": generator_class, "constructor_kwargs": constructor_kwargs},
            compute=TaskPoolStrategy(size=concurrency),
            batch_size=batch_size,
            batch_format="numpy",
            **torch_task_options(threads=cpu_threads(threads, concurrency)),
            **retries,
        )
