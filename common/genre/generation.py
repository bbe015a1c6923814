"""The per-genre generators' data (paper 5): training pairs from off-topic documents only, and prompts
from on-topic test documents' keywords for every genre's generator (as many as the synthetic ratio asks).
DataFrame transforms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

GENERATOR_KEY = ("topic", "n", "genre")


def conditioned_source(genre, keywords):
    """The input of a genre-conditioned generator (``genre.generator.per_genre: false``): the genre's name
    (underscores as spaces) and the keywords, ``"<genre> | <keywords>"``, as Spark columns."""
    from pyspark.sql import functions as F

    return F.concat(F.regexp_replace(genre, "_", " "), F.lit(" | "), keywords)


def generator_pairs(
    splits: "DataFrame", passage_rows: "DataFrame", max_passages: Optional[int], per_genre: bool = True
) -> "DataFrame":
    """(topic, n, genre, doc_id, passage_idx, source_text, target_text): for each (topic, n) and genre, the
    passages of that genre's ``off_topic`` training documents (their first ``max_passages``, when set) as
    (keywords, passage) pairs. A generator never sees a test or on-topic document: isolation by design.
    Passages without keywords make no pair. Not ``per_genre`` (one generator per (topic, n) for all genres):
    the source names the genre too (:func:`conditioned_source`)."""
    from pyspark.sql import functions as F

    off = splits.filter(F.col("role") == "off_topic").select("topic", "n", "doc_id", "genre")
    rows = passage_rows.filter(F.col("keywords") != "")
    if max_passages is not None:
        rows = rows.filter(F.col("passage_idx") < max_passages)
    pairs = off.join(rows.select("doc_id", "passage_idx", "keywords", F.col("passage").alias("target_text")), "doc_id")
    source = F.col("keywords") if per_genre else conditioned_source(F.col("genre"), F.col("keywords"))
    return pairs.select("topic", "n", "genre", "doc_id", "passage_idx", source.alias("source_text"), "target_text")


def prompt_sources(splits: "DataFrame", ratio: Optional[float], seed: int, control: bool = False) -> "DataFrame":
    """(topic, n, source_doc_id, source_genre, keywords_from): the documents whose keywords prompt every
    generator of their (topic, n). ``keywords_from`` ``on_topic``: on-topic test documents, the paper's
    augmentation. With ``ratio`` (synthetic per off-topic document; the paper's 1:1), the K = max(1,
    round(ratio x off-topic documents / genres)) first in the order of xxhash64(``seed``, doc_id), so each
    genre gets K synthetic documents and the set about ratio x the off-topic set (all of them when fewer);
    ``ratio`` None: every test document. ``control``: also as many (at most all) off-topic training documents
    in the same order, ``keywords_from`` ``off_topic``: the paper's Table-5 control, synthetic documents
    without topic transfer."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    docs = splits.filter(F.col("role").isin("test", "off_topic") if control else F.col("role") == "test")
    docs = docs.select(
        "topic",
        "n",
        F.col("doc_id").alias("source_doc_id"),
        F.col("genre").alias("source_genre"),
        F.when(F.col("role") == "test", "on_topic").otherwise("off_topic").alias("keywords_from"),
    )
    if ratio is None:
        k = F.count(F.when(F.col("role") == "test", 1))
    else:
        off = F.count(F.when(F.col("role") == "off_topic", 1))
        genres = F.countDistinct(F.when(F.col("role") == "off_topic", F.col("genre")))
        k = F.greatest(F.lit(1), F.round(F.lit(float(ratio)) * off / genres).cast("int"))
    sizes = splits.groupBy("topic", "n").agg(k.alias("_k"))
    order = Window.partitionBy("topic", "n", "keywords_from").orderBy(
        F.xxhash64(F.lit(seed), "source_doc_id"), "source_doc_id"
    )
    return (
        docs.join(sizes, ["topic", "n"])
        .withColumn("_rank", F.row_number().over(order))
        .filter(F.col("_rank") <= F.col("_k"))
        .drop("_rank", "_k")
    )


def prompts(
    splits: "DataFrame",
    passage_rows: "DataFrame",
    generators: "DataFrame",
    seed: int,
    ratio: Optional[float],
    control: bool = False,
    per_genre: bool = True,
) -> "DataFrame":
    """One prompt per generator of a (topic, n) and document chosen by ``prompt_sources`` (``ratio``,
    ``control``): (topic, n, genre, source_doc_id, source_genre, keywords_from, source_id, source_text,
    model_path, model_version). ``source_text`` is the keywords of one passage of the document, drawn by
    (``seed``, doc_id); its genre is not given to the generator, which writes in its own ``genre`` (the
    synthetic document's label); a genre-conditioned generator (not ``per_genre``) is given that ``genre``
    with the keywords, as in training. Sorted by model, so generation batches hold few models."""
    from pyspark.sql import functions as F

    counts = passage_rows.groupBy("doc_id").agg(F.count(F.lit(1)).alias("_passages"))
    chosen = counts.withColumn(
        "passage_idx", F.pmod(F.xxhash64(F.lit(seed), "doc_id"), F.col("_passages")).cast("int")
    )
    keywords = chosen.join(passage_rows, ["doc_id", "passage_idx"]).select("doc_id", "keywords")
    out = (
        prompt_sources(splits, ratio, seed, control)
        .join(keywords.withColumnRenamed("doc_id", "source_doc_id"), "source_doc_id")
        .join(generators.select("topic", "n", "genre", "model_path", "model_version"), ["topic", "n"])
    )
    source_id = F.concat_ws("/", F.col("topic").cast("string"), F.col("n").cast("string"), "genre", "source_doc_id")
    text = F.col("keywords") if per_genre else conditioned_source(F.col("genre"), F.col("keywords"))
    return out.select(
        "topic",
        "n",
        "genre",
        "source_doc_id",
        "source_genre",
        "keywords_from",
        source_id.alias("source_id"),
        text.alias("source_text"),
        "model_path",
        "model_version",
    ).orderBy("model_path", "source_id")


def synthetic(generated: "DataFrame", prompt_rows: "DataFrame") -> "DataFrame":
    """Generated rows joined back to their prompts: (topic, n, genre, source_doc_id, source_genre,
    keywords_from, source_id, keywords, text, model_version, generated_tokens, reason). A row keeps the
    generator's ``reason`` (empty or over-long input, decoding error) or gets ``empty generation`` when nothing
    with letters was generated."""
    from pyspark.sql import functions as F

    from common.genre.evaluation import clean_col

    joined = generated.join(
        prompt_rows.select("source_id", "topic", "n", "genre", "source_doc_id", "source_genre", "keywords_from"),
        "source_id",
    )
    reason = F.coalesce(
        F.col("reason"),
        F.when(
            F.length(clean_col(F.coalesce("generated_text", F.lit("")))) == 0, F.lit("empty generation: no letters")
        ),
    )
    return joined.select(
        "topic",
        "n",
        "genre",
        "source_doc_id",
        "source_genre",
        "keywords_from",
        "source_id",
        F.col("source_text").alias("keywords"),
        F.col("generated_text").alias("text"),
        "model_version",
        "generated_tokens",
        reason.alias("reason"),
    )
