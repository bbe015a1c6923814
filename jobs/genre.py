"""The genre-transfer jobs (paper 5, METHODS.md section 5): four thin jobs, ``genre-evaluate`` in
:mod:`jobs.genre_evaluate`.

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
from typing import Optional

from common.models.generation.served.checks import served_preflight
from common.platform.errors import InputError
from common.platform.job import JobContext, JobResult, JobRun, hash_of, job, run_jobs
from jobs import entry_point
from jobs.genre_evaluate import evaluate_job
from jobs.genre_tables import (
    DOC_TOPICS,
    DOCUMENTS,
    GENERATED,
    GENERATORS,
    PAIRS,
    PASSAGES,
    PROMPTS,
    QUARANTINE,
    SPLITS,
    SYNTHETIC,
    TOPIC_CORPUS,
    TOPIC_WORDS,
)

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


def _fine_tune_generators(ctx: JobContext, tr: JobRun, pairs_version: int):
    """Fine-tune (or reuse) one generator per (topic, n, genre) of the pairs table; returns a DataFrame of
    (topic, n, genre, pairs, model_path, model_version, reused)."""
    from pyspark.sql import functions as F

    from common.models.generation.seq2seq import MODEL_MARKER, ModelSpec, TrainSpec, fine_tune_many_on_ray
    from common.platform.storage import exists

    gen = ctx.cfg.genre.generator
    pairs = ctx.lakehouse.read(PAIRS, pairs_version)
    # One row per (topic, n, genre): bounded by topics x sizes x genres. A genre-conditioned generator (not
    # per_genre) is one model per (topic, n) that every genre's row names.
    keys = (
        pairs.groupBy("topic", "n", "genre")
        .agg(F.count(F.lit(1)).alias("pairs"))
        .orderBy("topic", "n", "genre")
        .collect()
    )
    # A model depends on what it learns from and how, not on how it is later prompted or decoded: a new
    # synthetic_ratio or sampling setting reuses the fine-tuned generators. (per_genre enters the hash only
    # when false, so the per-genre generators of earlier runs keep their keys.)
    model_hash = hash_of(
        asdict(gen.model),
        asdict(gen.fine_tune),
        gen.max_passages_per_doc,
        ctx.cfg.seed,
        *([] if gen.per_genre else ["genre-conditioned"]),
    )
    rows, todo, started = [], [], set()
    for r in keys:
        model_key = (r["topic"], r["n"], r["genre"] if gen.per_genre else None)
        key = hash_of(model_hash, tr.inputs, *(k for k in model_key if k is not None))
        uri = ctx.models_dir("genre_generator", key)
        reused = not ctx.force and exists(f"{uri}/{MODEL_MARKER}")
        rows.append((r["topic"], r["n"], r["genre"], r["pairs"], uri, f"genre_generator-{key}", reused))
        if not reused and uri not in started:
            started.add(uri)
            filters = [("topic", "=", r["topic"]), ("n", "=", r["n"])]
            todo.append((filters + ([("genre", "=", r["genre"])] if gen.per_genre else []), uri))
    log.info(
        "generators: %d for %d genre rows, %d to fine-tune, %d reused (same config and inputs)",
        len({r[4] for r in rows}),
        len(rows),
        len(todo),
        len({r[4] for r in rows if r[6]}),
    )
    if todo:
        results = fine_tune_many_on_ray(
            ctx.ray(),
            ctx.lakehouse.file_uris(PAIRS, pairs_version),
            todo,
            ModelSpec.from_config(gen.model),
            TrainSpec.from_config(gen.fine_tune, ctx.cfg.seed),
            num_cpus=gen.fine_tune.num_cpus,
            num_gpus=gen.fine_tune.num_gpus,
        )
        losses = [r.step_losses[-1] for r in results if r.step_losses]  # none for in-context generators
        tr.log_metrics(
            {
                "fine_tune.generators": float(len(results)),
                "fine_tune.seconds": float(sum(r.seconds for r in results)),
                **({"fine_tune.mean_final_loss": float(sum(losses) / len(losses))} if losses else {}),
            }
        )
    return ctx.spark.createDataFrame(
        rows, "topic int, n int, genre string, pairs long, model_path string, model_version string, reused boolean"
    )


@job("genre-generate", preflight=served_preflight(lambda cfg: cfg.genre.generator.model))
def generate_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``genre-generate``: per-genre generators on off-topic passages; synthetic on-topic documents."""
    from pyspark.sql import functions as F

    from common.genre.generation import generator_pairs, prompts, synthetic
    from common.models.config import generator_facts
    from common.models.generation.stages import generate_routed_stage

    cfg = ctx.cfg.genre
    gen = cfg.generator
    splits, passages = tr.read(SPLITS), tr.read(PASSAGES)
    config_hash = hash_of(asdict(gen), ctx.cfg.seed)
    if tr.all_written([SYNTHETIC, QUARANTINE], config_hash):
        return None
    pairs = tr.write(generator_pairs(splits, passages, gen.max_passages_per_doc, gen.per_genre), PAIRS, config_hash)
    generators = tr.write(_fine_tune_generators(ctx, tr, pairs.version), GENERATORS, config_hash)
    prompt_rows = tr.write(
        prompts(
            splits,
            passages,
            ctx.lakehouse.read(GENERATORS, generators.version),
            ctx.cfg.seed,
            gen.synthetic_ratio,
            gen.off_topic_control,
            gen.per_genre,
        ),
        PROMPTS,
        config_hash,
    )
    # one generator per genre: a bounded read
    paths = [r[0] for r in ctx.lakehouse.read(GENERATORS, generators.version).select("model_path").collect()]
    generated = generate_routed_stage(
        ctx, tr, PROMPTS, prompt_rows.version, gen.generation, paths, gen.cache_models, GENERATED, config_hash
    )
    rows = synthetic(
        ctx.lakehouse.read(GENERATED, generated.version), ctx.lakehouse.read(PROMPTS, prompt_rows.version)
    )
    kept = tr.write(rows.filter(F.col("reason").isNull()).drop("reason"), SYNTHETIC, config_hash)
    rejected = tr.write(rows.filter(F.col("reason").isNotNull()), QUARANTINE, config_hash)
    n_prompts = ctx.lakehouse.read(PROMPTS, prompt_rows.version).count()
    n_kept = ctx.lakehouse.read(SYNTHETIC, kept.version).count()
    n_rejected = ctx.lakehouse.read(QUARANTINE, rejected.version).count()
    if n_kept + n_rejected != n_prompts:
        raise RuntimeError(f"{n_prompts} prompts != {n_kept} synthetic documents + {n_rejected} quarantined")
    # One row per reason: bounded.
    reasons = {
        r["reason"]: r["count"]
        for r in ctx.lakehouse.read(QUARANTINE, rejected.version).groupBy("reason").count().collect()
    }
    tokens = ctx.lakehouse.read(SYNTHETIC, kept.version).agg(F.sum("generated_tokens")).first()[0] or 0
    log.info(
        "genre generate: %d prompts = %d synthetic documents + %d quarantined %s",
        n_prompts,
        n_kept,
        n_rejected,
        reasons,
    )
    tr.log_dict(
        {"prompts": n_prompts, "synthetic": n_kept, "quarantined": n_rejected, "reasons": reasons}, "generate.json"
    )
    tr.write_card(
        SYNTHETIC,
        generator_facts(gen.model, gen.fine_tune, gen.generation)
        | {
            "generators": "one per genre" if gen.per_genre else "one genre-conditioned generator",
            "synthetic per real document": gen.synthetic_ratio,
        },
        {"quarantined": "empty outputs and copies of their prompt"},
        {"prompts": n_prompts, **reasons},
    )
    return {
        "prompts": float(n_prompts),
        "synthetic": float(n_kept),
        "quarantined": float(n_rejected),
        "generated_tokens": float(tokens),
    }


def run(ctx: JobContext) -> JobResult:
    """Run the four jobs in order (the ``genre-transfer`` pipeline without its ingest)."""
    return run_jobs(ctx, "genre", (topics_job, splits_job, generate_job, evaluate_job))


main = entry_point("genre", run, __doc__)

if __name__ == "__main__":
    main()
