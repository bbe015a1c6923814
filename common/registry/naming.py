"""Registered models' names, and the version tags that say what a version is (read back instead of parsing a
name: ``catalog_augment_boostaug_eda_boostaug`` splits more than one way)."""

from __future__ import annotations

import re

# The pipelines whose final classifiers can be registered, each with its evaluating job: the one list the gate's
# rules (common.registry.gate.RULES), the registry config and the jobs' candidates name.
SHIPPING_PIPELINES = ("consistency", "boostaug", "genre", "compositional")
# The version tags naming a version's pipeline, method and classifier kind.
PIPELINE_TAG, METHOD_TAG, CLASSIFIER_TAG = "pipeline", "method", "classifier"
# The kept classifier folder a version was registered from: what ``maintain`` may remove once it is registered.
FOLDER_TAG = "classifier.folder"


def word(text: str) -> str:
    """``text`` with every character other than letters, digits and ``_`` as ``_`` (what Unity Catalog allows in a
    model name, and MLflow in a model or metric name; ``eda+boostaug`` -> ``eda_boostaug``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def registered_name(prefix: str, pipeline: str, method: str) -> str:
    """``<prefix><pipeline>_<method>`` (:func:`word` of the pipeline and method)."""
    return prefix + word(f"{pipeline}_{method}")


def classifier_name(method: str, model: str) -> str:
    """``method``, and the classifier kind where it is not fastText: ``eda+boostaug``, ``eda+boostaug_encoder``."""
    return method if model == "fasttext" else f"{method}_{model}"
