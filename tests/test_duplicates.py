"""Exact duplicates at ingest: every contract's copies are quarantined with a reason, the first copy kept, rows in
= kept + quarantined; conflicting labels per the switch; incremental appends compared with the kept rows."""

from __future__ import annotations

import re
from collections import Counter

import pandas as pd
import pytest

from common.data.config import DedupConfig, IngestConfig, InputSpec
from common.data.duplicates import CONFLICT, repeated_id_reason, with_duplicate_reasons
from common.data.quarantine import DUPLICATE_TEXT, kept, reason_counts, rejected, with_reasons
from common.data.readers import read_input
from common.data.schemas import CATALOG, DOCUMENTS, INTERACTIONS, LABELED, MULTILABEL, TEXTS
from jobs import cli
from jobs.foundation import ingest


def _validate(spark, path, contract, cfg=None, **spec):
    cfg = cfg or IngestConfig()
    raw = read_input(spark, InputSpec(path=str(path), **spec), contract)
    validated = with_duplicate_reasons(with_reasons(raw.df, contract, cfg), contract, cfg, None, raw.absent).cache()
    counts = reason_counts(validated, str(path))
    # Rows in = kept + quarantined, whatever the duplicates.
    assert (
        kept(validated, contract, cfg).count() + rejected(validated, contract).count()
        == raw.df.count()
        == sum(counts.values())
    )
    return validated, counts


def _reasons(validated, *columns) -> Counter:
    """(columns, reason) of every row, as a multiset."""
    return Counter((tuple(r[c] for c in columns), r["reason"]) for r in validated.collect())


def test_a_public_corpus_without_ids_keeps_one_copy_of_each_repeated_text(spark, tmp_path):
    # The case issue 46 met: a multi-label corpus without an id column whose documents repeat, once with the
    # same labels (a duplicate, even with other spacing and case) and once with other labels (a conflict).
    path = tmp_path / "ml.csv"
    path.write_text(
        "text,labels\nI love it,joy\nI  love it ,joy\ni love it,joy\nso sad,sadness\nso sad,anger\nfine,joy\n"
    )
    validated, counts = _validate(spark, path, MULTILABEL)
    rows = _reasons(validated, "text", "labels")
    first_id = kept(validated, MULTILABEL, IngestConfig()).filter("text = 'I love it'").first()["example_id"]
    assert rows == Counter(
        [
            (("I  love it ", "joy"), f"duplicate of {first_id}"),
            (("I love it", "joy"), None),
            (("fine", "joy"), None),
            (("i love it", "joy"), f"duplicate of {first_id}"),
            (("so sad", "anger"), CONFLICT),
            (("so sad", "sadness"), CONFLICT),
        ]
    )
    assert counts == {None: 2, "duplicate of <id>": 2, CONFLICT: 2}
    ids = [r["example_id"] for r in kept(validated, MULTILABEL, IngestConfig()).collect()]
    assert len(ids) == len(set(ids)) == 2  # what compositional-split requires

    keep = IngestConfig(dedup=DedupConfig(conflicts="keep"))
    validated, counts = _validate(spark, path, MULTILABEL, keep)
    assert counts == {None: 4, "duplicate of <id>": 2}
    validated, counts = _validate(spark, path, MULTILABEL, IngestConfig(dedup=DedupConfig(exact=False)))
    assert counts == {None: 6}


def test_documents_are_compared_by_id_and_by_text(spark, tmp_path):
    path = tmp_path / "docs.csv"
    path.write_text(
        "doc_id,text,genre\na,one text,news\nb,One text,news\na,another,news\nc,x y,fiction\n"
        "c,x y,fiction\nd,conf,news\ne,conf,fiction\nf,,news\nf,,news\n"
    )
    validated, counts = _validate(spark, path, DOCUMENTS)
    assert _reasons(validated, "doc_id", "text") == Counter(
        [
            (("a", "another"), repeated_id_reason("doc_id")),
            (("a", "one text"), None),
            (("b", "One text"), "duplicate of a"),
            (("c", "x y"), "duplicate of c"),
            (("c", "x y"), None),
            (("d", "conf"), CONFLICT),
            (("e", "conf"), CONFLICT),
            # Rows rejected for another reason keep it, and are no one's first copy.
            (("f", None), "empty text"),
            (("f", None), "empty text"),
        ]
    )


