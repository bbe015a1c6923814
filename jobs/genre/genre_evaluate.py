"""Job ``genre-evaluate`` of the genre-transfer pipeline (:mod:`jobs.genre.genre` and :mod:`jobs.genre.genre_generate`
hold the other three): writes ``genre_eval_sets`` (cleaned windows of every split document and the cleaned synthetic
documents) and trains the genre classifiers in Ray tasks: per classifier model (fastText and/or the fine-tuned
encoder), topic, N and method (on_topic, off_topic, augmented; off_keywords with the control, synthetic_only and
off_topic_balanced when asked) ``genre.eval.repeats`` seeds, macro-F1 on the on-topic test set: ``genre_results``,
every classifier's test predictions (``genre_predictions``), each method judged against off-topic training on the same
rows, pooled over topics, N and seeds (``genre_evidence``: effect, interval, MDE, the paper's effect, verdict), a
report (the paper's Table 4, the evidence and per-topic gains), and the kept classifiers shipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point
from jobs.genre.genre_tables import (
    BASELINE,
    DOCUMENTS,
    EVAL_SETS,
    EVIDENCE,
    JUDGED,
    PREDICTIONS,
    RESULT_SCHEMA,
    RESULTS,
    SPLITS,
    SYNTHETIC,
)

log = logging.getLogger(__name__)


@job("genre-evaluate")
def evaluate_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``genre-evaluate``: on-topic, off-topic and augmented genre classifiers, R seeds, macro-F1."""
    from pyspark.sql import functions as F

    from common.genre.evaluation import balanced_rows, eval_rows, methods, summary_table
    from common.models.classifier_config import used_settings
    from common.models.classifiers.text_classifier import evaluate_many
    from common.registry.naming import classifier_name
    from common.registry.ship import resume
    from common.stages.judging import judge, write_task_predictions

    cfg = ctx.cfg.genre
    docs, splits, synthetic_rows = tr.read(DOCUMENTS), tr.read(SPLITS), tr.read(SYNTHETIC)
    config_hash = hash_of(used_settings(cfg.eval, cfg.eval.models), cfg.window_chars, ctx.cfg.seed)
    if tr.all_written((RESULTS, PREDICTIONS, EVIDENCE), config_hash):
        print(summary_table(tr.written(RESULTS).toPandas()).to_string(index=False))
        resume(ctx, tr)  # what an earlier run left unshipped: shipped now, nothing trained
        return None
    rows = eval_rows(splits, docs, synthetic_rows, cfg.window_chars, ctx.cfg.seed)
    if cfg.eval.balanced_control:
        rows = rows.unionByName(balanced_rows(rows, ctx.cfg.seed))
    sets = tr.write(rows, EVAL_SETS, config_hash)
    # One row per (topic, n): bounded by the config.
    grid = [
        (r["topic"], r["n"])
        for r in ctx.lakehouse.read(EVAL_SETS, sets.version)
        .select("topic", "n")
        .distinct()
        .orderBy("topic", "n")
        .collect()
    ]
    files = ctx.lakehouse.file_uris(EVAL_SETS, sets.version)
    evaluated = methods(cfg.generator.off_topic_control, cfg.eval.synthetic_only, cfg.eval.balanced_control)
    # Each topic's classifiers at its largest N, first seed: kept to ship, one per model, method and topic.
    largest = {topic: n for topic, n in grid}
    kept_key = hash_of(config_hash, tr.inputs, sets.version)
    # Never again where an earlier run wrote the results (and kept them) but not the predictions: its classifiers stay
    # as registered, this run only scores anew.
    shipped = tr.already_written(RESULTS, config_hash)
    keep = {
        (model, f"{method}_topic{topic}"): ctx.models_dir(
            f"genre_{classifier_name(method, model)}_topic{topic}", kept_key
        )
        for model in cfg.eval.models
        for topic in largest
        for method in evaluated
        if ctx.cfg.registry.ships("genre", model) and not shipped
    }
    keys, figures, predicted = [], [], []
    for model in cfg.eval.models:
        jobs = []
        for topic, n in grid:
            where = [("topic", "=", topic), ("n", "=", n)]
            test = [(files, where + [("set", "=", "test")])]
            for method, parts in evaluated.items():
                train = [(files, where + [("set", "=", part)]) for part in parts]
                for repeat in range(cfg.eval.repeats):
                    seed = ctx.cfg.seed + repeat
                    keys.append((topic, n, method, model, repeat, seed))
                    kept = keep.get((model, f"{method}_topic{topic}")) if (repeat, n) == (0, largest[topic]) else None
                    tag = {"model": model, "n": n, "topic": topic, "method": method, "repeat": repeat}
                    jobs.append(
                        {"train": train, "test": test, "seed": seed, "tag": tag, **({"keep": kept} if kept else {})}
                    )
        log.info(
            "genre evaluate (%s): %d (topic, N) x %d methods x %d seeds = %d classifiers",
            model,
            len(grid),
            len(evaluated),
            cfg.eval.repeats,
            len(jobs),
        )
        found, refs = evaluate_many(ctx.ray(), model, jobs, cfg.eval.fasttext, cfg.eval.encoder)
        figures, predicted = figures + found, predicted + refs
    write_task_predictions(tr, predicted, PREDICTIONS, config_hash, ("model", "n", "topic"))
    # A topic's test rows are the same at every N (common.genre.topics): one test its N and seeds share, the topics
    # independent; each model is judged against its own off-topic classifiers.
    cells, judged = judge(
        ctx,
        tr,
        tr.written(PREDICTIONS),
        EVIDENCE,
        config_hash,
        "genre",
        BASELINE,
        JUDGED,
        ("model", "n", "topic"),
        scope=lambda run: f"model={run[0]}",
        test_of=lambda run: run[2],
    )
    rows = [
        # Read off the kept predictions (an earlier run's where it wrote them): results and evidence always agree.
        (tr.run_id, *k, *_read_off(cells, k), int(f["rows"]), int(f["n_test"]))
        for k, f in zip(keys, figures)
    ]
    frame = ctx.spark.createDataFrame(rows, RESULT_SCHEMA)
    tr.write(frame, RESULTS, config_hash)
    pdf = frame.toPandas()
    report(ctx, tr, pdf, judged)
    if keep:
        ship_classifiers(ctx, tr, pdf, keep, largest, files, sets.version, config_hash)
    means = pdf.groupby(["model", "n", "method"])["macro_f1"].mean()
    # The first model keeps the short metric names.
    return {
        f"{'' if model == cfg.eval.models[0] else model + '.'}n{n}.{method}.macro_f1": float(v)
        for (model, n, method), v in means.items()
    } | {"eval_rows": float(ctx.lakehouse.read(EVAL_SETS, sets.version).filter(F.col("set") != "test").count())}


