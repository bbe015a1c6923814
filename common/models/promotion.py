"""The promotion gate: whether a new model version takes the alias from the current holder. Pure functions of
the two models' figures, so the rule is tested on its own and the registry only applies it
(:func:`common.models.registry.ship`).

A model's figures are its test metrics over its R seeds (:class:`Measure`: mean, sample std, n). The candidate
wins when its mean of the pipeline's metric (:data:`RULES`, the paper's) beats the champion's by more than the
margin (``std``: the larger of the two standard deviations; ``zero``: any gain) and, where the rule has a guard
metric, the guard does not fall by more than that metric's margin.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence


@dataclass(frozen=True)
class Measure:
    """One metric of one model over its seeds: mean, sample standard deviation (0 for one seed), seeds."""

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
    """A pipeline's gate: the ``metric`` to beat, and a ``guard`` metric that may not fall beyond its margin."""

    metric: str
    guard: Optional[str] = None


# The papers' metrics: consistency for the consistency pipeline with weighted F1 as the guard (CST must not buy
# consistency with accuracy), accuracy for BoostAug, macro-F1 for genre transfer, exact-set accuracy for the
# compositional multi-label classifiers (its "accuracy" is exact-set accuracy).
RULES = {"consistency": Rule("consistency_rate", guard="f1_weighted"), "boostaug": Rule("accuracy"),
         "genre": Rule("macro_f1"), "compositional": Rule("accuracy")}


@dataclass(frozen=True)
class Decision:
    """The gate's verdict: ``promote`` or not, and why in one line."""

    promote: bool
    reason: str


def margin_of(a: Measure, b: Measure, margin: str) -> float:
    """The gain a comparison of ``a`` and ``b`` must exceed: the larger std (``std``) or 0 (``zero``)."""
    return max(a.std, b.std) if margin == "std" else 0.0


def decide(rule: Rule, candidate: Mapping[str, Measure], champion: Optional[Mapping[str, Measure]],
           margin: str = "std", champion_name: str = "the champion") -> Decision:
    """Whether ``candidate`` takes the alias from ``champion`` (None: there is none, and the first version takes
    it). Both map metric names to :class:`Measure` on the same test table version."""
    if champion is None:
        return Decision(True, "first version: no champion yet")
    for name in filter(None, (rule.metric, rule.guard)):
        for who, figures in (("candidate", candidate), (champion_name, champion)):
            if name not in figures or math.isnan(figures[name].mean):
                return Decision(False, f"{who} has no {name}: the gate cannot compare, the alias stays")
    new, old = candidate[rule.metric], champion[rule.metric]
    need = margin_of(new, old, margin)
    gain = new.mean - old.mean
    if gain <= need:
        return Decision(False, f"{rule.metric} {new.text()} does not beat {champion_name}'s {old.text()} by more "
                               f"than {need:.4f} (gain {gain:+.4f})")
    if rule.guard:
        g_new, g_old = candidate[rule.guard], champion[rule.guard]
        allowed = margin_of(g_new, g_old, margin)
        if g_new.mean < g_old.mean - allowed:
            return Decision(False, f"{rule.metric} gains {gain:+.4f} but {rule.guard} {g_new.text()} falls below "
                                   f"{champion_name}'s {g_old.text()} by more than {allowed:.4f}")
    return Decision(True, f"{rule.metric} {new.text()} beats {champion_name}'s {old.text()} by {gain:+.4f} "
                          f"(> {need:.4f})")
