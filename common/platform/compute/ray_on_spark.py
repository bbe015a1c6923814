"""Ray on Spark (``ray.mode: spark``, the Databricks path): a Ray cluster whose head runs beside the Spark driver and
whose worker nodes are long-running Spark tasks, one per node (``ray.util.spark.setup_ray_cluster``).

How the suite shares one Spark cluster between its Spark stages and its Ray stages: Ray on Spark **autoscales from
zero worker nodes** (``ray.spark_min_worker_nodes: 0``). A Ray stage's resource demand starts worker nodes (each a
Spark task holding ``spark_num_cpus_per_node`` slots' cores); a node idle for ``ray.spark_idle_timeout_minutes``
ends, and its Spark task with it, so the pipeline's next Spark stage gets the slots back. A fixed Ray cluster (min =
max) would hold its slots for the whole job: on a small cluster every one of them, and the next Spark stage would
never run. The cost is a node start (a Spark job, then ``ray start``) at the first Ray stage after an idle gap.

What this module adds to Ray's own starter, each a failure seen on a standalone master first:
- Ray's node starter runs ``[sys.executable, shutil.which("ray"), "start", ...]``, on the driver (head) and in the
  executors (worker nodes): a driver run as ``.venv/bin/augment`` without an activated venv has no ``ray`` on its
  PATH, and the executors' PATH is the Spark worker's. The driver's interpreter folder goes first on its PATH, and
  the worker nodes get the executors' interpreter folder (``spark.pyspark.python`` / ``PYSPARK_PYTHON``) first on
  theirs, through a start hook (``SuiteStartHook``).
- ``RAY_AUTH_MODE`` must be the same in the head, the nodes and the driver (Ray 2.60 turns token mode on by itself
  for ``ray start --head`` but not for the explicit ``RAY_ADDRESS`` the setup exports): the driver's mode, or
  ``disabled`` where none is set, goes to every node.
- Ray's default worker node size is a whole Spark worker machine's CPU count and memory, which a one- or few-core
  executor never has free ("no resources to launch Ray worker nodes" after 120 s; 14 GB nodes on 3 GB standalone
  workers): the default here is what the application's executors report (:func:`executors`), never a setting the
  suite chose for another purpose (``spark.default.parallelism``, which the suite's own session sets, made 2-core
  nodes on 1-core executors and a silent wait). A node larger than an executor is refused before Ray starts.
- A worker node whose Spark task is never scheduled (the slots held by another job, an executor lost) or whose
  ``ray start`` fails leaves Ray's autoscaler waiting without a word: the node watch
  (:class:`~common.platform.compute.ray_on_spark_nodes.NodeWatch`) ends the job with a
  :class:`~common.platform.errors.ClusterError` once nodes have been asked for and none of their tasks is scheduled
  within ``ray.spark_node_start_timeout_s``, or none is up within twice that.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from common.platform.config import RayConfig
from common.platform.config_loader import ConfigError
from common.platform.errors import ClusterError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Environment variables the suite sets for Ray's starter (read by SuiteStartHook in the driver's process).
NODE_PATH_ENV = "AUGMENT_RAY_NODE_PATH"
HOOK_ENV = "RAY_ON_SPARK_START_HOOK"
HOOK = "common.platform.compute.ray_on_spark.SuiteStartHook"
# What the worker nodes inherit from the driver, besides PATH: the auth mode and where the token is (the token
# itself is never put in a Spark task's closure).
FORWARDED = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_USAGE_STATS_ENABLED")


# Ray's share of a node's memory for the object store (ray_constants.DEFAULT_OBJECT_STORE_MEMORY_PROPORTION), and the
# least object store Ray starts with (OBJECT_STORE_MINIMUM_MEMORY_BYTES).
OBJECT_STORE_SHARE = 0.3
MIN_OBJECT_STORE_MB = 75


@dataclass(frozen=True)
class Executors:
    """The application's executors as they report themselves: how many, the smallest one's cores, and the memory each
    was granted (``spark.executor.memory``, in MiB)."""

    count: int
    cores: int
    memory_mb: int

    def describe(self) -> str:
        """E.g. ``2 executors of 1 core and 1024 MiB each``."""
        return (
            f"{self.count} executor{'s' if self.count != 1 else ''} of {self.cores} "
            f"core{'s' if self.cores != 1 else ''} and {self.memory_mb} MiB each"
        )


def executors(spark: "SparkSession", wait_s: float = 60.0) -> Executors:
    """What the application's executors have, from its status store (the Spark UI's executor list, kept with the UI
    off too): their count, the smallest one's ``totalCores``, and the memory the master granted each. A local master
    has no executors but the driver, which runs its tasks: its cores. Waits up to ``wait_s`` for a first executor to
    register (a session built a moment ago); raises :class:`ClusterError` when none does."""
    sc = spark.sparkContext
    jsc = sc._jsc.sc()
    local = sc.master.startswith("local")
    deadline = time.monotonic() + wait_s
    while True:
        listed = jsc.statusStore().executorList(True)
        found = [listed.apply(i) for i in range(listed.size())]
        cores = [e.totalCores() for e in found if (e.id() == "driver") == local]
        if cores:
            return Executors(count=len(cores), cores=max(1, min(cores)), memory_mb=int(jsc.executorMemory()))
        if time.monotonic() > deadline:
            raise ClusterError(
                f"ray.mode spark: no Spark executor registered with the application at {sc.master} "
                f"within {wait_s:.0f} s (ray.spark_node_start_timeout_s); Ray's worker nodes run "
                "in executors"
            )
        time.sleep(0.5)


@dataclass(frozen=True)
class RayOnSparkPlan:
    """The Ray-on-Spark cluster a job starts: worker nodes between ``min_nodes`` and ``max_nodes``, of ``cpus`` CPUs,
    ``gpus`` GPUs and ``memory_mb`` of memory (heap and object store) each (every node is one Spark task holding
    that many cores), ``idle_minutes`` before an idle node ends and frees its slots; ``executors``: what the
    application's executors have (None for a plan made by hand)."""

    min_nodes: int
    max_nodes: int
    cpus: int
    gpus: int
    idle_minutes: float
    memory_mb: int = 0
    executors: Optional[Executors] = None

    def capacity(self) -> dict[str, float]:
        """The most CPUs and GPUs the Ray cluster reaches (all worker nodes up; the head holds none), and
        ``node_CPU``, one node's CPUs."""
        return {
            "CPU": float(self.max_nodes * self.cpus),
            "GPU": float(self.max_nodes * self.gpus),
            "node_CPU": float(self.cpus),
        }

    def memory_bytes(self) -> tuple[int, int]:
        """(heap, object store) of one worker node in bytes: :data:`OBJECT_STORE_SHARE` of ``memory_mb`` for the
        object store, at least Ray's minimum, the rest heap."""
        store_mb = max(MIN_OBJECT_STORE_MB, int(self.memory_mb * OBJECT_STORE_SHARE))
        return (self.memory_mb - store_mb) * 2**20, store_mb * 2**20

    def describe(self) -> str:
        """One line: the nodes and what they are cut from."""
        line = (
            f"{self.min_nodes}-{self.max_nodes} worker nodes of {self.cpus} CPU, {self.gpus} GPU and "
            f"{self.memory_mb} MB"
        )
        return line + (f" (the application has {self.executors.describe()})" if self.executors else "")


