"""Graph algorithms as DataFrame joins, with GraphFrames used instead where its jar is on the classpath.

Vertices are string ids; edges are undirected ``(src, dst)`` pairs. Nothing is collected: each
iteration is a join and an aggregate, and only a changed-vertex count reaches the driver.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class ConvergenceError(RuntimeError):
    """An iterative algorithm did not converge within its iteration budget."""


def undirected(edges: "DataFrame", src: str = "src", dst: str = "dst") -> "DataFrame":
    """Both directions of every edge, self-loops and duplicates removed: columns ``src``, ``dst``."""
    from pyspark.sql import functions as F

    e = edges.select(F.col(src).alias("src"), F.col(dst).alias("dst"))
    return (
        e.unionByName(e.select(F.col("dst").alias("src"), F.col("src").alias("dst")))
        .filter(F.col("src") != F.col("dst"))
        .distinct()
    )


def connected_components(
    edges: "DataFrame",
    vertices: Optional["DataFrame"] = None,
    max_iterations: int = 100,
    use_graphframes: bool = False,
) -> "DataFrame":
    """Connected components: returns ``(id, component)`` where component is the smallest id in it.

    ``edges``: ``src``, ``dst`` columns. ``vertices``: optional ``id`` column, for isolated vertices
    (each its own component). Min-label propagation with pointer jumping: each round every vertex takes
    the smallest label among itself and its neighbours, then its label's own label; it stops when no
    label changes, after about log2(diameter) rounds (raises :class:`ConvergenceError` past
    ``max_iterations``). ``use_graphframes`` delegates to ``GraphFrame.connectedComponents``.
    """
    from pyspark.sql import functions as F

    if use_graphframes:
        return _graphframes_components(edges, vertices)
    und = undirected(edges).persist()
    ids = und.select(F.col("src").alias("id"))
    if vertices is not None:
        ids = ids.unionByName(vertices.select("id"))
    labels = ids.distinct().select("id", F.col("id").alias("component")).persist()
    try:
        for iteration in range(1, max_iterations + 1):
            neighbour_min = (
                und.join(labels.withColumnRenamed("id", "src"), "src")
                .groupBy(F.col("dst").alias("id"))
                .agg(F.min("component").alias("candidate"))
            )
            propagated = labels.join(neighbour_min, "id", "left").select(
                "id",
                F.col("component").alias("old"),
                F.least(F.col("component"), F.coalesce(F.col("candidate"), F.col("component"))).alias("label"),
            )
            # Pointer jumping: a vertex also takes its label's label, so rounds grow with log(diameter).
            jumped = propagated.join(
                propagated.select(F.col("id").alias("label"), F.col("label").alias("jump")), "label", "left"
            )
            step = (
                jumped.select("id", F.least("label", F.coalesce("jump", "label")).alias("component"), "old")
                .withColumn("improved", F.col("component") < F.col("old"))
                .drop("old")
            )
            # The self-join doubles the plan each round unless its lineage is cut every round.
            step = step.localCheckpoint()
            changed = step.filter("improved").count()
            labels.unpersist()
            labels = step.select("id", "component")
            log.debug("connected components: round %d, %d labels changed", iteration, changed)
            if changed == 0:
                return labels
        raise ConvergenceError(f"connected components did not converge in {max_iterations} rounds")
    finally:
        und.unpersist()


def _graphframes_components(edges: "DataFrame", vertices: Optional["DataFrame"]) -> "DataFrame":
    from graphframes import GraphFrame
    from pyspark.sql import functions as F

    v = undirected(edges).select(F.col("src").alias("id"))
    if vertices is not None:
        v = v.unionByName(vertices.select("id"))
    v = v.distinct()
    result = GraphFrame(v, edges.select("src", "dst")).connectedComponents()
    # GraphFrames labels components by a long; map each to its smallest member id for stable names.
    smallest = result.groupBy("component").agg(F.min("id").alias("first"))
    return result.join(smallest, "component").select("id", F.col("first").alias("component"))


def triangle_counts(edges: "DataFrame", use_graphframes: bool = False) -> "DataFrame":
    """Per vertex: ``id, degree, triangles, clustering`` (C3 = 2T / (d (d - 1)), 0 when d < 2).

    Edges are oriented from the lower (degree, id) end to the higher one, so each triangle is found
    once, from its lowest vertex, and hubs enumerate few wedges (O(m^1.5) in total).
    ``use_graphframes`` takes the triangle counts from ``GraphFrame.triangleCount``.
    """
    from pyspark.sql import functions as F

    und = undirected(edges)
    degree = und.groupBy(F.col("src").alias("id")).agg(F.count("*").alias("degree"))
    if use_graphframes:
        from graphframes import GraphFrame

        counts = GraphFrame(degree.select("id"), und).triangleCount().select("id", F.col("count").alias("triangles"))
    else:
        ranked = und.join(degree.select(F.col("id").alias("src"), F.col("degree").alias("ds")), "src").join(
            degree.select(F.col("id").alias("dst"), F.col("degree").alias("dd")), "dst"
        )
        lower_first = (F.col("ds") < F.col("dd")) | ((F.col("ds") == F.col("dd")) & (F.col("src") < F.col("dst")))
        oriented = ranked.filter(lower_first).select(F.col("src").alias("a"), F.col("dst").alias("b"))
        wedges = oriented.join(oriented.select("a", F.col("b").alias("c")), "a").filter(F.col("b") != F.col("c"))
        closed = wedges.join(oriented.select(F.col("a").alias("b"), F.col("b").alias("c")), ["b", "c"])
        # Both orders (b, c) and (c, b) of a wedge exist, but only the one along the closing edge's
        # orientation joins: each triangle is found exactly once.
        corners = closed.select(F.explode(F.array("a", "b", "c")).alias("id"))
        counts = corners.groupBy("id").agg(F.count("*").alias("triangles"))
    return (
        degree.join(counts, "id", "left")
        .fillna(0, ["triangles"])
        .withColumn(
            "clustering",
            F.when(
                F.col("degree") >= 2, 2.0 * F.col("triangles") / (F.col("degree") * (F.col("degree") - 1))
            ).otherwise(F.lit(0.0)),
        )
    )
