"""The pyfunc loader of the suite's registered classifiers (MLflow's ``loader_module``).

A registered model's data folder holds the classifier's own files and ``model.json`` (:data:`MANIFEST`), which
names the kind:

- ``hft``: hierarchical (or, at depth 1, flat) fastText, ``level_<i>.bin`` and ``labels_<i>.json``; optional
  ``substitute`` [[pattern, token], ...], what the suite did to the training texts before fastText saw them (a
  CS-Blind model's colours and sizes, a genre classifier's non-letters), applied to each input in order.
  Predicts ``label``, ``confidence`` and ``level`` per text.
- ``multilabel``: one-vs-all fastText, ``model.bin``, ``labels`` and ``threshold``. Predicts ``labels`` (the
  decided set) and ``scores`` (each label's probability, in ``labels``' order of the manifest).
- ``encoder``: a fine-tuned encoder with a softmax head (:class:`.encoder.EncoderClassifier`: ``lm/``,
  ``classifier.safetensors``; ``labels``, ``max_length``, ``max_batch_tokens``). Predicts ``label`` and
  ``confidence``; optional ``substitute`` as for ``hft``.
- ``multilabel_encoder``: a fine-tuned encoder with a sigmoid per label (:class:`.encoder.EncoderMultiLabelClassifier`:
  ``encoder/``, ``head.safetensors``; ``labels``, ``threshold``, ``max_length``, ``max_batch_tokens``). Predicts
  ``labels`` and ``scores`` as ``multilabel`` does.

The encoder kinds import torch and transformers (on a GPU where torch sees one); the fastText kinds do not.

Input: a DataFrame with a ``text`` column (or a list of strings). The scoring is the suite's own
(:mod:`.hft`, :mod:`.multilabel`), so the predictions are the suite's.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Optional

from .hft import fasttext_module, load_level_files, score_levels
from .multilabel import decide, ova_probabilities

MANIFEST = "model.json"
TEXT = "text"


def _texts(model_input: Any) -> list[str]:
    import pandas as pd

    if isinstance(model_input, pd.DataFrame):
        if TEXT not in model_input.columns:
            raise ValueError(f"the input has no {TEXT!r} column (columns: {', '.join(map(str, model_input.columns))})")
        column = model_input[TEXT]
    elif isinstance(model_input, pd.Series):
        column = model_input
    else:
        column = pd.Series(list(model_input))
    return ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in column.tolist()]


def substitute(text: str, substitutions: list[list[str]]) -> str:
    """``text`` with each (pattern, token) substitution applied in order (a match becomes `` token ``), spaces
    collapsed and trimmed: what the suite's Spark columns (``common.catalog.blinding.blind_col``,
    ``common.genre.evaluation.clean_col``) do to the training texts."""
    for pattern, token in substitutions:
        text = re.sub(pattern, f" {token} ", text)
    return re.sub(r"\s+", " ", text).strip()


class HFTClassifier:
    """A loaded HFT model folder: ``predict`` gives label, confidence and level per text."""

    OUTPUTS = (("label", "string"), ("confidence", "double"), ("level", "long"))  # predict's columns and types
    TORCH = False  # whether the loader imports torch and transformers

    def __init__(self, folder: str, manifest: dict[str, Any]):
        self.models, self.maps = load_level_files(folder, int(manifest["depth"]))
        self.substitutions = manifest.get("substitute") or []

    def predict(self, model_input: Any, params: Optional[dict[str, Any]] = None):
        import pandas as pd

        texts = _texts(model_input)
        if self.substitutions:
            texts = [substitute(t, self.substitutions) for t in texts]
        out = score_levels(self.models, self.maps, texts) if texts else []
        return pd.DataFrame(
            {
                "label": [o[0] for o in out],
                "confidence": [o[1] for o in out],
                "level": pd.Series([o[2] for o in out], dtype="int64"),
            }
        )


def _label_sets(labels: list[str], threshold: float, probabilities: list[dict[str, float]]):
    import pandas as pd

    return pd.DataFrame(
        {
            "labels": [decide(p, threshold) for p in probabilities],
            "scores": [[p.get(label, 0.0) for label in labels] for p in probabilities],
        }
    )


class MultiLabelClassifier:
    """A loaded one-vs-all fastText model: ``predict`` gives the decided labels and every label's score."""

    OUTPUTS = (("labels", "list<string>"), ("scores", "list<double>"))
    TORCH = False

    def __init__(self, folder: str, manifest: dict[str, Any]):
        self.model = fasttext_module().load_model(os.path.join(folder, "model.bin"))
        self.labels = list(manifest["labels"])
        self.threshold = float(manifest["threshold"])

    def predict(self, model_input: Any, params: Optional[dict[str, Any]] = None):
        return _label_sets(
            self.labels, self.threshold, ova_probabilities(self.model, self.labels, _texts(model_input))
        )


class EncoderTextClassifier:
    """A loaded single-label encoder classifier: ``predict`` gives label and confidence per text."""

    OUTPUTS = (("label", "string"), ("confidence", "double"))
    TORCH = True

    def __init__(self, folder: str, manifest: dict[str, Any]):
        from .encoder import EncoderClassifier

        self.model = EncoderClassifier(folder, manifest)
        self.substitutions = manifest.get("substitute") or []

    def predict(self, model_input: Any, params: Optional[dict[str, Any]] = None):
        import pandas as pd

        texts = _texts(model_input)
        if self.substitutions:
            texts = [substitute(t, self.substitutions) for t in texts]
        out = self.model.classify(texts)
        return pd.DataFrame(
            {
                "label": pd.Series([o[0] for o in out], dtype="object"),
                "confidence": pd.Series([o[1] for o in out], dtype="float64"),
            }
        )


class EncoderLabelSetClassifier:
    """A loaded multi-label encoder classifier: ``predict`` gives the decided labels and every label's score."""

    OUTPUTS = (("labels", "list<string>"), ("scores", "list<double>"))
    TORCH = True

    def __init__(self, folder: str, manifest: dict[str, Any]):
        from .encoder import EncoderMultiLabelClassifier

        self.model = EncoderMultiLabelClassifier(folder, manifest)

    def predict(self, model_input: Any, params: Optional[dict[str, Any]] = None):
        model = self.model
        return _label_sets(model.labels, model.threshold, model.probabilities(_texts(model_input)))


# Each kind's loader class: it declares its outputs (the model's signature) and whether it needs torch (its pinned
# requirements, and the Ray workers that score it).
KINDS = {
    "hft": HFTClassifier,
    "multilabel": MultiLabelClassifier,
    "encoder": EncoderTextClassifier,
    "multilabel_encoder": EncoderLabelSetClassifier,
}
ENCODER_KINDS = tuple(kind for kind, loader in KINDS.items() if loader.TORCH)  # the kinds that import torch


def load(folder: str):
    """The classifier in a local model ``folder`` (its :data:`MANIFEST` names the kind)."""
    with open(os.path.join(folder, MANIFEST), encoding="utf-8") as fh:
        manifest = json.load(fh)
    kind = manifest.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{os.path.join(folder, MANIFEST)}: unknown classifier kind {kind!r} ({' | '.join(KINDS)})")
    return KINDS[kind](folder, manifest)


def _load_pyfunc(data_path: str):
    """MLflow's entry point: the model whose files MLflow copied to ``data_path``."""
    return load(data_path)
