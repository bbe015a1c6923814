"""The demo world's shared randomness: a generator per (seed, stream, row index), and the group-level
:class:`World` (each catalog group's leaf, brand, material, noun, template, size and popularity, and each leaf's
half of the palette and sizes), recomputed on each executor from the seed; the model number of a group.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from common.data.config import DemoConfig
from common.data.demo.vocabulary import COLOURS, FAMILIES, SIZES, TITLE_TEMPLATES, Family


def row_rng(seed: int, stream: int, index: int) -> np.random.Generator:
    """The generator of one row of one stream: the same numbers however Spark partitions the rows."""
    return np.random.default_rng([seed, stream, index])


STREAM_LABELED, STREAM_GROUP, STREAM_VERSION, STREAM_SESSION, STREAM_BAD, STREAM_WORLD = range(6)


class World:
    """Group-level attributes of the catalog, as numpy arrays indexed by group number."""

    def __init__(self, cfg: DemoConfig):
        self.cfg = cfg
        self.n_groups = cfg.scaled(cfg.n_groups)
        self.n_labeled = cfg.scaled(cfg.n_labeled)
        self.n_sessions = cfg.scaled(cfg.n_sessions)
        rng = row_rng(cfg.seed, STREAM_WORLD, 0)
        n = self.n_groups
        self.leaf = rng.integers(0, 2 * len(FAMILIES), size=n)
        self.brand = rng.integers(0, 3, size=n)
        self.material = rng.integers(0, 4, size=n)
        self.noun = rng.integers(0, 3, size=n)
        self.signal = rng.random(n) < cfg.signal_rate
        self.template = rng.integers(0, len(TITLE_TEMPLATES), size=n)
        extra = rng.geometric(1.0 / (cfg.group_size_mean - cfg.group_size_min + 1.0), size=n) - 1
        self.size = np.clip(cfg.group_size_min + extra, cfg.group_size_min, cfg.group_size_max)
        self.null_group = rng.random(n) < cfg.null_group_fraction
        # Zipf-like popularity for the interaction log: a few groups get most of the traffic.
        weights = 1.0 / np.power(np.arange(1, n + 1), 0.9)
        self.popularity = rng.permutation(weights / weights.sum())
        # Each leaf "owns" half of the palette and half of its size range in the labeled data.
        palette = rng.permutation(len(COLOURS))
        self.leaf_colours = {}
        self.leaf_sizes = {}
        for fi, family in enumerate(FAMILIES):
            sizes = rng.permutation(len(SIZES[family.size_kind]))
            half = len(sizes) // 2
            colours = rng.permutation(palette)
            for side in (0, 1):
                self.leaf_colours[2 * fi + side] = colours[side * 8 : (side + 1) * 8]
                self.leaf_sizes[2 * fi + side] = sizes[side * half : (side + 1) * half]

    @cached_property
    def version_offsets(self) -> np.ndarray:
        """Cumulative version counts: group g's versions are catalog rows offsets[g]..offsets[g+1]-1."""
        return np.concatenate([[0], np.cumsum(self.size)])

    @cached_property
    def groups_by_leaf(self) -> dict[int, np.ndarray]:
        """Group numbers of each leaf (for broad queries that click around a category)."""
        return {leaf: np.flatnonzero(self.leaf == leaf) for leaf in range(2 * len(FAMILIES))}


def model_number(brand: str, group: int) -> str:
    """A model number unique to the group (a bijection of the group number), prefixed by the brand."""
    code = (group * 7919 + 13) % 10_000_019
    return f"{brand[:2].upper()}-{code:07d}"


def leaf_parts(world: World, leaf: int) -> tuple[Family, int]:
    """(the family of leaf number ``leaf``, which of its two sibling leaves it is: 0 or 1)."""
    return FAMILIES[leaf // 2], leaf % 2
