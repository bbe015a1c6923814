"""A synthetic e-commerce world for the demo and the tests, deterministic by seed at any size.

The world: a 4-level taxonomy whose leaves come in sibling pairs that share product nouns (so a title
like "Acme cotton t-shirt" is ambiguous between "Men's T-Shirts" and "Women's T-Shirts" unless it
carries the discriminating word), brands, materials, model numbers, colours and sizes.

* **Labeled products** carry the planted spurious correlation of the consistency paper: with
  probability ``spurious_strength`` a title's colour and size are drawn from its leaf's own half of
  the palette. A classifier trained on them learns "pink -> Women's", and so labels versions of one
  item differently.
* **Catalog groups** hold versions of one item that differ in colour, size, pack count or wording;
  there, colour and size are independent of the category. Some groups come without ``group_id``
  and must be recovered from shared identifiers (``mpn``, ``gtin``, brand + model).
* **Interactions**: query -> product clicks, add-to-carts and purchases from sessions whose queries
  range from specific (brand + model) to broad ("t-shirt"), with typos and synonyms.

Randomness for each row comes from a generator seeded by (seed, stream, row index), so the data does
not depend on how Spark partitions the work. The group-level "world" arrays are recomputed on each
executor from the seed (O(groups) small numbers), never shipped from the driver.

This module writes the labeled products, the catalog versions and the deliberately invalid landing rows; the
vocabulary and taxonomy are in :mod:`common.data.demo.vocabulary`, the world and its seeded generators in
:mod:`common.data.demo.world`, the interaction log in :mod:`common.data.demo.interactions`.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd

from common.data.config import DemoConfig
from common.data.demo.vocabulary import COLOURS, PACKS, SIZES, TITLE_TEMPLATES, Family, leaf_paths
from common.data.demo.world import (
    STREAM_BAD,
    STREAM_GROUP,
    STREAM_LABELED,
    STREAM_VERSION,
    World,
    leaf_parts,
    model_number,
    row_rng,
)


def _title(
    rng: np.random.Generator,
    family: Family,
    leaf_side: int,
    brand: str,
    material: str,
    noun: str,
    model: str,
    colour: str,
    size: str,
    pack: str,
    signal: bool,
    template: int,
) -> str:
    signal_word = rng.choice(family.leaves[leaf_side][1]) + " " if signal else ""
    text = TITLE_TEMPLATES[template].format(
        brand=brand,
        brand_upper=brand.upper(),
        signal=signal_word,
        material=material,
        noun=noun,
        model=model,
        colour=colour if rng.random() < 0.8 else colour.title(),
        size=size,
        pack=(" " + pack) if pack else "",
    )
    return " ".join(text.split())


def labeled_rows(cfg: DemoConfig, start: int, stop: int) -> pd.DataFrame:
    """Labeled products ``start..stop-1``: item_id, title, category (with the planted correlation)."""
    world = World(cfg)
    paths = leaf_paths()
    rows = []
    for i in range(start, stop):
        rng = row_rng(cfg.seed, STREAM_LABELED, i)
        leaf = int(rng.integers(0, len(paths)))
        family, side = leaf_parts(world, leaf)
        sizes = SIZES[family.size_kind]
        if rng.random() < cfg.spurious_strength:
            colour = COLOURS[int(rng.choice(world.leaf_colours[leaf]))]
            size = sizes[int(rng.choice(world.leaf_sizes[leaf]))]
        else:
            colour = COLOURS[int(rng.integers(0, len(COLOURS)))]
            size = sizes[int(rng.integers(0, len(sizes)))]
        brand = family.brands[int(rng.integers(0, 3))]
        title = _title(
            rng,
            family,
            side,
            brand,
            family.materials[int(rng.integers(0, len(family.materials)))],
            family.nouns[int(rng.integers(0, 3))],
            model_number(brand, 5_000_000 + i),
            colour,
            size,
            PACKS[int(rng.integers(0, len(PACKS)))] if rng.random() < 0.2 else "",
            bool(rng.random() < cfg.signal_rate),
            int(rng.integers(0, len(TITLE_TEMPLATES))),
        )
        rows.append((f"L{i:08d}", title, paths[leaf]))
    return pd.DataFrame(rows, columns=["item_id", "title", "category"])


def catalog_rows(cfg: DemoConfig, group_start: int, group_stop: int) -> pd.DataFrame:
    """Catalog versions of groups ``group_start..group_stop-1``.

    Columns: item_id, title, group_id (null for groups given only by identifiers), gtin, mpn, brand,
    true_category (the generator's ground truth, kept out of the ingested catalog).
    """
    world = World(cfg)
    paths = leaf_paths()
    rows = []
    for g in range(group_start, group_stop):
        leaf = int(world.leaf[g])
        family, side = leaf_parts(world, leaf)
        brand = family.brands[int(world.brand[g])]
        model = model_number(brand, g)
        grng = row_rng(cfg.seed, STREAM_GROUP, g)
        sizes = SIZES[family.size_kind]
        n_versions = int(world.size[g])
        # Distinct (colour, size, pack) combinations: versions of one item never repeat exactly.
        combos = grng.permutation(len(COLOURS) * len(sizes) * len(PACKS))[:n_versions]
        gtin_base = 4_000_000_000_000 + int(world.version_offsets[g]) * 10
        previous_gtin = None
        for k, combo in enumerate(combos):
            vrng = row_rng(cfg.seed, STREAM_VERSION, int(world.version_offsets[g]) + k)
            colour = COLOURS[int(combo) % len(COLOURS)]
            size = sizes[(int(combo) // len(COLOURS)) % len(sizes)]
            pack = PACKS[int(combo) // (len(COLOURS) * len(sizes))]
            template = int(world.template[g]) if vrng.random() < 0.7 else int(vrng.integers(0, len(TITLE_TEMPLATES)))
            noun = family.nouns[int(world.noun[g])] if vrng.random() < 0.85 else family.nouns[int(vrng.integers(0, 3))]
            title = _title(
                vrng,
                family,
                side,
                brand,
                family.materials[int(world.material[g]) % len(family.materials)],
                noun,
                model,
                colour,
                size,
                pack,
                bool(world.signal[g]),
                template,
            )
            gtin = str(gtin_base + k)
            mpn = model
            if world.null_group[g] and k > 0 and vrng.random() < 0.3:
                # A re-listed variant without mpn: only its gtin links it to the previous version.
                mpn, gtin = None, previous_gtin
            previous_gtin = gtin
            rows.append(
                (
                    f"C{g:07d}-{k:03d}",
                    title,
                    None if world.null_group[g] else f"G{g:07d}",
                    gtin,
                    mpn,
                    brand,
                    paths[leaf],
                )
            )
    return pd.DataFrame(rows, columns=["item_id", "title", "group_id", "gtin", "mpn", "brand", "true_category"])


def bad_rows(kind: str, cfg: DemoConfig, n: int) -> pd.DataFrame:
    """``n`` deliberately invalid rows for a landing file of ``kind``, each breaking one ingest rule."""
    rng = row_rng(cfg.seed, STREAM_BAD, {"labeled": 0, "catalog": 1, "interactions": 2, "products": 3}[kind])
    rows = []
    for i in range(n):
        flaw = i % 4
        if kind == "labeled":
            item, title, category = f"BAD-L{i:05d}", "Acme cotton t-shirt", leaf_paths()[i % len(leaf_paths())]
            if flaw == 0:
                title = "   "
            elif flaw == 1:
                category = category.replace(" > ", " >  > ", 1)
            elif flaw == 2:
                title = "Acme \x07 t-shirt \ufffd"
            else:
                category = ""
            rows.append((item, title, category))
        elif kind == "catalog":
            title = "" if flaw % 2 == 0 else "!!! ???"
            rows.append((f"BAD-C{i:05d}", title, None, None, None, None, None))
        elif kind == "interactions":
            query, count = "t-shirt", int(rng.integers(1, 5))
            if flaw == 0:
                query = ""
            elif flaw in (1, 3):
                count = -count
            else:
                query = "\x00\x01"
            rows.append((query, f"C{i:07d}-000", "click", count))
        else:
            rows.append((f"BAD-P{i:05d}", ""))
    columns = {
        "labeled": ["item_id", "title", "category"],
        "catalog": ["item_id", "title", "group_id", "gtin", "mpn", "brand", "true_category"],
        "interactions": ["query", "product_id", "interaction", "count"],
        "products": ["product_id", "title"],
    }[kind]
    return pd.DataFrame(rows, columns=columns)


def chunks(total: int, parts: int) -> Iterator[tuple[int, int]]:
    """Split ``range(total)`` into ``parts`` contiguous (start, stop) ranges."""
    parts = max(1, min(parts, total))
    bounds = np.linspace(0, total, parts + 1).astype(int)
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b > a:
            yield int(a), int(b)
