"""The genre-transfer jobs (paper 5, METHODS.md section 5): four thin jobs, ``genre-generate`` in
:mod:`jobs.genre.genre_generate` and ``genre-evaluate`` in :mod:`jobs.genre.genre_evaluate`.

* ``genre-topics`` fits the topic model (Spark ML: tokenizer, stop words, vocabulary, LDA) on
  ``topic_corpus`` (or the ``documents``), saved once per run config and inputs; writes ``genre_doc_topics``
  (doc_id, genre, topic_weights, top_topic), ``genre_topic_words`` (each topic's top words and prevalence)
  and ``genre_passages`` (every document cut into ``genre.window_chars`` passages, each with its keywords).
* ``genre-splits`` writes ``genre_splits``: per evaluated topic and size N, each genre's on-topic ``test``
  documents (heaviest for the topic), ``on_topic`` training documents (next heaviest) and ``off_topic``
  training documents (lightest), never overlapping.
* ``genre-generate`` fine-tunes one keywords-to-text generator per (topic, N, genre) on that genre's
  off-topic passages only (``genre_gen_pairs``; the models in ``genre_generators``), in concurrent Ray tasks
  (with ``genre.generator.per_genre: false``, one genre-conditioned generator per (topic, N) on every genre's);
  then one Ray Data pass generates, from the keywords of on-topic test documents (as many as
  ``genre.generator.synthetic_ratio`` asks; with ``off_topic_control`` also of off-topic training documents),
  one synthetic document per genre (``genre_prompts`` -> ``genre_generated``), kept in ``genre_synthetic`` or
  quarantined in ``genre_synthetic_quarantine`` with a reason (prompts = kept + quarantined).
* ``genre-evaluate`` writes ``genre_eval_sets`` (cleaned windows of every split document and the cleaned
  synthetic documents) and trains the genre classifiers in Ray tasks: per classifier model (fastText and/or
  the fine-tuned encoder), topic, N and method (on_topic, off_topic, augmented; off_keywords with the control,
  synthetic_only and off_topic_balanced when asked) ``genre.eval.repeats`` seeds, macro-F1 on the on-topic test set:
  ``genre_results`` and a report (the paper's Table 4 and per-topic gains).
"""

from __future__ import annotations

import logging
from dataclasses import asdict

from common.platform.errors import InputError
from common.platform.runner.job import JobContext, JobResult, JobRun, hash_of, job, run_jobs
from jobs import entry_point
from jobs.genre.genre_evaluate import evaluate_job
from jobs.genre.genre_generate import generate_job
from jobs.genre.genre_tables import DOC_TOPICS, DOCUMENTS, PASSAGES, SPLITS, TOPIC_CORPUS, TOPIC_WORDS

log = logging.getLogger(__name__)


class DuplicateDocumentError(InputError):
    """Two documents share a doc_id: splits and keywords are per document, so ids must be unique."""


def _check_unique(df, table: str) -> None:
    from pyspark.sql import functions as F

    dupes = [r["doc_id"] for r in df.groupBy("doc_id").count().filter(F.col("count") > 1).limit(5).collect()]
    if dupes:
        raise DuplicateDocumentError(
            f"{table}: doc_id is not unique (e.g. {', '.join(map(repr, dupes))}); give each "
            "document its own id (inputs.documents.rename can map another column), or keep "
            "ingest.dedup.exact on so that ingest quarantines the copies"
        )


@job("genre-topics")
def topics_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``genre-topics``: the topic model, each document's topics, each passage's keywords."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from common.genre.topics import doc_topics, passage_table, prevalence, topic_words, with_passages, word_topics

    cfg = ctx.cfg.genre
    docs = tr.read(DOCUMENTS)
    own_corpus = ctx.cfg.inputs.topic_corpus is not None
    corpus = tr.read(TOPIC_CORPUS) if own_corpus else docs
    config_hash = hash_of(asdict(cfg.topic_model), cfg.window_chars, cfg.keywords, own_corpus, ctx.cfg.seed)
    if tr.all_written([DOC_TOPICS, TOPIC_WORDS, PASSAGES], config_hash):
        return {}
    _check_unique(docs, DOCUMENTS)
    uri = ctx.models_dir("genre_topics", hash_of(config_hash, tr.inputs))
    # The documents' passages: the keyword table's rows, and the topic model's when it fits on them.
    rows = with_passages(docs, cfg.window_chars).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [rows]
    try:
        model = _topic_model(ctx, uri, corpus, own_corpus, rows)
        tr.set_tags({"topic_model.uri": uri, "topic_model.kind": cfg.topic_model.kind})
        metrics = {"vocabulary": float(len(model.stages[2].vocabulary))}
        if cfg.topic_model.log_perplexity:
            metrics["log_perplexity"] = float(model.stages[-1].logPerplexity(model.transform(corpus.select("text"))))
        dt = doc_topics(model, docs).persist(StorageLevel.MEMORY_AND_DISK)
        ww = word_topics(model).persist(StorageLevel.MEMORY_AND_DISK)
        cached += [dt, ww]
        tr.write(dt, DOC_TOPICS, config_hash)
        tr.write(topic_words(ww).join(prevalence(dt), "topic").orderBy("topic"), TOPIC_WORDS, config_hash)
        written = tr.write(passage_table(model, rows, dt, ww, cfg.keywords), PASSAGES, config_hash)
    finally:
        for df in cached:
            df.unpersist()
    # One row per topic: bounded by genre.topic_model.topics.
    for r in ctx.lakehouse.read(TOPIC_WORDS, tr.result.outputs[TOPIC_WORDS].version).orderBy("topic").collect():
        log.info("topic %2d (%.3f): %s", r["topic"], r["prevalence"], r["words"])
    passages = ctx.lakehouse.read(PASSAGES, written.version)
    row = passages.agg(
        F.count(F.lit(1)).alias("passages"), F.sum((F.col("keywords") == "").cast("long")).alias("no_keywords")
    ).first()
    return {**metrics, "passages": float(row["passages"]), "passages_without_keywords": float(row["no_keywords"] or 0)}


