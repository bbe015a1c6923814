"""The local cluster's layout: its folders, secrets and ports, each process's environment, the nodes' Python and
Spark's defaults (:class:`ClusterLayout`, the base of :class:`~cluster_lifecycle.LocalCluster`; each process's
command line is in ``cluster_commands``)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from cluster_processes import (
    BUCKET,
    DEFAULT_ROOT,
    ENDPOINT_KEY_ENV,
    HERE,
    JVM_OPTIONS,
    REGION,
    SPARK_WORKERS,
    VENV,
    ClusterError,
    free_port,
    site_packages,
)


class ClusterLayout:
    """Where the cluster's processes, ports and folders are under ``root`` and each process's environment. State
    (ports, pids) is kept in ``<root>/state.json``."""

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
        return site_packages(self.venv) / "pyspark"

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
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(drop) and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        }
        scratch = self.root / "scratch" / node
        scratch.mkdir(parents=True, exist_ok=True)
        env.update(
            {
                "AWS_ACCESS_KEY_ID": self._secret("s3-key-id"),
                "AWS_SECRET_ACCESS_KEY": self._secret("s3-secret"),
                "AWS_REGION": REGION,
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port('s3')}",
                "AWS_ALLOW_HTTP": "true",
                "AWS_EC2_METADATA_DISABLED": "true",
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN_PATH": str(self.token_file),
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                "RAY_USAGE_STATS_ENABLED": "0",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "PYARROW_IGNORE_TIMEZONE": "1",
                "TOKENIZERS_PARALLELISM": "false",
                "SPARK_HOME": str(self.spark_home),
                "SPARK_CONF_DIR": str(self.root / "spark" / "conf"),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": "512m",
                "PYSPARK_PYTHON": str(self.node_python),
                "PYSPARK_DRIVER_PYTHON": str(self.node_python),
                "TMPDIR": str(scratch),
                "AUGMENT_CACHE": str(scratch / "cache"),
            }
        )
        if node == "driver":
            env.update(
                {
                    "RAY_ADDRESS": f"127.0.0.1:{self.port('ray-gcs')}",
                    "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{self.port('mlflow')}",
                    "AUGMENT_BUCKET": self.bucket_uri,
                }
            )
            if (self.root / "secrets" / "endpoint-key").exists():  # only the driver: the actors get it from there
                env[ENDPOINT_KEY_ENV] = self._secret("endpoint-key")
        return env

    # ------------------------------------------------------------------ set-up
    def _prepare(self) -> None:
        for folder in (
            "logs",
            "secrets",
            "spark/conf",
            "spark/events",
            "spark/local",
            "spark/warehouse",
            "mlflow",
            "scratch",
        ):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        if self.driver_dir.exists():
            shutil.rmtree(self.driver_dir)
        self.driver_dir.mkdir()
        os.chmod(self.root / "secrets", 0o700)
        for name, value in (
            ("ray-token", secrets.token_hex(32)),
            ("s3-key-id", "AKIA" + secrets.token_hex(8).upper()),
            ("s3-secret", secrets.token_urlsafe(30)),
            ("endpoint-key", "sk-" + secrets.token_hex(16)),
        ):
            path = self.root / "secrets" / name
            path.write_text(value)
            os.chmod(path, 0o600)
        ports = [
            "s3",
            "s3-store",
            "mlflow",
            "spark-master",
            "spark-master-ui",
            "ray-gcs",
            "ray-dashboard",
            "ray-client",
            "ray-node-2-agent",
            "ray-node-2-metrics",
            "ray-head-agent",
            "ray-head-metrics",
        ]
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
            subprocess.run(
                [str(self.venv / "bin" / "python"), "-m", "venv", "--without-pip", str(env_dir)],
                check=True,
                capture_output=True,
                timeout=120,
            )
        (site_packages(env_dir) / "augment-dependencies.pth").write_text(f"{site_packages(self.venv)}\n")
        # The `ray` command a node image with Ray installed has beside its Python (Ray on Spark's node starter runs
        # `python $(which ray) start ...` on the driver and in the executors). This machine's nodes keep to
        # loopback (tests/cluster/ray_node.py says why), also where Ray on Spark starts them with
        # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1, which would advertise the machine's outward address instead.
        ray_command = env_dir / "bin" / "ray"
        ray_command.write_text(
            f"#!{self.node_python}\nimport os\nimport runpy\n"
            f"os.environ['RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER'] = '0'\n"
            f"runpy.run_path({str(HERE / 'ray_node.py')!r}, run_name='__main__')\n"
        )
        ray_command.chmod(0o755)
        # Checked while the processes start (the imports take seconds); up() reads the answer.
        self._node_check = subprocess.Popen(
            [
                str(self.node_python),
                "-c",
                "import ray, pyspark, deltalake, mlflow, torch\n"
                "try:\n    import common\nexcept ImportError:\n    print('no project')\nelse:\n    "
                "print(common.__file__)",
            ],
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self._plain_env(),
        )

    def _node_env_checked(self) -> None:
        """Raises :class:`ClusterError` unless the nodes' Python imported the dependencies and not the project."""
        out, err = self._node_check.communicate(timeout=120)
        if self._node_check.returncode != 0 or out.strip() != "no project":
            raise ClusterError(
                f"the nodes' Python must have the dependencies and not the project: {out.strip()} {err.strip()[-500:]}"
            )

    def _plain_env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def _spark_defaults(self) -> None:
        """``spark-defaults.conf`` of the cluster (what an operator puts in ``$SPARK_CONF_DIR``): the master, the jars
        each node holds on its classpath, Delta's extension and catalog, s3a's endpoint, the Pythons, Spark's own
        scratch and event log folders, and a 2-core machine's parallelism."""
        classpath = ":".join(f"{folder}/*" for folder in self.jars)
        settings = {
            "spark.master": f"spark://127.0.0.1:{self.port('spark-master')}",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "2g",
            "spark.executor.memory": "1500m",
            "spark.executor.cores": "1",
            "spark.driver.extraClassPath": classpath,
            "spark.executor.extraClassPath": classpath,
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.hadoop.fs.s3a.endpoint": f"http://127.0.0.1:{self.port('s3')}",
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.pyspark.python": str(self.node_python),
            "spark.pyspark.driver.python": str(self.node_python),
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"file://{self.root}/spark/events",
            # One plain JSON-lines file per application (Spark 4 rolls and zstd-compresses them by default).
            "spark.eventLog.rolling.enabled": "false",
            "spark.eventLog.compress": "false",
            "spark.local.dir": str(self.root / "spark" / "local"),
            "spark.sql.warehouse.dir": str(self.root / "spark" / "warehouse"),
            "spark.ui.showConsoleProgress": "false",
            # Three JVMs (the driver, two executors) share two cores here: C1 alone compiles a job's code at a fraction
            # of C2's cost, and the serial collector has no threads of its own. Measured on genre transfer's small
            # world: JVM CPU 420 s -> 224 s, the pipeline 6:09 -> 4:56.
            "spark.driver.extraJavaOptions": JVM_OPTIONS,
            "spark.executor.extraJavaOptions": JVM_OPTIONS,
            "spark.default.parallelism": "2",
            "spark.sql.shuffle.partitions": "2",
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
            "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n"
        )

    # ------------------------------------------------------------------ the store's client
    def _s3(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{self.port('s3')}",
            region_name=REGION,
            aws_access_key_id=self._secret("s3-key-id"),
            aws_secret_access_key=self._secret("s3-secret"),
        )
