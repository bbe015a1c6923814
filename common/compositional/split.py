"""The compositional split (paper 4): M label compositions go to the test side, so train and test share no
label set; N_s test-side examples form the support set; and an iid split of the same sizes. DataFrame
transforms over ``multilabel`` rows (example_id, text, labels: a sorted array)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.data.leakage import with_copies

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from common.compositional.config import SplitConfig

# A label set's name: its sorted labels joined (label names never hold this separator after ingest).
JOIN = ","


def composition(labels: "Column") -> "Column":
    """A label set (sorted array) as one string key."""
    from pyspark.sql import functions as F

    return F.array_join(labels, JOIN)


def label_vocabulary(rows: "DataFrame") -> list[str]:
    """The sorted distinct label names of ``rows`` (bounded by the label set's size, so collected)."""
    from pyspark.sql import functions as F

    return sorted(r["label"] for r in rows.select(F.explode("labels").alias("label")).distinct().collect())


def with_composition(df: "DataFrame") -> "DataFrame":
    """``df`` with its ``composition`` key column."""
    return df.withColumn("composition", composition(df["labels"]))


def test_compositions(rows: "DataFrame", cfg: "SplitConfig", seed: int) -> "DataFrame":
    """(composition, examples): ``cfg.compositions`` label sets of at least ``cfg.min_labels`` labels and
    ``cfg.min_examples`` (at most ``cfg.max_examples``) examples, drawn by (``seed``, composition) hash order."""
    from pyspark.sql import functions as F

    counts = with_composition(rows).groupBy("composition", "labels").agg(F.count(F.lit(1)).alias("examples"))
    eligible = counts.filter((F.size("labels") >= cfg.min_labels) & (F.col("examples") >= cfg.min_examples))
    if cfg.max_examples is not None:
        eligible = eligible.filter(F.col("examples") <= cfg.max_examples)
    return (
        eligible.orderBy(F.xxhash64(F.lit(seed), "composition"), "composition")
        .limit(cfg.compositions)
        .select("composition", "examples")
    )


def cg_split(rows: "DataFrame", chosen: "DataFrame", support: int, seed: int) -> dict[str, "DataFrame"]:
    """{train, support, test}: rows whose label set is not one of ``chosen``'s go to train; of the others
    (the test side), the first ``support`` in (``seed``, example_id) hash order form the support set, the
    rest the test set. Each keeps (example_id, text, labels, composition)."""
    from pyspark.sql import functions as F

    keyed = with_composition(rows).select("example_id", "text", "labels", "composition")
    keys = F.broadcast(chosen.select("composition"))
    side = keyed.join(keys, "composition").select(*keyed.columns)
    order = [F.xxhash64(F.lit(seed), "example_id"), "example_id"]
    # Every copy of a drawn support text joins the support set (copies survive ingest only with its dedup off).
    support_rows = with_copies(side.orderBy(*order).limit(support), side, "text")
    return {
        "train": keyed.join(keys, "composition", "left_anti"),
        "support": support_rows,
        "test": side.join(support_rows.select("example_id"), "example_id", "left_anti"),
    }


def iid_split(rows: "DataFrame", n_train: int, n_test: int, seed: int) -> dict[str, "DataFrame"]:
    """{train, test}: a random split of the same sizes as the CG one's (train ∪ support, test): the first
    ``n_test`` rows in (``seed``, example_id) hash order, with every copy of their texts, are the test set, the
    next ``n_train`` the training set."""
    from pyspark.sql import functions as F

    keyed = with_composition(rows).select("example_id", "text", "labels", "composition")
    order = [F.xxhash64(F.lit(seed), F.lit("iid"), "example_id"), "example_id"]
    test = with_copies(keyed.orderBy(*order).limit(n_test), keyed, "text")  # every copy on the test side
    train = keyed.join(test.select("example_id"), "example_id", "left_anti").orderBy(*order).limit(n_train)
    return {"train": train, "test": test}
