"""A run stopped by its scheduler (SIGTERM: a timeout, a cluster shutting down) or its user (SIGINT: Ctrl-C).

:func:`handled` wraps a run of the CLI and of ``spark-submit jobs/<family>/<module>.py``. The first signal raises
:class:`Terminated` in the main thread wherever it waits (a py4j call, a Ray ``get``, a Ray Data stage): no new work
starts, each MLflow run it leaves ends KILLED (:mod:`common.platform.tracking.tracker`), a commit lease or lock is
released by its own ``finally``, Spark's jobs are cancelled and Ray's tasks end with the runtime the context stops. A
run still alive ``grace_s`` after the signal, or given a second signal, exits at once. Either way the exit code is
``128 + signal`` (143 for SIGTERM, 130 for SIGINT), what shells and schedulers read as "terminated"."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from typing import Iterator

from common.platform.process.termination import Terminated, cause  # noqa: F401  (the suite imports both from here)

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _exit_now(signum: int, why: str) -> None:
    """Leave at once (nothing can hang it: not a full stderr pipe, not a lock the main thread holds): one line
    written straight to file descriptor 2, then ``os._exit``."""
    line = f"augment: terminated: {signal.Signals(signum).name}; {why}\n".encode()
    # From a thread of its own, given a second at most: a full stderr pipe blocks that thread, never the exit (and
    # stderr, shared with the parent and the JVM, keeps its blocking mode).
    writer = threading.Thread(target=lambda: os.write(2, line), daemon=True)
    writer.start()
    writer.join(1.0)
    os._exit(128 + signum)


# The handler of the innermost handled() block, for reclaim().
_active: list = []


@contextlib.contextmanager
def handled(grace_s: float) -> Iterator[None]:
    """Within: SIGTERM and SIGINT end the run as the module says, the cleanup bounded by ``grace_s`` seconds;
    the handlers before are put back after. Outside the main thread (a notebook's worker thread) signals cannot be
    handled by Python and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def on_signal(signum: int, frame) -> None:
        from common.platform.errors import watchdog_pending

        if signum == signal.SIGINT and watchdog_pending():
            # Ray on Spark's node watch stops the main thread through a simulated SIGINT (errors.interrupt_main):
            # its error, not a user's Ctrl-C.
            raise KeyboardInterrupt
        if received:
            _exit_now(signum, "second signal: exited without cleanup")
        received.append(signum)
        # Straight to stderr, not through logging: a handler may run inside a logging call (a reentrant write).
        os.write(
            2,
            f"augment: {signal.Signals(signum).name} received: stopping (cleanup bounded by {grace_s:g} s; a "
            "second signal exits at once)\n".encode(),
        )
        deadline.append(
            threading.Timer(
                grace_s,
                _exit_now,
                (signum, f"cleanup passed {grace_s:g} s (tracking.shutdown_grace_s): exited without cleanup"),
            )
        )
        deadline[0].daemon = True
        deadline[0].start()
        _stop_spark_jobs()
        raise Terminated(signum)

    deadline: list[threading.Timer] = []
    previous = {signum: signal.signal(signum, on_signal) for signum in SIGNALS}
    _active.append(on_signal)
    try:
        yield
    finally:
        _active.pop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if deadline:  # the cleanup is done: a notebook or a test process that goes on is not cut short later
            deadline[0].cancel()


def reclaim() -> None:
    """Put the innermost :func:`handled` block's handler back on SIGTERM and SIGINT after an engine's start took them:
    a SparkContext's sets SIGINT's (it cancels Spark's jobs and raises a plain KeyboardInterrupt), Ray's driver
    SIGTERM's (``sys.exit(15)``: a run ended FAILED with an undocumented code). Nothing outside a block or the
    main thread."""
    if _active and threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            signal.signal(signum, _active[-1])


def handle_taken(signum: int) -> None:
    """Handle ``signum`` now as the innermost :func:`handled` block would have (its line, its grace, ``Terminated``
    raised here), where an engine's own handler took it while the engine started: Ray's driver sets one first thing
    in ``ray.init`` and exits 15 on SIGTERM. The suite's handlers are put back first. Outside a block (or the main
    thread) nothing happens: the caller raises what it had."""
    if _active and threading.current_thread() is threading.main_thread():
        reclaim()
        _active[-1](signum, None)


def _stop_spark_jobs() -> None:
    """Cancel the Spark jobs of this process's SparkContext, if it has one. The signal may have cut a py4j call of
    the main thread short, its answer still to come on that thread's connection: the connection is dropped first
    (the next call opens another), or every later call would read the answer meant for the one before. Best
    effort: a JVM already gone has nothing to cancel."""
    if "pyspark" not in sys.modules:
        return
    try:
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if context is None:
            return
        client = context._gateway._gateway_client
        connection = client.get_thread_connection() if hasattr(client, "get_thread_connection") else None
        if connection is not None:
            connection.close(True)
        context.cancelAllJobs()
    except Exception as exc:  # the JVM is gone or going: nothing runs there any more
        log.info("no Spark jobs cancelled: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
