"""The shared Ray runtime: loopback-only, started once, actors load their state once."""

from __future__ import annotations

import contextlib
import os
import time

import psutil
import pytest
import ray

from common.platform.compute.ray_runtime import RayRuntime
from common.platform.config import RayConfig


def _is_ray_process(pid: int) -> bool:
    try:
        name = psutil.Process(pid).name()
    except psutil.Error:
        return False
    return name in ("raylet", "gcs_server") or name.startswith("ray::")


@ray.remote
class Loader:
    """Stands for a model stage: the expensive setup happens once per actor, not per batch."""

    def __init__(self):
        self.loads = 1
        self.batches = 0

    def process(self, batch):
        self.batches += 1
        return [x * 2 for x in batch]

    def stats(self):
        return self.loads, self.batches


def test_runtime_is_shared_and_actors_keep_state(ray_runtime):
    assert ray.is_initialized()
    assert ray_runtime.resources()["CPU"] == 2
    assert ray_runtime.gpus() == 0 or ray_runtime.gpus() >= 1
    # Every Ray node of the local runtime is on loopback, and no Ray server listens elsewhere
    # (this module imports ray before the runtime starts, the order that used to leak).
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
    listening = [
        c
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.pid and _is_ray_process(c.pid)
    ]
    assert listening, "found no Ray server sockets to check"
    assert {c.laddr.ip.removeprefix("::ffff:") for c in listening} == {"127.0.0.1"}
    actor = Loader.remote()
    results = ray.get([actor.process.remote([i, i + 1]) for i in range(5)])
    assert results[4] == [8, 10]
    assert ray.get(actor.stats.remote()) == (1, 5)
    # A second runtime object in the same process reuses the running Ray and does not shut it down.
    again = RayRuntime(RayConfig(num_cpus=2)).start()
    again.stop()
    assert ray.is_initialized()


def test_table_versions_are_read_without_a_footer_actor_pool(ray_runtime, tmp_path):
    """``ray.parquet_datasource`` picks Ray Data's Parquet reader: v1 (the default) reads the given files in
    its read tasks; v2 (Ray 2.60's own default) first lists them in a ListFiles task that starts a pool of
    footer-reading actors per read. The rows are the same either way."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ray.data import DataContext

    path = str(tmp_path / "part-0.parquet")
    pq.write_table(pa.table({"id": list(range(50))}), path)

    def first_operator():
        ds = ray.data.read_parquet([path])
        return ds._logical_plan.dag.input_dependencies, sorted(r["id"] for r in ds.take_all())

    assert not DataContext.get_current().use_datasource_v2  # the shared runtime's default config
    inputs, rows = first_operator()
    assert inputs == [] and rows == list(range(50))  # one Read operator, nothing upstream of it
    try:
        RayRuntime(RayConfig(num_cpus=2, parquet_datasource="v2")).start()  # the running Ray, reconfigured
        inputs, rows = first_operator()
        assert [type(op).__name__ for op in inputs] == ["ListFiles"] and rows == list(range(50))
    finally:
        RayRuntime(RayConfig(num_cpus=2)).start()
    assert not DataContext.get_current().use_datasource_v2
    with pytest.raises(ValueError, match="ray.parquet_datasource"):
        RayConfig(parquet_datasource="v3")


_WORKER_REUSE = """
import json, os, tempfile, time
import ray
from common.platform.config import RayConfig
from common.platform.compute.ray_runtime import RayRuntime

@ray.remote(num_cpus=1)
def light(folder, i):
    # Two tasks of another stage run at once, as Ray Data's do: two workers beside the model task's, so that
    # the workers outnumber Ray's default soft limit (num_cpus) whatever the machine's speed. (Eight short
    # tasks one after another ran in ONE worker on a slow machine: nothing was above the limit to reap.)
    open(os.path.join(folder, str(i)), "w").close()
    deadline = time.time() + 60
    while len(os.listdir(folder)) < 2 and time.time() < deadline:
        time.sleep(0.01)
    return i

def model_task():
    import torch  # what makes a worker worth keeping
    return os.getpid()

