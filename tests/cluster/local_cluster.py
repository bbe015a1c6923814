"""A local cluster that stands in for a real one, every process on 127.0.0.1, started and stopped here.

    python tests/cluster/local_cluster.py up     [--root DIR]   start it (state, logs and scratch under DIR)
    python tests/cluster/local_cluster.py status [--root DIR]   what runs, where (ports, pids, logs)
    python tests/cluster/local_cluster.py env    [--root DIR]   the variables a driver needs (secrets by file)
    python tests/cluster/local_cluster.py submit [--root DIR] -- ARGS   spark-submit jobs/cli.py ARGS on it
    python tests/cluster/local_cluster.py where  [--root DIR]   where Spark tasks and Ray tasks and actors ran
    python tests/cluster/local_cluster.py down   [--root DIR]
    python tests/cluster/local_cluster.py demo   [--root DIR]   the rehearsal (make cluster-demo): the local demo,
                                                    then up, every pipeline through spark-submit twice, checks, down

DIR defaults to build/cluster. What runs:

* **Spark**: a standalone master and two workers (one core each, their own work folders), from pyspark's
  ``bin/spark-class``. Jobs come through ``spark-submit`` with the code as ``--py-files dist/augment.zip``.
* **Ray**: a head node and a second node joined with ``ray start``, with Ray's token authentication (the token in
  a 0600 file named by ``RAY_AUTH_TOKEN_PATH`` in every process; never in a config or a log).
* **Object store**: moto's S3 server (in memory) behind a loopback TCP gateway, which is what goes down when the
  store does (:meth:`LocalCluster.store_down`): the objects survive the outage, as a real store's would. Spark
  reads and writes it through ``s3a://`` (hadoop-aws, in the jars folder), delta-rs, pyarrow and boto3 through the
  ``AWS_ENDPOINT_URL`` of their environment.
* **MLflow**: ``mlflow server`` with a SQLite store on local disk and its artifacts in the bucket.
* **A model server** (``up --model-server``, which ``make cluster-up`` and the rehearsal use): Hugging Face's
  ``transformers serve`` of the packaged SmolLM2's materialised folder, an OpenAI-compatible API on loopback that a
  ``model.kind: endpoint`` generator calls (:func:`model_server_command`); the driver's environment names an API key
  (``AUGMENT_ENDPOINT_KEY``, a secret file's value) that the generation actors on the Ray nodes receive from it.
* **Code shipped, not installed**: every node, executor and driver runs ``<DIR>/node-env``, a venv that sees the
  suite's dependencies (the main venv's site-packages, without its editable install) but not the project. Spark
  executors get the code from ``--py-files``, Ray nodes from the driver's runtime environment (``py_modules``).

Only the standard library is imported at module level: the S3 gateway runs this file with the nodes' Python.
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV = Path(os.environ.get("AUGMENT_VENV", REPO / ".venv"))
DEFAULT_ROOT = REPO / "build" / "cluster"
BUCKET = "augment"
REGION = "us-east-1"
CONF = REPO / "conf" / "cluster_demo.yaml"
# The demo pipeline's order, one spark-submit each (jobs shared by several run once: the later ones skip them).
DEMO_CHAIN = ("cga", "query-reformulation", "boostaug", "genre-transfer", "compositional", "results-summary")
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
# The rehearsal's driver and executor JVMs (see spark-defaults.conf below): a 2-core machine's, not a cluster's.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
RAY_NODES = ("ray-head", "ray-node-2")
# Start order; stopped in reverse.
PROCESSES = ("s3-store", "s3", "mlflow", "spark-master", *SPARK_WORKERS, *RAY_NODES, "model-server")
# The served model of the endpoint rehearsal: transformers serve of the packaged SmolLM2's materialised folder.
ENDPOINT_KEY_ENV = "AUGMENT_ENDPOINT_KEY"


class ClusterError(RuntimeError):
    """A process of the local cluster did not start, or a check of it failed; the message names the log."""


def free_port() -> int:
    """A TCP port nothing listens on at this moment."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, timeout: float = 3.0, token: Optional[str] = None) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise ClusterError(f"no site-packages under {venv}: run `make install` first")
    return found[0]


