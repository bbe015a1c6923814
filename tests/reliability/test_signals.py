"""SIGTERM as a scheduler sends it, to real processes: an ``augment run ingest`` signalled while Spark writes a table,
and a Ray Data write stage signalled while Ray's workers run it.

Each ends within ``tracking.shutdown_grace_s`` with exit code 143 and one line, its MLflow run KILLED (read back from
the tracking store), no Ray process of its own left; a run a SIGKILLed process left RUNNING is closed KILLED, with
the reason, by the next start on the host; the plain rerun completes with one version per table.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import killable_job
import psutil
import pytest
from ingest_world import REPO, ingest_args, ingest_config, settings
from test_kill_mid_write import _check_tables, _recover, _start, _stop

pytestmark = pytest.mark.slow
GRACE_S = 20.0
STOPPING = f"augment: SIGTERM received: stopping (cleanup bounded by {GRACE_S:g} s; a second signal exits at once)"
TERMINATED = "augment: terminated: SIGTERM received: the run stopped; its MLflow runs end KILLED"


def _runs(base: Path, experiment: str):
    """Every run of ``experiment`` in the MLflow database under ``base``."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{base / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id], max_results=500)


def _run_left_running(root: Path, base: Path) -> str:
    """A process that opens an ``ingest`` MLflow run in ``root``'s experiment and is SIGKILLed holding it (as an
    out-of-memory kill or a lost machine ends a driver): returns the run's id, RUNNING in the store."""
    code = textwrap.dedent(f"""
        import os, signal
        from common.config import load_config
        from common.platform.tracking.tracker import Tracker
        with Tracker(load_config(None, {settings(root, base)!r})).run("ingest", log_config=False) as run:
            print(run.run_id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    return done.stdout.split()[-1]


def _terminate_at(
    proc: subprocess.Popen, marker: Path, prefix: str, log: Path, delay: float
) -> tuple[float, list[psutil.Process]]:
    """Let ``proc`` run; ``delay`` seconds after a marker line starting with ``prefix`` send SIGTERM to it alone
    (its engines' processes get none: a scheduler signals the process it started); returns the seconds from the
    signal to its exit and the processes it had started (its JVM, Ray's)."""
    Path(f"{marker}.go").touch()
    deadline = time.monotonic() + 300
    while not (
        marker.exists()
        and any(line.split(" ", 1)[1].startswith(prefix) for line in marker.read_text().splitlines() if " " in line)
    ):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise AssertionError(f"{proc.args} never reached {prefix!r}:\n{log.read_text()[-3000:]}")
        time.sleep(0.005)
    time.sleep(delay)
    children = psutil.Process(proc.pid).children(recursive=True)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=GRACE_S + 30)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise AssertionError(f"no exit {GRACE_S + 30:g} s after SIGTERM:\n{log.read_text()[-3000:]}") from None
    return time.monotonic() - start, children


def _ended_cleanly(proc: subprocess.Popen, log: Path, took: float, children: list[psutil.Process]) -> None:
    """Exit 143 within the grace, one line saying so, no traceback, and none of the processes it started left
    (Ray's raylet and workers end with the runtime it stopped; the JVM with its driver)."""
    text = log.read_text()
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [(p.pid, p.cmdline()[:3]) for p in alive if p.is_running()]
    assert proc.returncode == 143, f"exit {proc.returncode}:\n{text[-3000:]}"
    assert took < GRACE_S, f"{took:.1f} s from SIGTERM to exit (grace {GRACE_S:g} s)"
    # The line is the driver's last; the JVM it leaves may log its aborted tasks after it, as the JVM's own log.
    lines = [line for line in text.splitlines() if line.startswith("augment: ")]
    assert lines == [STOPPING, TERMINATED], text[-3000:]
    assert "without cleanup" not in text and "Traceback" not in text, text[-3000:]


def test_sigterm_during_a_spark_write_kills_the_run_and_the_rerun_completes(spark, capabilities, world, tmp_path):
    root, base = tmp_path / "lake", tmp_path
    shutil.copytree(world["landing"], root / "landing")
    left_running = _run_left_running(root, base)
    experiment = f"reliability-{root.name}"
    assert {r.info.run_id: r.info.status for r in _runs(base, experiment)} == {left_running: "RUNNING"}

    marker, log = tmp_path / "marker", tmp_path / "ingest.log"
    args = [*ingest_args(root, base), "--set", f"tracking.shutdown_grace_s={GRACE_S}"]
    proc = _start([sys.executable, str(Path(killable_job.__file__)), *args], marker, log)
    took, children = _terminate_at(proc, marker, "files ", log, delay=0.3)
    _ended_cleanly(proc, log, took, children)
    print(f"\nSIGTERM during a Spark write: exit 143 after {took:.1f} s")

    runs = {r.info.run_id: r for r in _runs(base, experiment)}
    assert not [r.info.run_id for r in runs.values() if r.info.status == "RUNNING"], runs
    dead = runs.pop(left_running)
    assert dead.info.status == "KILLED" and "ended without closing it" in dead.data.tags["closed.reason"]
    assert [(r.info.run_name, r.info.status, r.data.tags.get("closed.reason")) for r in runs.values()] == [
        ("ingest", "KILLED", TERMINATED.removeprefix("augment: terminated: "))
    ]

    cfg = ingest_config(root, base)
    from common.platform.lakehouse.lakehouse import Lakehouse
    from common.platform.runner.job_context import build_context
    from jobs.foundation import ingest

    lakehouse = Lakehouse(cfg.lakehouse, spark, native_delta=capabilities.native_delta)
    _check_tables(lakehouse, world["clean"])  # what the signal left reads whole

    def rerun():
        ctx = build_context(cfg, spark=spark, capabilities=capabilities)
        ctx.lakehouse = lakehouse
        try:
            ingest.run(ctx)
        finally:
            ctx.close()

    _recover(lakehouse, world["clean"], rerun)


def test_sigterm_during_a_ray_stage_stops_ray_within_the_grace(tmp_path):
    marker, log = tmp_path / "marker", tmp_path / "ray.log"
    cmd = [sys.executable, str(Path(killable_job.__file__)), "ray-stage", str(tmp_path / "r"), "200000", "rs"]
    proc = _start(cmd, marker, log)
    took, children = _terminate_at(proc, marker, "files generated", log, delay=0.5)
    _ended_cleanly(proc, log, took, children)
    print(f"\nSIGTERM during a Ray stage: exit 143 after {took:.1f} s")


WAITS_ON_A_TASK = """
import sys, time
from common.platform.config import RayConfig
from common.platform.compute.ray_runtime import RayRuntime
from common.platform.process.signals import Terminated, handled
import ray

with handled(20.0):
    runtime = RayRuntime(RayConfig(num_cpus=1)).start()
    try:
        from common.platform.compute.ray_waits import wait_all

        @ray.remote(num_cpus=1)
        def train():
            time.sleep(120)

        ref = train.remote()
        print("waiting", flush=True)
        try:
            wait_all([ref], "a long training task", {"CPU": 1.0}, poll_s=0.5)
        except Exception as exc:  # what every job's retry or fallback would take for an ordinary fault
            print(f"an ordinary error: {type(exc).__name__}", flush=True)
            sys.exit(1)
        except Terminated as exc:
            print(f"augment: terminated: {exc}", flush=True)
            sys.exit(exc.exit_code)
    finally:
        runtime.stop()
"""


def test_sigterm_during_a_wait_on_ray_tasks_is_the_signal_not_an_error(tmp_path):
    """Ray's C++ wait hands an exception a signal handler raised back as SystemError: the suite's waits (classifier
    training and scoring, HFT levels, fine-tunes, conversions) raise the signal itself."""
    log = tmp_path / "wait.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", WAITS_ON_A_TASK],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    deadline = time.monotonic() + 120
    while "waiting" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    time.sleep(1.0)  # inside the wait's ray.wait
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    text = log.read_text()
    assert proc.returncode == 143 and time.monotonic() - started < GRACE_S, (proc.returncode, text[-3000:])
    assert TERMINATED in text and "an ordinary error" not in text, text[-3000:]


def test_a_signal_between_a_tracking_read_and_its_fetch_still_ends_the_run_killed(tmp_path):
    """SIGTERM delivered the moment a read of the SQLite tracking store has executed, before its rows are fetched
    (where a scheduler's signal often lands during shipping: the registry's reads): the open statement held the
    database's read lock for as long as the signal's traceback lived, so the KILLED mark waited out SQLite's busy
    timeouts (40 s) and failed, the run left RUNNING. Now the run ends KILLED at once."""
    import threading

    from mlflow import MlflowClient
    from sqlalchemy import event

    from common.config import load_config
    from common.platform.process.signals import Terminated, handled
    from common.platform.tracking.tracker import Tracker

    cfg = load_config(
        None,
        [
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"lakehouse.root={tmp_path / 'lake'}",
            "tracking.experiment=signal-mid-read",
        ],
    )
    armed: list[bool] = []
    signalled: list[float] = []
    with pytest.raises(Terminated):
        with handled(grace_s=60):
            with Tracker(cfg).run("ship", log_config=False) as run:
                engine = MlflowClient()._tracking_client.store.engine

                @event.listens_for(engine, "after_cursor_execute")
                def signal_once_read(conn, cursor, statement, *args):
                    if armed and statement.lstrip().upper().startswith("SELECT"):
                        armed.clear()
                        signalled.append(time.monotonic())
                        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

                armed.append(True)
                MlflowClient().search_experiments()
                pytest.fail("the signal did not stop the run")
    took = time.monotonic() - signalled[0]
    assert MlflowClient(cfg.tracking_uri).get_run(run.run_id).info.status == "KILLED" and took < 5, took


STARTS_RAY = """
import sys
from common.platform.config import RayConfig
from common.platform.compute.ray_runtime import RayRuntime
from common.platform.process.signals import Terminated, handled
import ray

with handled(20.0):
    try:
        print("starting", flush=True)
        RayRuntime(RayConfig(num_cpus=1)).start()
        print("started", flush=True)
    except Terminated as exc:
        print(f"augment: terminated: {exc}", flush=True)
        sys.exit(exc.exit_code)
"""


def test_sigterm_while_ray_starts_is_the_suites_signal_not_rays_exit_15(tmp_path):
    """``ray.init`` sets Ray's own SIGTERM handler (``sys.exit(15)``) first thing, seconds before it returns: a signal
    then ends the run as any other (143, the run's line), with what Ray had started shut down."""
    log = tmp_path / "start.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", STARTS_RAY],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    deadline = time.monotonic() + 120
    while "starting" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.02)
    time.sleep(0.5)  # inside ray.init: Ray's handler set, its processes starting
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    text = log.read_text()
    assert proc.returncode == 143 and "augment: terminated: SIGTERM" in text and "started" not in text, (
        proc.returncode,
        text[-3000:],
    )
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [(p.pid, p.cmdline()[:3]) for p in alive if p.is_running()]
