"""Genre transfer across topics (paper 5): the keyword score on a hand-computed two-topic example, split
disjointness and ordering, the window preprocessing, per-genre generator isolation, and a tiny end-to-end
run of the pipeline."""

from __future__ import annotations

import math
import random

import pytest
from worlds import check_card

from common.genre import text as T
from common.genre.config import GenreConfig, SplitConfig
from common.genre.topics import effective_sizes, split_sizes
from jobs.genre.genre_tables import JUDGED as GENRE_JUDGED


# ----------------------------------------------------------------------------- text
def test_passages_cut_at_whitespace_within_the_limit():
    text = "alpha beta  gamma\n\ndelta epsilon zeta eta theta"
    parts = T.passages(text, 12)
    assert parts == ["alpha beta", "gamma delta", "epsilon zeta", "eta theta"]
    assert all(len(p) <= 12 for p in parts)
    assert " ".join(parts) == " ".join(text.split())  # nothing lost, nothing repeated
    assert T.passages("", 10) == [] and T.passages("averyveryverylongword x", 5) == ["averyveryverylongword", "x"]


def test_window_is_seeded_whole_words_and_bounded():
    text = " ".join(f"w{i:03d}" for i in range(400))  # 1,999 characters
    first = T.window(text, "doc-1", 42, 100)
    assert first == T.window(text, "doc-1", 42, 100)  # same key and seed, same window
    assert len(first) <= 100 and first in text
    assert all(w.startswith("w") and len(w) == 4 for w in first.split())  # no word cut in half
    others = {T.window(text, f"doc-{i}", 42, 100) for i in range(20)} | {
        T.window(text, "doc-1", s, 100) for s in range(20)
    }
    assert len(others) > 10  # the position moves with the key and with the seed
    assert T.window("short  text", "k", 1, 100) == "short text"


def test_clean_removes_numbers_and_punctuation(spark):
    from pyspark.sql import functions as F

    from common.genre.evaluation import clean_col

    def clean(text: str) -> str:
        return spark.createDataFrame([(text,)], "t string").select(clean_col(F.col("t"))).first()[0]

    assert clean('It\'s 1961: the Grand-Jury said "no"!  Ça va.') == "It s the Grand Jury said no Ça va"
    assert clean("123 ... 456") == ""


# ----------------------------------------------------------------------------- keywords
def test_the_topic_vocabulary_does_not_depend_on_partitioning_or_task_order(spark):
    """Spark's CountVectorizer orders words of equal frequency as its tasks finish: two demo runs on one corpus
    got different vocabularies, hence different topics. The topic model's vocabulary is CountVectorizer's
    rule with ties by word, whatever the partitioning: document frequency >= min_df (2 here; ``solo`` is in
    one document, ``echo`` three times in one), <= max_df (half the documents: ``common`` is in all,
    ``rare`` in two only but 8 times in each, more than half the documents' count), the vocab_size most
    frequent."""
    from pyspark.sql import functions as F

    from common.genre.config import TopicModelConfig
    from common.genre.topics import fit_topic_model

    words = ["zebra", "yak", "xerus", "wombat", "vole", "urchin", "tapir", "seal"]
    extra = {0: ["solo"], 1: ["echo"] * 3, 2: ["rare"] * 8, 3: ["rare"] * 8}
    docs = [" ".join(["common"] + words[i % 8 : i % 8 + 3] + extra.get(i, [])) for i in range(12)]
    cfg = TopicModelConfig(topics=2, max_iter=2, vocab_size=7, min_df=2.0, max_df=0.5)
    rows = spark.createDataFrame([(t,) for t in docs], "text string")
    vocabularies = [
        fit_topic_model(cfg, 7, frame).stages[2].vocabulary
        for frame in (rows.coalesce(1), rows.repartition(4), rows.orderBy(F.desc("text")).repartition(3))
    ]
    assert vocabularies[0] == vocabularies[1] == vocabularies[2]
    counts = {w: sum(d.split().count(w) for d in docs) for w in words + ["rare"]}
    assert vocabularies[0] == sorted(counts, key=lambda w: (-counts[w], w))[:7]
    assert vocabularies[0][0] == "rare" and "echo" not in vocabularies[0]