def test_catalog_titles_repeat_across_items_but_ids_do_not(spark, tmp_path):
    labeled = tmp_path / "labeled.csv"
    labeled.write_text(
        "item_id,title,category\n1,t a,A > B\n1,t a,A>B\n2,t b,A > B\n2,t b,A > C\n3,t c,A\n3,t d,A\n4,t a,A > B\n"
    )
    validated, _ = _validate(spark, labeled, LABELED)
    assert _reasons(validated, "item_id", "title") == Counter(
        [
            (("1", "t a"), None),
            (("1", "t a"), "duplicate of 1"),
            (("2", "t b"), CONFLICT),
            (("2", "t b"), CONFLICT),
            (("3", "t c"), None),
            (("3", "t d"), repeated_id_reason("item_id")),
            (("4", "t a"), None),
        ]
    )  # item 4 repeats item 1's title: another item, kept
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("item_id,title,brand\n1,t a,acme\n1,t a,\n2,t a,acme\n")
    validated, _ = _validate(spark, catalog, CATALOG)
    assert _reasons(validated, "item_id", "brand") == Counter(
        [(("1", None), repeated_id_reason("item_id")), (("1", "acme"), None), (("2", "acme"), None)]
    )


def test_interactions_are_events_unless_the_source_names_them(spark, tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("query,product_id,interaction,count\nmug,p1,click,1\nmug,p1,click,1\n")
    _, counts = _validate(spark, log, INTERACTIONS)
    assert counts == {None: 2}  # two clicks
    named = tmp_path / "events.csv"
    named.write_text(
        "event_id,query,product_id,interaction,count\ne1,mug,p1,click,1\ne1,mug,p1,click,1\ne2,mug,p1,click,1\n"
    )
    validated, counts = _validate(spark, named, INTERACTIONS)
    assert counts == {None: 2, "duplicate of <id>": 1}
    assert kept(validated, INTERACTIONS, IngestConfig()).count() == 2


def test_a_text_in_a_given_test_split_keeps_its_test_copy(spark, tmp_path):
    # SST-2-style folders: train.csv and test.csv, the split taken from the file name. The test copy is kept
    # (the evaluation set is the source's), the train copy quarantined: no leak, no thinned test set.
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "train.csv").write_text("text,label\ngreat film,pos\nawful,neg\nok,pos\n")
    (folder / "test.csv").write_text("text,label\nGreat  film,pos\nbad,neg\n")
    validated, counts = _validate(spark, folder, TEXTS, from_path={"split": r"(train|test)\.csv$"})
    assert _reasons(validated, "text", "split") == Counter(
        [
            (("Great  film", "test"), None),
            (("awful", "train"), None),
            (("bad", "test"), None),
            (("great film", "train"), DUPLICATE_TEXT),
            (("ok", "train"), None),
        ]
    )
    assert counts[DUPLICATE_TEXT] == 1


