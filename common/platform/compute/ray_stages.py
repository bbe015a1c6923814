"""What a Ray stage or task of the suite asks of the cluster: actor pools sized to leave Ray Data a CPU, the threads
and runtime environment of torch work, the actors' restart and retry limits, stage retries after a lost node, and
the capacity a started :class:`~common.platform.compute.ray_runtime.RayRuntime` left in Ray Data's context."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, TypeVar

from common.platform.config import RayConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

# The keys under which the runtime leaves its actor restart/retry limits and its stage retries in Ray Data's
# DataContext.
FAULT_TOLERANCE_KEY = "catalog_augment.actor_fault_tolerance"
STAGE_RETRIES_KEY = "catalog_augment.stage_retries"
# The most CPUs and GPUs the Ray cluster reaches, where that is more than it has now: an autoscaling Ray on Spark
# cluster has no worker node (and so no CPU) until a stage asks for one.
CAPACITY_KEY = "catalog_augment.capacity"

# Every Ray task that imports torch (fine-tuning, CTranslate2 conversion, encoder classifiers and surrogates)
# runs in this one runtime environment. Ray keeps one pool of workers per runtime environment, so:
# - a worker that imported torch for one such task serves the next (ray.max_workers keeps idle ones) instead of
#   a new process importing torch and transformers again (4-5 s each on 2 cores);
# - no torch-shaped worker ever trains fastText, whose tasks run in their own environment
#   (common.models.classifiers.fasttext_training.SAFE_MALLOC_ENV: fastText reads uninitialised memory).
TORCH_TASK_ENV = {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}


def threads_env(threads: int) -> dict[str, Any]:
    """The runtime environment of torch work that runs ``threads`` threads: :data:`TORCH_TASK_ENV`, with
    ``OMP_NUM_THREADS`` at ``threads`` above 1. Ray sets it to a worker's CPU request (1 where a pool leaves a
    CPU to Ray Data), and CTranslate2's bundled OpenMP reads it when it loads: a Generator's decoding then gained
    nothing from a larger ``intra_threads`` (docs/concepts/model-stages.md, Threads). 1 keeps the warm workers'."""
    if threads <= 1:
        return TORCH_TASK_ENV
    return {"env_vars": {**TORCH_TASK_ENV["env_vars"], "OMP_NUM_THREADS": str(threads)}}


