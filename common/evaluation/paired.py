"""A method against its baseline on the same test rows: the effect, its interval and its standard error.

One test (:func:`paired`): a paired bootstrap over the test rows (Berg-Kirkpatrick et al., EMNLP 2012), a multinomial
draw over the cells (:mod:`common.evaluation.cells`). Several repeats (:func:`pooled`), each of which redrew what a
team's next run would redraw (the split, the generator's sampling seed, the sampled sources): the effect is the
mean over the repeats of each repeat's paired difference, its error the larger of the rows' noise (a bootstrap of
each repeat's rows) and the repeats' own spread (Student's t over R - 1 degrees of freedom), so the interval holds
the spread between runs as well as the test's own. With one repeat on a per-row metric (accuracy, the consistency
rate) the interval is McNemar's exact one (:func:`common.evaluation.power.mcnemar`), as the field reports a single
paired test.
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
    interval: str = "paired bootstrap"  # how the interval was made: the bootstrap, McNemar's, between repeats
    p_value: float = float("nan")  # McNemar's, where it made the interval

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


def observed(metric: str, cells: Cells) -> Optional[tuple[float, float]]:
    """(the candidate's, the champion's) ``metric`` on ``cells`` as observed, no resampling; None where the test set
    has no rows."""
    test = _test(metric, cells)
    return None if test is None else (test.candidate, test.champion)


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
    return _percentile(metric, test.candidate, test.champion, difference, test.n, 1, confidence)


def _percentile(
    metric: str, candidate: float, champion: float, effects: np.ndarray, n: int, repeats: int, confidence: float
) -> Optional[Paired]:
    """The comparison whose interval is the percentile interval at ``confidence`` of bootstrap ``effects`` (NaN draws
    left out) and whose standard error is their spread; None where no draw has a value."""
    effects = effects[~np.isnan(effects)]
    if not len(effects):
        return None
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(effects, [tail, 1.0 - tail])
    se = float(np.std(effects, ddof=1)) if len(effects) > 1 else float("nan")
    unit = METRICS[metric][0]
    return Paired(metric, candidate, champion, float(low), float(high), n, unit, se, repeats, confidence)


def pooled(
    metric: str,
    repeats: Sequence[Cells],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    same_rows: bool = False,
    tests: Optional[Sequence] = None,
) -> Optional[Paired]:
    """The method against its baseline on ``metric`` over ``repeats`` (each repeat's cells, both sides on the same
    rows). The effect is the mean of the repeats' paired differences. Its standard error is the larger of the rows'
    noise (a bootstrap of each repeat's rows; with ``same_rows``, repeats that only reseeded the classifier on one
    test, that noise is one test's, not divided among the repeats, and ``n`` counts that test once) and the spread
    between the repeats (their effects' variance over R, with Student's t at R - 1 degrees of freedom: what a next
    run that redraws the split and the generation would see). ``tests`` names each repeat's test where some repeats
    share one and others do not (genre transfer's seeds on each topic's test): repeats of one name are pooled as
    ``same_rows`` pools them, the names as independent tests weighed by their repeats. One repeat of a per-row metric
    (:data:`PER_ROW`) gets McNemar's exact interval instead. None where no repeat has a test row."""
    from scipy.stats import t as student

    names = list(tests) if tests is not None else [0 if same_rows else i for i in range(len(repeats))]
    found = [(name, t) for name, t in zip(names, (_test(metric, cells) for cells in repeats)) if t is not None]
    if not found:
        return None
    tests = [t for _, t in found]
    unit = METRICS[metric][0]
    # Each test counted once, however many repeats it served.
    n = sum({name: t.n for name, t in reversed(found)}.values())
    candidate = float(np.mean([t.candidate for t in tests]))
    champion = float(np.mean([t.champion for t in tests]))
    effect = candidate - champion
    if len(tests) == 1 and metric in PER_ROW:
        return _mcnemar(metric, tests[0], unit, confidence)
    rng = np.random.default_rng(seed)
    effects = _shared_draws(metric, found, resamples, rng)
    effects = effects[~np.isnan(effects)]
    if not len(effects):
        return None
    within = float(np.var(effects, ddof=1)) if len(effects) > 1 else 0.0
    tail = (1.0 - confidence) / 2
    # The spread between independent tests: each name's mean effect where names group repeats on one test (its
    # repeats are not independent of each other), else each repeat's.
    spread = _test_effects(found)
    if len(spread) > 1:
        between = float(np.var(spread, ddof=1)) / len(spread)
        if between > within:
            half = float(student.ppf(1.0 - tail, len(spread) - 1)) * math.sqrt(between)
            return Paired(
                metric, candidate, champion, effect - half, effect + half, n, unit, math.sqrt(between),
                len(tests), confidence, "between repeats (t)",
            )  # fmt: skip
    return _percentile(metric, candidate, champion, effects, n, len(tests), confidence)


def _test_effects(found: Sequence[tuple]) -> list[float]:
    """The effects whose spread is the spread between runs: one per test name of ``found`` (test name, repeat's
    test) where there are several names (the mean of its repeats), else one per repeat (one test's repeats:
    their spread is the classifier's, the only one there is)."""
    groups: dict = {}
    for name, test in found:
        groups.setdefault(name, []).append(test.candidate - test.champion)
    if len(groups) > 1:
        return [float(np.mean(effects)) for effects in groups.values()]
    return [e for effects in groups.values() for e in effects]


def _shared_draws(metric: str, found: Sequence[tuple], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap draws of the mean effect over ``found`` (test name, repeat's test): each test's repeats' draws are
    of one test's rows, so their noise is that test's, not averaged away by their number; the tests are independent
    and weigh as many repeats as they served."""
    groups: dict = {}
    for name, test in found:
        groups.setdefault(name, []).append(test)
    total = len(found)
    combined = np.zeros(resamples)
    weight = np.zeros(resamples)
    for repeats in groups.values():
        draws = np.nanmean(np.stack([_row_draws(metric, t, resamples, rng) for t in repeats]), axis=0)
        if len(repeats) > 1:
            centre = float(np.mean([t.candidate - t.champion for t in repeats]))
            draws = centre + (draws - np.nanmean(draws)) * math.sqrt(len(repeats))
        share = len(repeats) / total
        combined += np.where(np.isnan(draws), 0.0, share * draws)
        weight += np.where(np.isnan(draws), 0.0, share)
    return np.divide(combined, weight, out=np.full(resamples, np.nan), where=weight > 0)


def _mcnemar(metric: str, test: _Test, unit: str, confidence: float) -> Paired:
    """One test of a per-row metric: McNemar's exact conditional interval (:func:`common.evaluation.power.mcnemar`)
    and its p value."""
    from common.evaluation.power import mcnemar

    b, c = _discordant(test)
    found = mcnemar(b, c, test.n, confidence)
    return Paired(
        metric, test.candidate, test.champion, found.low, found.high, test.n, unit, found.se, 1, confidence,
        "McNemar", found.p_value,
    )  # fmt: skip


def _discordant(test: _Test) -> tuple[int, int]:
    """(rows the candidate holds and the champion does not, rows the champion holds and the candidate does not) of
    a per-row metric's cells (accuracy's (right, right) cells, the consistency rate's (alike, alike))."""
    b = sum(int(c) for k, c in zip(test.keys, test.counts) if bool(k[0]) and not bool(k[1]))
    c = sum(int(c) for k, c in zip(test.keys, test.counts) if bool(k[1]) and not bool(k[0]))
    return b, c
