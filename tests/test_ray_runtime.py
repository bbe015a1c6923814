"""The shared Ray runtime: loopback-only, started once, actors load their state once."""
from __future__ import annotations

import psutil
import ray

from common.platform.config import RayConfig
from common.platform.ray_runtime import RayRuntime


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
    listening = [c for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN and c.pid
                 and _is_ray_process(c.pid)]
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
