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
- Ray's default worker node size is a whole Spark worker machine's CPU count, which a one- or few-core executor never
  has free ("no resources to launch Ray worker nodes" after 120 s): the default here is the executors' cores.
"""
from __future__ import annotations

import functools
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from common.platform.config import RayConfig
from common.platform.config_loader import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Environment variables the suite sets for Ray's starter (read by SuiteStartHook in the driver's process).
NODE_PATH_ENV = "AUGMENT_RAY_NODE_PATH"
HOOK_ENV = "RAY_ON_SPARK_START_HOOK"
HOOK = "common.platform.ray_on_spark.SuiteStartHook"
# What the worker nodes inherit from the driver, besides PATH: the auth mode and where the token is (the token
# itself is never put in a Spark task's closure).
FORWARDED = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_USAGE_STATS_ENABLED")


@dataclass(frozen=True)
class RayOnSparkPlan:
    """The Ray-on-Spark cluster a job starts: worker nodes between ``min_nodes`` and ``max_nodes``, of ``cpus`` CPUs
    and ``gpus`` GPUs each (every node is one Spark task holding that many cores), ``idle_minutes`` before an idle
    node ends and frees its slots."""

    min_nodes: int
    max_nodes: int
    cpus: int
    gpus: int
    idle_minutes: float

    def capacity(self) -> dict[str, float]:
        """The most CPUs and GPUs the Ray cluster reaches (all worker nodes up; the head holds none), and
        ``node_CPU``, one node's CPUs."""
        return {"CPU": float(self.max_nodes * self.cpus), "GPU": float(self.max_nodes * self.gpus),
                "node_CPU": float(self.cpus)}


def executor_cores(spark: "SparkSession") -> int:
    """The cores of one executor: ``spark.executor.cores`` where set, else the application's default parallelism
    (its executors' cores together, on a standalone or YARN master) over its executors; 1 at least."""
    conf = spark.sparkContext.getConf()
    if conf.get("spark.executor.cores"):
        return max(1, int(conf.get("spark.executor.cores")))
    sc = spark.sparkContext
    executors = max(1, sc._jsc.sc().getExecutorMemoryStatus().size() - 1)  # the driver is listed too
    return max(1, sc.defaultParallelism // executors)


def plan(cfg: RayConfig, spark: "SparkSession") -> RayOnSparkPlan:
    """The cluster ``cfg`` asks for on this Spark application (unset sizes: one executor's cores, no GPU).
    Raises :class:`ConfigError` naming the key when the sizes cannot work."""
    cpus = cfg.spark_num_cpus_per_node or executor_cores(spark)
    if not 0 <= cfg.spark_min_worker_nodes <= cfg.spark_max_worker_nodes or cfg.spark_max_worker_nodes < 1:
        raise ConfigError(f"ray.spark_min_worker_nodes ({cfg.spark_min_worker_nodes}) must be between 0 and "
                          f"ray.spark_max_worker_nodes ({cfg.spark_max_worker_nodes}), which must be at least 1")
    if cfg.spark_idle_timeout_minutes <= 0:
        raise ConfigError(f"ray.spark_idle_timeout_minutes must be above 0, not {cfg.spark_idle_timeout_minutes}")
    return RayOnSparkPlan(min_nodes=cfg.spark_min_worker_nodes, max_nodes=cfg.spark_max_worker_nodes, cpus=cpus,
                          gpus=cfg.spark_num_gpus_per_node or 0, idle_minutes=cfg.spark_idle_timeout_minutes)


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
        raise ConfigError(f"ray.mode spark: no `ray` command beside {sys.executable} or on PATH; install "
                          f"'ray[default]' into the Python that runs the driver and the executors (make install does)")
    path = os.environ.get("PATH", os.defpath)
    if path.split(os.pathsep)[0] != driver_folder:  # (once per process, however many jobs start Ray on Spark)
        os.environ["PATH"] = os.pathsep.join([driver_folder, path])
    executor_python = (spark.sparkContext.getConf().get("spark.pyspark.python")
                       or os.environ.get("PYSPARK_PYTHON") or sys.executable)
    node_folder = os.path.dirname(executor_python) if os.path.isabs(executor_python) else driver_folder
    os.environ[NODE_PATH_ENV] = os.pathsep.join([node_folder, path])
    if "DATABRICKS_RUNTIME_VERSION" not in os.environ:
        os.environ.setdefault(HOOK_ENV, HOOK)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    stale = os.environ.pop("RAY_ADDRESS", None)
    if stale:
        log.info("ray.mode spark: RAY_ADDRESS=%s set in the environment is not used (the job starts its own Ray "
                 "cluster on Spark)", stale)


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
    # Ray loads the hook by name (RAY_ON_SPARK_START_HOOK=common.platform.ray_on_spark.SuiteStartHook).
    if name == "SuiteStartHook":
        return _start_hook_class()
    raise AttributeError(name)


def start(cfg: RayConfig, spark: "SparkSession") -> RayOnSparkPlan:
    """Start the Ray-on-Spark cluster of ``cfg`` on ``spark``'s application (``RAY_ADDRESS`` then names it) and
    return its plan. Stop it with :func:`stop`."""
    from ray.util.spark import setup_ray_cluster

    chosen = plan(cfg, spark)
    prepare_environment(spark)
    setup_ray_cluster(min_worker_nodes=chosen.min_nodes, max_worker_nodes=chosen.max_nodes,
                      num_cpus_worker_node=chosen.cpus, num_gpus_worker_node=chosen.gpus,
                      autoscale_idle_timeout_minutes=chosen.idle_minutes)
    log.info("ray on spark up at %s: %d-%d worker nodes of %d CPU, %d GPU (idle ones end after %.1f min)",
             os.environ.get("RAY_ADDRESS"), chosen.min_nodes, chosen.max_nodes, chosen.cpus, chosen.gpus,
             chosen.idle_minutes)
    return chosen


def work_by_node() -> dict[str, int]:
    """The Ray tasks (actor tasks included) this Ray-on-Spark cluster ran, by node: ``{"head": n, "worker <node id
    prefix>": n, ...}``, from Ray's state API. Read before :func:`stop`, while the cluster still answers."""
    from ray.util.state import list_nodes, list_tasks

    counts: dict[str, int] = {}
    for node in list_nodes(limit=1000, raise_on_missing_output=False):
        name = "head" if node.is_head_node else f"worker {node.node_id[:8]}"
        # (the state API returns at most 10,000 rows a call: counted per node, capped there)
        tasks = list_tasks(filters=[("node_id", "=", node.node_id)], limit=10_000, raise_on_missing_output=False)
        counts[name] = len(tasks)
    return counts


def stop() -> None:
    """Shut the Ray-on-Spark cluster down: its worker nodes' Spark job is cancelled (their slots free at once) and the
    head ends. A no-op when none is up."""
    from ray.util.spark import shutdown_ray_cluster

    try:
        shutdown_ray_cluster()
    except RuntimeError as exc:  # "No active ray cluster to shut down"
        log.debug("ray on spark: %s", exc)
