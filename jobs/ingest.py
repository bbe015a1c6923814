"""Job ``ingest``: read the configured inputs, validate every row, write Delta table versions.

Reads: ``inputs.labeled``, ``inputs.catalog``, ``inputs.interactions``, ``inputs.products`` (paths in
CSV, Parquet, JSON lines or Delta, or catalog table names); an unset input means the demo landing
files (used only when no input is configured). With ``ingest.taxonomy`` set (or the demo's taxonomy), labels must be
taxonomy categories.
Writes: ``labeled_products``, ``catalog``, ``interactions``, ``products`` (valid rows, normalised),
each with ``<table>_quarantine`` (rejected rows with a ``reason``), and ``taxonomy`` when one is given.

Accounting: for each input, rows in = rows kept + rows quarantined; the job fails if that ever breaks.

Job ``ingest-texts`` does the same for ``inputs.texts`` (``texts`` and ``texts_quarantine``; unset: the
demo's labeled titles as text and their category as label), and ``ingest-documents`` for
``inputs.documents`` (``documents``) and ``inputs.topic_corpus`` (``topic_corpus``, when set), and
``ingest-multilabel`` for ``inputs.multilabel`` (``multilabel``: example_id, text, labels as a sorted array).

Incremental: a Delta path input whose commits since the version last ingested (with the same config) only
appended rows has just those rows validated and appended to both tables (``ingest.incremental``); any other
change to it, or any other input kind, is ingested in full and overwrites.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from common.config import AppConfig
from common.data.config import InputSpec
from common.data.schemas import CATALOG_KINDS, CONTRACTS, DOCUMENTS, MULTILABEL, TEXTS, TOPIC_CORPUS, Contract
from common.platform.errors import ConfigError
from common.platform.job import JobContext, JobRun, hash_of, job
from jobs import entry_point

log = logging.getLogger(__name__)

NAME = "ingest"
_DEMO_LANDING = {
    "labeled": "labeled_products",
    "catalog": "catalog",
    "interactions": "interactions",
    "products": "products",
}


class AccountingError(RuntimeError):
    """Rows in != rows kept + rows quarantined: a bug, never a data problem."""


def resolve_inputs(cfg: AppConfig) -> dict[str, InputSpec]:
    """The configured inputs by kind; with none configured, the demo landing files that exist."""
    from jobs.generate_demo import landing_dir

    configured = {kind: getattr(cfg.inputs, kind) for kind in CATALOG_KINDS if getattr(cfg.inputs, kind) is not None}
    if configured:
        return configured
    landing = landing_dir(cfg)
    folders = {kind: f"{landing}/{_DEMO_LANDING[kind]}" for kind in CATALOG_KINDS}
    return {
        kind: InputSpec(path=folder) for kind, folder in folders.items() if "://" in folder or Path(folder).exists()
    }


def resolve_taxonomy(cfg: AppConfig) -> Optional[str]:
    """``ingest.taxonomy``; else the demo taxonomy when every input is the demo's own."""
    from jobs.generate_demo import landing_dir

    if cfg.ingest.taxonomy:
        return cfg.ingest.taxonomy
    from common.platform.storage import exists

    demo_taxonomy = f"{landing_dir(cfg)}/taxonomy.txt"
    uses_demo = all(getattr(cfg.inputs, kind) is None for kind in CATALOG_KINDS)
    return demo_taxonomy if uses_demo and exists(demo_taxonomy) else None


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """Ingest every configured input; returns the table versions and the per-input row accounting."""
    from common.data.readers import file_version
    from common.data.taxonomy import Taxonomy, depth

    specs = resolve_inputs(ctx.cfg)
    if not specs:
        raise ConfigError(
            "nothing to ingest: set inputs.labeled / inputs.catalog / inputs.interactions / "
            "inputs.products, or run `augment run generate-demo` first"
        )
    taxonomy_df = None
    taxonomy_path = resolve_taxonomy(ctx.cfg)
    if taxonomy_path:
        # A taxonomy is a bounded reference list (Google's has 5.6k nodes), parsed on the driver.
        taxonomy = Taxonomy.from_google_file(taxonomy_path)
        rows = [(taxonomy.id_of(p), p, depth(p)) for p in sorted(taxonomy.paths)]
        taxonomy_df = ctx.spark.createDataFrame(rows, "id long, path string, depth int")
        tr.write(taxonomy_df, "taxonomy", hash_of("taxonomy"), {taxonomy_path: file_version(taxonomy_path)})
    metrics = {}
    for kind, spec in specs.items():
        counts = ingest_one(ctx, tr, CONTRACTS[kind], spec, taxonomy_df)
        metrics.update({f"{kind}.{k}": float(v) for k, v in counts.items()})
    return metrics


