"""What each paper reports for the comparisons the suite repeats, and that effect scaled to a team's own baseline.

A rate's effect depends on where it starts: +3.3 points of consistency from 0.738 closes 12.6% of the inconsistent
pairs, which on a catalog already at 0.91 is about 1.1 points. So an effect is carried over as the paper's metric
allows: ``headroom`` (the share of the gap to 1 the method closed, for rates near their ceiling), ``relative`` (the
ratio to the baseline, for rates far from it or a relative figure the paper gives) or ``points`` (as reported).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class PaperEffect:
    """The paper's ``baseline`` and ``value`` of ``metric`` (0..1) for a method, how its effect carries over to
    another baseline (``scaling``), where the paper says it (``source``), and the split it was measured on
    (``split``: None, any)."""

    metric: str
    baseline: float
    value: float
    scaling: str  # "headroom", "relative" or "points"
    source: str
    split: Optional[str] = None

    @property
    def effect(self) -> float:
        """The effect the paper reports, in the metric's units."""
        return self.value - self.baseline

    def scaled(self, baseline: Optional[float]) -> float:
        """The paper's effect carried over to a run whose baseline is ``baseline`` (the paper's own when None), never
        past the metric's range: a rate cannot gain more than 1 - baseline nor lose more than baseline."""
        if baseline is None:
            return self.effect
        if self.scaling == "headroom":
            scaled = (self.value - self.baseline) / (1.0 - self.baseline) * (1.0 - baseline)
        elif self.scaling == "relative":
            scaled = (self.value / self.baseline - 1.0) * baseline
        else:
            scaled = self.effect
        return min(max(scaled, -baseline), 1.0 - baseline)


_CST = "paper 1 (METHODS.md §1), mean of 5 runs"
# (pipeline, method, metric) -> the paper's figure. Methods are named as the suite's results tables name them.
PAPER_EFFECTS: dict[tuple[str, str, str], PaperEffect] = {
    ("consistency", "cst_full", "consistency_rate"): PaperEffect("consistency_rate", 0.738, 0.813, "headroom", _CST),
    ("consistency", "cst_ss", "consistency_rate"): PaperEffect("consistency_rate", 0.738, 0.790, "headroom", _CST),
    ("consistency", "cga", "consistency_rate"): PaperEffect("consistency_rate", 0.738, 0.771, "headroom", _CST),
    ("consistency", "cs_blind", "consistency_rate"): PaperEffect("consistency_rate", 0.738, 0.740, "headroom", _CST),
    ("consistency", "cst_full", "f1_weighted"): PaperEffect("f1_weighted", 0.665, 0.654, "headroom", _CST),
    ("consistency", "cst_ss", "f1_weighted"): PaperEffect("f1_weighted", 0.665, 0.661, "headroom", _CST),
    ("consistency", "cga", "f1_weighted"): PaperEffect("f1_weighted", 0.665, 0.667, "headroom", _CST),
    ("consistency", "cs_blind", "f1_weighted"): PaperEffect("f1_weighted", 0.665, 0.664, "headroom", _CST),
    # +19.6% product accuracy of the semantic matcher (relative; METHODS.md §2).
    ("query", "augmented", "precision_at_1"): PaperEffect(
        "precision_at_1", 1.0, 1.196, "relative", "paper 2 (METHODS.md §2): +19.6% matcher product accuracy"
    ),
    # Table 4 at N = 1000: off-topic 66.8 macro-F1, +4 points augmented (+2.5 at N = 30 and 100).
    ("genre", "augmented", "macro_f1"): PaperEffect(
        "macro_f1", 0.668, 0.709, "headroom", "paper 5, Table 4 (N = 1000; +2.5 points at N = 30, 100)"
    ),
    # Table 2, SemEval's CG split, BERT: exact-set accuracy no augmentation 2.92%, LS-PT 8.29%, Flan-T5 8.01%,
    # Concat 3.25%.
    ("compositional", "label_prefix", "accuracy"): PaperEffect(
        "accuracy", 0.0292, 0.0829, "relative", "paper 4, Table 2 (SemEval CG split, LS-PT)", "cg"
    ),
    ("compositional", "t5_labels", "accuracy"): PaperEffect(
        "accuracy", 0.0292, 0.0801, "relative", "paper 4, Table 2 (SemEval CG split, Flan-T5)", "cg"
    ),
    ("compositional", "concat", "accuracy"): PaperEffect(
        "accuracy", 0.0292, 0.0325, "relative", "paper 4, Table 2 (SemEval CG split, Concat)", "cg"
    ),
}


def paper_effect(pipeline: str, method: str, metric: str, split: Optional[str] = None) -> Optional[PaperEffect]:
    """The paper's figure for ``method`` against its baseline on ``metric`` in ``pipeline`` on ``split`` (None:
    the paper reports none the suite repeats, e.g. BoostAug's, whose classifiers are LSTM and pretrained encoders,
    not fastText; or it measured another split: compositional's figures are its CG split's, not the iid one's)."""
    found = PAPER_EFFECTS.get((pipeline, method, metric))
    return found if found is not None and found.split in (None, split) else None
