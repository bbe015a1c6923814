"""The demo's interaction log: query -> product clicks, add-to-carts and purchases from sessions whose queries
range from specific (brand + model) to broad ("t-shirt"), with typos and synonyms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from common.data.config import DemoConfig
from common.data.demo.vocabulary import COLOURS
from common.data.demo.world import STREAM_SESSION, World, leaf_parts, model_number, row_rng


def _typo(rng: np.random.Generator, text: str) -> str:
    letters = [i for i, ch in enumerate(text) if ch.isalpha()]
    if len(letters) < 4:
        return text
    i = int(rng.choice(letters[1:-1]))
    return text[:i] + text[i + 1 :] if rng.random() < 0.5 else text[:i] + text[i + 1] + text[i] + text[i + 2 :]


def interaction_rows(cfg: DemoConfig, start: int, stop: int) -> pd.DataFrame:
    """Session interactions ``start..stop-1`` as (query, product_id, interaction, count) rows.

    Each session has one intent: specific (brand + model), medium (signal word / colour + noun) or broad
    (a noun or category name); it clicks 1-3 products that fit the intent, and may add to cart / buy.
    Rows are not yet aggregated (the job sums counts per query, product and interaction).
    """
    world = World(cfg)
    popularity_cdf = np.cumsum(world.popularity)
    rows = []
    for s in range(start, stop):
        rng = row_rng(cfg.seed, STREAM_SESSION, s)
        g = int(min(np.searchsorted(popularity_cdf, rng.random()), world.n_groups - 1))
        leaf = int(world.leaf[g])
        family, side = leaf_parts(world, leaf)
        brand = family.brands[int(world.brand[g])]
        noun = family.nouns[int(world.noun[g])]
        kind = rng.choice(["specific", "medium", "broad"], p=[0.35, 0.35, 0.30])
        if kind == "specific":
            query = rng.choice(
                [
                    f"{brand} {noun} {model_number(brand, g)}",
                    f"{model_number(brand, g)}",
                    f"{brand} {family.leaves[side][1][0]} {noun}",
                    f"{brand} {noun}",
                ]
            )
            candidates = np.array([g])
        elif kind == "medium":
            word = rng.choice(family.leaves[side][1])
            query = rng.choice(
                [
                    f"{word} {noun}",
                    f"{noun} {word}",
                    f"{word} {rng.choice(family.synonyms or (noun,))}",
                    f"{rng.choice(COLOURS)} {word} {noun}",
                ]
            )
            candidates = world.groups_by_leaf[leaf]
        else:
            query = rng.choice(
                [
                    noun,
                    rng.choice(family.synonyms or (noun,)),
                    family.l3.lower(),
                    f"{family.materials[int(rng.integers(0, len(family.materials)))]} {noun}",
                ]
            )
            candidates = np.concatenate(
                [world.groups_by_leaf[2 * (leaf // 2)], world.groups_by_leaf[2 * (leaf // 2) + 1]]
            )
        if rng.random() < 0.12:
            query = _typo(rng, query)
        if rng.random() < 0.5:
            query = query.lower()
        n_clicks = int(rng.integers(1, 4))
        clicked_groups = [g] + [int(rng.choice(candidates)) for _ in range(n_clicks - 1)]
        products = []
        for cg in clicked_groups:
            k = int(rng.integers(0, int(world.size[cg])))
            products.append(f"C{cg:07d}-{k:03d}")
        for pid in products:
            rows.append((query, pid, "click", 1))
        if rng.random() < 0.25:
            rows.append((query, products[0], "add_to_cart", 1))
        if rng.random() < 0.3:
            rows.append((query, products[0], "purchase", 1))
    return pd.DataFrame(rows, columns=["query", "product_id", "interaction", "count"])
