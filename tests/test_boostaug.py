"""BoostAug (paper 3): backends on hand-checked sentences, fold disjointness, each filter on constructed
cases, ingest accounting of the texts input, and a tiny end-to-end run of the pipeline."""

from __future__ import annotations

import random

import pytest
from worlds import check_card

from common.boostaug import backends as B
from common.boostaug.config import BoostAugConfig, FilterConfig
from common.boostaug.surrogate import fold_plans, mono_plan

SENTENCE = "a stirring , funny and finally transporting re-imagining of beauty and the beast"
SYNONYMS = {"funny": ("hilarious",), "beauty": ("loveliness",), "beast": ("monster",)}


# ----------------------------------------------------------------------------- backends
def test_candidates_are_seeded_per_row_and_index():
    first = B.augment_text(SENTENCE, "s1", "eda", 6, 42, 0.1, SYNONYMS)
    assert first == B.augment_text(SENTENCE, "s1", "eda", 6, 42, 0.1, SYNONYMS)  # same row, same candidates
    assert first != B.augment_text(SENTENCE, "s2", "eda", 6, 42, 0.1, SYNONYMS)  # another row differs
    assert first != B.augment_text(SENTENCE, "s1", "eda", 6, 43, 0.1, SYNONYMS)  # another seed differs
    # candidate i does not depend on how many candidates are asked for
    assert (
        B.augment_text(SENTENCE, "s1", "spelling", 3, 42, 0.1, {})
        == B.augment_text(SENTENCE, "s1", "spelling", 5, 42, 0.1, {})[:3]
    )


def test_eda_operations_on_hand_checked_sentences():
    words = "the movie is funny".split()
    rng = random.Random(0)
    # 4 words x 0.1 rounds to 0, so each operation touches one word; only "funny" has a synonym.
    assert B.synonym_replacement(words, rng, 0.1, SYNONYMS) == ["the", "movie", "is", "hilarious"]
    inserted = B.random_insertion(words, random.Random(1), 0.1, SYNONYMS)
    assert len(inserted) == 5 and sorted(inserted) == sorted(words + ["hilarious"])
    swapped = B.random_swap(words, random.Random(2), 0.1, SYNONYMS)
    assert sorted(swapped) == sorted(words) and sum(a != b for a, b in zip(swapped, words)) == 2
    assert B.random_deletion(["only"], random.Random(3), 0.9, {}) == ["only"]  # never empties a text
    kept = B.random_deletion(words * 5, random.Random(4), 0.5, {})
    assert 0 < len(kept) < 20 and all(w in words for w in kept)
    # stop words are never replaced, and a word without synonyms is left alone
    assert B.synonym_replacement("the of and".split(), rng, 1.0, {"the": ("a",)}) == ["the", "of", "and"]


def test_spelling_and_split_change_words_but_keep_their_letters():
    for i in range(20):
        noisy = B.spelling(SENTENCE, B.rng_for(42, "s", "spelling", i), 0.1)
        pairs = list(zip(SENTENCE.split(), noisy.split()))
        changed = [(a, b) for a, b in pairs if a != b]
        assert len(noisy.split()) == len(SENTENCE.split()) and changed  # at least one word misspelt
        assert all(abs(len(a) - len(b)) <= 1 for a, b in changed)  # one substitution, drop or doubling
        split = B.word_split(SENTENCE, B.rng_for(42, "s", "split", i), 0.1)
        assert split.replace(" ", "") == SENTENCE.replace(" ", "") and len(split.split()) > len(SENTENCE.split())
    # keyboard neighbours are real neighbours
    assert set(B._KEYBOARD["a"]) == {"q", "w", "s", "z"}


def test_synonym_table_from_minilm_vocabulary():
    table = B.synonym_table(5, 0.45)
    assert 10_000 < len(table) < 30_000
    assert "film" in table["movie"] and "hilarious" in table["funny"]
    assert all(w not in near for w, near in list(table.items())[:500])


# ----------------------------------------------------------------------------- folds
def test_fold_plans_never_let_a_surrogate_judge_its_training_texts():
    for k in (3, 5, 7):
        plans = fold_plans(k)
        assert sorted(p.boost for p in plans) == list(range(k))
        assert sorted(p.validation for p in plans) == list(range(k))
        for p in plans:
            assert p.boost not in p.train and p.validation not in p.train and p.boost != p.validation
            assert len(p.train) == k - 2
    assert mono_plan(5).train == (0, 1, 2, 3, 4)


