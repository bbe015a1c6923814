"""MLflow runs under faults: the tracking server's start check, a run ended KILLED on a signal, and runs a dead process
left RUNNING closed by a later start.

A run ends FINISHED, FAILED (an error) or KILLED (a signal, :mod:`common.platform.process.signals`). A run whose
process died without ending it (SIGKILL, a lost machine, the server down at its end) is closed KILLED by the next
tracker of the experiment on that host (:func:`close_dead_runs`), told apart from a live one by the process tags it
carries (:func:`~common.platform.process.identity.process_tags`). An MLflow server that does not answer at the job
context's start is :class:`~common.platform.errors.TrackingUnreachable` within ``tracking.start_timeout_s``
(:func:`check_server`).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

from common.platform.errors import TrackingUnreachable, without_credentials
from common.platform.process.identity import dead

log = logging.getLogger(__name__)


def close_dead_runs(experiment_id: str, limit: int = 200) -> list[str]:
    """Mark KILLED each RUNNING run of ``experiment_id`` (at most ``limit``) started on this host by a process that
    is gone (SIGKILL, an out-of-memory kill, a crash, a signal whose KILLED mark found the server down), tagging
    ``closed.reason``; returns their ids. Runs of other hosts are left: a process elsewhere cannot be checked from
    here (a cluster's driver host runs its own next start). A server that fails this is logged, never a reason
    to stop the run starting."""
    import socket

    import mlflow
    from mlflow.exceptions import MlflowException

    host = socket.gethostname()
    closed = []
    try:
        runs = mlflow.MlflowClient().search_runs(
            [experiment_id],
            filter_string=f"attributes.status = 'RUNNING' and tags.`process.host` = '{host}'",
            max_results=limit,
        )
        for run in runs:
            if not dead(run.data.tags) or "outbox.kept_as" in run.data.tags:  # a kept run: its deliverer ends it
                continue
            reason = (
                f"its process {run.data.tags['process.pid']} on {host} ended without closing it; closed by a "
                "later run's start"
            )
            mlflow.MlflowClient().set_tag(run.info.run_id, "closed.reason", reason)
            mlflow.MlflowClient().set_terminated(run.info.run_id, "KILLED")
            log.warning(
                "MLflow run %s (%s) left RUNNING: %s; marked KILLED", run.info.run_id, run.info.run_name, reason
            )
            closed.append(run.info.run_id)
    except (MlflowException, OSError) as exc:
        log.warning(
            "runs left RUNNING by dead processes not closed: %s",
            without_credentials(str(exc).splitlines()[0] if str(exc) else type(exc).__name__),
        )
    return closed


def end_killed(run_id: str, reason: str) -> None:
    """End the run ``run_id`` KILLED with ``closed.reason``, asking the server once with a short timeout (a signalled
    run has its grace to spend, not the client's minutes of retries); MLflow's stack of active runs loses it either
    way, so its context ends nothing twice. A server that does not answer leaves the run RUNNING for the next start
    on this host to close (:func:`close_dead_runs`)."""
    import mlflow

    with quick_mlflow(5.0):
        try:
            client = mlflow.MlflowClient()
            client.set_tag(run_id, "closed.reason", reason)
            active = mlflow.active_run()
            if active is not None and active.info.run_id == run_id:
                mlflow.end_run("KILLED")  # pops the run before it asks the server
            else:
                client.set_terminated(run_id, "KILLED")
        except Exception as exc:  # the server is down: the next start on this host closes it
            log.warning(
                "MLflow run %s not marked KILLED (%s); the next run's start on this host closes it",
                run_id,
                without_credentials(str(exc).splitlines()[0] if str(exc) else type(exc).__name__),
            )
            active = mlflow.active_run()
            if active is not None and active.info.run_id == run_id:
                with contextlib.suppress(Exception):
                    mlflow.end_run("KILLED")


@contextlib.contextmanager
def quick_mlflow(timeout_s: float) -> Iterator[None]:
    """MLflow's client without its retries, each request within ``timeout_s``, for the block (it reads both at each
    request): a server that is down is found at once, not after the client's minutes of backoff per call."""
    import os

    quick = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": f"{timeout_s:g}"}
    before = {name: os.environ.get(name) for name in quick}
    os.environ.update(quick)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def check_server(uri: str, timeout_s: float) -> None:
    """For an ``http(s)`` tracking URI: raise :class:`TrackingUnreachable` unless ``<uri>/health`` answers 200
    within ``timeout_s`` (one request, no retry: a down server is found in seconds, not after the MLflow client's
    minutes of backoff). The request is MLflow's own, with the credentials and TLS settings the client would use
    (a token, basic auth, a private CA). Other URIs (SQLite, ``databricks``, a file store) are not checked here."""
    from mlflow.tracking._tracking_service.utils import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    if not uri.startswith(("http://", "https://")):
        return
    try:
        answer = http_request(
            get_default_host_creds(uri), "/health", "GET", max_retries=0, timeout=timeout_s, raise_on_status=False
        )
        if answer.status_code == 200:
            return
        problem = f"answered HTTP {answer.status_code}"
    except Exception as exc:  # refused, timed out, no such host, a malformed URI: the server cannot be asked
        problem = f"did not answer within {timeout_s:g} s ({type(exc).__name__})"
    raise TrackingUnreachable(
        f"the MLflow tracking server {_shown(uri)} {problem} to GET /health (tracking.uri; tracking.start_timeout_s)"
    )


def _shown(uri: str) -> str:
    """``uri`` without the user and password it may carry (never in a line or a log), by plain string cutting: a
    malformed URI must not make the error itself fail."""
    scheme, _, rest = uri.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"