def alive(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" not in status.read()
    except OSError:
        return False

out = {}
for max_workers in (6, None):  # the demo's setting, then Ray's own (num_cpus)
    runtime = RayRuntime(RayConfig(num_cpus=2, max_workers=max_workers)).start()
    task = ray.remote(num_cpus=1, runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})(model_task)
    pids = [ray.get(task.remote())]
    for stage in range(2):  # two more stages, each after another stage's tasks and an idle spell
        folder = tempfile.mkdtemp()
        ray.get([light.remote(folder, i) for i in range(2)])  # another stage's tasks, in between
        # Ray reaps idle workers above its soft limit after about a second; on a loaded machine later. Wait
        # for the model worker to go (up to 30 s) where it may, and 3 s where it must stay.
        deadline = time.time() + (30 if max_workers is None else 3)
        while time.time() < deadline and (max_workers is not None or alive(pids[-1])):
            time.sleep(0.2)
        pids.append(ray.get(task.remote()))
        if max_workers is None and pids[-1] != pids[0]:
            break  # a new process served the model task: what Ray's own limit does is shown; no more waiting
    out[str(max_workers)] = pids
    runtime.stop()
print(json.dumps(out))
"""


def test_a_model_task_worker_is_kept_for_the_next_stage(tmp_path):
    """Ray ends idle workers beyond its soft limit (num_cpus) after a second, so each stage's fine-tune or
    conversion task started a process and imported torch again (~2.5 s, 10 times in the demo). With
    ray.max_workers 6 (the demo's) the same worker serves the model task of every stage. (Run in a
    process of its own, as it starts Ray twice.)"""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _WORKER_REUSE],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pids = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(set(pids["6"])) == 1, pids
    assert len(set(pids["None"])) > 1, pids  # Ray's default soft limit: a new process each stage


def test_torch_tasks_share_their_workers_and_never_fasttexts(ray_runtime):
    """Torch tasks (run_tasks(torch=True): encoder surrogates and classifiers) run in the torch tasks' runtime
    environment: its workers serve them one after another, instead of a new process importing torch for each,
    and fastText's tasks never run in it (their heap must not be one torch shaped). With a GPU, each torch
    task's worker exits after it."""
    from common.models.classifiers.text_classifier import run_tasks
    from common.platform.compute.ray_stages import TORCH_TASK_ENV, torch_task_options

    pid = lambda: __import__("os").getpid()  # noqa: E731  (a lambda travels to Ray by value)

    assert torch_task_options(0.0) == {"runtime_env": TORCH_TASK_ENV}
    with _capacity({"CPU": 2.0, "GPU": 1.0}):  # as a runtime with a GPU records it
        assert torch_task_options(1.0) == {"runtime_env": TORCH_TASK_ENV, "max_calls": 1}
    # Two CPUs each on the session's 2-CPU runtime: the tasks run one at a time. Ray hands each the idle torch
    # worker used last; earlier tests may have left more than one idle, so the claim is that workers are shared
    # (with a worker per task there would be four).
    torch_pids = [run_tasks(ray_runtime, pid, [{}], num_cpus=2, torch=True)[0] for _ in range(4)]
    assert len(set(torch_pids)) < len(torch_pids), torch_pids
    fasttext_pids = run_tasks(ray_runtime, pid, [{}] * 4)
    assert not set(fasttext_pids) & set(torch_pids), (fasttext_pids, torch_pids)


def test_cpu_actor_pools_leave_a_cpu_to_ray_data(ray_runtime):
    from common.platform.compute.ray_stages import actor_pool_size

    # 2 CPUs: CPU actors of 1 CPU are cut to one, so the read and write tasks keep a CPU; an actor of 2 CPUs
    # would hold them all and the stage would never start, so the pool is refused with the fix in the message
    assert actor_pool_size(3, 0.0, 1, stage="test pool") == 1
    with pytest.raises(ValueError, match="test pool: a CPU actor of 2 CPUs .* at most 1 CPU"):
        actor_pool_size(1, 0.0, 2, stage="test pool")
    with _capacity({"CPU": 2.0, "GPU": 4.0}):
        assert actor_pool_size(4, 1.0, 2) == 4  # GPU actors hold no CPU the other tasks need


