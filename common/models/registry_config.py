"""Registered models (the ``registry`` section): which pipelines ship their classifiers as MLflow models, what
they are named, and the gate that moves the alias (:mod:`common.models.registry`, :mod:`common.models.promotion`).
Where the registry is, is the platform's ``tracking.registry_uri``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from common.platform.config import check

# The pipelines whose final classifiers can be registered, each with its evaluating job.
SHIPPING_PIPELINES = ("consistency", "boostaug", "genre", "compositional")


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
    # How much better a candidate's mean must be: std (by more than the larger of the two models' standard
    # deviations over their seeds) or zero (any gain).
    margin: Literal["std", "zero"] = "std"

    def __post_init__(self) -> None:
        for key, names in (("registry.pipelines", self.pipelines), ("registry.gate", self.gate)):
            unknown = sorted(set(names) - set(SHIPPING_PIPELINES))
            check(not unknown, key, f"unknown pipelines {unknown}; known: {', '.join(SHIPPING_PIPELINES)}")
        check(bool(self.alias) and self.alias.replace("_", "").replace("-", "").isalnum(), "registry.alias",
              "must be a word (letters, digits, _ and -)")
