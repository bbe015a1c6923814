"""``augment doctor``'s checks of what a cluster config must reach, without starting anything: the Spark master, Ray's
head and the token this driver would present, what Ray on Spark needs of this driver's Python, and the MLflow
tracking server."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional

from common.platform.base_config import BaseConfig
from common.platform.doctor.checks import Check


def _reachable(host: str, port: int, timeout: float = 3.0) -> Optional[str]:
    """None when a TCP connection to ``host:port`` opens, else why not."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return str(exc)


def spark_master_url(cfg: BaseConfig) -> Optional[str]:
    """The standalone master a cluster job would use: ``spark.master`` when it is a ``spark://`` URL, else the one
    in ``$SPARK_CONF_DIR/spark-defaults.conf`` (what spark-submit reads), else None."""
    if cfg.spark.master.startswith("spark://"):
        return cfg.spark.master
    folder = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None
    )
    defaults = Path(folder or "/nonexistent") / "spark-defaults.conf"
    if defaults.is_file():
        for line in defaults.read_text(encoding="utf-8").splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[0] == "spark.master":
                return parts[1].strip()
    return None


def cluster_checks(cfg: BaseConfig) -> list[Check]:
    """What a cluster config needs to reach, without starting anything: the Spark master (spark-submit's, from the
    config or spark-defaults.conf), Ray's head (its GCS port) and the token this environment would present, and the
    MLflow tracking server (its /health). None for a local config."""
    checks: list[Check] = []
    if cfg.spark.mode == "cluster":
        master = spark_master_url(cfg)
        if master is None:
            checks.append(
                Check("spark master", True, "none named (spark-submit --master, or YARN/Kubernetes): not checked")
            )
        elif master.startswith("spark://"):
            hosts = master[len("spark://") :].split(",")  # standby masters: host:port,host:port
            errors = [e for e in (_reachable(h.split(":")[0], int(h.split(":")[1] or 7077)) for h in hosts) if e]
            checks.append(
                Check(
                    "spark master",
                    len(errors) < len(hosts),
                    f"{master}" + (f": {errors[0]}" if errors else " answers"),
                    "start the master, or name it in spark-defaults.conf",
                    required=True,
                )
            )
        else:
            checks.append(Check("spark master", True, f"{master}: not checked (not a standalone master)"))
    if cfg.ray.mode == "address":
        address = (cfg.ray.address or "").removeprefix("ray://")
        if ":" not in address:
            checks.append(Check("ray head", True, f"ray.address={cfg.ray.address!r}: Ray resolves it at start"))
        else:
            host, port = address.rsplit(":", 1)
            error = _reachable(host, int(port))
            checks.append(
                Check(
                    "ray head",
                    error is None,
                    f"{cfg.ray.address}" + (f": {error}" if error else " answers"),
                    "start the head (ray start --head), or set RAY_ADDRESS",
                    required=True,
                )
            )
        checks.append(_ray_token())
    elif cfg.ray.mode == "spark":
        checks.append(_ray_on_spark(cfg))
    uri = cfg.tracking.uri or ""
    if uri.startswith(("http://", "https://")):
        import urllib.request

        try:
            with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=5) as response:
                ok, detail = response.status == 200, f"{uri} answers /health"
        except OSError as exc:
            ok, detail = False, f"{uri}: {exc}"
        checks.append(
            Check(
                "mlflow server", ok, detail, "start it (mlflow server ...), or set MLFLOW_TRACKING_URI", required=True
            )
        )
    return checks


def _ray_on_spark(cfg: BaseConfig) -> Check:
    """What Ray on Spark needs of this driver's Python before it starts: the ``ray`` command beside it (Ray's node
    starter runs it; executors need the same in their Python) and ``grpcio`` (every head start opens a Ray Client
    port), and worker node sizes that can work."""
    from common.platform.compute.ray_on_spark import ray_command_folder

    fix = "pip install 'ray[default]' into the driver's and the executors' Python (make install does)"
    folder = ray_command_folder(sys.executable)
    if folder is None:
        return Check("ray on spark", False, f"no `ray` command beside {sys.executable}", fix, required=True)
    if importlib.util.find_spec("grpc") is None:
        return Check(
            "ray on spark", False, "grpcio missing (Ray Client, which every head start opens)", fix, required=True
        )
    ray = cfg.ray
    sizes = (
        f"{ray.spark_min_worker_nodes}-{ray.spark_max_worker_nodes} worker nodes of "
        f"{ray.spark_num_cpus_per_node or 'an executor'}'s CPUs, {ray.spark_num_gpus_per_node or 0} GPU, idle "
        f"ones end after {ray.spark_idle_timeout_minutes:g} min"
    )
    fixed = ray.spark_min_worker_nodes >= ray.spark_max_worker_nodes
    return Check(
        "ray on spark",
        not fixed,
        f"{folder}/ray; {sizes}" + (": a fixed cluster holds its Spark slots until the job ends" if fixed else ""),
        "ray.spark_min_worker_nodes: 0 lets idle Ray nodes give their slots back to Spark stages",
    )


def _ray_token() -> Check:
    """The token this process would present to a Ray cluster with token authentication."""
    mode = os.environ.get("RAY_AUTH_MODE", "")
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if mode != "token":
        return Check(
            "ray token",
            True,
            f"RAY_AUTH_MODE={mode or 'unset'}: this driver presents no token (a cluster "
            "with token authentication refuses it)",
            "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=<file>",
        )
    if os.environ.get("RAY_AUTH_TOKEN"):
        return Check("ray token", True, "token mode, token from RAY_AUTH_TOKEN (not shown)")
    token = Path(path) if path else Path.home() / ".ray" / "auth_token"
    readable = token.is_file() and os.access(token, os.R_OK) and token.stat().st_size > 0
    return Check(
        "ray token",
        readable,
        f"token mode, token file {token}" + ("" if readable else " missing or empty"),
        "set RAY_AUTH_TOKEN_PATH to the cluster's token file",
        required=True,
    )
