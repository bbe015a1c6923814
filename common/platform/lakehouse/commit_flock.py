"""A local table's commit lock: an exclusive ``flock`` on ``.<table>.commit-lock`` beside the table folder, held
around Spark's Delta commits to a local lakehouse (on S3 a lease object does:
:mod:`common.platform.lakehouse.commit_lease`).

A run ended by a signal keeps its lock until the process exits (its JVM may still be committing); an error or a
notebook's interrupt releases it at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Iterator

from common.platform.process.termination import cause
from common.platform.storage import StorageBusy, is_local

log = logging.getLogger(__name__)


class LockTimeout(StorageBusy):
    """Another process held a local lock for longer than this one would wait."""


@contextlib.contextmanager
def local_commit_lock(location: str, wait_s: float = 600.0, poll_s: float = 0.2) -> Iterator[None]:
    """Hold an exclusive lock on the local table folder ``location`` for the body (a no-op for object stores);
    raises :class:`LockTimeout` naming the lock file after ``wait_s`` seconds of another holder.

    Why: on a local file system Spark's Delta log store commits version N by checking that N's file is absent
    and then renaming onto it, and a POSIX rename replaces: two processes committing one version at once can
    both "succeed", the later silently replacing the earlier (and Hadoop's checksum sidecar of the one no
    longer matching the other's file). delta-rs commits locally with an atomic no-replace rename; this lock
    gives Spark's writer the same guarantee on a local lakehouse (on S3 the commit lease does:
    :mod:`common.platform.lakehouse.commit_lease`). It is a ``flock`` on ``.<folder>.commit-lock`` beside the table
    folder, taken on a descriptor of its own per call, so it serializes writers in other processes and in other threads
    alike; the kernel releases it when a holder dies.
    """
    if not is_local(location):
        yield
        return
    import fcntl

    folder = Path(location.removeprefix("file://"))
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.commit-lock", "a") as handle:
        try:
            _flock_within(handle, wait_s, poll_s, location)
        except LockTimeout:
            raise
        except OSError as exc:  # a mount without locks (some FUSE file systems): commit as Spark alone would
            log.warning("no commit lock for %s (%s): concurrent Spark writers of it are not serialized", location, exc)
            yield
            return
        held = False
        try:
            yield
        except BaseException as exc:
            if cause(exc) is not None:  # the run ends: its JVM may still be committing; the lock goes with the process
                _HELD_TO_EXIT.append(os.dup(handle.fileno()))
                held = True
            raise
        finally:
            if not held:  # an error, or a notebook's interrupt: the process goes on and writes again
                fcntl.flock(handle, fcntl.LOCK_UN)


# Descriptors of commit locks a signalled run keeps until it exits (a flock lasts while one of them is open).
_HELD_TO_EXIT: list[int] = []


def _flock_within(handle, wait_s: float, poll_s: float, location: str) -> None:
    """``flock`` ``handle`` exclusively, polling without blocking (a blocking flock has no timeout) until ``wait_s``;
    raises :class:`LockTimeout`."""
    import fcntl

    deadline, announced = time.monotonic() + wait_s, False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockTimeout(
                    f"{handle.name}: another process held the commit lock of {location} for more than "
                    f"{wait_s:.0f} s (lakehouse.commit_wait_s); is another run writing that table?"
                ) from None
            if not announced:
                log.info("waiting for another writer of %s to commit", location)
                announced = True
            time.sleep(poll_s)
