"""The demo world's vocabulary: colours, sizes, pack wordings, the product families (taxonomy leaves in sibling
pairs with their nouns, discriminating words, materials, brands and synonyms), the title templates, and the demo
taxonomy those families make (its leaf paths and its Google Product Taxonomy file lines).

Fixed literal tables: :mod:`common.data.demo.world` draws from them by seed, :mod:`common.data.demo.rows` and
:mod:`common.data.demo.interactions` write rows with them.
"""

from __future__ import annotations

from dataclasses import dataclass

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

TITLE_TEMPLATES = (
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
