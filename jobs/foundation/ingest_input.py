"""Ingesting one input (what every ``ingest*`` job runs per input): read it, give each row its quarantine reason
(the per-row rules, then duplicates), drop near duplicates into their own table when ``ingest.dedup.near`` is on,
write the kept and the quarantined rows, and check and log the accounting (rows in = kept + quarantined + near
duplicates). Also when an input is ingested incrementally (:func:`last_ingested`: only the rows appended to a Delta
path input since the version last ingested).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Optional

from common.data.config import InputSpec
from common.data.schemas import Contract
from common.platform.runner.job import JobContext, JobRun, hash_of

# The accounting line is the ingest job's: it keeps that logger's name.
log = logging.getLogger("jobs.foundation.ingest")

_NEAR_KEY = "_near_key"


class AccountingError(RuntimeError):
    """Rows in != rows kept + rows quarantined: a bug, never a data problem."""


@dataclass(frozen=True)
class _Written:
    """What writing one input's tables found: its rows by quarantine reason (None: kept), the near duplicates and
    their clusters, and the write results of the kept and the quarantined rows."""

    by_reason: dict
    n_near: int
    clusters: int
    kept: Any
    rejected: Any


def ingest_one(ctx: JobContext, tr: JobRun, contract: Contract, spec: InputSpec, taxonomy_df) -> dict[str, int]:
    """Validate one input and write its kept and quarantined rows; returns rows_in/kept/quarantined (of the
    rows this run read: only the appended ones on an incremental run) and ``incremental`` (1 or 0), or
    nothing when both tables already hold this input version's rows."""
    from common.data.readers import read_input

    near = ctx.cfg.ingest.dedup.near and contract.dedup.text is not None
    config_hash = hash_of(_settings_in_use(ctx.cfg.ingest, near), asdict(spec), contract.name)
    other_inputs = {}
    if taxonomy_df is not None and "category" in contract.column_names:
        other_inputs["taxonomy"] = str(tr.result.outputs["taxonomy"].version)
    since = last_ingested(ctx, contract, config_hash, spec.path, other_inputs, tr.result.job)
    raw = read_input(
        ctx.spark,
        spec,
        contract,
        native_delta=ctx.capabilities.native_delta,
        since=since,
        label_separator=ctx.cfg.ingest.label_separator,
    )
    # Appended source rows are validated alone and appended: every rule is per row, so the tables end up
    # as a full ingest of the new source version would leave them.
    inputs = {raw.location: raw.version, **other_inputs}
    if tr.all_written(
        [contract.name, contract.quarantine_table] + ([_near_table(contract)] if near else []), config_hash, inputs
    ):
        return {}
    validated = _validated(ctx, contract, spec, raw, taxonomy_df)
    try:
        written = _write_tables(ctx, tr, contract, raw, validated, near, config_hash, inputs)
    finally:
        validated.unpersist()
    return _account(tr, contract, raw, written, near)


def _near_table(contract: Contract) -> str:
    return f"{contract.name}_near_duplicates"


def _validated(ctx: JobContext, contract: Contract, spec: InputSpec, raw, taxonomy_df):
    """The input's rows with their quarantine reasons (the per-row rules, then duplicates), persisted: counted,
    then written as kept and as quarantined rows."""
    from pyspark import StorageLevel

    from common.data import duplicates, quarantine

    # An appended row may copy one the table already keeps: the kept rows take part as earlier copies.
    # Pinned to its version: this run appends to that table before it writes the quarantine.
    prior = (
        ctx.lakehouse.read(contract.name, ctx.lakehouse.version(contract.name))
        if raw.since is not None and ctx.cfg.ingest.dedup.exact
        else None
    )
    return duplicates.with_duplicate_reasons(
        quarantine.with_reasons(raw.df, contract, ctx.cfg.ingest, taxonomy_df, spec.strip_markup, raw.malformed),
        contract,
        ctx.cfg.ingest,
        prior,
        raw.absent,
    ).persist(StorageLevel.MEMORY_AND_DISK)


def _write_tables(
    ctx: JobContext, tr: JobRun, contract: Contract, raw, validated, near: bool, config_hash: str, inputs: dict
) -> _Written:
    """Count the validated rows by reason, then write the near duplicates (``near``), the kept rows and the
    quarantined ones: overwritten on a full run, appended on an incremental one."""
    from common.data import quarantine

    mode = "overwrite" if raw.since is None else "append"
    # An incremental run may find no appended rows; a full one with none would empty the tables.
    by_reason = quarantine.reason_counts(validated, raw.location, allow_empty=raw.since is not None)
    valid = quarantine.kept(validated, contract, ctx.cfg.ingest)
    n_near = clusters = 0
    if near:
        valid, near_rows = _near_duplicates(ctx, contract, valid)
        written = tr.write(near_rows, _near_table(contract), config_hash, inputs)
        n_near, clusters = _near_counts(ctx.lakehouse.read(_near_table(contract), written.version))
    kept = tr.write(valid, contract.name, config_hash, inputs, mode)
    rejected = tr.write(quarantine.rejected(validated, contract), contract.quarantine_table, config_hash, inputs, mode)
    return _Written(by_reason, n_near, clusters, kept, rejected)


