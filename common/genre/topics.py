"""Topics, keywords and splits for genre transfer (paper 5): Spark ML stages and DataFrame transforms.

The topic model is a Spark ML ``Pipeline`` (tokenizer, stop words, vocabulary, LDA) fit once per run; each
document gets its topic distribution L(D, t) and each vocabulary word its topic weights L(w, t) (the
topic's word distribution, as the paper's ETM β). Keywords and splits are joins, windows and aggregates:
nothing that grows with the corpus reaches the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from common.genre.config import SplitConfig, TopicModelConfig
from common.genre.text import passages

if TYPE_CHECKING:
    from pyspark.ml import PipelineModel
    from pyspark.ml.feature import CountVectorizerModel
    from pyspark.sql import DataFrame

# Letters only: numbers and punctuation never become topic words or keywords.
TOKEN_PATTERN = r"[^\p{L}]+"
ROLES = ("test", "on_topic", "off_topic")


def fit_topic_model(cfg: TopicModelConfig, seed: int, rows: "DataFrame") -> "PipelineModel":
    """Fit the topic model on ``rows`` (a ``text`` column): a Spark ML ``PipelineModel`` taking ``text`` ->
    ``tokens`` -> ``words`` (stop words out) -> ``features`` (counts over the vocabulary) -> ``topic_weights``
    (LDA, ``cfg.topics`` topics, seeded).

    The vocabulary is CountVectorizer's rule (terms whose document frequency is within ``min_df`` and
    ``max_df``, counts or fractions of the documents; the ``vocab_size`` most frequent), built here with ties
    in frequency ordered by word: Spark's CountVectorizer leaves them in task-completion order, so two runs
    on one corpus got different vocabularies and, with them, different topics. Only the vocabulary (at most
    ``vocab_size`` words) reaches the driver. The rows reach LDA in a layout fixed by their text
    (``cfg.fit_partitions`` hash partitions, sorted within): the topics depend on the rows and ``seed``, not
    on how the input was partitioned.
    """
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.clustering import LDA
    from pyspark.ml.feature import RegexTokenizer, StopWordsRemover
    from pyspark.sql import functions as F

    # Online LDA samples its mini-batches partition by partition: the layout is part of the result.
    rows = rows.repartition(cfg.fit_partitions, "text").sortWithinPartitions("text")
    text = Pipeline(
        stages=[
            RegexTokenizer(
                inputCol="text",
                outputCol="tokens",
                pattern=TOKEN_PATTERN,
                gaps=True,
                toLowercase=True,
                minTokenLength=cfg.min_token_length,
            ),
            StopWordsRemover(inputCol="tokens", outputCol="words"),
        ]
    ).fit(rows)
    words = text.transform(rows).select("words")
    n_docs = words.count() if cfg.min_df < 1 or (cfg.max_df is not None and cfg.max_df < 1) else 0
    min_df = cfg.min_df if cfg.min_df >= 1 else cfg.min_df * n_docs
    max_df = float("inf") if cfg.max_df is None else cfg.max_df if cfg.max_df >= 1 else cfg.max_df * n_docs
    # The id gets a projection of its own: beside explode, Spark evaluates it once per exploded word, and
    # every (doc, word) pair became a document of its own (document frequency = term frequency).
    docs = words.select(F.monotonically_increasing_id().alias("doc"), "words")
    per_doc = docs.select("doc", F.explode("words").alias("word")).groupBy("doc", "word").count()
    terms = (
        per_doc.groupBy("word")
        .agg(F.sum("count").alias("tf"), F.count(F.lit(1)).alias("df"))
        .where((F.col("df") >= min_df) & (F.col("df") <= max_df))
        .orderBy(F.desc("tf"), "word")
        .limit(cfg.vocab_size)
    )
    vocabulary = [r["word"] for r in terms.collect()]
    counts = _count_vectorizer(vocabulary)
    lda = LDA(
        k=cfg.topics,
        optimizer=cfg.optimizer,
        maxIter=cfg.max_iter,
        seed=seed,
        featuresCol="features",
        topicDistributionCol="topic_weights",
        learningOffset=cfg.learning_offset,
        learningDecay=cfg.learning_decay,
    ).fit(counts.transform(words))
    return PipelineModel(stages=[*text.stages, counts, lda])


def _count_vectorizer(vocabulary: Sequence[str]) -> "CountVectorizerModel":
    """A ``CountVectorizerModel`` (``words`` -> ``features``) over ``vocabulary``, in its order.

    ``CountVectorizerModel.from_vocabulary`` sends the vocabulary to the JVM one word per Py4J call (about
    2 s for 20,000 words); here it crosses as one string, split into a ``String[]`` there. Letters-only
    tokens never hold the separator. Spark Connect has no JVM handle: it takes the library's way."""
    from pyspark.ml.feature import CountVectorizerModel
    from pyspark.sql import SparkSession
    from pyspark.sql.utils import is_remote

    if is_remote() or not vocabulary:
        return CountVectorizerModel.from_vocabulary(list(vocabulary), inputCol="words", outputCol="features")
    jvm = SparkSession.getActiveSession().sparkContext._jvm
    words = jvm.java.util.regex.Pattern.compile("\n").split("\n".join(vocabulary), -1)
    model = CountVectorizerModel._create_from_java_class("org.apache.spark.ml.feature.CountVectorizerModel", words)
    return model.setInputCol("words").setOutputCol("features")


