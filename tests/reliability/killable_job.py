"""The process the kill -9 tests kill: runs an ``augment`` command, or a Ray ``write_ray`` stage, in this
process and appends one line per write phase to the file named by ``AUGMENT_FAULT_MARKER``.

The markers are the only addition: the jobs, Spark, Ray and both Delta write paths run unchanged; the
wrappers below only note when each phase starts so that the test can SIGKILL the process group at a
seeded moment inside it. Phases: ``files TABLE`` (Spark's or Ray's Parquet files are being written; on the
native path this call also commits), ``commit TABLE`` (delta-rs commit of the written files),
``committed TABLE`` (the write call returned).

With ``AUGMENT_FAULT_BARRIER`` set to a folder, each process also waits at the start of each ``files`` phase
until ``AUGMENT_FAULT_PARTIES`` processes have reached it: the concurrent-writer test holds two runs of one
job there, past the lakehouse's history check, so that their writes and commits overlap.

With ``AUGMENT_FAULT_GO`` set to a file name, the process starts its engines first (Python's imports, the
Spark session, the Ray runtime), then waits for that file before it runs the job: a test starts the next
process while it checks what the last kill left, and its clock starts at the file.

    python tests/reliability/killable_job.py run ingest --conf ... --set ...
    python tests/reliability/killable_job.py ray-stage LAKEHOUSE_ROOT ROWS native|rs
"""

from __future__ import annotations

import os
import sys
import time


def _marker():
    handle = open(os.environ["AUGMENT_FAULT_MARKER"], "a", buffering=1)

    def mark(event: str) -> None:
        handle.write(f"{time.monotonic():.6f} {event}\n")
        handle.flush()
        os.fsync(handle.fileno())

    return mark


def _barrier():
    folder, parties = os.environ.get("AUGMENT_FAULT_BARRIER"), int(os.environ.get("AUGMENT_FAULT_PARTIES", "2"))

    def wait(event: str) -> None:
        if not folder:
            return
        name = event.replace(" ", "-")
        open(os.path.join(folder, f"{name}.{os.getpid()}"), "w").close()
        if not _wait_until(lambda: sum(entry.startswith(f"{name}.") for entry in os.listdir(folder)) >= parties, 120):
            raise RuntimeError(f"the other writers never reached {event!r}")

    return wait


def _wait_until(done, seconds: float) -> bool:
    """Poll ``done()`` every 10 ms for at most ``seconds``; returns whether it became true."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def install_markers() -> None:
    from common.platform.lakehouse import delta_native, delta_rs

    mark, barrier = _marker(), _barrier()
    real_commit_files, real_commit_once, real_native_write = (
        delta_rs.commit_files,
        delta_rs._commit_once,
        delta_native.write,
    )

    def commit_files(table, location, storage, mode, metadata, write_files, *args, **kwargs):
        def marked_write(folder):
            mark(f"files {table}")
            barrier(f"files {table}")
            return write_files(folder)

        result = real_commit_files(table, location, storage, mode, metadata, marked_write, *args, **kwargs)
        mark(f"committed {table}")
        return result

    def commit_once(table, *args, **kwargs):
        mark(f"commit {table}")
        return real_commit_once(table, *args, **kwargs)

    def native_write(spark, df, table, *args, **kwargs):
        mark(f"files {table}")
        barrier(f"files {table}")
        result = real_native_write(spark, df, table, *args, **kwargs)
        mark(f"committed {table}")
        return result

    delta_rs.commit_files, delta_rs._commit_once, delta_native.write = commit_files, commit_once, native_write


def write_stage(lakehouse, rows: int):
    """A Ray stage as the generation jobs run one: Ray workers map batches of a dataset and write Parquet;
    the lakehouse commits them as ONE version of ``generated`` with lineage (native: via Spark's writer).
    Returns the :class:`WriteResult`."""
    import ray

    from common.platform.lakehouse.lakehouse import Lineage

    def generate(batch):
        ids = batch["id"]
        return {"id": ids, "text": [f"generated text {i} " * 8 for i in ids]}

    ds = ray.data.range(rows, override_num_blocks=8).map_batches(generate, batch_size=max(1, rows // 8))
    lineage = Lineage(
        job="ray-stage",
        config_hash=f"rows{rows}",
        inputs={"range": str(rows)},
        run_id=f"pid{os.getpid()}-{time.time_ns()}",
    )
    return lakehouse.write_ray(ds, "generated", lineage=lineage)


def ray_stage(root: str, rows: int, path: str) -> int:
    """:func:`write_stage` in a process of its own: local Ray (and local Spark on the native path)."""
    from common.platform.compute.ray_runtime import RayRuntime
    from common.platform.config import LakehouseConfig, RayConfig, SparkConfig
    from common.platform.lakehouse.lakehouse import Lakehouse

    spark = None
    if path == "native":
        from ingest_world import SHORT_JVM, SHORT_SPARK_CONF

        from common.platform.compute.session import get_spark

        spark = get_spark(
            SparkConfig(master="local[1]", shuffle_partitions=1, java_options=SHORT_JVM, conf=dict(SHORT_SPARK_CONF))
        )
    runtime = RayRuntime(RayConfig(num_cpus=1)).start()
    try:
        wait_for_go()
        write_stage(Lakehouse(LakehouseConfig(root=root), spark, native_delta=path == "native"), rows)
    finally:
        runtime.stop()
    return 0


def wait_for_go() -> None:
    """Block until the file ``AUGMENT_FAULT_GO`` names exists (at most 10 minutes); return at once without it."""
    go = os.environ.get("AUGMENT_FAULT_GO")
    if go and not _wait_until(lambda: os.path.exists(go), 600):
        raise SystemExit(f"no {go} in 10 minutes: the test that started this process is gone")


def start_session(argv: list[str]) -> None:
    """The engines an ``augment run NAME`` with ``argv``'s options will use, started now: its Spark session
    (the job's own ``get_spark`` then returns it) and MLflow (imported, its store open and its experiment made,
    as the job's context does beside the JVM's start). The options are parsed as every job parses them."""
    import argparse

    from common.config import load_config
    from common.platform.runner.entry import add_common_args, config_from_args
    from common.platform.runner.job_context import build_context

    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("name")
    add_common_args(parser)
    build_context(config_from_args(parser.parse_args(argv), load_config)).close()


if __name__ == "__main__":
    install_markers()
    if sys.argv[1] == "ray-stage":
        from common.platform.process.signals import Terminated, handled

        # As the CLI runs a job: a signal ends the stage, stops the runtime and exits 143 within the grace.
        with handled(float(os.environ.get("AUGMENT_FAULT_GRACE_S", "20"))):
            try:
                sys.exit(ray_stage(sys.argv[2], int(sys.argv[3]), sys.argv[4]))
            except Terminated as exc:
                print(f"augment: terminated: {exc}", file=sys.stderr)
                sys.exit(exc.exit_code)
    from jobs.cli import main

    if os.environ.get("AUGMENT_FAULT_GO"):
        start_session(sys.argv[1:])
        wait_for_go()
    sys.exit(main(sys.argv[1:]))
