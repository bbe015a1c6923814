"""Multi-label fastText prediction (one-vs-all sigmoids): each label's probability and the decision at a
threshold. The suite's compositional classifiers (:mod:`common.models.classifiers.multilabel`) and a registered
model of them both decide with these."""

from __future__ import annotations

from typing import Any, Sequence

from .text import normalize_title

LABEL_PREFIX = "__label__"  # fastText's label token: __label__<index into the model's label vocabulary>


def ova_probabilities(model: Any, labels: Sequence[str], texts: Sequence[str]) -> list[dict[str, float]]:
    """Each raw text's probability per label of a one-vs-all fastText ``model`` whose label tokens index
    ``labels``."""
    out = []
    for text in texts:
        names, probs = model.predict(normalize_title(text).replace("\n", " "), k=-1, threshold=0.0)
        out.append({labels[int(n[len(LABEL_PREFIX) :])]: float(p) for n, p in zip(names, probs)})
    return out


def decide(probabilities: dict[str, float], threshold: float) -> list[str]:
    """The labels at or above ``threshold``, or the most probable one when none is (a text has a label)."""
    chosen = sorted(label for label, p in probabilities.items() if p >= threshold)
    if not chosen and probabilities:
        chosen = [max(probabilities, key=lambda label: (probabilities[label], label))]
    return chosen
