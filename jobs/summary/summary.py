"""Job ``results-summary``: one screen of headline results, each method against its baseline.

Reads (whichever exist): ``consistency_results`` (weighted F1 and consistency rate per method and repeat:
baseline, CS-Blind, CST, CGA), ``matcher_results`` (query -> product matcher trained on the original vs
the augmented interaction log, precision/recall @k), ``boostaug_results`` (accuracy with unfiltered vs
filtered augmentation), ``genre_results`` (genre macro-F1 trained on-topic, off-topic, off-topic + synthetic)
and ``compositional_results`` (exact-set accuracy and Jaccard on the CG and iid splits per generator), and one
sample per generator from each generative method's generation table, and one line per registered model (its
champion and the newest version's gate decision). Aggregates them per method with Spark (a
handful of rows reach the driver), prints the summary with the report folders, and writes it to
``<lakehouse.root>/reports/summary.md`` (also an MLflow artifact). Each results table also gets its results
page (:mod:`common.platform.reports.results_pages`): ``<lakehouse.root>/reports/results/<pipeline>.md`` with the
pipeline's report charts, naming the table version its numbers come from, and the same page in
``results_pages_dir`` when the config sets one (the docs site's ``docs/results/<config>/``). Writes no table.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from common.platform.reports.results_pages import ResultsTable, page, text_block
from common.platform.runner.job import JobContext, JobRun, job
from common.registry.listing import registry_lines
from jobs import entry_point
from jobs.summary import summary_classifiers, summary_sections
from jobs.summary.summary_facts import cut
from jobs.summary.summary_tables import GENERATED, PAGES, PAPER

log = logging.getLogger(__name__)

NAME = "results-summary"


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """Summarise the result tables that exist and write their pages; returns each method's mean headline
    metric (and, for the matcher, precision@k per variant)."""
    metrics: dict[str, float] = {}
    sections = [
        build(ctx, tr, metrics)
        for table, build in summary_sections.SECTIONS + summary_classifiers.SECTIONS
        if ctx.lakehouse.exists(table)
    ]
    reports = Path(ctx.reports_dir(""))  # <root>/reports, or a scratch folder published to it
    if not sections:
        log.info("no result tables yet (%s): nothing to summarise", ", ".join(PAGES))
        return None
    blocks = [f"{text_block(s)}\n  for comparison, {PAPER[s.table]}" for s in sections]
    samples = _samples(ctx, tr)
    if samples:
        blocks.append(samples)
    models = registry_lines(ctx)
    if models:
        blocks.append(
            "Registered models (the gate's metric over the seeds; common.registry):\n"
            + "\n".join(f"  {cut(line, 220)}" for line in models)
        )
    folders = [ctx.reports.uri(name) for name in ctx.reports.names()]
    blocks.append("Reports (Markdown and charts): " + (", ".join(folders) or "none yet"))
    text = "\n\n".join(blocks)
    print("\n" + text + "\n", flush=True)
    reports.mkdir(parents=True, exist_ok=True)
    path = reports / "summary.md"
    path.write_text(f"# Results summary ({ctx.cfg.name})\n\n```\n{text}\n```\n", encoding="utf-8")
    tr.log_artifact(str(path), "report")
    targets = [reports / "results"] + ([Path(ctx.cfg.results_pages_dir)] if ctx.cfg.results_pages_dir else [])
    for section in sections:
        _write_page(ctx, section, targets)
    tr.log_artifacts(str(reports / "results"), "results")
    return metrics


def _write_page(ctx: JobContext, section: ResultsTable, folders: list[Path]) -> None:
    """Write ``section``'s page to ``<folder>/<pipeline>.md``, with its report charts in ``<folder>/<pipeline>/``,
    in each of ``folders`` (the page and its commit are made once)."""
    import shutil

    charts = [chart for report in PAGES[section.table][1] for chart in ctx.reports.files(report, ".png")]
    text = page(
        section,
        ctx.lakehouse.data_commit(section.table, section.version),
        ctx.cfg.name,
        [f"{section.pipeline}/{chart.name}" for chart in charts],
    )
    for folder in folders:
        for chart in charts:
            (folder / section.pipeline).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(chart, folder / section.pipeline / chart.name)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{section.pipeline}.md").write_text(text, encoding="utf-8")


def _samples(ctx: JobContext, tr: JobRun) -> Optional[str]:
    """One generated sample per generator of each generative method whose table exists: the row whose source
    is of median length among that generator's (ties: by source id, then sample), so a reader sees the typical
    input rather than the shortest (a model number among queries) and the same row from run to run; source and
    output side by side under the generator that wrote them (the model, how it learned the task, its version);
    None when no method generated."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from common.models.generator_summary import describe_generator

    lines = []
    for table, method, source, output, section in GENERATED:
        if not ctx.lakehouse.exists(table):
            continue
        generator = describe_generator(section(ctx.cfg).model, section(ctx.cfg).fine_tune)
        written = tr.read(table).filter(
            (F.col("sample_idx") >= 0) & F.col("reason").isNull() & (F.length(F.trim("generated_text")) > 0)
        )
        by_length = Window.partitionBy("model_version").orderBy(F.length("source_text"), "source_id", "sample_idx")
        rows_of = Window.partitionBy("model_version")
        # One row per generator reaches the driver (a few per method).
        rows = (
            written.withColumn("rank", F.row_number().over(by_length))
            .withColumn("n", F.count("*").over(rows_of))
            .filter("rank = floor((n + 1) / 2)")
            .orderBy("model_version")
            .select("source_text", "generated_text", "model_version")
            .limit(6)
            .collect()
        )
        for r in rows:
            lines.append(
                f"  {method} ({source} -> {output}), written by {generator} [{r['model_version']}]:\n"
                f"    {cut(r['source_text'])}\n    -> {cut(r['generated_text'])}"
            )
    if not lines:
        return None
    return "\n".join(
        ["Generated samples (one per generator; what the method's generator wrote, before its filter):", *lines]
    )


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
