"""What the cluster tier reads off a running local cluster: Spark executors at work, Ray's state API, a
table version's rows in the bucket, a commit lease held by another process, the MLflow server's REST API."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request

from cluster_lifecycle import LocalCluster
from cluster_processes import BUCKET, VENV


def when_busy(job: subprocess.Popen, busy, timeout: float) -> bool:
    """Poll ``busy()`` until it holds (True), the job ends or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and job.poll() is None:
        try:
            if busy():
                return True
        except (OSError, ValueError, KeyError):
            pass  # the driver's UI or the dashboard not up yet
        time.sleep(0.1)
    return False


def executor_busy(cluster: LocalCluster, ui: int, worker: str) -> bool:
    """Whether the executor on ``worker`` runs a task now (the driver's REST API)."""
    apps = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ui}/api/v1/applications", timeout=2).read())
    executors = json.loads(
        urllib.request.urlopen(
            f"http://127.0.0.1:{ui}/api/v1/applications/{apps[0]['id']}/executors", timeout=2
        ).read()
    )
    port = f":{cluster.port(f'{worker}-ui')}/"
    return any(e["activeTasks"] > 0 and port in json.dumps(e.get("executorLogs", {})) for e in executors)


def ray_state(cluster: LocalCluster, resource: str, **filters) -> list[dict]:
    """Rows of Ray's state API (``actors``, ``tasks``...) with ``key=value`` filters, through the dashboard with
    the cluster's token."""
    query = "".join(f"&filter_keys={k}&filter_predicates=%3D&filter_values={v}" for k, v in filters.items())
    url = f"http://127.0.0.1:{cluster.port('ray-dashboard')}/api/v0/{resource}?limit=1000&detail=1{query}"
    token = (cluster.root / "secrets" / "ray-token").read_text().strip()
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    return json.loads(urllib.request.urlopen(request, timeout=5).read())["data"]["result"]["result"]


def map_actors(cluster: LocalCluster, **filters) -> list[dict]:
    """Ray Data's map actors (the generation pool's ``_MapWorker``) in the state API."""
    return [a for a in ray_state(cluster, "actors", **filters) if "MapWorker" in a.get("class_name", "")]


def second_node_actors(cluster: LocalCluster) -> set[str]:
    """The live map actors (a generation pool's) on the second node."""
    second = {n["node_id"] for n in cluster.ray_nodes() if not n.get("is_head_node")}
    return {a["actor_id"] for a in map_actors(cluster, state="ALIVE") if a.get("node_id") in second}


def table_rows(cluster: LocalCluster, table: str, version: int, columns=None) -> list:
    """The sorted rows of a table version in the bucket (delta-rs)."""
    from deltalake import DeltaTable

    storage = {k: v for k, v in cluster.env("driver").items() if k.startswith("AWS_")}
    data = DeltaTable(f"s3://{BUCKET}/lakehouse/{table}", version=version, storage_options=storage).to_pyarrow_table(
        columns=list(columns) if columns else None
    )
    return sorted(tuple(str(v) for v in row.values()) for row in data.to_pylist())


def hold_lease(cluster: LocalCluster, location: str, ttl: float, seconds: float) -> subprocess.Popen:
    """A process holding the commit lease of ``location`` for ``seconds``; returns once it holds it."""
    script = (
        "import sys, time\nfrom common.platform.lakehouse.commit_lease import LeaseSettings, s3_commit_lease\n"
        f"with s3_commit_lease({location!r}, 'items', LeaseSettings(ttl_s={ttl}, wait_s=5)):\n"
        "    print('held', flush=True)\n"
        f"    time.sleep({seconds})\n"
    )
    process = subprocess.Popen(
        [str(VENV / "bin" / "python"), "-c", script],
        env=cluster.env("lease-holder"),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "held"
    return process


def experiment_id(cluster: LocalCluster, name: str) -> str:
    url = f"http://127.0.0.1:{cluster.port('mlflow')}/api/2.0/mlflow/experiments/get-by-name?experiment_name={name}"
    return json.loads(urllib.request.urlopen(url, timeout=30).read())["experiment"]["experiment_id"]


def mlflow_post(endpoint: str, cluster: LocalCluster, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.port('mlflow')}/api/2.0/mlflow/{endpoint}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    return json.loads(urllib.request.urlopen(request, timeout=30).read())