def test_an_incremental_append_that_repeats_kept_rows_quarantines_the_new_copies(
    ctx, spark, write_path, tmp_path, capsys
):
    from deltalake import write_deltalake

    from common.platform.lakehouse.lakehouse import Lakehouse

    source = str(tmp_path / "bronze_labeled")
    ctx.cfg.inputs.labeled = InputSpec(path=source, format="delta")
    # Both write paths: the kept rows are read at their version, before this run appends to them.
    ctx.lakehouse = Lakehouse(ctx.cfg.lakehouse, spark, native_delta=write_path == "native")
    rows = pd.DataFrame({"item_id": ["i1", "i2"], "title": ["red mug", "blue cup"], "category": ["Home > Mugs"] * 2})
    write_deltalake(source, rows, mode="overwrite")
    first = ingest.run(ctx).metrics
    assert (first["labeled.rows_kept"], first["labeled.rows_quarantined"]) == (2, 0)
    write_deltalake(
        source,
        pd.DataFrame(
            {
                "item_id": ["i1", "i2", "i3", "i3"],
                "title": ["red mug", "green cup", "tea pot", "tea pot"],
                "category": ["Home > Mugs"] * 4,
            }
        ),
        mode="append",
    )
    second = ingest.run(ctx).metrics
    assert second["labeled.incremental"] == 1
    assert (second["labeled.rows_in"], second["labeled.rows_kept"], second["labeled.rows_quarantined"]) == (4, 1, 3)
    reasons = sorted((r["item_id"], r["reason"]) for r in ctx.lakehouse.read("labeled_products_quarantine").collect())
    assert reasons == [("i1", "duplicate of i1"), ("i2", repeated_id_reason("item_id")), ("i3", "duplicate of i3")]
    assert sorted(r["item_id"] for r in ctx.lakehouse.read("labeled_products").collect()) == ["i1", "i2", "i3"]
    # The dedup report: in the run's metrics (and its MLflow run), and in `augment tables` over all versions.
    assert (
        second["labeled.rows_duplicate"],
        second["labeled.rows_conflicting"],
        second["labeled.rows_repeated_id"],
    ) == (2, 0, 1)
    capsys.readouterr()
    assert cli.main(["tables", "--set", f"lakehouse.root={ctx.cfg.lakehouse.root}"]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"labeled_products: +6 rows in, 2 exact duplicates, 0 conflicting labels, 1 repeated ids "
        r"\(v1 of labeled_products_quarantine\)",
        out,
    ), out


@pytest.mark.parametrize("conflicts", ["quarantine", "keep"])
def test_the_switch_is_checked(conflicts):
    assert DedupConfig(conflicts=conflicts).conflicts == conflicts
    with pytest.raises(ValueError, match="ingest.dedup.conflicts"):
        DedupConfig(conflicts="drop")


# ----------------------------------------------------------------------------- leakage across splits


def test_copies_of_a_test_text_join_the_test_side_and_leaks_are_refused(spark):
    from common.data.leakage import (
        COPIES_TEST,
        LeakageError,
        check_no_leak,
        leak_count,
        mark_test_copies,
        with_copies,
        without_copies,
    )

    population = spark.createDataFrame(
        [(1, "Red  Mug"), (2, "red mug"), (3, "blue cup"), (4, "tea pot")], "item_id int, title string"
    )
    sample = population.filter("item_id = 1")
    test = with_copies(sample, population, "title")
    assert sorted(r.item_id for r in test.collect()) == [1, 2]  # the other copy came along
    train = population.join(test.select("item_id"), "item_id", "left_anti")
    assert check_no_leak(train, "title", test, "title", "split") == 0
    # Row-level: copy 2 stays in training, and the check says so.
    naive = population.filter("item_id != 1")
    assert leak_count(naive, "title", sample, "title") == 1
    with pytest.raises(LeakageError, match="split: 1 evaluation texts also occur on the training side"):
        check_no_leak(naive, "title", sample, "title", "split")
    assert sorted(r.item_id for r in without_copies(population, "title", sample, "title").collect()) == [3, 4]

    generated = spark.createDataFrame(
        [("RED MUG", None), ("green mug", None), ("red mug ", "below the cut")], "text string, reason string"
    )
    marked = {(r.text, r.reason) for r in mark_test_copies(generated, "text", sample, "title").collect()}
    assert marked == {("RED MUG", COPIES_TEST), ("green mug", None), ("red mug ", "below the cut")}
    overridden = {
        (r.text, r.reason) for r in mark_test_copies(generated, "text", sample, "title", override=True).collect()
    }
    assert overridden == {("RED MUG", COPIES_TEST), ("green mug", None), ("red mug ", COPIES_TEST)}


