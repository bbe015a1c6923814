"""The Ray runtime: started once per process, shut down cleanly.

Modes: ``local`` (a loopback-only runtime on this machine), ``address`` (join an existing cluster),
``spark`` (Ray on Spark: Ray worker nodes inside the Spark cluster, as on Databricks).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
from typing import Any, Optional

from common.platform.compute.ray_stages import (
    CAPACITY_KEY,
    FAULT_TOLERANCE_KEY,
    STAGE_RETRIES_KEY,
    fault_tolerance,
    retried_errors,
)
from common.platform.config import RayConfig
from common.platform.process.signals import handle_taken, reclaim

log = logging.getLogger(__name__)


class RayRuntime:
    """Owns the process's Ray connection. Use as a context manager or call start()/stop()."""

    def __init__(self, cfg: RayConfig, spark: Any = None):
        """``spark``: the job's SparkSession, which Ray on Spark (``mode: spark``) runs inside (default: the active
        one)."""
        self.cfg = cfg
        self.spark = spark
        self._started_here = False
        self._spark_cluster = False
        # The most CPUs and GPUs of a Ray cluster whose size this runtime knows (a local runtime; Ray on Spark, which
        # grows on demand up to its plan); None for ray.mode address (an autoscaler there may add nodes).
        self._capacity: Optional[dict[str, float]] = None
        self._watch: Any = None  # Ray on Spark's NodeWatch while its cluster runs

    def start(self) -> "RayRuntime":
        """Connect to (or start) Ray according to the config; a no-op when Ray is already up."""
        if self.cfg.mode == "local":
            # Ray reads this when it is imported: without it, its servers listen on every interface.
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            import ray
        except ImportError as exc:  # heavy optional dependency, imported where used
            raise ImportError("Ray is needed for this step: pip install 'ray[data]==2.60.0'") from exc

        from common.platform.compute.ray_waits import configure

        # Ray on Spark adds nodes on demand, and its node watch owns their start: no second bound there.
        configure(None if self.cfg.mode == "spark" else self.cfg.unschedulable_timeout_s)
        if ray.is_initialized():
            self._configure_data_context()
            return self
        if self.cfg.mode == "local":
            # Ray imported before the variable was set (a notebook) fixed its constant: services reads it at call time.
            from ray._private import ray_constants

            ray_constants.ENABLE_RAY_CLUSTER = False
            kwargs: dict[str, Any] = {
                "num_cpus": self.cfg.num_cpus,
                "num_gpus": self.cfg.num_gpus,
                "include_dashboard": False,
                "_node_ip_address": "127.0.0.1",
                "log_to_driver": True,
                "configure_logging": False,
            }
            if self.cfg.max_workers:
                kwargs["_system_config"] = {"num_workers_soft_limit": self.cfg.max_workers}
            if self.cfg.object_store_memory_mb:
                kwargs["object_store_memory"] = self.cfg.object_store_memory_mb * 1024 * 1024
            with _signal_in_start():
                ray.init(**{k: v for k, v in kwargs.items() if v is not None})
            self._capacity = {key: float(ray.cluster_resources().get(key, 0.0)) for key in ("CPU", "GPU")}
            self._capacity["node_CPU"] = self._capacity["CPU"]  # one node
        elif self.cfg.mode == "address":
            with _signal_in_start():
                ray.init(address=self.cfg.address, runtime_env=self.runtime_env())
        else:
            from pyspark.sql import SparkSession

            from common.platform.compute import ray_on_spark, ray_on_spark_nodes

            spark = self.spark or SparkSession.getActiveSession()
            if spark is None:
                raise RuntimeError(
                    "ray.mode spark starts Ray inside the Spark application: build the SparkSession first"
                )
            chosen = ray_on_spark.start(self.cfg, spark)
            self._capacity = chosen.capacity()
            self._spark_cluster = True
            try:
                with _signal_in_start():
                    ray.init(runtime_env=self.runtime_env())
            except BaseException:
                self.stop()
                raise
            # Nodes asked for and never up end the job with an error instead of a silent wait.
            self._watch = ray_on_spark_nodes.NodeWatch(chosen, self.cfg.spark_node_start_timeout_s).start()
        self._started_here = True
        reclaim()  # Ray's driver took SIGTERM for itself (sys.exit(15)): a run's handler is the suite's
        self._configure_data_context()
        log.info("ray runtime up (%s): %s", self.cfg.mode, ray.cluster_resources())
        return self

    def runtime_env(self) -> Optional[dict[str, Any]]:
        """The job-level runtime environment of a driver that joins a cluster: the packages of
        ``ray.code_packages`` as ``py_modules`` (tasks' own runtime environments add to it: Ray merges them), or
        None when there are none to ship."""
        if not self.cfg.code_packages:
            return None
        return {"py_modules": package_folders(tuple(self.cfg.code_packages)), "excludes": ["__pycache__", "*.pyc"]}

    def _configure_data_context(self) -> None:
        """Set this driver's Ray Data context from the config: which batch errors are retried, the
        restart/retry limits :func:`actor_fault_tolerance` hands to the suite's actor pools, and which
        Parquet reader reads table versions (``ray.parquet_datasource``)."""
        from ray.data import DataContext

        data_context = DataContext.get_current()
        data_context.actor_task_retry_on_errors = retried_errors(self.cfg.retry_exceptions)
        data_context.set_config(FAULT_TOLERANCE_KEY, self.fault_tolerance())
        data_context.set_config(STAGE_RETRIES_KEY, self.cfg.stage_retries)
        if self._capacity is not None:  # (a runtime that joined a Ray already up keeps its starter's)
            data_context.set_config(CAPACITY_KEY, self._capacity)
        data_context.use_datasource_v2 = self.cfg.parquet_datasource == "v2"

    def wait(self, refs: list, what: str, demand: dict[str, float]) -> list:
        """The results of Ray tasks ``refs`` (``what`` they are, what each asks for): ``ray.get`` bounded by
        ``ray.unschedulable_timeout_s`` while no live node could hold them (:func:`.ray_waits.wait_all`)."""
        from common.platform.compute.ray_waits import wait_all

        self.start()
        return wait_all(refs, what, demand)

    def fault_tolerance(self) -> dict[str, int]:
        """Ray actor options: ``max_restarts`` and ``max_task_retries`` from the config."""
        return fault_tolerance(self.cfg)

    def stop(self) -> None:
        """Disconnect, and tear down a Ray-on-Spark cluster this runtime started (its worker nodes' Spark tasks end
        and free their slots). Called by the job context on success, error and Ctrl-C alike."""
        import ray

        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        if self._spark_cluster and ray.is_initialized():
            from common.platform.compute import ray_on_spark_nodes

            try:  # where the model stages ran, while the cluster still answers (it ends with the job)
                log.info("ray on spark: tasks by node %s", ray_on_spark_nodes.work_by_node())
            except Exception as exc:  # the state API is a report, never a reason for the job to fail
                log.warning("ray on spark: no task report (%s)", exc)
        try:
            if self._started_here and ray.is_initialized():
                ray.shutdown()
                from ray.data import DataContext

                DataContext.get_current().set_config(CAPACITY_KEY, None)
        finally:
            if self._spark_cluster:
                from common.platform.compute import ray_on_spark

                ray_on_spark.stop()
            self._started_here = False
            self._spark_cluster = False
            self._capacity = None

    def resources(self) -> dict[str, float]:
        """The cluster's total resources (CPU, GPU, memory) as Ray reports them; on an autoscaling cluster the CPUs
        and GPUs it reaches with every worker node up."""
        import ray

        return {**ray.cluster_resources(), **(self._capacity or {})}

    def gpus(self) -> float:
        """How many GPUs the Ray cluster has (0 on CPU-only machines)."""
        return float(self.resources().get("GPU", 0.0))

    def __enter__(self) -> "RayRuntime":
        return self.start()

    def __exit__(self, *exc: Optional[BaseException]) -> None:
        self.stop()


