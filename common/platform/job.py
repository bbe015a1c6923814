"""What every job gets: the config, the SparkSession, the lakehouse, the tracker and (lazily) Ray; and
the one place that does what every job repeats.

A job is a function ``body(ctx, run)`` decorated with :func:`job`: the decorator opens the tracked MLflow
run, hands the body a :class:`JobRun` (reads record their table versions as the run's inputs; writes carry
them as lineage, skip when the same lineage is already written, and land in the result), logs the metrics
the body returns, and gives back a :class:`JobResult`. ``main = entry_point(...)`` (:mod:`common.platform.entry`)
makes the module's ``main(argv)`` (parse args, build the context, run, close), so the same function serves the CLI,
``spark-submit jobs/<name>.py`` and a notebook (``jobs.ingest.main(["--set", "..."])`` or
``jobs.ingest.run(build_context(cfg))``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence

from common.platform.config import BaseConfig
from common.platform.errors import TrackingUnreachable
from common.platform.lakehouse import Lakehouse, Lineage, WriteMode, WriteResult
from common.platform.reports import Reports
from common.platform.run_status import check_server
from common.platform.session import SparkCapabilities, configure_session, detect_capabilities, get_spark
from common.platform.signals import reclaim
from common.platform.tracking import TrackedRun, Tracker

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from common.platform.ray_runtime import RayRuntime

log = logging.getLogger(__name__)


@dataclass
class JobResult:
    """A job's outcome: the table versions it wrote (or found already written) and its metrics."""

    job: str
    outputs: dict[str, WriteResult] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    run_id: Optional[str] = None
    # Lines the job adds to its summary (a registered model version and its gate's decision).
    notes: list[str] = field(default_factory=list)
    # What the job could not finish though its work is done (a model the gate could not judge because the registry
    # erred): the CLI exits with SHIP_INCOMPLETE (7) so that a scheduler notices.
    incomplete: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line per output table (name, version, and whether it was new), then the job's notes and what it could
        not finish."""
        lines = [f"{self.job}:"]
        for name, res in self.outputs.items():
            state = "unchanged (same config and inputs)" if res.skipped else "new version"
            rows = "" if res.num_rows is None else f", {res.num_rows} rows"
            lines.append(f"  {name} v{res.version}{rows} - {state}")
        return "\n".join(
            lines + [f"  {note}" for note in self.notes] + [f"  INCOMPLETE: {line}" for line in self.incomplete]
        )


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
            from common.platform.ray_runtime import RayRuntime

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
            from common.platform.lakehouse import LakehouseError

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


def unchanged(table: str, version: int) -> WriteResult:
    """The result of a write a job skipped because ``table`` v``version`` already holds its output."""
    return WriteResult(table, version, skipped=True, num_rows=None)


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


def hash_of(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts (config sections, input specs)."""
    payload = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def when_set(*values: Any) -> list:
    """``values`` without the Nones, as a hash's optional parts: a setting added to a config leaves the hashes
    of runs that do not set it as they were, so the versions written before it existed stay current."""
    return [v for v in values if v is not None]


def run_jobs(ctx: JobContext, name: str, jobs: Sequence[Callable[[JobContext], JobResult]]) -> JobResult:
    """Run job functions in order (a module's jobs for ``spark-submit jobs/<module>.py``); one merged result
    whose metrics are prefixed by job name."""
    merged = JobResult(job=name)
    for job in jobs:
        part = job(ctx)
        merged.outputs.update(part.outputs)
        merged.metrics.update({f"{part.job}.{k}": v for k, v in part.metrics.items()})
    return merged


