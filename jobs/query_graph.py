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

from common.job import JobContext, JobResult, hash_of, job_main

log = logging.getLogger(__name__)


def _config_hash(ctx: JobContext) -> str:
    return hash_of(asdict(ctx.cfg.query_graph))


def normalize(ctx: JobContext) -> JobResult:
    """``query-normalize``: normalise and threshold the interaction log; account for every input row."""
    from pyspark.sql import functions as F

    from common.query_graph import normalize_interactions

    result = JobResult(job="query-normalize")
    with ctx.tracked(result.job) as tr:
        result.run_id = tr.run_id
        interactions, version = ctx.read_table(tr, "interactions")
        kept, rejected = normalize_interactions(interactions, ctx.cfg.query_graph)
        inputs = {"interactions": str(version)}
        out = result.outputs
        out["query_interactions"] = ctx.write(tr, kept, "query_interactions", _config_hash(ctx), inputs)
        out["query_interactions_quarantine"] = ctx.write(tr, rejected, "query_interactions_quarantine",
                                                         _config_hash(ctx), inputs)
        n_in = interactions.count()
        n_kept = ctx.lakehouse.read("query_interactions", out["query_interactions"].version) \
            .agg(F.sum("n_rows")).first()[0] or 0
        n_rejected = ctx.lakehouse.read("query_interactions_quarantine", out["query_interactions_quarantine"].version) \
            .agg(F.sum("n_rows")).first()[0] or 0
        if n_in != n_kept + n_rejected:
            raise RuntimeError(f"query-normalize: {n_in} rows in != {n_kept} kept + {n_rejected} rejected")
        result.metrics = {"rows_in": float(n_in), "rows_kept": float(n_kept), "rows_quarantined": float(n_rejected)}
        tr.log_metrics(result.metrics)
    return result


def specificity_job(ctx: JobContext) -> JobResult:
    """``query-specificity``: click entropy and specificity of every clicked query."""
    from pyspark.sql import functions as F

    from common.query_graph import specificity

    result = JobResult(job="query-specificity")
    with ctx.tracked(result.job) as tr:
        result.run_id = tr.run_id
        interactions, version = ctx.read_table(tr, "query_interactions")
        spec = specificity(interactions, ctx.cfg.query_graph.click_interactions)
        out = ctx.write(tr, spec, "query_specificity", _config_hash(ctx), {"query_interactions": str(version)})
        result.outputs["query_specificity"] = out
        stats = ctx.lakehouse.read("query_specificity", out.version).agg(
            F.count("*").alias("queries"), F.max("entropy").alias("max_entropy"),
            F.avg("specificity").alias("mean_specificity")).first()
        result.metrics = {k: float(stats[k] or 0) for k in ("queries", "max_entropy", "mean_specificity")}
        tr.log_metrics(result.metrics)
    return result


def similarity_job(ctx: JobContext) -> JobResult:
    """``query-similarity``: PMI similarities through shared products, hub-capped, specificity-filtered."""
    from common.query_graph import product_queries, similarities

    cfg = ctx.cfg.query_graph
    result = JobResult(job="query-similarity")
    with ctx.tracked(result.job) as tr:
        result.run_id = tr.run_id
        interactions, v_int = ctx.read_table(tr, "query_interactions")
        spec, v_spec = ctx.read_table(tr, "query_specificity")
        inputs = {"query_interactions": str(v_int), "query_specificity": str(v_spec)}
        pq, caps = product_queries(interactions, cfg)
        out = result.outputs
        out["query_similarity"] = ctx.write(tr, similarities(pq, spec, cfg), "query_similarity", _config_hash(ctx),
                                            inputs)
        out["query_hub_caps"] = ctx.write(tr, caps, "query_hub_caps", _config_hash(ctx), inputs)
        result.metrics = {
            "similarities": float(ctx.lakehouse.read("query_similarity", out["query_similarity"].version).count()),
            "capped_products": float(ctx.lakehouse.read("query_hub_caps", out["query_hub_caps"].version).count()),
        }
        tr.log_metrics(result.metrics)
    return result


