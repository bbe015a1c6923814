"""The shared Ray runtime: loopback-only, started once, actors load their state once."""
from __future__ import annotations

import ray

from common.config import RayConfig
from common.ray_runtime import RayRuntime


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
    # Every Ray node of the local runtime listens on loopback only.
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
    actor = Loader.remote()
    results = ray.get([actor.process.remote([i, i + 1]) for i in range(5)])
    assert results[4] == [8, 10]
    assert ray.get(actor.stats.remote()) == (1, 5)
    # A second runtime object in the same process reuses the running Ray and does not shut it down.
    again = RayRuntime(RayConfig(num_cpus=2)).start()
    again.stop()
    assert ray.is_initialized()