def test_fold_rows_are_disjoint_in_the_written_table(spark, tmp_path):
    from pyspark.sql import functions as F

    from common.boostaug.data import assign_splits, with_source_ids
    from common.boostaug.surrogate import surrogate_sources
    from common.models.classifiers.training_rows import read_rows

    rows = [(f"text {i} {'good' if i % 3 else 'bad'}", "pos" if i % 3 else "neg", None) for i in range(300)]
    texts = spark.createDataFrame(rows, "text string, label string, split string")
    cfg = BoostAugConfig(folds=5, dev_fraction=0.1, test_fraction=0.2)
    out = assign_splits(with_source_ids(texts), cfg, seed=1)
    path = str(tmp_path / "texts")
    out.write.parquet(path)
    df = spark.read.parquet(path)
    counts = {(r["split"], r["label"]): r["count"] for r in df.groupBy("split", "label").count().collect()}
    # exact stratified split: 100 neg and 200 pos -> 20 / 10 / 70 and 40 / 20 / 140
    assert counts == {
        ("test", "neg"): 20,
        ("dev", "neg"): 10,
        ("train", "neg"): 70,
        ("test", "pos"): 40,
        ("dev", "pos"): 20,
        ("train", "pos"): 140,
    }
    fold_sizes = sorted(r["count"] for r in df.filter("split = 'train'").groupBy("fold").count().collect())
    assert fold_sizes == [42, 42, 42, 42, 42]
    assert df.filter(F.col("split") != "train").filter(F.col("fold").isNotNull()).count() == 0
    files = [str(p) for p in (tmp_path / "texts").glob("*.parquet")]
    for plan in fold_plans(5):
        train, validation = surrogate_sources(files, plan)
        boosted = {
            t for t, _ in read_rows([(files, [("split", "=", "train"), ("fold", "=", plan.boost)])], "text", "label")
        }
        seen = {t for t, _ in read_rows(train, "text", "label") + read_rows(validation, "text", "label")}
        assert boosted and not boosted & seen
        assert len(read_rows(train, "text", "label")) == 3 * 42
    # the same rows and seed give the same split
    again = assign_splits(with_source_ids(texts), cfg, seed=1)
    assert sorted(map(tuple, again.select("source_id", "split", "fold").collect())) == sorted(
        map(tuple, df.select("source_id", "split", "fold").collect())
    )


# ----------------------------------------------------------------------------- filters
SCORED = [
    # source, aug_idx, label, confidence, predicted, perplexity
    ("s1", 0, "pos", 0.999, "pos", None),
    ("s1", 1, "pos", 0.995, "pos", None),
    ("s1", 2, "pos", 0.98, "pos", None),
    ("s1", 3, "pos", 0.9999, "neg", None),
    ("s2", 0, "neg", 0.99, "neg", 2.0),
    ("s2", 1, "neg", 0.999, "neg", 7.5),
    ("s2", 2, "neg", 0.996, "neg", 4.0),
    ("s2", 3, "neg", 0.5, "neg", 1.0),
]


def _judge(spark, enabled, n_aug=2):
    from common.boostaug.filtering import apply_filters

    df = spark.createDataFrame(
        [(s, "eda", i, lab, c, p, ppl) for s, i, lab, c, p, ppl in SCORED],
        "source_id string, backend string, aug_idx int, label string, confidence double, "
        "pred_label string, perplexity double",
    )
    out = apply_filters(df, n_aug, FilterConfig(), enabled)
    return {(r["source_id"], r["aug_idx"]): r["reason"] for r in out.collect()}


