"""Pipelines: several jobs in one MLflow parent run, sharing one context (session, lakehouse, Ray)."""
from __future__ import annotations

import logging
from typing import Sequence

from common.job import JobContext, JobResult

log = logging.getLogger(__name__)


def run_pipeline(ctx: JobContext, name: str, job_names: Sequence[str]) -> list[JobResult]:
    """Run ``job_names`` in order under a parent MLflow run ``pipeline:<name>``; returns their results.

    Each job opens its own child run. A failing job fails the pipeline (and marks the parent run failed).
    """
    from jobs import job_runner

    results = []
    with ctx.tracker.run(f"pipeline:{name}", tags={"pipeline": name, "jobs": ",".join(job_names)}) as parent:
        for job in job_names:
            log.info("pipeline %s: running %s", name, job)
            result = job_runner(job)(ctx)
            results.append(result)
            parent.log_metrics({f"{job}.{k}": v for k, v in result.metrics.items()})
    return results
