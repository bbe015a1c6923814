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

import contextlib
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterator, Optional

from common.registry.candidates import Candidate
from common.registry.naming import word

if TYPE_CHECKING:
    from common.platform.runner.job_context import JobContext

# The gate's verdicts; "undecided" (the registry erred) is none: the next run gates that version again.
VERDICTS = ("promoted", "kept")


@dataclass
class Entry:
    """One candidate of a ship, and how far it got."""

    candidate: Candidate
    name: Optional[str] = None  # the registered model's name, as the shipping run's config made it
    model_uri: Optional[str] = None  # the logged MLflow Model (logged once: a rerun reuses it)
    model_id: Optional[str] = None
    run_id: Optional[str] = None  # the run that registers (or registered) its version
    version: Optional[str] = None  # the version it got
    done: bool = False  # the version carries a verdict (or it can never ship: said once)
    attempts: int = 0  # runs that failed on it: after MAX_ATTEMPTS it is said once and dropped


# Runs that may fail on one entry (a champion that cannot be scored, a folder gone) before it is dropped with a line:
# a broken entry never fails every later run of its job.
MAX_ATTEMPTS = 3


def folder(ctx: "JobContext", job: str) -> str:
    """Where ``job``'s ledger files are: ``<lakehouse.root>/models/shipping/<job>``."""
    return f"{ctx.cfg.lakehouse.root.rstrip('/')}/models/shipping/{word(job)}"


def save(uri: str, entries: list[Entry]) -> None:
    """Write ``entries`` to the ledger file ``uri`` (replacing it whole: a kill mid-write leaves the old file)."""
    from common.platform.storage import write_text

    write_text(
        uri,
        json.dumps(
            [
                {**{k: v for k, v in asdict(e).items() if k != "candidate"}, "candidate": e.candidate.to_json()}
                for e in entries
            ],
            indent=1,
            sort_keys=True,
            default=lambda o: o.item() if hasattr(o, "item") else str(o),
        ),
    )  # numpy scalars


def load(uri: str) -> list[Entry]:
    """The entries of the ledger file ``uri``; raises ValueError naming the file when it is no ledger, and
    FileNotFoundError when another run removed it meanwhile."""
    from common.platform.storage import read_text

    text = read_text(uri)
    try:
        return [Entry(**{**e, "candidate": Candidate.from_json(e["candidate"])}) for e in json.loads(text)]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{uri}: not a shipping ledger ({exc})") from exc


@contextlib.contextmanager
def claim(uri: str) -> Iterator[bool]:
    """Hold the ledger file ``uri`` for the body, so that two runs of one job never finish one ledger at once: yields
    True, or False at once where another run holds it (:func:`common.platform.lakehouse.commit_lease.claim`)."""
    from common.platform.lakehouse.commit_lease import claim as claim_file

    with claim_file(uri, "shipping ledger") as mine:
        yield mine


def pending(ctx: "JobContext", job: str) -> list[str]:
    """The ledger files of ``job``, oldest first; [] where there are none."""
    from common.platform.storage import list_files

    root = folder(ctx, job)
    infos = [info for info in list_files(root) if info.base_name.endswith(".json")]
    return [f"{root}/{info.base_name}" for info in sorted(infos, key=lambda i: (i.mtime_ns or 0, i.base_name))]


def remove(uri: str) -> None:
    """Delete the ledger file ``uri`` (all its entries are done; gone already is fine)."""
    from common.platform.storage import filesystem

    fs, path = filesystem(uri)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)
