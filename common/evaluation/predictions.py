"""Per-row predictions as a results job keeps them, the paired cells read off them in Spark, and each method's
Evidence against its baseline.

A results job writes every classifier's test predictions as one long table (:data:`PREDICTIONS_SCHEMA`: method,
repeat, test set, row key, gold, prediction), so any later method (CGA after consistency-train) pairs with the
baseline's predictions on the same rows without its models. :func:`paired_cells` joins each method's rows to the
baseline's of the same repeat and counts the distinct outcomes: what reaches the driver grows with the cells
(labels cubed at worst), never with the rows. :func:`cells_by_run` and :func:`evidence` are pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

from common.evaluation.cells import Cells
from common.evaluation.evidence import Evidence
from common.evaluation.paired import observed, pooled
from common.evaluation.papers import paper_effect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# One row per (method, repeat, test set, test row). ``test`` is "rows" (gold: the label, pred: the prediction) or
# "pairs" (gold empty, pred "1" where the classifier labels both titles of the pair alike, else "0").
PREDICTIONS_SCHEMA = "method string, repeat int, test string, key string, gold string, pred string"
# A results job's Evidence rows: one per method and metric.
EVIDENCE_SCHEMA = (
    "run_id string, method string, metric string, baseline double, value double, effect double, "
    "effect_low double, effect_high double, mde double, paper_effect double, verdict string, n_test long, "
    "repeats int, interval string, scope string"
)


def paired_cells(predictions: "DataFrame", baseline: str, by: Sequence[str] = ()) -> "DataFrame":
    """Each (method, repeat)'s outcomes paired with ``baseline``'s on the same rows of the same repeat (and the same
    values of the columns ``by``, e.g. the classifier model: a baseline of each), counted:
    ``(*by, method, repeat, test, gold, pred, base_pred, count)`` (the baseline paired with itself included, so its
    own metric values read off its cells too). Rows one side lacks are left out: both sides on the same rows."""
    from pyspark.sql import functions as F

    on = [*by, "repeat", "test", "key"]
    base = predictions.where(F.col("method") == baseline).select(*on, F.col("pred").alias("base_pred"))
    return predictions.join(base, on).groupBy(*by, "method", "repeat", "test", "gold", "pred", "base_pred").count()


def cells_by_run(rows: Iterable[Sequence], by: int = 0) -> dict[tuple, Cells]:
    """:func:`paired_cells`' collected rows as each (method, repeat)'s :data:`~common.evaluation.cells.Cells`; with
    ``by`` columns first, the repeat is the tuple (*their values, repeat)."""
    out: dict[tuple, dict[str, list]] = {}
    for row in rows:
        method, repeat, test, gold, pred, base_pred, count = row[by:]
        run = (*(str(v) for v in row[:by]), int(repeat)) if by else int(repeat)
        cells = out.setdefault((method, run), {"rows": [], "pairs": []})
        key = (gold, pred, base_pred) if test == "rows" else (pred == "1", base_pred == "1")
        cells[test].append((key, int(count)))
    return out


def value(metric: str, cells: Cells) -> float:
    """The method's own ``metric`` on its cells (NaN where the test set is empty)."""
    found = observed(metric, cells)
    return found[0] if found is not None else float("nan")


def evidence(
    cells: dict[tuple[str, int], Cells],
    pipeline: str,
    baseline: str,
    metrics: Sequence[str],
    split: Optional[str] = None,
    same_rows: bool = True,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    test_of: Optional[Callable[[Any], Any]] = None,
) -> dict[tuple[str, str], Evidence]:
    """Each method's Evidence against ``baseline`` on each of ``metrics``, pooled over its repeats
    (:func:`~common.evaluation.paired.pooled`; ``same_rows``: the repeats share one test; ``test_of(repeat)``: the
    test a repeat was scored on, where some share one and others not), beside the paper's effect
    (:func:`~common.evaluation.papers.paper_effect` of ``pipeline`` on ``split``). Keyed (method, metric); a method
    whose test is empty is left out."""
    out = {}
    for method in sorted({m for m, _ in cells if m != baseline}):
        runs = sorted(k for k in cells if k[0] == method)
        repeats = [cells[key] for key in runs]
        tests = [test_of(r) for _, r in runs] if test_of is not None else None
        for metric in metrics:
            comparison = pooled(metric, repeats, confidence, resamples, seed, same_rows, tests)
            if comparison is not None:
                out[(method, metric)] = Evidence.of(comparison, paper_effect(pipeline, method, metric, split))
    return out


def by_scope(cells: dict[tuple, Cells], scope_of: Callable[[Any], str]) -> dict[str, dict[tuple, Cells]]:
    """``cells`` split by the scope ``scope_of(repeat)`` names (e.g. the classifier model): each scope judged on its
    own."""
    out: dict[str, dict[tuple, Cells]] = {}
    for (method, repeat), c in cells.items():
        out.setdefault(scope_of(repeat), {})[(method, repeat)] = c
    return out


def evidence_rows(run_id: str, found: dict[tuple[str, str], Evidence], scope: str = "") -> list[tuple]:
    """``found`` (of one ``scope``) as rows of :data:`EVIDENCE_SCHEMA`."""
    rows = []
    for (method, metric), e in found.items():
        c = e.comparison
        rows.append(
            (
                run_id,
                method,
                metric,
                c.champion,
                c.candidate,
                c.difference,
                c.low,
                c.high,
                e.mde,
                e.paper,
                e.verdict(),
                c.n,
                c.repeats,
                c.interval,
                scope,
            )  # fmt: skip
        )
    return rows