class JobRun:
    """One tracked run of a job, as its body sees it.

    :meth:`read` logs a table version as an input and remembers it in :attr:`inputs`; :meth:`write` writes
    with those inputs (or the ones given) as lineage and records the result in :attr:`result`;
    :meth:`already_written` lets a body skip expensive work whose output exists. Every other attribute
    (``log_metrics``, ``log_text``, ``set_tags``, ``run_id``...) is the MLflow :class:`TrackedRun`'s, so a
    ``JobRun`` goes wherever a tracked run is expected.
    """

    def __init__(self, ctx: JobContext, tracked: TrackedRun, result: JobResult):
        self.ctx = ctx
        self.tracked = tracked
        self.result = result
        self.inputs: dict[str, str] = {}
        self.versions: dict[str, int] = {}
        self.data_versions: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tracked, name)

    def read(self, table: str, version: Optional[int] = None, as_input: bool = True) -> "DataFrame":
        """Table ``table`` at ``version`` (latest by default), logged to MLflow; its version is kept in
        :attr:`versions` and, unless ``as_input`` is False, in the lineage :attr:`inputs`."""
        df, resolved = self.ctx.read_table(self.tracked, table, version)
        self.versions[table] = resolved
        # Lineage names the version that last changed the data (table maintenance commits do not), so a
        # compaction between two runs leaves the next run's inputs, and its skip decision, unchanged.
        self.data_versions[table] = self.ctx.lakehouse.data_version(table, resolved)
        if as_input:
            self.inputs[table] = str(self.data_versions[table])
        return df

    def write(
        self,
        df: "DataFrame",
        table: str,
        config_hash: str,
        inputs: Optional[Mapping[str, str]] = None,
        mode: WriteMode = "overwrite",
    ) -> WriteResult:
        """Write ``df`` as a new version of ``table`` (see :meth:`JobContext.write`) with lineage ``inputs``
        (default: every table read so far); the result lands in ``result.outputs[table]``."""
        written = self.ctx.write(self.tracked, df, table, config_hash, self.inputs if inputs is None else inputs, mode)
        self.result.outputs[table] = written
        return written

    def write_ray(
        self,
        ds,
        table: str,
        config_hash: str,
        inputs: Optional[Mapping[str, str]] = None,
        before_commit: Optional[Callable[[], None]] = None,
    ) -> WriteResult:
        """Write the Ray Dataset ``ds`` as one new version of ``table`` (Ray's workers write the files; see
        :meth:`Lakehouse.write_ray`, which runs ``before_commit`` between the two), with lineage as in :meth:`write`;
        skipped when already written."""
        lineage = Lineage(
            job=self.tracked.name,
            config_hash=config_hash,
            inputs=dict(self.inputs if inputs is None else inputs),
            run_id=self.tracked.run_id,
        )
        written = self.ctx.lakehouse.write_ray(
            ds, table, lineage=lineage, force=self.ctx.force, before_commit=before_commit
        )
        self.ctx.chosen[self.ctx.lakehouse.location(table)] = written.version
        self.tracked.log_output_table(
            table, written.version, self.ctx.lakehouse.location(table), skipped=written.skipped
        )
        self.result.outputs[table] = written
        return written

    def written(self, table: str) -> "DataFrame":
        """The version of ``table`` this run wrote (or found written), read back (at the latest version when
        only maintenance commits followed it: they read the same rows, and VACUUM may have removed the older
        version's files)."""
        version = self.result.outputs[table].version
        latest = self.ctx.lakehouse.version(table)
        if latest != version and self.ctx.lakehouse.data_version(table, latest) == version:
            version = latest
        return self.ctx.lakehouse.read(table, version)

    def written_rows(self, table: str) -> int:
        """The row count of the version of ``table`` this run wrote: the write's own count, else (a version
        found written, or a writer that does not report one) a count of that version read back."""
        rows = self.result.outputs[table].num_rows
        return self.written(table).count() if rows is None else rows

    def write_card(
        self,
        table: str,
        generator: Mapping[str, Any],
        filter: Mapping[str, Any],
        counts: Optional[Mapping[str, Any]] = None,
    ) -> str:
        """Write and log the dataset card of the version of ``table`` this run wrote; returns its path
        (:func:`common.platform.cards.card_text`: lineage, rows, ``generator``, ``filter``, ``counts``)."""
        import tempfile
        from pathlib import Path

        from common.platform.cards import card_text, card_uri
        from common.platform.storage import put_file

        version = self.result.outputs[table].version
        uri = card_uri(self.ctx.cfg.lakehouse.root, table, version)
        text = card_text(self.ctx.lakehouse, table, version, self.written_rows(table), generator, filter, counts)
        with tempfile.TemporaryDirectory() as folder:
            local = Path(folder) / f"v{version}.md"
            local.write_text(text, encoding="utf-8")
            put_file(str(local), uri)  # the lakehouse's folder, or its object store
            self.tracked.log_artifact(str(local), f"cards/{table}")
        return uri

    def all_written(
        self,
        tables: Sequence[str],
        config_hash: str,
        inputs: Optional[Mapping[str, str]] = None,
        latest_only: bool = False,
    ) -> bool:
        """True (and every one of ``tables`` recorded as unchanged) when this job already wrote each of them
        from the same config and inputs (never when forced); with ``latest_only``, only where that is still
        the table's latest data version. A job checks this before computing anything, so a scheduled run on
        unchanged inputs costs a history lookup per table, not a recomputation."""
        found = {}
        for table in tables:
            done = self.ctx.existing_version(
                self.tracked, table, config_hash, self.inputs if inputs is None else inputs
            )
            if done is None or (latest_only and done != self.ctx.lakehouse.data_version(table)):
                return False
            found[table] = done
        for table, done in found.items():
            self.result.outputs[table] = unchanged(table, done)
            self.ctx.chosen[self.ctx.lakehouse.location(table)] = done
        log.info(
            "%s: %s already hold this output (same config and inputs); nothing to do",
            self.result.job,
            ", ".join(f"{t} v{v}" for t, v in found.items()),
        )
        return True

    def already_written(
        self, table: str, config_hash: str, inputs: Optional[Mapping[str, str]] = None, latest_only: bool = False
    ) -> bool:
        """:meth:`all_written` of the one table ``table``."""
        return self.all_written([table], config_hash, inputs, latest_only)


