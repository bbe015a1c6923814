"""What a test can see: the minimum detectable effect at a power, the test size an effect needs, and McNemar's test of
one paired comparison on a per-row metric.

The power functions are statsmodels' (a two-sided z test: ``NormalIndPower`` with ``ratio=0``, the one-sample case);
McNemar's p value is statsmodels' ``mcnemar`` (exact below 25 discordant rows). Card et al., "With Little Power Comes
Great Responsibility" (EMNLP 2020): most NLP comparisons are underpowered, and a test must say the smallest effect it
can see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALPHA = 0.05
POWER = 0.8


def detectable_z(alpha: float = ALPHA, power: float = POWER) -> float:
    """The effect, in standard errors of its estimate, that a two-sided test at ``alpha`` detects with ``power``
    (2.80 at 0.05 and 0.8)."""
    from statsmodels.stats.power import NormalIndPower

    return float(NormalIndPower().solve_power(effect_size=None, nobs1=1, alpha=alpha, power=power, ratio=0))


def minimum_detectable(se: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The minimum detectable effect of a test whose effect estimate has standard error ``se``: the smallest true
    effect it finds significant at ``alpha`` with probability ``power`` (NaN for an unknown ``se``, or 0: a test
    with no discordant row has no spread to see an effect by)."""
    if se is None or math.isnan(se) or se <= 0:
        return float("nan")
    return detectable_z(alpha, power) * se


def rows_needed(effect: float, per_row_sd: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Test rows a paired comparison needs to detect ``effect`` with ``power``, where one row's difference between
    the two sides has standard deviation ``per_row_sd`` (its standard error is then ``per_row_sd / sqrt(n)``)."""
    if effect == 0:
        return math.inf  # type: ignore[return-value]
    return math.ceil((detectable_z(alpha, power) * per_row_sd / abs(effect)) ** 2)


def per_row_sd_of_rates(base: float, effect: float, discordance: float) -> float:
    """The standard deviation of one row's paired difference on a per-row metric (right or wrong) where the
    baseline holds on ``base`` of the rows, the method on ``base + effect``, and ``discordance`` of the rows change
    (right on one side only): the difference is +1 or -1 on those rows and 0 elsewhere."""
    if not abs(effect) <= discordance <= max_discordance(base, effect):
        raise ValueError(
            f"discordance {discordance} outside [{abs(effect)}, {max_discordance(base, effect):.4f}] at base {base} "
            f"and effect {effect}: no such paired outcome"
        )
    return math.sqrt(discordance - effect**2)


def max_discordance(base: float, effect: float) -> float:
    """The largest share of rows that can be right on one side only when the baseline is right on ``base`` and the
    method on ``base + effect``: every right row of one side wrong on the other, as far as the wrong rows allow."""
    return min(2 * base + effect, 2 - 2 * base - effect)


@dataclass(frozen=True)
class McNemar:
    """McNemar's test of one paired comparison of ``n`` rows, ``b`` held by the method only and ``c`` by the
    baseline only: the effect (b - c) / n, its Wald interval at ``confidence``, its standard error, the p value."""

    b: int
    c: int
    n: int
    effect: float
    low: float
    high: float
    se: float
    p_value: float


def mcnemar(b: int, c: int, n: int, confidence: float = 0.95) -> McNemar:
    """McNemar's test of ``b`` rows the method holds alone and ``c`` the baseline holds alone among ``n``: the
    exact conditional interval (given the b + c discordant rows, b is binomial: Clopper-Pearson's interval of its
    share, carried to (b - c) / n), so it agrees with the exact test and never claims a difference from a handful of
    rows; the p value is statsmodels' (exact below 25 discordant rows, else the corrected chi-square)."""
    from scipy.stats import binomtest
    from statsmodels.stats.contingency_tables import mcnemar as statsmodels_mcnemar

    if n <= 0 or b < 0 or c < 0 or b + c > n:
        raise ValueError(f"no paired test of b={b}, c={c} discordant rows among n={n}")
    m, effect = b + c, (b - c) / n
    if not m:
        return McNemar(b, c, n, 0.0, 0.0, 0.0, 0.0, 1.0)
    share = binomtest(b, m).proportion_ci(confidence_level=confidence, method="exact")
    low, high = m * (2 * share.low - 1) / n, m * (2 * share.high - 1) / n
    se = math.sqrt(max(m - (b - c) ** 2 / n, 0.0)) / n
    p = float(statsmodels_mcnemar([[0, b], [c, 0]], exact=m < 25, correction=True).pvalue)
    return McNemar(b, c, n, effect, low, high, se, p)
