"""BoostAug's DataFrame transforms: source ids, the stratified split, cross-boosting folds, candidates.

All pure functions of DataFrames (no driver collection): the split and folds are exact per label, by a
seeded hash order inside each label, so they depend on the rows and the seed only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

from common.boostaug.backends import BACKENDS, augment_text, synonym_table
from common.boostaug.config import BoostAugConfig
from common.data.leakage import text_key

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame

CANDIDATE_SCHEMA = (
    "source_id string, fold int, source_text string, label string, backend string, aug_idx int, text string"
)


def cut_label(label: "Column", level: Optional[int], separator: str = ">") -> "Column":
    """A category path label ("A > B > C") cut to ``level`` levels and re-joined canonically; as it is when
    ``level`` is None."""
    from pyspark.sql import functions as F

    if level is None:
        return label
    parts = F.slice(F.split(label, rf"\s*{separator}\s*"), 1, level)
    return F.array_join(F.transform(parts, lambda p: F.trim(p)), " > ")


def with_source_ids(texts: "DataFrame") -> "DataFrame":
    """``texts`` (text, label, split) plus ``source_id``: a hash of (text, label), with ``#n`` for the n-th
    copy of a duplicated row (copies are interchangeable, so their order does not matter)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    digest = F.substring(F.sha2(F.concat_ws("\u0001", "label", "text"), 256), 1, 16)
    copy = F.row_number().over(Window.partitionBy("_digest").orderBy("split")) - 1
    return (
        texts.withColumn("_digest", digest)
        .withColumn("_copy", copy)
        .withColumn(
            "source_id",
            F.when(F.col("_copy") == 0, F.col("_digest")).otherwise(
                F.concat(F.col("_digest"), F.lit("#"), F.col("_copy").cast("string"))
            ),
        )
        .drop("_digest", "_copy")
    )


def assign_splits(texts: "DataFrame", cfg: BoostAugConfig, seed: int) -> "DataFrame":
    """Rows (source_id, text, label, split, fold): the input's split where it has one; else an exact
    stratified draw (per label: round(n * test_fraction) test, round(n * dev_fraction) dev, the rest
    train) in seeded hash order. Training rows get ``fold`` 0..k-1, dealt round-robin per label in the same
    order (folds are stratified and differ in size by at most one per label); other rows have fold null."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = F.xxhash64(F.lit(seed), F.col("source_id"))
    by_label = Window.partitionBy("label", "_given").orderBy(order, "source_id")
    df = (
        texts.withColumn("_given", F.col("split").isNotNull())
        .withColumn("_rank", F.row_number().over(by_label) - 1)
        .withColumn("_n", F.count(F.lit(1)).over(Window.partitionBy("label", "_given")))
    )
    n_test = F.round(F.col("_n") * cfg.test_fraction)
    n_dev = F.round(F.col("_n") * cfg.dev_fraction)
    drawn = F.when(F.col("_rank") < n_test, "test").when(F.col("_rank") < n_test + n_dev, "dev").otherwise("train")
    df = df.withColumn("split", F.coalesce(F.col("split"), drawn))
    # Every copy of a text (trimmed, case-folded) on its first copy's side, test before dev before train: no
    # evaluation text is trained on. Ingest keeps one copy of each text, so this moves rows only when
    # ingest.dedup.exact is off; the draw itself is per row, as before.
    side = F.when(F.col("split") == "test", 0).when(F.col("split") == "dev", 1).otherwise(2)
    df = df.withColumn(
        "split", F.first("split").over(Window.partitionBy(text_key(F.col("text"))).orderBy(side, "source_id"))
    )
    train_rank = F.row_number().over(Window.partitionBy("label", "split").orderBy(order, "source_id")) - 1
    fold = F.when(F.col("split") == "train", (train_rank % cfg.folds).cast("int"))
    return df.withColumn("fold", fold).select("source_id", "text", "label", "split", "fold")


def candidates(train: "DataFrame", cfg: BoostAugConfig, seed: int) -> "DataFrame":
    """Every edit-based backend's ``2 * n_aug`` candidates per training row, as rows of
    :data:`CANDIDATE_SCHEMA` (the model-based ``contextual`` backend: :mod:`common.boostaug.contextual`).

    Runs in ``mapInPandas``; each Python worker builds the synonym table once (MiniLM's vocabulary).
    """
    backends, n = [b for b in cfg.backends if b in BACKENDS], 2 * cfg.n_aug
    p, k, min_cos = cfg.augment.token_prob, cfg.augment.synonyms, cfg.augment.synonym_min_cosine
    needs_synonyms = "eda" in backends

    def generate(batches: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd

        synonyms = synonym_table(k, min_cos) if needs_synonyms else {}
        for batch in batches:
            rows = []
            for sid, fold, text, label in zip(batch["source_id"], batch["fold"], batch["text"], batch["label"]):
                for backend in backends:
                    for i, out in enumerate(augment_text(text, sid, backend, n, seed, p, synonyms)):
                        rows.append((sid, int(fold), text, label, backend, i, out))
            yield pd.DataFrame(
                rows, columns=["source_id", "fold", "source_text", "label", "backend", "aug_idx", "text"]
            )

    return train.select("source_id", "fold", "text", "label").mapInPandas(generate, CANDIDATE_SCHEMA)