def plan(cfg: RayConfig, spark: "SparkSession") -> RayOnSparkPlan:
    """The cluster ``cfg`` asks for on this Spark application: unset sizes are cut from one executor
    (:func:`executors`): its cores, its memory's share for those cores, no GPU. Raises
    :class:`ConfigError` naming the key when the sizes cannot work, a node larger than an executor included (its Spark
    task would never be scheduled, and Ray would wait for it without a word)."""
    if not 0 <= cfg.spark_min_worker_nodes <= cfg.spark_max_worker_nodes or cfg.spark_max_worker_nodes < 1:
        raise ConfigError(
            f"ray.spark_min_worker_nodes ({cfg.spark_min_worker_nodes}) must be between 0 and "
            f"ray.spark_max_worker_nodes ({cfg.spark_max_worker_nodes}), which must be at least 1"
        )
    if cfg.spark_idle_timeout_minutes <= 0:
        raise ConfigError(f"ray.spark_idle_timeout_minutes must be above 0, not {cfg.spark_idle_timeout_minutes}")
    found = executors(spark, cfg.spark_node_start_timeout_s)
    cpus = cfg.spark_num_cpus_per_node or found.cores
    if cpus > found.cores:
        raise ConfigError(
            f"ray.spark_num_cpus_per_node ({cpus}) is more than a Spark executor has: the application "
            f"has {found.describe()}, and a Ray worker node is one Spark task holding its CPUs, which "
            f"would never be scheduled; set ray.spark_num_cpus_per_node to at most {found.cores} "
            f"(unset: "
            "an executor's cores), or give the executors more cores (spark.executor.cores)"
        )
    memory = cfg.spark_memory_per_node_mb or max(256, found.memory_mb * cpus // found.cores)
    return RayOnSparkPlan(
        min_nodes=cfg.spark_min_worker_nodes,
        max_nodes=cfg.spark_max_worker_nodes,
        cpus=cpus,
        gpus=cfg.spark_num_gpus_per_node or 0,
        idle_minutes=cfg.spark_idle_timeout_minutes,
        memory_mb=memory,
        executors=found,
    )


def ray_command_folder(python: str) -> Optional[str]:
    """The folder of the ``ray`` command installed with interpreter ``python`` (a venv's or an image's ``bin``), or
    None when there is none beside it."""
    folder = Path(python).parent
    return str(folder) if (folder / "ray").is_file() else None


def prepare_environment(spark: "SparkSession") -> None:
    """Set this driver's environment for ``setup_ray_cluster``: its interpreter's folder first on PATH (Ray's head
    starter looks ``ray`` up there), the nodes' PATH for ``SuiteStartHook``, the hook itself (not on Databricks,
    whose own hook Ray picks), one auth mode for every process, and no ``RAY_ADDRESS`` of another cluster.
    Raises :class:`ConfigError` when this interpreter has no ``ray`` command (``ray[default]`` not installed)."""
    driver_folder = ray_command_folder(sys.executable) or (os.path.dirname(shutil.which("ray") or "") or None)
    if driver_folder is None:
        raise ConfigError(
            f"ray.mode spark: no `ray` command beside {sys.executable} or on PATH; install "
            f"'ray[default]' into the Python that runs the driver and the executors (make install does)"
        )
    path = os.environ.get("PATH", os.defpath)
    if path.split(os.pathsep)[0] != driver_folder:  # (once per process, however many jobs start Ray on Spark)
        os.environ["PATH"] = os.pathsep.join([driver_folder, path])
    executor_python = (
        spark.sparkContext.getConf().get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or sys.executable
    )
    node_folder = os.path.dirname(executor_python) if os.path.isabs(executor_python) else driver_folder
    os.environ[NODE_PATH_ENV] = os.pathsep.join([node_folder, path])
    if "DATABRICKS_RUNTIME_VERSION" not in os.environ:
        os.environ.setdefault(HOOK_ENV, HOOK)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    stale = os.environ.pop("RAY_ADDRESS", None)
    if stale:
        log.info(
            "ray.mode spark: RAY_ADDRESS=%s set in the environment is not used (the job starts its own Ray "
            "cluster on Spark)",
            stale,
        )


@functools.lru_cache(maxsize=1)
def _start_hook_class() -> type:
    """:class:`SuiteStartHook`, built on first use: it subclasses Ray's hook base, and importing Ray is left to the
    processes that start Ray on Spark (the doctor imports this module too)."""
    from ray.util.spark.start_hook_base import RayOnSparkStartHook

    class SuiteStartHook(RayOnSparkStartHook):
        """Ray's start hook for Ray on Spark off Databricks: the worker nodes' environment gets the executors' ``ray``
        folder first on PATH and the driver's Ray auth settings (:data:`FORWARDED`)."""

        def __init__(self, is_global: bool = False):
            super().__init__(is_global)

        def custom_environment_variables(self) -> dict[str, str]:
            env = {key: os.environ[key] for key in FORWARDED if key in os.environ}
            if NODE_PATH_ENV in os.environ:
                env["PATH"] = os.environ[NODE_PATH_ENV]
            return env

    return SuiteStartHook


def __getattr__(name: str):
    # Ray loads the hook by name (RAY_ON_SPARK_START_HOOK=common.platform.compute.ray_on_spark.SuiteStartHook).
    if name == "SuiteStartHook":
        return _start_hook_class()
    raise AttributeError(name)


def start(cfg: RayConfig, spark: "SparkSession") -> RayOnSparkPlan:
    """Start the Ray-on-Spark cluster of ``cfg`` on ``spark``'s application (``RAY_ADDRESS`` then names it) and
    return its plan. Stop it with :func:`stop`."""
    from ray.util.spark import setup_ray_cluster

    chosen = plan(cfg, spark)
    prepare_environment(spark)
    heap, store = chosen.memory_bytes()
    setup_ray_cluster(
        min_worker_nodes=chosen.min_nodes,
        max_worker_nodes=chosen.max_nodes,
        num_cpus_worker_node=chosen.cpus,
        num_gpus_worker_node=chosen.gpus,
        memory_worker_node=heap,
        object_store_memory_worker_node=store,
        autoscale_idle_timeout_minutes=chosen.idle_minutes,
    )
    log.info(
        "ray on spark up at %s: %s; idle nodes end after %.1f min",
        os.environ.get("RAY_ADDRESS"),
        chosen.describe(),
        chosen.idle_minutes,
    )
    return chosen


def stop() -> None:
    """Shut the Ray-on-Spark cluster down: its worker nodes' Spark job is cancelled (their slots free at once) and the
    head ends. A no-op when none is up."""
    from ray.util.spark import shutdown_ray_cluster

    try:
        shutdown_ray_cluster()
    except RuntimeError as exc:  # "No active ray cluster to shut down"
        log.debug("ray on spark: %s", exc)
