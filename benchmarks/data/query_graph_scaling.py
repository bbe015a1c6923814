"""Benchmark: the query-graph pipeline on synthetic Zipf-skewed logs, Spark (local[2]) vs pandas + networkx.

Logs of N interactions: products drawn log-uniformly (Zipf-like popularity), each query one of ~20
variants of the product's intent (variant popularity Zipf-like too), 20% broad queries shared by 50
intents, 20% purchases. Spark runs normalise -> specificity -> similarity -> subgraph clustering -> pairs
(each stage materialised); the baseline does the same steps with pandas and networkx in one process.
Each run has a 10-minute budget. Prints wall time and peak memory per size, the growth exponents, and
where Spark overtakes pandas.
Run: .venv/bin/python benchmarks/data/query_graph_scaling.py [--budget S] [--only spark|pandas] [N ...]
     (default 1e5 1e6 1e7, budget 600 s; the budget covers building the synthetic log too)
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time

import numpy as np
import pandas as pd
from budget import growth_exponent, run_in_budget

BUDGET_S = 600


def synthetic_log(n: int, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n_products = max(100, n // 20)
    product = np.minimum((np.exp(rng.random(n) * math.log(n_products))).astype(np.int64) - 1, n_products - 1)
    intent = product // 5
    variant = np.minimum(np.exp(rng.random(n) * math.log(20)).astype(np.int64), 19)
    broad = rng.random(n) < 0.2
    query = np.where(
        broad,
        "broad " + (intent // 50).astype(str) + " v" + (variant % 5).astype(str),
        "item " + intent.astype(str) + " v" + variant.astype(str),
    )
    interaction = np.where(rng.random(n) < 0.2, "purchase", "click")
    return pd.DataFrame(
        {
            "query": query,
            "product_id": "p" + product.astype(str),
            "interaction": interaction,
            "count": np.ones(n, dtype=np.int64),
        }
    )


def run_spark(n: int, out: dict) -> None:
    from common.platform.compute.session import get_spark
    from common.platform.config import SparkConfig
    from common.querygraph.clusters import cluster_products, reformulation_pairs, subgraphs
    from common.querygraph.config import QueryGraphConfig
    from common.querygraph.normalization import normalize_interactions
    from common.querygraph.similarity import product_queries, similarities
    from common.querygraph.specificity import specificity

    spark = get_spark(SparkConfig(master="local[2]", shuffle_partitions=8, driver_memory="6g"))
    cfg = QueryGraphConfig()
    folder = tempfile.mkdtemp(prefix="bench-qg-")
    start = time.perf_counter()
    spark.createDataFrame(synthetic_log(n)).write.parquet(f"{folder}/log")
    t0 = time.perf_counter()
    log = spark.read.parquet(f"{folder}/log")
    kept, _ = normalize_interactions(log, cfg)
    kept.write.parquet(f"{folder}/kept")
    kept = spark.read.parquet(f"{folder}/kept")
    specificity(kept, cfg.click_interactions).write.parquet(f"{folder}/spec")
    spec = spark.read.parquet(f"{folder}/spec")
    pq, _ = product_queries(kept, cfg)
    similarities(pq, spec, cfg).write.parquet(f"{folder}/sims")
    sims = spark.read.parquet(f"{folder}/sims")
    cluster_products(subgraphs(pq, sims), cfg).write.parquet(f"{folder}/clusters")
    clusters = spark.read.parquet(f"{folder}/clusters")
    reformulation_pairs(clusters, spec, sims, cfg).write.parquet(f"{folder}/pairs")
    out["seconds"] = time.perf_counter() - t0
    out["pairs"] = spark.read.parquet(f"{folder}/pairs").count()
    out["setup"] = t0 - start


def run_pandas(n: int, out: dict) -> None:
    import networkx as nx

    from common.querygraph.normalization import normalize_query
    from common.querygraph.subgraph import merge_round, prune

    log = synthetic_log(n)
    t0 = time.perf_counter()
    log["query"] = log["query"].map(normalize_query)
    agg = log.groupby(["query", "product_id", "interaction"], as_index=False)["count"].sum()
    clicks = agg[agg.interaction == "click"].groupby(["query", "product_id"])["count"].sum().reset_index()
    clicks["clogc"] = clicks["count"] * np.log(clicks["count"])
    per_q = clicks.groupby("query").agg(C=("count", "sum"), s=("clogc", "sum"))
    per_q["H"] = np.log(per_q.C) - per_q.s / per_q.C
    per_q["spec"] = 1 - per_q.H / per_q.H.max() if per_q.H.max() > 0 else 1.0
    pq = agg[agg.interaction == "purchase"].groupby(["product_id", "query"])["count"].sum().reset_index()
    pq = (
        pq.sort_values(["product_id", "count", "query"], ascending=[True, False, True])
        .groupby("product_id")
        .head(1000)
    )
    N = pq.product_id.nunique()
    nq = pq.groupby("query").size()
    pairs = pq.merge(pq, on="product_id")
    pairs = pairs[pairs.query_x != pairs.query_y].groupby(["query_x", "query_y"]).size().reset_index(name="c")
    pairs["pmi"] = np.log(pairs.c * N / (nq.loc[pairs.query_x].values * nq.loc[pairs.query_y].values))
    pairs = pairs.sort_values(["query_x", "pmi", "query_y"], ascending=[True, False, True]).groupby("query_x").head(6)
    sx, sy = per_q.spec.reindex(pairs.query_x).values, per_q.spec.reindex(pairs.query_y).values
    sims = pairs[np.abs(sy - sx) <= 0.1 * np.abs(sx) + 1e-12]
    graph = nx.Graph()
    graph.add_edges_from(zip(sims.query_x, sims.query_y))
    n_pairs = 0
    for _, group in pq.groupby("product_id"):
        vertices = set(group["query"])
        vertices |= set(sims[sims.query_x.isin(vertices)].query_y)
        sub = graph.subgraph(vertices)
        adj = {v: set(sub.neighbors(v)) if v in sub else set() for v in vertices}
        c3 = nx.clustering(sub)
        clusters = sorted(
            {frozenset({v} | adj[v]) if c3.get(v, 0) > 0.33 else frozenset({v}) for v in vertices},
            key=lambda c: (len(c), sorted(c)),
        )
        while True:
            clusters, merges = merge_round(clusters, 0.4)
            if not merges:
                break
        for c in clusters:
            kept = prune(c, adj, 0.5)
            if 2 <= len(kept) < 10:
                s = per_q.spec.reindex(sorted(kept)).values
                close = sum(1 for a in s for b in s if a is not b and abs(b - a) <= 0.1 * abs(a) + 1e-12)
                n_pairs += int(close - len(s))
    out["seconds"] = time.perf_counter() - t0
    out["pairs"] = n_pairs


def measure(fn, n: int) -> tuple[float | None, float, object]:
    out, peak, timed_out = run_in_budget(fn, (n,), BUDGET_S)
    if timed_out:
        return None, peak, "timeout"
    return out.get("seconds"), peak, out.get("pairs")


def main(sizes: list[int], only: str | None = None) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    print(f"{'N':>10} {'spark s':>9} {'spark GiB':>10} {'pandas s':>9} {'pandas GiB':>11} {'pandas/spark':>13} pairs")
    rows = []
    for n in sizes:
        s_time, s_mem, s_pairs = measure(run_spark, n) if only != "pandas" else (None, 0.0, "skipped")
        p_time, p_mem, p_pairs = measure(run_pandas, n) if only != "spark" else (None, 0.0, "skipped")
        ratio = f"{p_time / s_time:.2f}" if s_time and p_time else "-"

        def fmt(t):
            return f"{t:.1f}" if t else "timeout"

        print(
            f"{n:>10} {fmt(s_time):>9} {s_mem:>10.2f} {fmt(p_time):>9} {p_mem:>11.2f} {ratio:>13} "
            f"{s_pairs} / {p_pairs}",
            flush=True,
        )
        rows.append((n, s_time, p_time))
    for label, idx in (("spark", 1), ("pandas", 2)):
        done = [(r[0], r[idx]) for r in rows if r[idx]]
        if len(done) >= 2:
            print(
                f"{label} growth exponent (wall time vs N, {done[0][0]:.0e}..{done[-1][0]:.0e}): "
                f"{growth_exponent(done[0], done[-1]):.2f}"
            )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=float, default=[1e5, 1e6, 1e7])
    parser.add_argument("--budget", type=int, default=BUDGET_S, help="seconds per run (default 600)")
    parser.add_argument("--only", choices=["spark", "pandas"])
    args = parser.parse_args()
    BUDGET_S = args.budget
    main([int(n) for n in args.sizes], args.only)
