"""The local cluster's processes started, waited for, checked, killed and stopped, and jobs submitted to it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
from pathlib import Path
from typing import Optional, Sequence

from cluster_inputs import demo_inputs
from cluster_layout import ClusterLayout
from cluster_observe import ClusterObserver
from cluster_processes import (
    BUCKET,
    CONF,
    DEFAULT_ROOT,
    PROCESSES,
    RAY_NODES,
    REPO,
    SPARK_WORKERS,
    VENV,
    ClusterError,
    descendants,
    exists,
    http_get,
    listening,
    reap,
)


class LocalCluster(ClusterLayout, ClusterObserver):
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
            self.state["model_folder"] = (
                subprocess.run(
                    [
                        str(self.venv / "bin" / "python"),
                        "-c",
                        "from common.models.generation.causal_lm import "
                        "materialise_smollm2; print(materialise_smollm2())",
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=REPO,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
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

    # ------------------------------------------------------------------ jobs
    def build_dist(self) -> Path:
        """``make dist``: the archive of the suite's packages that spark-submit ships."""
        subprocess.run(["make", "-s", "dist"], cwd=REPO, check=True, capture_output=True, timeout=120)
        self.dist.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "dist" / "augment.zip", self.dist)
        return self.dist

    def upload_inputs(self, inputs: Optional[dict[str, Path]] = None) -> None:
        """Copy input files into the bucket (``{key: local file}``; default: :func:`demo_inputs`), as a landing zone
        would receive them."""
        inputs = demo_inputs(self.bucket_uri) if inputs is None else inputs
        client = self._s3()
        for key, path in inputs.items():
            client.upload_file(str(path), BUCKET, key)

    def submit_command(
        self, args: Sequence[str], name: str, ui_port: Optional[int] = None, conf: Path = CONF
    ) -> list[str]:
        """The spark-submit command line of ``augment ARGS --conf conf`` (jobs/cli.py) with the code shipped."""
        command = [str(self.spark_home / "bin" / "spark-submit"), "--name", name, "--py-files", str(self.dist)]
        if ui_port:
            command += ["--conf", f"spark.ui.port={ui_port}"]
        return command + [str(REPO / "jobs" / "cli.py"), *args, "--conf", str(conf)]

    def submit_script(
        self, script: Path, args: Sequence[str], name: str, timeout: float = 900, env: Optional[dict[str, str]] = None
    ) -> subprocess.CompletedProcess:
        """Run a driver script through spark-submit with the code shipped (``--py-files dist/augment.zip``), from the
        driver's folder, in ``env`` (default the driver's); output in ``logs/submit-<name>.log`` and returned."""
        log = self.log(f"submit-{name}")
        command = [
            str(self.spark_home / "bin" / "spark-submit"),
            "--name",
            name,
            "--py-files",
            str(self.dist),
            str(script),
            *args,
        ]
        with open(log, "w") as handle:
            # its own process group: on a timeout the driver (a child of spark-submit's JVM launcher) goes too
            job = subprocess.Popen(
                command,
                cwd=self.driver_dir,
                env=env or self.env("driver"),
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                returncode = job.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGTERM)  # the driver's SIGTERM handler shuts Ray on Spark down
                try:
                    job.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
                returncode = -signal.SIGTERM
        return subprocess.CompletedProcess(command, returncode, log.read_text(errors="replace"), "")

    def submit(
        self,
        args: Sequence[str],
        name: str,
        timeout: float = 3600,
        log: Optional[Path] = None,
        ui_port: Optional[int] = None,
        conf: Path = CONF,
    ) -> subprocess.CompletedProcess:
        """Run ``augment ARGS`` through spark-submit from the driver's folder; its output goes to ``log`` (default
        ``logs/submit-<name>.log``) and is returned."""
        log = log or self.log(f"submit-{name}")
        with open(log, "w") as handle:
            done = subprocess.run(
                self.submit_command(args, name, ui_port, conf),
                cwd=self.driver_dir,
                env=self.env("driver"),
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        return subprocess.CompletedProcess(done.args, done.returncode, log.read_text(errors="replace"), "")

    def submit_background(
        self, args: Sequence[str], name: str, ui_port: Optional[int] = None, conf: Path = CONF
    ) -> subprocess.Popen:
        """Start ``augment ARGS`` through spark-submit and return at once (output in ``logs/submit-<name>.log``)."""
        log = open(self.log(f"submit-{name}"), "w")
        return subprocess.Popen(
            self.submit_command(args, name, ui_port, conf),
            cwd=self.driver_dir,
            env=self.env("driver"),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
