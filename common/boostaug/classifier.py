"""fastText classifiers for BoostAug: the cross-boosting surrogates' model choice here; training and
evaluation in Ray tasks come from :mod:`common.models.classifiers.text_classifier`. The
surrogates of cross-boosting are saved in the HFT layout (``level_1.bin``, ``labels_1.json``) so Spark
scores candidates with :func:`common.models.classifiers.hft.predict_texts`.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from common.models.classifiers.text_classifier import LABEL, TEXT, _evaluate, _fit
from common.models.classifiers.training_rows import Source, read_rows


def choose_and_fit(
    train: Sequence[Source],
    validation: Sequence[Source],
    params: dict[str, Any],
    epochs: Sequence[int],
    seed: int,
    out_dir: str,
) -> dict[str, Any]:
    """Model choice on a validation set: one model per epoch count under ``<out_dir>/epoch-<n>`` (the HFT
    layout, so Spark scores with :func:`predict_texts`); the most accurate on ``validation`` wins (ties: fewer
    epochs). Without validation rows, the first epoch count. Returns the winner's figures with ``epoch``,
    ``val_accuracy`` and ``uri`` (its folder)."""
    rows, held_out = read_rows(train, TEXT, LABEL), read_rows(validation, TEXT, LABEL)
    best: Optional[dict[str, Any]] = None
    for epoch in epochs if held_out else epochs[:1]:
        folder = f"{out_dir.rstrip('/')}/epoch-{epoch}"
        figures = _fit(rows, {**params, "epoch": epoch}, seed, folder)
        if held_out:
            figures.update(_evaluate(folder, held_out))
        score = figures.get("accuracy", float("nan"))
        if best is None or score > best["val_accuracy"]:
            best = {**figures, "epoch": epoch, "val_accuracy": score, "uri": folder}
    assert best is not None
    return best
