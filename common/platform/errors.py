"""The errors a job reports as one line, without a traceback: a bad config (:class:`ConfigError`, exit code
2), a bad input (:class:`InputError`, exit code 3) and an object store that does not answer
(:class:`~common.platform.storage.StorageUnreachable`, exit code 4), a cluster that cannot run the job as it
is sized (:class:`ClusterError`, exit code 5) and a model server that does not answer (:class:`EndpointUnreachable`,
exit code 6), a tracking server that does not answer (:class:`TrackingUnreachable`, exit code 8) and a full disk
(:class:`DiskFull`, exit code 9), raised as such or found behind what a library raised (:func:`user_error`).
Anything else is a bug and keeps its traceback.

A watchdog thread (Ray on Spark's node watch) ends a job blocked in the main thread with :func:`interrupt_main`: the
main thread gets a ``KeyboardInterrupt`` wherever it waits (a Ray ``get``, a Ray Data stage), and
:func:`interruption` turns it back into the watchdog's error where the job's run closes."""

from __future__ import annotations

import _thread
import re
import threading
from typing import Optional

from common.platform.config_loader import ConfigError
from common.platform.storage import StorageBusy, StorageUnreachable


class InputError(ValueError):
    """An input cannot be used as it is; the message names the file or table, the column and, where there
    is one, the row. Domain packages subclass it for their own input checks."""


class ClusterError(RuntimeError):
    """The cluster cannot run the job as it is sized or loaded (Ray worker nodes that never came up); the message
    names what the cluster has and the keys to change."""


class EndpointUnreachable(RuntimeError):
    """A model server the config names does not answer, or does not serve the configured model; the message names
    the URL (never a key)."""


class TrackingUnreachable(RuntimeError):
    """The MLflow tracking server does not answer (at the start check, or mid-run: an MLflow call whose HTTP request
    failed after the client's own retries); the message names the URI and what was asked."""


class DiskFull(OSError):
    """A local disk (or quota) ran out of space while the run wrote a file: retryable once space is freed; never
    a reason to record a model or an engine as broken."""


class StageBusy(EndpointUnreachable):
    """Another run of the same generation stage is sending to its model server (it holds the stage's lease); this
    one sends nothing. Exit code 6, as an outage: run it again once the other has ended."""


# (error class, exit code, what the CLI calls it), most specific first. An unreachable object store is the
# operator's to fix (an endpoint, a credential, an outage), not a bug: one line naming the path and the endpoint.
USER_ERRORS = (
    (ConfigError, 2, "config error"),
    (InputError, 3, "input error"),
    (StorageUnreachable, 4, "storage unreachable"),
    (StorageBusy, 4, "storage busy"),
    (ClusterError, 5, "cluster error"),
    (StageBusy, 6, "endpoint busy"),
    (EndpointUnreachable, 6, "endpoint unreachable"),
    (TrackingUnreachable, 8, "tracking unreachable"),
    (DiskFull, 9, "disk full"),
)


def _causes(exc: Optional[BaseException]):
    """``exc`` and the errors it was raised from, outermost first (at most 20): Ray's ``RayTaskError`` keeps the
    worker's error as ``cause``, Python's ``raise ... from`` as ``__cause__``. Not ``__context__``: a bug raised while
    handling a user error is a bug, not that user error."""
    seen = 0
    while exc is not None and seen < 20:
        yield exc
        cause = getattr(exc, "cause", None)
        exc = cause if isinstance(cause, BaseException) else exc.__cause__
        seen += 1


def user_error(exc: Optional[BaseException]) -> Optional[BaseException]:
    """The user error (:data:`USER_ERRORS`) ``exc`` is or wraps, the innermost, or None: a Ray worker's error reaches
    the driver as ``RayTaskError`` (an instance of the worker's error's class too, its message Ray's traceback) or Ray
    Data's ``UserCodeException``, with the worker's error as its cause; the CLI reports that error, with its code,
    wherever it was raised (an actor, a task, Ray on Spark)."""
    kinds = tuple(cls for cls, _, _ in USER_ERRORS)
    found = [e for e in map(_translated, _causes(exc)) if isinstance(e, kinds)]
    if not found:
        return None
    inner = found[-1]
    # Ray Data appends its retry advice to a batch's error ("Failed to apply UDF transform after 1/1 attempts ..."):
    # the user's line is the error's own.
    text = str(inner)
    if RAY_DATA_ADVICE in text and len(inner.args) == 1:
        inner.args = (text.split(RAY_DATA_ADVICE, 1)[0].rstrip(),)
    return inner


RAY_DATA_ADVICE = "\nFailed to apply UDF transform"