def texts_input(cfg: AppConfig) -> InputSpec:
    """``inputs.texts``; unset: the demo's labeled product titles (text = title, label = category path)."""
    from jobs.generate_demo import landing_dir

    if cfg.inputs.texts is not None:
        return cfg.inputs.texts
    folder = f"{landing_dir(cfg)}/{_DEMO_LANDING['labeled']}"
    if "://" not in folder and not Path(folder).exists():
        raise ConfigError("nothing to ingest: set inputs.texts, or run `augment run generate-demo` first")
    return InputSpec(path=folder, rename={"title": "text", "category": "label"})


@job("ingest-texts")
def texts_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """Ingest the labeled texts (``inputs.texts``) into ``texts`` and ``texts_quarantine``."""
    counts = ingest_one(ctx, tr, TEXTS, texts_input(ctx.cfg), None)
    return {f"texts.{k}": float(v) for k, v in counts.items()}


def _documents_set(cfg: AppConfig) -> None:
    """The documents job's preflight: raises ConfigError when ``inputs.documents`` is unset."""
    if cfg.inputs.documents is None:
        raise ConfigError(
            "nothing to ingest: set inputs.documents (doc_id, text, genre), e.g. "
            "../shared/data/brown/documents.csv (conf/genre_brown.yaml)"
        )


@job("ingest-documents", preflight=_documents_set)
def documents_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """Ingest ``inputs.documents`` (doc_id, text, genre) into ``documents`` and ``documents_quarantine``, and
    ``inputs.topic_corpus`` (doc_id, text) into ``topic_corpus`` when set."""
    metrics = {}
    for contract, spec in ((DOCUMENTS, ctx.cfg.inputs.documents), (TOPIC_CORPUS, ctx.cfg.inputs.topic_corpus)):
        if spec is not None:
            counts = ingest_one(ctx, tr, contract, spec, None)
            metrics.update({f"{contract.name}.{k}": float(v) for k, v in counts.items()})
    return metrics


def _multilabel_set(cfg: AppConfig) -> None:
    """The multilabel job's preflight: raises ConfigError when ``inputs.multilabel`` is unset."""
    if cfg.inputs.multilabel is None:
        raise ConfigError(
            "nothing to ingest: set inputs.multilabel (text, labels), e.g. "
            "../shared/data/semeval2018_ec "
            "with its 0/1 emotion columns as label_columns (conf/compositional_semeval.yaml)"
        )


@job("ingest-multilabel", preflight=_multilabel_set)
def multilabel_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """Ingest ``inputs.multilabel`` (text, labels[, example_id]) into ``multilabel`` and
    ``multilabel_quarantine`` (empty text, no labels, unknown labels, a bad 0/1 label column)."""
    counts = ingest_one(ctx, tr, MULTILABEL, ctx.cfg.inputs.multilabel, None)
    return {f"multilabel.{k}": float(v) for k, v in counts.items()}


