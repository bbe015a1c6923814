"""Taxonomy parsing and category path helpers, on the real Google Product Taxonomy."""

from __future__ import annotations

import pytest

from common.data.taxonomy import (
    Taxonomy,
    TaxonomyError,
    canonical_col,
    depth_col,
    malformed_col,
    split_path,
    truncate,
    truncate_col,
)


@pytest.fixture(scope="module")
def google(shared_data):
    return Taxonomy.from_google_file(shared_data / "google_product_taxonomy" / "taxonomy-with-ids.en-US.txt")


def test_google_taxonomy_parses_every_line(google, shared_data):
    lines = (shared_data / "google_product_taxonomy" / "taxonomy-with-ids.en-US.txt").read_text().splitlines()
    assert len(google.paths) == len([ln for ln in lines if ln and not ln.startswith("#")]) == 5595
    assert google.max_depth == 7
    assert len(google.at_level(1)) == 21
    assert google.id_of("Animals & Pet Supplies > Pet Supplies > Bird Supplies") == 3
    assert "Animals & Pet Supplies>Pet Supplies" in google  # spacing does not matter
    assert "Animals & Pet Supplies > Unicorns" not in google
    assert google.check(" Animals & Pet Supplies >Live Animals ") == "Animals & Pet Supplies > Live Animals"
    with pytest.raises(TaxonomyError, match="not a category"):
        google.check("Toys > Nope")


def test_truncate_and_split():
    assert truncate("A > B > C > D", 2) == "A > B"
    assert truncate("A > B", 4) == "A > B"
    assert split_path(" A>B >C ") == ["A", "B", "C"]
    for bad in ("", "A >  > B", "A >", "> A"):
        with pytest.raises(TaxonomyError):
            split_path(bad)
    with pytest.raises(TaxonomyError):
        truncate("A", 0)


def test_leaves_and_prefixes():
    tax = Taxonomy.from_paths(["A > B > C", "A > D"])
    assert tax.paths == {"A", "A > B", "A > B > C", "A > D"}
    assert tax.leaves() == ["A > B > C", "A > D"]


def test_malformed_file_names_file_and_line(tmp_path):
    path = tmp_path / "tax.txt"
    path.write_text("# header\n1 - A\n2 - A > B\nthis is not a category line\n")
    with pytest.raises(TaxonomyError, match=r"tax.txt:4: expected 'ID - A > B > C'"):
        Taxonomy.from_google_file(path)
    path.write_text("1 - A\n3 - A > X > Y\n")
    with pytest.raises(TaxonomyError, match=r"tax.txt:2: parent of 'A > X > Y' is not defined"):
        Taxonomy.from_google_file(path)


def test_column_forms_match_python_forms(spark):
    from pyspark.sql import functions as F

    rows = [("A > B > C",), ("A>B",), ("A >  > B",), ("",), (None,)]
    df = spark.createDataFrame(rows, "label string")
    out = df.select(
        canonical_col(F.col("label")).alias("c"),
        depth_col(F.col("label")).alias("d"),
        truncate_col(F.col("label"), 2).alias("t"),
        malformed_col(F.col("label")).alias("m"),
    ).collect()
    assert [r.c for r in out[:2]] == ["A > B > C", "A > B"]
    assert [r.d for r in out[:2]] == [3, 2]
    assert [r.t for r in out[:2]] == ["A > B", "A > B"]
    assert [r.m for r in out] == [False, False, True, True, True]