def test_each_filter_on_constructed_cases(spark):
    judged = _judge(spark, ["perplexity", "confidence", "label"])
    assert len(judged) == len(SCORED)  # candidates = kept + rejected
    assert judged[("s1", 3)] == "predicted label differs from the source label"  # top confidence, wrong label
    assert judged[("s1", 0)] is None  # second most confident, right label
    assert judged[("s1", 1)] == judged[("s1", 2)] == "not among the 2 most confident of its source"
    assert judged[("s2", 1)] == "perplexity >= 5"  # most confident, but perplexity 7.5
    # ranked among the perplexity survivors: 0.996 and 0.99 are the top 2; 0.99 is not above the threshold
    assert judged[("s2", 2)] is None and judged[("s2", 0)] == "confidence <= 0.99"
    assert judged[("s2", 3)] == "not among the 2 most confident of its source"

    no_label = _judge(spark, ["perplexity", "confidence"])
    assert no_label[("s1", 3)] is None
    no_ppl = _judge(spark, ["confidence", "label"])
    assert no_ppl[("s2", 1)] is None and no_ppl[("s2", 2)] is None  # 0.999 and 0.996 now rank top 2
    no_rank = _judge(spark, ["perplexity", "label"])
    # without the ranking the first n_aug candidates are considered, and no confidence threshold applies
    assert no_rank[("s1", 0)] is None and no_rank[("s1", 1)] is None
    assert no_rank[("s1", 2)] == no_rank[("s1", 3)] == "beyond the first 2 candidates (no ranking)"
    assert no_rank[("s2", 0)] is None and no_rank[("s2", 1)] == "perplexity >= 5"


LONG_TAIL = [
    # source, aug_idx, label, confidence, predicted: a class the surrogate is sure of, and one it never is
    ("b1", 0, "big", 0.999, "big"),
    ("b1", 1, "big", 0.998, "big"),
    ("b1", 2, "big", 0.5, "big"),
    ("b1", 3, "big", 0.4, "big"),
    ("t1", 0, "small", 0.9, "small"),
    ("t1", 1, "small", 0.8, "small"),
    ("t1", 2, "small", 0.3, "small"),
    ("t1", 3, "small", 0.2, "small"),
    ("t2", 0, "small", 0.7, "small"),
    ("t2", 1, "small", 0.6, "small"),
    ("t2", 2, "small", 0.95, "big"),
    ("t2", 3, "small", 0.1, "small"),
]


def test_class_quantile_lowers_the_threshold_only_for_classes_the_surrogate_doubts(spark):
    from common.boostaug.filtering import apply_filters

    df = spark.createDataFrame(
        [(s, "eda", i, lab, c, p, None) for s, i, lab, c, p in LONG_TAIL],
        "source_id string, backend string, aug_idx int, label string, confidence double, "
        "pred_label string, perplexity double",
    )

    def judge(cfg):
        out = apply_filters(df, 2, cfg, ["perplexity", "confidence", "label"])
        assert out.columns == df.columns + ["reason"]
        return {(r["source_id"], r["aug_idx"]): r["reason"] for r in out.collect()}

    fixed = judge(FilterConfig())
    assert [k for k, reason in fixed.items() if reason is None] == [("b1", 0), ("b1", 1)]
    per_class = judge(FilterConfig(confidence_class_quantile=0.5))
    assert len(per_class) == len(LONG_TAIL)  # candidates = kept + rejected
    # big: its considered confidences (0.999, 0.998) sit above 0.99, so the fixed threshold stands
    assert {k: v for k, v in per_class.items() if k[0] == "b1"} == {k: v for k, v in fixed.items() if k[0] == "b1"}
    # small: considered = ranked in and the right label: 0.9, 0.8 (t1) and 0.7 (t2; its 0.95 predicts big);
    # their median 0.8 is the class's threshold
    assert per_class[("t1", 0)] is None
    assert per_class[("t1", 1)] == per_class[("t2", 0)] == "confidence <= 0.8 (class quantile)"
    assert per_class[("t2", 2)] == "predicted label differs from the source label"
    assert per_class[("t2", 1)] == per_class[("t1", 2)] == "not among the 2 most confident of its source"
    with pytest.raises(Exception, match="confidence_class_quantile"):
        FilterConfig(confidence_class_quantile=1.0)


