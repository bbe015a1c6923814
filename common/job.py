"""What every job gets: the config, the SparkSession, the lakehouse, the tracker and (lazily) Ray.

A job module exposes ``run(ctx) -> JobResult`` (the work) and ``main(argv=None)`` (parse args, build
the context, run, close), so the same function serves the CLI, ``spark-submit jobs/<name>.py`` and a
notebook (``jobs.ingest.main(["--set", "..."])`` or ``jobs.ingest.run(build_context(cfg))``).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence

from common.config import AppConfig, load_config
from common.lakehouse import Lakehouse, Lineage, WriteMode, WriteResult
from common.session import SparkCapabilities, detect_capabilities, get_spark
from common.tracking import TrackedRun, Tracker

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from common.ray_runtime import RayRuntime

log = logging.getLogger(__name__)


@dataclass
class JobResult:
    """A job's outcome: the table versions it wrote (or found already written) and its metrics."""

    job: str
    outputs: dict[str, WriteResult] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    run_id: Optional[str] = None

    def summary(self) -> str:
        """One line per output table: name, version, and whether it was new."""
        lines = [f"{self.job}:"]
        for name, res in self.outputs.items():
            state = "unchanged (same config and inputs)" if res.skipped else "new version"
            rows = "" if res.num_rows is None else f", {res.num_rows} rows"
            lines.append(f"  {name} v{res.version}{rows} - {state}")
        return "\n".join(lines)


@dataclass
class JobContext:
    """Shared handles for a job run. Build it with :func:`build_context`."""

    cfg: AppConfig
    spark: "SparkSession"
    lakehouse: Lakehouse
    tracker: Tracker
    capabilities: SparkCapabilities
    force: bool = False
    _ray: Optional["RayRuntime"] = None

    def ray(self) -> "RayRuntime":
        """The Ray runtime, started on first use (jobs that need no Ray never start it)."""
        if self._ray is None:
            from common.ray_runtime import RayRuntime

            self._ray = RayRuntime(self.cfg.ray).start()
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
        return result

    def existing_version(self, run: TrackedRun, table: str, config_hash: str, inputs: Mapping[str, str]) -> Optional[int]:
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
        """A local folder for a job's report files: ``<root>/reports/<name>``."""
        from pathlib import Path

        path = Path(self.cfg.lakehouse.root) / "reports" / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def read_table(self, run: TrackedRun, table: str, version: Optional[int] = None) -> tuple["DataFrame", int]:
        """Read a lakehouse table version (latest by default), log it as a run input, return (df, version)."""
        resolved = self.lakehouse.version(table) if version is None else version
        if resolved is None:
            from common.lakehouse import LakehouseError

            raise LakehouseError(f"table {table!r} does not exist in {self.cfg.lakehouse.root}; run the job "
                                 "that produces it first (see README: Architecture)")
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


def build_context(cfg: AppConfig, force: bool = False, spark: Optional["SparkSession"] = None,
                  capabilities: Optional[SparkCapabilities] = None) -> JobContext:
    """Create the session (or use ``spark``), probe its capabilities (unless given) and wire the
    lakehouse and tracker."""
    spark = spark or get_spark(cfg.spark)
    caps = capabilities or detect_capabilities(spark, cfg.spark)
    lakehouse = Lakehouse(cfg.lakehouse, spark, native_delta=caps.native_delta)
    return JobContext(cfg=cfg, spark=spark, lakehouse=lakehouse, tracker=Tracker(cfg), capabilities=caps, force=force)


def hash_of(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts (config sections, input specs)."""
    payload = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def run_jobs(ctx: JobContext, name: str, jobs: Sequence[Callable[[JobContext], JobResult]]) -> JobResult:
    """Run job functions in order (a module's jobs for ``spark-submit jobs/<module>.py``); one merged result
    whose metrics are prefixed by job name."""
    merged = JobResult(job=name)
    for job in jobs:
        part = job(ctx)
        merged.outputs.update(part.outputs)
        merged.metrics.update({f"{part.job}.{k}": v for k, v in part.metrics.items()})
    return merged


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """The options every job and the CLI accept: --conf, --set (repeatable), --force, --log-level."""
    parser.add_argument("--conf", help="YAML config (default: $AUGMENT_CONF or conf/local.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        nargs="+", help="override a config value, e.g. --set demo.scale=2 spark.master=local[2]")
    parser.add_argument("--force", action="store_true",
                        help="write new table versions even when the same config and inputs were written before")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def config_from_args(args: argparse.Namespace) -> AppConfig:
    """Load the config named by parsed ``--conf``/``--set`` arguments."""
    overrides = [item for group in args.overrides for item in group]
    return load_config(args.conf, overrides)


def setup_logging(level: str) -> None:
    """Plain timestamped logs on stderr; py4j's chatter is kept at WARNING."""
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "urllib3", "alembic", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def job_main(name: str, run: Callable[[JobContext], JobResult], argv: Optional[Sequence[str]] = None,
             description: str = "") -> JobResult:
    """Entry point shared by every job module: parse args, build the context, run, print, close."""
    parser = argparse.ArgumentParser(prog=f"augment run {name}", description=description)
    add_common_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    ctx = build_context(config_from_args(args), force=args.force)
    try:
        result = run(ctx)
    finally:
        ctx.close()
    print(result.summary())
    return result
