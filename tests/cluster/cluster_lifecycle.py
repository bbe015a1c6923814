"""The local cluster's processes started, waited for, checked, killed and stopped (:class:`LocalCluster`, which
joins the harness's parts: its layout, its processes' commands, its jobs and what it observes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
from pathlib import Path

from cluster_commands import ClusterCommands
from cluster_jobs import ClusterJobs
from cluster_layout import ClusterLayout
from cluster_model_server import smollm2_folder
from cluster_observe import ClusterObserver
from cluster_processes import (
    BUCKET,
    DEFAULT_ROOT,
    PROCESSES,
    RAY_NODES,
    SPARK_WORKERS,
    VENV,
    ClusterError,
    descendants,
    exists,
    http_get,
    listening,
    reap,
)


class LocalCluster(ClusterLayout, ClusterCommands, ClusterJobs, ClusterObserver):
    """The cluster's processes, ports and folders under ``root``; :meth:`up` starts it, :meth:`down` stops it,
    :meth:`attach` finds one another process started. State (ports, pids) is kept in ``<root>/state.json``."""

    def _spawn(self, name: str) -> None:
        command, env = self._command(name)
        with open(self.log(name), "ab") as log:
            log.write(f"\n--- {time.strftime('%H:%M:%S')} start: {' '.join(command)}\n".encode())
            # Each in a session of its own: a kill of its process group is the loss of that node.
            process = subprocess.Popen(
                command,
                env=env,
                cwd=self.root / "scratch",
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.state["pids"][name] = process.pid
        self._save()

    def _save(self) -> None:
        (self.root / "state.json").write_text(json.dumps(self.state, indent=2))

    @classmethod
    def attach(cls, root: Path | str = DEFAULT_ROOT, venv: Path = VENV) -> "LocalCluster":
        """The cluster whose state is in ``<root>/state.json`` (started by another process)."""
        cluster = cls(root, venv)
        path = cluster.root / "state.json"
        if not path.is_file():
            raise ClusterError(f"no cluster state in {path}: run `up` first")
        cluster.state = json.loads(path.read_text())
        return cluster

    def _alive(self, name: str) -> bool:
        pid = self.state["pids"].get(name)
        return bool(pid) and exists(pid)

    def _wait(self, name: str, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._alive(name):
                raise ClusterError(f"{name} exited before {what}: see {self.log(name)}\n{self._tail(name)}")
            try:
                if ready():
                    return
            except (OSError, ValueError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        raise ClusterError(f"{name}: no {what} within {timeout:.0f} s: see {self.log(name)}\n{self._tail(name)}")

    def _tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join(self.log(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port('model-server')}/v1"

    def model_server_completions(self) -> int:
        """Completions the model server answered since it started (its access log's 200 lines)."""
        text = self.log("model-server").read_text(errors="replace")
        return text.count('"POST /v1/completions HTTP/1.1" 200')

    def up(self, timeout: float = 240.0, model_server: bool = False) -> "LocalCluster":
        """Start every process, wait until each answers (the workers registered, both Ray nodes alive, the bucket
        made, MLflow healthy; with ``model_server``, its API listing models); returns self. Raises
        :class:`ClusterError` naming the process and its log."""
        started = time.monotonic()
        self._prepare()
        if model_server:  # the folder the materialising venv made (the nodes' env holds no project to do it)
            self.state["model_folder"] = smollm2_folder(str(self.venv / "bin" / "python"))
            self._spawn("model-server")
        for name in ("s3-store", "s3", "mlflow", "spark-master", "ray-head"):
            self._spawn(name)
        self._wait("s3", lambda: self._s3_answers(), timeout, "answer from the S3 gateway")
        self._make_bucket()
        self._wait("spark-master", lambda: "aliveworkers" in self.spark_master_json(), timeout, "Spark master")
        for name in SPARK_WORKERS:
            self._spawn(name)
        # The second node joins as soon as the head's GCS answers (the dashboard comes up later, on its own).
        self._wait("ray-head", lambda: listening(self.port("ray-gcs")), timeout, "Ray head's GCS")
        self._spawn("ray-node-2")
        self._wait(
            "spark-master",
            lambda: self.spark_master_json().get("aliveworkers") == len(SPARK_WORKERS),
            timeout,
            f"{len(SPARK_WORKERS)} Spark workers registered",
        )
        self._wait("ray-node-2", lambda: len(self.ray_nodes()) == 2, timeout, "second Ray node alive")
        self._wait(
            "mlflow",
            lambda: http_get(f"http://127.0.0.1:{self.port('mlflow')}/health") == b"OK",
            timeout,
            "MLflow health",
        )
        if model_server:
            self._wait(
                "model-server",
                lambda: b'"data"' in http_get(f"{self.endpoint_url}/models"),
                timeout,
                "the model server's /v1/models",
            )
        self._node_env_checked()
        self.state["up_seconds"] = round(time.monotonic() - started, 1)
        self._save()
        return self

    def down(self, grace: float = 15.0) -> None:
        """Stop every process of the cluster: SIGTERM to each one's process group and children at once, SIGKILL to
        what still lives after ``grace`` seconds. The logs and folders stay."""
        leaders = [pid for pid in (self.state["pids"].pop(name, None) for name in reversed(PROCESSES)) if pid]
        self._save()
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            victims = {pid for leader in leaders for pid in descendants(leader) | {leader}}
            for leader in leaders:
                try:
                    os.killpg(leader, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            for victim in victims:
                try:
                    os.kill(victim, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(exists(p) for p in victims):
                for leader in leaders:
                    reap(leader)
                time.sleep(0.2)
            if not any(exists(p) for p in victims):
                return

    # ------------------------------------------------------------------ health
    def _s3_answers(self) -> bool:
        try:
            http_get(f"http://127.0.0.1:{self.port('s3')}/")
        except urllib.error.HTTPError:
            return True  # an S3 error document is an answer
        return True

    def _make_bucket(self) -> None:
        client = self._s3()
        if BUCKET not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
            client.create_bucket(Bucket=BUCKET)

    def spark_master_json(self) -> dict:
        """The master's REST status: workers (id, host, port, state, web UI), applications (running, completed)."""
        return json.loads(http_get(f"http://127.0.0.1:{self.port('spark-master-ui')}/json/"))

    def ray_nodes(self) -> list[dict]:
        """The Ray nodes alive, from the dashboard's state API (with the cluster's token)."""
        url = f"http://127.0.0.1:{self.port('ray-dashboard')}/api/v0/nodes?limit=100&detail=1"
        data = json.loads(http_get(url, token=self._secret("ray-token")))
        return [n for n in data["data"]["result"]["result"] if n.get("state") == "ALIVE"]

    def status(self) -> str:
        lines = [f"local cluster at {self.root}"]
        for name in PROCESSES:
            pid = self.state["pids"].get(name)
            lines.append(
                f"  {name:<15} {'up  ' if self._alive(name) else 'down'} pid {pid or '-':<8} log {self.log(name)}"
            )
        ports = self.state["ports"]
        lines += [
            f"  spark master   spark://127.0.0.1:{ports['spark-master']} (UI http://127.0.0.1:"
            f"{ports['spark-master-ui']})",
            f"  ray            127.0.0.1:{ports['ray-gcs']} (dashboard http://127.0.0.1:{ports['ray-dashboard']}"
            f", token {self.token_file})",
            f"  s3             http://127.0.0.1:{ports['s3']} bucket {BUCKET}",
            f"  mlflow         http://127.0.0.1:{ports['mlflow']}",
        ]
        return "\n".join(lines)

    # ------------------------------------------------------------------ faults
    def kill(self, name: str) -> list[int]:
        """SIGKILL a process of the cluster with everything it started (a Spark worker with its executor and Python
        workers, a Ray node with its raylet, agents and workers): the loss of that node. Returns the pids."""
        pid = self.state["pids"].pop(name)
        self._save()
        victims = descendants(pid) | {pid}
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for victim in victims:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap(pid)
        return sorted(victims)

    def restart(self, name: str, timeout: float = 120.0) -> None:
        """Start ``name`` again and wait until it has rejoined (a Spark worker registered, a Ray node alive, the S3
        gateway answering)."""
        self._spawn(name)
        if name in SPARK_WORKERS:
            self._wait(
                name,
                lambda: (
                    sum(
                        w["state"] == "ALIVE" and w["port"] == self.port(name)
                        for w in self.spark_master_json()["workers"]
                    )
                    == 1
                ),
                timeout,
                "registration",
            )
        elif name in RAY_NODES:
            self._wait(name, lambda: len(self.ray_nodes()) == 2, timeout, "rejoin")
        elif name == "s3":
            self._wait(name, self._s3_answers, timeout, "answer")

    def store_down(self) -> None:
        """The object store goes down: its endpoint refuses connections (the gateway stops; moto keeps the
        objects in memory behind it)."""
        self.kill("s3")

    def store_up(self) -> None:
        self.restart("s3")
