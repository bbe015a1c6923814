"""The suite's jobs and pipelines.

``JOBS`` maps a job name to ``module`` (whose ``run(ctx)`` is the job) or ``module:function``;
``PIPELINES`` maps a pipeline name to its jobs in order; ``REGISTRY`` hands both to the platform (CLI,
pipeline runner). Each job module has ``main(argv)`` for ``spark-submit jobs/<family>/<module>.py``: a family's first
module (``jobs/cga/cga.py``) runs the family's jobs in order, a job in a module of its own runs that job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Sequence

from common.config import load_config
from common.platform.runner.entry import entry_point as _entry_point
from common.platform.runner.pipeline import JobRegistry
from common.platform.runner.pipeline import run_pipeline as _run_pipeline

if TYPE_CHECKING:
    from common.platform.runner.job import JobContext, JobResult

JOBS: dict[str, str] = {
    "generate-demo": "jobs.foundation.generate_demo",
    "ingest": "jobs.foundation.ingest",
    "group-catalog": "jobs.consistency.group_catalog",
    "subsample": "jobs.foundation.subsample",
    "consistency-splits": "jobs.consistency.consistency_splits",
    "consistency-train": "jobs.consistency.consistency_train",
    "query-normalize": "jobs.query.query_graph:normalize",
    "query-specificity": "jobs.query.query_graph:specificity_job",
    "query-similarity": "jobs.query.query_graph:similarity_job",
    "query-clusters": "jobs.query.query_graph:clusters_job",
    "query-pairs": "jobs.query.query_graph:pairs_job",
    "cga-pairs": "jobs.cga.cga:pairs_job",
    "cga-generate": "jobs.cga.cga:generate_job",
    "cga-train": "jobs.cga.cga_train:train_job",
    "cga-sweep": "jobs.cga.cga_sweep:sweep_job",
    "query-reformulate": "jobs.query.query_reformulation:reformulate_job",
    "query-augment": "jobs.query.query_reformulation:augment_job",
    "query-matcher": "jobs.query.query_matcher:matcher_job",
    "ingest-texts": "jobs.foundation.ingest:texts_job",
    "boostaug-splits": "jobs.boostaug.boostaug:splits_job",
    "boostaug-augment": "jobs.boostaug.boostaug:augment_job",
    "boostaug-filter": "jobs.boostaug.boostaug_filter:filter_job",
    "boostaug-evaluate": "jobs.boostaug.boostaug_evaluate:evaluate_job",
    "ingest-documents": "jobs.foundation.ingest:documents_job",
    "genre-topics": "jobs.genre.genre:topics_job",
    "genre-splits": "jobs.genre.genre:splits_job",
    "genre-generate": "jobs.genre.genre_generate:generate_job",
    "genre-evaluate": "jobs.genre.genre_evaluate:evaluate_job",
    "ingest-multilabel": "jobs.foundation.ingest:multilabel_job",
    "compositional-split": "jobs.compositional.compositional:split_job",
    "compositional-labels": "jobs.compositional.compositional:labels_job",
    "compositional-generate": "jobs.compositional.compositional_generate:generate_job",
    "compositional-qc": "jobs.compositional.compositional:qc_job",
    "compositional-evaluate": "jobs.compositional.compositional_evaluate:evaluate_job",
    "maintain": "jobs.foundation.maintain",
    "results-summary": "jobs.summary.summary",
}

PIPELINES: dict[str, list[str]] = {
    "foundation": ["generate-demo", "ingest"],
    "consistency": ["generate-demo", "ingest", "group-catalog", "consistency-splits", "consistency-train"],
    "query-graph": [
        "generate-demo",
        "ingest",
        "query-normalize",
        "query-specificity",
        "query-similarity",
        "query-clusters",
        "query-pairs",
    ],
}
PIPELINES["cga"] = PIPELINES["consistency"] + ["cga-pairs", "cga-generate", "cga-train", "cga-sweep"]
PIPELINES["query-reformulation"] = PIPELINES["query-graph"] + ["query-reformulate", "query-augment", "query-matcher"]
PIPELINES["boostaug"] = [
    "generate-demo",
    "ingest-texts",
    "boostaug-splits",
    "boostaug-augment",
    "boostaug-filter",
    "boostaug-evaluate",
]
PIPELINES["genre-transfer"] = ["ingest-documents", "genre-topics", "genre-splits", "genre-generate", "genre-evaluate"]
PIPELINES["compositional"] = [
    "ingest-multilabel",
    "compositional-split",
    "compositional-labels",
    "compositional-generate",
    "compositional-qc",
    "compositional-evaluate",
]
# Weekly in production (resources/maintenance.yml): compaction and VACUUM of every table.
PIPELINES["maintenance"] = ["maintain"]
# The main demo: every pipeline on the demo data (jobs shared by several run once).
PIPELINES["demo"] = list(
    dict.fromkeys(
        PIPELINES["cga"]
        + PIPELINES["query-reformulation"]
        + PIPELINES["boostaug"]
        + PIPELINES["genre-transfer"]
        + PIPELINES["compositional"]
    )
) + ["results-summary"]


REGISTRY = JobRegistry(JOBS, PIPELINES)
job_module = REGISTRY.module
job_runner = REGISTRY.runner
job_summary = REGISTRY.summary


def run_pipeline(
    ctx: "JobContext",
    name: str,
    job_names: Optional[Sequence[str]] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> list["JobResult"]:
    """Run pipeline ``name`` (or the given ``job_names`` under that name) in one MLflow parent run, with a
    progress line per job started and finished (to ``progress``, default stdout); returns the jobs' results."""
    return _run_pipeline(ctx, name, PIPELINES[name] if job_names is None else job_names, REGISTRY.runner, progress)


def run_named(ctx: "JobContext", name: str, job_names: Sequence[str]) -> "JobResult":
    """Run the jobs named ``job_names`` in order as one job ``name``, one merged result: a family module's ``run``
    for ``spark-submit jobs/<family>/<family>.py`` where the family's jobs live in modules of their own."""
    from common.platform.runner.job import run_jobs

    return run_jobs(ctx, name, tuple(REGISTRY.runner(job) for job in job_names))


def entry_point(name: str, run: Callable[["JobContext"], "JobResult"], doc: Optional[str]):
    """``main(argv=None)`` of a job module (CLI / ``spark-submit jobs/<family>/<module>.py``), loading this suite's
    config (:func:`common.config.load_config`)."""
    return _entry_point(name, run, doc, load_config)
