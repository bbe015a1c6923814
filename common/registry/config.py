"""Registered models (the ``registry`` section): which pipelines ship their classifiers as MLflow models, what
they are named, and the gate that moves the alias (:mod:`common.registry.ship`, :mod:`common.registry.gate`).
Where the registry is, is the platform's ``tracking.registry_uri``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from common.platform.config import check
from common.registry.naming import SHIPPING_PIPELINES

# The classifier kinds of the pipelines' eval.models.
CLASSIFIERS = ("fasttext", "encoder")


@dataclass
class RegistryConfig:
    """Every shipping pipeline's final classifier per method, logged as an MLflow pyfunc model and registered as a
    new version of ``<name_prefix><pipeline>_<method>`` when a run trains it; the version takes ``alias`` only when
    it beats the current holder (the gate), or when it is the first."""

    # The pipelines that log and register their classifiers (consistency, boostaug, genre, compositional); []: none.
    pipelines: list[str] = field(default_factory=lambda: list(SHIPPING_PIPELINES))
    # Prepended to "<pipeline>_<method>": a registered model's name. On Unity Catalog a catalog and schema, e.g.
    # "main.catalog_augment." (three-level names).
    name_prefix: str = "catalog_augment_"
    # The pipelines whose new versions take the alias only through the gate; the others' every new version takes it.
    gate: list[str] = field(default_factory=lambda: list(SHIPPING_PIPELINES))
    # The alias a gate moves (what a serving endpoint or a batch scorer loads: models:/<name>@<alias>).
    alias: str = "champion"
    # How much better the shipped candidate must be than the champion on the same test rows: the lower bound of the
    # paired bootstrap interval of the metric's difference must exceed it (0: a gain the rows show, not noise).
    # The consistency pipeline's guard (weighted F1) blocks when its interval lies wholly below -margin.
    margin: float = 0.0
    # The two-sided confidence of that interval.
    confidence: float = 0.95
    # Bootstrap resamples of the test rows (drawn as counts of the rows' prediction cells: cost grows with the
    # distinct (label, prediction, prediction) cells, not with the rows).
    resamples: int = 2000
    # Seconds between setting the alias and reading it back: a run that finds another version there judges again
    # against it (MLflow has no conditional alias update; this closes the window two concurrent runs leave).
    settle_s: float = 0.25
    # How many times one version is judged again because the alias moved meanwhile, before it stays undecided.
    max_rejudge: int = 5
    # The classifier kinds that ship where a pipeline's eval.models trains them: an encoder model is the encoder's
    # full weights (MiniLM 90 MB, BERT-base 440 MB) per method (and per topic for genre); [fasttext]: the fastText
    # models alone.
    classifiers: list[str] = field(default_factory=lambda: list(CLASSIFIERS))

    def __post_init__(self) -> None:
        for key, names, known in (
            ("registry.pipelines", self.pipelines, SHIPPING_PIPELINES),
            ("registry.gate", self.gate, SHIPPING_PIPELINES),
            ("registry.classifiers", self.classifiers, CLASSIFIERS),
        ):
            unknown = sorted(set(names) - set(known))
            check(not unknown, key, f"unknown names {unknown}; known: {', '.join(known)}")
        check(
            bool(self.alias) and self.alias.replace("_", "").replace("-", "").isalnum(),
            "registry.alias",
            "must be a word (letters, digits, _ and -)",
        )
        check(0.0 <= self.margin < 1.0, "registry.margin", "must be in [0, 1): a metric's difference")
        check(0.5 <= self.confidence < 1.0, "registry.confidence", "must be in [0.5, 1)")
        check(self.resamples >= 100, "registry.resamples", "must be at least 100")
        check(
            self.settle_s >= 0 and self.max_rejudge >= 1,
            "registry.settle_s",
            "settle_s must be >= 0 and max_rejudge >= 1",
        )

    def check_names(self, registry_uri: Optional[str], tracking_uri: Optional[str]) -> None:
        """On Unity Catalog (``registry_uri`` ``databricks-uc``, or none with a Databricks ``tracking_uri``, whose
        default registry it is), ``name_prefix`` must make three-level names, ``<catalog>.<schema>.``, each part of
        the characters Unity Catalog takes unquoted (letters, digits, underscores); raises ConfigError naming the key
        otherwise."""
        uri = (
            registry_uri
            if registry_uri is not None
            else ("databricks-uc" if (tracking_uri or "").startswith("databricks") else "")
        )
        if not self.pipelines or not uri.startswith("databricks-uc"):
            return
        check(
            re.fullmatch(r"[A-Za-z0-9_]+\.[A-Za-z0-9_]+\.", self.name_prefix) is not None,
            "registry.name_prefix",
            f"{self.name_prefix!r} makes no Unity Catalog name: on {uri} a registered model is "
            "<catalog>.<schema>.<model>, so the prefix is '<catalog>.<schema>.' (letters, digits, underscores), "
            "e.g. 'main.catalog_augment.'",
        )

    def ships(self, pipeline: str, model: str = "fasttext") -> bool:
        """Whether ``pipeline``'s ``model`` classifiers (a kind of its eval.models) are logged and registered."""
        return pipeline in self.pipelines and model in self.classifiers