def _line_with(text: str, markers: tuple) -> str:
    """The first line of ``text`` holding one of ``markers`` (a JVM error's message, not its stack); a delta-rs error's
    chain of causes (lines marked with an arrow) joined into that line first, so that it holds the request and the
    status (a 503's or a 403's), without the store's XML body."""
    if "\u21b3" in text:
        parts = [re.sub(r"\x1b\[[0-9;]*m", "", line).replace("\u21b3", "").strip() for line in text.splitlines()]
        text = ": ".join(part for part in parts if part and not part.startswith("<"))
    return next((line.strip() for line in text.splitlines() if any(m in line for m in markers)), text[:300])


# What a full disk says where no errno reaches Python (a JVM's IOException inside a Py4JJavaError's text).
_NO_SPACE = ("No space left on device", "Disk quota exceeded")
# What an object store that failed mid-run says: Hadoop S3A's classes (a 5xx, a throttle, a request that found no
# server) in a Py4JJavaError's text; pyarrow's and delta-rs's S3 errors (plain OSErrors) in theirs.
# Only what a retry can cure: a refused credential or a missing permission (403) is no outage and keeps its traceback.
_STORE_JVM = (
    "AWSStatus500Exception",
    "AWSServiceThrottledException",
    "AWSServiceUnavailableException",
    "AWSClientIOException",
    "Unable to execute HTTP request",
    "Status Code: 503",
    "Status Code: 500",
)
_STORE_PY = (
    "HTTP status 5",
    "SLOW_DOWN",
    "SERVICE_UNAVAILABLE",
    "INTERNAL_FAILURE",
    "NETWORK_CONNECTION",
    "curlCode",
    "Generic S3 error",
)
_STORE_REFUSED = (
    "ACCESS_DENIED",
    "AccessDenied",
    "HTTP status 403",
    "HTTP status 401",
    "Status Code: 403",
    "Status Code: 401",
    "status code: 403",
    "status code: 401",
    "Forbidden",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
)


def _translated(exc: BaseException) -> BaseException:
    """``exc``, or the user error it is under another library's name: an OSError of ENOSPC/EDQUOT (or a JVM error
    saying so) is :class:`DiskFull`; an object store's failure mid-run (a 5xx, a throttle, no server) is
    :class:`StorageUnreachable`; an MLflow error whose HTTP request failed (the server down or not answering, after
    the client's retries) is :class:`TrackingUnreachable`."""
    import errno

    if isinstance(exc, (DiskFull, StorageUnreachable)):
        return exc
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(exc.errno, f"{exc.strerror}: {exc.filename or 'a local file'}")
    text = str(exc)
    jvm = type(exc).__name__ == "Py4JJavaError"
    if jvm and any(marker in text for marker in _NO_SPACE):
        return DiskFull(errno.ENOSPC, _line_with(text, _NO_SPACE))
    python_store = isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError)  # a missing file is no outage
    refused = any(m in _line_with(text, _STORE_JVM + _STORE_PY) for m in _STORE_REFUSED)
    if not refused and (
        (jvm and any(m in text for m in _STORE_JVM)) or (python_store and any(m in text for m in _STORE_PY))
    ):
        return StorageUnreachable(f"the object store failed mid-run: {_line_with(text, _STORE_JVM + _STORE_PY)}")
    # MLflow's client: "API request to URL failed with exception ..." (no answer, after its retries) or "... failed
    # with error code 503 != 200": a server down or failing, not a refused token (4xx), whose body is not printed.
    if (
        type(exc).__name__ == "MlflowException"
        and text.startswith("API request to")
        and ("failed with exception" in text or re.search(r"error code 5\d\d != 200", text))
    ):
        return TrackingUnreachable(f"MLflow: {_mlflow_line(text)}")
    return exc


def without_credentials(text: str) -> str:
    """``text`` with each URI's user and password left out (``http://user:secret@host`` -> ``http://host``): what a
    line about a server may say of its address."""
    return re.sub(r"://[^/\s]*@", "://", text)  # the authority only: an "@" in a path is no user


def _mlflow_line(text: str) -> str:
    """An unanswered MLflow request in a line: the URL (without a user or password) and the innermost reason
    (urllib3's pool and retry wrappers and the answer's body left out)."""
    text = without_credentials(text.split(". Response body", 1)[0])
    found = re.match(r"API request to (\S+) failed with exception", text)
    reason = re.search(r"(\[Errno -?\d+\] [^\"')]+|Read timed out|timed out)", text)
    return f"API request to {found.group(1)} failed: {reason.group(1)}" if found and reason else text[:300]