def test_boostaug_splits_put_every_copy_of_a_text_on_one_side(spark):
    from common.boostaug.config import BoostAugConfig
    from common.boostaug.data import assign_splits

    # Ingest dedup off: 40 texts, each twice (other case); a row-level draw would split many pairs.
    rows = [
        (f"s{i}{c}", text, f"l{i % 2}", None)
        for i in range(40)
        for c, text in (("a", f"text number {i}"), ("b", f"TEXT number {i}"))
    ]
    texts = spark.createDataFrame(rows, "source_id string, text string, label string, split string")
    splits = assign_splits(texts, BoostAugConfig(test_fraction=0.25, dev_fraction=0.25), seed=3).collect()
    sides: dict[str, set] = {}
    for r in splits:
        sides.setdefault(r.text.lower(), set()).add(r.split)
    assert all(len(s) == 1 for s in sides.values())
    assert {r.split for r in splits} == {"train", "dev", "test"}
    assert all((r.fold is None) == (r.split != "train") for r in splits)


def test_near_duplicates_are_opt_in_and_each_cluster_keeps_one_text(ctx, tmp_path, capsys):
    from common.algorithms.near_duplicates import CLUSTER_COL

    # Two clusters (a chain of three reworded reviews, a pair of reworded ones), an exact copy, a lone text.
    path = tmp_path / "texts.csv"
    path.write_text(
        "text,label\n"
        "the battery lasts two full days and charges in an hour flat,pos\n"
        "the battery lasts two full days and it charges in an hour flat,pos\n"
        "the battery lasts two full days and it charges in one hour flat,pos\n"
        "the screen cracked after a week of careful everyday use at home,neg\n"
        "the screen cracked after a week of careful everyday use at work,neg\n"
        "The battery lasts two full days and charges in an hour flat,pos\n"
        "shipping was quick,pos\n"
    )
    ctx.cfg.inputs.texts = InputSpec(path=str(path))
    plain = ingest.texts_job(ctx).metrics
    assert (plain["texts.rows_kept"], plain["texts.rows_duplicate"]) == (6, 1)
    assert not ctx.lakehouse.exists("texts_near_duplicates")  # off by default
    # With the step off, its keys are not part of the input's lineage: changing them re-ingests nothing.
    ctx.cfg.ingest.dedup = DedupConfig(near_threshold=0.5, near_tables=3)
    again = ingest.texts_job(ctx)
    assert again.outputs and all(o.skipped for o in again.outputs.values())

    # Jaccard of the 3-word shingles: 0.62 for reviews 1-2, 0.57 for 2-3 (0.31 for 1-3: a chain), 0.82 for 4-5.
    ctx.cfg.ingest.dedup = DedupConfig(near=True, near_threshold=0.55, near_tables=10)
    m = ingest.texts_job(ctx).metrics
    assert (
        m["texts.rows_in"],
        m["texts.rows_quarantined"],
        m["texts.rows_near_duplicate"],
        m["texts.rows_near_duplicate_clusters"],
        m["texts.rows_kept"],
    ) == (7, 1, 3, 2, 3)
    kept = {r.text for r in ctx.lakehouse.read("texts").collect()}
    near = ctx.lakehouse.read("texts_near_duplicates").collect()
    assert len(kept) == 3 and "shipping was quick" in kept
    assert len({r[CLUSTER_COL] for r in near}) == 2 and not kept & {r.text for r in near}
    # one member of each cluster stayed: every near duplicate has a kept text of its own label beside it
    assert {r.label for r in near} == {"pos", "neg"}
    assert cli.main(["tables", "--set", f"lakehouse.root={ctx.cfg.lakehouse.root}"]) == 0
    assert (
        "texts:                       7 rows in, 1 exact duplicates, 0 conflicting labels, 0 repeated ids, "
        "3 near duplicates"
    ) in capsys.readouterr().out


