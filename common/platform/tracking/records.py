"""What a run records besides its metrics: the code it ran (:func:`code_tags`) and the Delta table versions it read
and wrote as MLflow datasets (:func:`delta_dataset`, :func:`log_dataset`)."""

from __future__ import annotations

import functools
import logging
import subprocess
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DISTRIBUTION = "catalog-augment"  # setup.py's name


@functools.lru_cache(maxsize=1)
def code_tags() -> dict[str, str]:
    """Tags naming the code a run ran, looked up once per process: ``code.version`` (the installed
    distribution's version) and, when the package is a git checkout, ``mlflow.source.git.commit`` (MLflow's own
    tag: its UI shows it) and ``code.dirty`` (tracked files differ from that commit). Runs started from a
    console script get no commit from MLflow itself, and a table's lineage names its run: so two results of
    the same config and inputs can be told apart by the code that wrote them."""
    from common.platform.process.packages import package_version

    installed = package_version(DISTRIBUTION)
    tags = {} if installed is None else {"code.version": installed}
    root = Path(__file__).resolve().parents[3]
    # Only the package's own checkout: an installed copy inside some other repository's tree is not that commit.
    if (root / ".git").exists():
        try:
            head = subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30
            )
            if head.returncode == 0:
                tags["mlflow.source.git.commit"] = head.stdout.strip()
                diff = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"], timeout=30)
                tags["code.dirty"] = "true" if diff.returncode == 1 else "false"
        except (OSError, subprocess.TimeoutExpired) as exc:  # no git on the machine: the version tag stands
            log.info("no git commit for the run's tags: %s", exc)
    return tags


def delta_dataset(name: str, version: int, location: str):
    """The MLflow dataset of Delta table ``name`` at ``version`` (``location``: its path, or a catalog table
    name): what a run's inputs and a registered model's lineage name."""
    from mlflow.data.delta_dataset_source import DeltaDatasetSource
    from mlflow.data.meta_dataset import MetaDataset

    is_path = "://" in location or location.startswith("/")
    source = DeltaDatasetSource(
        path=location if is_path else None,
        delta_table_name=None if is_path else location,
        delta_table_version=int(version),
    )
    return MetaDataset(source=source, name=name, digest=f"v{version}")


def log_dataset(run_id: str, dataset: Any, context: str, attempts: int = 4) -> None:
    """Log the MLflow ``dataset`` as an input of run ``run_id`` with ``context`` (input/output).

    The tracking store gets-or-creates the dataset row (select, then insert): two runs logging one table
    version at once (two processes of one job) both miss it and the later insert fails on the store's unique
    key (found by the two-process ingest test on SQLite). That failure is retried; the retry finds the row.
    """
    import time

    from mlflow import MlflowClient
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.exceptions import MlflowException
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    inputs = [DatasetInput(dataset._to_mlflow_entity(), tags=[InputTag(key=MLFLOW_DATASET_CONTEXT, value=context)])]
    for attempt in range(attempts):
        try:
            MlflowClient().log_inputs(run_id, inputs)
            return
        except MlflowException as exc:
            text = str(exc)
            if attempt == attempts - 1 or not (
                "UNIQUE constraint" in text
                or "IntegrityError" in text
                or "Duplicate entry" in text
                or "duplicate key" in text
            ):
                raise
            log.warning("logging dataset %s lost a race to a concurrent run; retrying", dataset.name)
            time.sleep(0.05 * (attempt + 1))