def test_a_cpu_generation_task_runs_the_threads_it_is_given(ray_runtime):
    """Ray sets OMP_NUM_THREADS to a worker's CPUs, and CTranslate2's OpenMP never runs more threads than that
    says: a CPU generation actor or task of 1 CPU asked for 2 threads gets the variable at 2 in its runtime
    environment, and the CTranslate2 engine reads its thread count from it. 0 threads: the node's CPUs shared
    among the pool's actors; 1 keeps the warm torch workers' environment as it is."""
    from common.platform.compute.ray_stages import TORCH_TASK_ENV, cpu_threads, threads_env, torch_task_options

    assert threads_env(1) is TORCH_TASK_ENV and threads_env(2)["env_vars"]["OMP_NUM_THREADS"] == "2"
    assert threads_env(2)["env_vars"]["TOKENIZERS_PARALLELISM"] == TORCH_TASK_ENV["env_vars"]["TOKENIZERS_PARALLELISM"]
    assert (cpu_threads(3, 1), cpu_threads(0, 1), cpu_threads(0, 2), cpu_threads(0, 3)) == (3, 2, 1, 1)  # 2 CPUs
    with _capacity(None):  # a cluster joined by address: its nodes unknown
        assert cpu_threads(0, 1) == 1

    @ray.remote(num_cpus=1)
    def threads_seen():
        from common.models.generation.engines.ct2 import _actor_threads

        return os.environ.get("OMP_NUM_THREADS"), _actor_threads()

    assert ray.get(threads_seen.options(**torch_task_options(threads=2)).remote()) == ("2", 2)
    assert ray.get(threads_seen.options(**torch_task_options(threads=1)).remote()) == ("1", 1)


def test_a_stage_that_asks_for_a_gpu_the_cluster_cannot_have_fails_before_it_starts(ray_runtime):
    """Ray would wait forever for a GPU no node has: the stage is refused with the settings to change, on the
    session's CPU-only runtime and on a Ray on Spark plan without GPUs; a cluster joined by address (whose autoscaler
    may add GPU nodes) is not second-guessed."""
    from common.platform.compute.ray_stages import actor_pool_size, torch_task_options
    from common.platform.config_loader import ConfigError

    with pytest.raises(
        ConfigError, match=r"generation asks for 1 GPU\(s\) and this Ray cluster has 0: .*ray.num_gpus"
    ):
        actor_pool_size(2, 1.0, stage="generation")
    with _capacity({"CPU": 4.0, "GPU": 0.0}), pytest.raises(ConfigError, match="ray.spark_num_gpus_per_node"):
        torch_task_options(1.0, stage="fine-tune")
    with _capacity(None):
        assert torch_task_options(1.0)["max_calls"] == 1


def test_a_wait_on_tasks_no_node_can_hold_ends_and_a_long_task_is_never_cut_short(ray_runtime):
    """A task asking for a GPU on a cluster with none (as when the only GPU node of an address-mode cluster is gone
    for good) would keep ``ray.get`` waiting forever: the bounded wait raises ClusterError naming the tasks, what
    they ask for and the nodes once ``unschedulable_s`` passed with nothing finished, and cancels them. A task that
    runs past that bound on a node that can hold it finishes."""
    import ray

    from common.platform.compute.ray_waits import wait_all
    from common.platform.errors import ClusterError

    def nap(seconds: float) -> float:  # nested: pickled by value, as the workers cannot import this test module
        import time

        time.sleep(seconds)
        return seconds

    stuck = ray.remote(num_gpus=1)(nap).remote(0)
    started = time.monotonic()
    with pytest.raises(
        ClusterError,
        match=r"gpu tasks: 1 Ray task\(s\) asking for \{'GPU': 1\} waited 2 s with no "
        r"live node able to hold them \(nodes: CPU 2\)",
    ):
        wait_all([stuck], "gpu tasks", {"CPU": 0, "GPU": 1}, unschedulable_s=2.0)
    assert time.monotonic() - started < 10
    long = ray.remote(num_cpus=1)(nap).remote(4.0)
    assert wait_all([long], "a long task", {"CPU": 1}, unschedulable_s=1.0) == [4.0]


