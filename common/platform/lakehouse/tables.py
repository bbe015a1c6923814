"""The lakehouse's vocabulary, shared by its two write paths: lineage, write results, commits, errors."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

WriteMode = Literal["overwrite", "append"]
LINEAGE_MARK = "augment.lineage"
# How many recent commits a write looks through for its own (concurrent writers may have added some).
RECENT_COMMITS = 20


class LakehouseError(RuntimeError):
    """A table is missing, a version does not exist, or a write cannot be committed."""


@dataclass(frozen=True)
class Lineage:
    """Where a table version came from: the job, its run, its config and the versions it read.

    ``inputs`` maps each input (a table name or a file path) to its version (a Delta version number,
    or a fingerprint of a file listing).
    """

    job: str
    config_hash: str
    inputs: dict[str, str] = field(default_factory=dict)
    run_id: Optional[str] = None

    def key(self, table: str) -> str:
        """The idempotence key: same job, table, config and input versions give the same key."""
        payload = json.dumps(
            {"job": self.job, "table": table, "config_hash": self.config_hash, "inputs": self.inputs},
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:24]

    def to_metadata(self, table: str) -> str:
        """The JSON string stored as the commit's userMetadata."""
        return json.dumps(
            {
                LINEAGE_MARK: 1,
                "key": self.key(table),
                "job": self.job,
                "table": table,
                "run_id": self.run_id,
                "config_hash": self.config_hash,
                "inputs": self.inputs,
            },
            sort_keys=True,
        )


@dataclass(frozen=True)
class WriteResult:
    """The outcome of :meth:`Lakehouse.write`: the version holding the data, and whether it was new."""

    table: str
    version: int
    skipped: bool
    num_rows: Optional[int]


# Commits that rewrite or delete files without changing what the table reads. Lineage records the newest
# version that changed data, so maintenance between two runs does not make unchanged inputs look new.
MAINTENANCE_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})


@dataclass(frozen=True)
class Commit:
    """One entry of a table's history, with its lineage parsed (None for foreign commits)."""

    version: int
    timestamp_ms: Optional[int]
    operation: Optional[str]
    lineage: Optional[dict[str, Any]]

    @property
    def changes_data(self) -> bool:
        """False for table maintenance (OPTIMIZE, VACUUM): the version reads the same rows as the one before."""
        return (self.operation or "").upper() not in MAINTENANCE_OPERATIONS


@dataclass(frozen=True)
class TableInfo:
    """A table in the lakehouse: name, latest version, row count at that version and location."""

    name: str
    version: int
    num_rows: Optional[int]
    location: str
    last_job: Optional[str]


def parse_lineage(user_metadata: Any) -> Optional[dict[str, Any]]:
    """The lineage dict of a commit's userMetadata, or None for foreign or unparsable metadata."""
    if not user_metadata:
        return None
    try:
        parsed = json.loads(user_metadata) if isinstance(user_metadata, str) else user_metadata
    except (TypeError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) and parsed.get(LINEAGE_MARK) else None


def check_same_schema(table: str, current, new) -> None:
    """Raise :class:`LakehouseError` when the Arrow schema ``new`` of an append differs from the table's
    ``current`` one in column names or types, naming what is missing, new and changed."""
    have = {f.name: f.type for f in current}
    want = {f.name: f.type for f in new}
    if have != want:
        missing = sorted(set(have) - set(want))
        extra = sorted(set(want) - set(have))
        changed = sorted(k for k in set(have) & set(want) if have[k] != want[k])
        raise LakehouseError(
            f"append to {table!r} with a different schema: missing columns {missing}, new columns {extra}, "
            f"changed types {changed}; write with mode='overwrite' to replace the schema"
        )


def app_id(table: str, lineage: Optional[Lineage], force: bool) -> Optional[str]:
    """The Delta transaction id of a lineage's write (both paths): Delta's own idempotence, keyed by the lineage,
    guards the gap between the history check and the commit, so two concurrent runs of one job cannot both
    commit. None (no guard) without lineage or with ``force``."""
    return f"augment-{lineage.key(table)}" if lineage and not force else None


def check_name(table: str) -> None:
    """Raise LakehouseError unless ``table`` is a valid table name (letters, digits and '_')."""
    if not table or not all(c.isalnum() or c == "_" for c in table):
        raise LakehouseError(f"table names are letters, digits and '_' only, got {table!r}")
