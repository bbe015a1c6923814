"""What a run could not log because the tracking server stopped answering mid-run: kept; a later start logs it.

A job's MLflow calls come after the work they describe (a table is committed, then its version tagged; results are
written, then their metrics logged), and a rerun of the same config returns early on what was committed without
computing it again. So when a call gets no answer (after the client's own retries: ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
and ``MLFLOW_HTTP_REQUEST_TIMEOUT``), the run does not stop there, nor ask the server again for every later call (a
wait per call would grow with the work left): its :class:`~common.platform.tracking.TrackedRun` goes offline and each
later metric, param, tag and artifact is kept in ``<lakehouse.root>/_tracking/outbox/<run id>/`` (``run.json`` and
the artifacts' files). The job finishes its work, skips its ship (the ledger keeps it for the next run) and exits 8
naming what was kept. The next start of any job of the config (its tracker's setup, once the server answers) logs
each kept run to the run it belongs to, ends that run FAILED with ``closed.reason`` (it did exit 8) and removes its
folder. A kept run that cannot be logged (the run deleted meanwhile, the server failing again) stays for the start
after, and is said in the log.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from typing import Any, Mapping, Optional

log = logging.getLogger(__name__)

REASON = ("the tracking server stopped answering mid-run (exit 8); what the run logged after that was kept in the run "
          "outbox and logged by a later start")
RUN_FILE = "run.json"


def folder(root: str) -> str:
    """The outbox of the lakehouse at ``root``."""
    return f"{root.rstrip('/')}/_tracking/outbox"


class Outbox:
    """What one run keeps while its tracking server does not answer; nothing is written until something is kept."""

    def __init__(self, root: str, run_id: str):
        self.run_id, self.uri = run_id, f"{folder(root)}/{run_id}"
        self.kept: dict[str, Any] = {"run_id": run_id, "metrics": {}, "params": {}, "tags": {}, "artifacts": [],
                                     "at_ms": None}

    def add(self, kind: str, values: Mapping[str, Any]) -> None:
        """Keep ``values`` (``kind``: metrics, params or tags)."""
        self.kept[kind].update({k: (float(v) if kind == "metrics" else str(v)) for k, v in values.items()})
        self._save()

    def add_file(self, local_path: str, artifact_path: Optional[str]) -> None:
        """Keep a copy of the local file ``local_path``, to be logged under ``artifact_path``."""
        self._add_files([(local_path, os.path.basename(local_path))], artifact_path)

    def add_folder(self, local_dir: str, artifact_path: Optional[str]) -> None:
        """Keep a copy of every file under ``local_dir``, to be logged under ``artifact_path``."""
        files = [(os.path.join(d, f), os.path.relpath(os.path.join(d, f), local_dir))
                 for d, _, names in os.walk(local_dir) for f in names]
        self._add_files(files, artifact_path)

    def add_text(self, text: str, artifact_file: str) -> None:
        """Keep ``text`` as the artifact ``artifact_file``."""
        from common.platform.storage import write_text

        slot = f"{self.uri}/artifacts/{len(self.kept['artifacts'])}"
        write_text(f"{slot}/{os.path.basename(artifact_file)}", text)
        self.kept["artifacts"].append({"slot": os.path.basename(slot),
                                       "artifact_path": os.path.dirname(artifact_file) or None})
        self._save()

    def _add_files(self, files: list[tuple[str, str]], artifact_path: Optional[str]) -> None:
        from common.platform.storage import put_file

        slot = f"{self.uri}/artifacts/{len(self.kept['artifacts'])}"
        for local, relative in files:
            put_file(local, f"{slot}/{relative}")
        self.kept["artifacts"].append({"slot": os.path.basename(slot), "artifact_path": artifact_path})
        self._save()

    def _save(self) -> None:
        from common.platform.storage import write_text

        self.kept["at_ms"] = self.kept["at_ms"] or int(time.time() * 1000)
        write_text(f"{self.uri}/{RUN_FILE}", json.dumps(self.kept, sort_keys=True))

    def summary(self) -> str:
        """What is kept, in words (``3 metrics, 2 tags, 1 artifact``), and where."""
        counts = [(len(self.kept[k]), k) for k in ("metrics", "params", "tags", "artifacts")]
        said = ", ".join(f"{n} {k if n != 1 else k.rstrip('s')}" for n, k in counts if n) or "nothing"
        return f"{said} kept in {self.uri}"


def deliver(root: str) -> list[str]:
    """Log every kept run of the outbox of the lakehouse at ``root`` to its run (the tracking URI MLflow is set to),
    end the run FAILED with ``closed.reason`` where it is still RUNNING, and remove its folder; returns the runs
    done. What fails is logged and left for the next start: never a reason for this run not to start."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException

    from common.platform.storage import list_files, local_copy, read_text, remove_tree

    done = []
    try:
        runs = sorted({info.path.rsplit("/", 2)[-2] for info in list_files(folder(root))
                       if info.base_name == RUN_FILE})
    except OSError as exc:
        log.warning("the run outbox under %s could not be read: %s", root, exc)
        return done
    client = MlflowClient()
    for run_id in runs:
        uri = f"{folder(root)}/{run_id}"
        try:
            kept = json.loads(read_text(f"{uri}/{RUN_FILE}"))
            at_ms = int(kept["at_ms"])
            client.log_batch(run_id, metrics=[Metric(k, float(v), at_ms, 0) for k, v in kept["metrics"].items()],
                             params=[Param(k, v) for k, v in kept["params"].items()],
                             tags=[RunTag(k, v) for k, v in kept["tags"].items()])
            for artifact in kept["artifacts"]:
                slot = f"{uri}/artifacts/{artifact['slot']}"
                local = local_copy(slot)
                try:
                    client.log_artifacts(run_id, local, artifact["artifact_path"])
                finally:
                    if local != slot.removeprefix("file://"):
                        shutil.rmtree(local, ignore_errors=True)
            status = client.get_run(run_id).info.status
            client.set_tag(run_id, "closed.reason" if status == "RUNNING" else "outbox.logged", REASON)
            if status == "RUNNING":
                client.set_terminated(run_id, "FAILED")
        except (MlflowException, OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("the outbox of MLflow run %s (%s) was not logged; left for the next start: %s", run_id, uri,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            continue
        remove_tree(uri)
        log.warning("MLflow run %s: %s logged from the run outbox; the run ended FAILED", run_id,
                    ", ".join(f"{len(kept[k])} {k}" for k in ("metrics", "params", "tags", "artifacts")))
        done.append(run_id)
    return done