def test_a_task_asking_for_more_cpus_than_any_node_has_gets_the_largest_node(ray_runtime, caplog):
    """Ray would wait forever for a task of 2 CPUs on Ray on Spark's 1-core nodes: the request is cut to the
    largest node, with a warning naming the setting; a cluster joined by address is not second-guessed."""
    from common.platform.compute.ray_stages import actor_pool_size, fit_cpus

    assert fit_cpus(3, "fine-tune") == 2  # the session's local runtime: one node of 2 CPUs
    with _capacity({"CPU": 2.0, "GPU": 0.0, "node_CPU": 1.0}):  # Ray on Spark: two nodes of one executor core
        assert fit_cpus(2, "fine-tune") == 1 and fit_cpus(1, "fine-tune") == 1
        assert actor_pool_size(2, 0.0, 2, stage="scoring") == 1  # one actor of 1 CPU, the other CPU for Ray Data
    assert "fine-tune asks for 2 CPUs per task and the largest node of this Ray cluster has 1" in caplog.text
    assert "ray.spark_num_cpus_per_node" in caplog.text
    with _capacity(None):
        assert fit_cpus(8, "fine-tune") == 8


@contextlib.contextmanager
def _capacity(capacity):
    """The driver's recorded Ray capacity set to ``capacity`` for the block (as RayRuntime.start records it)."""
    from ray.data import DataContext

    from common.platform.compute.ray_stages import CAPACITY_KEY

    context = DataContext.get_current()
    before = context.get_config(CAPACITY_KEY, None)
    context.set_config(CAPACITY_KEY, capacity)
    try:
        yield
    finally:
        context.set_config(CAPACITY_KEY, before)


_HEAP_SCRIPT = """
import ctypes
import psutil
from common.platform.process.native_heap import release_free_heap
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(16 << 20))  # freeing a mapped block raises glibc's mmap threshold to its size
blocks = [libc.malloc(1 << 20) for _ in range(200)]  # now heap blocks, not mappings
for block in blocks:
    ctypes.memset(block, 1, 1 << 20)  # resident
rss = lambda: psutil.Process().memory_info().rss >> 20
before = rss()
for block in blocks[:-1]:  # the last block pins the heap's top: freeing the rest shrinks nothing
    libc.free(block)
freed = rss()
print(before, freed, release_free_heap(), rss())
"""


def test_release_free_heap_hands_freed_heap_pages_back():
    """A worker's freed native buffers stay resident until the heap is trimmed (the CTranslate2 generation
    worker's growth); ``release_free_heap`` gives them back."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _HEAP_SCRIPT], capture_output=True, text=True, check=True)
    before, freed, trimmed, after = out.stdout.split()
    assert trimmed == "True"
    assert int(freed) > int(before) - 20  # 199 MiB freed, still resident
    assert int(after) < int(freed) - 150  # trimmed: given back


_HELD_HEAP_SCRIPT = """
import resource, sys
import numpy as np
from common.platform.process.native_heap import hold_native_heap
held = hold_native_heap() if sys.argv[1] == "held" else None
def cycle():  # a batch's activations: 16 buffers of 1 MiB written, then freed
    buffers = [np.ones(1 << 18, np.float32) for _ in range(16)]
    del buffers
for _ in range(3):
    cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    cycle()
