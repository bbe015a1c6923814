"""The MLflow tracking server killed mid-run (a real ``mlflow server`` process, SIGKILLed after a job committed its
first table): the job finishes its work, keeps what MLflow missed in the run outbox instead of asking the dead server
again for each call, and exits 8 saying so; once the server is back, the next start logs what was kept to that run
and ends it FAILED with the reason."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_the_tracking_server_killed_mid_run_loses_nothing_and_the_next_start_logs_it(
    spark, capabilities, tmp_path, monkeypatch
):
    from cluster.local_cluster import free_port
    from mlflow import MlflowClient
    from test_registry import mlflow_server

    from common.config import load_config
    from common.platform.errors import TrackingUnreachable, report, user_error
    from common.platform.runner.job import build_context, job
    from common.platform.tracking import outbox

    # the client's retries of a dead server take 3 + 6 s (plus jitter) here, minutes by default: paid by the first
    # unanswered call only
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "3")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = mlflow_server(tmp_path, port)
    cfg = load_config(
        None, [f"tracking.uri={url}", f"lakehouse.root={tmp_path / 'lake'}", "tracking.experiment=outage"]
    )
    ctx = build_context(cfg, spark=spark, capabilities=capabilities)
    killed: list[float] = []
    opened_in: list[float] = []

    @job("outage-probe")
    def probe(ctx, tr):
        """Commits a table, loses its tracking server, then does the rest of a job's work: another table, an
        artifact, its metrics."""
        tr.write(ctx.spark.createDataFrame([(1, "a"), (2, "b")], "id int, label string"), "first", "h1")
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        killed.append(time.monotonic())
        tr.write(ctx.spark.createDataFrame([(3, "c")], "id int, label string"), "second", "h1")
        tr.log_dict({"rows": 3}, "report/summary.json")
        tr.log_metrics({"f1": 0.5}, step=0)  # a metric per repeat: each step kept
        tr.log_metrics({"f1": 0.7}, step=1)
        assert outbox.deliver(cfg.lakehouse.root, url) == []  # a run still going is never logged under it
        opening = time.monotonic()
        with ctx.tracker.run("probe-point", log_config=False) as point:  # a run the job opens itself (a sweep's)
            point.log_metrics({"threshold": 0.8})
            with ctx.tracker.run("probe-leaf", log_config=False):  # and one inside it
                pass
        opened_in.append(time.monotonic() - opening)
        return {"accuracy": 0.75}

    try:
        with pytest.raises(Exception) as raised:
            probe(ctx)
        took = time.monotonic() - killed[0]
        found = user_error(raised.value)
        assert isinstance(found, TrackingUnreachable) and report(found) == 8, raised.value
        line = str(found)
        assert "the run's work is committed" in line and "3 metrics, 2 tags, 1 artifact" in line, line
        assert "run offline-" in line and "1 metric kept" in line, line  # the point (and its leaf), kept whole
        assert "(the next start logs it)" in line and "_tracking/outbox/" in line, line
        assert took < 60, f"{took:.0f} s from the kill to the run's end"  # one unanswered call, not one per call
        assert opened_in[0] < 6, opened_in  # the point asked the silent server once, quickly: no retries again
        print(f"\ntracking server killed mid-run: the run ended {took:.1f} s after; {line}")
        assert ctx.lakehouse.version("first") == 0 and ctx.lakehouse.version("second") == 0
        assert ctx.lakehouse.read("second").count() == 1
        kept_folder = Path(cfg.lakehouse.root) / "_tracking" / "outbox"
        [run_id] = [p.name for p in kept_folder.iterdir() if not p.name.startswith((".", "offline-"))]
        points = [
            json.loads((p / "run.json").read_text()) for p in kept_folder.iterdir() if p.name.startswith("offline-")
        ]
        [point_id] = [p["run_id"] for p in points if p["pending"]["name"] == "probe-point"]
        [leaf] = [p for p in points if p["pending"]["name"] == "probe-leaf"]
        assert leaf["pending"]["parent_run_id"] == point_id  # kept under the run it ran in
        kept = json.loads((kept_folder / run_id / "run.json").read_text())
        assert [m[:3] for m in kept["metrics"]] == [["f1", 0.5, 0], ["f1", 0.7, 1], ["accuracy", 0.75, 0]]
        assert kept["tags"]["output.second.version"] == "0" and kept["ended"] == "FAILED" and kept["server"] == url
        point = json.loads((kept_folder / point_id / "run.json").read_text())
        assert point["ended"] == "FINISHED" and point["pending"]["parent_run_id"] == run_id

        server = mlflow_server(tmp_path, port)  # back: the next start logs what was kept
    finally:
        ctx.close()
    restarted = build_context(cfg, spark=spark, capabilities=capabilities)
    try:
        restarted.tracker.setup()
        run = MlflowClient(url).get_run(run_id)
        assert run.data.metrics == {"accuracy": 0.75, "f1": 0.7}
        assert [(m.value, m.step) for m in MlflowClient(url).get_metric_history(run_id, "f1")] == [(0.5, 0), (0.7, 1)]
        assert run.data.tags["output.second.version"] == "0" and run.data.tags["output.first.version"] == "0"
        assert run.info.status == "FAILED" and "run outbox" in run.data.tags["closed.reason"]
        assert [a.path for a in MlflowClient(url).list_artifacts(run_id, "report")] == ["report/summary.json"]
        assert not (kept_folder / run_id).exists() and not (kept_folder / point_id).exists()
        [opened] = MlflowClient(url).search_runs(
            [run.info.experiment_id], filter_string=f"tags.`outbox.kept_as` = '{point_id}'"
        )
        assert opened.data.tags["mlflow.parentRunId"] == run_id and opened.data.metrics == {"threshold": 0.8}
        assert opened.info.status == "FINISHED" and opened.info.run_name == "probe-point"
        [opened_leaf] = MlflowClient(url).search_runs(
            [run.info.experiment_id], filter_string="attributes.run_name = 'probe-leaf'"
        )
        assert opened_leaf.data.tags["mlflow.parentRunId"] == opened.info.run_id
        assert not list(kept_folder.iterdir())  # every kept run delivered, no lock file left
    finally:
        restarted.close()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
