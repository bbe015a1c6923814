"""A method against its baseline on the same test rows: the effect, its interval and its standard error.

One test (:func:`paired`): a paired bootstrap over the test rows (Berg-Kirkpatrick et al., EMNLP 2012), a multinomial
draw over the cells (:mod:`common.evaluation.cells`). Several repeats (:func:`pooled`), each of which redrew what a
team's next run would redraw (the split, the generator's sampling seed, the sampled sources): a bootstrap of
each repeat's rows, the draws widened to the repeats' own spread where that is larger than their rows'
noise (the split and the generation redrawn move the effect too), so the interval holds the spread between runs as
well as the test's own; the effect is the mean over the repeats of each repeat's paired difference. With one
repeat on a per-row metric (accuracy, the consistency rate) the interval is McNemar's
(:func:`common.evaluation.power.mcnemar`), as the field reports a single paired test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from common.evaluation.cells import METRICS, Cells

# Resamples drawn at once: memory is this times the cells.
CHUNK = 256
# The metrics a row decides alone (right or wrong, alike or not): McNemar's interval serves one repeat of these.
PER_ROW = ("accuracy", "consistency_rate")


@dataclass(frozen=True)
class Paired:
    """Both sides' ``metric`` on the same ``n`` test rows (over ``repeats`` repeats: the means), the interval of
    their difference at ``confidence`` and its standard error ``se``. Side 1 is the method (the gate's candidate),
    side 2 the baseline (the gate's champion)."""

    metric: str
    candidate: float
    champion: float
    low: float
    high: float
    n: int
    unit: str = "rows"  # what n counts: test rows, or title pairs
    se: float = float("nan")
    repeats: int = 1
    confidence: float = 0.95
    interval: str = "paired bootstrap"  # how the interval was made: the bootstrap, or McNemar's

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


@dataclass(frozen=True)
class _Test:
    """One repeat's cells merged by what the metric reads: keys, counts, and both sides' observed values."""

    keys: list
    counts: np.ndarray
    candidate: float
    champion: float

    @property
    def n(self) -> int:
        return int(self.counts.sum())


def _test(metric: str, cells: Cells) -> Optional[_Test]:
    test_set, reduce, value = METRICS[metric]
    merged: dict[tuple, int] = {}
    for key, count in cells.get(test_set, ()):
        if int(count) > 0:
            merged[reduce(tuple(key))] = merged.get(reduce(tuple(key)), 0) + int(count)
    if not merged:
        return None
    keys = list(merged)
    counts = np.array(list(merged.values()), dtype=np.int64)
    observed = counts[None, :].astype(float)
    candidate, champion = float(value(keys, observed, 1)[0]), float(value(keys, observed, 2)[0])
    if math.isnan(candidate) or math.isnan(champion):
        return None
    return _Test(keys, counts, candidate, champion)


def _row_draws(metric: str, test: _Test, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``resamples`` bootstrap differences of one test: its rows redrawn (a multinomial over its cells)."""
    value = METRICS[metric][2]
    parts = []
    for start in range(0, resamples, CHUNK):
        draws = rng.multinomial(test.n, test.counts / test.n, size=min(CHUNK, resamples - start)).astype(float)
        parts.append(value(test.keys, draws, 1) - value(test.keys, draws, 2))
    return np.concatenate(parts)


def paired(metric: str, cells: Cells, confidence: float, resamples: int, seed: int) -> Optional[Paired]:
    """``metric`` of the candidate and of the champion on ``cells`` (one test set's outcomes), and the percentile
    interval at ``confidence`` of the difference over ``resamples`` paired bootstrap resamples (a multinomial draw
    of the rows over the cells, ``seed`` fixed); None where the test set has no rows."""
    test = _test(metric, cells)
    if test is None:
        return None
    difference = _row_draws(metric, test, resamples, np.random.default_rng(seed))
    difference = difference[~np.isnan(difference)]
    if not len(difference):
        return None
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(difference, [tail, 1.0 - tail])
    se = float(np.std(difference, ddof=1)) if len(difference) > 1 else float("nan")
    unit = METRICS[metric][0]
    return Paired(metric, test.candidate, test.champion, float(low), float(high), test.n, unit, se, 1, confidence)


def pooled(
    metric: str, repeats: Sequence[Cells], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Optional[Paired]:
    """The method against its baseline on ``metric`` over ``repeats`` (each repeat's cells: its own test rows,
    both sides on them). The effect is the mean of the repeats' paired differences; the interval at ``confidence``
    and the standard error come from a bootstrap of each repeat's rows, widened to the spread between the repeats
    where that is larger; one repeat of a per-row metric (:data:`PER_ROW`) gets McNemar's interval instead. None
    where no repeat has a test row."""
    from common.evaluation.power import mcnemar

    tests = [t for t in (_test(metric, cells) for cells in repeats) if t is not None]
    if not tests:
        return None
    unit = METRICS[metric][0]
    n = sum(t.n for t in tests)
    candidate = float(np.mean([t.candidate for t in tests]))
    champion = float(np.mean([t.champion for t in tests]))
    if len(tests) == 1 and metric in PER_ROW:
        b, c = _discordant(tests[0])
        test = mcnemar(b, c, tests[0].n, confidence)
        low, high = candidate - champion + (test.low - test.effect), candidate - champion + (test.high - test.effect)
        return Paired(metric, candidate, champion, low, high, n, unit, test.se, 1, confidence, "McNemar")
    rng = np.random.default_rng(seed)
    draws = np.stack([_row_draws(metric, t, resamples, rng) for t in tests])  # repeats x resamples
    effects = np.nanmean(draws, axis=0)
    effects = effects[~np.isnan(effects)]
    if not len(effects):
        return None
    effect = candidate - champion
    within = float(np.var(effects, ddof=1)) if len(effects) > 1 else 0.0
    if len(tests) > 1 and within > 0:
        # The repeats' own spread, when larger than their rows' noise alone, is what a next run would see: the
        # split and the generation redrawn move the effect too. Widen the draws to it (method of moments: the
        # variance of the mean over R repeats is max(between-repeat variance, mean within-repeat variance) / R).
        between = float(np.var([t.candidate - t.champion for t in tests], ddof=1)) / len(tests)
        if between > within:
            effects = effect + (effects - effects.mean()) * math.sqrt(between / within)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(effects, [tail, 1.0 - tail])
    se = float(np.std(effects, ddof=1)) if len(effects) > 1 else float("nan")
    return Paired(metric, candidate, champion, float(low), float(high), n, unit, se, len(tests), confidence)


def _discordant(test: _Test) -> tuple[int, int]:
    """(rows the candidate holds and the champion does not, rows the champion holds and the candidate does not) of
    a per-row metric's cells (accuracy's (right, right) cells, the consistency rate's (alike, alike))."""
    b = sum(int(c) for k, c in zip(test.keys, test.counts) if bool(k[0]) and not bool(k[1]))
    c = sum(int(c) for k, c in zip(test.keys, test.counts) if bool(k[1]) and not bool(k[0]))
    return b, c
