"""The application config: the platform's sections plus every domain's, composed into one tree.

Each domain owns its sections (``common/<domain>/config.py``) with the papers' values as defaults (see
``../shared/docs/METHODS.md``); this module only puts them together. Load it with :func:`load_config`
from a YAML file in ``conf/`` plus ``--set a.b=value`` overrides; bad keys fail at start-up, named in full.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from common.boostaug.config import BoostAugConfig
from common.catalog.config import CGAConfig, ConsistencyConfig, GroupingConfig
from common.compositional.config import CompositionalConfig
from common.data.config import DemoConfig, IngestConfig, InputsConfig, SubsampleConfig
from common.genre.config import GenreConfig
from common.platform.base_config import BaseConfig, load
from common.querygraph.config import QueryGraphConfig, QueryReformulationConfig
from common.registry.config import RegistryConfig


@dataclass
class AppConfig(BaseConfig):
    """The whole configuration tree of one invocation: platform sections (name, seed, spark, ray,
    lakehouse, tracking) from :class:`BaseConfig`, then the data and method sections."""

    inputs: InputsConfig = field(default_factory=InputsConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    demo: DemoConfig = field(default_factory=DemoConfig)
    grouping: GroupingConfig = field(default_factory=GroupingConfig)
    subsample: SubsampleConfig = field(default_factory=SubsampleConfig)
    consistency: ConsistencyConfig = field(default_factory=ConsistencyConfig)
    query_graph: QueryGraphConfig = field(default_factory=QueryGraphConfig)
    cga: CGAConfig = field(default_factory=CGAConfig)
    query_reformulation: QueryReformulationConfig = field(default_factory=QueryReformulationConfig)
    boostaug: BoostAugConfig = field(default_factory=BoostAugConfig)
    genre: GenreConfig = field(default_factory=GenreConfig)
    compositional: CompositionalConfig = field(default_factory=CompositionalConfig)
    registry: RegistryConfig = field(default_factory=RegistryConfig)

    def __post_init__(self) -> None:
        # A section alone cannot see where its models go: the registry's names are checked against the tracking
        # section's registry here, at load, rather than by the first registration hours into a run.
        self.registry.check_names(self.tracking.registry_uri, self.tracking.uri)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> AppConfig:
    """Load ``path`` (default: ``$AUGMENT_CONF``, else ``conf/local.yaml`` when present, else the built-in
    defaults), apply ``a.b=value`` overrides, validate. Returns the :class:`AppConfig`; raises
    :class:`~common.platform.config_loader.ConfigError` naming the first bad key."""
    return load(AppConfig, path, overrides)