def test_the_topics_do_not_depend_on_the_inputs_layout(spark):
    """Online LDA draws its mini-batches partition by partition: the same passages in 1 or 4 partitions, or in
    another order, gave other topics (Brown's 25 topics moved when its documents table was written as 4 files).
    The model fits on a layout fixed by the rows' text, so every layout gives the same topic matrix; another
    seed gives another one (the comparison can fail)."""
    import numpy as np
    from pyspark.sql import functions as F

    from common.genre.config import TopicModelConfig
    from common.genre.topics import fit_topic_model

    rng = random.Random(5)
    vocab = [
        [f"{topic}{w}" for w in ("alpha", "beta", "gamma", "delta", "omega", "sigma")]
        for topic in ("harbor", "orchard", "circuit")
    ]
    docs = [" ".join(rng.choice(vocab[i % 3]) for _ in range(12)) for i in range(240)]
    rows = spark.createDataFrame([(t,) for t in docs], "text string")
    cfg = TopicModelConfig(topics=3, max_iter=5, max_df=None)

    def topics(frame, seed=7):
        return fit_topic_model(cfg, seed, frame).stages[-1].topicsMatrix().toArray()

    one = topics(rows.coalesce(1))
    for frame in (rows.repartition(4), rows.orderBy(F.desc("text")).repartition(3)):
        np.testing.assert_allclose(topics(frame), one, rtol=1e-9)
    assert np.abs(topics(rows.coalesce(1), seed=8) - one).max() > 1.0


def test_keyword_score_on_a_hand_computed_two_topic_example(spark):
    from common.genre.topics import keyword_scores, top_keywords

    # One document, two topics: L(D) = (0.8, 0.2). Word weights L(w, t):
    #   ball (0.5, 0.0), game (0.3, 0.1), vote (0.0, 0.6), team (0.2, 0.1); "the" has none (a stop word).
    # Passage 0: "vote ball the game ball vote vote team".
    #   ball: 2 x (0.8*0.5 + 0.2*0.0) = 0.80    vote: 3 x (0.8*0.0 + 0.2*0.6) = 0.36
    #   game: 1 x (0.8*0.3 + 0.2*0.1) = 0.26    team: 1 x (0.8*0.2 + 0.2*0.1) = 0.18
    words = "vote ball the game ball vote vote team".split()
    occ = spark.createDataFrame(
        [("d1", 0, i, w) for i, w in enumerate(words)], "doc_id string, passage_idx int, pos int, word string"
    )
    doc_weights = spark.createDataFrame([("d1", [0.8, 0.2])], "doc_id string, topic_weights array<double>")
    ww = spark.createDataFrame(
        [
            ("ball", 0, 0.5),
            ("ball", 1, 0.0),
            ("game", 0, 0.3),
            ("game", 1, 0.1),
            ("vote", 0, 0.0),
            ("vote", 1, 0.6),
            ("team", 0, 0.2),
            ("team", 1, 0.1),
        ],
        "word string, topic int, weight double",
    )
    scores = {
        r["word"]: (r["score"], r["occurrences"], r["first_pos"])
        for r in keyword_scores(occ, doc_weights, ww).collect()
    }
    assert set(scores) == {"ball", "vote", "game", "team"}  # no score for a word without topic weights
    for word, expected in {"ball": 0.80, "vote": 0.36, "game": 0.26, "team": 0.18}.items():
        assert scores[word][0] == pytest.approx(expected)
    assert scores["vote"][1:] == (3, 0) and scores["ball"][1:] == (2, 1)
    # top 3 = ball, vote, game; kept in the order they first occur in the passage
    assert top_keywords(keyword_scores(occ, doc_weights, ww), 3).first()["keywords"] == "vote ball game"


# ----------------------------------------------------------------------------- splits
def test_split_sizes_never_overlap_and_sizes_that_repeat_a_row_are_dropped():
    cfg = SplitConfig(sizes=[2, 3, 100], test_fraction=0.2, test_per_genre=300)
    sizes = split_sizes({"a": 10, "b": 3, "c": 1}, 3, cfg)
    assert sizes == {"a": (2, 3), "b": (1, 1), "c": (1, 0)}
    assert all(test + 2 * train <= n for (test, train), n in zip(sizes.values(), (10, 3, 1)))
    # N = 3 and N = 100 both cap genre a at 4 training documents (of 8 after its 2 test documents)
    assert effective_sizes({"a": 10, "b": 3}, SplitConfig(sizes=[3, 100])) == [3]
    assert effective_sizes({"a": 1000}, SplitConfig(sizes=[30, 100, 1000])) == [30, 100, 1000]  # 1000 -> 400
    assert effective_sizes({"a": 250}, SplitConfig(sizes=[30, 100, 1000])) == [30, 100]  # 1000 -> 100 again
    assert effective_sizes({"a": 1}, SplitConfig(sizes=[30])) == []


