"""The consistency pipeline's own jobs in order (``spark-submit jobs/consistency/consistency.py``): item versions
grouped (:mod:`jobs.consistency.group_catalog`), the splits (:mod:`jobs.consistency.consistency_splits`), HFT trained
and evaluated (:mod:`jobs.consistency.consistency_train`); the ``foundation`` jobs it stands on are left to their own
run, as ``augment run consistency`` runs them first."""

from __future__ import annotations

from common.platform.runner.job import JobContext, JobResult
from jobs import PIPELINES, entry_point, run_named


def run(ctx: JobContext) -> JobResult:
    """Run the consistency pipeline's jobs after ``foundation``'s, in order; one merged result."""
    own = [name for name in PIPELINES["consistency"] if name not in PIPELINES["foundation"]]
    return run_named(ctx, "consistency", own)


main = entry_point("consistency", run, __doc__)

if __name__ == "__main__":
    main()
