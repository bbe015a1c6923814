"""P(y), the label-composition generator (paper 4): a sequence model over label phrases fit on the support
set's label sets, sampled for novel compositions.

The paper fine-tunes GPT2 on the concatenated label phrases. Here a label set is the sequence of its
labels in vocabulary order, from a start state to an end state, and the model is a first-order Markov
chain over that sequence with add-alpha smoothing: a label may follow only labels before it in the
vocabulary (so each set has one sequence), and smoothing keeps every allowed step possible, which is what
lets it propose compositions the support set never showed. The support set is small (N_s = 50 rows)
and the vocabulary is the label set's (11 emotions for SemEval), so the model lives on the driver.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

import numpy as np


class MarkovLabelModel:
    """Transition probabilities between start, the labels (vocabulary order) and end."""

    def __init__(self, vocabulary: Sequence[str], smoothing: float = 0.1):
        self.vocabulary = sorted(set(vocabulary))
        self.index = {label: i for i, label in enumerate(self.vocabulary)}
        self.smoothing = smoothing
        v = len(self.vocabulary)
        # States 0..v-1 are labels, v is start; columns 0..v-1 labels, v is end.
        self.counts = np.zeros((v + 1, v + 1))

    def _allowed(self) -> np.ndarray:
        v = len(self.vocabulary)
        allowed = np.zeros((v + 1, v + 1), dtype=bool)
        for i in range(v):
            allowed[i, i + 1 : v] = True  # to a later label
            allowed[i, v] = True  # or stop
        allowed[v, :v] = True  # start: to any label, never straight to the end (no empty set)
        return allowed

    def fit(self, label_sets: Iterable[Sequence[str]]) -> "MarkovLabelModel":
        """Count the transitions of each label set's sequence (unknown labels raise KeyError)."""
        v = len(self.vocabulary)
        for labels in label_sets:
            path = sorted(self.index[label] for label in set(labels))
            if not path:
                continue
            for a, b in zip([v] + path, path + [v]):
                self.counts[a, b] += 1
        return self

    @property
    def transitions(self) -> np.ndarray:
        """Row-stochastic transition matrix (start row last, end column last)."""
        allowed = self._allowed()
        weights = np.where(allowed, self.counts + self.smoothing, 0.0)
        sums = weights.sum(axis=1, keepdims=True)
        # A row that neither data nor smoothing reaches (smoothing 0): uniform over its allowed steps.
        weights = np.where(sums > 0, weights, allowed.astype(float))
        return weights / weights.sum(axis=1, keepdims=True)

    def probability(self, labels: Sequence[str]) -> float:
        """P(label set) under the chain."""
        p, v = self.transitions, len(self.vocabulary)
        path = sorted(self.index[label] for label in set(labels))
        return float(np.prod([p[a, b] for a, b in zip([v] + path, path + [v])]))

    def sample(self, rng: np.random.Generator, max_labels: int) -> tuple[str, ...]:
        """One label set (sorted names); sequences longer than ``max_labels`` are redrawn."""
        p, v = self.transitions, len(self.vocabulary)
        while True:
            state, path = v, []
            while True:
                state = int(rng.choice(v + 1, p=p[state]))
                if state == v:
                    break
                path.append(self.vocabulary[state])
            if len(path) <= max_labels:
                return tuple(path)


def sample_novel(
    model: MarkovLabelModel, seen: set[tuple[str, ...]], target: int, max_labels: int, max_draws: int, seed: int
) -> tuple[Counter, int]:
    """Draw label sets until ``target`` draws were novel (not in ``seen``, the training compositions) or
    ``max_draws`` were made. Returns (accepted draws per label set, total draws)."""
    rng = np.random.default_rng(seed)
    accepted: Counter = Counter()
    draws = 0
    while sum(accepted.values()) < target and draws < max_draws:
        labels = model.sample(rng, max_labels)
        draws += 1
        if labels not in seen:
            accepted[labels] += 1
    return accepted, draws
