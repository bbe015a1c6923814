"""The ``augment`` console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pyspark.sql import functions as F

from common.platform.lakehouse.lakehouse import Lineage

AUGMENT = Path(sys.executable).parent / "augment"


def _augment(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(AUGMENT), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_help_lists_the_commands():
    assert AUGMENT.is_file(), "the console script is installed by setup.py"
    out = _augment("--help")
    assert out.returncode == 0
    for command in ("run", "tables", "history", "jobs", "config"):
        assert command in out.stdout
    run_help = _augment("run", "--help")
    assert "generate-demo" in run_help.stdout and "--set" in run_help.stdout and "--force" in run_help.stdout
    # the exit codes: the help's table, the reliability page's and the code's are one
    from common.platform.errors import EXIT_CODES, SHIP_INCOMPLETE, USER_ERRORS
    from common.platform.process.signals import SIGNALS

    page = (Path(__file__).resolve().parents[1] / "docs" / "operations" / "reliability.md").read_text()
    for code, what, retry in EXIT_CODES:
        assert f"  {code}  {what} (retry: {retry})" in out.stdout
        assert f"| {code} | {what} | {retry} |" in page
    signals = {128 + signum for signum in SIGNALS}
    assert {code for _, code, _ in USER_ERRORS} | {0, 1, SHIP_INCOMPLETE} | signals == {
        code for code, _, _ in EXIT_CODES
    }


def test_jobs_lists_jobs_and_pipelines():
    out = _augment("jobs")
    assert out.returncode == 0
    assert "generate-demo" in out.stdout and "ingest" in out.stdout
    assert "foundation             generate-demo -> ingest" in out.stdout
    assert "query-graph" in out.stdout and "consistency-train" in out.stdout


def test_every_job_module_runs_under_spark_submit():
    """Each module JOBS names has ``main`` (``spark-submit jobs/<family>/<module>.py``); a module without it would
    import, do nothing and exit 0. Its help names the job, or the family's jobs it runs in order."""
    import importlib

    from jobs import JOBS

    modules = sorted({target.split(":")[0] for target in JOBS.values()})
    missing = [m for m in modules if not callable(getattr(importlib.import_module(m), "main", None))]
    assert not missing, f"job modules without main: {missing}"
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[1] / "jobs" / "cga" / "cga_train.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "cga-train" in out.stdout


def test_tables_and_history_read_the_lakehouse_without_spark(spark, lakehouse, tmp_path):
    lineage = Lineage(job="ingest", config_hash="c0ffee", inputs={"landing/x.csv": "files:1"}, run_id="r1")
    lakehouse.write(spark.range(12).withColumn("v", F.lit("x")), "items", lineage=lineage)
    lakehouse.write(spark.range(3).withColumn("v", F.lit("y")), "items", mode="append")
    out = _augment("tables", "--set", f"lakehouse.root={lakehouse.cfg.root}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("items"))
    assert line.split()[:3] == ["items", "1", "15"]
    history = _augment("history", "items", "--set", f"lakehouse.root={lakehouse.cfg.root}", cwd=tmp_path)
    assert history.returncode == 0, history.stderr
    lines = history.stdout.strip().splitlines()
    assert lines[0].startswith("v1") and lines[1].startswith("v0")
    assert "job=ingest config=c0ffee run=r1" in lines[1] and "files:1" in lines[1]
    empty = _augment("tables", "--set", f"lakehouse.root={tmp_path / 'none'}", cwd=tmp_path)
    assert empty.stdout.strip() == "no tables yet"


def test_config_errors_exit_2_naming_the_key(tmp_path):
    out = _augment("config", "--set", "spark.mode=yarn", cwd=tmp_path)
    assert out.returncode == 2
    assert "spark.mode: 'yarn' is not allowed" in out.stderr
    unknown = _augment("run", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown job or pipeline 'nope'" in unknown.stderr
    shown = _augment("config", "--set", "demo.scale=3", cwd=tmp_path)
    assert shown.returncode == 0 and "scale: 3.0" in shown.stdout


def test_check_runs_every_jobs_own_check_and_leaves_outages_to_the_run(tmp_path):
    """``augment check`` (the bundle's first task, run without retries): a config error a job's own check finds is
    2; a model server that does not answer is said and left to the run (0), which retries it; nothing starts."""
    bad = _augment("check", "cga", "--set", "cga.model.kind=endpoint", cwd=tmp_path)
    assert bad.returncode == 2 and "cga.model.endpoint.base_url" in bad.stderr, bad.stderr
    down = _augment(
        "check",
        "cga",
        "--set",
        "cga.model.kind=endpoint",
        "cga.model.endpoint.base_url=http://127.0.0.1:9/v1",
        "cga.model.endpoint.model=m",
        cwd=tmp_path,
    )
    assert down.returncode == 0 and "left to the run" in down.stderr, down.stderr
    assert _augment("check", "boostaug", cwd=tmp_path).returncode == 0
    assert not list(tmp_path.iterdir())  # no lakehouse, no MLflow database: nothing started


def test_a_pipeline_checks_every_jobs_config_before_its_first_job(ctx):
    """run_pipeline (the notebooks' and the CLI's path) runs each job's preflight first: a key the third job
    needs fails the run before the first job opens its MLflow run or writes a table."""
    import mlflow
    import pytest

    from common.platform.errors import ConfigError
    from common.platform.runner.pipeline import run_pipeline
    from jobs import PIPELINES, REGISTRY

    ctx.cfg.inputs.multilabel = None
    jobs = ["generate-demo", "ingest-texts", *PIPELINES["compositional"]]
    with pytest.raises(ConfigError, match="nothing to ingest: set inputs.multilabel"):
        run_pipeline(ctx, "compositional", jobs, REGISTRY.runner)
    with pytest.raises(ConfigError, match="nothing to ingest: set inputs.multilabel"):
        REGISTRY.runner("ingest-multilabel")(ctx)  # the job called on its own checks before its MLflow run
    experiment = mlflow.MlflowClient(ctx.cfg.tracking_uri).get_experiment_by_name(ctx.cfg.tracking.experiment)
    assert experiment is None or not mlflow.MlflowClient(ctx.cfg.tracking_uri).search_runs([experiment.experiment_id])
    assert ctx.lakehouse.table_names() == []
