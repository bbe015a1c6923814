"""The evaluation layer's statistics against ground truth: simulated paired outcomes with a known effect (pure numpy,
no Spark or Ray). Its intervals must cover the true effect about 95% of the time, its minimum detectable effect must
be the effect found 80% of the time, and McNemar's test and the paired bootstrap must agree on a worked example."""

from __future__ import annotations

import math

import numpy as np
import pytest

from common.evaluation.evidence import Evidence
from common.evaluation.paired import paired, pooled
from common.evaluation.papers import paper_effect
from common.evaluation.power import detectable_z, mcnemar, minimum_detectable, per_row_sd_of_rates, rows_needed


def _accuracy_cells(rng: np.random.Generator, n: int, base: float, effect: float, discordance: float, shift=0.0):
    """One test of ``n`` rows as accuracy cells (gold, method, baseline): the baseline right on ``base`` of the rows,
    the method on ``base + effect + shift`` (``shift``: this repeat's own draw of the split and the generation),
    ``discordance`` of the rows right on one side only."""
    e = effect + shift
    b, c = (discordance + e) / 2, (discordance - e) / 2  # method only, baseline only
    both = base - c  # right on both sides
    counts = rng.multinomial(n, [both, b, c, 1 - both - b - c])
    keys = [("y", "y", "y"), ("y", "y", "n"), ("y", "n", "y"), ("y", "n", "n")]
    return {"rows": list(zip(keys, counts.tolist()))}


def test_one_repeat_interval_covers_the_true_effect_95_percent_of_the_time():
    rng, effect, hits, sims = np.random.default_rng(1), 0.04, 0, 400
    for _ in range(sims):
        found = pooled("accuracy", [_accuracy_cells(rng, 500, 0.7, effect, 0.2)])
        assert found.interval == "McNemar" and found.repeats == 1
        hits += found.low <= effect <= found.high
    assert 0.92 <= hits / sims <= 0.98, hits / sims


def test_pooled_interval_covers_the_true_effect_95_percent_of_the_time():
    """Three repeats, each a test of its own rows: the rows' noise alone, and then with a spread between the repeats
    (their splits and generations redrawn) that the rows do not show."""
    rng, effect, sims = np.random.default_rng(2), 0.03, 300
    for spread, low_share in ((0.0, 0.92), (0.03, 0.88)):
        hits = 0
        for _ in range(sims):
            repeats = [_accuracy_cells(rng, 400, 0.7, effect, 0.2, rng.normal(0, spread)) for _ in range(3)]
            found = pooled("accuracy", repeats, resamples=400, seed=int(rng.integers(1 << 30)))
            assert found.repeats == 3 and found.interval == "paired bootstrap"
            hits += found.low <= effect <= found.high
        # With a spread between repeats, three repeats estimate it roughly: the share may fall a little below 95%.
        assert low_share <= hits / sims <= 0.995, (spread, hits / sims)


def test_the_minimum_detectable_effect_is_found_80_percent_of_the_time():
    n, base, discordance = 600, 0.7, 0.2
    # The MDE of this test: 2.80 standard errors, the standard error from one row's spread at that effect.
    effect = 0.05
    for _ in range(20):
        effect = detectable_z() * per_row_sd_of_rates(base, effect, discordance) / math.sqrt(n)
    rng, found, sims = np.random.default_rng(3), 0, 500
    for _ in range(sims):
        one = pooled("accuracy", [_accuracy_cells(rng, n, base, effect, discordance)])
        found += one.low > 0
        assert minimum_detectable(one.se) == pytest.approx(effect, rel=0.15)
    assert 0.74 <= found / sims <= 0.86, (effect, found / sims)
    assert rows_needed(effect, per_row_sd_of_rates(base, effect, discordance)) == pytest.approx(n, rel=0.02)


def test_mcnemar_and_the_paired_bootstrap_agree_on_a_worked_example():
    """500 rows: 30 the method alone gets right, 12 the baseline alone; McNemar says +3.6 points, significant; the
    bootstrap of the same cells, and scipy's own paired bootstrap of the rows' differences, give the same interval
    within a few tenths of a point."""
    from scipy.stats import bootstrap

    cells = {"rows": [(("y", "y", "y"), 320), (("y", "y", "n"), 30), (("y", "n", "y"), 12), (("y", "n", "n"), 138)]}
    test = mcnemar(30, 12, 500)
    assert test.effect == pytest.approx(0.036)
    assert test.p_value < 0.01 and test.low > 0
    ours = paired("accuracy", cells, 0.95, 4000, 0)
    assert ours.difference == pytest.approx(test.effect)
    assert ours.low == pytest.approx(test.low, abs=0.004) and ours.high == pytest.approx(test.high, abs=0.004)
    rows = np.repeat([0, 1, -1, 0], [320, 30, 12, 138])
    theirs = bootstrap((rows,), np.mean, confidence_level=0.95, n_resamples=4000, method="percentile", random_state=0)
    assert ours.low == pytest.approx(theirs.confidence_interval.low, abs=0.004)
    assert ours.high == pytest.approx(theirs.confidence_interval.high, abs=0.004)
    assert ours.se == pytest.approx(test.se, rel=0.1)
    # No discordant row: nothing to tell apart.
    assert mcnemar(0, 0, 100).p_value == 1.0 and mcnemar(0, 0, 100).low == 0.0
    with pytest.raises(ValueError):
        mcnemar(60, 50, 100)


def test_a_verdict_in_words_beside_the_papers_effect():
    cga = paper_effect("consistency", "cga", "consistency_rate")
    # The catalog: already at 0.91 consistency, the paper's +3.3 points from 0.738 is about 1.1 points.
    assert cga.scaled(0.91) == pytest.approx(0.0113, abs=0.0005)
    assert cga.scaled(None) == pytest.approx(0.033)
    cells = {"pairs": [((True, True), 480), ((True, False), 40), ((False, True), 25), ((False, False), 20)]}
    small = Evidence.of(pooled("consistency_rate", [cells]), cga)
    assert small.direction == 0 and small.underpowered
    assert small.verdict().startswith("no difference this test can see (it sees ≥ ")
    assert "underpowered: sees ≥ " in small.verdict() and "the paper's effect is +" in small.verdict()
    assert "MDE" in small.line() and "paper +" in small.line() and "565 pairs" in small.line()
    big = {"pairs": [((True, True), 48000), ((True, False), 4000), ((False, True), 2500), ((False, False), 2000)]}
    better = Evidence.of(pooled("consistency_rate", [big]), cga)
    assert better.direction == 1 and better.verdict() == "better" and not better.underpowered
    worse = Evidence.of(pooled("consistency_rate", [{"pairs": [((False, True), 4000), ((True, True), 48000)]}]))
    assert worse.direction == -1 and worse.verdict() == "worse" and worse.paper is None
    assert set(better.metrics("cga.consistency_rate")) >= {"cga.consistency_rate.effect", "cga.consistency_rate.mde"}
    assert better.columns()["verdict"] == "better"
    assert paper_effect("boostaug", "eda", "accuracy") is None
