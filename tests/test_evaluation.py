"""The evaluation layer's statistics against ground truth: simulated paired outcomes with a known effect (pure numpy,
no Spark or Ray; the last test pairs a small predictions table in Spark). Its intervals must cover the true effect
about 95% of the time, its minimum detectable effect must be the effect found 80% of the time, and McNemar's test and
the paired bootstrap must agree on a worked example."""

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


PAPER = paper_effect("consistency", "cga", "consistency_rate")


def test_one_repeat_interval_covers_the_true_effect_95_percent_of_the_time():
    rng, effect, hits, sims = np.random.default_rng(1), 0.04, 0, 400
    for _ in range(sims):
        found = pooled("accuracy", [_accuracy_cells(rng, 500, 0.7, effect, 0.2)])
        assert found.interval == "McNemar" and found.repeats == 1
        hits += found.low <= effect <= found.high
    assert 0.93 <= hits / sims <= 0.99, hits / sims


def test_pooled_interval_covers_the_true_effect_95_percent_of_the_time():
    """Three and five repeats, each a test of its own rows: the rows' noise alone, and then with a spread between the
    repeats (their splits and generations redrawn) that the rows do not show: Student's t over the repeats covers
    it (the rows' noise alone covered 90% at three repeats, 72% at two)."""
    rng, effect, sims = np.random.default_rng(2), 0.03, 300
    for repeats in (3, 5):
        for spread in (0.0, 0.03):
            hits = 0
            for _ in range(sims):
                tests = [_accuracy_cells(rng, 400, 0.7, effect, 0.2, rng.normal(0, spread)) for _ in range(repeats)]
                found = pooled("accuracy", tests, resamples=400, seed=int(rng.integers(1 << 30)))
                assert found.repeats == repeats and found.interval != "McNemar"
                hits += found.low <= effect <= found.high
            assert 0.92 <= hits / sims <= 0.99, (repeats, spread, hits / sims)


def test_no_verdict_from_nothing():
    """What a handful of rows, repeats that disagree, or seeds on one test cannot show is never called better."""
    one_row = {"rows": [(("y", "y", "n"), 1)]}
    assert Evidence.of(pooled("accuracy", [one_row])).direction == 0
    few = {"rows": [(("y", "y", "n"), 4), (("y", "y", "y"), 996)]}  # McNemar's exact p is 0.125
    found = pooled("accuracy", [few])
    assert found.p_value == pytest.approx(0.125) and found.low < 0 < found.high
    assert Evidence.of(found).direction == 0
    none = Evidence.of(pooled("accuracy", [{"rows": [(("y", "y", "y"), 900), (("y", "n", "n"), 100)]}]))
    assert math.isnan(none.mde) and none.direction == 0 and "sees ≥ ?" in none.verdict()
    assert Evidence.of(pooled("accuracy", [{"rows": [(("y", "y", "y"), 900)]}]), PAPER).underpowered
    # Two repeats at +100 and 0 points: the spread between them is the evidence, and it is wide.
    apart = pooled("accuracy", [{"rows": [(("y", "y", "n"), 50)]}, {"rows": [(("y", "y", "y"), 50)]}])
    assert apart.interval == "between repeats (t)" and apart.low < 0 < apart.high
    # Five seeds scored on the same 500 rows are one test, not five: no narrower than it.
    cells = _accuracy_cells(np.random.default_rng(4), 500, 0.7, 0.02, 0.2)
    alone = pooled("accuracy", [cells])
    seeds = pooled("accuracy", [cells] * 5, same_rows=True)
    assert seeds.n == 500 and seeds.high - seeds.low >= 0.9 * (alone.high - alone.low)
    assert pooled("accuracy", [cells] * 5).high - pooled("accuracy", [cells] * 5).low < alone.high - alone.low


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
    # McNemar's exact interval is a little wider than the bootstrap's on 42 discordant rows.
    assert ours.low == pytest.approx(test.low, abs=0.005) and ours.high == pytest.approx(test.high, abs=0.005)
    rows = np.repeat([0, 1, -1, 0], [320, 30, 12, 138])
    theirs = bootstrap((rows,), np.mean, confidence_level=0.95, n_resamples=4000, method="percentile", random_state=0)
    assert ours.low == pytest.approx(theirs.confidence_interval.low, abs=0.004)
    assert ours.high == pytest.approx(theirs.confidence_interval.high, abs=0.004)
    assert ours.se == pytest.approx(test.se, rel=0.1)
    # No discordant row: nothing to tell apart.
    assert mcnemar(0, 0, 100).p_value == 1.0 and mcnemar(0, 0, 100).low == 0.0
    with pytest.raises(ValueError):
        mcnemar(60, 50, 100)
    with pytest.raises(ValueError):  # 3% right on the baseline cannot have 10% of rows right on one side only
        per_row_sd_of_rates(0.03, 0.003, 0.1)


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
    # A ratio carried to a high baseline stops at the metric's ceiling; compositional's figures are its CG split's.
    ls_pt = paper_effect("compositional", "label_prefix", "accuracy", "cg")
    assert ls_pt.scaled(0.996) == pytest.approx(0.004) and ls_pt.scaled(0.0256) == pytest.approx(0.0471, abs=1e-3)
    assert paper_effect("compositional", "label_prefix", "accuracy", "iid") is None