print(held, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_hold_native_heap_keeps_freed_buffers_for_the_next_batch():
    """Freed 1 MiB buffers that together exceed glibc's trim threshold go back to the OS and fault in again for
    the next batch (4 KiB pages: ~4,096 faults per 16 MiB batch); held (the embedding actor's heap), they are
    reused: no fault."""
    import subprocess
    import sys

    def faults(mode: str) -> tuple[str, int]:
        out = subprocess.run(
            [sys.executable, "-c", _HELD_HEAP_SCRIPT, mode], capture_output=True, text=True, check=True
        ).stdout.split()
        return out[0], int(out[1])

    (_, plain), (held, after) = faults("plain"), faults("held")
    assert held == "True"
    assert plain > 10 * 2000  # every batch faulted in anew
    assert after < 500


def test_a_stage_lost_to_the_cluster_runs_again_and_a_failing_one_does_not():
    """A node that dies mid-batch reaches Ray Data as ActorUnavailableError, which its actor pool does not retry (the
    cluster tier found it): the stage runs again from its inputs, up to ray.stage_retries times. A failure of the
    code, or an actor that died of itself past its restarts, fails at once."""
    from ray import exceptions as ray_errors

    from common.platform.compute.ray_stages import lost_to_the_cluster, run_stage

    unavailable = ray_errors.ActorUnavailableError("RpcError: failed to connect to all addresses", None)
    assert lost_to_the_cluster(unavailable)
    try:
        raise RuntimeError("Dataset execution failed") from unavailable
    except RuntimeError as wrapped:
        assert lost_to_the_cluster(wrapped)
    assert lost_to_the_cluster(ray_errors.NodeDiedError("node 1a2b died"))
    assert not lost_to_the_cluster(ray_errors.ActorDiedError())  # killed, crashed, out of restarts
    assert not lost_to_the_cluster(ValueError("source_id s05 fails on every attempt"))

    calls, cleanups = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("write failed") from unavailable
        return "written"

    assert run_stage(flaky, "a stage", lambda: cleanups.append(1)) == "written"
    assert (len(calls), len(cleanups)) == (3, 2)  # ray.stage_retries = 2 by default

    def always_lost():
        calls.append(1)
        raise unavailable

    calls.clear()
    with pytest.raises(ray_errors.ActorUnavailableError):
        run_stage(always_lost, "a stage")
    assert len(calls) == 3

    def broken():
        calls.append(1)
        raise ValueError("a bug")

    calls.clear()
    with pytest.raises(ValueError):
        run_stage(broken, "a stage")
    assert len(calls) == 1


def test_ray_on_spark_plans_nodes_an_executor_can_hold_and_tells_its_nodes_where_ray_is(spark, monkeypatch):
    """Ray on Spark's plan on this application (local[2]: one 'executor' of 2 cores): worker nodes of one executor's
    cores by default (Ray's own default, the machine's CPUs, never fits a smaller executor), autoscaling from zero;
    sizes that cannot work are refused naming the key. Before the start, the driver's ``ray`` folder goes first on
    its PATH (Ray's head starter looks the command up there), and the start hook hands the worker nodes the
    executors' ``ray`` folder and the driver's Ray auth mode; the doctor says what it found."""
    import sys
    from pathlib import Path

    from common.platform.base_config import BaseConfig
    from common.platform.compute import ray_on_spark
    from common.platform.config_loader import ConfigError, from_mapping
    from common.platform.doctor.cluster import cluster_checks

    chosen = ray_on_spark.plan(RayConfig(mode="spark"), spark)
    assert chosen.executors == ray_on_spark.Executors(count=1, cores=2, memory_mb=1024)  # spark.executor.memory
    assert (chosen.min_nodes, chosen.max_nodes, chosen.cpus, chosen.gpus, chosen.memory_mb) == (0, 2, 2, 0, 1024)
    assert chosen.capacity() == {"CPU": 4.0, "GPU": 0.0, "node_CPU": 2.0}
    assert chosen.memory_bytes() == (717 * 2**20, 307 * 2**20)  # Ray's 30% for the object store
    half = ray_on_spark.plan(RayConfig(mode="spark", spark_num_cpus_per_node=1, spark_num_gpus_per_node=1), spark)
    assert half.capacity() == {"CPU": 2.0, "GPU": 2.0, "node_CPU": 1.0} and half.memory_mb == 512
    with pytest.raises(ConfigError, match="ray.spark_min_worker_nodes .3. must be between 0 and"):
        ray_on_spark.plan(RayConfig(mode="spark", spark_min_worker_nodes=3), spark)
    # A node an executor cannot hold is refused before Ray starts, naming what the executors have.
    with pytest.raises(
        ConfigError,
        match=r"ray.spark_num_cpus_per_node \(3\) is more than a Spark executor has: "
        r"the application has 1 executor of 2 cores and 1024 MiB each",
    ):
        ray_on_spark.plan(RayConfig(mode="spark", spark_num_cpus_per_node=3), spark)

    for key in (
        "PATH",
        ray_on_spark.NODE_PATH_ENV,
        ray_on_spark.HOOK_ENV,
        "RAY_AUTH_MODE",
        "RAY_ADDRESS",
        "PYSPARK_PYTHON",
    ):
        monkeypatch.setenv(key, os.environ.get(key, ""))  # restored after the test
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("PYSPARK_PYTHON", "/nodes/env/bin/python")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    for key in (ray_on_spark.HOOK_ENV, "RAY_AUTH_MODE"):
        monkeypatch.delenv(key)
    ray_on_spark.prepare_environment(spark)
    bin_folder = str(Path(sys.executable).parent)
    assert os.environ["PATH"] == f"{bin_folder}:/usr/bin:/bin" and "RAY_ADDRESS" not in os.environ
    hook = ray_on_spark.SuiteStartHook()
    assert os.environ[ray_on_spark.HOOK_ENV] == ray_on_spark.HOOK
    env = hook.custom_environment_variables()
    assert env["PATH"] == "/nodes/env/bin:/usr/bin:/bin" and env["RAY_AUTH_MODE"] == "disabled"

    cfg = from_mapping(BaseConfig, {"ray": {"mode": "spark"}})
    (check,) = cluster_checks(cfg)
    assert check.ok and check.detail.startswith(f"{bin_folder}/ray; 0-2 worker nodes"), check
    fixed = from_mapping(BaseConfig, {"ray": {"mode": "spark", "spark_min_worker_nodes": 2}})
    (check,) = cluster_checks(fixed)
    assert not check.ok and "holds its Spark slots" in check.detail and "spark_min_worker_nodes: 0" in check.fix


def test_ray_on_spark_nodes_never_up_end_the_job_with_an_error_naming_the_plan(capsys):
    """The node watch: worker nodes asked for and none of their Spark tasks scheduled for
    ``ray.spark_node_start_timeout_s`` (or tasks running and no node up for twice that) interrupt the main thread
    wherever it waits, and the interrupt becomes a ClusterError naming the plan, the executors and the keys; a
    pending node beside one that is up, or none asked for, is no failure; a user's Ctrl-C stays a Ctrl-C."""
    import time

    from common.platform.compute import ray_on_spark, ray_on_spark_nodes
    from common.platform.errors import ClusterError, interruption

    chosen = ray_on_spark.RayOnSparkPlan(
        min_nodes=0,
        max_nodes=2,
        cpus=2,
        gpus=0,
        idle_minutes=0.5,
        memory_mb=1024,
        executors=ray_on_spark.Executors(count=2, cores=1, memory_mb=1024),
    )
    for states in ((2, 1, 1), (0, 0, 0)):  # one up (the stage runs on it), or none asked for
        watch = ray_on_spark_nodes.NodeWatch(chosen, timeout_s=0.3, poll_s=0.05, states=lambda s=states: s).start()
        time.sleep(0.6)
        watch.stop()
        assert watch.failure is None

    def waited_for(states) -> tuple[float, BaseException]:
        read = states if callable(states) else (lambda: states)
        watch = ray_on_spark_nodes.NodeWatch(chosen, timeout_s=0.3, poll_s=0.05, grace_s=30, states=read).start()
        started = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                while time.monotonic() - started < 10:  # the main thread waiting, as in a Ray stage
                    time.sleep(0.01)
            error = interruption()
        finally:
            watch.stop()  # as the runtime's stop does: the watch then leaves Ray on Spark to the context's close
        assert isinstance(error, ClusterError) and error is watch.failure
        return time.monotonic() - started, error

    seconds, error = waited_for((2, 0, 0))  # no task scheduled: after the timeout
    assert 0.3 <= seconds < 0.6
    assert str(error).startswith(
        "ray on spark: 2 Ray worker nodes asked for and not one of their Spark tasks "
        "scheduled within 0 s (ray.spark_node_start_timeout_s 0.3; twice that once a task "
        "runs): 0-2 worker nodes of 2 CPU, 0 GPU and 1024 MB (the application has 2 "
        "executors of 1 core and 1024 MiB each)"
    )
    assert "ray.spark_num_cpus_per_node" in str(error) and "Ray on Spark was shut down" in str(error)
    seconds, error = waited_for((2, 1, 0))  # a task runs, its node never joins: after twice the timeout
    assert 0.6 <= seconds < 1.2 and "1 of their Spark tasks running, and none joined Ray" in str(error)
    assert interruption() is None  # taken once: a later Ctrl-C is the user's

    from common.platform.errors import report

    assert report(error) == 5  # the CLI's one line, exit code 5
    assert capsys.readouterr().err.startswith("augment: cluster error: ray on spark: 2 Ray worker nodes asked for")

    def unreadable():
        raise ConnectionError("the GCS does not answer")

    seconds, error = waited_for(unreadable)  # a watch that cannot see counts toward its bound, never vouches
    assert 0.6 <= seconds < 1.2 and "could not be read for " in str(error)
    assert "s (ConnectionError: the GCS does not answer)" in str(error)
