"""The suite's jobs and pipelines.

``JOBS`` maps a job name to ``module`` (whose ``run(ctx)`` is the job) or ``module:function``;
``PIPELINES`` maps a pipeline name to its jobs in order. Each module also has ``main(argv)`` for
``spark-submit jobs/<module>.py``.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable

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
    "cga-train": "jobs.cga:train_job",
    "cga-sweep": "jobs.cga:sweep_job",
    "query-reformulate": "jobs.query_reformulation:reformulate_job",
    "query-augment": "jobs.query_reformulation:augment_job",
    "query-matcher": "jobs.query_reformulation:matcher_job",
}

PIPELINES: dict[str, list[str]] = {
    "foundation": ["generate-demo", "ingest"],
    "consistency": ["generate-demo", "ingest", "group-catalog", "consistency-splits", "consistency-train"],
    "query-graph": ["generate-demo", "ingest", "query-normalize", "query-specificity", "query-similarity",
                    "query-clusters", "query-pairs"],
}
PIPELINES["cga"] = PIPELINES["consistency"] + ["cga-pairs", "cga-generate", "cga-train", "cga-sweep"]
PIPELINES["query-reformulation"] = PIPELINES["query-graph"] + ["query-reformulate", "query-augment", "query-matcher"]
# The main demo: every pipeline on the demo data (jobs shared by several run once).
PIPELINES["demo"] = list(dict.fromkeys(PIPELINES["cga"] + PIPELINES["query-reformulation"]))


def job_module(name: str) -> ModuleType:
    """The module of job ``name``; raises KeyError listing the known jobs."""
    if name not in JOBS:
        raise KeyError(f"unknown job {name!r}; jobs: {', '.join(JOBS)}; pipelines: {', '.join(PIPELINES)}")
    return importlib.import_module(JOBS[name].split(":")[0])


def job_runner(name: str) -> Callable:
    """The function that runs job ``name`` (``run(ctx) -> JobResult``)."""
    module = job_module(name)
    return getattr(module, JOBS[name].split(":")[1]) if ":" in JOBS[name] else module.run


def job_summary(name: str) -> str:
    """The first line of the job function's (or module's) docstring."""
    doc = (job_runner(name).__doc__ if ":" in JOBS[name] else job_module(name).__doc__) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""