def _account(tr: JobRun, contract: Contract, raw, written: _Written, near: bool) -> dict[str, int]:
    """Check rows in = kept + quarantined + near duplicates against what was written, log the accounting (the
    run's ``ingest/<table>.json`` and one log line), and return it as the job's metrics."""
    from common.data import duplicates

    n_in = sum(written.by_reason.values())
    n_rejected = sum(v for k, v in written.by_reason.items() if k is not None)
    n_near, clusters = written.n_near, written.clusters
    n_kept = n_in - n_rejected - n_near
    for res, expected in ((written.kept, n_kept), (written.rejected, n_rejected)):
        if res.num_rows is not None and res.num_rows != expected:
            raise AccountingError(f"{contract.name}: wrote {res.num_rows} rows to {res.table}, expected {expected}")
    reasons = {k: v for k, v in sorted(written.by_reason.items(), key=lambda kv: -kv[1]) if k is not None}
    dedup = duplicates.report(reasons) | (
        {"near_duplicate": n_near, "near_duplicate_clusters": clusters} if near else {}
    )
    tr.log_dict(
        {
            "input": raw.location,
            "version": raw.version,
            "incremental_since": raw.since,
            "rows_in": n_in,
            "kept": n_kept,
            "quarantined": n_rejected,
            "reasons": reasons,
            "dedup": dedup,
        },
        f"ingest/{contract.name}.json",
    )
    scope = "all rows" if raw.since is None else f"rows appended after v{raw.since}"
    log.info(
        "%s (%s of %s v%s): %d rows in = %d kept + %d quarantined %s + %d near duplicates",
        contract.name,
        scope,
        raw.location,
        raw.version,
        n_in,
        n_kept,
        n_rejected,
        reasons,
        n_near,
    )
    return {
        "rows_in": n_in,
        "rows_kept": n_kept,
        "rows_quarantined": n_rejected,
        **{f"rows_{kind}": n for kind, n in dedup.items()},
        "incremental": int(raw.since is not None),
    }


def _settings_in_use(cfg, near: bool) -> dict:
    """The ``ingest`` section as a dict for an input's config hash, less the near-duplicate keys when that step
    does not run for it (off, or an input without a text): changing them must not re-ingest it."""
    settings = asdict(cfg)
    if not near:
        settings["dedup"] = {k: v for k, v in settings["dedup"].items() if not k.startswith("near")}
    return settings


def _near_duplicates(ctx: JobContext, contract: Contract, valid):
    """(the valid rows that stay, the near duplicates with their ``near_duplicate_cluster``): MinHash LSH over
    the contract's text (``ingest.dedup.near_*``), one member kept per cluster, the one with the smallest id
    (inputs without ids, texts: the smallest hash of the row's values)."""
    from pyspark.sql import functions as F

    from common.algorithms.near_duplicates import split_near_duplicates

    d = ctx.cfg.ingest.dedup
    key = contract.dedup.id
    if key is None:
        key = _NEAR_KEY
        valid = valid.withColumn(key, F.sha2(F.to_json(F.struct(*contract.column_names)), 256))
    staying, near = split_near_duplicates(
        valid, key, contract.dedup.text, d.near_threshold, d.near_shingle, d.near_tables, ctx.cfg.seed
    )
    return staying.drop(_NEAR_KEY), near.drop(_NEAR_KEY)


def _near_counts(near) -> tuple[int, int]:
    """(near-duplicate rows, clusters they belong to) of a written near-duplicates table."""
    from pyspark.sql import functions as F

    from common.algorithms.near_duplicates import CLUSTER_COL

    row = near.agg(F.count(F.lit(1)), F.countDistinct(CLUSTER_COL)).first()
    return int(row[0]), int(row[1])


def last_ingested(
    ctx: JobContext,
    contract: Contract,
    config_hash: str,
    location: str,
    other_inputs: dict[str, str],
    job_name: str = "ingest",  # jobs.foundation.ingest.NAME
) -> Optional[str]:
    """The source version that ``contract``'s table and its quarantine table were both last ingested from,
    with this config and the same other inputs (taxonomy), when that ingest is still each table's latest
    data version; None (a full ingest) otherwise, when forced, or with ``ingest.incremental`` off."""
    # Near duplicates are clusters over the whole input: with them on, every ingest is a full one.
    if ctx.force or not ctx.cfg.ingest.incremental or ctx.cfg.ingest.dedup.near:
        return None
    versions = set()
    for table in (contract.name, contract.quarantine_table):
        if not ctx.lakehouse.exists(table):
            return None
        commit = ctx.lakehouse.data_commit(table)
        lineage = commit.lineage if commit else None
        if not lineage or lineage.get("job") != job_name or lineage.get("config_hash") != config_hash:
            return None
        inputs = dict(lineage.get("inputs") or {})
        versions.add(inputs.pop(location, None))
        if inputs != other_inputs:
            return None
    return versions.pop() if len(versions) == 1 else None
