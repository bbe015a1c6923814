"""The one place that does what every job repeats (what every job gets, its :class:`JobContext`, is
:mod:`common.platform.runner.job_context`).

A job is a function ``body(ctx, run)`` decorated with :func:`job`: the decorator opens the tracked MLflow
run, hands the body a :class:`JobRun` (reads record their table versions as the run's inputs; writes carry
them as lineage, skip when the same lineage is already written, and land in the result), logs the metrics
the body returns, and gives back a :class:`JobResult`. ``main = entry_point(...)``
(:mod:`common.platform.runner.entry`)
makes the module's ``main(argv)`` (parse args, build the context, run, close), so the same function serves the CLI,
``spark-submit jobs/<family>/<module>.py`` and a notebook (``jobs.foundation.ingest.main(["--set", "..."])`` or
``jobs.foundation.ingest.run(build_context(cfg))``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from common.platform.errors import TrackingUnreachable
from common.platform.lakehouse.lakehouse import Lineage, WriteMode, WriteResult
from common.platform.runner.job_context import JobContext, build_context
from common.platform.tracking.tracker import TrackedRun

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# The job API's one import for job modules and notebooks: the context and its builder come with it.
__all__ = [
    "JobBody",
    "JobContext",
    "JobFunction",
    "JobResult",
    "JobRun",
    "build_context",
    "hash_of",
    "job",
    "run_jobs",
    "unchanged",
    "when_set",
]

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


def unchanged(table: str, version: int) -> WriteResult:
    """The result of a write a job skipped because ``table`` v``version`` already holds its output."""
    return WriteResult(table, version, skipped=True, num_rows=None)


def hash_of(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts (config sections, input specs)."""
    payload = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def when_set(*values: Any) -> list:
    """``values`` without the Nones, as a hash's optional parts: a setting added to a config leaves the hashes
    of runs that do not set it as they were, so the versions written before it existed stay current."""
    return [v for v in values if v is not None]


def run_jobs(ctx: JobContext, name: str, jobs: Sequence[Callable[[JobContext], JobResult]]) -> JobResult:
    """Run job functions in order (a module's jobs for ``spark-submit jobs/<family>/<module>.py``); one merged result
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
        (:func:`common.platform.reports.cards.card_text`: lineage, rows, ``generator``, ``filter``, ``counts``)."""
        import tempfile
        from pathlib import Path

        from common.platform.reports.cards import card_text, card_uri
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