def doc_topics(model: "PipelineModel", docs: "DataFrame") -> "DataFrame":
    """``docs`` (doc_id, text, genre) -> (doc_id, genre, topic_weights array<double>, top_topic int)."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    weights = vector_to_array("topic_weights")
    out = model.transform(docs).select("doc_id", "genre", weights.alias("topic_weights"))
    return out.withColumn("top_topic", F.array_position("topic_weights", F.array_max("topic_weights")).cast("int") - 1)


def word_topics(model: "PipelineModel") -> "DataFrame":
    """(word, topic, weight) for every vocabulary word and topic: L(w, t), the topic's word distribution."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    vocabulary = model.stages[2].vocabulary  # bounded by topic_model.vocab_size, not by the corpus
    lda = model.stages[-1]
    spark = SparkSession.getActiveSession()
    words = spark.createDataFrame(list(enumerate(vocabulary)), "term int, word string")
    topics = lda.describeTopics(maxTermsPerTopic=len(vocabulary)).select(
        "topic", F.explode(F.arrays_zip("termIndices", "termWeights")).alias("t")
    )
    return (
        topics.select(
            F.col("t.termIndices").alias("term"),
            F.col("topic").cast("int").alias("topic"),
            F.col("t.termWeights").alias("weight"),
        )
        .join(words, "term")
        .drop("term")
    )


def topic_words(word_weights: "DataFrame", top: int = 15) -> "DataFrame":
    """(topic, words): each topic's ``top`` heaviest words, heaviest first (the paper's Table 1)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rank = F.row_number().over(Window.partitionBy("topic").orderBy(F.desc("weight"), "word"))
    return (
        word_weights.withColumn("rank", rank)
        .filter(F.col("rank") <= top)
        .groupBy("topic")
        .agg(
            F.concat_ws(
                ", ", F.transform(F.array_sort(F.collect_list(F.struct("rank", "word"))), lambda s: s["word"])
            ).alias("words")
        )
    )


def with_passages(docs: "DataFrame", chars: int) -> "DataFrame":
    """``docs`` (doc_id, text, genre when it has one) -> one row per passage: (doc_id, [genre,] passage_idx,
    passage)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, StringType

    cut = F.udf(lambda text: passages(text, chars), ArrayType(StringType()))
    keys = ["doc_id"] + (["genre"] if "genre" in docs.columns else [])
    return docs.select(*keys, F.posexplode(cut("text")).alias("passage_idx", "passage"))


def occurrences(model: "PipelineModel", passage_rows: "DataFrame") -> "DataFrame":
    """(doc_id, passage_idx, pos, word): every token of every passage, tokenised as the topic model does."""
    from pyspark.sql import functions as F

    tokenizer = model.stages[0]
    tokens = tokenizer.transform(passage_rows.withColumnRenamed("passage", "text"))
    return tokens.select("doc_id", "passage_idx", F.posexplode("tokens").alias("pos", "word"))


def keyword_scores(occ: "DataFrame", doc_weights: "DataFrame", word_weights: "DataFrame") -> "DataFrame":
    """score(w, D) = Σ over occurrences of w in D of Σ_t L(D, t)·L(w, t), per passage D.

    ``occ`` (doc_id, passage_idx, pos, word); ``doc_weights`` (doc_id, topic_weights: L(D, t) of the whole
    document); ``word_weights`` (word, topic, weight). Returns (doc_id, passage_idx, word, occurrences,
    first_pos, score) for the passage's words that have topic weights (stop words and out-of-vocabulary
    words have none)."""
    from pyspark.sql import functions as F

    per_word = occ.groupBy("doc_id", "passage_idx", "word").agg(
        F.count(F.lit(1)).alias("occurrences"), F.min("pos").alias("first_pos")
    )
    doc_t = doc_weights.select("doc_id", F.posexplode("topic_weights").alias("topic", "doc_weight"))
    # Σ_t L(D, t)·L(w, t) once per (document, word), then times the word's occurrences in the passage.
    affinity = (
        per_word.select("doc_id", "word")
        .distinct()
        .join(word_weights, "word")
        .join(doc_t, ["doc_id", "topic"])
        .groupBy("doc_id", "word")
        .agg(F.sum(F.col("doc_weight") * F.col("weight")).alias("affinity"))
    )
    return (
        per_word.join(affinity, ["doc_id", "word"])
        .withColumn("score", F.col("occurrences") * F.col("affinity"))
        .drop("affinity")
    )


