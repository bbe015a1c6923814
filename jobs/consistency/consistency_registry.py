"""What the consistency pipeline hands the model registry (``consistency-train``'s methods and CGA's classifier): a
method's candidate (its first repeat's HFT, its repeats' metrics, its lineage), the substitutions a CS-Blind model
applies to its input, and the comparer that scores a candidate against the champion on the test tables."""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

from common.platform.runner.job import JobContext, JobRun, hash_of


def blind_rules(method: str, colours: list[str], sizes: list[str]) -> list[list[str]]:
    """The substitutions a shipped ``method`` model applies to its input ([] but for cs_blind): what
    :func:`common.catalog.blinding.blind_col` does in Spark, in the order it does it."""
    from common.catalog.blinding import COLOUR_TOKEN, SIZE_TOKEN, dictionary_pattern

    if method != "cs_blind":
        return []
    return [[dictionary_pattern(sizes), SIZE_TOKEN], [dictionary_pattern(colours), COLOUR_TOKEN]]


def candidate(
    ctx: JobContext,
    tr: JobRun,
    method: str,
    model,
    pdf,
    blind: list[list[str]],
    examples: list[str],
    lineage: Optional[dict[str, str]] = None,
):
    """The registry candidate of ``method``: its first repeat's HFT, its R repeats' test metrics (``pdf``: the
    results rows), its lineage (the consistency config's hash, and ``lineage``), and ``examples`` (a few test
    titles) as its input example."""
    from common.registry.candidates import Candidate
    from common.registry.gate import Measure

    rows = pdf[pdf["method"] == method]
    test = {t: tr.data_versions[t] for t in ("accuracy_test", "consistency_test")}  # its scoring: these versions
    return Candidate(
        "consistency",
        method,
        model.uri,
        {"kind": "hft", "depth": model.depth, "substitute": blind},
        {m: Measure.of(rows[m].tolist()) for m in ("f1_weighted", "consistency_rate")},
        train={f"train_{method}": tr.result.outputs[f"train_{method}"].version},
        test=test,
        scoring=dict(test),
        examples=examples,
        lineage={"config_hash": hash_of(asdict(ctx.cfg.consistency), ctx.cfg.seed), **(lineage or {})},
    )


def comparer(ctx: JobContext):
    """The consistency pipeline's :data:`~common.registry.compare.CompareOf`: two HFTs scored in Spark on the test
    table versions of a candidate's ``scoring`` ({accuracy_test, consistency_test}): the counts of each (category,
    candidate's, champion's prediction) on the accuracy test and of each (candidate predicts the pair alike,
    champion does) on the title pairs (a few cells reach the driver, no row). Each model reads its titles as it
    serves: with its manifest's substitutions (a CS-Blind model's colours and sizes, its own dictionaries)."""
    from pyspark.sql import functions as F

    from common.catalog.blinding import substitute_col
    from common.models.classifiers.hft import HFTModel, predict

    def compare_of(scoring: dict):
        accuracy_test = ctx.lakehouse.read("accuracy_test", scoring["accuracy_test"])
        pairs = ctx.lakehouse.read("consistency_test", scoring["consistency_test"])

        def compare(candidate: str, candidate_manifest: dict, champion: str, champion_manifest: dict) -> dict:
            models = [
                (HFTModel(uri, int(m["depth"])), m.get("substitute") or [])
                for uri, m in ((candidate, candidate_manifest), (champion, champion_manifest))
            ]
            rows = accuracy_test.select(
                "category",
                *(substitute_col(F.col("title"), subs).alias(f"t{i}") for i, (_, subs) in enumerate(models)),
            )
            both = pairs.select(
                *(
                    substitute_col(F.col(f"title_{k}"), subs).alias(f"t{k}{i}")
                    for i, (_, subs) in enumerate(models)
                    for k in (1, 2)
                )
            )
            for i, (model, _) in enumerate(models):
                rows = predict(rows, model, f"t{i}", f"p{i}")
                both = predict(predict(both, model, f"t1{i}", f"p1{i}"), model, f"t2{i}", f"p2{i}")
            row_cells = rows.groupBy("category", "p0_label", "p1_label").count().collect()
            pair_cells = (
                both.groupBy(
                    (F.col("p10_label") == F.col("p20_label")).alias("a"),
                    (F.col("p11_label") == F.col("p21_label")).alias("b"),
                )
                .count()
                .collect()
            )
            return {
                "rows": [((r[0], r[1], r[2]), int(r[3])) for r in row_cells],
                "pairs": [((bool(r[0]), bool(r[1])), int(r[2])) for r in pair_cells],
            }

        return compare

    return compare_of
