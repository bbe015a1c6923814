"""The conditional text generators' data (paper 4): prompts from the sampled label sets, the Concat
baseline, the seq2seq training pairs, and the candidates quality control ranks. DataFrame transforms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# A label set as a generator's source text: the label phrases, joined (the label-prefix model parses it).
PHRASE_JOIN = ", "


def prompts(label_sets: "DataFrame", methods: Sequence[str]) -> "DataFrame":
    """(method, example_id, composition, labels, source_text): per generator, one prompt per accepted draw of
    each sampled label set (``label_sets``: composition, labels, draws), so the prompts follow P(y).
    ``example_id`` = method/composition/k; ``source_text`` = the label phrases joined."""
    from pyspark.sql import functions as F

    methods_df = label_sets.sparkSession.createDataFrame([(m,) for m in methods], "method string")
    rows = label_sets.withColumn("k", F.explode(F.sequence(F.lit(1), F.col("draws")))).crossJoin(methods_df)
    return rows.select(
        "method",
        F.concat_ws("/", "method", "composition", F.col("k").cast("string")).alias("example_id"),
        "composition",
        "labels",
        F.array_join("labels", PHRASE_JOIN).alias("source_text"),
    )


def concat_texts(prompt_rows: "DataFrame", train: "DataFrame", seed: int) -> "DataFrame":
    """Concat (the paper's baseline): for each prompt, one single-label training text per label of its set,
    drawn by (``seed``, prompt, label), joined in label order. Returns (example_id, text, reason): a
    prompt with a label that no single-label text carries gets ``reason`` instead of a text."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    singles = train.filter(F.size("labels") == 1).select(F.col("labels")[0].alias("label"), "text", "example_id")
    numbered = singles.withColumn(
        "idx",
        F.row_number().over(Window.partitionBy("label").orderBy(F.xxhash64(F.lit(seed), "example_id"), "example_id"))
        - 1,
    )
    sizes = singles.groupBy("label").agg(F.count(F.lit(1)).alias("n"))
    wanted = prompt_rows.select("example_id", F.posexplode("labels").alias("pos", "label")).join(
        sizes, "label", "left"
    )
    picked = wanted.withColumn(
        "idx", F.pmod(F.xxhash64(F.lit(seed), "example_id", "label"), F.col("n")).cast("int")
    ).join(numbered.select("label", "idx", F.col("text").alias("part")), ["label", "idx"], "left")
    return (
        picked.groupBy("example_id")
        .agg(
            F.array_join(
                F.transform(F.array_sort(F.collect_list(F.struct("pos", "part"))), lambda s: s["part"]), " "
            ).alias("text"),
            F.array_join(F.array_sort(F.collect_set(F.when(F.col("part").isNull(), F.col("label")))), ", ").alias(
                "_missing"
            ),
        )
        .select(
            "example_id",
            F.when(F.col("_missing") == "", F.col("text")).alias("text"),
            F.when(F.col("_missing") != "", F.concat(F.lit("no single-label text for "), F.col("_missing"))).alias(
                "reason"
            ),
        )
    )


def generator_pairs(train: "DataFrame", support: "DataFrame") -> "DataFrame":
    """(example_id, source_text, target_text): train ∪ support as (label phrases, text) pairs."""
    from pyspark.sql import functions as F

    return train.unionByName(support).select(
        "example_id", F.array_join("labels", PHRASE_JOIN).alias("source_text"), F.col("text").alias("target_text")
    )


def candidates(prompt_rows: "DataFrame", concat_rows: "DataFrame", generated: "DataFrame") -> "DataFrame":
    """(method, example_id, composition, labels, text, generated_tokens, reason): every prompt with its text,
    from Concat (``concat_rows``) or a seq2seq generator (``generated``, the generation pool's rows keyed by
    source_id = example_id); an empty generation gets a reason. One row per prompt."""
    from pyspark.sql import functions as F

    produced = concat_rows.select(
        "example_id", "text", F.lit(0).cast("long").alias("generated_tokens"), "reason"
    ).unionByName(
        generated.select(
            F.col("source_id").alias("example_id"), F.col("generated_text").alias("text"), "generated_tokens", "reason"
        )
    )
    joined = prompt_rows.join(produced, "example_id", "left")
    reason = F.coalesce(
        F.col("reason"), F.when(F.coalesce(F.trim("text"), F.lit("")) == "", F.lit("empty generation"))
    )
    return joined.select(
        "method", "example_id", "composition", "labels", "text", "generated_tokens", reason.alias("reason")
    )
