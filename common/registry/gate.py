"""The promotion gate: whether the shipped candidate takes the alias from the champion. Pure functions of the two
artifacts' predictions on the same test rows, so the rule is tested on its own and :mod:`common.registry.ship`
only applies it.

The predictions arrive as :data:`~common.evaluation.cells.Cells` (per test set, each distinct outcome with its
count), and the gate judges them with the evaluation layer's paired bootstrap
(:func:`common.evaluation.paired.paired`), the statistic every method's results use too: the gate's cost grows with
the distinct cells, never with the rows, and the driver holds no row.

The candidate wins when the lower bound of the paired bootstrap interval of (candidate - champion) on the
pipeline's metric (:data:`RULES`, the paper's) exceeds ``margin``, and, where the rule has a guard metric, the
guard's interval does not lie wholly below ``-margin`` (CST must not buy consistency with a significant loss of
F1). One seed is enough: both sides are the artifacts that serve, on the same rows.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from common.evaluation.cells import Cells
from common.evaluation.paired import paired
from common.registry.naming import SHIPPING_PIPELINES


@dataclass(frozen=True)
class Measure:
    """One metric of one recipe over its seeds: mean, sample standard deviation (0 for one seed), seeds. What the
    results table and the summary report; the gate judges artifacts, not these."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Measure":
        """The measure of per-seed ``values``."""
        values = [float(v) for v in values]
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values))

    def text(self) -> str:
        return f"{self.mean:.4f} ± {self.std:.4f} (n={self.n})"


@dataclass(frozen=True)
class Rule:
    """A pipeline's gate: the ``metric`` to beat, and a ``guard`` metric that may not fall significantly."""

    metric: str
    guard: Optional[str] = None


# The papers' metrics: consistency for the consistency pipeline with weighted F1 as the guard (CST must not buy
# consistency with accuracy), accuracy for BoostAug, macro-F1 for genre transfer, exact-set accuracy for the
# compositional multi-label classifiers (its "accuracy" is exact-set accuracy).
RULES = {
    "consistency": Rule("consistency_rate", guard="f1_weighted"),
    "boostaug": Rule("accuracy"),
    "genre": Rule("macro_f1"),
    "compositional": Rule("accuracy"),
}
assert tuple(RULES) == SHIPPING_PIPELINES, "every shipping pipeline has its rule, and only those"


@dataclass(frozen=True)
class Decision:
    """The gate's verdict: ``promote`` or not, why in one line, and the figures it rests on (version tags)."""

    promote: bool
    reason: str
    figures: Mapping[str, str] = field(default_factory=dict)


def decide(
    rule: Rule,
    cells: Optional[Cells],
    margin: float = 0.0,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    champion_name: str = "the champion",
) -> Decision:
    """Whether the candidate takes the alias from the champion, from both artifacts' predictions on the same test
    rows (``cells``; None: there is no champion, and the first version takes it)."""
    if cells is None:
        return Decision(True, "first version: no champion yet")
    level = f"{confidence:.0%}"
    main = paired(rule.metric, cells, confidence, resamples, seed)
    if main is None:
        return Decision(False, f"no test rows to compare {rule.metric} on: the alias stays")
    figures = {**main.tags("gate"), "gate.confidence": str(confidence), "gate.margin": str(margin)}
    if main.low <= margin:
        return Decision(
            False, f"{main.text(champion_name)} ({level}): its lower bound does not exceed {margin:.4f}", figures
        )
    if rule.guard:
        guard = paired(rule.guard, cells, confidence, resamples, seed + 1)
        if guard is None:
            return Decision(False, f"no test rows to compare {rule.guard} on: the alias stays", figures)
        figures.update(guard.tags("gate.guard"))
        if guard.high < -margin:
            return Decision(
                False,
                f"{rule.metric} gains but {guard.text(champion_name)} ({level}): it falls beyond {margin:.4f}",
                figures,
            )
    return Decision(True, f"{main.text(champion_name)} ({level}) beats it by more than {margin:.4f}", figures)
