"""What a run could not log because the tracking server stopped answering mid-run: kept; a later start logs it.

A job's MLflow calls come after the work they describe (a table is committed, then its version tagged; results are
written, then their metrics logged), and a rerun of the same config returns early on what was committed without
computing it again. So when a call gets no answer (after the client's own retries: ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
and ``MLFLOW_HTTP_REQUEST_TIMEOUT``), the run does not stop there, nor ask the server again for every later call (a
wait per call would grow with the work left): its :class:`~common.platform.tracking.TrackedRun` goes offline and each
later metric (with its step and time), param, tag and artifact is kept in ``<lakehouse.root>/_tracking/outbox/<run
id>/`` (``run.json`` and the artifacts' files). The job finishes its work, skips its ship (the ledger keeps it for
the next run) and exits 8 naming what was kept.

A later start of a job of the same config and tracking server (its tracker's setup, once the server answers) logs a
kept run whose process has ended (it marked it so, or it is gone from this host: a kill) to the run it belongs to,
ends that run FAILED (KILLED for a kill) with ``closed.reason`` and removes its folder: one start at a time (a claim
on the folder), never a run still going. A kept run that cannot be logged (the run deleted meanwhile, the server
failing again, an artifact missing) stays for the start after, and is said in the log.
"""
from __future__ import annotations

import json
import logging
import os
import re
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


def server(tracking_uri: str) -> str:
    """``tracking_uri`` without a user or password: what a kept run names its server by."""
    return re.sub(r"://[^/@\s]*@", "://", tracking_uri)


class Outbox:
    """What one run keeps while its tracking server does not answer; nothing is written until something is kept."""

    def __init__(self, root: str, run_id: str, tracking_uri: str):
        from common.platform.run_status import process_tags

        self.run_id, self.uri = run_id, f"{folder(root)}/{run_id}"
        self.kept: dict[str, Any] = {"run_id": run_id, "server": server(tracking_uri), "process": process_tags(),
                                     "ended": False, "metrics": [], "params": {}, "tags": {}, "artifacts": []}

    @property
    def used(self) -> bool:
        return any(self.kept[k] for k in ("metrics", "params", "tags", "artifacts"))

    def add_metrics(self, values: Mapping[str, float], step: Optional[int]) -> None:
        """Keep ``values`` as logged now at ``step`` (0 when None)."""
        now = int(time.time() * 1000)
        self.kept["metrics"] += [[k, float(v), int(step or 0), now] for k, v in values.items()]
        self._save()

    def add(self, kind: str, values: Mapping[str, Any]) -> None:
        """Keep ``values`` (``kind``: params or tags)."""
        self.kept[kind].update({k: str(v) for k, v in values.items()})
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

        slot = str(len(self.kept["artifacts"]))
        write_text(f"{self.uri}/artifacts/{slot}/{os.path.basename(artifact_file)}", text)
        self.kept["artifacts"].append({"slot": slot, "artifact_path": os.path.dirname(artifact_file) or None,
                                       "files": 1})
        self._save()

    def _add_files(self, files: list[tuple[str, str]], artifact_path: Optional[str]) -> None:
        from common.platform.storage import put_file

        slot = str(len(self.kept["artifacts"]))
        for local, relative in files:
            put_file(local, f"{self.uri}/artifacts/{slot}/{relative}")
        self.kept["artifacts"].append({"slot": slot, "artifact_path": artifact_path, "files": len(files)})
        self._save()

    def end(self) -> None:
        """The run is over: a later start may log what it kept."""
        if self.used:
            self.kept["ended"] = True
            self._save()

    def _save(self) -> None:
        from common.platform.storage import write_text

        write_text(f"{self.uri}/{RUN_FILE}", json.dumps(self.kept, sort_keys=True))

    def summary(self) -> str:
        """What is kept, in words (``3 metrics, 2 tags, 1 artifact``), and where."""
        counts = [(len(self.kept[k]), k) for k in ("metrics", "params", "tags", "artifacts")]
        said = ", ".join(f"{n} {k if n != 1 else k.rstrip('s')}" for n, k in counts if n) or "nothing"
        return f"{said} kept in {self.uri}"


def deliver(root: str, tracking_uri: str) -> list[str]:
    """Log each kept run of the outbox of the lakehouse at ``root`` that belongs to ``tracking_uri``'s server and
    whose process has ended to its run (MLflow's client is set to that server), end the run FAILED (KILLED where its
    process was killed) where it is still RUNNING, and remove its folder; returns the runs done. What fails is logged
    and left for the next start: never a reason for this run not to start."""
    from common.platform.commit_lease import claim
    from common.platform.storage import list_files

    try:
        base = folder(root)
        runs = sorted({info.path.rsplit("/", 2)[-2] for info in list_files(base)
                       if info.base_name == RUN_FILE and info.path.rsplit("/", 3)[-3] == "outbox"})
    except OSError as exc:
        log.warning("the run outbox under %s could not be read: %s", root, exc)
        return []
    done = []
    for run_id in runs:
        uri = f"{base}/{run_id}"
        with claim(uri, "run outbox") as mine:
            if mine and _deliver_one(uri, run_id, server(tracking_uri)):
                done.append(run_id)
    return done


def _deliver_one(uri: str, run_id: str, this_server: str) -> bool:
    """Log the kept run in ``uri`` (see :func:`deliver`); returns whether it was logged and removed."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException

    from common.platform.run_status import process_gone
    from common.platform.storage import list_files, local_copy, read_text, remove_tree

    try:
        kept = json.loads(read_text(f"{uri}/{RUN_FILE}"))
        if kept.get("server") != this_server:
            return False  # another tracking server's run: its own config's start logs it
        killed = not kept.get("ended") and process_gone(kept.get("process") or {})
        if not kept.get("ended") and not killed:
            return False  # still going (or on a host that cannot be checked from here): never logged under it
        client = MlflowClient()
        client.log_batch(run_id, metrics=[Metric(k, v, ts, step) for k, v, step, ts in kept["metrics"]],
                         params=[Param(k, v) for k, v in kept["params"].items()],
                         tags=[RunTag(k, v) for k, v in kept["tags"].items()])
        for artifact in kept["artifacts"]:
            slot = f"{uri}/artifacts/{artifact['slot']}"
            if len(list_files(slot)) != artifact["files"]:
                raise OSError(f"artifact folder {slot} holds {len(list_files(slot))} of its {artifact['files']} files")
            local = local_copy(slot)
            try:
                client.log_artifacts(run_id, local, artifact["artifact_path"])
            finally:
                if local != slot.removeprefix("file://"):
                    shutil.rmtree(local, ignore_errors=True)
        status = client.get_run(run_id).info.status
        client.set_tag(run_id, "closed.reason" if status == "RUNNING" else "outbox.logged", REASON)
        if status == "RUNNING":
            client.set_terminated(run_id, "KILLED" if killed else "FAILED")
    except (MlflowException, OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("the outbox of MLflow run %s (%s) was not logged; left for the next start: %s", run_id, uri,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return False
    remove_tree(uri)
    log.warning("MLflow run %s: %s logged from the run outbox; the run ended %s", run_id,
                ", ".join(f"{len(kept[k])} {k}" for k in ("metrics", "params", "tags", "artifacts")),
                "KILLED" if killed else "FAILED")
    return True
