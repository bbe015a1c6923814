"""Label metrics in plain Python over predictions already in memory (one model's test rows): accuracy and
macro-F1 of single-label predictions, Jaccard and the decision threshold of multi-label ones. The Spark
aggregates over whole prediction tables are :mod:`common.models.classifiers.metrics`. A leaf module: the classifiers
(:mod:`~common.models.classifiers.text_classifier`, :mod:`~common.models.classifiers.encoder_classifier`,
:mod:`~common.models.classifiers.multilabel`, :mod:`~common.models.classifiers.multilabel_encoder`) all import it and
it imports none
of them.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from common.pyfunc.multilabel import decide  # what a registered multi-label model decides with


def accuracy_and_macro_f1(gold: Sequence[str], predicted: Sequence[str]) -> tuple[float, float]:
    """Accuracy and macro-F1 (mean over the gold and predicted labels of per-label F1)."""
    if not gold:
        return float("nan"), float("nan")
    labels = sorted(set(gold) | set(predicted))
    f1s = []
    for label in labels:
        tp = sum(g == label and p == label for g, p in zip(gold, predicted))
        fp = sum(g != label and p == label for g, p in zip(gold, predicted))
        fn = sum(g == label and p != label for g, p in zip(gold, predicted))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(g == p for g, p in zip(gold, predicted)) / len(gold), sum(f1s) / len(f1s)


def scored(rows: Sequence[tuple[str, str]], predicted: Sequence[str], tag: Optional[Mapping[str, Any]] = None) -> Any:
    """{accuracy, macro_f1, n_test} of ``predicted`` labels of the (text, gold) test ``rows``; with ``tag`` (the
    constant columns naming the model: method, repeat, ...), also the predictions as an Arrow table of the
    evaluation layer's layout (:data:`common.evaluation.predictions.PREDICTIONS_SCHEMA` with the tag's other
    columns first, as strings), one row per test row keyed by its place in ``rows`` (sorted: the same test gives
    every model the same keys): (figures, table)."""
    gold = [g for _, g in rows]
    accuracy, macro_f1 = accuracy_and_macro_f1(gold, predicted)
    figures = {"accuracy": accuracy, "macro_f1": macro_f1, "n_test": len(rows)}
    if tag is None:
        return figures
    import pyarrow as pa

    n = len(rows)
    columns = {k: pa.array([str(v)] * n, pa.string()) for k, v in tag.items() if k not in ("method", "repeat")}
    columns |= {
        "method": pa.array([str(tag["method"])] * n, pa.string()),
        "repeat": pa.array([int(tag["repeat"])] * n, pa.int32()),
        "test": pa.array(["rows"] * n, pa.string()),
        "key": pa.array([f"{i:09d}" for i in range(n)], pa.string()),
        "gold": pa.array([str(g) for g in gold], pa.string()),
        "pred": pa.array([str(p) for p in predicted], pa.string()),
    }
    return figures, pa.table(columns)


# The multi-label decision thresholds tried on the validation rows.
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 20))


def jaccard(predicted: Sequence[str], gold: Sequence[str]) -> float:
    """|P ∩ G| / |P ∪ G| (1.0 when both are empty)."""
    p, g = set(predicted), set(gold)
    return len(p & g) / len(p | g) if p | g else 1.0


def best_threshold(probabilities: Sequence[dict[str, float]], gold: Sequence[Sequence[str]]) -> tuple[float, float]:
    """(threshold, mean Jaccard there): the threshold of :data:`THRESHOLDS` with the highest mean Jaccard on
    (probabilities, gold) (the lowest such on ties); (0.5, nan) without validation rows."""
    if not gold:
        return 0.5, float("nan")
    scores = {t: sum(jaccard(decide(p, t), g) for p, g in zip(probabilities, gold)) / len(gold) for t in THRESHOLDS}
    threshold = max(THRESHOLDS, key=lambda t: (scores[t], -t))
    return threshold, scores[threshold]
