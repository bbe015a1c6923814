"""Quality control and evaluation (paper 4): the per-example set metrics as Column expressions, the QC cut,
the per-run results aggregate, and the Table-2-style summary and Figure-4-style curve."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame

METRICS = ("jaccard", "accuracy", "correctness", "completeness")


def set_metrics(predicted: "Column", gold: "Column") -> dict[str, "Column"]:
    """Per example: Jaccard |P∩G|/|P∪G| (1 when both are empty), exact-set accuracy (P = G), correctness
    (P ⊆ G) and completeness (G ⊆ P), as doubles."""
    from pyspark.sql import functions as F

    union = F.size(F.array_union(predicted, gold))
    return {
        "jaccard": F.when(union == 0, F.lit(1.0)).otherwise(F.size(F.array_intersect(predicted, gold)) / union),
        "accuracy": (F.array_sort(F.array_distinct(predicted)) == F.array_sort(F.array_distinct(gold))).cast("double"),
        "correctness": (F.size(F.array_except(predicted, gold)) == 0).cast("double"),
        "completeness": (F.size(F.array_except(gold, predicted)) == 0).cast("double"),
    }


def qc_cut(candidate_rows: "DataFrame", predictions: "DataFrame", target: int, seed: int) -> "DataFrame":
    """Candidates (method, example_id, composition, labels, text, generated_tokens, reason) with the QC
    classifier's ``predicted`` labels, their ``jaccard`` with the intended labels, and ``rank`` within the
    method (highest Jaccard first, ties by (``seed``, example_id) hash); the top ``target`` ranks keep a null
    reason, the rest get ``below the QC cut``. Candidates that already had a reason keep it (no rank)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    scored = candidate_rows.join(predictions.select("example_id", "predicted"), "example_id", "left").withColumn(
        "jaccard", F.when(F.col("predicted").isNotNull(), set_metrics(F.col("predicted"), F.col("labels"))["jaccard"])
    )
    ok = scored.filter(F.col("reason").isNull())
    ranked = ok.withColumn(
        "rank",
        F.row_number().over(
            Window.partitionBy("method").orderBy(
                F.col("jaccard").desc_nulls_last(), F.xxhash64(F.lit(seed), "example_id"), "example_id"
            )
        ),
    )
    ranked = ranked.withColumn("reason", F.when(F.col("rank") > target, F.lit("below the QC cut")))
    failed = scored.filter(F.col("reason").isNotNull()).withColumn("rank", F.lit(None).cast("int"))
    return ranked.unionByName(failed)


def results(predictions: "DataFrame") -> "DataFrame":
    """(split_kind, method, model, size, repeat, seed, jaccard, accuracy, correctness, completeness, n_train,
    n_augmented, n_test, threshold): per classifier run, the four metrics averaged over its test examples."""
    from pyspark.sql import functions as F

    metrics = set_metrics(F.col("predicted"), F.col("gold"))
    keys = ["split_kind", "method", "model", "size", "repeat", "seed"]
    return predictions.groupBy(*keys).agg(
        *[F.avg(metrics[m]).alias(m) for m in METRICS],
        F.first("n_train").alias("n_train"),
        F.first("n_augmented").alias("n_augmented"),
        F.count(F.lit(1)).alias("n_test"),
        F.first("threshold").alias("threshold"),
    )


def _cell(values: "pd.Series") -> str:
    return f"{100 * values.mean():.2f} ± {100 * values.std(ddof=1) if len(values) > 1 else 0:.2f}"


def summary_table(pdf: "pd.DataFrame") -> "pd.DataFrame":
    """Table 2 (and Table 1's iid column): per classifier model, split kind and method, at full synthetic size,
    each metric in points as mean ± sample std over the seeds, and the augmented rows' accuracy gain over
    ``no_aug`` of the same model and split."""
    import pandas as pd

    keys = ["model", "split_kind", "method"]
    full = pdf[pdf["size"] == pdf.groupby(keys)["size"].transform("max")]
    rows = []
    for (model, kind, method), group in full.groupby(keys, sort=False):
        row = {
            "model": model,
            "split": kind,
            "method": method,
            "synthetic": int(group["n_augmented"].max()),
            "seeds": len(group),
        }
        row.update({m: _cell(group[m]) for m in METRICS})
        base = full[(full["model"] == model) & (full["split_kind"] == kind) & (full["method"] == "no_aug")]["accuracy"]
        row["accuracy gain"] = (
            f"{100 * (group['accuracy'].mean() - base.mean()):+.2f}" if method != "no_aug" and len(base) else ""
        )
        rows.append(row)
    table = pd.DataFrame(rows)
    order = {"cg": 0, "iid": 1}
    return table.sort_values(
        ["model", "split", "method"],
        key=lambda c: (
            c.map(order) if c.name == "split" else c.map(lambda m: (m != "no_aug", m)) if c.name == "method" else c
        ),
    ).reset_index(drop=True)


def curve_table(pdf: "pd.DataFrame") -> "pd.DataFrame":
    """Figure 4: CG exact-set accuracy (points, mean over seeds) per classifier model, generator and synthetic
    size, each model's ``no_aug`` row as size 0."""
    import pandas as pd

    parts = []
    for model, cg in pdf[pdf["split_kind"] == "cg"].groupby("model", sort=True):
        base = cg[cg["method"] == "no_aug"]["accuracy"].mean()
        table = (
            (cg[cg["method"] != "no_aug"].groupby(["method", "n_augmented"])["accuracy"].mean() * 100)
            .round(2)
            .unstack("n_augmented")
        )
        table.insert(0, 0, round(100 * base, 2))
        table = table.reset_index()
        table.insert(0, "model", model)
        parts.append(table)
    return pd.concat(parts, ignore_index=True)


def plot_curve(curve: "pd.DataFrame", path) -> None:
    """Figure 4 as a PNG at ``path``: CG exact-set accuracy per synthetic size (``curve``: :func:`curve_table`'s
    rows), one line per method (and model, when there are several)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    several = curve["model"].nunique() > 1
    for _, row in curve.iterrows():
        points = [(int(size), value) for size, value in row.drop(["model", "method"]).items() if value == value]
        label = f"{row['method']} ({row['model']})" if several else row["method"]
        ax.plot([x for x, _ in points], [y for _, y in points], "o-", label=label)
    ax.set_xlabel("synthetic texts added (QC-ranked, best first)")
    ax.set_ylabel("CG exact-set accuracy (points)")
    ax.set_title("Accuracy vs synthetic size (size 0: no_aug)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