class _RetriedByRayMeta(type):
    def __instancecheck__(cls, exc: object) -> bool:
        return isinstance(exc, Exception) and not _is_outage(exc)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, Exception) and not issubclass(sub, _NOT_RETRIED)


# What another attempt of the same task cannot cure, or would only wait for again: an endpoint's outage, a full disk,
# a tracking server that does not answer, a process that stalled (ClusterError).
_NOT_RETRIED = (EndpointUnreachable, DiskFull, TrackingUnreachable, ClusterError)


def _is_outage(exc: BaseException) -> bool:
    return any(isinstance(_translated(e), _NOT_RETRIED) for e in _causes(exc))


class RetriedByRay(Exception, metaclass=_RetriedByRayMeta):
    """The application errors Ray retries a task or actor task for (``retry_exceptions=[RetriedByRay]``, set from
    ``ray.retry_exceptions``): every exception but :data:`_NOT_RETRIED`'s, however wrapped (a full disk as a plain
    ENOSPC too). Sending an outage's batch again would only wait for the same outage, and repeat it per retry."""


# The exit code of a run whose work is done but whose ship is not: a model version the gate could not judge because the
# registry erred (its alias kept where it was). Retryable once the registry answers.
SHIP_INCOMPLETE = 7

# Every exit code of `augment` and `spark-submit jobs/<family>/<module>.py`: (code, what ended the run, whether a
# scheduler should run it again). `augment --help` prints it and the reliability page holds it (a test keeps them
# alike).
EXIT_CODES = (
    (0, "success", "-"),
    (1, "a bug: the traceback is in the log", "no: report it"),
    (2, "config error: the line names the key", "no: fix the config"),
    (3, "input error: the line names the file, column and row", "no: fix the input"),
    (
        4,
        "storage unreachable or busy: the object store did not answer, or another run held a table's commit "
        "lock past the wait",
        "yes",
    ),
    (5, "cluster error: the cluster cannot run the job as sized", "yes, once it has the capacity"),
    (
        6,
        "endpoint unreachable or busy: the model server failed or another run holds its stage",
        "yes, after a wait (answers already paid for are kept)",
    ),
    (
        SHIP_INCOMPLETE,
        "ship incomplete: tables and run complete, a model not registered or gated",
        "yes: the rerun finishes the ship without training",
    ),
    (
        8,
        "tracking unreachable: the MLflow server did not answer (at the start; or mid-run: the run "
        "finishes its work without it, keeps what it could not log in the run outbox, and the next start "
        "logs that to the run; the rerun skips what was committed and ships what is left)",
        "yes",
    ),
    (
        9,
        "disk full: a local disk or quota ran out while writing (the line names the file)",
        "yes, once space is freed",
    ),
    (130, "interrupted (SIGINT): open MLflow runs marked KILLED", "yes"),
    (
        143,
        "terminated (SIGTERM), within tracking.shutdown_grace_s: open MLflow runs marked KILLED, Spark "
        "jobs cancelled, leases released",
        "yes: the rerun reuses what was committed and kept",
    ),
)


def exit_code_table() -> str:
    """:data:`EXIT_CODES` as plain text lines (``augment --help``'s epilog)."""
    return "exit codes:\n" + "\n".join(f"  {code}  {what} (retry: {retry})" for code, what, retry in EXIT_CODES)


_pending: list[BaseException] = []
_pending_lock = threading.Lock()


def interrupt_main(error: BaseException) -> None:
    """From a watchdog thread: make the main thread stop what it waits for and raise ``error`` instead (through a
    ``KeyboardInterrupt`` that :func:`interruption` turns into ``error``)."""
    with _pending_lock:
        _pending.append(error)
    _thread.interrupt_main()


def watchdog_pending() -> bool:
    """Whether a watchdog's :func:`interrupt_main` waits to be taken (the SIGINT on its way is the watchdog's)."""
    with _pending_lock:
        return bool(_pending)


def interruption() -> Optional[BaseException]:
    """For a ``KeyboardInterrupt`` just caught: the error a watchdog interrupted the main thread with
    (:func:`interrupt_main`), taken once, or None when it was a user's Ctrl-C."""
    with _pending_lock:
        return _pending.pop() if _pending else None


def report(exc: BaseException) -> int:
    """Print a user error (:data:`USER_ERRORS`) as one line on stderr (``augment: <kind>: <message>``); returns its
    exit code."""
    import sys

    code, kind = next((code, kind) for cls, code, kind in USER_ERRORS if isinstance(exc, cls))
    print(f"augment: {kind}: {one_line(exc)}", file=sys.stderr)
    return code


def one_line(text: object, limit: int = 600) -> str:
    """``text`` (or an exception's message) on one line, whitespace runs collapsed, at most ``limit``
    characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
