"""Catalog grouping: which catalog items are versions of the same item.

Items with a ``group_id`` keep it. Items without one are linked through shared identifiers (``gtin``,
``mpn``, and normalised brand + model number read from the title) and grouped by connected components
of the item-identifier graph. Identifier values shared by implausibly many items ("N/A", a dummy
GTIN) are ignored and reported, so that one junk value cannot glue the catalog into a giant group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.algorithms.graph import connected_components

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# A model number: letters then digits (optionally hyphenated), at least 3 digits: "WH1000XM3", "TI-2969638".
MODEL_NUMBER = r"(?<![\w-])([A-Za-z]{1,5}-?\d{3,}[A-Za-z0-9-]*)(?![\w-])"
IDENTIFIERS = ("gtin", "mpn", "brand_model")


@dataclass(frozen=True)
class Grouping:
    """Result of :func:`group_items`: every item with its group, and the identifier values ignored."""

    items: "DataFrame"
    capped_identifiers: "DataFrame"


def identifier_keys(catalog: "DataFrame", identifiers: tuple[str, ...] | list[str]) -> "DataFrame":
    """``(item_id, key)`` rows: one per usable identifier of each item, as ``kind:normalised value``.

    gtin: digits only, left-padded to 14 (GTIN-8/12/13/14 compare equal), all-zero values dropped.
    mpn: upper case, letters and digits only. brand_model: lower-case brand + first model number in
    the title.
    """
    from pyspark.sql import functions as F

    unknown = sorted(set(identifiers) - set(IDENTIFIERS))
    if unknown:
        raise ValueError(f"grouping.identifiers: unknown identifier {unknown[0]!r}; allowed: {', '.join(IDENTIFIERS)}")
    keys: list["Column"] = []
    if "gtin" in identifiers:
        digits = F.regexp_replace(F.col("gtin"), r"\D", "")
        keys.append(
            F.when(
                (F.length(digits) >= 8) & (F.regexp_replace(digits, "0", "") != ""),
                F.concat(F.lit("gtin:"), F.lpad(digits, 14, "0")),
            )
        )
    if "mpn" in identifiers:
        mpn = F.upper(F.regexp_replace(F.col("mpn"), r"[^A-Za-z0-9]", ""))
        keys.append(F.when(F.length(mpn) >= 3, F.concat(F.lit("mpn:"), mpn)))
    if "brand_model" in identifiers:
        brand = F.lower(F.trim(F.col("brand")))
        model = F.upper(F.regexp_replace(F.regexp_extract(F.col("title"), MODEL_NUMBER, 1), "-", ""))
        keys.append(
            F.when(
                (F.coalesce(brand, F.lit("")) != "") & (model != ""), F.concat(F.lit("bm:"), brand, F.lit("|"), model)
            )
        )
    return catalog.select("item_id", F.explode(F.array(*keys)).alias("key")).filter(F.col("key").isNotNull())


def group_items(
    catalog: "DataFrame",
    identifiers: tuple[str, ...] | list[str] = IDENTIFIERS,
    max_items_per_identifier: int = 192,
    max_iterations: int = 100,
    use_graphframes: bool = False,
) -> Grouping:
    """Assign every catalog item a group.

    Returns :class:`Grouping` with ``items``: the catalog columns plus ``group_id`` (the given one, else
    ``cc:<smallest item_id of the component>``, else ``single:<item_id>``), ``group_source``
    (``group_id`` | ``identifiers`` | ``singleton``) and ``group_size``; and ``capped_identifiers``
    (``key``, ``n_items``) for identifier values ignored for being shared by more than
    ``max_items_per_identifier`` items.
    """
    from pyspark.sql import functions as F

    given = catalog.filter(F.col("group_id").isNotNull() & (F.trim(F.col("group_id")) != ""))
    loose = catalog.filter(F.col("group_id").isNull() | (F.trim(F.col("group_id")) == ""))
    keys = identifier_keys(loose, identifiers).distinct()
    key_sizes = keys.groupBy("key").agg(F.count("*").alias("n_items"))
    capped = key_sizes.filter(F.col("n_items") > max_items_per_identifier)
    usable = keys.join(key_sizes.filter(F.col("n_items") <= max_items_per_identifier).select("key"), "key")
    edges = usable.select(F.concat(F.lit("i:"), F.col("item_id")).alias("src"), F.col("key").alias("dst"))
    components = (
        connected_components(edges, max_iterations=max_iterations, use_graphframes=use_graphframes)
        .filter(F.col("id").startswith("i:"))
        .select(F.expr("substring(id, 3)").alias("item_id"), "component")
    )
    first_item = components.groupBy("component").agg(F.min("item_id").alias("first_item"))
    linked = components.join(first_item, "component").select(
        "item_id", F.concat(F.lit("cc:"), "first_item").alias("linked_group")
    )
    resolved = (
        loose.drop("group_id")
        .join(linked, "item_id", "left")
        .select(
            *[c for c in loose.columns if c != "group_id"],
            F.coalesce(F.col("linked_group"), F.concat(F.lit("single:"), F.col("item_id"))).alias("group_id"),
            F.when(F.col("linked_group").isNotNull(), F.lit("identifiers"))
            .otherwise(F.lit("singleton"))
            .alias("group_source"),
        )
    )
    items = given.withColumn("group_source", F.lit("group_id")).unionByName(resolved)
    sizes = items.groupBy("group_id").agg(F.count("*").alias("group_size"))
    return Grouping(items=items.join(sizes, "group_id"), capped_identifiers=capped)


def size_reason(min_size: int, max_size: int) -> "Column":
    """Column: why an item's group is outside ``[min_size, max_size]`` (null when inside)."""
    from pyspark.sql import functions as F

    size = F.col("group_size")
    return F.when(
        size < min_size, F.concat(F.lit("group size "), size.cast("string"), F.lit(f" below minimum {min_size}"))
    ).when(size > max_size, F.concat(F.lit("group size "), size.cast("string"), F.lit(f" above maximum {max_size}")))


def size_histogram(items: "DataFrame") -> "DataFrame":
    """``(group_size, n_groups, n_items)`` over all groups, sorted by size."""
    from pyspark.sql import functions as F

    per_group = items.groupBy("group_id").agg(F.first("group_size").alias("group_size"))
    return (
        per_group.groupBy("group_size")
        .agg(F.count("*").alias("n_groups"))
        .withColumn("n_items", F.col("group_size") * F.col("n_groups"))
        .orderBy("group_size")
    )
