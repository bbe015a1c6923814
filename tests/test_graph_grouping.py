"""Connected components and catalog grouping on hand-built graphs and catalogs."""

from __future__ import annotations

import pytest

from common.algorithms.graph import ConvergenceError, connected_components
from common.catalog.grouping import group_items, identifier_keys, size_histogram, size_reason


def _components(rows):
    return {r.id: r.component for r in rows.collect()}


def test_components_of_a_chain_a_triangle_and_an_isolated_vertex(spark):
    edges = spark.createDataFrame(
        [("e", "d"), ("d", "c"), ("c", "b"), ("b", "a"), ("x", "y"), ("y", "z"), ("z", "x"), ("x", "x")],
        "src string, dst string",
    )
    vertices = spark.createDataFrame([("solo",), ("a",)], "id string")
    comps = _components(connected_components(edges, vertices))
    assert comps == {"a": "a", "b": "a", "c": "a", "d": "a", "e": "a", "x": "x", "y": "x", "z": "x", "solo": "solo"}


def test_components_fail_loudly_past_the_iteration_budget(spark):
    chain = spark.createDataFrame([(f"v{i:02d}", f"v{i + 1:02d}") for i in range(40)], "src string, dst string")
    with pytest.raises(ConvergenceError, match="did not converge in 2 rounds"):
        connected_components(chain, max_iterations=2)


def test_triangle_counts_and_clustering_coefficients_by_hand(spark):
    from common.algorithms.graph import triangle_counts

    # A 4-clique a-b-c-d (4 triangles, each vertex in 3) plus a pendant e on d and a triangle d-e-f.
    edges = [(u, v) for i, u in enumerate("abcd") for v in "abcd"[i + 1 :]] + [("d", "e"), ("e", "f"), ("d", "f")]
    got = {
        r.id: (r.degree, r.triangles, r.clustering)
        for r in triangle_counts(spark.createDataFrame(edges, "src string, dst string")).collect()
    }
    assert got["a"] == (3, 3, 1.0)
    assert got["d"][:2] == (5, 4) and got["d"][2] == pytest.approx(2 * 4 / (5 * 4))
    assert got["e"] == (2, 1, 1.0) and got["f"] == (2, 1, 1.0)
    assert sum(t for _, t, _ in got.values()) == 3 * 5  # 5 triangles, 3 corners each


CATALOG = [
    # item, title, group_id, gtin, mpn, brand
    ("g1", "Acme mug blue", "G1", None, None, "Acme"),
    ("g2", "Acme mug red", "G1", None, None, "Acme"),
    # GTIN-12 and GTIN-13 forms of one number link a and b; b and c share an mpn in other spelling.
    ("a", "Bolt kettle 1.5l", None, "012345678905", None, "Bolt"),
    ("b", "Bolt kettle 1.7l", None, "0012345678905", "KT-100", "Bolt"),
    ("c", "Bolt kettle steel", None, None, "kt100", "Bolt"),
    # brand + model number from the title links d and e.
    ("d", "ZETA headphones ZX-2041 black", None, None, None, "Zeta"),
    ("e", "Zeta ZX2041 headphones, white", None, None, None, "ZETA "),
    # No identifier: a singleton.
    ("f", "Lonely lamp", None, None, None, None),
    # A junk mpn shared by three items must not glue them together (cap = 2 below).
    ("j1", "Thing one", None, None, "UNKNOWN", None),
    ("j2", "Thing two", None, None, "UNKNOWN", None),
    ("j3", "Thing three", None, "00000000", "UNKNOWN", None),
]
SCHEMA = "item_id string, title string, group_id string, gtin string, mpn string, brand string"


def test_identifier_keys_are_normalised(spark):
    keys = identifier_keys(spark.createDataFrame(CATALOG, SCHEMA), ["gtin", "mpn", "brand_model"]).collect()
    by_item = {}
    for r in keys:
        by_item.setdefault(r.item_id, set()).add(r.key)
    assert by_item["a"] == {"gtin:00012345678905"} and "gtin:00012345678905" in by_item["b"]
    assert "mpn:KT100" in by_item["b"] and "mpn:KT100" in by_item["c"]
    assert by_item["d"] == by_item["e"] == {"bm:zeta|ZX2041"}
    assert "j3" in by_item and not any(k.startswith("gtin:") for k in by_item["j3"])  # all-zero GTIN dropped
    with pytest.raises(ValueError, match="unknown identifier 'isbn'"):
        identifier_keys(spark.createDataFrame(CATALOG, SCHEMA), ["isbn"])


def test_group_items_uses_group_id_then_identifiers(spark):
    grouping = group_items(spark.createDataFrame(CATALOG, SCHEMA), max_items_per_identifier=2)
    rows = {r.item_id: r for r in grouping.items.collect()}
    assert len(rows) == len(CATALOG)
    assert rows["g1"].group_id == rows["g2"].group_id == "G1" and rows["g1"].group_source == "group_id"
    assert rows["a"].group_id == rows["b"].group_id == rows["c"].group_id == "cc:a"
    assert rows["a"].group_size == 3 and rows["a"].group_source == "identifiers"
    assert rows["d"].group_id == rows["e"].group_id == "cc:d"
    assert rows["f"].group_id == "single:f" and rows["f"].group_source == "singleton"
    assert {rows[j].group_id for j in ("j1", "j2", "j3")} == {"single:j1", "single:j2", "single:j3"}
    assert [(r.key, r.n_items) for r in grouping.capped_identifiers.collect()] == [("mpn:UNKNOWN", 3)]


def test_size_bounds_and_histogram(spark):
    items = group_items(spark.createDataFrame(CATALOG, SCHEMA), max_items_per_identifier=2).items
    reasons = {r.item_id: r.reason for r in items.select("item_id", size_reason(2, 2).alias("reason")).collect()}
    assert reasons["g1"] is None and reasons["d"] is None
    assert reasons["a"] == "group size 3 above maximum 2"
    assert reasons["f"] == "group size 1 below minimum 2"
    hist = {r.group_size: (r.n_groups, r.n_items) for r in size_histogram(items).collect()}
    assert hist == {1: (4, 4), 2: (2, 4), 3: (1, 3)}
