"""What the query-reformulation jobs (:mod:`jobs.query.query_reformulation`, :mod:`jobs.query.query_matcher`) share:
the keys of the reformulation generator and of its generation, the interaction tables they read, and the distinct
queries they reformulate."""

from __future__ import annotations

from dataclasses import asdict

from common.platform.runner.job import JobContext, JobRun, hash_of, when_set


def generator_hash(ctx: JobContext) -> str:
    """The reformulation generator's key: its model, its fine-tune and the seed."""
    cfg = ctx.cfg.query_reformulation
    return hash_of(asdict(cfg.model), asdict(cfg.fine_tune), ctx.cfg.seed)


def reformulations_hash(ctx: JobContext) -> str:
    """The key of the generator's reformulations: the generator's, its decoding and the sources budget."""
    cfg = ctx.cfg.query_reformulation
    return hash_of(generator_hash(ctx), asdict(cfg.generation), *when_set(cfg.sources))


def queries_to_reformulate(ctx: JobContext, tuples):
    """The distinct queries of ``tuples`` to reformulate: all of them, or ``query_reformulation.sources`` of them
    (a seeded sample, the same on every run)."""
    from common.data.sampling import seeded_first
    from common.querygraph.reformulation import distinct_queries

    queries, n = distinct_queries(tuples), ctx.cfg.query_reformulation.sources
    return queries if n is None else seeded_first(queries, n, ctx.cfg.seed, ["query"])


def interaction_tables(tr: JobRun):
    """(collected tuples, local tuples over the threshold); their versions become ``tr.inputs``."""
    from common.querygraph.reformulation import collected_tuples

    kept, quarantine = tr.read("query_interactions"), tr.read("query_interactions_quarantine")
    return collected_tuples(kept, quarantine), kept
