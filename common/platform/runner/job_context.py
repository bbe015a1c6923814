"""What every job gets: the config, the SparkSession, the lakehouse, the tracker and (lazily) Ray, as a
:class:`JobContext`, and :func:`build_context`, which wires them (failing first, in seconds, where the object store or
the tracking server does not answer). What a job does with them, its tracked run, is :mod:`common.platform.runner.job`.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional

from common.platform.base_config import BaseConfig
from common.platform.compute.session import SparkCapabilities, configure_session, detect_capabilities, get_spark
from common.platform.lakehouse.lakehouse import Lakehouse, Lineage, WriteMode, WriteResult
from common.platform.process.signals import reclaim
from common.platform.reports.folders import Reports
from common.platform.tracking.status import check_server
from common.platform.tracking.tracker import TrackedRun, Tracker

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from common.platform.compute.ray_runtime import RayRuntime

log = logging.getLogger(__name__)


@dataclass
class JobContext:
    """Shared handles for a job run. Build it with :func:`build_context`."""

    # The application config (common.config.AppConfig): the platform reads only BaseConfig's sections.
    cfg: BaseConfig
    spark: "SparkSession"
    lakehouse: Lakehouse
    tracker: Tracker
    capabilities: SparkCapabilities
    force: bool = False
    # The version of each table (by location) this context's jobs last wrote or found already written. A later
    # job's read of the latest version takes that one where its data differ: a job that skips because an older
    # version holds its output (config A, then B, then A again) must feed A's version, not B's, to the jobs
    # after it.
    chosen: dict[str, int] = field(default_factory=dict)
    _ray: Optional["RayRuntime"] = None
    # The report folders under <lakehouse.root>/reports (built from the config when not given).
    reports: Optional[Reports] = None

    def __post_init__(self) -> None:
        if self.reports is None:
            self.reports = Reports(self.cfg.lakehouse.root)

    def ray(self) -> "RayRuntime":
        """The Ray runtime, started on first use (jobs that need no Ray never start it)."""
        if self._ray is None:
            from common.platform.compute.ray_runtime import RayRuntime

            self._ray = RayRuntime(self.cfg.ray, spark=self.spark).start()
        return self._ray

    @contextlib.contextmanager
    def tracked(self, job: str, tags: Optional[Mapping[str, Any]] = None) -> Iterator[TrackedRun]:
        """An MLflow run for ``job`` (a child run when a pipeline run is active)."""
        base = {"job": job, "config.name": self.cfg.name, "spark.native_delta": self.capabilities.native_delta}
        with self.tracker.run(job, tags={**base, **(tags or {})}) as run:
            yield run

    def write(
        self,
        run: TrackedRun,
        df: "DataFrame",
        table: str,
        config_hash: str,
        inputs: Mapping[str, str],
        mode: WriteMode = "overwrite",
    ) -> WriteResult:
        """Write ``df`` as a new version of ``table`` with lineage (job, run, config hash, input versions).

        Skips (returns the existing version) when the same job already wrote it from the same config
        and input versions, unless the context was built with ``force``. Logs the version to the run.
        """
        lineage = Lineage(job=run.name, config_hash=config_hash, inputs=dict(inputs), run_id=run.run_id)
        result = self.lakehouse.write(df, table, mode=mode, lineage=lineage, force=self.force)
        run.log_output_table(table, result.version, self.lakehouse.location(table), skipped=result.skipped)
        self.chosen[self.lakehouse.location(table)] = result.version
        return result

    def existing_version(
        self, run: TrackedRun, table: str, config_hash: str, inputs: Mapping[str, str]
    ) -> Optional[int]:
        """The version of ``table`` this job already wrote from the same config and inputs (None if none,
        or when forced): lets a job skip expensive work (model training) whose output exists."""
        if self.force:
            return None
        lineage = Lineage(job=run.name, config_hash=config_hash, inputs=dict(inputs))
        return self.lakehouse.find_version(table, lineage)

    def models_dir(self, name: str, key: str) -> str:
        """Where a model named ``name`` trained from inputs/config ``key`` lives: ``<root>/models/<name>-<key>``."""
        return f"{self.cfg.lakehouse.root.rstrip('/')}/models/{name}-{key}"

    def reports_dir(self, name: str) -> str:
        """A local folder for report ``name``'s files (:meth:`Reports.folder`: on an object-store lakehouse a
        scratch folder that goes to the store when the job ends)."""
        return self.reports.folder(name)

    def read_table(self, run: TrackedRun, table: str, version: Optional[int] = None) -> tuple["DataFrame", int]:
        """Read a lakehouse table version (by default the latest, or the one :attr:`chosen` for the table where
        the latest holds other data), log it as a run input, return (df, version)."""
        resolved = self.lakehouse.version(table) if version is None else version
        chosen = self.chosen.get(self.lakehouse.location(table))
        if (
            version is None
            and resolved is not None
            and chosen is not None
            and chosen < resolved
            and self.lakehouse.data_version(table, resolved) != chosen
        ):  # (a history read only then)
            log.info("reading %s v%d, the version this run chose, not the latest (v%d)", table, chosen, resolved)
            resolved = chosen
        if resolved is None:
            from common.platform.lakehouse.lakehouse import LakehouseError

            raise LakehouseError(
                f"table {table!r} does not exist in {self.cfg.lakehouse.root}; run the job "
                "that produces it first (see docs/concepts/architecture.md)"
            )
        run.log_input_table(table, resolved, self.lakehouse.location(table))
        return self.lakehouse.read(table, resolved), resolved

    def close(self) -> None:
        """Stop Ray if this context started it. The SparkSession is left to its owner."""
        if self._ray is not None:
            self._ray.stop()
            self._ray = None


def build_context(
    cfg: BaseConfig,
    force: bool = False,
    spark: Optional["SparkSession"] = None,
    capabilities: Optional[SparkCapabilities] = None,
) -> JobContext:
    """Create the session (or use ``spark``), probe its capabilities (unless given) and wire the
    lakehouse and tracker. Raises :class:`~common.platform.storage.StorageUnreachable` first when the lakehouse's
    object store does not answer, :class:`~common.platform.errors.TrackingUnreachable` when the MLflow server does
    not."""
    if not cfg.lakehouse.catalog:
        from common.platform.storage import check_reachable

        # An object store that is down fails the job here, naming its endpoint, before anything starts or is
        # written (Hadoop and delta-rs would retry for minutes inside the first read).
        check_reachable(cfg.lakehouse.root)
    # A tracking server that is down fails it here too, in seconds, not at the run's first MLflow call after the
    # client's minutes of retries.
    check_server(cfg.tracking_uri, cfg.tracking.start_timeout_s)
    tracker = Tracker(cfg)
    if spark is None:
        # pyspark is imported before the MLflow thread starts: two threads importing at once can deadlock on a
        # module both import (the cluster rehearsal's genre-transfer driver died of _DeadlockError on
        # importlib.resources.abc, pyspark.errors against MLflow's imports). What overlaps is the JVM's start.
        import importlib.resources  # noqa: F401
        from concurrent.futures import ThreadPoolExecutor

        import pyspark.sql  # noqa: F401

        # A fresh process (every `augment run`, spark-submit job and scheduled task) spends 3-4 s importing
        # MLflow and opening its store, and as long waiting for the JVM to start: the two overlap.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlflow-setup") as pool:
            tracked = pool.submit(tracker.setup)
            spark = get_spark(cfg.spark)
            reclaim()  # the SparkContext's start took SIGINT for itself: a run's handler is the suite's
            tracked.result()  # a tracking error is raised here, as it would be at the first run
    elif cfg.spark.mode != "local":
        # A notebook's or a Databricks job's session (the caller's ``spark``): the suite's settings still apply.
        configure_session(spark, cfg.spark)
    caps = capabilities or detect_capabilities(spark, cfg.spark)
    lakehouse = Lakehouse(cfg.lakehouse, spark, native_delta=caps.native_delta)
    return JobContext(cfg=cfg, spark=spark, lakehouse=lakehouse, tracker=tracker, capabilities=caps, force=force)
