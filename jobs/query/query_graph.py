"""The query-graph jobs (query-reformulation paper, section 3): one module, five thin jobs.

* ``query-normalize`` reads ``interactions``; writes ``query_interactions`` (NFKC, case-folded queries,
  counts aggregated per query, product and interaction, activity thresholds applied) and
  ``query_interactions_quarantine`` (``reason``: empty after normalisation, below threshold).
* ``query-specificity`` reads ``query_interactions``; writes ``query_specificity`` (click entropy H(q),
  specificity s(q) = 1 - H(q)/max H).
* ``query-similarity`` reads ``query_interactions``, ``query_specificity``; writes ``query_similarity``
  (top-k PMI/NPMI similarities within the specificity window) and ``query_hub_caps`` (hub products capped).
* ``query-clusters`` reads ``query_interactions``, ``query_similarity``; writes ``query_clusters`` (each
  product subgraph clustered in ``applyInPandas``), ``query_subgraph_skips`` (oversized subgraphs) and
  ``query_graph_components`` (component sizes and clustering coefficients of the similarity graph).
* ``query-pairs`` reads ``query_clusters``, ``query_specificity``, ``query_similarity``; writes
  ``reformulation_pairs`` and the report (specificity and cluster-size histograms, top clusters).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional, Sequence

from common.config import load_config
from common.platform.runner.entry import job_main
from common.platform.runner.job import JobContext, JobResult, JobRun, hash_of, job, run_jobs

log = logging.getLogger(__name__)


def _config_hash(ctx: JobContext) -> str:
    return hash_of(asdict(ctx.cfg.query_graph))


@job("query-normalize")
def normalize(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``query-normalize``: normalise and threshold the interaction log; account for every input row."""
    from pyspark.sql import functions as F

    from common.querygraph.normalization import normalize_interactions

    interactions = tr.read("interactions")
    if tr.all_written(["query_interactions", "query_interactions_quarantine"], _config_hash(ctx)):
        return None
    kept, rejected = normalize_interactions(interactions, ctx.cfg.query_graph)
    tr.write(kept, "query_interactions", _config_hash(ctx))
    tr.write(rejected, "query_interactions_quarantine", _config_hash(ctx))
    n_in = interactions.count()
    n_kept = tr.written("query_interactions").agg(F.sum("n_rows")).first()[0] or 0
    n_rejected = tr.written("query_interactions_quarantine").agg(F.sum("n_rows")).first()[0] or 0
    if n_in != n_kept + n_rejected:
        raise RuntimeError(f"query-normalize: {n_in} rows in != {n_kept} kept + {n_rejected} rejected")
    return {"rows_in": n_in, "rows_kept": n_kept, "rows_quarantined": n_rejected}


@job("query-specificity")
def specificity_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``query-specificity``: click entropy and specificity of every clicked query."""
    from pyspark.sql import functions as F

    from common.querygraph.specificity import specificity

    interactions = tr.read("query_interactions")
    if tr.already_written("query_specificity", _config_hash(ctx)):
        return None
    spec = specificity(interactions, ctx.cfg.query_graph.click_interactions)
    tr.write(spec, "query_specificity", _config_hash(ctx))
    stats = (
        tr.written("query_specificity")
        .agg(
            F.count("*").alias("queries"),
            F.max("entropy").alias("max_entropy"),
            F.avg("specificity").alias("mean_specificity"),
        )
        .first()
    )
    return {k: float(stats[k] or 0) for k in ("queries", "max_entropy", "mean_specificity")}


@job("query-similarity")
def similarity_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``query-similarity``: PMI similarities through shared products, hub-capped, specificity-filtered."""
    from common.querygraph.similarity import product_queries, similarities

    cfg = ctx.cfg.query_graph
    interactions, spec = tr.read("query_interactions"), tr.read("query_specificity")
    if tr.all_written(["query_similarity", "query_hub_caps"], _config_hash(ctx)):
        return None
    pq, caps = product_queries(interactions, cfg)
    tr.write(similarities(pq, spec, cfg), "query_similarity", _config_hash(ctx))
    tr.write(caps, "query_hub_caps", _config_hash(ctx))
    return {
        "similarities": tr.written("query_similarity").count(),
        "capped_products": tr.written("query_hub_caps").count(),
    }