def _read_off(cells: dict, key: tuple) -> tuple[float, float]:
    """(accuracy, macro-F1) of the classifier ``key`` (topic, n, method, model, repeat, seed) on its kept cells."""
    from common.evaluation.predictions import value

    topic, n, method, model, repeat, _ = key
    found = cells.get((method, (model, str(n), str(topic), repeat)), {})
    return value("accuracy", found), value("macro_f1", found)


def ship_classifiers(
    ctx: JobContext,
    tr: JobRun,
    pdf,
    keep: dict,
    largest: dict[int, int],
    files: list[str],
    sets_version: int,
    config_hash: str,
) -> None:
    """Ship (:func:`common.registry.ship.ship`) each kept (model, ``<method>_topic<topic>``) classifier as method
    ``<method>_topic<topic>``, with its seeds' macro-F1 and accuracy on that topic's test set at its largest N."""
    from common.genre.evaluation import GENERATIVE, NON_LETTERS
    from common.registry.candidates import generator_lineage, method_candidates, task_scoring
    from common.registry.ship import ship

    rows = pdf[pdf["n"] == pdf["topic"].map(largest)]
    rows = rows.assign(method=rows["method"] + "_topic" + rows["topic"].astype(str))
    candidates = []
    for topic, n in largest.items():
        where = [("topic", "=", topic), ("n", "=", n)]
        candidates += method_candidates(
            "genre",
            rows,
            {k: f for k, f in keep.items() if k[1].endswith(f"_topic{topic}")},
            ("macro_f1", "accuracy"),
            lambda m: {EVAL_SETS: sets_version},
            [[NON_LETTERS, ""]],
            test={EVAL_SETS: sets_version},
            examples=[
                r["text"]
                for r in ctx.lakehouse.read(EVAL_SETS, sets_version)
                .filter(f"topic = {int(topic)} and n = {int(n)} and set = 'test'")
                .select("text")
                .limit(3)
                .collect()
            ],
            lineage={"config_hash": config_hash, "topic": str(topic), "n": str(n)},
            scoring=task_scoring([(files, where + [("set", "=", "test")])], ctx.cfg.genre.eval.encoder),
        )
    for c in (c for c in candidates if c.method.rsplit("_topic", 1)[0] in GENERATIVE):
        c.lineage.update(generator_lineage(ctx.cfg.genre.generator.model))
    ship(ctx, tr, candidates)


def report(ctx: JobContext, tr: JobRun, pdf, judged: dict) -> None:
    """Write the Table-4 summary with each method's evidence (``judged``) and the per-topic table (markdown), log
    them to MLflow, print the summary."""
    from common.genre.evaluation import per_topic_table, summary_table
    from common.stages.judging import evidence_text

    cfg = ctx.cfg.genre
    folder = Path(ctx.reports_dir("genre"))
    table = summary_table(pdf).to_string(index=False)
    against = evidence_text(judged)
    print(table + f"\n\n{against}")
    text = (
        f"# Genre transfer across topics\n\nMLflow run `{tr.run_id}`; table `{RESULTS}`; macro-F1 (points) on "
        f"each topic's on-topic test set, averaged over topics, mean ± sample std over {cfg.eval.repeats} "
        f"seeds; gain = augmented - off_topic.\n\n```\n{table}\n```\n\nEach method against off_topic on the same "
        f"rows, pooled over topics, N and seeds (`{EVIDENCE}`):\n\n```\n{against}\n```\n\n## Per topic\n\n```\n"
        f"{per_topic_table(pdf).to_string(index=False)}\n```\n"
    )
    path = folder / "report.md"
    path.write_text(text, encoding="utf-8")
    tr.log_artifact(str(path), "report")


main = entry_point("genre-evaluate", evaluate_job, __doc__)

if __name__ == "__main__":
    main()
