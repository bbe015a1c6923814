"""Per-product subgraph clustering: hand-computed rules and hypothesis properties (pure Python)."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.querygraph.subgraph import (
    adjacency,
    cluster_subgraph,
    clustering_coefficient,
    merge_round,
    prune,
    seed_clusters,
)


def test_c3_on_a_triangle_a_star_and_a_clique():
    triangle = adjacency("abc", [("a", "b"), ("b", "c"), ("a", "c")])
    assert [clustering_coefficient(triangle, v) for v in "abc"] == [1.0, 1.0, 1.0]
    star = adjacency("hxyz", [("h", "x"), ("h", "y"), ("h", "z")])
    assert clustering_coefficient(star, "h") == 0.0 and clustering_coefficient(star, "x") == 0.0  # d = 1
    clique = adjacency("abcde", list(combinations("abcde", 2)))
    assert clustering_coefficient(clique, "a") == 1.0
    # 4 neighbours (6 pairs), 2 of them linked: 2*2 / (4*3) = 1/3, which is NOT above 0.33... (0.333 > 0.33)
    almost = adjacency("habcd", [("h", x) for x in "abcd"] + [("a", "b"), ("c", "d")])
    assert clustering_coefficient(almost, "h") == pytest.approx(1 / 3)


def test_seeds_take_neighbourhoods_only_above_the_threshold():
    # h: 4 neighbours, 1 linked pair -> C3 = 2/12 = 0.167 <= 0.33: singleton. a, b: C3 = 1 (triangle h-a-b).
    adj = adjacency("habcd", [("h", x) for x in "abcd"] + [("a", "b")])
    seeds = seed_clusters(adj, 0.33)
    assert frozenset("h") in seeds and frozenset("hab") in seeds
    assert frozenset("c") in seeds and frozenset("d") in seeds
    assert len(seeds) == 4  # a and b give the same neighbourhood {a, b, h}: deduplicated


def test_merge_rule_exactly_at_theta():
    # |ci ∩ cj| = 2 = 0.4 * min(5, 5): merges (the test is >=).
    a, b = frozenset("abcde"), frozenset("devwx")
    merged, n = merge_round([a, b], 0.4)
    assert n == 1 and merged == [a | b]
    # One vertex fewer in common: 1 < 0.4 * 5 = 2: the round ends without merging.
    c = frozenset("evwxy")
    assert merge_round([a, c], 0.4) == (sorted([a, c], key=lambda s: (len(s), tuple(sorted(s)))), 0)


def test_round_stops_at_the_first_pair_below_theta():
    big1, big2 = frozenset("abcdefghij"), frozenset("abcdklmnop")  # 4 common >= 0.4 * 10: merges
    fail1, fail2 = frozenset("ABCDEFGHIJ"), frozenset("ABKLMNOPQR")  # 2 common < 0.4 * 10: fails
    small1, small2 = frozenset("xy"), frozenset("yz")  # 1 common >= 0.4 * 2 would merge, but comes later
    clusters, merges = merge_round([big1, big2, fail1, fail2, small1, small2], 0.4)
    assert merges == 1 and big1 | big2 in clusters
    assert {fail1, fail2, small1, small2} <= set(clusters)


def test_pruning_at_the_half_ratio():
    # v has 1 edge inside {a, b, v} and 2 outside: 1/2 = 0.5 -> kept. w: 1 inside, 3 outside -> pruned.
    adj = adjacency(
        "abvwxyzq", [("a", "b"), ("a", "v"), ("v", "x"), ("v", "y"), ("b", "w"), ("w", "z"), ("w", "q"), ("w", "x")]
    )
    assert prune(frozenset("abv"), adj, 0.5) == frozenset("abv")
    assert prune(frozenset("abw"), adj, 0.5) == frozenset("ab")


def test_only_clusters_below_ten_vertices_are_kept():
    nine = list(combinations("abcdefghi", 2))  # a 9-clique: one cluster of 9
    assert [len(c.members) for c in cluster_subgraph("abcdefghi", nine)] == [9]
    ten = list(combinations("abcdefghij", 2))  # a 10-clique: its only cluster is too big
    assert cluster_subgraph("abcdefghij", ten) == []


def test_two_triangles_joined_through_a_middle_vertex_give_two_overlapping_clusters():
    # c and x have C3 = 1/3 > 0.33, so their seeds take in m; m (C3 = 0) is a singleton seed. Round 1 merges
    # each triangle with its extended seed; round 2 merges {m} into one of them; {a,b,c,m} and {m,x,y,z}
    # share one vertex, 1 < 0.4 * 4, so they stay apart. m keeps 1 internal / 1 external edge (ratio 1).
    edges = [("a", "b"), ("b", "c"), ("a", "c"), ("x", "y"), ("y", "z"), ("x", "z"), ("c", "m"), ("m", "x")]
    clusters = cluster_subgraph("abcmxyz", edges)
    assert [c.members for c in clusters] == [("a", "b", "c", "m"), ("m", "x", "y", "z")]
    assert [c.internal_edges for c in clusters] == [4, 4]


def test_a_bridge_between_triangles_merges_them_as_the_rules_say():
    # The bridge ends c and x have C3 = 1/3 > 0.33: their seeds overlap in 2 of 4, 2 >= 1.6, so all merge.
    edges = [("a", "b"), ("b", "c"), ("a", "c"), ("x", "y"), ("y", "z"), ("x", "z"), ("c", "x")]
    assert [c.members for c in cluster_subgraph("abcxyz", edges)] == [("a", "b", "c", "x", "y", "z")]


graphs = st.integers(2, 14).flatmap(
    lambda n: st.tuples(
        st.just([f"q{i:02d}" for i in range(n)]),
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=40),
    )
)


@settings(max_examples=300, deadline=None)
@given(graphs)
def test_cluster_properties(graph):
    vertices, raw = graph
    edges = [(vertices[a], vertices[b]) for a, b in raw]
    clusters = cluster_subgraph(vertices, edges)
    again = cluster_subgraph(list(reversed(vertices)), list(reversed(edges)))
    assert clusters == again  # deterministic, whatever the input order
    for c in clusters:
        assert set(c.members) <= set(vertices)
        assert 2 <= len(c.members) < 10
        assert list(c.members) == sorted(set(c.members))
    assert len({c.members for c in clusters}) == len(clusters)
