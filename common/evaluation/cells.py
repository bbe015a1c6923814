"""A comparison's test outcomes as cells, and the metrics read off them.

Two classifiers compared on the same test rows give, per row, (gold, the method's prediction, the baseline's
prediction), a multi-label set written as its sorted labels joined by ``|``; on the consistency test a pair of titles
gives (the method predicts both alike, the baseline does). Accuracy, macro-F1, weighted F1 and the consistency rate
are functions of the counts of each distinct outcome (a cell), and rows with the same cell are interchangeable in
them, so a bootstrap resample of the rows is a multinomial draw over the cells: the cost grows with the distinct
cells, never with the rows, and the driver holds no row.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

# Per test set ("rows", "pairs"): (outcome, count) of each distinct outcome. Side 1 is the method (the candidate),
# side 2 the baseline (the champion).
Cells = Mapping[str, Sequence[tuple[tuple, int]]]


def _hits(key: tuple) -> tuple:
    """A row cell as (candidate right, champion right): all accuracy needs of it (at most four cells)."""
    return (key[0] == key[1], key[0] == key[2])


def _rate(keys: Sequence[tuple], counts: np.ndarray, side: int) -> np.ndarray:
    """The share of rows whose ``side`` (1: candidate, 2: champion) holds, in cells of (candidate's outcome,
    champion's outcome) booleans: accuracy of :func:`_hits` cells, the consistency rate of pairs cells."""
    total = counts.sum(axis=1)
    holds = np.array([bool(k[side - 1]) for k in keys], dtype=float)
    return np.divide(counts @ holds, total, out=np.full(len(counts), np.nan), where=total > 0)


def _by_class(counts: np.ndarray, index: np.ndarray, n_classes: int, cells: np.ndarray) -> np.ndarray:
    """(resamples x classes) sums of the ``counts`` columns ``cells`` grouped by their class ``index``: a sort and
    ``reduceat`` over the cells, never a (cells x classes) matrix."""
    out = np.zeros((len(counts), n_classes))
    if not len(cells):
        return out
    order = cells[np.argsort(index[cells], kind="stable")]
    classes = index[order]
    starts = np.flatnonzero(np.r_[True, classes[1:] != classes[:-1]])
    out[:, classes[starts]] = np.add.reduceat(counts[:, order], starts, axis=1)
    return out


def _f1(weighted: bool):
    """Macro-F1 (mean over the classes present as gold or prediction) or support-weighted F1 (classes only
    predicted weigh 0), as :mod:`common.models.classifiers.label_metrics` and ``metrics.weighted_f1`` define them."""

    def f1(keys: Sequence[tuple], counts: np.ndarray, side: int) -> np.ndarray:
        names = {c: i for i, c in enumerate(sorted({k[0] for k in keys} | {k[side] for k in keys}))}
        gold = np.array([names[k[0]] for k in keys])
        pred = np.array([names[k[side]] for k in keys])
        everything = np.arange(len(keys))
        support = _by_class(counts, gold, len(names), everything)
        predicted = _by_class(counts, pred, len(names), everything)
        tp = _by_class(counts, gold, len(names), np.flatnonzero(gold == pred))
        denominator = support + predicted
        scores = np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)
        if weighted:
            total = support.sum(axis=1)
            return np.divide((support * scores).sum(axis=1), total, out=np.full(len(counts), np.nan), where=total > 0)
        present = (denominator > 0).sum(axis=1)
        return np.divide(scores.sum(axis=1), present, out=np.full(len(counts), np.nan), where=present > 0)

    return f1


def _same(key: tuple) -> tuple:
    return key


# Each gate metric: the test set its cells come from, what of a cell it reads (cells alike in that are merged before
# resampling), and its value per row of a (resamples x cells) count matrix.
METRICS = {
    "accuracy": ("rows", _hits, _rate),
    "macro_f1": ("rows", _same, _f1(weighted=False)),
    "f1_weighted": ("rows", _same, _f1(weighted=True)),
    "consistency_rate": ("pairs", _same, _rate),
}
