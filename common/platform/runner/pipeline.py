"""Job registries and pipelines: several jobs in one MLflow parent run, sharing one context.

The platform knows jobs only through a :class:`JobRegistry` that the application hands it (``jobs``
builds one from its name tables), so the platform never imports the jobs that stand on it.
"""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Mapping, Optional, Sequence

from common.platform.base_config import BaseConfig
from common.platform.runner.job import JobContext, JobFunction, JobResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobRegistry:
    """Job names to ``module`` (whose ``run(ctx)`` is the job) or ``module:function``, and pipeline names
    to their jobs in order."""

    jobs: Mapping[str, str]
    pipelines: Mapping[str, Sequence[str]]

    def __post_init__(self) -> None:
        for pipeline, steps in self.pipelines.items():
            unknown = [s for s in steps if s not in self.jobs]
            if unknown:
                raise KeyError(f"pipeline {pipeline!r} names unknown job {unknown[0]!r}")

    def module(self, name: str) -> ModuleType:
        """The module of job ``name``; raises KeyError listing the known jobs and pipelines."""
        if name not in self.jobs:
            raise KeyError(
                f"unknown job {name!r}; jobs: {', '.join(self.jobs)}; pipelines: {', '.join(self.pipelines)}"
            )
        return importlib.import_module(self.jobs[name].split(":")[0])

    def runner(self, name: str) -> JobFunction:
        """The function that runs job ``name`` (``run(ctx) -> JobResult``)."""
        module = self.module(name)
        target = self.jobs[name]
        return getattr(module, target.split(":")[1]) if ":" in target else module.run

    def summary(self, name: str) -> str:
        """The first line of the job function's (or module's) docstring."""
        doc = (self.runner(name).__doc__ if ":" in self.jobs[name] else self.module(name).__doc__) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""


def run_pipeline(
    ctx: JobContext,
    name: str,
    job_names: Sequence[str],
    runner: Callable[[str], JobFunction],
    progress: Optional[Callable[[str], None]] = None,
) -> list[JobResult]:
    """Run ``job_names`` (resolved by ``runner``) in order under a parent MLflow run ``pipeline:<name>``;
    returns their results.

    Every job's config check (:func:`preflight`) runs first. Each job opens its own child run. A failing job
    fails the pipeline (and marks the parent run failed).
    ``progress`` (default: print to stdout) gets one line per job started and finished, with elapsed times.
    """
    preflight(ctx.cfg, job_names, runner)
    say = progress or (lambda line: print(line, flush=True))
    results = []
    start = time.monotonic()
    with ctx.tracker.run(f"pipeline:{name}", tags={"pipeline": name, "jobs": ",".join(job_names)}) as parent:
        for i, job in enumerate(job_names, 1):
            log.info("pipeline %s: running %s", name, job)
            say(f"[{name} {i}/{len(job_names)}] {job} ... ({_clock(time.monotonic() - start)} elapsed)")
            job_start = time.monotonic()
            try:
                result = runner(job)(ctx)
            except BaseException:
                say(f"[{name} {i}/{len(job_names)}] {job} FAILED after {_clock(time.monotonic() - job_start)}")
                raise
            results.append(result)
            parent.log_metrics({f"{job}.{k}": v for k, v in result.metrics.items()})
            say(
                f"[{name} {i}/{len(job_names)}] {job} done in {_clock(time.monotonic() - job_start)}: "
                f"{_outcome(result)}"
            )
    say(f"[{name}] {len(job_names)} jobs in {_clock(time.monotonic() - start)}")
    return results


def preflight(cfg: BaseConfig, job_names: Sequence[str], runner: Callable[[str], JobFunction]) -> None:
    """Run the config check of each of ``job_names`` that has one (``job(name, preflight=...)``); raises the
    first check's ConfigError. Runs before any engine or job starts, so that a key a later job needs fails the
    run at once, not after the jobs before it."""
    for name in job_names:
        check = getattr(runner(name), "preflight", None)
        if check is not None:
            check(cfg)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"


def _outcome(result: JobResult) -> str:
    """``3 new versions, 1 unchanged`` (or ``no tables``) for a progress line."""
    if not result.outputs:
        return "no tables"
    new = sum(not r.skipped for r in result.outputs.values())
    parts = [f"{new} new version{'s' if new != 1 else ''}"] if new else []
    if len(result.outputs) - new:
        parts.append(f"{len(result.outputs) - new} unchanged")
    return ", ".join(parts)