def clusters_job(ctx: JobContext) -> JobResult:
    """``query-clusters``: cluster each product subgraph; report the global similarity graph's structure."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from common.graph import connected_components, triangle_counts
    from common.query_graph import cluster_products, product_queries, subgraphs

    cfg = ctx.cfg.query_graph
    result = JobResult(job="query-clusters")
    with ctx.tracked(result.job) as tr:
        result.run_id = tr.run_id
        interactions, v_int = ctx.read_table(tr, "query_interactions")
        sims, v_sims = ctx.read_table(tr, "query_similarity")
        inputs = {"query_interactions": str(v_int), "query_similarity": str(v_sims)}
        pq, _ = product_queries(interactions, cfg)
        rows = subgraphs(pq, sims).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            sizes = rows.groupBy("product_id").agg(F.sum(F.col("v").isNull().cast("int")).alias("vertices"),
                                                   F.sum(F.col("v").isNotNull().cast("int")).alias("edges"))
            too_big = sizes.filter(F.col("vertices") > cfg.max_subgraph_vertices).withColumn(
                "reason", F.lit(f"subgraph larger than {cfg.max_subgraph_vertices} vertices"))
            clusters = cluster_products(rows.join(too_big.select("product_id"), "product_id", "left_anti"), cfg)
            out = result.outputs
            out["query_clusters"] = ctx.write(tr, clusters, "query_clusters", _config_hash(ctx), inputs)
            out["query_subgraph_skips"] = ctx.write(tr, too_big, "query_subgraph_skips", _config_hash(ctx), inputs)
        finally:
            rows.unpersist()
        edges = sims.select(F.col("query").alias("src"), F.col("similar_query").alias("dst"))
        components = connected_components(edges, use_graphframes=ctx.capabilities.graphframes)
        component_sizes = components.groupBy("component").agg(F.count("*").alias("size")) \
            .groupBy("size").agg(F.count("*").alias("components")).orderBy("size")
        coefficients = triangle_counts(edges, use_graphframes=ctx.capabilities.graphframes)
        out["query_graph_components"] = ctx.write(tr, component_sizes, "query_graph_components", _config_hash(ctx),
                                                  inputs)
        stats = coefficients.agg(F.avg("clustering").alias("c"), F.sum("triangles").alias("t")).first()
        kept = ctx.lakehouse.read("query_clusters", out["query_clusters"].version)
        summary = kept.agg(F.count("*").alias("clusters"), F.countDistinct("product_id").alias("products"),
                           F.avg("size").alias("mean_size")).first()
        result.metrics = {
            "clusters": float(summary["clusters"]), "products_with_clusters": float(summary["products"]),
            "mean_cluster_size": float(summary["mean_size"] or 0),
            "skipped_subgraphs": float(ctx.lakehouse.read("query_subgraph_skips", out["query_subgraph_skips"].version)
                                       .count()),
            "graph_mean_clustering_coefficient": float(stats["c"] or 0),
            "graph_triangles": float((stats["t"] or 0) / 3),
        }
        tr.log_metrics(result.metrics)
    return result


def pairs_job(ctx: JobContext) -> JobResult:
    """``query-pairs``: reformulation training pairs from the clusters, and the pipeline report."""
    from common.query_graph import reformulation_pairs

    result = JobResult(job="query-pairs")
    with ctx.tracked(result.job) as tr:
        result.run_id = tr.run_id
        clusters, v_cl = ctx.read_table(tr, "query_clusters")
        spec, v_spec = ctx.read_table(tr, "query_specificity")
        sims, v_sims = ctx.read_table(tr, "query_similarity")
        inputs = {"query_clusters": str(v_cl), "query_specificity": str(v_spec), "query_similarity": str(v_sims)}
        pairs = reformulation_pairs(clusters, spec, sims, ctx.cfg.query_graph)
        out = ctx.write(tr, pairs, "reformulation_pairs", _config_hash(ctx), inputs)
        result.outputs["reformulation_pairs"] = out
        written = ctx.lakehouse.read("reformulation_pairs", out.version)
        result.metrics = {"pairs": float(written.count()),
                          "distinct_pairs": float(written.select("source_query", "target_query").distinct().count())}
        tr.log_metrics(result.metrics)
        report(ctx, tr, spec, clusters, written)
    return result


def report(ctx: JobContext, tr, spec, clusters, pairs) -> None:
    """Specificity histogram, cluster-size histogram (PNG + text) and the top clusters as text."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pyspark.sql import functions as F

    folder = Path(ctx.reports_dir("query_graph"))
    # Histograms are aggregated in Spark: 20 bins and at most max_cluster_size sizes reach the driver.
    bins = spec.select(F.least(F.floor(F.col("specificity") * 20), F.lit(19)).alias("bin")).groupBy("bin").count() \
        .orderBy("bin").toPandas()
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
        lines.append(f"- {row.cluster_id} ({row.size} queries, {row.internal_edges} edges): "
                     + " | ".join(row.members))
    lines += ["", "## Cluster sizes", "", sizes.to_string(index=False), "", "## Specificity histogram (20 bins)", "",
              bins.to_string(index=False), "", "![histograms](histograms.png)", ""]
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
    """All five query-graph jobs in order (as one job); returns the last job's result."""
    result = JobResult(job="query-graph")
    for fn in JOBS.values():
        step = fn(ctx)
        result.outputs.update(step.outputs)
        result.metrics.update({f"{step.job}.{k}": v for k, v in step.metrics.items()})
    return result


def main(argv: Optional[Sequence[str]] = None) -> JobResult:
    """CLI / spark-submit entry: ``spark-submit jobs/query_graph.py [JOB] [--conf FILE] [--set k=v ...]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name = argv.pop(0) if argv and argv[0] in JOBS else "query-graph"
    return job_main(name, JOBS.get(name, run), argv, description=__doc__.splitlines()[0])


if __name__ == "__main__":
    main(sys.argv[1:])
