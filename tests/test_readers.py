"""Readers, schema contracts and quarantine accounting on messy and real input."""

from __future__ import annotations

import csv
import re

import pytest

from common.data.config import IngestConfig, InputSpec
from common.data.csv_input import MALFORMED_CSV
from common.data.input_formats import resolve_format
from common.data.quarantine import kept, rejected, with_reasons
from common.data.raw_input import InputSchemaError
from common.data.readers import read_input
from common.data.schemas import CATALOG, INTERACTIONS, LABELED

MESSY_CSV = """item_id,title,category
1,"Acme Cotton T-Shirt, Blue",Apparel > Clothing > Shirts
2,"   ",Apparel > Clothing
3,"Acme ""Pro"" Mug",Home >  > Mugs
4,Bell\x07 Helmet,Sports > Cycling
5,ナイキ ランニングシューズ,Apparel > Shoes
6,"!!! ???",Apparel > Shoes
7,Too,many,fields,here
8,Plain title,
9,"  Spaced    title ",  Apparel>Clothing  >Shirts
"""


def _validate(spark, path, contract, cfg=None, **spec):
    raw = read_input(spark, InputSpec(path=str(path), **spec), contract)
    validated = with_reasons(raw.df, contract, cfg or IngestConfig(), malformed=raw.malformed).cache()
    return raw, validated


def test_messy_csv_rows_are_kept_or_quarantined_with_reasons(spark, tmp_path):
    path = tmp_path / "labeled.csv"
    path.write_text(MESSY_CSV, encoding="utf-8")
    raw, validated = _validate(spark, path, LABELED)
    reasons = {r.item_id: r.reason for r in validated.select("item_id", "reason").collect()}
    assert reasons == {
        "1": None,
        "2": "empty title",
        "3": "malformed category path: empty level",
        "4": "invalid text in title: control or undecodable characters",
        "5": None,  # other scripts are valid text
        "6": "invalid text in title: no letters or digits",
        "7": MALFORMED_CSV["auto"],  # a record that does not parse: read line by line, the reason says why
        "8": "empty category",
        "9": None,
    }
    good = {r.item_id: (r.title, r.category) for r in kept(validated, LABELED, IngestConfig()).collect()}
    assert good["9"] == ("Spaced title", "Apparel > Clothing > Shirts")
    assert good["1"] == ("Acme Cotton T-Shirt, Blue", "Apparel > Clothing > Shirts")
    bad = rejected(validated, LABELED)
    assert bad.columns == ["item_id", "title", "category", "raw_line", "source", "reason"]
    assert bad.count() + len(good) == validated.count() == 9
    assert all(r.source.endswith(str(path)) for r in bad.collect())
    assert resolve_format(InputSpec(path=str(path))) == "csv" and raw.version.startswith("files:")


def test_missing_and_mistyped_columns_name_file_and_column(spark, tmp_path):
    path = tmp_path / "no_title.csv"
    path.write_text("item_id,name,category\n1,x,A > B\n")
    with pytest.raises(InputSchemaError, match=r"no_title.csv: missing required column 'title'.*found item_id, name"):
        read_input(spark, InputSpec(path=str(path)), LABELED)
    # A rename maps the user's column names onto the contract.
    raw = read_input(spark, InputSpec(path=str(path), rename={"name": "title"}), LABELED)
    assert raw.df.select("title").first().title == "x"
    parquet = tmp_path / "interactions.parquet"
    spark.createDataFrame(
        [("q", "p", "click", "three")], "query string, product_id string, interaction string, count string"
    ).write.parquet(str(parquet))
    with pytest.raises(InputSchemaError, match=r"interactions.parquet: column 'count' has type string, expected long"):
        read_input(spark, InputSpec(path=str(parquet)), INTERACTIONS)
    ids = tmp_path / "int_ids.parquet"
    spark.createDataFrame([(7, "t", "A")], "item_id int, title string, category string").write.parquet(str(ids))
    assert read_input(spark, InputSpec(path=str(ids)), LABELED).df.first().item_id == "7"
    with pytest.raises(InputSchemaError, match="input not found"):
        read_input(spark, InputSpec(path=str(tmp_path / "nope.csv")), LABELED)


def test_json_lines_catalog_fills_optional_columns_and_quarantines_broken_lines(spark, tmp_path):
    path = tmp_path / "catalog.jsonl"
    path.write_text(
        '{"item_id": "a", "title": "Blue mug", "group_id": "g1"}\n'
        '{"item_id": "b", "title": "Red mug", "gtin": 4000000000017}\n'
        '{"item_id": "c", "title": \n'
        '{"item_id": "d", "title": ""}\n'
    )
    raw, validated = _validate(spark, path, CATALOG)
    assert raw.format == "json"
    out = {r.item_id: r for r in kept(validated, CATALOG, IngestConfig()).collect()}
    assert set(out) == {"a", "b"}
    assert out["a"].group_id == "g1" and out["a"].gtin is None and out["b"].gtin == "4000000000017"
    reasons = sorted(r.reason for r in rejected(validated, CATALOG).collect())
    assert reasons == ["empty title", "malformed line: could not be parsed"]


