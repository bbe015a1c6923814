"""The consistency pipeline's HFT classifiers, as ``consistency-train`` and the CGA jobs train and score them: a
training table's stats, the level jobs of R seeded repeats, their training in Ray, each model's per-row predictions
on the accuracy test and the title pairs (:func:`predictions`, what the results judge by), and its weighted F1 and
consistency rate alone (:func:`evaluate`, the sweep's points)."""

from __future__ import annotations

import statistics

from common.platform.runner.job import JobContext, hash_of


def training_stats(ctx: JobContext, table: str, version: int) -> tuple[int, int, int]:
    """(rows, augmented rows = source other than ``labeled``, label depth) of a training table version."""
    from pyspark.sql import functions as F

    from common.data.taxonomy import depth_col

    stats = (
        ctx.lakehouse.read(table, version)
        .agg(
            F.count("*").alias("n"),
            F.sum((F.col("source") != "labeled").cast("long")).alias("aug"),
            F.max(depth_col(F.col("category"))).alias("depth"),
        )
        .first()
    )
    return int(stats["n"]), int(stats["aug"] or 0), int(stats["depth"] or 0)


def model_jobs(
    ctx: JobContext, table: str, version: int, depth: int, name: str, key: str, repeats: int, first_repeat: int = 0
):
    """The HFT models of ``repeats`` trainings on a table version (seeds seed+repeat) and their level jobs.

    Returns ([(repeat, seed, HFTModel)], [train_level kwargs]).
    """
    from common.models.classifiers.hft import HFTModel, level_jobs

    files = ctx.lakehouse.file_uris(table, version)
    models, jobs = [], []
    for repeat in range(first_repeat, first_repeat + repeats):
        seed = ctx.cfg.seed + repeat
        out_dir = ctx.models_dir(name, hash_of(key, table, version, repeat))
        models.append((repeat, seed, HFTModel(out_dir, depth)))
        jobs += level_jobs(files, depth, ctx.cfg.consistency.fasttext, seed, out_dir)
    return models, jobs


def train_levels(ctx: JobContext, tr, jobs) -> None:
    """Train HFT level jobs in parallel as Ray tasks; log their stats to the run."""
    from common.models.classifiers.hft import HFTTrainerPool, stats_dict

    level_stats = HFTTrainerPool(ctx.ray()).train(jobs)
    tr.log_dict(stats_dict(level_stats), "models/training_stats.json")
    tr.log_metrics(
        {"fasttext_words_per_second_per_thread": statistics.median(s.words_per_second_per_thread for s in level_stats)}
    )


def evaluate(ctx: JobContext, model, accuracy_test, pairs, blind) -> tuple[float, float]:
    """(weighted F1 on the accuracy test, consistency rate on the pairs) of one model."""
    from pyspark.sql import functions as F

    from common.catalog.metrics import consistency_rate
    from common.models.classifiers.hft import predict
    from common.models.classifiers.metrics import weighted_f1

    text = blind if blind is not None else (lambda c: c)
    acc = predict(accuracy_test.select("category", text(F.col("title")).alias("title")), model)
    f1 = weighted_f1(acc, "category", "pred_label")
    both = pairs.select(text(F.col("title_1")).alias("title_1"), text(F.col("title_2")).alias("title_2"))
    both = predict(predict(both, model, "title_1", "p1"), model, "title_2", "p2")
    return f1, consistency_rate(both, "p1_label", "p2_label")


def evaluate_many(ctx: JobContext, models: list, accuracy_test, pairs, threads: int = 4) -> list[tuple[float, float]]:
    """:func:`evaluate` of each (model, blind) in ``models``, in order; up to ``threads`` at once.

    Each evaluation is a few small Spark jobs whose time goes to scheduling and model loading rather than
    to the cores, so several overlap (Spark runs jobs from concurrent threads side by side)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(models)))) as pool:
        return list(pool.map(lambda mb: evaluate(ctx, mb[0], accuracy_test, pairs, mb[1]), models))


def predictions(runs: list, accuracy_test, pairs):
    """Every (method, repeat, model, blind) of ``runs`` scored on the same test rows, as one frame of
    :data:`~common.evaluation.predictions.PREDICTIONS_SCHEMA`: the accuracy test's rows keyed by ``item_id``
    (gold: the category) and the title pairs keyed by ``group_id`` (pred "1" where both titles get one label). Lazy:
    the caller's write scores them all in one Spark job, each Python worker loading each model once."""
    from functools import reduce

    from pyspark.sql import functions as F

    from common.models.classifiers.hft import predict

    frames = []
    for method, repeat, model, blind in runs:
        text = blind if blind is not None else (lambda c: c)
        tags = [F.lit(method).alias("method"), F.lit(repeat).cast("int").alias("repeat")]
        rows = predict(accuracy_test.select("item_id", "category", text(F.col("title")).alias("title")), model)
        frames.append(
            rows.select(
                *tags,
                F.lit("rows").alias("test"),
                F.col("item_id").cast("string").alias("key"),
                F.col("category").alias("gold"),
                F.col("pred_label").alias("pred"),
            )
        )
        titles = [text(F.col(c)).alias(c) for c in ("title_1", "title_2")]
        both = pairs.select("group_id", *titles)
        both = predict(predict(both, model, "title_1", "p1"), model, "title_2", "p2")
        alike = F.when(F.col("p1_label") == F.col("p2_label"), "1").otherwise("0")
        frames.append(
            both.select(
                *tags,
                F.lit("pairs").alias("test"),
                F.col("group_id").cast("string").alias("key"),
                F.lit("").alias("gold"),
                alike.alias("pred"),
            )
        )
    return reduce(lambda a, b: a.unionByName(b), frames)
