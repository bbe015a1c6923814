"""Hierarchical fastText (HFT) prediction: the agreement rule over the level models, and a scorer on a local
model folder (``level_<i>.bin``, ``labels_<i>.json``). The suite's Spark and Ray prediction
(:mod:`common.models.classifiers.hft`) and a registered model both score with :func:`score_levels`."""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

from .text import normalize_title

SEPARATOR = " > "  # the suite's canonical category path: "A > B > C"


def truncate_label(label: str, level: int) -> str:
    """The first ``level`` levels of a canonical ``"A > B > C"`` label."""
    return SEPARATOR.join(label.split(SEPARATOR)[:level])


def hft_decide(predictions: Sequence[Sequence[tuple[str, float]]]) -> list[tuple[str, float, int]]:
    """Apply HFT's agreement rule to per-level predictions.

    ``predictions[i][k]`` is level ``i+1``'s (label, confidence) for text ``k``. Returns, per text,
    (label, confidence, level of the model whose prediction was returned).
    """
    depth = len(predictions)
    out = []
    for k in range(len(predictions[0])):
        label, conf = predictions[0][k]
        used = 1
        for level in range(2, depth + 1):
            nxt, nxt_conf = predictions[level - 1][k]
            if truncate_label(nxt, level - 1) != truncate_label(label, level - 1):
                break
            label, conf, used = nxt, nxt_conf, level
        out.append((label, conf, used))
    return out


def fasttext_module():
    """The ``fasttext`` module, its stderr warning on load silenced."""
    try:
        import fasttext
    except ImportError as exc:
        raise ImportError("fastText is needed: pip install fasttext-numpy2==0.10.4") from exc
    fasttext.FastText.eprint = lambda *args, **kwargs: None
    return fasttext


def load_level_files(folder: str, depth: int) -> tuple[list[Any], list[dict[str, str]]]:
    """The ``depth`` fastText level models and their label maps (fastText token -> label) in a local ``folder``."""
    fasttext = fasttext_module()
    models, maps = [], []
    for level in range(1, depth + 1):
        models.append(fasttext.load_model(os.path.join(folder, f"level_{level}.bin")))
        with open(os.path.join(folder, f"labels_{level}.json"), encoding="utf-8") as fh:
            maps.append(json.load(fh))
    return models, maps


def score_levels(
    models: Sequence[Any], maps: Sequence[dict[str, str]], texts: Sequence[str]
) -> list[tuple[str, float, int]]:
    """HFT predictions (label, confidence, level used) of raw ``texts`` by loaded level models."""
    clean = [normalize_title(t) for t in texts]
    per_level = []
    for model, label_map in zip(models, maps):
        tokens, probs = model.predict(clean, k=1)
        per_level.append([(label_map[t[0]], float(min(1.0, p[0]))) for t, p in zip(tokens, probs)])
    return hft_decide(per_level)