def test_classes_below_min_support_pass_unjudged_like_unfiltered_augmentation(spark):
    from common.boostaug.filtering import apply_filters, unjudged_labels

    texts = spark.createDataFrame(
        [("big", "train")] * 3 + [("small", "train"), ("small", "test"), ("small", "dev")] + [("tiny", "test")],
        "label string, split string",
    )
    assert unjudged_labels(texts, 0) == []
    assert unjudged_labels(texts, 2) == ["small"]  # counted on the train split; tiny has no training text
    assert unjudged_labels(texts, 4) == ["big", "small"]
    df = spark.createDataFrame(
        [(s, "eda", i, lab, c, p, None) for s, i, lab, c, p in LONG_TAIL],
        "source_id string, backend string, aug_idx int, label string, confidence double, "
        "pred_label string, perplexity double",
    )
    enabled = ["perplexity", "confidence", "label"]
    fixed = {
        (r["source_id"], r["aug_idx"]): r["reason"] for r in apply_filters(df, 2, FilterConfig(), enabled).collect()
    }
    out = {
        (r["source_id"], r["aug_idx"]): r["reason"]
        for r in apply_filters(df, 2, FilterConfig(), enabled, unjudged=["small"]).collect()
    }
    assert len(out) == len(LONG_TAIL)
    assert {k: v for k, v in out.items() if k[0] == "b1"} == {k: v for k, v in fixed.items() if k[0] == "b1"}
    # small: the first two candidates of each source, whatever their confidence or predicted label
    assert [k for k, reason in sorted(out.items()) if reason is None and k[0] != "b1"] == [
        ("t1", 0),
        ("t1", 1),
        ("t2", 0),
        ("t2", 1),
    ]
    assert out[("t2", 2)] == "beyond the first 2 candidates (class below min_class_support, unjudged)"


def test_paper_threshold_reading_is_documented_and_settable():
    cfg = FilterConfig()
    assert (cfg.confidence_threshold, cfg.perplexity_threshold) == (0.99, 5.0)
    assert FilterConfig(confidence_threshold=0.5, perplexity_threshold=0.99).perplexity_threshold == 0.99
    with pytest.raises(Exception, match="confidence_threshold"):
        FilterConfig(confidence_threshold=5)


# ----------------------------------------------------------------------------- metrics
def test_accuracy_and_macro_f1_by_hand():
    from common.models.classifiers.label_metrics import accuracy_and_macro_f1

    acc, f1 = accuracy_and_macro_f1(["a", "a", "b", "b"], ["a", "b", "b", "b"])
    assert acc == 0.75
    # F1(a) = 2/(2+0+1) = 0.6667, F1(b) = 4/(4+1+0) = 0.8
    assert f1 == pytest.approx((2 / 3 + 0.8) / 2)


# ----------------------------------------------------------------------------- ingest and end to end
def test_texts_ingest_quarantines_bad_rows_and_takes_the_split_from_file_names(ctx, tmp_path):
    from common.data.config import InputSpec
    from common.data.raw_input import InputSchemaError
    from jobs.foundation.ingest import texts_job

    folder = tmp_path / "sst"
    folder.mkdir()
    (folder / "train.csv").write_text(
        'text,label\n"good film",pos\n"bad film",neg\n"",pos\n"no label",\n"ctrl \x01 char",neg\n', encoding="utf-8"
    )
    (folder / "test.csv").write_text("text,label\nfine,pos\n", encoding="utf-8")
    (folder / "holdout.csv").write_text("text,label\nelsewhere,neg\n", encoding="utf-8")
    ctx.cfg.inputs.texts = InputSpec(path=f"{folder}/*.csv", from_path={"split": r"/([a-z]+)\.csv$"})
    result = texts_job(ctx)
    assert result.metrics["texts.rows_in"] == 7
    assert result.metrics["texts.rows_kept"] == 3 and result.metrics["texts.rows_quarantined"] == 4
    kept = {(r["text"], r["split"]) for r in ctx.lakehouse.read("texts").collect()}
    assert kept == {("good film", "train"), ("bad film", "train"), ("fine", "test")}
    reasons = sorted(r["reason"] for r in ctx.lakehouse.read("texts_quarantine").collect())
    assert reasons == [
        "empty label",
        "empty text",
        "invalid text in text: control or undecodable characters",
        "unknown split (allowed: train, dev, test)",
    ]
    # a column from the file name needs file inputs: a Delta table says so, naming itself
    location = ctx.lakehouse.location("texts")
    ctx.cfg.inputs.texts = InputSpec(path=location, from_path={"split": "x"})
    with pytest.raises(InputSchemaError, match="from_path needs a file input"):
        texts_job(ctx)


