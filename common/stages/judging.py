"""The judging stage: a results job's per-row test predictions kept as a Delta version, each method paired with its
baseline on the same rows in Spark (:func:`common.evaluation.predictions.paired_cells`: a handful of cells reach the
driver, never rows), and each method's Evidence written as a table, logged to the run and returned
(:func:`judge`). Predictions that Ray tasks made stay with Ray (small ones in the driver's object memory, never read
there as rows) until Ray's workers write them (:func:`write_task_predictions`)."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from common.platform.lakehouse.lakehouse import WriteResult
    from common.platform.runner.job import JobContext, JobRun

log = logging.getLogger(__name__)


def write_task_predictions(
    tr: "JobRun", refs: Sequence[Any], table: str, config_hash: str, by: Sequence[str] = ()
) -> "WriteResult":
    """The prediction tables Ray tasks returned (object refs of Arrow tables of one schema: the columns ``by``, then
    :data:`~common.evaluation.predictions.PREDICTIONS_SCHEMA`'s; the driver never reads them as rows) written as one
    version of ``table`` by Ray's workers; an empty version where no task ran."""
    if not refs:
        from common.evaluation.predictions import PREDICTIONS_SCHEMA

        schema = ", ".join([*(f"{c} string" for c in by), PREDICTIONS_SCHEMA])
        return tr.write(tr.ctx.spark.createDataFrame([], schema), table, config_hash)
    import ray.data

    return tr.write_ray(ray.data.from_arrow_refs(list(refs)), table, config_hash)


def judge(
    ctx: "JobContext",
    tr: "JobRun",
    rows: "DataFrame",
    table: str,
    config_hash: str,
    pipeline: str,
    baseline: str,
    metrics: Sequence[str],
    by: Sequence[str] = (),
    scope: Optional[Callable[[Any], str]] = None,
    test_of: Optional[Callable[[Any], Any]] = None,
    same_rows: bool = True,
    split: Optional[str] = None,
) -> tuple[dict, dict[str, dict]]:
    """Pair each method of the predictions ``rows`` (:data:`~common.evaluation.predictions.PREDICTIONS_SCHEMA`, with
    the columns ``by`` first) with ``baseline``'s rows of the same repeat and ``by`` values; judge each method on
    ``metrics`` within each scope (``scope(repeat)``: a name; one scope "" when None), pooled over its repeats
    (``same_rows``, ``test_of``: :func:`~common.evaluation.predictions.evidence`); write every Evidence as a version
    of ``table`` (:data:`~common.evaluation.predictions.EVIDENCE_SCHEMA`) and log it as MLflow metrics
    ``evidence.[<scope>.]<method>.<metric>.*``. Returns (cells by (method, repeat), evidence by scope, then by
    (method, metric))."""
    from common.evaluation.predictions import (
        EVIDENCE_SCHEMA,
        by_scope,
        cells_by_run,
        evidence,
        evidence_rows,
        paired_cells,
    )

    cells = cells_by_run(paired_cells(rows, baseline, by).collect(), len(by))
    found = {
        name: evidence(part, pipeline, baseline, metrics, split, same_rows, seed=ctx.cfg.seed, test_of=test_of)
        for name, part in sorted(by_scope(cells, scope or (lambda _: "")).items())
    }
    written = [row for name, judged in found.items() for row in evidence_rows(tr.run_id, judged, name)]
    tr.write(ctx.spark.createDataFrame(written, EVIDENCE_SCHEMA), table, config_hash)
    for name, judged in found.items():
        for (method, metric), e in judged.items():
            tr.log_metrics(e.metrics(metric_name("evidence", name, method, metric)))
            log.info("%s%s vs %s: %s", f"{name}: " if name else "", method, baseline, e.line())
    return cells, found


def metric_name(*parts: str) -> str:
    """An MLflow metric name of ``parts`` (empty ones left out), each with what MLflow refuses (``+``, ``=``, ``,``)
    written as ``_``."""
    return ".".join(re.sub(r"[^\w\-. /]", "_", p) for p in parts if p)


def evidence_text(found: dict[str, dict]) -> str:
    """Each method's evidence lines (``found`` as :func:`judge` returns it), as reports print them."""
    return "\n".join(
        f"{name + ': ' if name else ''}{method}: {e.line()}"
        for name, judged in found.items()
        for (method, _), e in sorted(judged.items())
    )
