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

Here: the jobs, the inputs they read and ``augment tables``' dedup report; how one input is read, validated,
written and accounted for is :mod:`jobs.foundation.ingest_input`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from common.config import AppConfig
from common.data.config import InputSpec
from common.data.schemas import CATALOG_KINDS, CONTRACTS, DOCUMENTS, MULTILABEL, TEXTS, TOPIC_CORPUS
from common.platform.errors import ConfigError
from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.foundation.ingest_input import ingest_one

NAME = "ingest"
_DEMO_LANDING = {
    "labeled": "labeled_products",
    "catalog": "catalog",
    "interactions": "interactions",
    "products": "products",
}


def resolve_inputs(cfg: AppConfig) -> dict[str, InputSpec]:
    """The configured inputs by kind; with none configured, the demo landing files that exist."""
    from jobs.foundation.generate_demo import landing_dir

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
    from jobs.foundation.generate_demo import landing_dir

    if cfg.ingest.taxonomy:
        return cfg.ingest.taxonomy
    from common.platform.storage import exists

    demo_taxonomy = f"{landing_dir(cfg)}/taxonomy.txt"
    uses_demo = all(getattr(cfg.inputs, kind) is None for kind in CATALOG_KINDS)
    return demo_taxonomy if uses_demo and exists(demo_taxonomy) else None


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """Ingest every configured input; returns the table versions and the per-input row accounting."""
    from common.data.input_formats import file_version
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
    from jobs.foundation.generate_demo import landing_dir

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
