"""The suite's jobs and pipelines.

``JOBS`` maps a job name to ``module`` (whose ``run(ctx)`` is the job) or ``module:function``;
``PIPELINES`` maps a pipeline name to its jobs in order; ``REGISTRY`` hands both to the platform (CLI,
pipeline runner). Each job module has ``main(argv)`` for ``spark-submit jobs/<module>.py``: a family's first
module (``jobs/cga.py``) runs the family's jobs in order, a job in a module of its own runs that job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Sequence

from common.config import load_config
from common.platform.entry import entry_point as _entry_point
from common.platform.pipeline import JobRegistry
from common.platform.pipeline import run_pipeline as _run_pipeline

if TYPE_CHECKING:
    from common.platform.job import JobContext, JobResult

JOBS: dict[str, str] = {
    "generate-demo": "jobs.generate_demo",
    "ingest": "jobs.ingest",
    "group-catalog": "jobs.group_catalog",
    "subsample": "jobs.subsample",
    "consistency-splits": "jobs.consistency_splits",
    "consistency-train": "jobs.consistency_train",
    "query-normalize": "jobs.query_graph:normalize",
    "query-specificity": "jobs.query_graph:specificity_job",
    "query-similarity": "jobs.query_graph:similarity_job",
    "query-clusters": "jobs.query_graph:clusters_job",
    "query-pairs": "jobs.query_graph:pairs_job",
    "cga-pairs": "jobs.cga:pairs_job",
    "cga-generate": "jobs.cga:generate_job",
    "cga-train": "jobs.cga_train:train_job",
    "cga-sweep": "jobs.cga_sweep:sweep_job",
    "query-reformulate": "jobs.query_reformulation:reformulate_job",
    "query-augment": "jobs.query_reformulation:augment_job",
    "query-matcher": "jobs.query_matcher:matcher_job",
    "ingest-texts": "jobs.ingest:texts_job",
    "boostaug-splits": "jobs.boostaug:splits_job",
    "boostaug-augment": "jobs.boostaug:augment_job",
    "boostaug-filter": "jobs.boostaug_filter:filter_job",
    "boostaug-evaluate": "jobs.boostaug_evaluate:evaluate_job",
    "ingest-documents": "jobs.ingest:documents_job",
    "genre-topics": "jobs.genre:topics_job",
    "genre-splits": "jobs.genre:splits_job",
    "genre-generate": "jobs.genre_generate:generate_job",
    "genre-evaluate": "jobs.genre_evaluate:evaluate_job",
    "ingest-multilabel": "jobs.ingest:multilabel_job",
    "compositional-split": "jobs.compositional:split_job",
    "compositional-labels": "jobs.compositional:labels_job",
    "compositional-generate": "jobs.compositional_generate:generate_job",
    "compositional-qc": "jobs.compositional:qc_job",
    "compositional-evaluate": "jobs.compositional_evaluate:evaluate_job",
    "maintain": "jobs.maintain",
    "results-summary": "jobs.summary",
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


def entry_point(name: str, run: Callable[["JobContext"], "JobResult"], doc: Optional[str]):
    """``main(argv=None)`` of a job module (CLI / ``spark-submit jobs/<module>.py``), loading this suite's
    config (:func:`common.config.load_config`)."""
    return _entry_point(name, run, doc, load_config)