def test_splits_are_disjoint_and_ordered_by_topic_weight(spark):
    from common.genre.topics import topic_splits

    # 2 genres x 10 documents; weight of topic 0 rises with the document number, topic 1 the reverse.
    rows = [(f"{g}{i:02d}", g, [i / 10, 1 - i / 10]) for g in ("news", "fiction") for i in range(10)]
    dt = spark.createDataFrame(rows, "doc_id string, genre string, topic_weights array<double>")
    cfg = SplitConfig(test_fraction=0.2)
    out = topic_splits(dt, [0, 1], [3], cfg).toPandas()
    for (topic, genre), group in out.groupby(["topic", "genre"]):
        roles = {role: set(g["doc_id"]) for role, g in group.groupby("role")}
        assert {len(v) for v in roles.values()} == {2, 3} and len(roles["test"]) == 2
        assert not (
            roles["test"] & roles["on_topic"]
            or roles["test"] & roles["off_topic"]
            or roles["on_topic"] & roles["off_topic"]
        )
        weight = dict(zip(group["doc_id"], group["weight"]))
        # test = heaviest, on_topic = next heaviest, off_topic = lightest for the topic
        assert min(weight[d] for d in roles["test"]) >= max(weight[d] for d in roles["on_topic"])
        assert min(weight[d] for d in roles["on_topic"]) > max(weight[d] for d in roles["off_topic"])
        expected_off = {f"{genre}{i:02d}" for i in ((0, 1, 2) if topic == 0 else (7, 8, 9))}
        assert roles["off_topic"] == expected_off
    assert out.groupby(["topic", "n"]).size().to_dict() == {(0, 3): 16, (1, 3): 16}
    assert out["n"].eq(3).all()


def test_generators_learn_only_from_their_genres_off_topic_documents(spark):
    from common.genre.generation import generator_pairs

    splits = spark.createDataFrame(
        [
            (0, 3, "a1", "news", "off_topic"),
            (0, 3, "a2", "news", "on_topic"),
            (0, 3, "a3", "news", "test"),
            (0, 3, "b1", "fiction", "off_topic"),
            (1, 3, "a2", "news", "off_topic"),
        ],
        "topic int, n int, doc_id string, genre string, role string",
    )
    passages = spark.createDataFrame(
        [
            (d, g, i, f"{d} passage {i}", f"kw {d} {i}" if i < 2 else "")
            for d, g in (("a1", "news"), ("a2", "news"), ("a3", "news"), ("b1", "fiction"))
            for i in range(3)
        ],
        "doc_id string, genre string, passage_idx int, passage string, keywords string",
    )
    pairs = generator_pairs(splits, passages, None).toPandas()
    by_key = {k: set(g["doc_id"]) for k, g in pairs.groupby(["topic", "n", "genre"])}
    assert by_key == {(0, 3, "news"): {"a1"}, (0, 3, "fiction"): {"b1"}, (1, 3, "news"): {"a2"}}
    assert set(pairs["passage_idx"]) == {0, 1}  # a passage without keywords makes no pair
    assert (pairs["target_text"] == pairs["doc_id"] + " passage " + pairs["passage_idx"].astype(str)).all()
    assert len(generator_pairs(splits, passages, 1).toPandas()) == 3  # first passage of each document only
    # one genre-conditioned generator per (topic, n): the same pairs, each source naming its genre
    conditioned = generator_pairs(splits, passages, None, per_genre=False).toPandas()
    assert len(conditioned) == len(pairs)
    assert (
        conditioned["source_text"]
        == conditioned["genre"] + " | kw " + conditioned["doc_id"] + " " + conditioned["passage_idx"].astype(str)
    ).all()


