"""What a run could not log because the tracking server stopped answering mid-run: kept; a later start logs it.

A job's MLflow calls come after the work they describe (a table is committed, then its version tagged; results are
written, then their metrics logged), and a rerun of the same config returns early on what was committed without
computing it again. So when a call gets no answer (after the client's own retries: ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
and ``MLFLOW_HTTP_REQUEST_TIMEOUT``), the run does not stop there, nor ask the server again for every later call (a
wait per call would grow with the work left): its :class:`~common.platform.tracking.tracker.TrackedRun` goes offline
and each later metric (with its step and time), param, tag and artifact is kept in
``<lakehouse.root>/_tracking/outbox/<run id>/`` (``run.json`` and the artifacts' files). A run the job opens after that
(a sweep's point) asks the server once, quickly, and where it still does not answer is kept whole (``offline-<id>``),
to be opened by the delivering start. The job finishes its work, skips its ship (the ledger keeps it for the next run)
and exits 8 naming what was kept.

A later start of a job of the same config and tracking server (its tracker's setup, once the server answers) logs
each kept run whose process has ended (it closed its outbox with how it ended; or its process is gone from this
host, a kill; or its outbox has not changed for :data:`STALE_S`, a process on a host or container gone for good) to
the run it belongs to, ends that run with the status it ended with (KILLED for a kill) and ``closed.reason``, and
removes its folder: one start at a time where the lakehouse can be locked (local disks, S3), never a run still going.
A kept run that cannot be logged (the server failing again, an artifact missing) stays for the start after, and is
said in the log; nothing a kept run does stops a start.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from typing import Any, Mapping, Optional

log = logging.getLogger(__name__)

REASON = (
    "the tracking server stopped answering mid-run (exit 8); what the run logged after that was kept in the run "
    "outbox and logged by a later start"
)
RUN_FILE = "run.json"
# A kept run not closed and not seen to die (its host, container or boot gone) is taken for killed after this long
# without a change to its outbox (a run still going there, idle that long, would find its outbox delivered).
STALE_S = 7 * 24 * 3600.0


def folder(root: str) -> str:
    """The outbox of the lakehouse at ``root``."""
    return f"{root.rstrip('/')}/_tracking/outbox"


def server(tracking_uri: str) -> str:
    """``tracking_uri`` without a user or password: what a kept run names its server by."""
    from common.platform.errors import without_credentials

    return without_credentials(tracking_uri)


class Outbox:
    """What one run keeps while its tracking server does not answer; nothing is written until something is kept.
    ``pending``: the run was never opened on the server (``experiment_id``, ``name``, ``tags``, ``parent_run_id``)."""

    def __init__(self, root: str, run_id: str, tracking_uri: str, pending: Optional[dict] = None):
        from common.platform.process.identity import process_tags

        self.run_id, self.uri = run_id, f"{folder(root)}/{run_id}"
        self.kept: dict[str, Any] = {
            "run_id": run_id,
            "server": server(tracking_uri),
            "process": process_tags(),
            "pending": pending,
            "ended": None,
            "metrics": [],
            "params": {},
            "tags": {},
            "artifacts": [],
        }

    @property
    def used(self) -> bool:
        return bool(self.kept["pending"]) or any(self.kept[k] for k in ("metrics", "params", "tags", "artifacts"))

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
        files = [
            (os.path.join(d, f), os.path.relpath(os.path.join(d, f), local_dir))
            for d, _, names in os.walk(local_dir)
            for f in names
        ]
        self._add_files(files, artifact_path)

    def add_text(self, text: str, artifact_file: str) -> None:
        """Keep ``text`` as the artifact ``artifact_file``."""
        from common.platform.storage import write_text

        slot = str(len(self.kept["artifacts"]))
        write_text(f"{self.uri}/artifacts/{slot}/{os.path.basename(artifact_file)}", text)
        self.kept["artifacts"].append(
            {"slot": slot, "artifact_path": os.path.dirname(artifact_file) or None, "files": 1}
        )
        self._save()

    def _add_files(self, files: list[tuple[str, str]], artifact_path: Optional[str]) -> None:
        from common.platform.storage import put_file

        if not files:  # an empty folder: nothing to log
            return
        slot = str(len(self.kept["artifacts"]))
        for local, relative in files:
            put_file(local, f"{self.uri}/artifacts/{slot}/{relative}")
        self.kept["artifacts"].append({"slot": slot, "artifact_path": artifact_path, "files": len(files)})
        self._save()

    def end(self, status: str) -> None:
        """The run is over (``status``: FINISHED, FAILED or KILLED): a later start may log what it kept."""
        if self.used:
            self.kept["ended"] = status
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
    whose process has ended (see the module) to its run (opened now where it never was; MLflow's client is set to
    that server), end the run as it ended, and remove its folder; returns the runs done. Whatever fails is logged and
    left for the next start: never a reason for this run not to start."""
    from common.platform.errors import without_credentials
    from common.platform.lakehouse.commit_lease import claim
    from common.platform.storage import list_files

    base, done = folder(root), []
    try:
        infos = {
            info.path.rsplit("/", 2)[-2]: info
            for info in list_files(base)
            if info.base_name == RUN_FILE and info.path.rsplit("/", 3)[-3] == "outbox"
        }
    except Exception as exc:  # noqa: BLE001 - an outbox that cannot be read is said, never a failed start
        log.warning("the run outbox under %s could not be read: %s", root, without_credentials(str(exc)))
        return done
    for run_id, info in sorted(infos.items(), key=lambda item: _started(f"{base}/{item[0]}")):  # parents first
        uri = f"{base}/{run_id}"
        try:
            with claim(uri, "run outbox") as mine:
                stale = info.mtime is not None and time.time() - info.mtime.timestamp() > STALE_S
                if mine and _deliver_one(uri, server(tracking_uri), stale):
                    done.append(run_id)
        except Exception as exc:  # noqa: BLE001 - left for the next start, never a failed start
            log.warning(
                "the outbox of MLflow run %s (%s) was not logged; left for the next start: %s",
                run_id,
                uri,
                without_credentials(str(exc).splitlines()[0] if str(exc) else type(exc).__name__),
            )
    return done


