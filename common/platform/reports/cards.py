"""Dataset cards: a short Markdown file beside each augmented dataset version, as distilabel writes with the
datasets it produces, saying what made that version: the job and its MLflow run, the config hash, the input
table versions, the row count, the generator and the filter, and the job's own counts.

A card is a pure function of the version's commit (its lineage and time) and what the job passes, so a rerun
that finds the version already written writes the same card again. Cards live at
``<lakehouse.root>/cards/<table>/v<version>.md`` (a folder or an object-store URI) and are logged to the job's
MLflow run under ``cards/``.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class CardFacts:
    """What a card says about one table version."""

    table: str
    version: int
    rows: int
    lineage: Mapping[str, Any]
    timestamp_ms: Optional[int]
    generator: Mapping[str, Any] = field(default_factory=dict)
    filter: Mapping[str, Any] = field(default_factory=dict)
    counts: Mapping[str, Any] = field(default_factory=dict)


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _items(title: str, values: Mapping[str, Any]) -> list[str]:
    if not values:
        return []
    return ["", f"## {title}", "", "| | |", "|---|---|"] + [f"| {k} | `{_value(v)}` |" for k, v in values.items()]


def commit_time(timestamp_ms: Optional[int]) -> str:
    """A commit's time as ``2026-11-18 11:06 UTC``; ``unknown`` without one."""
    if not timestamp_ms:
        return "unknown"
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def render(facts: CardFacts) -> str:
    """The card's Markdown: a table of provenance, then the generator, filter and counts sections."""
    lineage = facts.lineage
    when = commit_time(facts.timestamp_ms)
    inputs = ", ".join(f"{name} v{version}" for name, version in sorted(lineage.get("inputs", {}).items()))
    lines = [
        f"# Dataset card: {facts.table} v{facts.version}",
        "",
        "| | |",
        "|---|---|",
        f"| rows | {facts.rows:,} |",
        f"| written | {when} |",
        f"| job | {lineage.get('job', 'unknown')} (MLflow run `{lineage.get('run_id') or '-'}`) |",
        f"| config hash | `{lineage.get('config_hash', '-')}` |",
        f"| inputs | {inputs or '-'} |",
    ]
    lines += _items("Generator", facts.generator) + _items("Filter", facts.filter) + _items("Counts", facts.counts)
    return "\n".join(lines) + "\n"


def card_text(
    lakehouse: Any,
    table: str,
    version: int,
    rows: int,
    generator: Mapping[str, Any],
    filter: Mapping[str, Any],
    counts: Optional[Mapping[str, Any]] = None,
) -> str:
    """The card of ``table`` v``version`` (``rows`` rows) of ``lakehouse``, from that version's commit (its
    lineage and time) and the job's ``generator``, ``filter`` and ``counts`` (config values, model versions,
    candidates, rejects by reason)."""
    commit = next((c for c in lakehouse.history(table) if c.version == version), None)
    return render(
        CardFacts(
            table=table,
            version=version,
            rows=rows,
            lineage=(commit.lineage if commit and commit.lineage else {}),
            timestamp_ms=commit.timestamp_ms if commit else None,
            generator=dict(generator),
            filter=dict(filter),
            counts=dict(counts or {}),
        )
    )


def card_uri(root: str, table: str, version: int) -> str:
    """Where the card of ``table`` v``version`` lives under the lakehouse ``root`` (a folder or a URI)."""
    return f"{root.rstrip('/')}/cards/{table}/v{version}.md"
