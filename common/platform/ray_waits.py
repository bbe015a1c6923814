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

import logging
import time
from typing import Any, Mapping, Sequence

from common.platform.errors import ClusterError

log = logging.getLogger(__name__)

# The default bound where no config is at hand (a conversion task of the generation pool's).
UNSCHEDULABLE_TIMEOUT_S = 600.0


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


def wait_any(refs: Sequence[Any], what: str, demand: Mapping[str, float],
             unschedulable_s: float = UNSCHEDULABLE_TIMEOUT_S, poll_s: float = 2.0) -> list:
    """``ray.wait(refs, num_returns=1)`` that ends: the refs done (at least one), or :class:`ClusterError` naming
    ``what`` after ``unschedulable_s`` seconds in which none finished and no live node could hold ``demand`` (the
    refs cancelled)."""
    import ray

    since = None  # when the cluster was first seen unable to hold the demand, in this wait
    while True:
        done, _ = ray.wait(list(refs), num_returns=1, timeout=poll_s)
        if done:
            return done
        if schedulable(demand):
            since = None
            continue
        since = since if since is not None else time.monotonic()
        if time.monotonic() - since >= unschedulable_s:
            for ref in refs:
                ray.cancel(ref, force=True)
            raise ClusterError(
                f"{what}: {len(refs)} Ray task(s) asking for {dict((k, v) for k, v in demand.items() if v)} waited "
                f"{unschedulable_s:.0f} s with no live node able to hold them (nodes: {_capacity()}); the node they "
                "need is gone or was never there: give the cluster such a node, or ask for less "
                "(ray.unschedulable_timeout_s bounds this wait)")


def wait_all(refs: Sequence[Any], what: str, demand: Mapping[str, float],
             unschedulable_s: float = UNSCHEDULABLE_TIMEOUT_S) -> list:
    """``ray.get(refs)`` (results in order; a task's error raised here) through :func:`wait_any`'s bound."""
    import ray

    pending = list(refs)
    while pending:
        done = set(wait_any(pending, what, demand, unschedulable_s))
        pending = [r for r in pending if r not in done]
    return ray.get(list(refs))


def _capacity() -> str:
    import ray

    try:
        return "; ".join(", ".join(f"{k} {v:g}" for k, v in sorted(n.get("Resources", {}).items())
                                   if k in ("CPU", "GPU")) for n in ray.nodes() if n.get("Alive")) or "none"
    except Exception as exc:  # noqa: BLE001
        return f"unreadable ({exc})"
