"""A driver for the cluster tier's Ray on Spark test (``ray.mode: spark``), started as ``augment run --set
spark.master=spark://...`` starts one: a plain ``python`` process (no spark-submit, no ``spark-defaults.conf``, no
activated venv) whose session the suite itself builds (``spark.mode: local`` with a standalone master: the suite sets
``spark.default.parallelism`` to its local partitions, 4, on executors of one core each). The suite's job context and
Ray runtime, in the order a pipeline uses them, measured:

1. A worker node larger than an executor (``ray.spark_num_cpus_per_node: 2`` on one-core executors) is refused before
   Ray starts, naming what the executors have.
2. A pipeline's Spark -> Ray -> Spark: a Spark stage, a Ray Data stage on the suite's actor pool (which starts Ray
   on Spark with nodes cut from the executors; they start on demand), then a barrier stage that needs every slot of
   the cluster at once: it can only run once the idle Ray worker nodes have given their slots back.
3. Another Spark job holds every slot, then a Ray stage asks for nodes that cannot start: within
   ``ray.spark_node_start_timeout_s`` the job's run fails with the node watch's error, the context shuts Ray on Spark
   down (no Spark job or Ray process of it is left), and once the other job ends the barrier stage over every slot
   runs at once.

Prints one JSON line, ``RESULT {...}``: where the Ray tasks ran, the seconds each step took, and any failure.
Usage: python tests/cluster/ray_on_spark_probe.py CONF SLOT_WAIT_S
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time


class _Where:
    """A Ray Data actor that tags each row with the node and process it ran in."""

    def __call__(self, batch):
        import os

        import ray

        node = ray.get_runtime_context().get_node_id()
        return {"id": batch["id"], "node": [node] * len(batch["id"]), "pid": [os.getpid()] * len(batch["id"])}


def _ray_stage(ctx) -> dict:
    """A Ray Data stage on the suite's actor pool: returns {node id: rows} and the head's node id."""
    import ray

    from common.platform.compute.ray_stages import actor_pool_size, map_batches_on_actors

    ctx.ray()
    ds = ray.data.range(64, override_num_blocks=4)
    ds = map_batches_on_actors(
        ds, _Where, batch_size=16, batch_format="numpy", concurrency=actor_pool_size(2, stage="probe")
    )
    rows: dict[str, int] = {}
    for row in ds.iter_rows():
        rows[row["node"]] = rows.get(row["node"], 0) + 1
    head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n.get("Resources", {}).get("CPU", 0) == 0)
    return {"rows_by_node": rows, "head": head, "worker_nodes": sorted(set(rows) - {head})}


def _all_slots(spark, slots: int, timeout: float) -> dict:
    """A barrier stage of ``slots`` tasks (Spark launches them all at once or not at all) under a job group that is
    cancelled after ``timeout`` seconds. Returns {"seconds", "ok", "executors"}."""
    sc = spark.sparkContext
    group = f"all-slots-{time.monotonic_ns()}"
    started = time.monotonic()
    timer = threading.Timer(timeout, sc.cancelJobGroup, args=(group,))
    timer.start()
    try:
        sc.setJobGroup(group, "every slot at once", interruptOnCancel=True)

        def executor_id(_):
            from pyspark import BarrierTaskContext

            context = BarrierTaskContext.get()
            context.barrier()
            yield __import__("os").environ.get("SPARK_EXECUTOR_ID", str(context.partitionId()))

        executors = sc.parallelize(range(slots), slots).barrier().mapPartitions(executor_id).collect()
        return {"seconds": time.monotonic() - started, "ok": True, "executors": sorted(set(executors))}
    except Exception as exc:  # cancelled: the slots never came back
        return {"seconds": time.monotonic() - started, "ok": False, "error": str(exc)[:300]}
    finally:
        timer.cancel()
        sc.setLocalProperty("spark.jobGroup.id", None)


def _hold_every_slot(spark, slots: int, seconds: float) -> tuple[threading.Thread, str]:
    """Another job of the application holding every slot for ``seconds`` (under a job group of its own); returns
    its thread and group once all its tasks run."""
    sc = spark.sparkContext
    group = "holds-every-slot"

    def hold() -> None:
        sc.setJobGroup(group, "another job holding every slot", interruptOnCancel=True)
        try:
            sc.parallelize(range(slots), slots).foreach(lambda _: time.sleep(seconds))
        except Exception:  # cancelled once the probe is done with it
            pass

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        tracker = sc.statusTracker()
        running = sum(
            tracker.getStageInfo(s).numActiveTasks
            for s in tracker.getActiveStageIds()
            if tracker.getStageInfo(s) is not None
        )
        if running >= slots:
            return thread, group
        time.sleep(0.5)
    raise RuntimeError("the job holding every slot never ran all its tasks")


def _active_jobs(spark) -> list[int]:
    """Active Spark jobs (Ray's worker nodes are long-running Spark jobs)."""
    return list(spark.sparkContext.statusTracker().getActiveJobsIds())


def _ray_processes(port: str, wait_s: float = 30.0) -> list[str]:
    """The processes of the Ray-on-Spark cluster whose head listened on ``port`` (their command lines name its
    folder, ``ray-<port>-<id>``: the head's and every worker node's raylet, GCS, agents and workers), after up to
    ``wait_s`` for them to end."""
    import psutil

    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for process in psutil.process_iter(["cmdline"]):
            line = " ".join(process.info["cmdline"] or [])
            if f"ray-{port}-" in line and "ray_on_spark_probe" not in line:
                left.append(line[:120])
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


def main(conf: str, slot_wait: float) -> dict:
    from common.config import load_config
    from common.platform.compute import ray_on_spark
    from common.platform.config_loader import ConfigError
    from common.platform.errors import ClusterError
    from common.platform.runner.job_context import build_context

    cfg = load_config(conf)
    result: dict = {}
    ctx = build_context(cfg)
    spark = ctx.spark
    result["default_parallelism"] = spark.sparkContext.defaultParallelism
    spark.range(1000, numPartitions=4).selectExpr("sum(id)").collect()  # a Spark stage: the executors are up
    found = ray_on_spark.executors(spark)
    slots = found.count * found.cores
    result["executors"] = found.describe()
    started = time.monotonic()
    try:
        # 1. a node an executor cannot hold: refused before Ray starts
        try:
            ray_on_spark.plan(type(cfg.ray)(mode="spark", spark_num_cpus_per_node=2), spark)
        except ConfigError as exc:
            result["too_large_refused"] = str(exc)
        result["plan"] = ray_on_spark.plan(cfg.ray, spark).describe()
        # 2. a pipeline's Spark -> Ray -> Spark, the Spark stage after the Ray stage over every slot at once
        stage = time.monotonic()
        result["pipeline_ray"] = _ray_stage(ctx)
        result["ray_start_and_stage_s"] = time.monotonic() - stage
        head_port = os.environ["RAY_ADDRESS"].rsplit(":", 1)[1]  # Ray on Spark's head, set by its start
        result["slots_after_ray_stage"] = _all_slots(spark, slots, slot_wait)
        # 3. every slot held by another job, then a Ray stage whose nodes cannot start
        holder, group = _hold_every_slot(spark, slots, 600)
        stage = time.monotonic()
        try:
            with ctx.tracker.run("ray-stage-without-slots", log_config=False):
                result["starved_ray"] = _ray_stage(ctx)
        except ClusterError as exc:
            result["node_watch_error"] = str(exc)
            result["node_watch_error_s"] = time.monotonic() - stage
    finally:
        closing = time.monotonic()
        ctx.close()  # as every job's entry point does, on success, error and Ctrl-C
        result["close_s"] = time.monotonic() - closing
    result["jobs_after_error"] = [
        j for j in _active_jobs(spark) if j not in spark.sparkContext.statusTracker().getJobIdsForGroup(group)
    ]
    result["ray_processes_after_error"] = _ray_processes(head_port)
    spark.sparkContext.cancelJobGroup(group)
    holder.join(timeout=60)
    result["slots_after_error"] = _all_slots(spark, slots, slot_wait)
    result["total_s"] = time.monotonic() - started
    return result


if __name__ == "__main__":
    outcome = main(sys.argv[1], float(sys.argv[2]))
    print("RESULT " + json.dumps(outcome), flush=True)
