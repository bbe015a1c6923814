"""A running Ray-on-Spark cluster's worker nodes (:mod:`common.platform.compute.ray_on_spark` starts and stops it):
their states, the :class:`NodeWatch` that ends a job whose nodes never come up, and the tasks each node ran."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

from common.platform.compute.ray_on_spark import RayOnSparkPlan, stop
from common.platform.errors import ClusterError, interrupt_main

log = logging.getLogger(__name__)


def node_states() -> tuple[int, int, int]:
    """(worker nodes asked for and not ended, those whose Spark task runs, Ray worker nodes alive) of the running
    Ray-on-Spark cluster: the first two from Ray's Spark job server in this driver (a node is there from its request
    to its end; ``running`` once its Spark task was scheduled), the third from Ray's node table (a Ray-on-Spark head
    holds no CPU; every worker node does)."""
    import ray
    from ray.util.spark import cluster_init

    cluster = cluster_init._active_ray_cluster
    if cluster is None:
        return 0, 0, 0
    nodes = cluster.spark_job_server.query_nodes()["nodes"]
    alive = sum(1 for node in ray.nodes() if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0)
    return len(nodes), sum(1 for node in nodes if node["status"] == "running"), alive


class NodeWatch:
    """A thread that ends the job when Ray-on-Spark worker nodes have been asked for and none is up: when none of
    their Spark tasks is scheduled within ``timeout_s`` (no executor has the cores free), or none has joined Ray
    within twice that (tasks that run but whose ``ray start`` fails or crawls). It logs the error, interrupts the
    main thread with a :class:`ClusterError` naming the plan, the executors and the keys
    (:func:`~common.platform.errors.interrupt_main`; the job's run raises it and its context shuts Ray on Spark
    down), and shuts Ray on Spark down itself if the main thread has not within ``grace_s``. A pending node beside
    one that is up is no failure (the stage runs on the nodes it has). ``states`` (default :func:`node_states`) is
    read every ``poll_s``."""

    def __init__(
        self,
        chosen: RayOnSparkPlan,
        timeout_s: float,
        poll_s: float = 1.0,
        grace_s: float = 60.0,
        states: Callable[[], tuple[int, int, int]] = node_states,
    ):
        self.plan, self.timeout_s, self.poll_s, self.grace_s, self.states = chosen, timeout_s, poll_s, grace_s, states
        self.failure: Optional[ClusterError] = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ray-on-spark-node-watch", daemon=True)

    def start(self) -> "NodeWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the watch (the job's Ray runtime is stopping)."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        waiting_since: Optional[float] = None
        unreadable_since: Optional[float] = None
        while not self._stopped.wait(self.poll_s):
            try:
                asked, running, alive = self.states()
                unreadable_since = None
            except Exception as exc:  # noqa: BLE001 - counted toward the bound: a blind watch never vouches
                log.debug("ray on spark node watch: %s", exc)
                unreadable_since = unreadable_since or time.monotonic()
                if time.monotonic() - unreadable_since >= 2 * self.timeout_s:
                    self._fail(0, 0, time.monotonic() - unreadable_since, unreadable=exc)
                    return
                continue
            now = time.monotonic()
            waiting_since = None if alive or not asked else (waiting_since or now)
            waited = 0.0 if waiting_since is None else now - waiting_since
            if (waited >= self.timeout_s and not running) or waited >= 2 * self.timeout_s:
                self._fail(asked, running, waited)
                return

    def _fail(self, asked: int, running: int, waited: float, unreadable: Optional[BaseException] = None) -> None:
        from ray.util.spark import cluster_init

        cluster = cluster_init._active_ray_cluster
        last = getattr(getattr(cluster, "spark_job_server", None), "last_worker_error", None)
        nodes = f"{asked} Ray worker node{'s' if asked != 1 else ''}"
        what = (
            f"{nodes} asked for and not one of their Spark tasks scheduled within {waited:.0f} s"
            if not running
            else f"{nodes} asked for, {running} of their Spark tasks running, and none joined Ray within "
            f"{waited:.0f} s"
        )
        if unreadable is not None:
            what = (
                f"the state of its worker nodes could not be read for {waited:.0f} s "
                f"({type(unreadable).__name__}: {str(unreadable).strip()[:200]})"
            )
        self.failure = ClusterError(
            f"ray on spark: {what} (ray.spark_node_start_timeout_s {self.timeout_s:g}; twice that once a task runs): "
            f"{self.plan.describe()}; each node is a Spark task holding its CPUs, so it starts only when an executor "
            "has that many cores free (another Spark job holding the slots, lost executors) and its `ray start` "
            "succeeds"
            + (f" (the last node's error: {str(last).strip().splitlines()[-1][:300]})" if last else "")
            + "; set ray.spark_num_cpus_per_node / ray.spark_memory_per_node_mb to fit an executor, or free its "
            "slots. Ray on Spark was shut down"
        )
        log.error("%s", self.failure)
        interrupt_main(self.failure)
        if not self._stopped.wait(self.grace_s):  # the main thread did not get to its context's close
            log.error(
                "ray on spark: the job did not stop within %.0f s of the node watch's error: shutting Ray on "
                "Spark down from the watch",
                self.grace_s,
            )
            stop()


def work_by_node() -> dict[str, int]:
    """The Ray tasks (actor tasks included) this Ray-on-Spark cluster ran, by node: ``{"head": n, "worker <node id
    prefix>": n, ...}``, from Ray's state API. Read before :func:`~common.platform.compute.ray_on_spark.stop`, while
    the cluster still answers."""
    from ray.util.state import list_nodes, list_tasks

    counts: dict[str, int] = {}
    for node in list_nodes(limit=1000, raise_on_missing_output=False):
        name = "head" if node.is_head_node else f"worker {node.node_id[:8]}"
        # (the state API returns at most 10,000 rows a call: counted per node, capped there)
        tasks = list_tasks(filters=[("node_id", "=", node.node_id)], limit=10_000, raise_on_missing_output=False)
        counts[name] = len(tasks)
    return counts
