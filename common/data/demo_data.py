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
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

import numpy as np
import pandas as pd

from common.data.config import DemoConfig
from common.data.taxonomy import join_path

COLOURS = [
    "black",
    "white",
    "red",
    "blue",
    "navy",
    "green",
    "olive",
    "grey",
    "pink",
    "purple",
    "yellow",
    "orange",
    "beige",
    "brown",
    "teal",
    "burgundy",
]
SIZES = {
    "apparel": ["XS", "S", "M", "L", "XL", "XXL"],
    "shoe": ["UK 4", "UK 5", "UK 6", "UK 7", "UK 8", "UK 9", "UK 10", "UK 11"],
    "dimension": ["20cm", "24cm", "26cm", "28cm", "30cm", "32cm"],
    "capacity": ["250ml", "350ml", "450ml", "500ml", "750ml", "1L"],
    "weight": ["1kg", "2kg", "4kg", "6kg", "8kg", "10kg"],
    "bedding": ["Single", "Double", "King", "Super King", "Cot", "Small Double"],
    "edition": ["Mini", "Standard", "Plus", "Pro", "Max", "Lite"],
    "age": ["Ages 3+", "Ages 4+", "Ages 5+", "Ages 6+", "Ages 8+", "Ages 10+"],
}
PACKS = ["", "Pack of 2", "(3-Pack)", "2 Pack", "Set of 4", "Twin Pack"]


@dataclass(frozen=True)
class Family:
    """An L3 category with two sibling leaves that share nouns; each leaf has its discriminating words."""

    l1: str
    l2: str
    l3: str
    nouns: tuple[str, ...]
    leaves: tuple[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...]]]
    materials: tuple[str, ...]
    size_kind: str
    brands: tuple[str, ...]
    synonyms: tuple[str, ...] = ()


