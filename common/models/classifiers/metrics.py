"""Classifier evaluation metrics as Spark aggregates (only per-class counts reach the driver)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def weighted_f1(df: "DataFrame", label_col: str, pred_col: str) -> float:
    """Support-weighted mean of per-class F1 (sklearn's ``average='weighted'``) of ``pred_col`` vs ``label_col``.

    Per class c: F1 = 2·TP / (2·TP + FP + FN); classes that occur only as predictions weigh 0.
    Returns 0.0 for an empty frame.
    """
    from pyspark.sql import functions as F

    # One pass over ``df`` (often a model's predictions, computed by a UDF): the confusion counts, bounded
    # by classes squared; support, true positives and predicted counts all come from them.
    confusion = df.groupBy(F.col(label_col).alias("label"), F.col(pred_col).alias("pred")).count()
    truth = confusion.groupBy(F.col("label").alias("cls")).agg(
        F.sum("count").alias("support"),
        F.sum(F.when(F.col("label") == F.col("pred"), F.col("count")).otherwise(0)).alias("tp"),
    )
    predicted = confusion.groupBy(F.col("pred").alias("cls")).agg(F.sum("count").alias("n_pred"))
    per_class = (
        truth.join(predicted, "cls", "left")
        .fillna(0, ["n_pred"])
        .select("support", (2 * F.col("tp") / (F.col("support") + F.col("n_pred"))).alias("f1"))
    )
    row = per_class.agg(F.sum(F.col("support") * F.col("f1")).alias("num"), F.sum("support").alias("den")).first()
    return float(row["num"] / row["den"]) if row["den"] else 0.0


def accuracy(df: "DataFrame", label_col: str, pred_col: str) -> float:
    """Share of rows whose prediction equals the label; 0.0 when empty."""
    from pyspark.sql import functions as F

    row = df.agg(F.avg((F.col(label_col) == F.col(pred_col)).cast("double")).alias("rate")).first()
    return float(row["rate"]) if row["rate"] is not None else 0.0
