"""The base every application config extends (:class:`BaseConfig`: its name, the seed, and the platform's
sections) and the YAML + ``--set`` loading of any config class (:func:`load`).

The platform's sections themselves are :mod:`common.platform.config`'s; domain packages own theirs
(``common/<domain>/config.py``); ``common/config.py`` composes them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar

from common.platform.config import (
    LakehouseConfig,
    MaintenanceConfig,
    RayConfig,
    SparkConfig,
    TrackingConfig,
    is_uri,
)
from common.platform.config_loader import (
    ConfigError,
    apply_overrides,
    flatten,
    from_mapping,
    load_tree,
    mask_secrets,
    to_mapping,
)

DEFAULT_CONF_ENV = "AUGMENT_CONF"


@dataclass
class BaseConfig:
    """The sections every application config has: its name, the seed, and where things run.

    Applications extend it with their domain sections (:class:`common.config.AppConfig`); the platform
    (session, lakehouse, tracking, jobs) only reads these.
    """

    # The config's name, shown in job logs and the results summary (demo, local, real-toys-wdc...).
    name: str = "local"
    # The run's seed: splits, sampling, model initialisation and generation draws all derive from it.
    seed: int = 42
    spark: SparkConfig = field(default_factory=SparkConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    lakehouse: LakehouseConfig = field(default_factory=LakehouseConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    # A folder where results-summary also writes each pipeline's results page (e.g. docs/results/<name> for the
    # docs site); null: the pages go to <lakehouse.root>/reports/results/ only.
    results_pages_dir: Optional[str] = None

    @property
    def tracking_uri(self) -> str:
        """The MLflow tracking URI; the local default is ``sqlite:///<lakehouse.root>/mlflow.db``."""
        if self.tracking.uri:
            return self.tracking.uri
        if is_uri(self.lakehouse.root):
            raise ConfigError("tracking.uri: must be set when lakehouse.root is not a local folder")
        return f"sqlite:///{Path(self.lakehouse.root) / 'mlflow.db'}"

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain nested dicts."""
        return to_mapping(self)

    def flat(self) -> dict[str, Any]:
        """The configuration flattened to ``{"a.b": value}`` with credentials masked, as logged to MLflow params
        (tokens and keys come from env vars or secret scopes: ``${VAR}`` in YAML; never logged)."""
        return flatten(mask_secrets(self.to_dict()))

    def section_hash(self, *sections: str) -> str:
        """A short stable hash of the named top-level sections (the part of the config a job depends on)."""
        tree = self.to_dict()
        unknown = [s for s in sections if s not in tree]
        if unknown:
            raise ConfigError(f"unknown config section {unknown[0]!r}")
        payload = json.dumps({s: tree[s] for s in sections}, sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


C = TypeVar("C", bound=BaseConfig)


def default_conf_path() -> Optional[Path]:
    """``$AUGMENT_CONF``, else ``conf/local.yaml`` in the working directory when present, else None."""
    env = os.environ.get(DEFAULT_CONF_ENV)
    if env:
        return Path(env)
    candidate = Path("conf/local.yaml")
    return candidate if candidate.is_file() else None


def load(cls: type[C], path: str | Path | None = None, overrides: list[str] | None = None) -> C:
    """Load ``path`` (default: :func:`default_conf_path`) into config class ``cls``, apply ``a.b=value``
    overrides, validate. Raises :class:`ConfigError` naming the first bad key."""
    conf_path = Path(path) if path else default_conf_path()
    tree = load_tree(conf_path) if conf_path else {}
    tree = apply_overrides(tree, list(overrides or []))
    return from_mapping(cls, tree)
