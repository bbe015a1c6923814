"""The command line and environment that start each process of the local cluster: the object store (moto behind
the S3 gateway), the MLflow server, the model server, Spark's master and workers, the Ray head and second node
(:class:`ClusterCommands`, a part of :class:`~cluster_lifecycle.LocalCluster`)."""

from __future__ import annotations

from cluster_model_server import model_server_command, model_server_env
from cluster_processes import BUCKET, HERE, RAY_NODES, SPARK_WORKERS


class ClusterCommands:
    """How each process of a :class:`~cluster_lifecycle.LocalCluster` starts (its layout's ports, folders and
    environments)."""

    def _command(self, name: str) -> tuple[list[str], dict[str, str]]:
        if name in ("s3-store", "s3", "mlflow", "model-server"):
            return self._service_command(name)
        if name == "spark-master" or name in SPARK_WORKERS:
            return self._spark_command(name)
        return self._ray_command(name)

    def _service_command(self, name: str) -> tuple[list[str], dict[str, str]]:
        """The object store, its gateway, the MLflow server and the model server."""
        py, p = str(self.node_python), self.port
        if name == "s3-store":
            return [py, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(p("s3-store"))], self.env("s3")
        if name == "s3":
            return [py, str(HERE / "cluster_s3_gateway.py"), str(p("s3")), str(p("s3-store"))], self.env("s3")
        if name == "mlflow":
            env = {
                **self.env("mlflow"),
                "MLFLOW_S3_ENDPOINT_URL": f"http://127.0.0.1:{p('s3')}",
                # MLflow 3.17's server otherwise starts 7 job consumers (huey): 1.8 GB and half a core, idle.
                "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            }
            return [
                py,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                f"sqlite:///{self.root / 'mlflow' / 'mlflow.db'}",
                "--artifacts-destination",
                f"s3://{BUCKET}/mlflow",
                "--host",
                "127.0.0.1",
                "--port",
                str(p("mlflow")),
                "--workers",
                "1",
            ], env
        return model_server_command(py, self.state["model_folder"], p(name)), {
            **self.env(name),
            **model_server_env(self.root / "scratch" / "hub"),
        }

    def _spark_command(self, name: str) -> tuple[list[str], dict[str, str]]:
        """Spark's standalone master or a worker (one core, its own work folder), from pyspark's ``spark-class``."""
        p = self.port
        spark_class = [str(self.spark_home / "bin" / "spark-class")]
        if name == "spark-master":
            return spark_class + [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(p("spark-master")),
                "--webui-port",
                str(p("spark-master-ui")),
            ], self.env(name)
        work = self.root / "spark" / name
        work.mkdir(parents=True, exist_ok=True)
        return spark_class + [
            "org.apache.spark.deploy.worker.Worker",
            f"spark://127.0.0.1:{p('spark-master')}",
            "--host",
            "127.0.0.1",
            "--cores",
            "1",
            "--memory",
            "3g",
            "--work-dir",
            str(work),
            "--port",
            str(p(name)),
            "--webui-port",
            str(p(f"{name}-ui")),
        ], self.env(name)

    def _ray_command(self, name: str) -> tuple[list[str], dict[str, str]]:
        """A Ray node through ``ray_node.py start``: the head (GCS, dashboard, client server) or the second node
        joining it."""
        py, p = str(self.node_python), self.port
        temp = self.ray_temp / name
        temp.mkdir(parents=True, exist_ok=True)
        cpus = self.state["ray_cpus"][RAY_NODES.index(name)]
        start = [
            py,
            str(HERE / "ray_node.py"),
            "start",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={cpus}",
            "--object-store-memory=800000000",
            f"--temp-dir={temp}",
            "--disable-usage-stats",
            f"--dashboard-agent-listen-port={p(f'{name}-agent')}",
            f"--metrics-export-port={p(f'{name}-metrics')}",
        ]
        if name == "ray-head":
            return start + [
                "--head",
                f"--port={p('ray-gcs')}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={p('ray-dashboard')}",
                f"--ray-client-server-port={p('ray-client')}",
            ], self.env(name)
        return start + [f"--address=127.0.0.1:{p('ray-gcs')}"], self.env(name)
