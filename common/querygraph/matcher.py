"""A query -> product matcher for the downstream check of query reformulation.

fastText with hierarchical softmax over product ids: a cheap extreme multi-label classifier (one line per
(query, product, interaction) tuple). Queries are split by a seeded hash, so a held-out query never
trains the matcher; evaluation asks for the top k products of every held-out query and compares them
with the products that query led to in the original log: precision@k, recall@k and hit-rate@k.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from common.models.classifier_config import FastTextConfig
from common.querygraph.config import MatcherConfig

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame

    from common.models.classifiers.hft import HFTModel

_BUCKETS = 1_000_000


def is_holdout(query: "Column", fraction: float, seed: int) -> "Column":
    """Column: the query belongs to the held-out share ``fraction`` (a seeded hash of the query text)."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(F.lit(seed), query), F.lit(_BUCKETS)) < F.lit(int(round(fraction * _BUCKETS)))


def fasttext_config(cfg: MatcherConfig) -> FastTextConfig:
    """The matcher's fastText settings: hierarchical softmax, character n-grams for misspelt queries."""
    return FastTextConfig(
        epoch=cfg.epoch,
        lr=cfg.lr,
        word_ngrams=cfg.word_ngrams,
        dim=cfg.dim,
        min_count=1,
        bucket=cfg.bucket,
        loss="hs",
        minn=cfg.minn,
        maxn=cfg.maxn,
        thread=1,
    )


def relevant_products(tuples: "DataFrame") -> "DataFrame":
    """``query, relevant`` (the sorted products each query led to)."""
    from pyspark.sql import functions as F

    return tuples.groupBy("query").agg(F.array_sort(F.collect_set("product_id")).alias("relevant"))


def ranking_metrics(predicted: Sequence[str], relevant: Sequence[str], ks: Sequence[int]) -> dict[str, float]:
    """precision@k, recall@k and hit@k of one ranked prediction list against the relevant set."""
    rel = set(relevant)
    out = {}
    for k in ks:
        hits = len(set(predicted[:k]) & rel)
        out[f"precision_at_{k}"] = hits / k
        out[f"recall_at_{k}"] = hits / len(rel) if rel else 0.0
        out[f"hit_at_{k}"] = 1.0 if hits else 0.0
    return out


def evaluate(queries: "DataFrame", model: "HFTModel", ks: Sequence[int]) -> "DataFrame":
    """Per held-out query (``query, relevant``) the ranking metrics of the matcher's top-max(k) products.

    Runs in ``mapInPandas``; each Python worker loads the fastText model once.
    """
    from pyspark.sql import types as T

    from common.data.text import normalize_title
    from common.models.classifiers.hft import load_levels

    ks = sorted(set(ks))
    names = [f"{m}_at_{k}" for k in ks for m in ("precision", "recall", "hit")]
    schema = T.StructType([T.StructField("query", T.StringType())] + [T.StructField(n, T.DoubleType()) for n in names])

    def score(batches: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd

        models, maps = load_levels(model)
        for batch in batches:
            labels, _ = models[0].predict([normalize_title(q) for q in batch["query"]], k=max(ks))
            rows = []
            for query, relevant, top in zip(batch["query"], batch["relevant"], labels):
                metrics = ranking_metrics([maps[0][t] for t in top], list(relevant), ks)
                rows.append({"query": query, **metrics})
            yield pd.DataFrame(rows, columns=["query"] + names)

    return queries.select("query", "relevant").mapInPandas(score, schema)