def test_synthetic_ratio_draws_k_test_documents_for_every_generator(spark):
    from common.genre.generation import prompt_sources, prompts

    # (topic 0, N 3): 2 genres x 3 off-topic = 6 off-topic documents, 8 test documents; (topic 1, N 3): 3 off-topic
    # of one genre, 2 test documents.
    rows = (
        [(0, 3, f"{g}-off{i}", g, "off_topic") for g in ("news", "story") for i in range(3)]
        + [(0, 3, f"{g}-test{i}", g, "test") for g in ("news", "story") for i in range(4)]
        + [(1, 3, f"news-off{i}", "news", "off_topic") for i in range(3)]
        + [(1, 3, "x1", "news", "test"), (1, 3, "x2", "news", "test")]
    )
    splits = spark.createDataFrame(rows, "topic int, n int, doc_id string, genre string, role string")

    def chosen(ratio, seed=42):
        out = prompt_sources(splits, ratio, seed).toPandas()
        return {k: set(g["source_doc_id"]) for k, g in out.groupby("topic")}

    # K = max(1, round(ratio x off-topic / genres)), capped by the test documents there are
    assert {k: len(v) for k, v in chosen(1.0).items()} == {0: 3, 1: 2}  # 6 / 2 = 3; 3 / 1 = 3 > 2 test docs
    assert {k: len(v) for k, v in chosen(0.1).items()} == {0: 1, 1: 1}  # at least one
    assert {k: len(v) for k, v in chosen(2.0).items()} == {0: 6, 1: 2}
    assert chosen(None) == {
        0: {f"{g}-test{i}" for g in ("news", "story") for i in range(4)},
        1: {"x1", "x2"},
    }  # every test document
    assert chosen(1.0)[0] <= chosen(2.0)[0]  # a larger ratio adds documents in the same seeded order
    assert chosen(1.0) == chosen(1.0) and any(chosen(1.0, s)[0] != chosen(1.0)[0] for s in range(1, 6))

    # every generator of the (topic, N) is prompted with the same chosen documents: K synthetic per genre
    passages = spark.createDataFrame(
        [(r[2], 0, f"kw {r[2]}") for r in rows], "doc_id string, passage_idx int, keywords string"
    )
    generators = spark.createDataFrame(
        [(0, 3, g, f"/m/{g}", f"v-{g}") for g in ("news", "story")],
        "topic int, n int, genre string, model_path string, model_version string",
    )
    p = prompts(splits, passages, generators, 42, 1.0).toPandas()
    assert p.groupby("genre")["source_doc_id"].apply(set).to_dict() == {
        "news": chosen(1.0)[0],
        "story": chosen(1.0)[0],
    }
    assert (p["source_text"] == "kw " + p["source_doc_id"]).all() and p["source_id"].is_unique
    assert set(p["keywords_from"]) == {"on_topic"}
    # a genre-conditioned generator (one model, every genre's row) is told the genre it writes, as in training
    one_model = spark.createDataFrame(
        [(0, 3, g, "/m/all", "v-all") for g in ("news", "science_fiction")],
        "topic int, n int, genre string, model_path string, model_version string",
    )
    c = prompts(splits, passages, one_model, 42, 1.0, per_genre=False).toPandas()
    assert c.groupby("genre")["source_doc_id"].apply(set).to_dict() == {
        "news": chosen(1.0)[0],
        "science_fiction": chosen(1.0)[0],
    }
    assert (c["source_text"] == c["genre"].str.replace("_", " ") + " | kw " + c["source_doc_id"]).all()
    assert c["source_id"].is_unique and set(c["model_path"]) == {"/m/all"}

    # the Table-5 control: as many off-topic training documents again (capped by those there are), never a test one
    control = prompt_sources(splits, 1.0, 42, control=True).toPandas()
    sizes = control.groupby(["topic", "keywords_from"]).size().to_dict()
    assert sizes == {(0, "off_topic"): 3, (0, "on_topic"): 3, (1, "off_topic"): 3, (1, "on_topic"): 2}
    off = control[control["keywords_from"] == "off_topic"]
    assert off["source_doc_id"].str.contains("-off").all()
    assert set(control[control["keywords_from"] == "on_topic"]["source_doc_id"]) == chosen(1.0)[0] | chosen(1.0)[1]