def _started(uri: str) -> int:
    """When the kept run in ``uri`` started (runs kept whole: their start; others: 0, first); a file that cannot be
    read sorts first, and says why when it is delivered."""
    from common.platform.storage import read_text

    try:
        return int((json.loads(read_text(f"{uri}/{RUN_FILE}")).get("pending") or {}).get("start_ms", 0))
    except Exception:  # noqa: BLE001 - said by the delivery itself
        return 0


def _opened(client, experiment_id: str, kept_as: str) -> Optional[str]:
    """The id of the run a delivery opened for the run kept whole as ``kept_as`` (its ``outbox.kept_as`` tag), or
    None: a delivery cut short after opening it reuses it, and a child finds its parent by it."""
    found = client.search_runs([experiment_id], filter_string=f"tags.`outbox.kept_as` = '{kept_as}'", max_results=1)
    return found[0].info.run_id if found else None


def _deliver_one(uri: str, this_server: str, stale: bool) -> bool:
    """Log the kept run in ``uri`` (see :func:`deliver`); returns whether it was logged and removed (False: not
    this server's, or its run still going). Raises what the server or the store raised."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from common.platform.process.identity import process_gone
    from common.platform.storage import list_files, read_text, remove_tree, write_text

    kept = json.loads(read_text(f"{uri}/{RUN_FILE}"))
    if kept.get("server") != this_server:
        return False  # another tracking server's run: its own config's start logs it
    if not kept.get("delivered"):
        killed = not kept.get("ended") and (process_gone(kept.get("process") or {}) or stale)
        if not kept.get("ended") and not killed:
            return False  # still going: never logged under it
        for artifact in kept["artifacts"]:  # every file there before anything is logged
            found = len(list_files(f"{uri}/artifacts/{artifact['slot']}"))
            if found != artifact["files"]:
                raise OSError(
                    f"artifact folder {uri}/artifacts/{artifact['slot']} holds {found} of its "
                    f"{artifact['files']} files"
                )
        client, pending = MlflowClient(), kept.get("pending")
        run_id = kept["run_id"]
        if pending:  # never opened on the server: opened now (once), under its parent, as it started
            experiment, parent = pending["experiment_id"], pending.get("parent_run_id")
            if parent and parent.startswith("offline-"):
                parent = _opened(client, experiment, parent)
                if parent is None:
                    return False  # its parent is not opened yet: after it
            tags = {
                **pending["tags"],
                "mlflow.runName": pending["name"],
                "outbox.kept_as": run_id,
                **({"mlflow.parentRunId": parent} if parent else {}),
            }
            run_id = (
                _opened(client, experiment, run_id)
                or client.create_run(
                    experiment, start_time=pending.get("start_ms"), tags=tags, run_name=pending["name"]
                ).info.run_id
            )
        client.log_batch(
            run_id,
            metrics=[Metric(k, v, ts, step) for k, v, step, ts in kept["metrics"]],
            params=[Param(k, v) for k, v in kept["params"].items()],
            tags=[RunTag(k, v) for k, v in kept["tags"].items()],
        )
        for artifact in kept["artifacts"]:
            _log_artifacts(client, run_id, f"{uri}/artifacts/{artifact['slot']}", artifact["artifact_path"])
        status = "KILLED" if killed else kept["ended"]
        if client.get_run(run_id).info.status == "RUNNING":
            client.set_tag(run_id, "closed.reason", REASON)
            client.set_terminated(run_id, status)
        else:
            client.set_tag(run_id, "outbox.logged", REASON)
        # Logged: said in the file before it goes, so a removal that fails is finished by the next start, never
        # logged twice.
        write_text(f"{uri}/{RUN_FILE}", json.dumps({**kept, "delivered": run_id}, sort_keys=True))
        log.warning(
            "MLflow run %s: %s logged from the run outbox; the run ended %s",
            run_id,
            ", ".join(f"{len(kept[k])} {k}" for k in ("metrics", "params", "tags", "artifacts")),
            status,
        )
    remove_tree(uri)
    return True


def _log_artifacts(client, run_id: str, slot: str, artifact_path: Optional[str]) -> None:
    """Log the files of the outbox folder ``slot`` to run ``run_id`` under ``artifact_path``."""
    from common.platform.storage import local_copy

    local = local_copy(slot)
    try:
        client.log_artifacts(run_id, local, artifact_path)
    finally:
        if local != slot.removeprefix("file://"):
            shutil.rmtree(local, ignore_errors=True)
