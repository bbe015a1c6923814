"""Fixtures of the reliability layer: the demo world whose clean ingest every process-level test is held to."""

from __future__ import annotations

import pytest
from ingest_world import ingest_config, settings

from common.config import load_config


@pytest.fixture(scope="session")
def world(spark, capabilities, tmp_path_factory):
    """The demo landing files and the clean ingest's row count per table (the reference kills and concurrent
    runs are held to): {"base": folder of the MLflow database, "landing": the files, "clean": {table: rows}}."""
    from common.platform.runner.job_context import build_context
    from jobs.foundation import generate_demo, ingest

    base = tmp_path_factory.mktemp("world")
    ctx = build_context(load_config(None, settings(base / "clean", base)), spark=spark, capabilities=capabilities)
    try:
        generate_demo.run(ctx)
        ctx.cfg = ingest_config(base / "clean", base)
        ingest.run(ctx)
        clean = {t: ctx.lakehouse.read(t).count() for t in ctx.lakehouse.table_names()}
    finally:
        ctx.close()
    return {"base": base, "landing": base / "clean" / "landing", "clean": clean}
