"""Run one benchmark measurement in a spawned process of its own, under a time budget, sampling its memory."""

from __future__ import annotations

import math
import multiprocessing
import time

import psutil


def run_in_budget(target, args: tuple, budget_s: float) -> tuple[dict, float, bool]:
    """Run ``target(*args, out)`` in a spawned process, ``out`` a shared dict it fills; kill it (and every
    process it started) after ``budget_s`` seconds. Returns (what it put in ``out``, peak resident memory of
    its process tree in GiB, whether it ran out of time)."""
    manager = multiprocessing.Manager()
    out = manager.dict()
    proc = multiprocessing.get_context("spawn").Process(target=target, args=(*args, out))
    proc.start()
    handle, peak, start = psutil.Process(proc.pid), 0, time.perf_counter()
    while proc.is_alive() and time.perf_counter() - start < budget_s:
        try:
            peak = max(peak, sum(p.memory_info().rss for p in [handle, *handle.children(recursive=True)]))
        except psutil.Error:
            pass
        time.sleep(0.25)
    timed_out = proc.is_alive()
    if timed_out:
        for p in [handle, *handle.children(recursive=True)]:
            p.kill()
    return dict(out), peak / 2**30, timed_out


def growth_exponent(first: tuple[float, float], last: tuple[float, float]) -> float:
    """k in time ~ size**k between two (size, seconds) measurements."""
    (n0, t0), (n1, t1) = first, last
    return math.log(t1 / t0) / math.log(n1 / n0)
