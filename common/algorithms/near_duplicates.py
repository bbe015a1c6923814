"""Near duplicates (opt-in, ``ingest.dedup.near``): texts that differ by a few words, found with MinHash over
word shingles (Spark MLlib's ``MinHashLSH``) and grouped into clusters by the suite's connected components.

A cluster keeps one member, its smallest key, for the kept table and the splits; the others go to
``<input>_near_duplicates`` with their cluster id, so rows in = kept + quarantined + near duplicates. Exact
copies never get here: ingest's exact step has already quarantined them.

Two texts are near duplicates when the Jaccard similarity of their sets of ``shingle``-word shingles (words
lower-cased; texts shorter than ``shingle`` words are one shingle of all their words) is at least
``threshold``. Banded MinHash LSH finds candidate pairs in roughly linear time: ``tables`` bands of
:func:`band_rows` MinHash values each, as many values per band as still find a pair at the threshold with
probability 0.99 (more bands allow more values per band, and so fewer candidates that are not near
duplicates); each candidate is then checked on the exact Jaccard similarity of its shingle sets, so every
reported pair is a near duplicate, and one above the threshold is missed with probability under 1%. Clusters
are the connected components of the pairs (a chain of near pairs is one cluster).
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
        df.withColumn(words, F.filter(F.split(F.lower(F.col(text_col)), r"[^\p{L}\p{N}]+"), lambda w: w != ""))
    )
    n = F.size(words)
    return grams.withColumn(
        out,
        F.when(n == 0, F.array().cast("array<string>"))
        .when(n < size, F.array(F.array_join(words, " ")))
        .otherwise(F.array_distinct(out)),
    ).drop(words)


def band_rows(threshold: float, tables: int, recall: float = 0.99) -> int:
    """MinHash values per LSH band for ``tables`` bands: the most with which a pair at exactly ``threshold``
    Jaccard still shares a bucket in some band with probability ``recall`` (``1 - (1 - J**r)**b``); at least 1."""
    rows = 1
    while 1.0 - (1.0 - threshold ** (rows + 1)) ** tables >= recall:
        rows += 1
    return rows


def near_duplicate_pairs(
    df: "DataFrame",
    key: str,
    text_col: str,
    threshold: float,
    shingle: int = 3,
    tables: int = 10,
    features: int = 1 << 18,
    seed: int = 42,
) -> "DataFrame":
    """``(src, dst)`` pairs of ``key`` values (src < dst) whose texts are near duplicates at ``threshold``
    (Jaccard similarity of their shingle sets). Rows without words take part in no pair.

    Banded MinHash LSH: MLlib's ``MinHashLSH`` computes ``tables`` x :func:`band_rows` MinHash values per
    text; texts whose values agree on a whole band share that band's bucket, and every pair in a bucket is
    checked on the exact Jaccard similarity of its shingle sets."""
    from pyspark.ml.feature import HashingTF, MinHashLSH
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    rows = band_rows(threshold, tables)
    grams = (
        with_shingles(df.select(F.col(key).alias("key"), F.col(text_col).alias("text")), "text", shingle)
        .select("key", "grams")
        .filter(F.size("grams") > 0)
    )
    # MinHash fails on a text without shingles, and Spark may run its UDF before the filter above: such a row
    # gets one unique shingle of its own, which pairs with no other row.
    safe = grams.withColumn(
        "grams",
        F.when(F.size("grams") > 0, F.col("grams")).otherwise(
            F.array(F.concat(F.lit("\u0000"), F.col("key").cast("string")))
        ),
    )
    hashed = HashingTF(inputCol="grams", outputCol="features", numFeatures=features, binary=True).transform(safe)
    minhash = MinHashLSH(inputCol="features", outputCol="hashes", numHashTables=tables * rows, seed=seed)
    signatures = (
        minhash.fit(hashed)
        .transform(hashed)
        .select("key", F.transform("hashes", lambda h: vector_to_array(h)[0]).alias("signature"))
    )
    # Spark's own approxSimilarityJoin ORs single MinHash values (a pair at Jaccard 0.3 shares one of 5 buckets
    # with probability 0.83): on short templated catalog titles its candidate pairs grow with the square of
    # the input (100,000 demo titles 108 s, a million not in 10 minutes). A band ANDs ``rows`` values.
    buckets = signatures.select(
        "key",
        F.posexplode(
            F.transform(
                F.sequence(F.lit(0), F.lit(tables - 1)), lambda j: F.xxhash64(F.slice("signature", j * rows + 1, rows))
            )
        ).alias("band", "bucket"),
    )
    left, right = buckets.alias("l"), buckets.alias("r")
    candidates = (
        left.join(
            right,
            (F.col("l.band") == F.col("r.band"))
            & (F.col("l.bucket") == F.col("r.bucket"))
            & (F.col("l.key") < F.col("r.key")),
        )
        .select(F.col("l.key").alias("src"), F.col("r.key").alias("dst"))
        .distinct()
    )
    a, b = (
        grams.select(F.col("key").alias("src"), F.col("grams").alias("ga")),
        grams.select(F.col("key").alias("dst"), F.col("grams").alias("gb")),
    )
    jaccard = F.size(F.array_intersect("ga", "gb")) / F.size(F.array_union("ga", "gb"))
    return candidates.join(a, "src").join(b, "dst").filter(jaccard >= threshold).select("src", "dst")


def near_duplicate_clusters(
    df: "DataFrame", key: str, text_col: str, threshold: float, shingle: int = 3, tables: int = 10, seed: int = 42
) -> "DataFrame":
    """``(key, near_duplicate_cluster)`` for every row of ``df`` in a cluster of two or more near duplicates;
    the cluster id is its smallest key, which is the member that stays."""
    from pyspark.sql import functions as F

    pairs = near_duplicate_pairs(df, key, text_col, threshold, shingle, tables, seed=seed)
    return connected_components(pairs).select(F.col("id").alias(key), F.col("component").alias(CLUSTER_COL))


def split_near_duplicates(
    kept: "DataFrame", key: str, text_col: str, threshold: float, shingle: int = 3, tables: int = 10, seed: int = 42
) -> tuple["DataFrame", "DataFrame"]:
    """(the rows of ``kept`` that stay: every row outside a cluster and each cluster's smallest key; the other
    cluster members with their ``near_duplicate_cluster``)."""
    from pyspark.sql import functions as F

    clusters = near_duplicate_clusters(kept, key, text_col, threshold, shingle, tables, seed).persist()
    members = clusters.filter(F.col(key) != F.col(CLUSTER_COL))
    return kept.join(members.select(key), key, "left_anti"), kept.join(members, key)