def ingest_one(ctx: JobContext, tr: JobRun, contract: Contract, spec: InputSpec, taxonomy_df) -> dict[str, int]:
    """Validate one input and write its kept and quarantined rows; returns rows_in/kept/quarantined (of the
    rows this run read: only the appended ones on an incremental run) and ``incremental`` (1 or 0), or
    nothing when both tables already hold this input version's rows."""
    from pyspark import StorageLevel

    from common.data import duplicates, quarantine
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
    near_table = f"{contract.name}_near_duplicates"
    if tr.all_written(
        [contract.name, contract.quarantine_table] + ([near_table] if near else []), config_hash, inputs
    ):
        return {}
    mode = "overwrite" if raw.since is None else "append"
    # An appended row may copy one the table already keeps: the kept rows take part as earlier copies.
    # Pinned to its version: this run appends to that table before it writes the quarantine.
    prior = (
        ctx.lakehouse.read(contract.name, ctx.lakehouse.version(contract.name))
        if raw.since is not None and ctx.cfg.ingest.dedup.exact
        else None
    )
    validated = duplicates.with_duplicate_reasons(
        quarantine.with_reasons(raw.df, contract, ctx.cfg.ingest, taxonomy_df, spec.strip_markup, raw.malformed),
        contract,
        ctx.cfg.ingest,
        prior,
        raw.absent,
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # An incremental run may find no appended rows; a full one with none would empty the tables.
        by_reason = quarantine.reason_counts(validated, raw.location, allow_empty=raw.since is not None)
        n_in = sum(by_reason.values())
        n_rejected = sum(v for k, v in by_reason.items() if k is not None)
        valid = quarantine.kept(validated, contract, ctx.cfg.ingest)
        n_near = clusters = 0
        if near:
            valid, near_rows = _near_duplicates(ctx, contract, valid)
            written = tr.write(near_rows, near_table, config_hash, inputs)
            n_near, clusters = _near_counts(ctx.lakehouse.read(near_table, written.version))
        kept = tr.write(valid, contract.name, config_hash, inputs, mode)
        rejected = tr.write(
            quarantine.rejected(validated, contract), contract.quarantine_table, config_hash, inputs, mode
        )
    finally:
        validated.unpersist()
    n_kept = n_in - n_rejected - n_near
    for res, expected in ((kept, n_kept), (rejected, n_rejected)):
        if res.num_rows is not None and res.num_rows != expected:
            raise AccountingError(f"{contract.name}: wrote {res.num_rows} rows to {res.table}, expected {expected}")
    reasons = {k: v for k, v in sorted(by_reason.items(), key=lambda kv: -kv[1]) if k is not None}
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


_NEAR_KEY = "_near_key"


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
    job_name: str = NAME,
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


def dedup_lines(lakehouse, infos) -> list[str]:
    """``augment tables``' dedup report: for each ingested input, the latest quarantine version's exact
    duplicates, conflicting-label copies and repeated ids beside its rows in (kept + quarantined)."""
    from common.data.duplicates import report
    from common.data.quarantine import reason_kind_of
    from common.data.schemas import CONTRACTS

    rows = {info.name: info for info in infos}
    lines = []
    for contract in sorted({c.name: c for c in CONTRACTS.values()}.values(), key=lambda c: c.name):
        kept, rejected = rows.get(contract.name), rows.get(contract.quarantine_table)
        if kept is None or rejected is None:
            continue
        counts = report(lakehouse.value_counts(rejected.name, "reason", reason_kind_of))
        near = rows.get(f"{contract.name}_near_duplicates")
        n_in = (kept.num_rows or 0) + (rejected.num_rows or 0) + (near.num_rows or 0 if near else 0)
        lines.append(
            f"{contract.name + ':':<20} {n_in:>9} rows in, {counts['duplicate']} exact duplicates, "
            f"{counts['conflicting']} conflicting labels, {counts['repeated_id']} repeated ids"
            + (f", {near.num_rows} near duplicates" if near else "")
            + f" (v{rejected.version} of {rejected.name})"
        )
    return ["dedup report (ingest.dedup):", *lines] if lines else []


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
