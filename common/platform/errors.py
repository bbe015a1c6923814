"""The errors a job reports as one line, without a traceback: a bad config (:class:`ConfigError`, exit code
2), a bad input (:class:`InputError`, exit code 3) and an object store that does not answer
(:class:`~common.platform.storage.StorageUnreachable`, exit code 4), a cluster that cannot run the job as it
is sized (:class:`ClusterError`, exit code 5) and a model server that does not answer (:class:`EndpointUnreachable`,
exit code 6). Anything else is a bug and keeps its traceback.

A watchdog thread (Ray on Spark's node watch) ends a job blocked in the main thread with :func:`interrupt_main`: the
main thread gets a ``KeyboardInterrupt`` wherever it waits (a Ray ``get``, a Ray Data stage), and
:func:`interruption` turns it back into the watchdog's error where the job's run closes."""
from __future__ import annotations

import _thread
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


class StageBusy(EndpointUnreachable):
    """Another run of the same generation stage is sending to its model server (it holds the stage's lease); this
    one sends nothing. Exit code 6, as an outage: run it again once the other has ended."""


# (error class, exit code, what the CLI calls it), most specific first. An unreachable object store is the
# operator's to fix (an endpoint, a credential, an outage), not a bug: one line naming the path and the endpoint.
USER_ERRORS = ((ConfigError, 2, "config error"), (InputError, 3, "input error"),
               (StorageUnreachable, 4, "storage unreachable"), (StorageBusy, 4, "storage busy"),
               (ClusterError, 5, "cluster error"),
               (StageBusy, 6, "endpoint busy"), (EndpointUnreachable, 6, "endpoint unreachable"))

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
    found = [e for e in _causes(exc) if isinstance(e, kinds)]
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


class _RetriedByRayMeta(type):
    def __instancecheck__(cls, exc: object) -> bool:
        return isinstance(exc, Exception) and not _is_outage(exc)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, Exception) and not issubclass(sub, EndpointUnreachable)


def _is_outage(exc: BaseException) -> bool:
    return any(isinstance(e, EndpointUnreachable) for e in _causes(exc))


class RetriedByRay(Exception, metaclass=_RetriedByRayMeta):
    """The application errors Ray retries a task or actor task for (``retry_exceptions=[RetriedByRay]``, set from
    ``ray.retry_exceptions``): every exception but an endpoint's outage (:class:`EndpointUnreachable`, however
    wrapped). Sending an outage's batch again would only wait for the same outage, and repeat it per retry."""


# The exit code of a run whose work is done but whose ship is not: a model version the gate could not judge because the
# registry erred (its alias kept where it was). Retryable once the registry answers.
SHIP_INCOMPLETE = 7

# Every exit code of `augment` and `spark-submit jobs/<module>.py`: (code, what ended the run, whether a scheduler
# should run it again). `augment --help` prints it and the reliability page holds it (a test keeps them alike).
EXIT_CODES = ((0, "success", "-"),
              (1, "a bug: the traceback is in the log", "no: report it"),
              (2, "config error: the line names the key", "no: fix the config"),
              (3, "input error: the line names the file, column and row", "no: fix the input"),
              (4, "storage unreachable or busy: the object store did not answer, or another run held a table's commit "
                  "lock past the wait", "yes"),
              (5, "cluster error: the cluster cannot run the job as sized", "yes, once it has the capacity"),
              (6, "endpoint unreachable or busy: the model server failed or another run holds its stage",
               "yes, after a wait (answers already paid for are kept)"),
              (SHIP_INCOMPLETE, "ship incomplete: tables and run complete, a model not registered or gated",
               "yes: the rerun finishes the ship without training"))


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


def interruption() -> Optional[BaseException]:
    """For a ``KeyboardInterrupt`` just caught: the error a watchdog interrupted the main thread with
    (:func:`interrupt_main`), taken once, or None when it was a user's Ctrl-C."""
    with _pending_lock:
        return _pending.pop() if _pending else None


def one_line(text: object, limit: int = 600) -> str:
    """``text`` (or an exception's message) on one line, whitespace runs collapsed, at most ``limit``
    characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."
