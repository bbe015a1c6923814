"""Clustering one product's query subgraph (the query-reformulation paper, sections 3.3-3.5).

Pure Python on a small graph (a product's queries and their similarities), so Spark runs it per product
in ``applyInPandas``. Every choice is deterministic: vertices, seeds and candidate merges are visited in
sorted order, so the same subgraph always gives the same clusters.

1. Seeds: a vertex with clustering coefficient C3(i) = 2 T_i / (d_i (d_i - 1)) above ``c3_threshold``
   (0.33) seeds the cluster {i} ∪ N(i); any other vertex seeds the singleton {i}.
2. Merging, in rounds: all pairs of clusters with a common vertex, in order of intersection size (largest
   first; ties by overlap ratio |ci ∩ cj| / min size, then by members); a pair merges when |ci ∩ cj| >= θ·min(|ci|,
   |cj|) (θ = 0.4), and the round ends at the first
   pair that fails that test. A cluster merges at most once per round; rounds repeat until one merges
   nothing.
3. Pruning, after the last merge: a vertex leaves its cluster when its internal degree / external degree
   is below ``prune_ratio`` (0.5); a vertex with no external edge stays.
4. Only clusters with 2 <= size < ``max_size`` (10) are kept; duplicates are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Iterable


@dataclass(frozen=True)
class Cluster:
    """A kept cluster with the statistics that produced it."""

    members: tuple[str, ...]
    internal_edges: int
    pruned: int
    merge_rounds: int


def adjacency(vertices: Iterable[str], edges: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """Undirected adjacency sets; self-loops ignored, edge endpoints added as vertices."""
    adj: dict[str, set[str]] = {v: set() for v in vertices}
    for u, v in edges:
        if u == v:
            continue
        adj.setdefault(u, set()).add(v)
        adj.setdefault(v, set()).add(u)
    return adj


def clustering_coefficient(adj: dict[str, set[str]], vertex: str) -> float:
    """C3(i) = 2 T_i / (d_i (d_i - 1)): the share of neighbour pairs that are themselves linked (0 if d < 2)."""
    neighbours = adj[vertex]
    d = len(neighbours)
    if d < 2:
        return 0.0
    triangles = sum(1 for a, b in combinations(sorted(neighbours), 2) if b in adj[a])
    return 2.0 * triangles / (d * (d - 1))


def seed_clusters(adj: dict[str, set[str]], c3_threshold: float) -> list[frozenset[str]]:
    """Initial clusters: neighbourhoods of vertices with C3 > threshold, singletons otherwise (deduplicated)."""
    seeds: list[frozenset[str]] = []
    seen: set[frozenset[str]] = set()
    for vertex in sorted(adj):
        cluster = (
            frozenset({vertex} | adj[vertex])
            if clustering_coefficient(adj, vertex) > c3_threshold
            else frozenset({vertex})
        )
        if cluster not in seen:
            seen.add(cluster)
            seeds.append(cluster)
    return seeds


def _order(cluster: frozenset[str]) -> tuple:
    return (len(cluster), tuple(sorted(cluster)))


def merge_round(clusters: list[frozenset[str]], theta: float) -> tuple[list[frozenset[str]], int]:
    """One merging round; returns the new clusters and how many merges happened."""
    candidates = []
    for i, j in combinations(range(len(clusters)), 2):
        common = len(clusters[i] & clusters[j])
        if common:
            # Ties in intersection size go to the pair with the larger overlap ratio, then to member order.
            ratio = common / min(len(clusters[i]), len(clusters[j]))
            candidates.append((-common, -ratio, _order(clusters[i]), _order(clusters[j]), i, j))
    candidates.sort()
    used: set[int] = set()
    merged: list[frozenset[str]] = []
    for neg_common, _, _, _, i, j in candidates:
        if -neg_common < theta * min(len(clusters[i]), len(clusters[j])) - 1e-9:
            break  # the round ends at the first pair below the threshold
        if i in used or j in used:
            continue
        used.update((i, j))
        merged.append(clusters[i] | clusters[j])
    survivors = [c for k, c in enumerate(clusters) if k not in used] + merged
    unique = sorted(set(survivors), key=_order)
    return unique, len(merged)


def prune(cluster: frozenset[str], adj: dict[str, set[str]], ratio: float) -> frozenset[str]:
    """The cluster without vertices whose internal/external degree ratio is below ``ratio``."""
    kept = set()
    for vertex in cluster:
        internal = len(adj[vertex] & cluster)
        external = len(adj[vertex] - cluster)
        if external == 0 or internal / external >= ratio:
            kept.add(vertex)
    return frozenset(kept)


def cluster_subgraph(
    vertices: Iterable[str],
    edges: Iterable[tuple[str, str]],
    c3_threshold: float = 0.33,
    theta: float = 0.4,
    prune_ratio: float = 0.5,
    max_size: int = 10,
) -> list[Cluster]:
    """Cluster one subgraph; returns the kept clusters (2 <= size < ``max_size``) in a stable order."""
    adj = adjacency(vertices, edges)
    clusters = seed_clusters(adj, c3_threshold)
    rounds = 0
    while True:
        clusters, merges = merge_round(clusters, theta)
        if merges == 0:
            break
        rounds += 1
    out: dict[tuple[str, ...], Cluster] = {}
    for cluster in clusters:
        kept = prune(cluster, adj, prune_ratio)
        members = tuple(sorted(kept))
        if 2 <= len(members) < max_size and members not in out:
            internal = sum(1 for a, b in combinations(members, 2) if b in adj[a])
            out[members] = Cluster(members, internal, len(cluster) - len(kept), rounds)
    return [out[k] for k in sorted(out, key=lambda m: (len(m), m))]
