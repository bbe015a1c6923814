"""The ``foundation`` pipeline's jobs in order (``spark-submit jobs/foundation/foundation.py``): the demo world
(:mod:`jobs.foundation.generate_demo`: nothing to write where the inputs are configured), then ingest
(:mod:`jobs.foundation.ingest`)."""

from __future__ import annotations

from common.platform.runner.job import JobContext, JobResult
from jobs import PIPELINES, entry_point, run_named


def run(ctx: JobContext) -> JobResult:
    """Run the ``foundation`` pipeline's jobs in order; one merged result."""
    return run_named(ctx, "foundation", PIPELINES["foundation"])


main = entry_point("foundation", run, __doc__)

if __name__ == "__main__":
    main()
