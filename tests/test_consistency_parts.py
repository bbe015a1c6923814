"""Consistency transforms and metrics against hand-computed cases."""

from __future__ import annotations

import pytest

from common.catalog.blinding import blind_col, load_dictionary
from common.catalog.consistency import group_labels, sample_size, uniform_sample, version_pairs
from common.catalog.metrics import consistency_rate
from common.data.text import normalize_title
from common.models.classifiers.metrics import accuracy, weighted_f1
from jobs.consistency.consistency_results import with_lifts


def test_weighted_f1_by_hand(spark):
    df = spark.createDataFrame(list(zip("aabbc", "abbba")), "y string, p string")
    # a: F1 2*1/(2+2)=0.5, support 2; b: 2*2/(2+3)=0.8, support 2; c: 0, support 1 -> (1.0+1.6+0)/5
    assert weighted_f1(df, "y", "p") == pytest.approx(0.52)
    assert accuracy(df, "y", "p") == pytest.approx(0.6)  # positions 0, 2, 3
    assert weighted_f1(df.limit(0), "y", "p") == 0.0


def test_consistency_rate_by_hand(spark):
    df = spark.createDataFrame([("x", "x"), ("x", "y"), ("z", "z"), ("w", "w")], "p1 string, p2 string")
    assert consistency_rate(df, "p1", "p2") == pytest.approx(0.75)


def test_group_pseudo_labels(spark):
    predicted = spark.createDataFrame(
        [
            ("g1", "A", 0.6),
            ("g1", "B", 0.9),
            ("g1", "A", 0.7),
            ("g2", "A", 0.5),
            ("g2", "B", 0.6),
        ],
        "group_id string, pred_label string, pred_confidence double",
    )
    best = {
        r.group_id: (r.group_label, r.group_confidence) for r in group_labels(predicted, "max_confidence").collect()
    }
    assert best == {"g1": ("B", 0.9), "g2": ("B", 0.6)}
    vote = {r.group_id: r.group_label for r in group_labels(predicted, "majority").collect()}
    assert vote == {"g1": "A", "g2": "B"}  # g2 ties 1-1: the larger summed confidence wins
    with pytest.raises(ValueError, match="unknown rule"):
        group_labels(predicted, "mode")


def test_version_pairs_take_two_different_titles(spark):
    items = spark.createDataFrame(
        [
            ("g1", "a", "Mug blue"),
            ("g1", "b", "Mug red"),
            ("g1", "c", "mug BLUE "),
            ("g2", "d", "Lamp"),
            ("g2", "e", "lamp"),  # only case differs: no pair
            ("g3", "f", "Pan 20cm"),
            ("g3", "g", "Pan 24cm"),
        ],
        "group_id string, item_id string, title string",
    )
    pairs = {r.group_id: r for r in version_pairs(items, seed=3).collect()}
    assert set(pairs) == {"g1", "g3"}
    for r in pairs.values():
        assert r.title_1.strip().lower() != r.title_2.strip().lower()
    assert {pairs["g3"].item_id_1, pairs["g3"].item_id_2} == {"f", "g"}
    assert sorted(version_pairs(items, seed=3).collect()) == sorted(pairs.values())


def test_sizes_and_uniform_sample(spark):
    assert sample_size(0.125, 184) == 23 and sample_size(600, 100) == 100 and sample_size(9, 363) == 9
    df = spark.createDataFrame([(str(i),) for i in range(200)], "item_id string")
    assert uniform_sample(df, 37, seed=1, key_cols=["item_id"]).count() == 37


def test_lifts_are_relative_to_the_baseline_mean():
    rows = [
        ("r", "baseline", 0, 1, 0.60, 0.70, 10, 0),
        ("r", "baseline", 1, 2, 0.64, 0.74, 10, 0),
        ("r", "cst_full", 0, 1, 0.62, 0.792, 20, 10),
    ]
    out = {(r[1], r[2]): r for r in with_lifts(rows)}
    assert out[("cst_full", 0)][6] == pytest.approx(0.0)  # (0.62 - 0.62) / 0.62
    assert out[("cst_full", 0)][7] == pytest.approx(0.1)  # (0.792 - 0.72) / 0.72
    assert with_lifts([("r", "cst_full", 0, 1, 0.5, 0.5, 1, 1)])[0][6] is None


def test_cs_blind_replaces_colours_and_sizes(spark):
    colours = load_dictionary(None, "colours")
    sizes = load_dictionary(None, "sizes")
    df = spark.createDataFrame(
        [
            ("Acme T-Shirt Navy Blue, XL",),
            ("Mug 350ml light blue",),
            ("Kettle UK 8 steel",),
            ("Redwood table small double",),
            ("Blocks Ages 3+ red",),
        ],
        "title string",
    )
    out = [r.t for r in df.select(blind_col(df.title, colours, sizes).alias("t")).collect()]
    assert out == [
        "Acme T-Shirt __colour__ __colour__ , __size__",
        "Mug __size__ __colour__",
        "Kettle __size__ steel",
        "Redwood table __size__",
        "Blocks __size__ __colour__",
    ]


def test_title_normalisation():
    assert normalize_title("  Acme ＴＥＥ (Blue), XL | 2-Pack ") == "acme tee blue xl 2-pack"
    assert normalize_title("ナイキ ランニング") == "ナイキ ランニング"
    assert normalize_title(None) == ""
