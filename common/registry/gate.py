"""The promotion gate: whether the shipped candidate takes the alias from the champion. Pure functions of the two
artifacts' predictions on the same test rows, so the rule is tested on its own and :mod:`common.registry.ship`
only applies it.

The predictions arrive as :data:`Cells`: per test set, each distinct outcome with its count. A row of a
classifier's test set is (gold, the candidate's prediction, the champion's prediction), a multi-label set
written as its sorted labels joined by ``|``; a pair of the consistency test is (the candidate predicts both
titles alike, the champion does). Accuracy, macro-F1, weighted F1 and the consistency rate are functions of those
counts, and rows with the same cell are interchangeable in them, so a bootstrap resample of the rows is a
multinomial draw over the cells: the gate's cost grows with the distinct cells, never with the rows, and the
driver holds no row.

The candidate wins when the lower bound of the paired bootstrap interval of (candidate - champion) on the
pipeline's metric (:data:`RULES`, the paper's) exceeds ``margin``, and, where the rule has a guard metric, the
guard's interval does not lie wholly below ``-margin`` (CST must not buy consistency with a significant loss of
F1). One seed is enough: both sides are the artifacts that serve, on the same rows.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np

from common.registry.naming import SHIPPING_PIPELINES

# Per test set ("rows", "pairs"): (outcome, count) of each distinct outcome.
Cells = Mapping[str, Sequence[tuple[tuple, int]]]


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


def _hits(key: tuple) -> tuple:
    """A row cell as (candidate right, champion right): all accuracy needs of it (at most four cells)."""
    return (key[0] == key[1], key[0] == key[2])


def _rate(keys: Sequence[tuple], counts: np.ndarray, side: int) -> np.ndarray:
    """The share of rows whose ``side`` (1: candidate, 2: champion) holds, in cells of (candidate's outcome,
    champion's outcome) booleans: accuracy of :func:`_hits` cells, the consistency rate of pairs cells."""
    total = counts.sum(axis=1)
    holds = np.array([bool(k[side - 1]) for k in keys], dtype=float)
    return np.divide(counts @ holds, total, out=np.full(len(counts), np.nan), where=total > 0)


def _by_class(counts: np.ndarray, index: np.ndarray, n_classes: int, cells: np.ndarray) -> np.ndarray:
    """(resamples x classes) sums of the ``counts`` columns ``cells`` grouped by their class ``index``: a sort and
    ``reduceat`` over the cells, never a (cells x classes) matrix."""
    out = np.zeros((len(counts), n_classes))
    if not len(cells):
        return out
    order = cells[np.argsort(index[cells], kind="stable")]
    classes = index[order]
    starts = np.flatnonzero(np.r_[True, classes[1:] != classes[:-1]])
    out[:, classes[starts]] = np.add.reduceat(counts[:, order], starts, axis=1)
    return out


def _f1(weighted: bool):
    """Macro-F1 (mean over the classes present as gold or prediction) or support-weighted F1 (classes only
    predicted weigh 0), as :mod:`common.models.classifiers.label_metrics` and ``metrics.weighted_f1`` define them."""

    def f1(keys: Sequence[tuple], counts: np.ndarray, side: int) -> np.ndarray:
        names = {c: i for i, c in enumerate(sorted({k[0] for k in keys} | {k[side] for k in keys}))}
        gold = np.array([names[k[0]] for k in keys])
        pred = np.array([names[k[side]] for k in keys])
        everything = np.arange(len(keys))
        support = _by_class(counts, gold, len(names), everything)
        predicted = _by_class(counts, pred, len(names), everything)
        tp = _by_class(counts, gold, len(names), np.flatnonzero(gold == pred))
        denominator = support + predicted
        scores = np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)
        if weighted:
            total = support.sum(axis=1)
            return np.divide((support * scores).sum(axis=1), total, out=np.full(len(counts), np.nan), where=total > 0)
        present = (denominator > 0).sum(axis=1)
        return np.divide(scores.sum(axis=1), present, out=np.full(len(counts), np.nan), where=present > 0)

    return f1


def _same(key: tuple) -> tuple:
    return key


# Each gate metric: the test set its cells come from, what of a cell it reads (cells alike in that are merged before
# resampling), and its value per row of a (resamples x cells) count matrix.
METRICS = {
    "accuracy": ("rows", _hits, _rate),
    "macro_f1": ("rows", _same, _f1(weighted=False)),
    "f1_weighted": ("rows", _same, _f1(weighted=True)),
    "consistency_rate": ("pairs", _same, _rate),
}
# Resamples drawn at once: memory is this times the cells.
CHUNK = 256


@dataclass(frozen=True)
class Paired:
    """Both artifacts' ``metric`` on the same ``n`` test rows, and the bootstrap interval of their difference."""

    metric: str
    candidate: float
    champion: float
    low: float
    high: float
    n: int
    unit: str = "rows"  # what n counts: test rows, or title pairs

    @property
    def difference(self) -> float:
        return self.candidate - self.champion

    def text(self, champion_name: str) -> str:
        return (
            f"{self.metric} {self.candidate:.4f} vs {champion_name}'s {self.champion:.4f} on the same {self.n} "
            f"{self.unit}: {self.difference:+.4f}, interval [{self.low:+.4f}, {self.high:+.4f}]"
        )

    def tags(self, prefix: str) -> dict[str, str]:
        return {
            f"{prefix}.metric": self.metric,
            f"{prefix}.candidate": f"{self.candidate:.6f}",
            f"{prefix}.champion": f"{self.champion:.6f}",
            f"{prefix}.difference": f"{self.difference:+.6f}",
            f"{prefix}.interval": f"[{self.low:.6f}, {self.high:.6f}]",
            f"{prefix}.rows": str(self.n),
            f"{prefix}.unit": self.unit,
        }


def paired(metric: str, cells: Cells, confidence: float, resamples: int, seed: int) -> Optional[Paired]:
    """``metric`` of the candidate and of the champion on ``cells`` (one test set's outcomes), and the percentile
    interval at ``confidence`` of the difference over ``resamples`` paired bootstrap resamples (a multinomial draw
    of the rows over the cells, ``seed`` fixed); None where the test set has no rows."""
    test_set, reduce, value = METRICS[metric]
    merged: dict[tuple, int] = {}
    for key, count in cells.get(test_set, ()):
        if int(count) > 0:
            merged[reduce(tuple(key))] = merged.get(reduce(tuple(key)), 0) + int(count)
    if not merged:
        return None
    keys = list(merged)
    counts = np.array(list(merged.values()), dtype=np.int64)
    n = int(counts.sum())
    observed = counts[None, :].astype(float)
    candidate, champion = float(value(keys, observed, 1)[0]), float(value(keys, observed, 2)[0])
    rng, parts = np.random.default_rng(seed), []
    for start in range(0, resamples, CHUNK):
        draws = rng.multinomial(n, counts / n, size=min(CHUNK, resamples - start)).astype(float)
        parts.append(value(keys, draws, 1) - value(keys, draws, 2))
    difference = np.concatenate(parts)
    difference = difference[~np.isnan(difference)]
    if not len(difference) or math.isnan(candidate) or math.isnan(champion):
        return None
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(difference, [tail, 1.0 - tail])
    return Paired(metric, candidate, champion, float(low), float(high), n, test_set)


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
