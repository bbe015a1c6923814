"""A spark-submit driver for the cluster tier's Ray on Spark test (``ray.mode: spark``): the suite's job context and
Ray runtime on a standalone master, in the order a pipeline uses them, measured.

1. A pipeline's Spark -> Ray -> Spark: a Spark stage, a Ray Data stage on the suite's actor pool (which starts Ray
   on Spark; its worker nodes start on demand), then a barrier stage that needs every slot of the cluster at once:
   it can only run once the idle Ray worker nodes have given their slots back.
2. Another Ray stage (the nodes start again), then the job raises: the context closes as a failed job's does; then
   no Spark job of Ray's is left and the barrier stage over every slot runs at once.

Prints one JSON line, ``RESULT {...}``: where the Ray tasks ran, the seconds each step took, and any failure.
Usage: spark-submit --py-files dist/augment.zip tests/cluster/ray_on_spark_probe.py CONF SLOT_WAIT_S
"""
from __future__ import annotations

import json
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

    from common.platform.ray_runtime import actor_pool_size, map_batches_on_actors

    ctx.ray()
    ds = ray.data.range(64, override_num_blocks=4)
    ds = map_batches_on_actors(ds, _Where, batch_size=16, batch_format="numpy",
                               concurrency=actor_pool_size(2, stage="probe"))
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


def _ray_jobs(spark) -> list[int]:
    """Active Spark jobs (Ray's worker nodes are long-running Spark jobs)."""
    return list(spark.sparkContext.statusTracker().getActiveJobsIds())


def main(conf: str, slot_wait: float) -> dict:
    from common.config import load_config
    from common.platform.job import build_context

    cfg = load_config(conf)
    result: dict = {}
    ctx = build_context(cfg)
    spark = ctx.spark
    slots = spark.sparkContext.defaultParallelism
    result["slots"] = slots
    started = time.monotonic()
    try:
        try:
            # 1. a pipeline's Spark -> Ray -> Spark, the Spark stage after the Ray stage over every slot at once
            spark.range(1000, numPartitions=slots).selectExpr("sum(id)").collect()
            stage = time.monotonic()
            result["pipeline_ray"] = _ray_stage(ctx)
            result["ray_start_and_stage_s"] = time.monotonic() - stage
            result["slots_after_ray_stage"] = _all_slots(spark, slots, slot_wait)
            # 2. another Ray stage (its nodes start again), then the job's own error
            stage = time.monotonic()
            result["failing_job_ray"] = _ray_stage(ctx)
            result["second_ray_stage_s"] = time.monotonic() - stage
            raise RuntimeError("the job's own error, after its Ray stage")
        finally:
            closing = time.monotonic()
            ctx.close()  # as every job's entry point does, on success, error and Ctrl-C
            result["close_s"] = time.monotonic() - closing
    except RuntimeError as exc:
        result["raised"] = str(exc)
    result["jobs_after_error"] = _ray_jobs(spark)
    result["slots_after_error"] = _all_slots(spark, slots, slot_wait)
    result["total_s"] = time.monotonic() - started
    return result


if __name__ == "__main__":
    outcome = main(sys.argv[1], float(sys.argv[2]))
    print("RESULT " + json.dumps(outcome), flush=True)