def test_the_balanced_control_repeats_off_topic_documents_to_the_augmented_count_per_genre(spark):
    from common.genre.evaluation import balanced_rows

    # topic 0: news 2 off-topic + 3 synthetic, story 3 + 0, poem 0 + 2; topic 1: news 1 + 2 (separate counts)
    sets = [
        (0, "news", "off_topic", 2),
        (0, "news", "synthetic", 3),
        (0, "story", "off_topic", 3),
        (0, "poem", "synthetic", 2),
        (0, "news", "test", 4),
        (1, "news", "off_topic", 1),
        (1, "news", "synthetic", 2),
    ]
    rows = spark.createDataFrame(
        [(t, 30, s, f"{t}-{g}-{s}-{i}", g, f"text {i}") for t, g, s, k in sets for i in range(k)],
        "topic int, n int, set string, doc_id string, label string, text string",
    )
    got = balanced_rows(rows, 42).toPandas()
    assert set(got["set"]) == {"off_topic_balanced"}
    # each genre reaches its augmented count from its off-topic documents alone; a genre without any has none
    assert got.groupby(["topic", "label"]).size().to_dict() == {(0, "news"): 5, (0, "story"): 3, (1, "news"): 3}
    assert got["doc_id"].str.contains("-off_topic-").all()
    copies = got.groupby("doc_id").size()
    assert sorted(copies[copies.index.str.startswith("0-news")]) == [2, 3]  # 5 rows from 2 documents
    assert (copies[copies.index.str.startswith("0-story")] == 1).all() and copies["1-news-off_topic-0"] == 3
    again = balanced_rows(rows.repartition(3), 42).toPandas()
    assert again.groupby("doc_id").size().to_dict() == copies.to_dict()  # seeded, not layout-dependent


def test_summary_table_on_hand_computed_scores():
    import pandas as pd

    from common.genre.evaluation import methods, summary_table

    f1 = {  # (method, topic) -> macro-F1 of seeds 0 and 1
        ("on_topic", 1): (0.50, 0.60),
        ("off_topic", 1): (0.30, 0.30),
        ("augmented", 1): (0.40, 0.36),
        ("off_keywords", 1): (0.32, 0.30),
        ("on_topic", 2): (0.40, 0.40),
        ("off_topic", 2): (0.45, 0.45),
        ("augmented", 2): (0.40, 0.40),
        ("off_keywords", 2): (0.50, 0.50),
        ("off_topic_balanced", 1): (0.35, 0.35),
        ("off_topic_balanced", 2): (0.45, 0.43),
    }
    rows = [
        {"model": "fasttext", "n": 30, "topic": t, "method": m, "repeat": r, "macro_f1": v[r]}
        for (m, t), v in f1.items()
        for r in (0, 1)
    ]
    row = summary_table(pd.DataFrame(rows)).iloc[0]
    # augmented: topic means 0.38 and 0.40; per-seed averages over topics 0.40 and 0.38
    assert row["augmented"] == "39.0 ± 1.4" and row["topics"] == 2
    assert row["gap topics"] == "1/2"  # topic 2's off-topic row is above its on-topic one
    assert row["gain"] == "+1.5" and row["gain topics"] == "1/2"  # (0.08 - 0.05) / 2
    assert row["transfer"] == "-1.5"  # ((0.38 - 0.31) + (0.40 - 0.50)) / 2
    assert row["beyond balance"] == "-0.5"  # ((0.38 - 0.35) + (0.40 - 0.44)) / 2
    assert "off_topic_balanced" not in methods(True, True) and methods(False, False, True)["off_topic_balanced"] == (
        "off_topic_balanced",
    )
    assert "off_keywords" not in methods(False) and methods(True)["off_keywords"] == ("off_topic", "synthetic_off")
    assert "synthetic_only" not in methods(True) and methods(False, True)["synthetic_only"] == ("synthetic",)
    # one block per classifier model, each compared within itself
    both = pd.DataFrame(rows)
    both = pd.concat([both, both.assign(model="encoder", macro_f1=both["macro_f1"] + 0.1)])
    table = summary_table(both).set_index("model")
    assert list(table.index) == ["encoder", "fasttext"] and table.loc["fasttext", "gain"] == "+1.5"
    assert table.loc["encoder", "augmented"] == "49.0 ± 1.4" and table.loc["encoder", "gain"] == "+1.5"


