"""The ``foundation`` pipeline's jobs in order (``spark-submit jobs/foundation/foundation.py``): the demo world
(:mod:`jobs.foundation.generate_demo`: nothing to write where the inputs are configured), then ingest
(:mod:`jobs.foundation.ingest`)."""

from __future__ import annotations

from common.platform.runner.job import JobContext, JobResult, run_jobs
from jobs import PIPELINES, entry_point, job_runner


def run(ctx: JobContext) -> JobResult:
    """Run the ``foundation`` pipeline's jobs in order; one merged result."""
    return run_jobs(ctx, "foundation", tuple(job_runner(name) for name in PIPELINES["foundation"]))


main = entry_point("foundation", run, __doc__)

if __name__ == "__main__":
    main()
