"""The small demo world the process-level reliability tests ingest: its config, and the ``augment run ingest``
arguments that point a lakehouse at its landing files (4 tables: kept and quarantined rows of the labeled
products and the catalog)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from common.config import load_config

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # the killed processes import this module too, without pytest's path
from worlds import DEMO as SMALL_DEMO  # noqa: E402  (the small demo world every other test ingests)

# The processes these tests start, kill and race live 10-20 s: the quick JIT compiler alone starts them
# about 20% sooner (a long-lived JVM runs slower with it; the products' configs leave it off).
SHORT_JVM = "-XX:TieredStopAtLevel=1"
# A cold JVM compiles each new query's generated Java code (Janino) before it runs; on these processes' few
# hundred rows the interpreted operators finish first: an ingest process takes 11.4 s instead of 12.9 s on 2
# cores. NO_CODEGEN is Spark's own test setting, kept to these short-lived processes.
SHORT_SPARK_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
DEMO = [
    *SMALL_DEMO,
    f"spark.java_options={SHORT_JVM}",
    f"spark.conf={json.dumps(SHORT_SPARK_CONF)}",
]  # JSON is YAML: the values stay strings


def settings(root: Path, base: Path, path: str = "native", landing: Path | None = None) -> list[str]:
    """The job's --set items: its lakehouse ``root``, the MLflow database under ``base``, the write ``path``
    and, with ``landing``, that folder's labeled products and catalog files as the inputs."""
    items = [
        f"lakehouse.root={root}",
        f"tracking.uri=sqlite:///{base / 'mlflow.db'}",
        f"tracking.experiment=reliability-{root.name}",
        f"spark.delta={path}",
        *DEMO,
    ]
    if landing is not None:
        items += [f"inputs.labeled={landing / 'labeled_products'}", f"inputs.catalog={landing / 'catalog'}"]
    return items


def ingest_config(root: Path, base: Path, path: str = "native", landing: Path | None = None):
    """The AppConfig of an ingest of ``landing`` (default ``root/landing``) into the lakehouse at ``root``."""
    return load_config(None, settings(root, base, path, landing or root / "landing"))


def ingest_args(root: Path, base: Path, path: str = "native", landing: Path | None = None) -> list[str]:
    """``augment`` arguments running the ingest of :func:`ingest_config` (for a subprocess)."""
    args = ["run", "ingest", "--conf", str(REPO / "conf/local.yaml")]
    for item in settings(root, base, path, landing or root / "landing"):
        args += ["--set", item]
    return args
