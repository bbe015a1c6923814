"""Query-reformulation augmentation (METHODS.md section 2) as DataFrame transforms.

The paper reformulates the query of every *collected* (query, product, interaction) tuple, before the
activity threshold, attaches each reformulation to the same product and interaction, then re-selects the
tuples over the same threshold: tuples that were below it can now pass, and new tuples appear.

A reformulation depends only on the query text, so generation runs once per distinct query and the
samples are joined back to every tuple of that query (the same output distribution as one call per tuple,
at tuples/queries times less generation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.querygraph.normalization import BELOW_THRESHOLD, apply_activity_threshold, normalize_query_col

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from common.querygraph.config import QueryGraphConfig

TUPLE_COLUMNS = ("query", "product_id", "interaction", "count")


def collected_tuples(kept: "DataFrame", quarantine: "DataFrame") -> "DataFrame":
    """Every aggregated tuple before the activity threshold: ``query_interactions`` plus the quarantined
    tuples that failed only the threshold (empty queries are not tuples)."""
    from pyspark.sql import functions as F

    below = quarantine.filter(F.col("reason").startswith(BELOW_THRESHOLD))
    return kept.select(*TUPLE_COLUMNS).unionByName(below.select(*TUPLE_COLUMNS))


def distinct_queries(tuples: "DataFrame") -> "DataFrame":
    """The generation inputs: one row per distinct query (``query``)."""
    return tuples.select("query").distinct()


def usable_reformulations(generated: "DataFrame") -> "DataFrame":
    """``query, reformulation``: normalised generated queries, one per (query, reformulation), without
    rejected rows (empty outputs, copies, quarantined inputs) or ones equal to their query after
    normalisation."""
    from pyspark.sql import functions as F

    refs = generated.filter(F.col("reason").isNull() & (F.col("sample_idx") >= 0)).select(
        F.col("source_text").alias("query"), normalize_query_col(F.col("generated_text")).alias("reformulation")
    )
    return refs.filter((F.col("reformulation") != "") & (F.col("reformulation") != F.col("query"))).distinct()


@dataclass(frozen=True)
class Augmented:
    """The augmented log: ``kept`` (query, product_id, interaction, count, original_count,
    reformulated_count, origin), ``rejected`` (the same plus ``reason``), and ``reformulated`` (the tuples
    that reformulation produced, before aggregation)."""

    kept: "DataFrame"
    rejected: "DataFrame"
    reformulated: "DataFrame"


def augment_interactions(tuples: "DataFrame", reformulations: "DataFrame", cfg: "QueryGraphConfig") -> Augmented:
    """Attach each reformulation of a tuple's query to the tuple's product and interaction (with the tuple's
    count), aggregate with the original tuples, and re-apply the activity threshold.

    ``origin`` says what a kept tuple is: ``original`` (over the threshold before), ``lifted`` (collected
    but below the threshold before) or ``new`` (not in the log before). Every aggregated tuple is either
    kept or rejected.
    """
    from pyspark.sql import functions as F

    original = tuples.select(*TUPLE_COLUMNS)
    reformulated = original.join(reformulations, "query").select(
        F.col("reformulation").alias("query"), "product_id", "interaction", "count"
    )
    both = (
        original.withColumn("_orig", F.col("count"))
        .withColumn("_gen", F.lit(0).cast("long"))
        .unionByName(
            reformulated.withColumn("_orig", F.lit(0).cast("long")).withColumn("_gen", F.col("count").cast("long"))
        )
    )
    aggregated = both.groupBy("query", "product_id", "interaction").agg(
        F.sum("count").alias("count"),
        F.sum("_orig").alias("original_count"),
        F.sum("_gen").alias("reformulated_count"),
    )
    kept, rejected = apply_activity_threshold(aggregated, cfg)
    base_kept, _ = apply_activity_threshold(aggregated.withColumn("count", F.col("original_count")), cfg)
    was_kept = base_kept.filter(F.col("original_count") > 0).select(
        "query", "product_id", "interaction", F.lit(True).alias("_was_kept")
    )
    kept = (
        kept.join(was_kept, ["query", "product_id", "interaction"], "left")
        .withColumn(
            "origin",
            F.when(F.col("_was_kept"), "original").when(F.col("original_count") > 0, "lifted").otherwise("new"),
        )
        .drop("_was_kept")
    )
    return Augmented(kept=kept, rejected=rejected, reformulated=reformulated)
