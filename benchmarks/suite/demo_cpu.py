"""How much CPU work a pipeline run is, beside its wall time: `augment run <pipeline>` on a fresh lakehouse, the
machine's busy CPU time sampled every second (psutil), each job's wall seconds and core-seconds from its progress
lines. The total core-seconds over the machine's cores is the shortest wall time any scheduling of the same work
could reach (every core busy throughout), so it says whether a time budget can be met by running jobs concurrently
or needs less work.

    .venv/bin/python benchmarks/suite/demo_cpu.py [--pipeline demo] [--conf conf/demo.yaml] [--budget-s 360]

The figures count every process on the machine (the driver, its JVM, Ray's workers, and anything else running):
run it on an otherwise idle machine, and read them beside benchmarks/suite/machine_speed.py's.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
PROGRESS = re.compile(r"^\[(?P<pipeline>[\w-]+) (?P<i>\d+)/(?P<n>\d+)\] (?P<job>\S+) (?P<what>\.\.\.|done in)")


def busy_seconds() -> float:
    """The machine's CPU seconds spent on anything but idling or waiting for I/O, over all cores, since boot."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def run(pipeline: str, conf: str, root: str, log: Path) -> list[tuple[str, float, float]]:
    """``pipeline`` run with ``conf`` on lakehouse ``root`` (its output in ``log``): (job, wall seconds, busy
    core-seconds) per job, in the order they ran. Raises CalledProcessError when the run fails."""
    samples: list[tuple[float, float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append((time.monotonic(), busy_seconds()))
            done.wait(1.0)

    def busy_between(t0: float, t1: float) -> float:
        inside = [b for t, b in samples if t0 <= t <= t1]
        return inside[-1] - inside[0] if len(inside) > 1 else 0.0

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started: dict[str, float] = {}
    jobs: list[tuple[str, float, float]] = []
    command = [sys.executable, "-m", "jobs.cli", "run", pipeline, "--conf", conf, "--set", f"lakehouse.root={root}"]
    with (
        open(log, "w", encoding="utf-8") as out,
        subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        ) as proc,
    ):
        for line in proc.stdout:
            out.write(line)
            match = PROGRESS.match(line)
            if not match:
                continue
            now, job = time.monotonic(), match["job"]
            if match["what"] == "...":
                started[job] = now
            elif job in started:
                jobs.append((job, now - started[job], busy_between(started[job], now)))
                print(f"{job:26s} {now - started[job]:7.1f} s {jobs[-1][2]:8.1f} core-s", flush=True)
    done.set()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, command)
    return jobs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", default="demo")
    parser.add_argument("--conf", default="conf/demo.yaml")
    parser.add_argument("--budget-s", type=float, default=360.0, help="the wall-time budget to compare with")
    args = parser.parse_args(argv)
    cores = psutil.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="demo-cpu-") as root:
        jobs = run(args.pipeline, args.conf, str(Path(root) / "lakehouse"), Path(root).parent / "demo-cpu.log")
    wall, work = sum(w for _, w, _ in jobs), sum(c for _, _, c in jobs)
    print(
        f"\n{len(jobs)} jobs: {wall:.0f} s of wall time, {work:.0f} core-seconds on {cores} cores "
        f"({100 * work / (cores * wall):.0f}% of them busy)"
    )
    print(
        f"shortest wall time for this work, every core busy throughout: {work / cores:.0f} s; the budget of "
        f"{args.budget_s:.0f} s holds {cores * args.budget_s:.0f} core-seconds: "
        f"{'fits' if work <= cores * args.budget_s else 'does not fit, whatever runs concurrently'}"
    )
    heavy = sorted(jobs, key=lambda j: -j[2])[:5]
    print("most work: " + ", ".join(f"{job} {c:.0f} core-s" for job, _, c in heavy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
