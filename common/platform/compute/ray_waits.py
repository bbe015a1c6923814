"""Waits on Ray tasks that end when the cluster cannot run them.

``ray.get`` on a task that no node can hold (its only GPU node gone and not coming back in address mode, a task
asking for more CPUs than any node has) waits forever: Ray keeps such a task pending and says so once in a log
line. These waits poll ``ray.wait`` in slices and, while nothing finishes, check that some live node could hold the
task's demand (its total resources, not what is free now: a busy cluster is no fault); after
``ray.unschedulable_timeout_s`` seconds with no such node they cancel the tasks and raise
:class:`~common.platform.errors.ClusterError` naming what waited, what it asked for and what the cluster has. A task
that runs, however long, is never cut short: training legitimately takes hours, and its bound is progress.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Iterator, Mapping, Optional, Sequence

from common.platform.errors import ClusterError
from common.platform.process.signals import cause

log = logging.getLogger(__name__)

# The bound of the waits that name none: the config's, set when the driver's Ray runtime starts (None: no such bound,
# on Ray on Spark, whose node watch owns a node's start and whose nodes are added on demand).
_configured: dict[str, Optional[float]] = {"unschedulable_s": 600.0}


def configure(unschedulable_s: Optional[float]) -> None:
    """Set the bound of the waits that name none (the driver's runtime, from ``ray.unschedulable_timeout_s``)."""
    _configured["unschedulable_s"] = unschedulable_s


def schedulable(demand: Mapping[str, float]) -> bool:
    """Whether a live node of the cluster has, in total, every resource of ``demand`` (``{"CPU": 2, "GPU": 1}``;
    zero amounts ignored). An error reading the cluster's state counts as not schedulable: a watch that cannot see
    never vouches."""
    import ray

    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
    except Exception as exc:  # noqa: BLE001 - the state itself unreadable: counted toward the bound
        log.warning("the Ray cluster's nodes could not be read: %s", exc)
        return False
    return any(all(n.get("Resources", {}).get(k, 0.0) >= v for k, v in demand.items() if v) for n in nodes)


def wait_all(
    refs: Sequence[Any],
    what: str,
    demand: Mapping[str, float],
    unschedulable_s: Optional[float] = None,
    poll_s: float = 2.0,
) -> list:
    """``ray.get(refs)`` (results in order; a task's error raised here) that ends: :class:`ClusterError` naming
    ``what`` after ``unschedulable_s`` seconds (None: the configured bound) in which none of the pending refs
    finished and no live node could hold ``demand`` (the refs then cancelled)."""
    import ray

    pending = list(refs)
    while pending:
        pending = _wait(pending, what, demand, unschedulable_s, poll_s, len(pending))[1]
    with _signalled():
        return ray.get(list(refs))


def wait_any(
    refs: Sequence[Any],
    what: str,
    demand: Mapping[str, float],
    unschedulable_s: Optional[float] = None,
    poll_s: float = 2.0,
) -> list:
    """``ray.wait(refs, num_returns=1)`` within :func:`wait_all`'s bound: the refs done (at least one)."""
    return _wait(list(refs), what, demand, unschedulable_s, poll_s, 1)[0]


def _wait(
    refs: list,
    what: str,
    demand: Mapping[str, float],
    unschedulable_s: Optional[float],
    poll_s: float,
    num_returns: int,
) -> tuple[list, list]:
    """(done, pending) once at least one of ``refs`` is done (all that are, up to ``num_returns``)."""
    import ray

    bound = _configured["unschedulable_s"] if unschedulable_s is None else unschedulable_s
    since = None  # when the cluster was first seen unable to hold the demand, in this wait
    while True:
        with _signalled():
            done, pending = ray.wait(refs, num_returns=num_returns, timeout=poll_s)
        if done:
            return done, pending
        if bound is None or schedulable(demand):
            since = None
            continue
        since = since if since is not None else time.monotonic()
        if time.monotonic() - since >= bound:
            for ref in refs:
                ray.cancel(ref, force=True)
            raise ClusterError(
                f"{what}: {len(refs)} Ray task(s) asking for {dict((k, v) for k, v in demand.items() if v)} waited "
                f"{bound:.0f} s with no live node able to hold them (nodes: {_capacity()}); the node they need is "
                "gone or was never there: give the cluster such a node, or ask for less "
                "(ray.unschedulable_timeout_s bounds this wait)"
            )


@contextlib.contextmanager
def _signalled() -> Iterator[None]:
    """A signal's :class:`~common.platform.process.signals.Terminated` raised as itself: Ray's C++ waits hand an
    exception a signal handler raised back as ``SystemError`` (with it as the cause), which every ``except Exception``
    would take for an ordinary fault."""
    try:
        yield
    except SystemError as exc:
        terminated = cause(exc)
        if terminated is None:
            raise
        raise terminated from None


def _capacity() -> str:
    import ray

    try:
        return (
            "; ".join(
                ", ".join(f"{k} {v:g}" for k, v in sorted(n.get("Resources", {}).items()) if k in ("CPU", "GPU"))
                for n in ray.nodes()
                if n.get("Alive")
            )
            or "none"
        )
    except Exception as exc:  # noqa: BLE001
        return f"unreadable ({exc})"
