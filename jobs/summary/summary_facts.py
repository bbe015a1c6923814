"""The figures a results summary shows under a pipeline's table: the run behind the results (CGA's D_aug and two of
its titles beside their sources, the matcher's queries and click log) and how many test examples each figure
rests on, each counted from the table version beside it (the results table, or an input its commit names); and each
method's evidence rows (:func:`evidence_rows`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from common.platform.lakehouse.tables import Commit
from common.platform.runner.job import JobContext, JobRun

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Fact = tuple[str, str, str]  # (figure, value, the table version it was counted from)
SAMPLE_CHARS = 160  # one screen: longer texts are cut with an ellipsis
TITLE_CHARS = 70  # a CGA title and its variant on one line
AUGMENTED = "cga_augmented"  # D_aug: the titles CGA added to D_L, each with its source title and score
# Each results table's test side, as (input table, filter or None, what a row is): the examples its figures rest on.
TEST_SETS = {
    "consistency_results": (
        ("accuracy_test", None, "titles (F1)"),
        ("consistency_test", None, "title pairs (consistency)"),
    ),
    "boostaug_results": (("boostaug_texts", "split = 'test'", "texts"),),
}


def test_facts(
    ctx: JobContext, table: str, version: int, results: "DataFrame", commit: Optional[Commit] = None
) -> list[Fact]:
    """How many test examples ``table`` version ``version``'s figures rest on: for a table of :data:`TEST_SETS`,
    counted from the test tables its data ``commit`` names (none when None); else from ``results`` (the
    version's rows) and their ``n_test`` column per split, when they have one."""
    from pyspark.sql import functions as F

    if table not in TEST_SETS:
        if "n_test" not in results.columns:
            return []
        split = "split_kind" if "split_kind" in results.columns else None
        # One row per split: bounded.
        rows = results.groupBy(*([split] if split else [])).agg(F.max("n_test").alias("n")).collect()
        return [
            (
                f"test examples per figure{f' ({r[split]} split)' if split else ''}",
                f"{r['n']:,}",
                f"`{table}` v{version}",
            )
            for r in sorted(rows, key=lambda r: str(r[split]) if split else "")
        ]
    inputs, facts = commit_inputs(commit), []
    for test, where, what in TEST_SETS[table]:
        if test in inputs:
            rows = ctx.lakehouse.read(test, int(inputs[test]))
            n = (rows.filter(where) if where else rows).count()
            facts.append((f"test examples per figure: {what}", f"{n:,}", f"`{test}` v{inputs[test]}"))
    return facts


def cga_facts(ctx: JobContext, results: "DataFrame", version: int, commit: Optional[Commit]) -> list[Fact]:
    """Figures of the CGA run behind the ``cga`` rows: D_aug and the training set's size (``results``, the
    ``consistency_results`` version ``version`` the rows were read from), then the generator's samples, those
    neither empty nor a copy of their source (the candidates its threshold T chooses from) and its model
    version, counted from the ``cga_generated`` version that version's data ``commit`` names (none when its
    lineage lacks it or ``commit`` is None)."""
    from pyspark.sql import functions as F

    source = f"`consistency_results` v{version}"
    sizes = (
        results.filter(F.col("method") == "cga")
        .agg(F.max("n_augmented").alias("aug"), F.max("n_train").alias("train"))
        .first()
    )
    facts = [
        ("CGA titles added to D_L (D_aug)", f"{sizes['aug']:,}", source),
        ("CGA training rows (D_L and D_aug)", f"{sizes['train']:,}", source),
    ]
    facts += cga_added(ctx, commit)
    inputs = commit_inputs(commit)
    if "cga_generated" in inputs:
        at = int(inputs["cga_generated"])
        samples = ctx.lakehouse.read("cga_generated", at).filter(F.col("sample_idx") >= 0)
        counts = samples.agg(
            F.count(F.lit(1)).alias("n"), F.count(F.when(F.col("reason").isNull(), 1)).alias("scored")
        ).first()
        # One row per generator reaches the driver (one per run; the limit bounds a table of many).
        models = [r[0] for r in samples.select("model_version").distinct().orderBy("model_version").limit(3).collect()]
        where = f"`cga_generated` v{at}"
        facts += [
            ("CGA samples written by the generator", f"{counts['n']:,}", where),
            ("of which candidates for D_aug (not empty, not a copy of the source)", f"{counts['scored']:,}", where),
            ("CGA generator (model version)", ", ".join(f"`{m}`" for m in models if m) or "-", where),
        ]
    return facts


def cga_added(ctx: JobContext, commit: Optional[Commit]) -> list[Fact]:
    """Two titles CGA added to D_L beside the titles they were written from: from the ``cga_augmented`` version
    written by the same run as ``commit`` (a ``consistency_results`` data commit), the two lowest-scored at or
    above the median score (a typical kept variant, not the near copies at the top); empty when no such
    version."""
    from pyspark.sql import functions as F

    run = (commit.lineage or {}).get("run_id") if commit is not None else None
    if not run or not ctx.lakehouse.exists(AUGMENTED):
        return []
    at = next((c.version for c in ctx.lakehouse.history(AUGMENTED) if (c.lineage or {}).get("run_id") == run), None)
    if at is None:
        return []
    added = ctx.lakehouse.read(AUGMENTED, at)
    median = added.approxQuantile("score", [0.5], 0.001)
    if not median:
        return []
    # Spark's take-ordered: two rows reach the driver whatever D_aug's size.
    rows = added.filter(F.col("score") >= median[0]).orderBy("score", "item_id").limit(2).collect()
    return [
        (
            f"a title added to D_aug, beside its source (cosine {r['score']:.2f})",
            f"{cut(r['source_title'], TITLE_CHARS)} -> {cut(r['title'], TITLE_CHARS)}",
            f"`{AUGMENTED}` v{at}",
        )
        for r in rows
    ]


def commit_inputs(commit: Optional[Commit]) -> dict[str, str]:
    """The input tables and versions that ``commit``'s lineage names (empty when None or unknown)."""
    return dict((commit.lineage or {}).get("inputs", {})) if commit is not None else {}


def matcher_facts(ctx: JobContext, version: int, by: dict) -> list[Fact]:
    """Figures of the matcher's run: held-out queries and each variant's training tuples (``matcher_results``
    version ``version``), then the click log's tuples and queries and the query graph's reformulation pairs,
    counted from the versions of ``query_interactions`` and ``reformulation_pairs`` that version's commit
    names as its inputs (none when its lineage lacks them)."""
    from pyspark.sql import functions as F

    source = f"`matcher_results` v{version}"
    variants = {variant: r for (variant, _), r in by.items()}
    facts = []
    if "original" in variants:
        facts.append(("held-out queries", f"{variants['original']['queries']:,}", source))
    for variant in ("original", "augmented"):
        if variant in variants:
            facts.append((f"matcher training tuples, {variant}", f"{variants[variant]['tuples']:,}", source))
    inputs = commit_inputs(ctx.lakehouse.data_commit("matcher_results", version))
    counted = (
        ("query_interactions", "query", "click-log tuples (query, product)", "distinct queries"),
        ("reformulation_pairs", "source_query", "reformulation pairs (query graph)", "queries with a reformulation"),
    )
    for table, column, rows_name, distinct_name in counted:
        if table in inputs:
            at = int(inputs[table])
            row = (
                ctx.lakehouse.read(table, at)
                .agg(F.count(F.lit(1)).alias("n"), F.countDistinct(column).alias("d"))
                .first()
            )
            facts += [
                (rows_name, f"{row['n']:,}", f"`{table}` v{at}"),
                (distinct_name, f"{row['d']:,}", f"`{table}` v{at}"),
            ]
    return facts


def cut(text: str, chars: int = SAMPLE_CHARS) -> str:
    """``text`` on one line, at most ``chars`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


# The evidence figures the summary's metrics carry per method and metric.
EVIDENCE_FIGURES = ("effect", "effect_low", "effect_high", "mde")


def evidence_cells(row: Optional[dict], paper: bool = True) -> list[str]:
    """An evidence row's cells as a section shows them: the effect [95%], the MDE, the paper's effect (with
    ``paper``) and the verdict; ``-`` each where there is none."""
    from common.platform.reports.results_pages import effect_cell, points

    cells = [effect_cell(row), points(row["mde"] if row else None)]
    if paper:
        cells.append(points(row["paper_effect"] if row else None, signed=True))
    return [*cells, row["verdict"] if row else "-"]


def record_evidence(metrics: dict[str, float], name: str, row: Optional[dict]) -> None:
    """Add an evidence row's figures (:data:`EVIDENCE_FIGURES`) to the summary's ``metrics`` as ``<name>.<figure>``."""
    if row is not None:
        metrics.update({f"{name}.{k}": row[k] for k in EVIDENCE_FIGURES})


def evidence_rows(
    ctx: JobContext,
    tr: JobRun,
    tables: Sequence[str],
    results: "DataFrame",
    scope: str = "",
    results_table: Optional[str] = None,
) -> dict:
    """The evidence rows (:data:`~common.evaluation.predictions.EVIDENCE_SCHEMA`) of ``scope`` (e.g.
    ``model=fasttext``; "" where a table judges one scope) of those of ``tables`` that exist, by (method, metric), of
    the runs that wrote ``results``' rows (a later run's evidence judges other results); where none did and
    ``results_table`` is given, those of an evidence version written from the same config as the results version
    (a run that found the results written, by an earlier run, but not the evidence). A row per method and metric
    reaches the driver. A later table's row replaces an earlier one's."""
    from pyspark.sql import functions as F

    runs = [r[0] for r in results.select("run_id").distinct().limit(64).collect()]
    same_config = None
    if results_table is not None:
        commit = ctx.lakehouse.data_commit(results_table, tr.versions[results_table])
        same_config = ((commit.lineage or {}) if commit else {}).get("config_hash")
    found = {}
    for table in tables:
        if not ctx.lakehouse.exists(table):
            continue
        rows = tr.read(table).where(F.col("run_id").isin(runs)).collect()
        if not rows and same_config is not None:
            commit = ctx.lakehouse.data_commit(table, tr.versions[table])
            if commit is not None and (commit.lineage or {}).get("config_hash") == same_config:
                rows = tr.read(table).collect()  # a row per method and metric
        found.update(
            {(r["method"], r["metric"]): r.asDict() for r in rows if (r.asDict().get("scope") or "") == scope}
        )
    return found
