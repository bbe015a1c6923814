"""The suite's jobs (one module each, each with ``run(ctx)`` and ``main(argv)``) and pipelines.

``JOBS`` maps a job name to its module; ``PIPELINES`` maps a pipeline name to its jobs in order.
"""
from __future__ import annotations

import importlib
from types import ModuleType

JOBS: dict[str, str] = {
    "generate-demo": "jobs.generate_demo",
    "ingest": "jobs.ingest",
}

PIPELINES: dict[str, list[str]] = {
    "demo": ["generate-demo", "ingest"],
}


def job_module(name: str) -> ModuleType:
    """The module of job ``name``; raises KeyError listing the known jobs."""
    if name not in JOBS:
        raise KeyError(f"unknown job {name!r}; jobs: {', '.join(JOBS)}; pipelines: {', '.join(PIPELINES)}")
    return importlib.import_module(JOBS[name])