def test_pipeline_end_to_end_on_the_demo_titles(small_world):
    from pyspark.sql import functions as F

    # The world's settings (tests/worlds.py): Ñ = 2, 3 folds, fastText surrogates of 50 epochs, a 0.6
    # confidence threshold, R = 2 and the curve at Ñ in {0, 1, 2}.
    by_job = small_world.run("boostaug")
    ctx = small_world.ctx
    card = check_card(small_world, by_job["boostaug-filter"], "boostaug_kept")
    assert "| confidence_threshold | `0.6` |" in card and "| surrogate | `fasttext` |" in card
    lake = ctx.lakehouse
    n_train = lake.read("boostaug_texts").filter("split = 'train'").count()
    candidates = lake.read("boostaug_candidates")
    assert candidates.count() == n_train * 3 * 4  # 3 backends x 2·Ñ candidates
    kept, rejects = lake.read("boostaug_kept"), lake.read("boostaug_rejects")
    assert kept.count() + rejects.count() == candidates.count()
    assert rejects.filter(F.col("reason").isNull()).count() == 0
    # at most Ñ kept per source and backend, all with the source's label as predicted
    assert kept.count() > 0 and rejects.count() > 0
    assert kept.groupBy("source_id", "backend").count().agg(F.max("count")).first()[0] <= 2
    assert kept.filter(F.col("confidence") <= 0.6).count() == 0
    assert kept.filter(F.col("pred_label") != F.col("label")).count() == 0
    # no kept augmentation copies a dev or test text (compared case-folded)
    evaluation = lake.read("boostaug_texts").filter("split != 'train'").select(F.lower("text").alias("t"))
    assert kept.select(F.lower("text").alias("t")).join(evaluation, "t").count() == 0
    # each candidate was scored by the surrogate of its own fold: a surrogate never saw its fold's texts
    assert by_job["boostaug-filter"].metrics["candidates"] == candidates.count()

    res = lake.read("boostaug_results").toPandas()
    methods = set(res["method"])
    assert {
        "none",
        "eda",
        "eda+boostaug",
        "spelling+boostaug",
        "split",
        "eda+boostaug w/o label",
        "eda+boostaug w/o confidence",
        "eda+boostaug w/o cross-boosting",
    } <= methods
    assert "eda+boostaug w/o perplexity" not in methods  # fastText surrogates have no perplexity
    assert (res.groupby(["method", "n_aug"]).size() == 2).all()  # R = 2 per variant
    assert res["accuracy"].between(0, 1).all() and (res["n_train"] >= n_train).all()
    # every classifier's test predictions kept; accuracy recomputed from them is the results table's
    n_test = lake.read("boostaug_texts").filter("split = 'test'").count()
    predictions = lake.read("boostaug_predictions").toPandas()
    assert len(predictions) == len(res) * n_test
    hits = predictions.assign(hit=predictions["gold"] == predictions["pred"]).groupby(["method", "repeat"])["hit"]
    main = res[res["n_aug"].isin([0, 2])].set_index(["method", "repeat"])["accuracy"]
    assert hits.mean().reindex(main.index).to_numpy() == pytest.approx(main.to_numpy())
    # each method (the curve's other sizes as methods of their own) judged against none on the same rows
    evidence = lake.read("boostaug_evidence").toPandas()
    assert set(evidence["method"]) == (methods - {"none"}) | {"eda @1", "eda+boostaug @1"}
    assert (evidence["scope"] == "model=fasttext").all() and (evidence["n_test"] == n_test).all()
    assert set(evidence["metric"]) == {"accuracy", "macro_f1"} and evidence["paper_effect"].isna().all()
    assert "eda+boostaug: accuracy" in open(f"{ctx.cfg.lakehouse.root}/reports/boostaug/report.md").read()
    none_rows = res[res["method"] == "none"]
    assert (none_rows["n_augmented"] == 0).all() and (none_rows["n_train"] == n_train).all()
    # unfiltered EDA at Ñ = 2 adds exactly 2 rows per training text
    assert (res[(res["method"] == "eda") & (res["n_aug"] == 2)]["n_augmented"] == 2 * n_train).all()

    # a re-run of the same config on the same inputs writes nothing new
    again = small_world.rerun("boostaug")
    assert all(out.skipped for r in again for out in r.outputs.values())
