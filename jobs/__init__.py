"""The suite's jobs (one module each, each with ``run(ctx)`` and ``main(argv)``) and pipelines.

``JOBS`` maps a job name to its module; ``PIPELINES`` maps a pipeline name to its jobs in order.
"""
from __future__ import annotations

import importlib
from types import ModuleType

JOBS: dict[str, str] = {
    "generate-demo": "jobs.generate_demo",
    "ingest": "jobs.ingest",
    "group-catalog": "jobs.group_catalog",
    "subsample": "jobs.subsample",
    "consistency-splits": "jobs.consistency_splits",
    "consistency-train": "jobs.consistency_train",
}

PIPELINES: dict[str, list[str]] = {
    "demo": ["generate-demo", "ingest"],
    "consistency": ["generate-demo", "ingest", "group-catalog", "consistency-splits", "consistency-train"],
}


def job_module(name: str) -> ModuleType:
    """The module of job ``name``; raises KeyError listing the known jobs."""
    if name not in JOBS:
        raise KeyError(f"unknown job {name!r}; jobs: {', '.join(JOBS)}; pipelines: {', '.join(PIPELINES)}")
    return importlib.import_module(JOBS[name])