def top_keywords(scores: "DataFrame", k: int) -> "DataFrame":
    """(doc_id, passage_idx, keywords): the ``k`` best-scoring words of each passage (ties: alphabetical),
    joined in the order they first occur in it."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rank = F.row_number().over(Window.partitionBy("doc_id", "passage_idx").orderBy(F.desc("score"), "word"))
    best = scores.withColumn("rank", rank).filter(F.col("rank") <= k)
    ordered = F.array_sort(F.collect_list(F.struct("first_pos", "word")))
    return best.groupBy("doc_id", "passage_idx").agg(
        F.concat_ws(" ", F.transform(ordered, lambda s: s["word"])).alias("keywords")
    )


def passage_table(
    model: "PipelineModel", rows: "DataFrame", doc_weights: "DataFrame", word_weights: "DataFrame", k: int
) -> "DataFrame":
    """(doc_id, genre, passage_idx, passage, keywords): every passage (``rows``, from :func:`with_passages`)
    with its keywords ("" for a passage without a single topic word)."""
    from pyspark.sql import functions as F

    keywords = top_keywords(keyword_scores(occurrences(model, rows), doc_weights, word_weights), k)
    return rows.join(keywords, ["doc_id", "passage_idx"], "left").withColumn(
        "keywords", F.coalesce("keywords", F.lit(""))
    )


def prevalence(doc_weights: "DataFrame") -> "DataFrame":
    """(topic, prevalence): each topic's mean weight over the documents."""
    from pyspark.sql import functions as F

    return (
        doc_weights.select(F.posexplode("topic_weights").alias("topic", "w"))
        .groupBy("topic")
        .agg(F.avg("w").alias("prevalence"))
    )


def split_sizes(genre_counts: Mapping[str, int], n: int, cfg: SplitConfig) -> dict[str, tuple[int, int]]:
    """Per genre: (test documents, documents in each training set) for size ``n``. A genre of ``c``
    documents gives min(test_per_genre, max(1, floor(c * test_fraction))) to the test set and at most half of
    the rest (and at most ``n``) to each of the off-topic and on-topic training sets, so the three never
    overlap."""
    import math

    out = {}
    for genre, count in genre_counts.items():
        test = min(cfg.test_per_genre, max(1, math.floor(count * cfg.test_fraction)), count)
        out[genre] = (test, min(n, (count - test) // 2))
    return out


def effective_sizes(genre_counts: Mapping[str, int], cfg: SplitConfig) -> list[int]:
    """The sizes of ``cfg.sizes`` worth a row: the smallest N under which some genre has a training set;
    then each larger N whose largest training set is at least 1.5 times the last kept N's (a smaller step
    means every genre caps it to nearly the same sets: it would repeat that row)."""
    kept: list[int] = []
    last = 0
    for n in sorted(set(cfg.sizes)):
        largest = max((train for _, train in split_sizes(genre_counts, n, cfg).values()), default=0)
        if largest > 0 and (not kept or largest >= 1.5 * last):
            kept.append(n)
            last = largest
    return kept


def topic_splits(
    doc_weights: "DataFrame", topics: Sequence[int], sizes: Sequence[int], cfg: SplitConfig
) -> "DataFrame":
    """(topic, n, doc_id, genre, role, weight, rank) for every evaluated topic and size: per genre, documents
    ranked by their weight for the topic (heaviest first, ties by doc_id); the first ones are the on-topic
    ``test`` set, the next ones the ``on_topic`` training set, the last (lowest weight) ones the
    ``off_topic`` training set, sized as :func:`split_sizes` says; the rest are in no set."""
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    spark = SparkSession.getActiveSession()
    grid = spark.createDataFrame([(int(t), int(n)) for t in topics for n in sizes], "topic int, n int")
    per_genre = Window.partitionBy("topic", "n", "genre")
    ranked = (
        doc_weights.crossJoin(F.broadcast(grid))
        .withColumn("weight", F.element_at("topic_weights", F.col("topic") + 1))
        .withColumn("rank", F.row_number().over(per_genre.orderBy(F.desc("weight"), "doc_id")) - 1)
        .withColumn("_count", F.count(F.lit(1)).over(per_genre))
    )
    n_test = F.least(
        F.lit(cfg.test_per_genre), F.greatest(F.lit(1), F.floor(F.col("_count") * cfg.test_fraction)), F.col("_count")
    )
    n_train = F.least(F.col("n"), F.floor((F.col("_count") - n_test) / 2))
    role = (
        F.when(F.col("rank") < n_test, "test")
        .when(F.col("rank") < n_test + n_train, "on_topic")
        .when(F.col("rank") >= F.col("_count") - n_train, "off_topic")
    )
    return (
        ranked.withColumn("role", role)
        .filter(F.col("role").isNotNull())
        .select("topic", "n", "doc_id", "genre", "role", "weight", F.col("rank").cast("int"))
    )
