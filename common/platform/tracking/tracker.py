"""MLflow tracking: every job run is an MLflow run; a pipeline run is a parent with one child per job.

A run logs the flattened config as params, each input table with its Delta version (an MLflow dataset
input plus ``input.<name>.version`` tags), each output table version, metrics and artifacts, and the code it
ran (:func:`code_tags`) and the process that ran it (:func:`process_tags`).

A run ends FINISHED, FAILED (an error) or KILLED (a signal, :mod:`common.platform.process.signals`); one whose process
died without ending it is closed by a later start (:mod:`common.platform.tracking.status`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional

from common.platform.base_config import BaseConfig
from common.platform.errors import TrackingUnreachable, interruption, user_error
from common.platform.process.identity import process_tags
from common.platform.process.signals import Terminated, cause
from common.platform.tracking.outbox import Outbox, deliver
from common.platform.tracking.records import code_tags, delta_dataset, log_dataset  # noqa: F401  (also imported from here)
from common.platform.tracking.status import close_dead_runs, end_killed, quick_mlflow

log = logging.getLogger(__name__)

_MAX_PARAM_CHARS = 6000  # MLflow's limit on one param value


@dataclass
class TrackedRun:
    """Handle on the active MLflow run, with the suite's logging conventions. Once a call gets no answer from the
    tracking server (:class:`~common.platform.errors.TrackingUnreachable`), the run is ``offline``: that call and
    every later one go to its ``outbox`` (:mod:`common.platform.tracking.outbox`) instead of the server."""

    run_id: str
    name: str
    outbox: Optional[Outbox] = None
    offline: Optional[str] = None  # the first unanswered call's error, in one line
    silent: Optional[list] = None  # its tracker's: where it says the server went silent, for the runs opened next

    def _call(self, call: Callable[[], Any], keep: Callable[[Outbox], None]) -> None:
        """``call()`` against the server, or ``keep(outbox)`` once the server has not answered."""
        if self.offline is None:
            try:
                call()
                return
            except Exception as exc:
                found = user_error(exc)
                if self.outbox is None or not isinstance(found, TrackingUnreachable):
                    raise
                self.offline = str(found)
                if self.silent is not None:
                    self.silent.append(self.offline)
                log.warning(
                    "MLflow run %s is offline from here (%s): what it logs is kept in %s",
                    self.run_id,
                    self.offline,
                    self.outbox.uri,
                )
        keep(self.outbox)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params (values stringified, truncated to MLflow's limit), 100 per batch."""
        import mlflow

        items = [(k, _param_value(v)) for k, v in params.items()]
        for start in range(0, len(items), 100):
            batch = dict(items[start : start + 100])
            self._call(lambda b=batch: mlflow.log_params(b), lambda box, b=batch: box.add("params", b))

    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        """Log numeric metrics; None values are skipped."""
        import mlflow

        values = {k: float(v) for k, v in metrics.items() if v is not None}
        self._call(lambda: mlflow.log_metrics(values, step=step), lambda box: box.add_metrics(values, step))

    def log_input_table(self, name: str, version: str | int, location: str, context: str = "input") -> None:
        """Record an input (or output) table version as an MLflow dataset and as tags (only the tags while
        offline)."""
        tag_prefix = "input" if context == "input" else "output"
        self.set_tags({f"{tag_prefix}.{name}.version": str(version), f"{tag_prefix}.{name}.location": location})
        if isinstance(version, int) or str(version).isdigit():
            self._call(
                lambda: log_dataset(self.run_id, delta_dataset(name, int(version), location), context),
                lambda box: None,
            )

    def log_output_table(self, name: str, version: int, location: str, skipped: bool = False) -> None:
        """Record a table version this run wrote (or found already written, when ``skipped``)."""
        self.log_input_table(name, version, location, context="output")
        if skipped:
            self.set_tags({f"output.{name}.skipped": "true"})

    def log_dict(self, data: Any, artifact_file: str) -> None:
        """Store a JSON/YAML artifact."""
        import mlflow

        self._call(
            lambda: mlflow.log_dict(data, artifact_file),
            lambda box: box.add_text(json.dumps(data, indent=2, default=str), artifact_file),
        )

    def log_text(self, text: str, artifact_file: str) -> None:
        """Store a text artifact (reports, tables)."""
        import mlflow

        self._call(lambda: mlflow.log_text(text, artifact_file), lambda box: box.add_text(text, artifact_file))

    def log_artifact(self, path: str, artifact_path: Optional[str] = None) -> None:
        """Store a local file as an artifact."""
        import mlflow

        self._call(lambda: mlflow.log_artifact(path, artifact_path), lambda box: box.add_file(path, artifact_path))

    def log_artifacts(self, folder: str, artifact_path: Optional[str] = None) -> None:
        """Store a local folder's files as artifacts under ``artifact_path``."""
        import mlflow

        self._call(
            lambda: mlflow.log_artifacts(folder, artifact_path), lambda box: box.add_folder(folder, artifact_path)
        )

    def log_model_folder(self, uri: str, artifact_path: str) -> None:
        """Store a model folder (a local path or an object-store URI: copied through a scratch folder, removed
        after) as artifacts under ``artifact_path/<folder name>``, as ``log_artifact`` stores a local folder."""
        import shutil

        from common.platform.storage import is_local, local_copy

        name = uri.rstrip("/").rsplit("/", 1)[-1]
        if is_local(uri):
            self.log_artifacts(uri.removeprefix("file://"), f"{artifact_path}/{name}")
            return
        folder = local_copy(uri)
        try:
            self.log_artifacts(folder, f"{artifact_path}/{name}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set string tags on the run."""
        import mlflow

        values = {k: str(v) for k, v in tags.items()}
        self._call(lambda: mlflow.set_tags(values), lambda box: box.add("tags", values))


class Tracker:
    """Opens MLflow runs against ``cfg.tracking_uri`` in ``cfg.tracking.experiment``."""

    def __init__(self, cfg: BaseConfig):
        self.cfg = cfg
        self._experiment_id: Optional[str] = None
        self.offline: list[TrackedRun] = []  # runs that ended with their server not answering, oldest first
        self._silent: list[str] = []  # why the server was last found silent by a run of this tracker
        self._born: list[TrackedRun] = []  # the runs kept whole (never opened on the server) now open, innermost last

    def setup(self) -> None:
        """Point MLflow at this config's tracking URI, creating its experiment when missing (looked up once
        per tracker); every :meth:`run` calls it first."""
        import mlflow

        # MLflow's tracking URI and experiment are process-wide: another context in this process (a notebook
        # that builds two, a test session) may have moved them since. Each run names the URI again, and
        # run() hands start_run this context's experiment id (looked up once).
        uri = self.cfg.tracking_uri
        mlflow.set_tracking_uri(uri)
        if self._experiment_id is not None:
            return
        if uri.startswith("sqlite:///"):
            from pathlib import Path

            Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        if mlflow.get_experiment_by_name(self.cfg.tracking.experiment) is None:
            artifact_location = None
            if uri.startswith("sqlite:///") and "://" not in self.cfg.lakehouse.root:
                artifact_location = f"file://{self.cfg.lakehouse.root}/mlflow-artifacts"
            from mlflow.exceptions import MlflowException

            try:
                mlflow.create_experiment(self.cfg.tracking.experiment, artifact_location=artifact_location)
            except MlflowException as exc:
                # Two processes starting at once both found no experiment: the later create is refused, and
                # the experiment the other made is the one to use.
                if mlflow.get_experiment_by_name(self.cfg.tracking.experiment) is None:
                    raise
                log.info(
                    "experiment %s was created by a concurrent run (%s)",
                    self.cfg.tracking.experiment,
                    str(exc).splitlines()[0],
                )
        self._experiment_id = mlflow.set_experiment(self.cfg.tracking.experiment).experiment_id
        deliver(self.cfg.lakehouse.root, uri)  # first: a run whose outbox it logs is ended FAILED, not judged dead
        close_dead_runs(self._experiment_id)

    @contextlib.contextmanager
    def run(
        self, name: str, tags: Optional[Mapping[str, Any]] = None, log_config: bool = True
    ) -> Iterator[TrackedRun]:
        """Open a run named ``name``; nested under the active run when there is one (pipeline children).

        Logs the flattened config as params when ``log_config``. The run ends FAILED if the body raises.
        """
        import mlflow

        self.setup()
        parent = mlflow.active_run()
        run_tags = {**code_tags(), **process_tags(), **{k: str(v) for k, v in (tags or {}).items()}}
        started, offline = None, self._silent[-1] if self._silent else None
        if self._born:  # inside a run kept whole: its children are too (their parent is not on the server yet)
            offline = offline or self._born[-1].offline
        else:
            try:
                # After a run of this process found the server silent, one quick try: not the client's minutes again.
                with quick_mlflow(2.0) if offline else contextlib.nullcontext():
                    started = mlflow.start_run(
                        run_name=name, nested=parent is not None, experiment_id=self._experiment_id, tags=run_tags
                    )
            except Exception as exc:
                if not isinstance(user_error(exc), TrackingUnreachable):
                    raise
                offline = str(user_error(exc))
                self._silent.append(offline)
            else:
                self._silent.clear()  # it answers (again): later runs ask it as usual
        if started is None:  # no server to open it on: the run is kept whole, and opened by a later start
            parent_id = self._born[-1].run_id if self._born else parent.info.run_id if parent is not None else None
            pending = {
                "experiment_id": self._experiment_id,
                "name": name,
                "tags": run_tags,
                "parent_run_id": parent_id,
                "start_ms": int(time.time() * 1000),
            }
            run_id = f"offline-{uuid.uuid4().hex}"
            handle = TrackedRun(
                run_id=run_id,
                name=name,
                offline=offline,
                silent=self._silent,
                outbox=Outbox(self.cfg.lakehouse.root, run_id, self.cfg.tracking_uri, pending),
            )
            self._born.append(handle)
            try:
                with self._ending(handle, mlflow):
                    if log_config:
                        handle.log_params(self.cfg.flat())
                    yield handle
            finally:
                self._born.pop()
            return
        with started as r:
            handle = TrackedRun(
                run_id=r.info.run_id,
                name=name,
                silent=self._silent,
                outbox=Outbox(self.cfg.lakehouse.root, r.info.run_id, self.cfg.tracking_uri),
            )
            with self._ending(handle, mlflow):
                try:
                    if log_config:
                        handle.log_params(self.cfg.flat())
                    yield handle
                except KeyboardInterrupt as exc:
                    # A watchdog's error (Ray on Spark's nodes never up) arrives as an interrupt: the run fails with
                    # it.
                    error = interruption()
                    if error is None:
                        _release(exc)
                        end_killed(handle.run_id, "interrupted (KeyboardInterrupt)")
                        raise
                    raise error from None
                except Terminated as exc:
                    _release(exc)
                    end_killed(handle.run_id, str(exc))
                    raise
                except Exception as exc:
                    signalled = cause(exc)  # a signal that reached a C extension's wait comes back as its error
                    if signalled is None:
                        if isinstance(user_error(exc), TrackingUnreachable):
                            # The server did not answer: the run's end asked once (its context would ask again
                            # with the client's retries); RUNNING where it fails, for a later start to close.
                            with quick_mlflow(2.0), contextlib.suppress(Exception):
                                mlflow.end_run("FAILED")
                        raise
                    _release(exc)
                    end_killed(handle.run_id, str(signalled))
                    raise signalled from None

    @contextlib.contextmanager
    def _ending(self, handle: TrackedRun, mlflow) -> Iterator[None]:
        """Around a run's body: where the run went offline, its outbox is closed with how the body ended (FINISHED,
        FAILED, or KILLED for a signal), the run is listed in :attr:`offline`, and its end asked of the server once
        (its context would ask again with the client's retries). A lakehouse error closing the outbox is logged,
        never the run's exit."""
        status = "FAILED"
        try:
            yield
            status = "FINISHED"
        except (Terminated, KeyboardInterrupt):
            status = "KILLED"
            raise
        except Exception as exc:
            status = "KILLED" if cause(exc) is not None else "FAILED"
            raise
        finally:
            if handle.offline:
                self.offline.append(handle)
                try:
                    handle.outbox.end(status)
                except Exception as exc:  # noqa: BLE001 - the run's own error or signal is what it exits with
                    log.warning("the outbox of run %s could not be closed: %s", handle.run_id, exc)
                active = mlflow.active_run()
                if active is not None and active.info.run_id == handle.run_id:
                    with quick_mlflow(2.0), contextlib.suppress(Exception):
                        mlflow.end_run(status)


def _release(exc: BaseException) -> None:
    """Drop what the frames ``exc`` interrupted hold (their locals; the traceback's lines stay). A signal that lands
    between a SQLite read's execute and its fetch leaves that cursor's statement open, and with it the read lock on
    the tracking database, for as long as the traceback lives: the KILLED mark then waits out SQLite's busy timeouts
    (40 s) and fails, the run left RUNNING."""
    import traceback

    traceback.clear_frames(exc.__traceback__)


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= _MAX_PARAM_CHARS else text[: _MAX_PARAM_CHARS - 3] + "..."
