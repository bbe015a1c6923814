"""Near duplicates (opt-in, ``ingest.dedup.near``): texts that differ by a few words, found with MinHash over
word shingles (Spark MLlib's ``MinHashLSH``) and grouped into clusters by the suite's connected components.

A cluster keeps one member, its smallest key, for the kept table and the splits; the others go to
``<input>_near_duplicates`` with their cluster id, so rows in = kept + quarantined + near duplicates. Exact
copies never get here: ingest's exact step has already quarantined them.

Two texts are near duplicates when the Jaccard similarity of their sets of ``shingle``-word shingles (words
lower-cased; texts shorter than ``shingle`` words are one shingle of all their words) is at least
``threshold``. MinHash LSH finds candidate pairs in roughly linear time (``tables`` hash tables: more find more
of the true pairs, at more cost); each candidate's exact MinHash distance is then checked against the
threshold, so a reported pair is near its threshold's similarity but a pair can be missed. Clusters are the
connected components of the pairs (a chain of near pairs is one cluster).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from common.algorithms.graph import connected_components

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CLUSTER_COL = "near_duplicate_cluster"


def with_shingles(df: "DataFrame", text_col: str, size: int, out: str = "grams") -> "DataFrame":
    """``df`` with ``out``: the distinct ``size``-word shingles of the lower-cased words of ``text_col`` (the
    whole word list as one shingle when shorter; an empty array for a text without words)."""
    from pyspark.ml.feature import NGram
    from pyspark.sql import functions as F

    # MLlib's NGram builds the shingles in one pass over each word array. A Column expression that slices the
    # word array inside transform() re-splits the whole text for every shingle (Spark does not share the
    # array across a lambda's calls): quadratic in the words, 20 s for 20 Brown documents against 0.9 s.
    words = "_near_words"
    grams = NGram(n=size, inputCol=words, outputCol=out).transform(
        df.withColumn(words, F.filter(F.split(F.lower(F.col(text_col)), r"[^\p{L}\p{N}]+"), lambda w: w != "")))
    n = F.size(words)
    return grams.withColumn(out, F.when(n == 0, F.array().cast("array<string>"))
                            .when(n < size, F.array(F.array_join(words, " ")))
                            .otherwise(F.array_distinct(out))).drop(words)


def near_duplicate_pairs(df: "DataFrame", key: str, text_col: str, threshold: float, shingle: int = 3,
                         tables: int = 5, features: int = 1 << 18, seed: int = 42) -> "DataFrame":
    """``(src, dst)`` pairs of ``key`` values (src < dst) whose texts are near duplicates at ``threshold``
    (Jaccard similarity of their shingle sets). Rows without words take part in no pair."""
    from pyspark.ml.feature import HashingTF, MinHashLSH
    from pyspark.sql import functions as F

    # MinHash needs one shingle per row, and a filter on the shingles is not reliably applied before its hash
    # UDF: a row without words gets one shingle of its own (unique, so it pairs with no other row).
    grams = with_shingles(df.select(F.col(key).alias("key"), F.col(text_col).alias("text")), "text", shingle) \
        .select("key", "grams").withColumn("grams", F.when(F.size("grams") > 0, F.col("grams"))
                    .otherwise(F.array(F.concat(F.lit("\u0000"), F.col("key").cast("string")))))
    hashed = HashingTF(inputCol="grams", outputCol="features", numFeatures=features, binary=True).transform(grams)
    model = MinHashLSH(inputCol="features", outputCol="hashes", numHashTables=tables, seed=seed).fit(hashed)
    joined = model.approxSimilarityJoin(hashed, hashed, 1.0 - threshold + 1e-9, distCol="distance")
    return joined.select(F.col("datasetA.key").alias("src"), F.col("datasetB.key").alias("dst")) \
        .filter(F.col("src") < F.col("dst")).distinct()


def near_duplicate_clusters(df: "DataFrame", key: str, text_col: str, threshold: float, shingle: int = 3,
                            tables: int = 5, seed: int = 42) -> "DataFrame":
    """``(key, near_duplicate_cluster)`` for every row of ``df`` in a cluster of two or more near duplicates;
    the cluster id is its smallest key, which is the member that stays."""
    from pyspark.sql import functions as F

    pairs = near_duplicate_pairs(df, key, text_col, threshold, shingle, tables, seed=seed)
    return connected_components(pairs).select(F.col("id").alias(key), F.col("component").alias(CLUSTER_COL))


def split_near_duplicates(kept: "DataFrame", key: str, text_col: str, threshold: float, shingle: int = 3,
                          tables: int = 5, seed: int = 42) -> tuple["DataFrame", "DataFrame"]:
    """(the rows of ``kept`` that stay: every row outside a cluster and each cluster's smallest key; the other
    cluster members with their ``near_duplicate_cluster``)."""
    from pyspark.sql import functions as F

    clusters = near_duplicate_clusters(kept, key, text_col, threshold, shingle, tables, seed).persist()
    members = clusters.filter(F.col(key) != F.col(CLUSTER_COL))
    return kept.join(members.select(key), key, "left_anti"), kept.join(members, key)
