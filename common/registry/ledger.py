"""Shipping as its own idempotent step: the ledger of what a run set out to ship.

A job writes its results before it ships, and a rerun of the same config returns early on the results table, so a
ship cut short (a kill after ``create_model_version``, a registry that erred while gating) would stay that way. So
:func:`~common.registry.ship.ship` first writes the run's candidates to ``<lakehouse>/models/shipping/<job>/
<run id>.json`` and records, per candidate, the run that registers it (before the call) and the version it got
(after); a candidate is done when its version carries the gate's verdict (promoted or kept). The next run of the
job, whether it trains or returns early, finishes every entry not done (no retraining: the kept classifier folders
are what ships) and removes a file whose entries are all done, so a fully shipped run registers nothing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from common.registry.candidates import Candidate
from common.registry.naming import word

if TYPE_CHECKING:
    from common.platform.job import JobContext

# The gate's verdicts; "undecided" (the registry erred) is none: the next run gates that version again.
VERDICTS = ("promoted", "kept")


@dataclass
class Entry:
    """One candidate of a ship, and how far it got."""

    candidate: Candidate
    run_id: Optional[str] = None    # the run that registers (or registered) its version
    version: Optional[str] = None   # the version it got
    done: bool = False              # the version carries a verdict (or the candidate can never ship: said once)


def folder(ctx: "JobContext", job: str) -> str:
    """Where ``job``'s ledger files are: ``<lakehouse.root>/models/shipping/<job>``."""
    return f"{ctx.cfg.lakehouse.root.rstrip('/')}/models/shipping/{word(job)}"


def save(uri: str, entries: list[Entry]) -> None:
    """Write ``entries`` to the ledger file ``uri`` (replacing it)."""
    from common.platform.storage import write_text

    write_text(uri, json.dumps([{"candidate": e.candidate.to_json(), "run_id": e.run_id, "version": e.version,
                                 "done": e.done} for e in entries], indent=1, sort_keys=True,
                                default=lambda o: o.item() if hasattr(o, "item") else str(o)))  # numpy scalars


def load(uri: str) -> list[Entry]:
    """The entries of the ledger file ``uri``; raises ValueError naming the file when it is no ledger."""
    from common.platform.storage import read_text

    try:
        return [Entry(Candidate.from_json(e["candidate"]), e.get("run_id"), e.get("version"), bool(e.get("done")))
                for e in json.loads(read_text(uri))]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{uri}: not a shipping ledger ({exc}); remove it to ship that run's models no more") from exc


def pending(ctx: "JobContext", job: str) -> list[str]:
    """The ledger files of ``job``, sorted by name; [] where there are none."""
    from common.platform.storage import list_files

    root = folder(ctx, job)
    return sorted(f"{root}/{info.base_name}" for info in list_files(root) if info.base_name.endswith(".json"))


def remove(uri: str) -> None:
    """Delete the ledger file ``uri`` (all its entries are done)."""
    from common.platform.storage import filesystem

    fs, path = filesystem(uri)
    fs.delete_file(path)