class LocalCluster:
    """The cluster's processes, ports and folders under ``root``; :meth:`up` starts it, :meth:`down` stops it,
    :meth:`attach` finds one another process started. State (ports, pids) is kept in ``<root>/state.json``."""

    def __init__(self, root: Path | str = DEFAULT_ROOT, venv: Path = VENV, ray_cpus: tuple[int, int] = (2, 2)):
        self.root = Path(root).resolve()
        self.venv = Path(venv).resolve()
        # Logical CPUs of the Ray head and the second node (Ray's scheduling tokens; the machine has what it has).
        self.state: dict[str, Any] = {"ports": {}, "pids": {}, "ray_cpus": list(ray_cpus)}

    # ------------------------------------------------------------------ layout
    @property
    def node_python(self) -> Path:
        """The Python of every node, executor and driver: the dependencies without the project."""
        return self.root / "node-env" / "bin" / "python"

    @property
    def spark_home(self) -> Path:
        return _site_packages(self.venv) / "pyspark"

    @property
    def jars(self) -> list[Path]:
        """The JVM dependencies each node holds, as a cluster's image would: Delta Lake and hadoop-aws with its SDK
        (``make install`` resolves both from jvm/)."""
        return [self.venv / "jars", self.venv / "jars" / "s3"]

    @property
    def ray_temp(self) -> Path:
        """The Ray nodes' temp folders (sessions, sockets, Ray's own logs): under /tmp with a short name, since a Unix
        socket path may not pass 107 bytes; ``<root>/ray`` links to it."""
        link = self.root / "ray"
        if not link.is_symlink():
            import tempfile

            link.symlink_to(tempfile.mkdtemp(prefix="augment-ray-", dir="/tmp"))
        return link.resolve()

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    @property
    def token_file(self) -> Path:
        return self.root / "secrets" / "ray-token"

    @property
    def driver_dir(self) -> Path:
        """The driver's working folder: it must stay empty (nothing of a job lands on the driver's disk)."""
        return self.root / "driver"

    @property
    def dist(self) -> Path:
        """This cluster's copy of ``make dist``'s archive (a live job keeps reading its archive: a rebuild of
        dist/ in the checkout must not change it underneath)."""
        return self.root / "dist" / "augment.zip"

    def port(self, name: str) -> int:
        return int(self.state["ports"][name])

    @property
    def bucket_uri(self) -> str:
        return f"s3a://{BUCKET}"

    # ------------------------------------------------------------------ environments
    def _secret(self, name: str) -> str:
        return (self.root / "secrets" / name).read_text().strip()

    def env(self, node: str = "driver") -> dict[str, str]:
        """The environment of a process of this cluster: the store's endpoint and credentials (as a node's instance
        credentials would be), Ray's token mode and token file, loopback settings, the nodes' Python; a driver also
        gets ``RAY_ADDRESS``, ``MLFLOW_TRACKING_URI`` and ``AUGMENT_BUCKET``. ``node`` names its scratch folder
        (``TMPDIR``) and machine-local cache."""
        drop = ("RAY_", "AWS_", "MLFLOW_", "SPARK_", "PYSPARK_", "AUGMENT_")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(drop) and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        scratch = self.root / "scratch" / node
        scratch.mkdir(parents=True, exist_ok=True)
        env.update({
            "AWS_ACCESS_KEY_ID": self._secret("s3-key-id"), "AWS_SECRET_ACCESS_KEY": self._secret("s3-secret"),
            "AWS_REGION": REGION, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port('s3')}",
            "AWS_ALLOW_HTTP": "true", "AWS_EC2_METADATA_DISABLED": "true",
            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_file),
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYARROW_IGNORE_TIMEZONE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "SPARK_HOME": str(self.spark_home), "SPARK_CONF_DIR": str(self.root / "spark" / "conf"),
            "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "512m",
            "PYSPARK_PYTHON": str(self.node_python), "PYSPARK_DRIVER_PYTHON": str(self.node_python),
            "TMPDIR": str(scratch), "AUGMENT_CACHE": str(scratch / "cache"),
        })
        if node == "driver":
            env.update({"RAY_ADDRESS": f"127.0.0.1:{self.port('ray-gcs')}",
                        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{self.port('mlflow')}",
                        "AUGMENT_BUCKET": self.bucket_uri})
            if (self.root / "secrets" / "endpoint-key").exists():  # only the driver: the actors get it from there
                env[ENDPOINT_KEY_ENV] = self._secret("endpoint-key")
        return env

    # ------------------------------------------------------------------ set-up
    def _prepare(self) -> None:
        for folder in ("logs", "secrets", "spark/conf", "spark/events", "spark/local", "spark/warehouse", "mlflow",
                       "scratch"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        if self.driver_dir.exists():
            shutil.rmtree(self.driver_dir)
        self.driver_dir.mkdir()
        os.chmod(self.root / "secrets", 0o700)
        for name, value in (("ray-token", secrets.token_hex(32)), ("s3-key-id", "AKIA" + secrets.token_hex(8).upper()),
                            ("s3-secret", secrets.token_urlsafe(30)), ("endpoint-key", "sk-" + secrets.token_hex(16))):
            path = self.root / "secrets" / name
            path.write_text(value)
            os.chmod(path, 0o600)
        ports = ["s3", "s3-store", "mlflow", "spark-master", "spark-master-ui", "ray-gcs", "ray-dashboard",
                 "ray-client", "ray-node-2-agent", "ray-node-2-metrics", "ray-head-agent", "ray-head-metrics"]
        ports += [f"{w}{suffix}" for w in SPARK_WORKERS for suffix in ("", "-ui")] + ["model-server"]
        self.state["ports"] = {name: free_port() for name in ports}
        self._node_env()
        self._spark_defaults()

    def _node_env(self) -> None:
        """``<root>/node-env``: a venv whose only site-packages line points at the main venv's site-packages. A path
        line of a ``.pth`` file is not itself searched for ``.pth`` files, so the main venv's editable install (its
        ``__editable__`` finder, loaded from a ``.pth``) never runs: the project is not importable, its
        dependencies are."""
        env_dir = self.root / "node-env"
        if not self.node_python.exists():
            subprocess.run([str(self.venv / "bin" / "python"), "-m", "venv", "--without-pip", str(env_dir)],
                           check=True, capture_output=True, timeout=120)
        (_site_packages(env_dir) / "augment-dependencies.pth").write_text(f"{_site_packages(self.venv)}\n")
        # The `ray` command a node image with Ray installed has beside its Python (Ray on Spark's node starter runs
        # `python $(which ray) start ...` on the driver and in the executors). This machine's nodes keep to
        # loopback (tests/cluster/ray_node.py says why), also where Ray on Spark starts them with
        # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1, which would advertise the machine's outward address instead.
        ray_command = env_dir / "bin" / "ray"
        ray_command.write_text(f"#!{self.node_python}\nimport os\nimport runpy\n"
                               f"os.environ['RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER'] = '0'\n"
                               f"runpy.run_path({str(HERE / 'ray_node.py')!r}, run_name='__main__')\n")
        ray_command.chmod(0o755)
        # Checked while the processes start (the imports take seconds); up() reads the answer.
        self._node_check = subprocess.Popen(
            [str(self.node_python), "-c", "import ray, pyspark, deltalake, mlflow, torch\n"
             "try:\n    import common\nexcept ImportError:\n    print('no project')\nelse:\n    "
             "print(common.__file__)"],
            cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self._plain_env())

    def _node_env_checked(self) -> None:
        """Raises :class:`ClusterError` unless the nodes' Python imported the dependencies and not the project."""
        out, err = self._node_check.communicate(timeout=120)
        if self._node_check.returncode != 0 or out.strip() != "no project":
            raise ClusterError(f"the nodes' Python must have the dependencies and not the project: "
                               f"{out.strip()} {err.strip()[-500:]}")

    def _plain_env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def _spark_defaults(self) -> None:
        """``spark-defaults.conf`` of the cluster (what an operator puts in ``$SPARK_CONF_DIR``): the master, the jars
        each node holds on its classpath, Delta's extension and catalog, s3a's endpoint, the Pythons, Spark's own
        scratch and event log folders, and a 2-core machine's parallelism."""
        classpath = ":".join(f"{folder}/*" for folder in self.jars)
        settings = {
            "spark.master": f"spark://127.0.0.1:{self.port('spark-master')}",
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "2g", "spark.executor.memory": "1500m", "spark.executor.cores": "1",
            "spark.driver.extraClassPath": classpath, "spark.executor.extraClassPath": classpath,
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.hadoop.fs.s3a.endpoint": f"http://127.0.0.1:{self.port('s3')}",
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.pyspark.python": str(self.node_python), "spark.pyspark.driver.python": str(self.node_python),
            "spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{self.root}/spark/events",
            # One plain JSON-lines file per application (Spark 4 rolls and zstd-compresses them by default).
            "spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": "false",
            "spark.local.dir": str(self.root / "spark" / "local"),
            "spark.sql.warehouse.dir": str(self.root / "spark" / "warehouse"),
            "spark.ui.showConsoleProgress": "false",
            # Three JVMs (the driver, two executors) share two cores here: C1 alone compiles a job's code at a fraction
            # of C2's cost, and the serial collector has no threads of its own. Measured on genre transfer's small
            # world: JVM CPU 420 s -> 224 s, the pipeline 6:09 -> 4:56.
            "spark.driver.extraJavaOptions": JVM_OPTIONS, "spark.executor.extraJavaOptions": JVM_OPTIONS,
            "spark.default.parallelism": "2", "spark.sql.shuffle.partitions": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        }
        text = "".join(f"{key} {value}\n" for key, value in settings.items())
        (self.root / "spark" / "conf" / "spark-defaults.conf").write_text(text)
        # Spark's daemons and drivers log to stderr at WARN: the logs stay readable.
        (self.root / "spark" / "conf" / "log4j2.properties").write_text(
            "rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
            "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
            "appender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n")

    # ------------------------------------------------------------------ processes
    def _command(self, name: str) -> tuple[list[str], dict[str, str]]:
        py, p = str(self.node_python), self.port
        spark_class = [str(self.spark_home / "bin" / "spark-class")]
        if name == "s3-store":
            return [py, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(p("s3-store"))], self.env("s3")
        if name == "s3":
            return [py, str(Path(__file__)), "gateway", "--listen", str(p("s3")), "--to", str(p("s3-store"))], \
                self.env("s3")
        if name == "mlflow":
            env = {**self.env("mlflow"), "MLFLOW_S3_ENDPOINT_URL": f"http://127.0.0.1:{p('s3')}",
                   # MLflow 3.17's server otherwise starts 7 job consumers (huey): 1.8 GB and half a core, idle.
                   "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
            return [py, "-m", "mlflow", "server", "--backend-store-uri",
                    f"sqlite:///{self.root / 'mlflow' / 'mlflow.db'}", "--artifacts-destination",
                    f"s3://{BUCKET}/mlflow", "--host", "127.0.0.1", "--port", str(p("mlflow")), "--workers", "1"], env
        if name == "model-server":
            return model_server_command(py, self.state["model_folder"], p(name)), \
                {**self.env(name), **model_server_env(self.root / "scratch" / "hub")}
        if name == "spark-master":
            return spark_class + ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                  str(p("spark-master")), "--webui-port", str(p("spark-master-ui"))], self.env(name)
        if name in SPARK_WORKERS:
            work = self.root / "spark" / name
            work.mkdir(parents=True, exist_ok=True)
            return spark_class + ["org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{p('spark-master')}",
                                  "--host", "127.0.0.1", "--cores", "1", "--memory", "3g", "--work-dir", str(work),
                                  "--port", str(p(name)), "--webui-port", str(p(f"{name}-ui"))], self.env(name)
        temp = self.ray_temp / name
        temp.mkdir(parents=True, exist_ok=True)
        cpus = self.state["ray_cpus"][RAY_NODES.index(name)]
        start = [py, str(HERE / "ray_node.py"), "start", "--block", "--node-ip-address=127.0.0.1",
                 f"--num-cpus={cpus}",
                 "--object-store-memory=800000000", f"--temp-dir={temp}", "--disable-usage-stats",
                 f"--dashboard-agent-listen-port={p(f'{name}-agent')}",
                 f"--metrics-export-port={p(f'{name}-metrics')}"]
        if name == "ray-head":
            return start + ["--head", f"--port={p('ray-gcs')}", "--include-dashboard=true",
                            "--dashboard-host=127.0.0.1", f"--dashboard-port={p('ray-dashboard')}",
                            f"--ray-client-server-port={p('ray-client')}"], self.env(name)
        return start + [f"--address=127.0.0.1:{p('ray-gcs')}"], self.env(name)

    def _spawn(self, name: str) -> None:
        command, env = self._command(name)
        with open(self.log(name), "ab") as log:
            log.write(f"\n--- {time.strftime('%H:%M:%S')} start: {' '.join(command)}\n".encode())
            # Each in a session of its own: a kill of its process group is the loss of that node.
            process = subprocess.Popen(command, env=env, cwd=self.root / "scratch", stdout=log,
                                       stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
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
        return bool(pid) and _exists(pid)

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
            self.state["model_folder"] = subprocess.run(
                [str(self.venv / "bin" / "python"), "-c", "from common.models.generation.causal_lm import "
                 "materialise_smollm2; print(materialise_smollm2())"], capture_output=True, text=True, check=True,
                cwd=REPO).stdout.strip().splitlines()[-1]
            self._spawn("model-server")
        for name in ("s3-store", "s3", "mlflow", "spark-master", "ray-head"):
            self._spawn(name)
        self._wait("s3", lambda: self._s3_answers(), timeout, "answer from the S3 gateway")
        self._make_bucket()
        self._wait("spark-master", lambda: "aliveworkers" in self.spark_master_json(), timeout, "Spark master")
        for name in SPARK_WORKERS:
            self._spawn(name)
        # The second node joins as soon as the head's GCS answers (the dashboard comes up later, on its own).
        self._wait("ray-head", lambda: _listening(self.port("ray-gcs")), timeout, "Ray head's GCS")
        self._spawn("ray-node-2")
        self._wait("spark-master", lambda: self.spark_master_json().get("aliveworkers") == len(SPARK_WORKERS),
                   timeout, f"{len(SPARK_WORKERS)} Spark workers registered")
        self._wait("ray-node-2", lambda: len(self.ray_nodes()) == 2, timeout, "second Ray node alive")
        self._wait("mlflow", lambda: _get(f"http://127.0.0.1:{self.port('mlflow')}/health") == b"OK", timeout,
                   "MLflow health")
        if model_server:
            self._wait("model-server", lambda: b'"data"' in _get(f"{self.endpoint_url}/models"), timeout,
                       "the model server's /v1/models")
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
            victims = {pid for leader in leaders for pid in _descendants(leader) | {leader}}
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
            while time.monotonic() < deadline and any(_exists(p) for p in victims):
                for leader in leaders:
                    _reap(leader)
                time.sleep(0.2)
            if not any(_exists(p) for p in victims):
                return

    # ------------------------------------------------------------------ health
    def _s3_answers(self) -> bool:
        try:
            _get(f"http://127.0.0.1:{self.port('s3')}/")
        except urllib.error.HTTPError:
            return True  # an S3 error document is an answer
        return True

    def _s3(self):
        import boto3

        return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.port('s3')}", region_name=REGION,
                            aws_access_key_id=self._secret("s3-key-id"),
                            aws_secret_access_key=self._secret("s3-secret"))

    def _make_bucket(self) -> None:
        client = self._s3()
        if BUCKET not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
            client.create_bucket(Bucket=BUCKET)

    def spark_master_json(self) -> dict:
        """The master's REST status: workers (id, host, port, state, web UI), applications (running, completed)."""
        return json.loads(_get(f"http://127.0.0.1:{self.port('spark-master-ui')}/json/"))

    def ray_nodes(self) -> list[dict]:
        """The Ray nodes alive, from the dashboard's state API (with the cluster's token)."""
        url = f"http://127.0.0.1:{self.port('ray-dashboard')}/api/v0/nodes?limit=100&detail=1"
        data = json.loads(_get(url, token=self._secret("ray-token")))
        return [n for n in data["data"]["result"]["result"] if n.get("state") == "ALIVE"]

    def status(self) -> str:
        lines = [f"local cluster at {self.root}"]
        for name in PROCESSES:
            pid = self.state["pids"].get(name)
            lines.append(f"  {name:<15} {'up  ' if self._alive(name) else 'down'} pid {pid or '-':<8} "
                         f"log {self.log(name)}")
        ports = self.state["ports"]
        lines += [f"  spark master   spark://127.0.0.1:{ports['spark-master']} (UI http://127.0.0.1:"
                  f"{ports['spark-master-ui']})",
                  f"  ray            127.0.0.1:{ports['ray-gcs']} (dashboard http://127.0.0.1:{ports['ray-dashboard']}"
                  f", token {self.token_file})",
                  f"  s3             http://127.0.0.1:{ports['s3']} bucket {BUCKET}",
                  f"  mlflow         http://127.0.0.1:{ports['mlflow']}"]
        return "\n".join(lines)

    # ------------------------------------------------------------------ faults
    def kill(self, name: str) -> list[int]:
        """SIGKILL a process of the cluster with everything it started (a Spark worker with its executor and Python
        workers, a Ray node with its raylet, agents and workers): the loss of that node. Returns the pids."""
        pid = self.state["pids"].pop(name)
        self._save()
        victims = _descendants(pid) | {pid}
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for victim in victims:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(pid)
        return sorted(victims)

    def restart(self, name: str, timeout: float = 120.0) -> None:
        """Start ``name`` again and wait until it has rejoined (a Spark worker registered, a Ray node alive, the S3
        gateway answering)."""
        self._spawn(name)
        if name in SPARK_WORKERS:
            self._wait(name, lambda: sum(w["state"] == "ALIVE" and w["port"] == self.port(name)
                                         for w in self.spark_master_json()["workers"]) == 1, timeout, "registration")
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

    def submit_command(self, args: Sequence[str], name: str, ui_port: Optional[int] = None,
                       conf: Path = CONF) -> list[str]:
        """The spark-submit command line of ``augment ARGS --conf conf`` (jobs/cli.py) with the code shipped."""
        command = [str(self.spark_home / "bin" / "spark-submit"), "--name", name, "--py-files", str(self.dist)]
        if ui_port:
            command += ["--conf", f"spark.ui.port={ui_port}"]
        return command + [str(REPO / "jobs" / "cli.py"), *args, "--conf", str(conf)]

    def submit_script(self, script: Path, args: Sequence[str], name: str, timeout: float = 900,
                      env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
        """Run a driver script through spark-submit with the code shipped (``--py-files dist/augment.zip``), from the
        driver's folder, in ``env`` (default the driver's); output in ``logs/submit-<name>.log`` and returned."""
        log = self.log(f"submit-{name}")
        command = [str(self.spark_home / "bin" / "spark-submit"), "--name", name, "--py-files", str(self.dist),
                   str(script), *args]
        with open(log, "w") as handle:
            # its own process group: on a timeout the driver (a child of spark-submit's JVM launcher) goes too
            job = subprocess.Popen(command, cwd=self.driver_dir, env=env or self.env("driver"), stdout=handle,
                                   stderr=subprocess.STDOUT, start_new_session=True)
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

    def submit(self, args: Sequence[str], name: str, timeout: float = 3600, log: Optional[Path] = None,
               ui_port: Optional[int] = None, conf: Path = CONF) -> subprocess.CompletedProcess:
        """Run ``augment ARGS`` through spark-submit from the driver's folder; its output goes to ``log`` (default
        ``logs/submit-<name>.log``) and is returned."""
        log = log or self.log(f"submit-{name}")
        with open(log, "w") as handle:
            done = subprocess.run(self.submit_command(args, name, ui_port, conf), cwd=self.driver_dir,
                                  env=self.env("driver"), stdout=handle, stderr=subprocess.STDOUT, timeout=timeout)
        return subprocess.CompletedProcess(done.args, done.returncode, log.read_text(errors="replace"), "")

    def submit_background(self, args: Sequence[str], name: str, ui_port: Optional[int] = None,
                          conf: Path = CONF) -> subprocess.Popen:
        """Start ``augment ARGS`` through spark-submit and return at once (output in ``logs/submit-<name>.log``)."""
        log = open(self.log(f"submit-{name}"), "w")
        return subprocess.Popen(self.submit_command(args, name, ui_port, conf), cwd=self.driver_dir,
                                env=self.env("driver"), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    # ------------------------------------------------------------------ where work ran
    def spark_tasks(self) -> dict[str, dict[str, int]]:
        """Spark tasks by application and worker, from Spark's event logs: ``{app name (app id): {worker: tasks}}``.
        An executor is placed on a worker by the worker web UI its log links point to."""
        by_port = {self.port(f"{w}-ui"): w for w in SPARK_WORKERS}
        result: dict[str, dict[str, int]] = {}
        for path in sorted((self.root / "spark" / "events").glob("app-*")):
            app, executors, counts = path.name, {}, {}
            for line in path.read_text(errors="replace").splitlines():
                if '"Event":"SparkListenerApplicationStart"' in line:
                    event = json.loads(line)
                    app = f"{event['App Name']} ({event.get('App ID')})"
                elif '"Event":"SparkListenerExecutorAdded"' in line:
                    event = json.loads(line)
                    urls = " ".join(event["Executor Info"].get("Log Urls", {}).values())
                    port = re.search(r"127\.0\.0\.1:(\d+)/", urls)
                    executors[event["Executor ID"]] = by_port.get(int(port.group(1)), "?") if port else "?"
                elif '"Event":"SparkListenerTaskEnd"' in line:
                    executor = json.loads(line)["Task Info"]["Executor ID"]
                    worker = executors.get(executor, "driver" if executor == "driver" else "?")
                    counts[worker] = counts.get(worker, 0) + 1
            result[app] = counts
        return result

    def spark_task_failures(self, app_prefix: str) -> dict[str, int]:
        """{reason: failed task attempts} of the applications whose name starts with ``app_prefix`` (Spark's event
        logs: ``ExecutorLostFailure`` is a task that ran on an executor which died)."""
        counts: dict[str, int] = {}
        for path in sorted((self.root / "spark" / "events").glob("app-*")):
            text = path.read_text(errors="replace")
            start = re.search(r'"Event":"SparkListenerApplicationStart","App Name":"([^"]*)"', text)
            if not start or not start.group(1).startswith(app_prefix):
                continue
            for line in text.splitlines():
                if '"Event":"SparkListenerTaskEnd"' in line:
                    reason = json.loads(line)["Task End Reason"]["Reason"]
                    if reason != "Success":
                        counts[reason] = counts.get(reason, 0) + 1
        return counts

    def ray_work(self) -> dict[str, dict[str, int]]:
        """Ray tasks and actors by node (``head`` / ``node-2``), from Ray's state API (tasks of every job the
        cluster has run; a node started again counts under the same name)."""
        script = (
            "import json\nfrom ray.util.state import list_nodes, list_tasks\n"
            f"address = 'http://127.0.0.1:{self.port('ray-dashboard')}'\n"
            "work = {}\n"
            "for n in list_nodes(address=address, limit=1000, raise_on_missing_output=False):\n"
            "    name = 'head' if n.is_head_node else 'node-2'\n"
            "    # The state API returns at most 10,000 rows a call: counted per node, capped there.\n"
            "    for t in list_tasks(address=address, filters=[('node_id', '=', n.node_id)], limit=10000,\n"
            "                        raise_on_missing_output=False):\n"
            "        kind = {'ACTOR_TASK': 'actor tasks', 'ACTOR_CREATION_TASK': 'actors'}.get(t.type, 'tasks')\n"
            "        work.setdefault(name, {})[kind] = work.setdefault(name, {}).get(kind, 0) + 1\n"
            "print(json.dumps(work))\n")
        done = subprocess.run([str(self.node_python), "-c", script], env=self.env("driver"), capture_output=True,
                              text=True, timeout=120, cwd=self.root / "scratch")
        if done.returncode != 0:
            raise ClusterError(f"Ray's state API: {done.stderr[-1500:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def where(self) -> str:
        """Where Spark tasks and Ray tasks and actors ran, one line per application and node."""
        lines = ["Spark tasks by worker (event logs):"]
        for app, counts in self.spark_tasks().items():
            lines.append(f"  {app}: " + ", ".join(f"{w} {n}" for w, n in sorted(counts.items())))
        lines.append("Ray work by node (state API):")
        for node, counts in sorted(self.ray_work().items()):
            lines.append(f"  {node}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        return "\n".join(lines)

    # ------------------------------------------------------------------ the bucket
    def tables(self) -> dict[str, tuple[int, Optional[int]]]:
        """{table: (latest version, rows)} of the lakehouse in the bucket, read with delta-rs."""
        return _tables(f"s3://{BUCKET}/lakehouse", self.env("driver"))

    def bucket_keys(self, prefix: str) -> list[str]:
        client, keys, token = self._s3(), [], None
        while True:
            page = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix,
                                          **({"ContinuationToken": token} if token else {}))
            keys += [o["Key"] for o in page.get("Contents", [])]
            token = page.get("NextContinuationToken")
            if not token:
                return keys


def _tables(root: str, env: Optional[dict[str, str]] = None) -> dict[str, tuple[int, Optional[int]]]:
    """{table: (version, rows)} of the path tables under ``root`` (delta-rs; a store's endpoint from ``env``)."""
    saved = dict(os.environ)
    try:
        if env:
            os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
        sys.path.insert(0, str(REPO))
        from common.platform.config import LakehouseConfig
        from common.platform.lakehouse import Lakehouse

        return {t.name: (t.version, t.num_rows) for t in Lakehouse(LakehouseConfig(root=root)).tables()}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, theirs...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _exists(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited and not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


# ---------------------------------------------------------------------- the S3 gateway
async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def _gateway(listen: int, target: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            store_reader, store_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, store_writer), _pipe(store_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", listen, reuse_address=True)
    async with server:
        await server.serve_forever()


# ---------------------------------------------------------------------- the rehearsal
# The generative pipelines of the endpoint rounds, each with its generator served as conf/endpoint_demo.yaml says.
ENDPOINT_PIPELINES = ("cga", "query-reformulation", "genre-transfer", "compositional")


def endpoint_demo_overrides(cluster: LocalCluster) -> list[str]:
    """conf/endpoint_demo.yaml's sections (every generator ``model.kind: endpoint``, its generation budgets) as
    ``--set`` values for the cluster's config, its two variables replaced by the cluster's model server and each
    served section's key named by ``AUGMENT_ENDPOINT_KEY`` (one source: the local endpoint demo's file)."""
    import yaml

    tree = yaml.safe_load((REPO / "conf" / "endpoint_demo.yaml").read_text())
    values = {"${AUGMENT_ENDPOINT_URL}": cluster.endpoint_url,
              "${AUGMENT_ENDPOINT_MODEL}": cluster.state["model_folder"]}
    out: list[str] = []

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict):
                walk(value, path)
                if key == "endpoint":
                    out.append(f"{path}.api_key_env={ENDPOINT_KEY_ENV}")
            else:
                out.append(f"{path}={values.get(str(value), value)}")

    walk({k: v for k, v in tree.items() if k not in ("extends", "name", "lakehouse")}, "")
    return out


def endpoint_rehearsal(cluster: LocalCluster, timed, pipelines: Sequence[str] = ENDPOINT_PIPELINES) -> list[str]:
    """Each of ``pipelines`` through spark-submit with every generator the cluster's model server
    (:func:`endpoint_demo_overrides`; the key in the driver's environment only), in two rounds: in the first each
    pipeline's generation is served (completions counted in the server's access log), in the second none sends a
    request or writes a version. The key must appear in no log of the cluster (drivers, Spark, Ray). Returns the
    failures."""
    failures: list[str] = []
    args = [a for o in endpoint_demo_overrides(cluster) for a in ("--set", o)]
    for round_ in (1, 2):
        for pipeline in pipelines:
            tables, served = cluster.tables(), cluster.model_server_completions()
            result = timed(f"endpoint {round_}: spark-submit {pipeline}, its generator served", cluster.submit,
                           ["run", pipeline, *args], f"endpoint-{pipeline}-{round_}")
            sent, moved = cluster.model_server_completions() - served, {
                t: v for t, v in cluster.tables().items() if tables.get(t) != v}
            print(f"[cluster-demo] endpoint round {round_}: {pipeline} exit {result.returncode}, {sent} completions "
                  f"served, {len(moved)} tables with a new version", flush=True)
            if result.returncode != 0:
                print(result.stdout[-4000:])
                return failures + [f"endpoint round {round_}: {pipeline} exited {result.returncode}"]
            if round_ == 1 and not sent:
                failures.append(f"endpoint round 1: the model server answered no completion for {pipeline}")
            if round_ == 2 and (sent or moved):
                failures.append(f"endpoint round 2: {pipeline} sent {sent} completions again, new versions {moved}")
    key = cluster._secret("endpoint-key").encode()
    leaks = [str(p) for folder in (cluster.root / "logs", cluster.ray_temp) for p in folder.rglob("*")
             if p.is_file() and key in p.read_bytes()]
    if leaks:
        failures.append(f"the endpoint's key is written in {leaks[:5]}")
    return failures


def model_server_command(python: str, folder: str, port: int) -> list[str]:
    """Hugging Face's ``transformers serve`` of the local model ``folder`` on 127.0.0.1:``port``, on CPU in float32:
    the OpenAI-compatible server of the endpoint tests and rehearsals (it answers ``/v1/completions`` and
    ``/v1/chat/completions``, and logs each request as an access line)."""
    return [python, "-m", "transformers.cli.transformers", "serve", folder, "--host", "127.0.0.1", "--port", str(port),
            "--device", "cpu", "--dtype", "float32"]


def model_server_env(hub: Path) -> dict[str, str]:
    """The model server's variables: offline, with a hub cache of its own in ``hub`` (with none its /v1/models
    answers 500; with one, it lists no local folder but serves it)."""
    hub.mkdir(parents=True, exist_ok=True)
    return {"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def start_model_server(python: str, folder: str, port: int, log: Path, hub: Path,
                       timeout: float = 180.0) -> subprocess.Popen:
    """:func:`model_server_command` started with its output to ``log`` (appended), once its ``/v1/models``
    answers; raises :class:`ClusterError` with the log's tail when it exits or does not answer in ``timeout`` s."""
    with open(log, "ab") as out:
        server = subprocess.Popen(model_server_command(python, folder, port),
                                  env={**os.environ, **model_server_env(hub)}, stdout=out, stderr=subprocess.STDOUT,
                                  cwd=hub.parent)
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
            return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise ClusterError(
                    f"transformers serve did not start: {log.read_text(errors='replace')[-3000:]}") from None
            time.sleep(0.5)


def demo_inputs(bucket_uri: str = f"s3a://{BUCKET}", conf: Path = CONF,
                local_conf: Path = REPO / "conf" / "demo.yaml") -> dict[str, Path]:
    """{bucket key: local file}: every file the local demo (``local_conf``) reads for an input that the cluster demo
    (``conf``, with ``AUGMENT_BUCKET`` = ``bucket_uri``) reads from the bucket, at the key the cluster demo reads it
    from: a folder's files, a glob's matches, or the file. Listed from the two configs themselves (their paths
    relative to the repository, as ``make demo`` runs), so the uploads follow whatever the demo reads."""
    import glob

    from common.config import load_config

    saved = {key: os.environ.get(key) for key in ("AUGMENT_BUCKET", "RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    cwd = os.getcwd()
    try:
        os.environ["AUGMENT_BUCKET"] = bucket_uri
        os.environ.setdefault("RAY_ADDRESS", "127.0.0.1:6379")
        os.environ.setdefault("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
        os.chdir(REPO)
        local, cluster = load_config(local_conf).inputs, load_config(conf).inputs
    finally:
        os.chdir(cwd)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    uploads: dict[str, Path] = {}
    prefix = bucket_uri.rstrip("/") + "/"
    for name, spec in vars(local).items():
        remote = getattr(cluster, name)
        if not hasattr(spec, "path") or remote is None or not remote.path.startswith(prefix):
            continue
        base = Path(spec.path)
        if base.is_dir():
            files = {p.relative_to(base).as_posix(): p for p in sorted(base.rglob("*")) if p.is_file()}
            for relative, path in files.items():
                uploads[f"{remote.path[len(prefix):].rstrip('/')}/{relative}"] = path
        else:
            folder, remote_folder = base.parent, remote.path[len(prefix):].rsplit("/", 1)[0]
            for match in sorted(glob.glob(str(base))):
                uploads[f"{remote_folder}/{Path(match).relative_to(folder).as_posix()}"] = Path(match)
    return uploads


def demo(root: Path, chain: Iterable[str] = DEMO_CHAIN, ray_mode: str = "address",
         notebook: Optional[str] = None) -> int:
    """``make cluster-demo``: the local demo for comparison, then the cluster, every pipeline through spark-submit,
    where the work ran, the checks, the same chain again (no new versions), and the cluster down. ``notebook``
    names a pipeline of the chain whose first run is its notebook run as a scheduled Databricks job runs it
    (tests/cluster/notebook_job.py) instead of ``augment run``: the second round's CLI run then writes nothing new
    only if the notebook wrote what the CLI would. Returns 0 when every check held."""
    timings: dict[str, float] = {}
    failures: list[str] = []

    def timed(label: str, fn, *args, **kwargs):
        start = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            timings[label] = time.monotonic() - start
            print(f"[cluster-demo] {label}: {_clock(timings[label])}", flush=True)

    root = Path(root).resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    local = root / "local-demo"
    done = timed("local demo (augment run demo, conf/demo.yaml)", subprocess.run,
                 [str(VENV / "bin" / "augment"), "run", "demo", "--conf", str(REPO / "conf" / "demo.yaml"),
                  "--set", f"lakehouse.root={local}", f"tracking.uri=sqlite:///{local}/mlflow.db"],
                 cwd=REPO, capture_output=True, text=True)
    (root / "local-demo.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-3000:])
        return 1
    cluster = LocalCluster(root / "cluster")
    try:
        timed("cluster up", cluster.up, model_server=True)
        print(cluster.status(), flush=True)
        timed("make dist", cluster.build_dist)
        timed("inputs to the bucket", cluster.upload_inputs)
        for round_ in (1, 2):
            before = cluster.tables() if round_ == 2 else {}
            for name in chain:
                overrides = [f"ray.mode={ray_mode}"] if ray_mode != "address" else []
                if round_ == 1 and name == notebook:
                    result = timed(f"round {round_}: spark-submit notebooks/{name.replace('-', '_')}.py as a job",
                                   _notebook_job, cluster, name, overrides, f"{name}-{round_}")
                else:
                    args = ["run", name] + [a for o in overrides for a in ("--set", o)]
                    result = timed(f"round {round_}: spark-submit {name}", cluster.submit, args, f"{name}-{round_}")
                if result.returncode != 0:
                    print(result.stdout[-4000:])
                    failures.append(f"round {round_}: {name} exited {result.returncode}")
                    raise ClusterError(failures[-1])
            if round_ == 1:
                print(cluster.where(), flush=True)
                failures += _checks(cluster, local, ray_mode)
            else:
                after = cluster.tables()
                moved = {t: (before.get(t), v) for t, v in after.items() if before.get(t) != v}
                print(f"[cluster-demo] round 2: {len(after)} tables, {len(moved)} with a new version", flush=True)
                if moved:
                    failures.append(f"the second run wrote new versions: {moved}")
        failures += endpoint_rehearsal(cluster, timed)
    except ClusterError as exc:
        if str(exc) not in failures:
            failures.append(str(exc))
    finally:
        timed("cluster down", cluster.down)
    chain_time = sum(v for k, v in timings.items() if k.startswith("round 1"))
    print(f"[cluster-demo] local demo {_clock(timings['local demo (augment run demo, conf/demo.yaml)'])}; on the "
          f"cluster: up {_clock(timings.get('cluster up', 0))}, the chain {_clock(chain_time)}, again "
          f"{_clock(sum(v for k, v in timings.items() if k.startswith('round 2')))}", flush=True)
    # Where the time went: the Delta writes (each write's compute, its files and its commit), both sides.
    round1 = "".join(cluster.log(f"submit-{name}-1").read_text(errors="replace") for name in chain
                     if cluster.log(f"submit-{name}-1").exists())
    for label, text in (("local demo", (root / "local-demo.log").read_text()), ("cluster round 1", round1)):
        seconds = [float(s) for s in re.findall(r"committed \S+ version \d+ with .* in ([\d.]+) s", text)]
        print(f"[cluster-demo] {label}: {len(seconds)} Delta writes, {sum(seconds):.0f} s in all", flush=True)
    print(job_table(root), flush=True)
    for failure in failures:
        print(f"[cluster-demo] FAILED: {failure}")
    return 1 if failures else 0


def job_times(text: str) -> dict[str, float]:
    """{job: seconds} from a run's progress lines (``[pipeline i/n] job done in m:ss: ...``). A job that several
    pipelines share runs once and is skipped after: its longest line is the run that did the work."""
    times: dict[str, float] = {}
    for job, minutes, seconds in re.findall(r"^\[\S+ \d+/\d+\] (\S+) done in (\d+):(\d+):", text, re.M):
        times[job] = max(times.get(job, 0.0), 60 * int(minutes) + int(seconds))
    return times


def job_table(root: Path, chain: Iterable[str] = DEMO_CHAIN) -> str:
    """Each job's time in a ``make cluster-demo`` folder ``root``: the local demo's against the cluster's first
    round, with the totals, as a text table."""
    local = job_times((root / "local-demo.log").read_text(errors="replace"))
    logs = [root / "cluster" / "logs" / f"submit-{name}-1.log" for name in chain]
    remote = job_times("".join(log.read_text(errors="replace") for log in logs if log.exists()))
    lines = [f"{'job':<24} {'local':>6} {'cluster':>8}"]
    lines += [f"{job:<24} {_clock(local[job]):>6} {_clock(remote[job]) if job in remote else '-':>8}"
              for job in local]
    both = [job for job in local if job in remote]  # a single job's run (results-summary) prints no progress line
    lines.append(f"{'jobs in both':<24} {_clock(sum(local[j] for j in both)):>6} "
                 f"{_clock(sum(remote[j] for j in both)):>8}")
    return "\n".join(lines)


def _notebook_job(cluster: LocalCluster, pipeline: str, overrides: Sequence[str],
                  name: str) -> subprocess.CompletedProcess:
    """Pipeline ``pipeline``'s notebook through spark-submit as a scheduled Databricks job runs it (its
    parameters in ``$AUGMENT_CONF``/``$AUGMENT_OVERRIDES``, the session made before the notebook starts)."""
    env = {**cluster.env("driver"), "AUGMENT_CONF": str(CONF), "AUGMENT_OVERRIDES": " ".join(overrides)}
    notebook = REPO / "notebooks" / f"{pipeline.replace('-', '_')}.py"
    return cluster.submit_script(HERE / "notebook_job.py", [str(notebook)], name, timeout=3600, env=env)


def _checks(cluster: LocalCluster, local: Path, ray_mode: str = "address") -> list[str]:
    """The rehearsal's checks after the first chain; returns what failed (and prints what held)."""
    failures = []
    mine, theirs = cluster.tables(), _tables(str(local))
    missing = sorted(set(theirs) - set(mine))
    differ = {t: (theirs[t], mine[t]) for t in theirs if t in mine and theirs[t] != mine[t]}
    print(f"[cluster-demo] tables: {len(mine)} in the bucket, {len(theirs)} in the local demo; "
          f"missing {missing or 'none'}; other version or rows: {differ or 'none'}", flush=True)
    if missing or differ:
        failures.append(f"bucket tables differ from the local demo's: missing {missing}, differ {differ}")
    left = sorted(str(p.relative_to(cluster.driver_dir)) for p in cluster.driver_dir.rglob("*"))
    print(f"[cluster-demo] files left in the driver's working folder: {left or 'none'}", flush=True)
    if left:
        failures.append(f"the driver's working folder holds {left}")
    spark = cluster.spark_tasks()
    workers = {w for counts in spark.values() for w, n in counts.items() if n}
    if not set(SPARK_WORKERS) <= workers:
        failures.append(f"Spark tasks ran on {sorted(workers)}, not on both workers")
    if ray_mode == "spark":  # each job's Ray on Spark cluster reported where its tasks ran before it ended
        reports = _ray_on_spark_reports(cluster)
        print(f"[cluster-demo] Ray on Spark, tasks by node per job: {reports}", flush=True)
        if not any(n for report in reports for where, n in report.items() if where.startswith("worker")):
            failures.append(f"no Ray task ran on a Ray-on-Spark worker node: {reports}")
    else:
        ray = cluster.ray_work()
        if not {"head", "node-2"} <= set(ray):
            failures.append(f"Ray work ran on {sorted(ray)}, not on both nodes")
    artifacts = cluster.bucket_keys("mlflow/")
    runs = _mlflow_runs(cluster)
    print(f"[cluster-demo] MLflow: {runs} runs on the server, {len(artifacts)} artifact files in "
          f"s3://{BUCKET}/mlflow/", flush=True)
    if not runs or not artifacts:
        failures.append("no MLflow runs or artifacts on the tracking server")
    return failures


def _ray_on_spark_reports(cluster: LocalCluster) -> list[dict[str, int]]:
    """The "ray on spark: tasks by node {...}" lines of the first round's submit logs, parsed."""
    reports = []
    for log in sorted((cluster.root / "logs").glob("submit-*-1.log")):
        for found in re.finditer(r"ray on spark: tasks by node (\{[^}]*\})", log.read_text(errors="replace")):
            reports.append(ast.literal_eval(found.group(1)))
    return reports


def _mlflow_runs(cluster: LocalCluster) -> int:
    url = f"http://127.0.0.1:{cluster.port('mlflow')}/api/2.0/mlflow/experiments/search"
    request = urllib.request.Request(url, data=json.dumps({"max_results": 100}).encode(),
                                     headers={"Content-Type": "application/json"})
    experiments = json.loads(urllib.request.urlopen(request, timeout=30).read()).get("experiments", [])
    total = 0
    for experiment in experiments:
        token = None
        while True:
            body = {"experiment_ids": [experiment["experiment_id"]], "max_results": 1000,
                    **({"page_token": token} if token else {})}
            request = urllib.request.Request(url.replace("experiments/search", "runs/search"),
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            page = json.loads(urllib.request.urlopen(request, timeout=30).read())
            total += len(page.get("runs", []))
            token = page.get("next_page_token")
            if not token:
                break
    return total


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="local_cluster.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "status", "env", "submit", "where", "demo", "times",
                                            "gateway", "endpoint"])
    parser.add_argument("--root", default=str(DEFAULT_ROOT))
    parser.add_argument("--listen", type=int)
    parser.add_argument("--to", type=int)
    parser.add_argument("--ray-mode", choices=["address", "spark"], default="address",
                        help="demo: the model stages on the Ray cluster (address) or on Ray on Spark (spark)")
    parser.add_argument("--model-server", action="store_true",
                        help="up: also serve SmolLM2 behind an OpenAI-compatible API (transformers serve)")
    parser.add_argument("--notebook", choices=DEMO_CHAIN[:-1],
                        help="demo: run this pipeline's notebook as a scheduled Databricks job would, not augment run")
    args, rest = parser.parse_known_args(argv)  # submit's own arguments: after --
    if args.command == "gateway":
        asyncio.run(_gateway(args.listen, args.to))
        return 0
    if args.command == "demo":
        return demo(Path(args.root), ray_mode=args.ray_mode, notebook=args.notebook)
    if args.command == "times":  # of a finished `make cluster-demo`: --root build/cluster-demo
        print(job_table(Path(args.root)))
        return 0
    if args.command == "endpoint":  # the endpoint rehearsal alone: up, the pipeline served twice, down
        cluster = LocalCluster(args.root)
        try:
            cluster.up(model_server=True)
            cluster.build_dist()
            cluster.upload_inputs()
            failures = endpoint_rehearsal(cluster, lambda label, fn, *a, **k: fn(*a, **k))
        finally:
            cluster.down()
        for failure in failures:
            print(f"[cluster-demo] FAILED: {failure}")
        return 1 if failures else 0
    if args.command == "up":
        cluster = LocalCluster(args.root).up(model_server=args.model_server)
        print(cluster.status())
        return 0
    cluster = LocalCluster.attach(args.root)
    if args.command == "down":
        cluster.down()
    elif args.command == "status":
        print(cluster.status())
    elif args.command == "env":
        env = cluster.env("driver")
        secret = {"AWS_ACCESS_KEY_ID": "s3-key-id", "AWS_SECRET_ACCESS_KEY": "s3-secret"}
        for key in sorted(k for k in env if k.startswith(("AWS_", "RAY_", "MLFLOW_", "AUGMENT_", "SPARK_",
                                                          "PYSPARK_"))):
            value = f'"$(cat {cluster.root / "secrets" / secret[key]})"' if key in secret else f"'{env[key]}'"
            print(f"export {key}={value}")
    elif args.command == "submit":
        rest = rest[1:] if rest[:1] == ["--"] else rest
        return cluster.submit(rest, "cli").returncode
    elif args.command == "where":
        print(cluster.where())
    return 0


if __name__ == "__main__":
    sys.exit(main())