@contextlib.contextmanager
def _signal_in_start():
    """Within: ``ray.init``. Ray's driver sets its own SIGTERM handler first thing there (``sys.exit(15)``), so a
    scheduler's signal during the seconds Ray takes to start would end the run with an undocumented 15 and its MLflow
    run FAILED: the suite's handlers are put back the moment ``ray.init`` returns, and a SystemExit(15) from Ray's
    handler is handled as the suite's signal (its line, its grace, Terminated: runs KILLED, exit 143), what Ray had
    started shut down within that grace."""
    try:
        yield
    except SystemExit as exc:
        if exc.code != signal.SIGTERM:
            raise
        import ray

        try:
            handle_taken(signal.SIGTERM)  # raises Terminated in a handled run, its grace timer started
        finally:
            with contextlib.suppress(Exception):
                ray.shutdown()
        raise
    reclaim()


@functools.lru_cache(maxsize=None)
def package_folders(packages: tuple[str, ...]) -> list[str]:
    """Local folders holding the importable ``packages`` (each a folder named after its package), for Ray's
    ``py_modules``: a package imported from files is its own folder; one imported from a zip archive (``spark-submit
    --py-files dist/augment.zip``) is unpacked into a temporary folder once per process. Raises ImportError naming
    a package that cannot be found."""
    import importlib.util
    import tempfile
    import zipfile

    folders, unpacked = [], None
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"ray.code_packages names {name!r}, which is not an importable package here")
        location = list(spec.submodule_search_locations)[0]
        if os.path.isdir(location):
            folders.append(location)
            continue
        # Inside a zip: <archive>.zip/<name>. Unpack the package's members (not the whole archive).
        archive = location[: location.rindex(f"{os.sep}{name}")]
        unpacked = unpacked or tempfile.mkdtemp(prefix="augment-code-")
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(unpacked, [m for m in zipped.namelist() if m.startswith(f"{name}/")])
        folders.append(os.path.join(unpacked, name))
    return folders
