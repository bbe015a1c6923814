"""A comparison as a team reads it: the effect with its interval, the smallest effect the test can see, the paper's
effect beside it, and a verdict in words (STYLE 15). What the summary line, a results table's columns and an MLflow
run carry."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from common.evaluation.paired import Paired
from common.evaluation.papers import PaperEffect
from common.evaluation.power import POWER, minimum_detectable


@dataclass(frozen=True)
class Evidence:
    """``comparison`` (method vs baseline on the same rows, pooled over repeats), its minimum detectable effect at
    ``power`` (:func:`~common.evaluation.power.minimum_detectable`), and the paper's effect scaled to this
    baseline (None: the paper gives none)."""

    comparison: Paired
    mde: float
    paper: Optional[float] = None
    power: float = POWER

    @classmethod
    def of(cls, comparison: Paired, paper: Optional[PaperEffect] = None, power: float = POWER) -> "Evidence":
        """The evidence of ``comparison``, beside ``paper``'s effect scaled to its baseline."""
        mde = minimum_detectable(comparison.se, 1.0 - comparison.confidence, power)
        scaled = paper.scaled(comparison.champion) if paper is not None else None
        return cls(comparison, mde, scaled, power)

    @property
    def effect(self) -> float:
        return self.comparison.difference

    @property
    def direction(self) -> int:
        """+1 better (the interval above 0), -1 worse (below 0), 0 no difference this test can see (also where
        McNemar's test, when it made the interval, is not significant at the interval's level)."""
        c = self.comparison
        if not math.isnan(c.p_value) and c.p_value >= 1.0 - c.confidence:
            return 0
        if self.comparison.low > 0:
            return 1
        if self.comparison.high < 0:
            return -1
        return 0

    @property
    def underpowered(self) -> bool:
        """Whether the test cannot see the paper's effect: its MDE is larger (or unknown)."""
        return self.paper is not None and (math.isnan(self.mde) or self.mde > abs(self.paper))

    def verdict(self) -> str:
        """better, worse, or no difference this test can see (with the effect it sees), and underpowered where it
        cannot see the paper's effect."""
        words = {1: "better", -1: "worse"}.get(self.direction) or (
            f"no difference this test can see (it sees ≥ {_points(self.mde)} points)"
        )
        if self.underpowered:
            words += f"; underpowered: sees ≥ {_points(self.mde)}, the paper's effect is {_signed(self.paper)}"
        return words

    def line(self) -> str:
        """One line: effect [interval] in points, the MDE, the paper's effect, the verdict."""
        c = self.comparison
        paper = f", paper {_signed(self.paper)}" if self.paper is not None else ", paper: no figure"
        level = f"{c.confidence:.0%}"
        return (
            f"{c.metric} {c.champion:.4f} -> {c.candidate:.4f}: {_signed(c.difference)} points "
            f"[{_signed(c.low)}, {_signed(c.high)}] ({level}, {c.interval}, {c.n:,} {c.unit}, R={c.repeats}), "
            f"MDE {_points(self.mde)}{paper}: {self.verdict()}"
        )

    def metrics(self, prefix: str) -> dict[str, float]:
        """The figures as MLflow metrics under ``prefix``."""
        c = self.comparison
        out = {
            f"{prefix}.effect": c.difference,
            f"{prefix}.effect_low": c.low,
            f"{prefix}.effect_high": c.high,
            f"{prefix}.mde": self.mde,
            f"{prefix}.direction": float(self.direction),
            f"{prefix}.n_test": float(c.n),
            f"{prefix}.repeats": float(c.repeats),
        }
        if self.paper is not None:
            out[f"{prefix}.paper_effect"] = self.paper
        return out

    def columns(self) -> dict[str, object]:
        """The figures as a results table's columns (one row per method and metric)."""
        c = self.comparison
        return {
            "metric": c.metric,
            "effect": c.difference,
            "effect_low": c.low,
            "effect_high": c.high,
            "mde": self.mde,
            "paper_effect": self.paper,
            "verdict": self.verdict(),
            "n_test": c.n,
            "repeats": c.repeats,
        }


def _points(value: Optional[float]) -> str:
    return "?" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def _signed(value: Optional[float]) -> str:
    return "?" if value is None or math.isnan(value) else f"{100 * value:+.1f}"