def test_interaction_counts_are_checked_per_row(spark, tmp_path):
    path = tmp_path / "interactions.csv"
    path.write_text(
        "query,product_id,interaction,count\nred mug,p1, Click ,3\nred mug,p2,click,-1\n"
        "red mug,p3,click,lots\n,p4,click,1\nred mug,p5,purchase,\n"
    )
    _, validated = _validate(spark, path, INTERACTIONS)
    reasons = {r.product_id: r.reason for r in validated.collect()}
    assert reasons == {
        "p1": None,
        "p2": "negative count",
        "p3": "count is not an integer",
        "p4": "empty query",
        "p5": "missing count",
    }
    row = kept(validated, INTERACTIONS, IngestConfig()).first()
    assert (row.interaction, row["count"]) == ("click", 3)


def test_taxonomy_check_quarantines_unknown_labels(spark, tmp_path):
    path = tmp_path / "labeled.csv"
    path.write_text("item_id,title,category\n1,Mug,Home > Mugs\n2,Cap,Home > Hats\n")
    taxonomy = spark.createDataFrame([("Home",), ("Home > Mugs",)], "path string")
    raw = read_input(spark, InputSpec(path=str(path)), LABELED)
    reasons = {r.item_id: r.reason for r in with_reasons(raw.df, LABELED, IngestConfig(), taxonomy).collect()}
    assert reasons == {"1": None, "2": "category not in taxonomy"}


def test_delta_input_is_read_by_version(spark, lakehouse):
    lakehouse.write(
        spark.createDataFrame([("1", "Mug", "Home > Mugs")], "item_id string, title string, category string"),
        "landing_labeled",
    )
    raw = read_input(spark, InputSpec(path=lakehouse.location("landing_labeled")), LABELED)
    assert raw.format == "delta" and raw.version == "0"
    assert raw.df.select("title").first().title == "Mug"


def test_real_amazon_toys_file_accounts_for_every_row(spark, shared_data):
    path = shared_data / "amazon_uk_toys" / "amazon_co-ecommerce_sample.noheader.csv"
    columns = [
        "uniq_id",
        "product_name",
        "amazon_category_and_sub_category",
        "manufacturer",
        "price",
        "number_available_in_stock",
        "number_of_reviews",
        "number_of_answered_questions",
        "average_rating",
    ]
    spec = dict(
        header=False,
        columns=columns,
        rename={"uniq_id": "item_id", "product_name": "title", "amazon_category_and_sub_category": "category"},
    )
    _, validated = _validate(spark, path, LABELED, **spec)
    n_kept = kept(validated, LABELED, IngestConfig()).count()
    reasons = {r.reason: r["count"] for r in rejected(validated, LABELED).groupBy("reason").count().collect()}
    # Expectation from Python's csv module and the documented rules, independently of Spark.
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    bad_text = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")

    def reason(row):
        title, category = row[1], row[2]
        if not title.strip():
            return "empty title"
        if bad_text.search(title):
            return "invalid text in title: control or undecodable characters"
        if len(title) > 512:
            return "title longer than 512 characters"
        if not category.strip():
            return "empty category"
        if any(not p.strip() for p in category.split(">")):
            return "malformed category path: empty level"
        return None

    expected: dict = {}
    for row in rows:
        expected[reason(row)] = expected.get(reason(row), 0) + 1
    assert n_kept == expected.pop(None) and reasons == expected
    assert n_kept + sum(reasons.values()) == len(rows) == 10000
    assert reasons["empty category"] == 690


MARKUP_CSV = """doc_id,text,genre
1,"Sport <p/> Winter league <p/> by T. Gider",News
2,"<ul><li>Soft &amp; warm</li><li>Size &lt;b&gt; 3</li></ul>",Promotion
3,"<p/> <br> <p/>",Forum
4,"3 < 4 and 5 > 2, no tags here",Forum
"""


def test_strip_markup_cleans_text_columns_and_quarantines_markup_only_rows(spark, tmp_path):
    from common.data.schemas import DOCUMENTS

    path = tmp_path / "documents.csv"
    path.write_text(MARKUP_CSV, encoding="utf-8")
    spec = InputSpec(path=str(path), strip_markup=True)
    # as the ingest job does: the reader shapes the rows, validation strips the markup the spec asks to
    validated = with_reasons(
        read_input(spark, spec, DOCUMENTS).df, DOCUMENTS, IngestConfig(), markup=spec.strip_markup
    ).cache()
    texts = {r.doc_id: r.text for r in kept(validated, DOCUMENTS, IngestConfig()).collect()}
    assert texts == {
        "1": "Sport Winter league by T. Gider",
        "2": "Soft & warm Size <b> 3",
        "4": "3 < 4 and 5 > 2, no tags here",
    }  # an escaped tag stays text; a bare "<" is no tag
    quarantined = rejected(validated, DOCUMENTS).collect()
    assert [(r.doc_id, r.text, r.reason) for r in quarantined] == [
        ("3", "<p/> <br> <p/>", "empty text after markup removal")
    ]  # the raw text, rows in = kept + rejected
    # off by default: the markup stays
    plain = with_reasons(read_input(spark, InputSpec(path=str(path)), DOCUMENTS).df, DOCUMENTS, IngestConfig())
    assert "<p/>" in kept(plain, DOCUMENTS, IngestConfig()).filter("doc_id = '1'").first().text