@job("query-clusters")
def clusters_job(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """``query-clusters``: cluster each product subgraph; report the global similarity graph's structure."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from common.algorithms.graph import connected_components, triangle_counts
    from common.querygraph.clusters import cluster_products, subgraphs
    from common.querygraph.similarity import product_queries

    cfg = ctx.cfg.query_graph
    interactions, sims = tr.read("query_interactions"), tr.read("query_similarity")
    # A rerun on unchanged inputs skips the clustering and the graph statistics (triangle counts): seconds
    # of Spark jobs for metrics the first run already logged.
    if tr.all_written(["query_clusters", "query_subgraph_skips", "query_graph_components"], _config_hash(ctx)):
        return None
    pq, _ = product_queries(interactions, cfg)
    rows = subgraphs(pq, sims).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        sizes = rows.groupBy("product_id").agg(
            F.sum(F.col("v").isNull().cast("int")).alias("vertices"),
            F.sum(F.col("v").isNotNull().cast("int")).alias("edges"),
        )
        too_big = sizes.filter(F.col("vertices") > cfg.max_subgraph_vertices).withColumn(
            "reason", F.lit(f"subgraph larger than {cfg.max_subgraph_vertices} vertices")
        )
        clusters = cluster_products(rows.join(too_big.select("product_id"), "product_id", "left_anti"), cfg)
        tr.write(clusters, "query_clusters", _config_hash(ctx))
        tr.write(too_big, "query_subgraph_skips", _config_hash(ctx))
    finally:
        rows.unpersist()
    edges = sims.select(F.col("query").alias("src"), F.col("similar_query").alias("dst"))
    components = connected_components(edges, use_graphframes=ctx.capabilities.graphframes)
    component_sizes = (
        components.groupBy("component")
        .agg(F.count("*").alias("size"))
        .groupBy("size")
        .agg(F.count("*").alias("components"))
        .orderBy("size")
    )
    coefficients = triangle_counts(edges, use_graphframes=ctx.capabilities.graphframes)
    tr.write(component_sizes, "query_graph_components", _config_hash(ctx))
    stats = coefficients.agg(F.avg("clustering").alias("c"), F.sum("triangles").alias("t")).first()
    summary = (
        tr.written("query_clusters")
        .agg(
            F.count("*").alias("clusters"),
            F.countDistinct("product_id").alias("products"),
            F.avg("size").alias("mean_size"),
        )
        .first()
    )
    return {
        "clusters": summary["clusters"],
        "products_with_clusters": summary["products"],
        "mean_cluster_size": summary["mean_size"] or 0,
        "skipped_subgraphs": tr.written("query_subgraph_skips").count(),
        "graph_mean_clustering_coefficient": stats["c"] or 0,
        "graph_triangles": (stats["t"] or 0) / 3,
    }


@job("query-pairs")
def pairs_job(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """``query-pairs``: reformulation training pairs from the clusters, and the pipeline report."""
    from common.querygraph.clusters import reformulation_pairs

    clusters, spec, sims = tr.read("query_clusters"), tr.read("query_specificity"), tr.read("query_similarity")
    tr.write(reformulation_pairs(clusters, spec, sims, ctx.cfg.query_graph), "reformulation_pairs", _config_hash(ctx))
    written = tr.written("reformulation_pairs")
    report(ctx, tr, spec, clusters, written)
    return {
        "pairs": written.count(),
        "distinct_pairs": written.select("source_query", "target_query").distinct().count(),
    }


def report(ctx: JobContext, tr, spec, clusters, pairs) -> None:
    """Specificity histogram, cluster-size histogram (PNG + text) and the top clusters as text."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pyspark.sql import functions as F

    folder = Path(ctx.reports_dir("query_graph"))
    # Histograms are aggregated in Spark: 20 bins and at most max_cluster_size sizes reach the driver.
    bins = (
        spec.select(F.least(F.floor(F.col("specificity") * 20), F.lit(19)).alias("bin"))
        .groupBy("bin")
        .count()
        .orderBy("bin")
        .toPandas()
    )
    sizes = clusters.groupBy("size").count().orderBy("size").toPandas()
    top = clusters.orderBy(F.col("internal_edges").desc(), F.col("size").desc(), "cluster_id").limit(15).toPandas()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.bar(bins["bin"] / 20 + 0.025, bins["count"], width=0.05)
    ax1.set_xlabel("specificity s(q)")
    ax1.set_ylabel("queries")
    ax1.set_title("Query specificity")
    ax2.bar(sizes["size"], sizes["count"])
    ax2.set_xlabel("cluster size")
    ax2.set_ylabel("clusters")
    ax2.set_title("Cluster sizes")
    fig.tight_layout()
    chart = folder / "histograms.png"
    fig.savefig(chart, dpi=110)
    plt.close(fig)
    lines = ["# Query graph report", "", "## Top clusters (by internal edges)", ""]
    for row in top.itertuples():
        lines.append(
            f"- {row.cluster_id} ({row.size} queries, {row.internal_edges} edges): " + " | ".join(row.members)
        )
    lines += [
        "",
        "## Cluster sizes",
        "",
        sizes.to_string(index=False),
        "",
        "## Specificity histogram (20 bins)",
        "",
        bins.to_string(index=False),
        "",
        "![histograms](histograms.png)",
        "",
    ]
    (folder / "report.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines[:20]))
    tr.log_artifact(str(chart), "report")
    tr.log_artifact(str(folder / "report.md"), "report")


JOBS: dict[str, Callable[[JobContext], JobResult]] = {
    "query-normalize": normalize,
    "query-specificity": specificity_job,
    "query-similarity": similarity_job,
    "query-clusters": clusters_job,
    "query-pairs": pairs_job,
}


def run(ctx: JobContext) -> JobResult:
    """All five query-graph jobs in order (as one job)."""
    return run_jobs(ctx, "query-graph", tuple(JOBS.values()))


def main(argv: Optional[Sequence[str]] = None) -> JobResult:
    """CLI / spark-submit entry: ``spark-submit jobs/query/query_graph.py [JOB] [--conf FILE] [--set k=v ...]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name = argv.pop(0) if argv and argv[0] in JOBS else "query-graph"
    return job_main(name, JOBS.get(name, run), argv, description=__doc__.splitlines()[0], load=load_config)


if __name__ == "__main__":
    main()
