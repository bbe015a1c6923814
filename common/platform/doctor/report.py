"""``augment doctor``: what this installation can do, one line per piece, with the command that fixes a
missing one (the checks: :mod:`common.platform.doctor.checks` for this machine's installation,
:mod:`common.platform.doctor.cluster` for what a cluster config must reach). Nothing here starts Spark or Ray: it
reads versions, files and the config.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Callable, Sequence

from common.platform.base_config import BaseConfig
from common.platform.doctor.checks import (
    Check,
    _delta,
    _graphframes,
    _java,
    _jvm_archive,
    _lakehouse,
    _minilm,
    _torch,
)
from common.platform.doctor.cluster import cluster_checks
from common.platform.process.packages import package_version


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
