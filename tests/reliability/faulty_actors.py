"""Fault injection for the Ray actor tests: a plan actor that hands out each fault once, and a generator
that asks it for one on every batch.

The generator is the production :class:`~common.models.generation.on_ray.pool.T5Generator` with a hook in front of
each batch; the faults come from outside the stage's code (``ray.kill`` from the plan actor) or are raised
inside one batch, so what survives is decided by the suite's Ray options, not by the test.
"""

from __future__ import annotations

import time

from common.models.generation.on_ray.pool import T5Generator


class FaultPlan:
    """A Ray actor: ``claim(kind)`` is True once per kind (the first batch to ask gets the fault), or every
    time for ``"always <kind>"``; counts the generator starts and the kills it issued."""

    def __init__(self):
        self.claimed: set[str] = set()
        self.events = {"inits": 0, "kills": 0, "raised": 0}

    def claim(self, kind: str) -> bool:
        if kind.startswith("always "):
            return True
        if kind in self.claimed:
            return False
        self.claimed.add(kind)
        return True

    def note(self, event: str) -> None:
        self.events[event] += 1

    def kill(self, handle) -> None:
        """``ray.kill`` the actor behind ``handle`` while it waits inside a batch; it may restart."""
        import ray

        self.events["kills"] += 1
        ray.kill(handle, no_restart=False)

    def counts(self) -> dict[str, int]:
        return dict(self.events)


class FaultyGenerator(T5Generator):
    """:class:`T5Generator` whose batches first ask ``plan`` for ``fault``: ``"kill"`` (the plan kills this
    actor while the batch is in flight), ``"raise"`` (the batch raises once), ``"always kill"`` (every batch
    kills its actor) or ``None``; a batch holding the source id ``poison`` raises on every attempt."""

    def __init__(self, model_path, model_version, spec, plan=None, fault=None, poison=None):
        import ray

        super().__init__(model_path, model_version, spec)
        self.plan, self.fault, self.poison = plan, fault, poison
        ray.get(plan.note.remote("inits"))

    def __call__(self, batch):
        import ray

        if self.poison is not None and self.poison in {str(x) for x in batch["source_id"]}:
            raise RuntimeError(f"injected fault: source_id {self.poison} fails on every attempt")
        if self.fault and ray.get(self.plan.claim.remote(self.fault)):
            if self.fault.endswith("kill"):
                ray.get(self.plan.kill.remote(ray.get_runtime_context().current_actor))
                time.sleep(120)  # killed here, mid-batch
            ray.get(self.plan.note.remote("raised"))
            raise RuntimeError("injected fault: this batch fails once")
        return super().__call__(batch)
