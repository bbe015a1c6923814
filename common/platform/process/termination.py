"""The exception a signal raises in a run's main thread (:mod:`common.platform.process.signals`), in a module of its
own: what holds a lock or a lease for a commit (:mod:`common.platform.storage`,
:mod:`common.platform.lakehouse.commit_lease`) tells it apart from a notebook user's interrupt without importing the
signal handling."""

from __future__ import annotations

import signal
from typing import Optional


class Terminated(BaseException):
    """The run was told to stop by ``signum``. A BaseException, as KeyboardInterrupt is: no ``except Exception`` of a
    job (a retry, a shipping ledger's failed attempt, a fallback engine) takes it for a fault it may handle."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"{signal.Signals(signum).name} received: the run stopped; its MLflow runs end KILLED")

    @property
    def exit_code(self) -> int:
        """``128 + signum``: the shell's and schedulers' code of a process ended by that signal."""
        return 128 + self.signum


def cause(exc: Optional[BaseException]) -> Optional[Terminated]:
    """The :class:`Terminated` that ``exc`` is or was raised from (Ray's C++ waits turn an exception a signal handler
    raised into ``SystemError`` with it as the cause), or None."""
    for _ in range(20):
        if exc is None or isinstance(exc, Terminated):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None