FAMILIES: tuple[Family, ...] = (
    Family(
        "Apparel & Accessories",
        "Clothing",
        "Shirts & Tops",
        ("t-shirt", "tee", "crew neck top"),
        (("Men's T-Shirts", ("men's", "mens")), ("Women's T-Shirts", ("women's", "ladies"))),
        ("cotton", "organic cotton", "jersey", "linen blend"),
        "apparel",
        ("Northwind", "Urbano", "Kestrel"),
        ("tshirt", "top"),
    ),
    Family(
        "Apparel & Accessories",
        "Clothing",
        "Outerwear",
        ("jacket", "rain jacket", "shell jacket"),
        (("Men's Jackets", ("men's", "mens")), ("Women's Jackets", ("women's", "ladies"))),
        ("nylon", "waterproof", "softshell", "recycled polyester"),
        "apparel",
        ("Kestrel", "Fjellrev", "Altura"),
        ("coat", "anorak"),
    ),
    Family(
        "Apparel & Accessories",
        "Shoes",
        "Athletic Shoes",
        ("running shoes", "trainers", "runners"),
        (("Road Running Shoes", ("road", "cushioned")), ("Trail Running Shoes", ("trail", "grip"))),
        ("mesh", "knit", "breathable"),
        "shoe",
        ("Stride", "Pacer", "Altura"),
        ("sneakers", "running trainers"),
    ),
    Family(
        "Apparel & Accessories",
        "Shoes",
        "Boots",
        ("boots", "ankle boots", "wellies"),
        (("Hiking Boots", ("hiking", "trekking")), ("Rain Boots", ("rain", "wellington"))),
        ("leather", "rubber", "suede"),
        "shoe",
        ("Fjellrev", "Trekka", "Hunterby"),
        ("boot",),
    ),
    Family(
        "Home & Garden",
        "Kitchen & Dining",
        "Cookware",
        ("pan", "skillet", "frying pan"),
        (("Frying Pans", ("frying", "non-stick")), ("Saute Pans", ("saute", "deep"))),
        ("cast iron", "stainless steel", "aluminium", "ceramic"),
        "dimension",
        ("Cuisina", "Ferro", "Brava"),
        ("fry pan",),
    ),
    Family(
        "Home & Garden",
        "Kitchen & Dining",
        "Drinkware",
        ("mug", "cup", "tumbler"),
        (("Coffee Mugs", ("coffee", "ceramic")), ("Travel Mugs", ("travel", "insulated"))),
        ("stoneware", "porcelain", "double wall steel"),
        "capacity",
        ("Brava", "Kaffa", "Thermos Co"),
        ("coffee cup",),
    ),
    Family(
        "Home & Garden",
        "Bedding",
        "Blankets",
        ("blanket", "throw", "fleece throw"),
        (("Throw Blankets", ("sofa", "knitted")), ("Weighted Blankets", ("weighted", "heavy"))),
        ("fleece", "cotton", "sherpa", "bamboo"),
        "bedding",
        ("Dormio", "Snugly", "Nordhaus"),
        ("throw blanket",),
    ),
    Family(
        "Home & Garden",
        "Bedding",
        "Bed Sheets",
        ("sheet", "bed sheet", "sheet set"),
        (("Fitted Sheets", ("fitted", "deep pocket")), ("Flat Sheets", ("flat", "hemmed"))),
        ("percale", "egyptian cotton", "microfibre", "linen"),
        "bedding",
        ("Dormio", "Nordhaus", "Linaro"),
        ("bedsheet",),
    ),
    Family(
        "Sporting Goods",
        "Fitness",
        "Yoga",
        ("yoga mat", "exercise mat", "mat"),
        (("Yoga Mats", ("non-slip", "studio")), ("Travel Yoga Mats", ("travel", "foldable"))),
        ("tpe", "natural rubber", "pvc", "cork"),
        "dimension",
        ("Zenfit", "Asana", "Flexa"),
        ("fitness mat",),
    ),
    Family(
        "Sporting Goods",
        "Fitness",
        "Weights",
        ("dumbbell", "weight", "hand weight"),
        (("Dumbbells", ("dumbbell", "hex")), ("Kettlebells", ("kettlebell", "swing"))),
        ("cast iron", "neoprene", "rubber coated"),
        "weight",
        ("Ironclad", "Flexa", "Titanforge"),
        ("free weight",),
    ),
    Family(
        "Electronics",
        "Audio",
        "Headphones",
        ("headphones", "headset", "earphones"),
        (("Over-Ear Headphones", ("over-ear", "studio")), ("Wireless Earbuds", ("earbuds", "in-ear"))),
        ("bluetooth", "wireless", "noise cancelling"),
        "edition",
        ("Sonora", "Beatnik", "Audiq"),
        ("headphone", "cans"),
    ),
    Family(
        "Electronics",
        "Phone Accessories",
        "Phone Cases",
        ("phone case", "case", "cover"),
        (("iPhone Cases", ("iphone", "magsafe")), ("Galaxy Cases", ("galaxy", "samsung"))),
        ("silicone", "leather", "clear tpu", "rugged"),
        "edition",
        ("Armorly", "Casely", "Shieldo"),
        ("phone cover",),
    ),
    Family(
        "Toys & Games",
        "Toys",
        "Building Toys",
        ("building set", "blocks", "construction kit"),
        (("Building Blocks", ("bricks", "classic")), ("Magnetic Tiles", ("magnetic", "tiles"))),
        ("plastic", "wooden", "abs"),
        "age",
        ("Brickly", "Buildo", "Magnix"),
        ("building toy",),
    ),
    Family(
        "Toys & Games",
        "Toys",
        "Dolls",
        ("doll", "doll set", "playset"),
        (("Fashion Dolls", ("fashion", "style")), ("Baby Dolls", ("baby", "newborn"))),
        ("vinyl", "soft body", "plastic"),
        "age",
        ("Dollina", "Playmore", "Tinytot"),
        ("dolly",),
    ),
)

_TEMPLATES = (
    "{brand} {signal}{material} {noun} {model} - {colour}, {size}{pack}",
    "{brand} {noun} {signal}{material} ({colour}, {size}) {model}{pack}",
    "{signal}{colour} {material} {noun} by {brand}, Size {size}{pack}",
    "{brand_upper} {noun} {model} {colour} {size}{pack}",
    "{brand} {model} {signal}{noun} in {colour} | {size} | {material}{pack}",
)


def leaf_paths() -> list[str]:
    """All leaf category paths of the demo taxonomy, in a fixed order (leaf index = position)."""
    return [join_path([f.l1, f.l2, f.l3, leaf]) for f in FAMILIES for leaf, _ in f.leaves]