def test_shingles_are_the_distinct_word_trigrams_or_one_shingle_for_a_short_text(spark):
    from common.algorithms.near_duplicates import with_shingles

    long_text = " ".join(f"w{i % 50}" for i in range(3000))  # a long document: 50 distinct trigrams, repeated
    df = spark.createDataFrame(
        [("a", "The cat, the CAT sat. The cat"), ("b", "Two words"), ("c", " ,; "), ("d", long_text)],
        "id string, text string",
    )
    grams = {r.id: r.grams for r in with_shingles(df, "text", 3).collect()}
    assert sorted(grams["a"]) == ["cat sat the", "cat the cat", "sat the cat", "the cat sat", "the cat the"]
    assert grams["b"] == ["two words"] and grams["c"] == []
    assert len(grams["d"]) == 50 and grams["d"][0] == "w0 w1 w2"


def test_banded_lsh_finds_the_pairs_at_the_threshold_and_checks_each_exactly(spark):
    from common.algorithms.near_duplicates import band_rows, near_duplicate_pairs

    # 10 bands at Jaccard 0.8: 4 MinHash values per band, the most that keep a pair at 0.8 with p >= 0.99.
    assert band_rows(0.8, 10) == 4 and 1 - (1 - 0.8**4) ** 10 >= 0.99 > 1 - (1 - 0.8**5) ** 10
    assert band_rows(0.55, 10) == 1 and band_rows(0.9, 10) == 9
    words = [f"w{i}" for i in range(20)]  # 18 trigrams
    last = words[:-1] + ["x"]  # 17 of 19 trigrams shared: Jaccard 0.89
    middle = words[:10] + ["y"] + words[11:]  # 15 of 21: 0.71, under the threshold
    texts = [
        ("base", words),
        ("last", last),
        ("middle", middle),
        ("other", [f"v{i}" for i in range(20)]),
        ("empty", []),
    ]
    df = spark.createDataFrame([(k, " ".join(t)) for k, t in texts], "id string, text string")
    pairs = {(r.src, r.dst) for r in near_duplicate_pairs(df, "id", "text", 0.8).collect()}
    assert pairs == {("base", "last")}
    # At 0.7 the middle variant is one too (0.71 with base, 0.64 with last: a chain, not a clique).
    assert {(r.src, r.dst) for r in near_duplicate_pairs(df, "id", "text", 0.7).collect()} == {
        ("base", "last"),
        ("base", "middle"),
    }


def test_compositional_splits_keep_planted_copies_on_one_side(spark):
    from common.compositional.split import cg_split, iid_split

    # Ingest dedup off: 60 texts, each twice with the same labels; two label sets, one of them the test side.
    rows = [
        (f"e{i}{c}", f"{'Tweet' if c == 'a' else 'tweet'} number {i}", ["joy", "love"] if i % 2 else ["anger"])
        for i in range(60)
        for c in "ab"
    ]
    df = spark.createDataFrame(rows, "example_id string, text string, labels array<string>")
    chosen = spark.createDataFrame([("joy,love", 60)], "composition string, examples long")
    cg = cg_split(df, chosen, support=7, seed=5)
    iid = iid_split(df, 50, 21, seed=5)
    for parts in ({"train": cg["train"].unionByName(cg["support"]), "test": cg["test"]}, iid):
        sides = {r.text.lower(): side for side, frame in parts.items() for r in frame.collect()}
        seen = {(r.text.lower(), side) for side, frame in parts.items() for r in frame.collect()}
        assert len(seen) == len(sides)  # no text on two sides
    assert cg["support"].count() % 2 == 0 and cg["support"].count() >= 7  # copies came along
    assert iid["test"].count() % 2 == 0 and iid["test"].count() >= 21