def cpu_threads(threads: int, concurrency: int) -> int:
    """Threads for each of a stage's ``concurrency`` CPU actors or tasks: ``threads`` when set; for 0 the
    largest node's CPUs shared among them (Ray Data's tasks idle while a model runs), or 1 where the runtime
    does not know its nodes (``ray.mode: address``)."""
    if threads:
        return threads
    node = (known_capacity() or {}).get("node_CPU")
    return max(1, int(node) // max(1, concurrency)) if node else 1


def torch_task_options(num_gpus: float = 0.0, stage: str = "torch task", threads: int = 1) -> dict[str, Any]:
    """Ray task options for torch work: its runtime environment (:func:`threads_env` of ``threads``), and with
    a GPU a worker that exits after its task (``max_calls`` 1), so that the device's memory goes back at once.
    Raises ConfigError (see :func:`require_gpus`) when it asks for a GPU the cluster cannot have."""
    require_gpus(num_gpus, stage)
    return {"runtime_env": threads_env(1 if num_gpus else threads), **({"max_calls": 1} if num_gpus else {})}


def actor_fault_tolerance() -> dict[str, int]:
    """``max_restarts``/``max_task_retries`` for the suite's Ray actors, as the started :class:`RayRuntime`
    set them; Ray Data's own default (unlimited) would retry a batch that kills its actor forever, so
    without a runtime the config's defaults apply."""
    from ray.data import DataContext

    return dict(DataContext.get_current().get_config(FAULT_TOLERANCE_KEY, fault_tolerance(RayConfig())))


def fault_tolerance(cfg: RayConfig) -> dict[str, int]:
    """Ray actor options of ``cfg``: ``max_restarts`` and ``max_task_retries``."""
    return {"max_restarts": cfg.actor_max_restarts, "max_task_retries": cfg.actor_task_retries}


def retried_errors(enabled: bool):
    """What Ray's ``retry_exceptions`` gets for ``ray.retry_exceptions`` ``enabled``: every application error but an
    endpoint's outage (:class:`~common.platform.errors.RetriedByRay`), or False."""
    from common.platform.errors import RetriedByRay

    return [RetriedByRay] if enabled else False


def lost_to_the_cluster(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it wraps) says the Ray cluster lost something, not that the code failed: a node
    (``NodeDiedError``, an actor that died with its node), an actor for the moment (``ActorUnavailableError``), an
    object or its owner. An actor that died of itself (killed, crashed, past its restarts) is not such a loss."""
    import re

    from ray import exceptions as ray_errors

    lost = (
        ray_errors.ActorUnavailableError,
        ray_errors.NodeDiedError,
        ray_errors.ObjectLostError,
        ray_errors.OwnerDiedError,
        ray_errors.LocalRayletDiedError,
    )
    for _ in range(10):  # the chain of causes, bounded
        if exc is None:
            return False
        if isinstance(exc, lost):
            return True
        if isinstance(exc, ray_errors.ActorDiedError) and re.search(
            r"node (has )?died|node\S* .*(dead|removed)", str(exc), re.IGNORECASE
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def run_stage(run: Callable[[], T], stage: str, before_retry: Callable[[], None] = lambda: None) -> T:
    """``run()`` (a Ray Data stage's execution), run again up to ``ray.stage_retries`` times (as the started runtime
    set it) when it fails because the cluster lost a node or an actor (:func:`lost_to_the_cluster`), calling
    ``before_retry()`` first (to remove what the failed attempt wrote). Any other failure is raised at once."""
    from ray.data import DataContext

    retries = int(DataContext.get_current().get_config(STAGE_RETRIES_KEY, RayConfig().stage_retries))
    for attempt in range(retries + 1):
        try:
            return run()
        except Exception as exc:
            if attempt == retries or not lost_to_the_cluster(exc):
                raise
            log.warning(
                "%s lost a node or an actor of the Ray cluster (%s): running it again from its inputs (%d/%d)",
                stage,
                str(exc).splitlines()[0][:200],
                attempt + 1,
                retries,
            )
            before_retry()
    raise AssertionError("unreachable")


def map_batches_on_actors(ds, fn, concurrency: Optional[int] = None, compute=None, **kwargs):
    """``ds.map_batches(fn, **kwargs)`` on a pool of ``concurrency`` actors (Ray Data's ``compute``: its
    ``concurrency=`` is deprecated), or on the pool ``compute`` names (an ``ActorPoolStrategy`` with options of its
    own), with :func:`actor_fault_tolerance`'s restart and retry limits. Ray 2.60 takes actor options only as
    ``**ray_remote_args``, which it has deprecated with no named replacement for these two yet: its warning is
    silenced here, once, not in every caller."""
    import warnings

    from ray.data import ActorPoolStrategy

    if (compute is None) == (concurrency is None):
        raise TypeError("map_batches_on_actors takes concurrency or compute, one of them")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        return ds.map_batches(
            fn, compute=compute or ActorPoolStrategy(size=concurrency), **kwargs, **actor_fault_tolerance()
        )


def actor_pool_size(concurrency: int, num_gpus: float = 0.0, num_cpus: int = 1, stage: str = "actor pool") -> int:
    """How many actors a Ray Data ``map_batches`` pool may hold: ``concurrency``, except that CPU actors
    (``num_gpus`` 0) of ``num_cpus`` each must leave one CPU of the running cluster free, because they hold
    their CPUs for the whole stage and the read, repartition and write tasks need one, or Ray Data waits
    forever for a free CPU. Logs a warning when it cuts; raises ValueError when not even one actor leaves a
    CPU free (the stage would never start)."""
    if num_gpus:
        require_gpus(num_gpus, stage)
        return concurrency
    num_cpus = fit_cpus(num_cpus, stage)
    cpus = int(cluster_capacity().get("CPU", 1))
    if cpus > 1 and num_cpus > cpus - 1:
        raise ValueError(
            f"{stage}: a CPU actor of {num_cpus} CPUs leaves none of this {cpus}-CPU cluster's CPUs "
            f"for Ray Data's read and write tasks, so the stage would wait forever; give the actor at "
            f"most {cpus - 1} CPU(s) (its threads can still use more cores)"
        )
    fits = max(1, (cpus - 1) // max(1, num_cpus))
    if concurrency > fits:
        log.warning(
            "%s concurrency %d x %d CPU leaves no CPU for Ray Data's other tasks on a %d-CPU cluster; "
            "using %d CPU actors",
            stage,
            concurrency,
            num_cpus,
            cpus,
            fits,
        )
        return fits
    return concurrency


def known_capacity() -> Optional[dict[str, float]]:
    """The most CPUs and GPUs of this driver's Ray cluster where the runtime knows them (a local runtime; Ray on
    Spark with every worker node up), with ``node_CPU`` the CPUs of its largest node; else None (a cluster joined by
    address, whose autoscaler may add nodes)."""
    from ray.data import DataContext

    capacity = DataContext.get_current().get_config(CAPACITY_KEY, None)
    return dict(capacity) if capacity else None


def cluster_capacity() -> dict[str, float]:
    """The most CPUs and GPUs this driver's Ray cluster has or reaches: :func:`known_capacity`, else Ray's
    ``cluster_resources()`` now."""
    import ray

    return known_capacity() or dict(ray.cluster_resources())


def fit_cpus(num_cpus: int, stage: str) -> int:
    """The CPUs one Ray task or actor of ``stage`` asks for: ``num_cpus``, cut to the largest node of a Ray cluster
    whose size this runtime knows (a local runtime: its CPUs; Ray on Spark: ``ray.spark_num_cpus_per_node``, one
    executor's cores by default). Ray would wait forever for a task no node can hold, and a config written for
    4-core nodes should run on 1-core executors as it does on them, slower. Only the request is cut: callers keep
    their threads at the configured count, on which the numbers depend. Logs a warning when it cuts; unchanged
    for ``ray.mode: address`` (an autoscaler there may add bigger nodes) or before Ray is up."""
    import ray

    capacity = known_capacity() if ray.is_initialized() else None
    node = int((capacity or {}).get("node_CPU", 0))
    if node and num_cpus > node:
        log.warning(
            "%s asks for %d CPUs per task and the largest node of this Ray cluster has %d: it gets %d "
            "(ray.spark_num_cpus_per_node sizes Ray-on-Spark nodes; ray.num_cpus a local runtime)",
            stage,
            num_cpus,
            node,
            node,
        )
        return node
    return num_cpus


def require_gpus(num_gpus: float, stage: str) -> None:
    """Raises ConfigError before a stage that asks for ``num_gpus`` GPUs starts on a Ray cluster that has none and
    cannot get one (Ray would wait for it forever), naming the settings to change. A no-op without a GPU request or
    before Ray is up."""
    if not num_gpus:
        return
    import ray

    capacity = known_capacity() if ray.is_initialized() else None
    if capacity is None:
        return
    have = capacity.get("GPU", 0.0)
    if have < num_gpus:
        from common.platform.config_loader import ConfigError

        raise ConfigError(
            f"{stage} asks for {num_gpus:g} GPU(s) and this Ray cluster has {have:g}: give the stage "
            f"num_gpus 0, or GPUs to Ray (ray.num_gpus for a local runtime, "
            f"ray.spark_num_gpus_per_node for Ray on Spark, GPU nodes for ray.mode address)"
        )