def _topic_model(ctx: JobContext, uri: str, corpus, own_corpus: bool, doc_passages):
    """The topic model saved at ``uri`` (same config and inputs), or one fit on ``corpus`` now and saved
    there: cut into passages (the documents' are ``doc_passages`` already) or whole, as
    ``genre.topic_model.fit_on`` says."""
    from pyspark import StorageLevel
    from pyspark.ml import PipelineModel
    from pyspark.sql import functions as F

    from common.genre.topics import fit_topic_model, with_passages
    from common.platform.storage import exists

    cfg = ctx.cfg.genre
    if not ctx.force and exists(f"{uri}/metadata"):
        log.info("reusing the topic model at %s (same config and inputs)", uri)
        return PipelineModel.load(uri)
    cached = None
    if cfg.topic_model.fit_on == "documents":
        fit_rows = corpus.select("text")
    else:
        passages = doc_passages
        if own_corpus:
            # LDA passes over its input once per iteration: the topic corpus is cut once.
            passages = cached = with_passages(corpus, cfg.window_chars).persist(StorageLevel.MEMORY_AND_DISK)
        fit_rows = passages.select(F.col("passage").alias("text"))
    try:
        model = fit_topic_model(cfg.topic_model, ctx.cfg.seed, fit_rows)
    finally:
        if cached is not None:
            cached.unpersist()
    model.write().overwrite().save(uri)
    return model


def _evaluated_topics(ctx: JobContext, doc_topics) -> list[int]:
    from common.genre.topics import prevalence

    split = ctx.cfg.genre.split
    if split.topics is not None:
        ctx.cfg.genre.check_topics()
        return sorted(set(split.topics))
    # k rows: bounded by the config.
    ranked = [r["topic"] for r in prevalence(doc_topics).orderBy("prevalence", ascending=False).collect()]
    return sorted(ranked[: split.max_topics] if split.max_topics else ranked)


@job("genre-splits")
def splits_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``genre-splits``: per evaluated topic and N, the test, on-topic and off-topic document sets."""
    from pyspark.sql import functions as F

    from common.data.leakage import check_no_leak
    from common.genre.topics import effective_sizes, split_sizes, topic_splits

    cfg = ctx.cfg.genre
    dt = tr.read(DOC_TOPICS)
    config_hash = hash_of(asdict(cfg.split), ctx.cfg.seed)
    if tr.already_written(SPLITS, config_hash):
        return {}
    # One row per genre: a bounded aggregate.
    counts = {r["genre"]: r["count"] for r in dt.groupBy("genre").count().collect()}
    sizes = effective_sizes(counts, cfg.split)
    if not sizes:
        raise InputError(
            f"genre.split.sizes {cfg.split.sizes}: no genre has enough documents for a training set "
            f"(documents per genre: {counts})"
        )
    dropped = sorted(set(cfg.split.sizes) - set(sizes))
    if dropped:
        log.info("sizes %s dropped: the genres cap them to (nearly) the training sets of a smaller N", dropped)
    for n in sizes:
        log.info("N=%d: (test, train) documents per genre %s", n, split_sizes(counts, n, cfg.split))
    starved = [g for g, (_, train) in split_sizes(counts, max(sizes), cfg.split).items() if train == 0]
    if starved:
        log.warning(
            "genres %s have too few documents for any training set: their test documents can only be misclassified",
            starved,
        )
    topics = _evaluated_topics(ctx, dt)
    tr.write(topic_splits(dt, topics, sizes, cfg.split), SPLITS, config_hash)
    # Per (topic, N): no test document's text among the training documents' (ingest keeps one copy of each).
    rows = (
        tr.written(SPLITS)
        .join(tr.read(DOCUMENTS).select("doc_id", "text"), "doc_id")
        .withColumn("text", F.concat_ws("\u0001", "topic", "n", "text"))
    )
    check_no_leak(
        rows.filter(F.col("role").isin("on_topic", "off_topic")),
        "text",
        rows.filter(F.col("role") == "test"),
        "text",
        "genre-splits: test documents in training sets",
    )
    tr.log_dict(
        {"topics": topics, "sizes": sizes, "dropped_sizes": dropped, "documents_per_genre": counts}, "splits.json"
    )
    return {"topics": float(len(topics)), "sizes": float(len(sizes))}


def run(ctx: JobContext) -> JobResult:
    """Run the four jobs in order (the ``genre-transfer`` pipeline without its ingest)."""
    return run_jobs(ctx, "genre", (topics_job, splits_job, generate_job, evaluate_job))


main = entry_point("genre", run, __doc__)

if __name__ == "__main__":
    main()