def test_predictions_pair_on_the_same_rows_and_judge_each_method(spark):
    """The predictions table's paired cells (Spark) and each method's evidence: a row the baseline lacks is left
    out, the baseline's own values read off its cells, and the method's effect is its paired difference."""
    from common.evaluation.predictions import PREDICTIONS_SCHEMA, cells_by_run, evidence, paired_cells, value

    rows = []
    for repeat in (0, 1):
        for i in range(40):
            gold = "a" if i % 2 else "b"
            rows.append(("baseline", repeat, "rows", f"r{i}", gold, gold if i < 20 else "x"))
            rows.append(("cst_full", repeat, "rows", f"r{i}", gold, gold if i < 30 else "x"))
            rows.append(("baseline", repeat, "pairs", f"g{i}", "", "1" if i < 24 else "0"))
            rows.append(("cst_full", repeat, "pairs", f"g{i}", "", "1" if i < 36 else "0"))
        rows.append(("cst_full", repeat, "rows", "only-cst", "a", "a"))  # no baseline row: not compared
    cells = cells_by_run(paired_cells(spark.createDataFrame(rows, PREDICTIONS_SCHEMA), "baseline").collect())
    assert set(cells) == {("baseline", 0), ("baseline", 1), ("cst_full", 0), ("cst_full", 1)}
    assert sum(c for _, c in cells[("cst_full", 0)]["rows"]) == 40
    assert value("accuracy", cells[("baseline", 1)]) == pytest.approx(0.5)
    assert value("consistency_rate", cells[("cst_full", 0)]) == pytest.approx(0.9)
    found = evidence(cells, "consistency", "baseline", ("accuracy", "consistency_rate"))
    assert set(found) == {("cst_full", "accuracy"), ("cst_full", "consistency_rate")}
    judged = found[("cst_full", "consistency_rate")]
    assert judged.effect == pytest.approx(0.3) and judged.comparison.n == 40 and judged.comparison.repeats == 2
    assert judged.direction == 1 and judged.paper is not None  # the paper's CST-full effect is beside it
    assert found[("cst_full", "accuracy")].paper is None  # the paper reports weighted F1, not accuracy


def test_repeats_that_share_a_test_are_pooled_as_one_test_each():
    """Genre transfer's seeds share each topic's test: four tests of three repeats each, the seeds alike (the rows'
    noise is all there is). Named by their test, the interval covers the true effect about 95% of the time; taken for
    twelve tests of their own it is too narrow. All repeats of one name are ``same_rows``; all names apart are not."""
    rng, effect, sims = np.random.default_rng(5), 0.03, 300
    names = [topic for topic in range(4) for _ in range(3)]
    hits = {"named": 0, "apart": 0}
    for _ in range(sims):
        tests = [_accuracy_cells(rng, 300, 0.7, effect, 0.2) for _ in range(4)]
        repeats = [tests[topic] for topic in names]
        seed = int(rng.integers(1 << 30))
        named = pooled("accuracy", repeats, resamples=400, seed=seed, tests=names)
        apart = pooled("accuracy", repeats, resamples=400, seed=seed)
        assert named.n == 4 * 300 and apart.n == 12 * 300
        hits["named"] += named.low <= effect <= named.high
        hits["apart"] += apart.low <= effect <= apart.high
    assert 0.92 <= hits["named"] / sims <= 0.99, hits
    assert hits["apart"] / sims < 0.85, hits
    # tests that disagree (-10 to +20 points), many seeds each: their spread is over four tests, not 36 repeats
    topics = [_accuracy_cells(rng, 300, 0.7, shift, 0.3) for shift in (-0.1, 0.0, 0.1, 0.2)]
    spread = pooled("accuracy", [t for t in topics for _ in range(9)], tests=[i for i in range(4) for _ in range(9)])
    assert spread.interval == "between repeats (t)" and spread.low < 0 < spread.high
    one = [_accuracy_cells(rng, 300, 0.7, effect, 0.2)] * 3
    assert pooled("accuracy", one, seed=3, tests=[0, 0, 0]) == pooled("accuracy", one, seed=3, same_rows=True)
    assert pooled("accuracy", one, seed=3, tests=[0, 1, 2]) == pooled("accuracy", one, seed=3)


def test_each_scope_pairs_with_its_own_baseline(spark):
    """With ``by`` columns (the classifier model), a method pairs with the baseline of its own model: the encoder's
    method against the encoder's baseline, never fastText's."""
    from common.evaluation.predictions import PREDICTIONS_SCHEMA, by_scope, cells_by_run, evidence, paired_cells

    rows = []
    for model, base_right, method_right in (("fasttext", 10, 30), ("encoder", 30, 10)):
        for i in range(40):
            rows.append((model, "none", 0, "rows", f"r{i}", "a", "a" if i < base_right else "b"))
            rows.append((model, "eda", 0, "rows", f"r{i}", "a", "a" if i < method_right else "b"))
    frame = spark.createDataFrame(rows, f"model string, {PREDICTIONS_SCHEMA}")
    cells = cells_by_run(paired_cells(frame, "none", ("model",)).collect(), 1)
    assert set(cells) == {(m, (model, 0)) for m in ("none", "eda") for model in ("fasttext", "encoder")}
    scopes = by_scope(cells, lambda run: run[0])
    effects = {
        s: evidence(c, "boostaug", "none", ("accuracy",))[("eda", "accuracy")].effect for s, c in scopes.items()
    }
    assert effects == pytest.approx({"fasttext": 0.5, "encoder": -0.5})