JobBody = Callable[[JobContext, JobRun], Optional[Mapping[str, float]]]
JobFunction = Callable[[JobContext], JobResult]


def job(name: str, preflight: Optional[Callable[[Any], None]] = None) -> Callable[[JobBody], JobFunction]:
    """Decorator: ``body(ctx, run)`` becomes the job ``name``, ``(ctx) -> JobResult``. It runs ``preflight(cfg)``
    (what the job needs of the config alone; ConfigError), which the CLI and ``run_pipeline`` also run for every
    job before a run's first job, opens the tracked MLflow run (a child of the pipeline's run when one is
    active), passes the body a :class:`JobRun`, and logs the metrics it returns (or None) to the run and result."""

    def wrap(body: JobBody) -> JobFunction:
        @functools.wraps(body)
        def run(ctx: JobContext) -> JobResult:
            if preflight is not None:
                preflight(ctx.cfg)
            result = JobResult(job=name)
            try:
                earlier = len(ctx.tracker.offline)
                with ctx.tracked(name) as tracked:
                    result.run_id = tracked.run_id
                    metrics = body(ctx, JobRun(ctx, tracked, result))
                    if metrics:
                        result.metrics.update({k: float(v) for k, v in metrics.items()})
                        tracked.log_metrics(result.metrics)
                    ctx.reports.publish()  # an object-store lakehouse's reports leave the driver's disk
                    # The work is done and committed; what MLflow missed (this run's, or a run it opened) is kept.
                    offline = ([tracked] if tracked.offline else []) + ctx.tracker.offline[earlier:]
                    if offline:
                        raise TrackingUnreachable(
                            f"{offline[0].offline}; the run's work is committed, "
                            + "; ".join(f"run {r.run_id}'s {r.outbox.summary()}" for r in offline)
                            + " (the next start logs it)"
                        )
            finally:
                ctx.reports.discard()
            return result

        run.job_name, run.preflight = name, preflight  # type: ignore[attr-defined]
        return run

    return wrap
