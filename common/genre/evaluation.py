"""Genre transfer's evaluation (paper 5): the classifier's rows (seeded 1000-character windows, numbers
and punctuation removed), the three training variants, and the Table-4-style summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.genre.text import window

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame

# The rows of the paper's Table 4: trained on-topic, trained off-topic, off-topic plus synthetic on-topic;
# and two of its Table 5: the control (genre.generator.off_topic_control), off-topic plus synthetic documents
# written from off-topic keywords, and the synthetic documents alone (genre.eval.synthetic_only). Not the
# paper's: ``off_topic_balanced`` (genre.eval.balanced_control), the off-topic documents repeated to the augmented
# set's documents per genre, which separates what the synthetic text adds from the class balance it brings.
BALANCED = "off_topic_balanced"
METHODS = {
    "on_topic": ("on_topic",),
    "off_topic": ("off_topic",),
    "augmented": ("off_topic", "synthetic"),
    "off_keywords": ("off_topic", "synthetic_off"),
    "synthetic_only": ("synthetic",),
    BALANCED: (BALANCED,),
}
# The methods whose training texts include generated ones.
GENERATIVE = frozenset(m for m, parts in METHODS.items() if any(part.startswith("synthetic") for part in parts))


def methods(control: bool, synthetic_only: bool = False, balanced: bool = False) -> dict[str, tuple[str, ...]]:
    """The evaluated methods and the eval sets each trains on: Table 4's three, plus ``off_keywords`` when
    the control was generated (without it, it would repeat ``off_topic``), ``synthetic_only`` and
    ``off_topic_balanced`` when asked."""
    wanted = {"off_keywords": control, "synthetic_only": synthetic_only, BALANCED: balanced}
    return {m: parts for m, parts in METHODS.items() if wanted.get(m, True)}


# What clean_col removes, as Python's re writes it (no \p{L}: a non-word character, a digit or "_"): what a shipped
# genre classifier does to its input (common.pyfunc.loader's ``substitute``).
NON_LETTERS = r"[\W\d_]+"


def clean_col(text: "Column") -> "Column":
    """The classifier's view of a text (the paper): numbers and punctuation removed (everything but letters
    becomes a space), whitespace collapsed, trimmed."""
    from pyspark.sql import functions as F

    return F.trim(F.regexp_replace(F.regexp_replace(text, r"[^\p{L}]+", " "), r"\s+", " "))


def eval_rows(
    splits: "DataFrame", docs: "DataFrame", synthetic_rows: "DataFrame", chars: int, seed: int
) -> "DataFrame":
    """(topic, n, set, doc_id, label, text): each split document as one cleaned window of ``chars``
    characters drawn by (``seed``, doc_id) (the same window wherever the document appears), set = its role
    (test, on_topic, off_topic); plus every synthetic document, cleaned, labelled with its generator's genre,
    set ``synthetic`` (from on-topic keywords) or ``synthetic_off`` (the control's off-topic keywords)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    view = F.udf(lambda text, key: window(text, key, seed, chars), StringType())
    real = splits.join(docs.select("doc_id", "text"), "doc_id").select(
        "topic",
        "n",
        F.col("role").alias("set"),
        "doc_id",
        F.col("genre").alias("label"),
        clean_col(view("text", "doc_id")).alias("text"),
    )
    fake_set = F.when(F.col("keywords_from") == "off_topic", "synthetic_off").otherwise("synthetic")
    fake = synthetic_rows.select(
        "topic",
        "n",
        fake_set.alias("set"),
        F.col("source_id").alias("doc_id"),
        F.col("genre").alias("label"),
        clean_col(F.col("text")).alias("text"),
    )
    return real.unionByName(fake)


def balanced_rows(rows: "DataFrame", seed: int) -> "DataFrame":
    """The class-balance control of eval ``rows`` (as :func:`eval_rows` returns them): per (topic, n, genre),
    the genre's ``t`` rows of the augmented set (off-topic + synthetic) drawn from its ``k`` off-topic rows
    alone: each repeated ``t // k`` times, and ``t % k`` of them (a seeded order) once more. Set
    ``off_topic_balanced``; the augmented set's class distribution with no new text. A genre without
    off-topic documents has no rows, as in ``off_topic``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = ["topic", "n", "label"]
    sizes = (
        rows.filter(F.col("set").isin("off_topic", "synthetic"))
        .groupBy(*keys)
        .agg(F.sum((F.col("set") == "off_topic").cast("int")).alias("k"), F.count(F.lit(1)).alias("t"))
    )
    # One window per (topic, n, genre): a few dozen documents each.
    order = Window.partitionBy(*keys).orderBy(F.xxhash64(F.lit(seed), "doc_id"), "doc_id")
    off = rows.filter(F.col("set") == "off_topic").join(sizes, keys).withColumn("i", F.row_number().over(order) - 1)
    copies = (F.floor(F.col("t") / F.col("k")) + (F.col("i") < F.col("t") % F.col("k")).cast("int")).cast("int")
    return off.withColumn("copy", F.explode(F.sequence(F.lit(1), copies))).select(
        "topic", "n", F.lit(BALANCED).alias("set"), "doc_id", "label", "text"
    )


def summary_table(pdf: "pd.DataFrame") -> "pd.DataFrame":
    """Table 4: per classifier model and N, each method's macro-F1 averaged over topics (mean ± std over the R
    seeds of that average), the topics evaluated, and in how many the off-topic row falls below on-topic and
    the augmented row rises above off-topic (per-topic means over seeds); with the control, ``transfer`` =
    augmented - off_keywords averaged over topics."""
    import pandas as pd

    rows = []
    for (model, n), group in pdf.groupby(["model", "n"]):
        per_seed = group.groupby(["method", "repeat"])["macro_f1"].mean().unstack("repeat")
        per_topic = group.groupby(["method", "topic"])["macro_f1"].mean().unstack("method")
        row = {"model": model, "N": int(n), "topics": int(group["topic"].nunique())}
        for method in METHODS:
            if method in per_seed.index:
                values = per_seed.loc[method]
                row[method] = f"{100 * values.mean():.1f} ± {100 * values.std(ddof=1) if len(values) > 1 else 0:.1f}"
        if {"on_topic", "off_topic"} <= set(per_topic.columns):
            row["gap topics"] = f"{int((per_topic['off_topic'] < per_topic['on_topic']).sum())}/{len(per_topic)}"
        if {"augmented", "off_topic"} <= set(per_topic.columns):
            gain = per_topic["augmented"] - per_topic["off_topic"]
            row["gain"] = f"{100 * gain.mean():+.1f}"
            row["gain topics"] = f"{int((gain > 0).sum())}/{len(per_topic)}"
        if {"augmented", "off_keywords"} <= set(per_topic.columns):
            # the control's share: what on-topic keywords add over as many synthetic documents without them
            row["transfer"] = f"{100 * (per_topic['augmented'] - per_topic['off_keywords']).mean():+.1f}"
        if {"augmented", BALANCED} <= set(per_topic.columns):
            # what the synthetic text adds over the class balance it brings
            row["beyond balance"] = f"{100 * (per_topic['augmented'] - per_topic[BALANCED]).mean():+.1f}"
        rows.append(row)
    return pd.DataFrame(rows)


def per_topic_table(pdf: "pd.DataFrame") -> "pd.DataFrame":
    """Per model, N and topic: each method's macro-F1 (mean over seeds, in points) and the augmented row's
    gain."""
    table = (pdf.groupby(["model", "n", "topic", "method"])["macro_f1"].mean().unstack("method") * 100).round(1)
    if {"augmented", "off_topic"} <= set(table.columns):
        table["gain"] = (table["augmented"] - table["off_topic"]).round(1)
    return table.reset_index()