def test_generator_pairs_are_read_per_generator(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from common.models.generation.kinds.batching import read_pairs

    pq.write_table(
        pa.table(
            {
                "topic": [0, 0, 1, 0],
                "genre": ["news", "story", "news", "news"],
                "source_text": ["a", "b", "c", " "],
                "target_text": ["A", "B", "C", "D"],
            }
        ),
        tmp_path / "pairs.parquet",
    )
    files = [str(tmp_path / "pairs.parquet")]
    # the filters a generator's fine-tuning task reads with: its own (topic, genre) rows only
    assert read_pairs(files, "source_text", "target_text", [("topic", "=", 0), ("genre", "=", "news")]) == [("a", "A")]
    assert read_pairs(files, "source_text", "target_text") == [("a", "A"), ("b", "B"), ("c", "C")]
    # The same rows in two files, in another order: the same list (a fine-tune's data order must not follow
    # how the pairs table was partitioned).
    pq.write_table(pa.table({"source_text": ["c", "a"], "target_text": ["C", "A"]}), tmp_path / "p1.parquet")
    pq.write_table(pa.table({"source_text": ["b"], "target_text": ["B"]}), tmp_path / "p0.parquet")
    split = [str(tmp_path / "p0.parquet"), str(tmp_path / "p1.parquet")]
    assert read_pairs(split, "source_text", "target_text") == read_pairs(files, "source_text", "target_text")


def test_bad_documents_and_split_settings_are_named(ctx):
    from jobs.genre.genre import DuplicateDocumentError, splits_job, topics_job

    lake = ctx.lakehouse
    lake.write(
        ctx.spark.createDataFrame(
            [("d1", "harbor ship cargo", "news"), ("d1", "apple barn farmer", "story")],
            "doc_id string, text string, genre string",
        ),
        "documents",
    )
    with pytest.raises(DuplicateDocumentError, match="documents: doc_id is not unique .*'d1'"):
        topics_job(ctx)
    rows = [(f"{g}{i}", g, [i / 10, 1 - i / 10]) for g in ("news", "story") for i in range(10)]
    lake.write(
        ctx.spark.createDataFrame(rows, "doc_id string, genre string, topic_weights array<double>"), "genre_doc_topics"
    )
    with pytest.raises(ValueError, match=r"genre.split.topics: \[30\] are not topics of a 25-topic model"):
        GenreConfig(split=SplitConfig(topics=[0, 30]))  # at load
    ctx.cfg.genre = GenreConfig(split=SplitConfig(topics=[0, 3]))
    ctx.cfg.genre.split.topics = [0, 30]  # changed after loading, as a notebook may
    with pytest.raises(ValueError, match=r"genre.split.topics: \[30\] are not topics of a 25-topic model"):
        splits_job(ctx)
    ctx.cfg.genre = GenreConfig(split=SplitConfig(sizes=[5], test_fraction=0.9))
    with pytest.raises(ValueError, match="no genre has enough documents for a training set"):
        splits_job(ctx)


# ----------------------------------------------------------------------------- end to end
def test_pipeline_end_to_end_on_a_tiny_corpus(small_world, tmp_path):
    from worlds import GENRES

    # The world's settings (tests/worlds.py): 36 documents of 3 genres over 3 topics, a 3-topic model, sets
    # of N in {3, 100}, one scratch-T5 generator per genre, the off-topic-keywords control, R = 2.
    results = small_world.run("genre-transfer")
    ctx, n_rows = small_world.ctx, small_world.n_documents
    card = check_card(small_world, results["genre-generate"], "genre_synthetic")
    assert "| generators | `one per genre` |" in card and "| kind | `scratch_t5` |" in card
    # genre.topic_model.log_perplexity is on by default (conf/demo.yaml turns it off)
    assert math.isfinite(results["genre-topics"].metrics["log_perplexity"])
    lake = ctx.lakehouse
    assert lake.read("documents").count() + lake.read("documents_quarantine").count() == n_rows
    assert {r["reason"] for r in lake.read("documents_quarantine").collect()} == {
        "empty text",
        "empty genre",
        "duplicate of report-00",
        "duplicate of story-01",
    }  # the planted repeats

    splits = lake.read("genre_splits").toPandas()
    assert sorted(splits["n"].unique()) == [3]  # N = 100 caps every genre to N = 3's sets: dropped
    assert splits["topic"].nunique() == 1
    # per topic and genre: 3 test, 3 on-topic, 3 off-topic documents, never shared
    for _, group in splits.groupby(["topic", "genre"]):
        assert group.groupby("role").size().to_dict() == {"test": 3, "on_topic": 3, "off_topic": 3}
        assert group["doc_id"].is_unique

    # each generator's pairs come from its own genre's off-topic documents of its topic
    pairs = (
        lake.read("genre_gen_pairs")
        .toPandas()
        .merge(splits[["topic", "n", "doc_id", "genre", "role"]], on=["topic", "n", "doc_id"], suffixes=("", "_split"))
    )
    assert (pairs["role"] == "off_topic").all() and (pairs["genre"] == pairs["genre_split"]).all()
    generators = lake.read("genre_generators").toPandas()
    assert len(generators) == 3 and generators["model_path"].is_unique

    prompts = lake.read("genre_prompts").toPandas()
    # the paper's 1:1: 9 off-topic documents / 3 genres = 3 test documents' keywords, each to every generator;
    # the control as many from off-topic documents' keywords
    assert prompts.groupby(["keywords_from", "genre"])["source_doc_id"].nunique().eq(3).all()
    assert len(prompts) == 2 * 3 * 3
    prompts = len(prompts)
    synthetic = lake.read("genre_synthetic").toPandas()
    assert len(synthetic) + lake.read("genre_synthetic_quarantine").count() == prompts
    assert len(synthetic) >= prompts // 2  # the world's prompts fit its generators (none too long to read)
    assert results["genre-generate"].metrics["prompts"] == prompts
    assert set(synthetic["genre"]) <= set(GENRES)
    # each synthetic document came from the generator of its own (topic, N, genre)
    routed = synthetic.merge(generators, on=["topic", "n", "genre"], suffixes=("", "_generator"))
    assert len(routed) == len(synthetic) and (routed["model_version"] == routed["model_version_generator"]).all()

    res = lake.read("genre_results").toPandas()
    assert len(res) == 1 * 1 * 4 * 2  # topics x sizes x methods x seeds
    assert set(res["method"]) == {"on_topic", "off_topic", "augmented", "off_keywords"}
    assert res["macro_f1"].between(0, 1).all() and (res["n_test"] == 9).all()
    n_train = {m: g["n_train"].to_numpy() for m, g in res.groupby("method")}
    # each method's synthetic documents (however few a 1-epoch model writes) join the off-topic set
    written = synthetic.groupby("keywords_from").size()
    assert (n_train["off_topic"] == 9).all() and (n_train["augmented"] - 9 == written.get("on_topic", 0)).all()
    assert (n_train["off_keywords"] - 9 == written.get("off_topic", 0)).all()
    report = ctx.cfg.lakehouse.root + "/reports/genre/report.md"
    assert "on_topic" in open(report, encoding="utf-8").read()
    # every classifier's 9 test predictions kept, and the figures are theirs: macro-F1 recomputed from them
    from common.models.classifiers.label_metrics import accuracy_and_macro_f1

    predictions = lake.read("genre_predictions").toPandas()
    assert len(predictions) == len(res) * 9 and set(predictions["model"]) == {"fasttext"}
    for (method, repeat), rows in predictions.groupby(["method", "repeat"]):
        kept = res[(res["method"] == method) & (res["repeat"] == repeat)]["macro_f1"].item()
        assert accuracy_and_macro_f1(list(rows["gold"]), list(rows["pred"]))[1] == pytest.approx(kept)
    # each method judged against off_topic on the same 9 rows, the two seeds sharing them (counted once)
    evidence = lake.read("genre_evidence").toPandas().set_index(["method", "metric"])
    assert set(evidence.index) == {(m, k) for m in ("on_topic", "augmented", "off_keywords") for k in GENRE_JUDGED}
    assert (evidence["scope"] == "model=fasttext").all() and (evidence["n_test"] == 9).all()
    assert (evidence["repeats"] == 2).all() and evidence["verdict"].str.len().gt(0).all()
    augmented = evidence.loc[("augmented", "macro_f1")]  # beside it, Table 4's gain scaled to this baseline
    assert augmented["paper_effect"] == pytest.approx((0.709 - 0.668) / (1 - 0.668) * (1 - augmented["baseline"]))
    assert "augmented: macro_f1" in open(report, encoding="utf-8").read()

    again = small_world.rerun("genre-transfer")
    assert all(out.skipped for r in again for out in r.outputs.values())

    # What follows changes the config: on a copy of the world, so other tests still read the world as built.
    ctx = small_world.copy(tmp_path)
    lake = ctx.lakehouse
    report = ctx.cfg.lakehouse.root + "/reports/genre/report.md"

    # A run that finds the results written but not the predictions (a lakehouse from before they were kept, or a
    # crash between the writes) scores anew: the results version stays, no kept classifier is written again, and the
    # new evidence is what the summary reads beside those results (matched by config, not by run).
    import shutil
    from pathlib import Path

    from jobs.genre.genre_evaluate import evaluate_job

    for table in ("genre_predictions", "genre_evidence"):
        shutil.rmtree(lake.location(table))
    kept = {p: p.stat().st_mtime_ns for p in Path(ctx.cfg.lakehouse.root, "models").rglob("*") if p.is_file()}
    results_version = lake.version("genre_results")
    evaluate_job(ctx)
    assert lake.version("genre_results") == results_version and lake.read("genre_evidence").count() == 6
    assert kept == {p: p.stat().st_mtime_ns for p in kept}

    # another ratio prompts anew but reuses the fine-tuned generators (a model depends on its data and
    # training, not on how it is prompted): every test document now prompts every generator
    from jobs.genre.genre_generate import generate_job

    ctx.cfg.genre.generator.synthetic_ratio, ctx.cfg.genre.generator.off_topic_control = None, False
    generate_job(ctx)
    assert lake.read("genre_prompts").count() == 3 * 3 * 3
    assert lake.read("genre_generators").toPandas()["reused"].all()
    assert ctx._ray is not None  # generation ran on the configured runtime, though no fine-tune started it

    # one genre-conditioned generator for the (topic, N): every genre's row names it, and it learns and is
    # prompted with "<genre> | <keywords>"
    ctx.cfg.genre.generator.per_genre = False
    generate_job(ctx)
    generators = lake.read("genre_generators").toPandas()
    assert len(generators) == 3 and generators["model_path"].nunique() == 1 and not generators["reused"].any()
    pairs = lake.read("genre_gen_pairs").toPandas()
    prompts = lake.read("genre_prompts").toPandas()
    for frame, text in ((pairs, "source_text"), (prompts, "source_text")):
        assert all(t.startswith(g.replace("_", " ") + " | ") for g, t in zip(frame["genre"], frame[text]))
    assert len(prompts) == 3 * 3 * 3 and lake.read("genre_generated").count() == len(prompts)

    # the encoder classifier (a tiny fine-tune) beside fastText, and the synthetic-only row
    from common.genre.config import EvalConfig
    from common.models.classifier_config import EncoderConfig

    ctx.cfg.genre.eval = EvalConfig(
        repeats=1,
        models=["fasttext", "encoder"],
        synthetic_only=True,
        balanced_control=True,
        encoder=EncoderConfig(max_length=32, epochs=1, batch_size=8, learning_rate=1e-4, mlm_weight=1.0),
    )
    evaluated = evaluate_job(ctx)
    res = lake.read("genre_results").toPandas()
    synthetic = lake.read("genre_synthetic").toPandas()
    assert len(res) == 2 * 5 and set(res["model"]) == {"fasttext", "encoder"}
    assert set(res["method"]) == {"on_topic", "off_topic", "augmented", "synthetic_only", "off_topic_balanced"}
    assert res["macro_f1"].between(0, 1).all() and (res["n_test"] == 9).all()
    rows = res.set_index(["model", "method"])["n_train"]
    for model in ("fasttext", "encoder"):  # both read the same sets; synthetic_only is the synthetic documents
        assert rows[(model, "synthetic_only")] == len(synthetic) and rows[(model, "off_topic")] == 9
        assert rows[(model, "augmented")] == 9 + len(synthetic)
        # every genre has 3 off-topic documents here, so the balanced control matches the augmented count
        assert rows[(model, "off_topic_balanced")] == rows[(model, "augmented")]
    assert "n3.augmented.macro_f1" in evaluated.metrics and "encoder.n3.augmented.macro_f1" in evaluated.metrics
    assert "encoder" in open(report, encoding="utf-8").read()
    # each model judged against its own off-topic classifiers
    assert set(lake.read("genre_evidence").toPandas()["scope"]) == {"model=fasttext", "model=encoder"}
    # each method's encoder ships beside its fastText classifier, cleaning its input as Spark cleaned its texts
    import json

    import mlflow

    from common.genre.evaluation import NON_LETTERS
    from common.registry.store import registry_client

    client, prefix = registry_client(ctx), ctx.cfg.registry.name_prefix
    names = [
        m.name for m in client.search_registered_models(f"name LIKE '{prefix}genre_%'") if m.name.startswith(prefix)
    ]
    encoders = sorted(n for n in names if n.endswith("_encoder"))
    assert len(encoders) == 5 and len(names) == 10, names
    version = client.get_model_version_by_alias(encoders[0], "champion")
    assert version.tags["classifier"] == "encoder" and float(version.tags["metric.macro_f1.n"]) == 1
    model = Path(
        mlflow.artifacts.download_artifacts(
            f"models:/{encoders[0]}@champion", dst_path=str(tmp_path / "m"), tracking_uri=ctx.cfg.tracking_uri
        )
    )
    manifest = json.loads((model / "data" / "classifier" / "model.json").read_text())
    assert manifest["kind"] == "encoder" and manifest["substitute"] == [[NON_LETTERS, ""]]
    ctx.close()