def taxonomy_lines() -> list[str]:
    """The demo taxonomy in Google Product Taxonomy file format (``ID - A > B > C``), parents first."""
    seen: dict[str, int] = {}
    for path in leaf_paths():
        parts = path.split(" > ")
        for level in range(1, len(parts) + 1):
            prefix = join_path(parts[:level])
            seen.setdefault(prefix, 1000 + len(seen))
    return ["# Demo taxonomy (synthetic), Google Product Taxonomy format"] + [
        f"{ident} - {path}" for path, ident in seen.items()
    ]


def _rng(seed: int, stream: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, index])


_STREAM_LABELED, _STREAM_GROUP, _STREAM_VERSION, _STREAM_SESSION, _STREAM_BAD, _STREAM_WORLD = range(6)


class World:
    """Group-level attributes of the catalog, as numpy arrays indexed by group number."""

    def __init__(self, cfg: DemoConfig):
        self.cfg = cfg
        self.n_groups = cfg.scaled(cfg.n_groups)
        self.n_labeled = cfg.scaled(cfg.n_labeled)
        self.n_sessions = cfg.scaled(cfg.n_sessions)
        rng = _rng(cfg.seed, _STREAM_WORLD, 0)
        n = self.n_groups
        self.leaf = rng.integers(0, 2 * len(FAMILIES), size=n)
        self.brand = rng.integers(0, 3, size=n)
        self.material = rng.integers(0, 4, size=n)
        self.noun = rng.integers(0, 3, size=n)
        self.signal = rng.random(n) < cfg.signal_rate
        self.template = rng.integers(0, len(_TEMPLATES), size=n)
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
    text = _TEMPLATES[template].format(
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


def _leaf_parts(world: World, leaf: int) -> tuple[Family, int]:
    return FAMILIES[leaf // 2], leaf % 2


def labeled_rows(cfg: DemoConfig, start: int, stop: int) -> pd.DataFrame:
    """Labeled products ``start..stop-1``: item_id, title, category (with the planted correlation)."""
    world = World(cfg)
    paths = leaf_paths()
    rows = []
    for i in range(start, stop):
        rng = _rng(cfg.seed, _STREAM_LABELED, i)
        leaf = int(rng.integers(0, len(paths)))
        family, side = _leaf_parts(world, leaf)
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
            int(rng.integers(0, len(_TEMPLATES))),
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
        family, side = _leaf_parts(world, leaf)
        brand = family.brands[int(world.brand[g])]
        model = model_number(brand, g)
        grng = _rng(cfg.seed, _STREAM_GROUP, g)
        sizes = SIZES[family.size_kind]
        n_versions = int(world.size[g])
        # Distinct (colour, size, pack) combinations: versions of one item never repeat exactly.
        combos = grng.permutation(len(COLOURS) * len(sizes) * len(PACKS))[:n_versions]
        gtin_base = 4_000_000_000_000 + int(world.version_offsets[g]) * 10
        previous_gtin = None
        for k, combo in enumerate(combos):
            vrng = _rng(cfg.seed, _STREAM_VERSION, int(world.version_offsets[g]) + k)
            colour = COLOURS[int(combo) % len(COLOURS)]
            size = sizes[(int(combo) // len(COLOURS)) % len(sizes)]
            pack = PACKS[int(combo) // (len(COLOURS) * len(sizes))]
            template = int(world.template[g]) if vrng.random() < 0.7 else int(vrng.integers(0, len(_TEMPLATES)))
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
        rng = _rng(cfg.seed, _STREAM_SESSION, s)
        g = int(min(np.searchsorted(popularity_cdf, rng.random()), world.n_groups - 1))
        leaf = int(world.leaf[g])
        family, side = _leaf_parts(world, leaf)
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


def bad_rows(kind: str, cfg: DemoConfig, n: int) -> pd.DataFrame:
    """``n`` deliberately invalid rows for a landing file of ``kind``, each breaking one ingest rule."""
    rng = _rng(cfg.seed, _STREAM_BAD, {"labeled": 0, "catalog": 1, "interactions": 2, "products": 3}[kind])
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
