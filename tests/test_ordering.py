"""Orderings: every heuristic as its definition states it, dependent sets as the paper defines them, auto the
cheapest heuristic by an independent count."""

from __future__ import annotations

import math
import random

import pytest

from pase.search.ordering import (
    ORDERINGS,
    adjacency,
    breadth_first,
    compute_ordering,
    connected_sets,
    elimination_steps,
    elimination_work,
    generate_seq,
    min_fill,
    min_table,
)


def _random_graph(seed: int):
    """Random graph (sometimes disconnected) with configuration counts, as (adjacency, counts)."""
    rng = random.Random(seed)
    n = rng.randint(1, 14)
    edges = set()
    for v in range(1, n):
        if rng.random() < 0.9:  # mostly a tree, sometimes a new component
            edges.add((rng.randrange(v), v))
    for _ in range(rng.randint(0, n)):
        u, v = rng.sample(range(n), 2) if n > 1 else (0, 0)
        if u != v and (v, u) not in edges:
            edges.add((u, v))
    return adjacency(n, edges), [rng.randint(1, 9) for _ in range(n)]


def _paper_generate_seq(adj):
    """The paper's Fig. 3 written literally: d sets, smallest |d| first (lowest id on ties)."""
    d = {v: set(adj[v]) for v in range(len(adj))}
    order = []
    while d:
        v = min(d, key=lambda x: (len(d[x]), x))
        order.append(v)
        for u in d[v]:
            d[u] = (d[u] | d[v]) - {v, u}
        del d[v]
    return order


def _paper_dependent_sets(adj, order):
    """D(i) by the paper's definition: the unordered neighbours of X(i), the set of ordered
    vertices reachable from v(i) through ordered vertices."""
    ordered = set()
    result = []
    for v in order:
        ordered.add(v)
        connected, stack = {v}, [v]
        while stack:
            for u in adj[stack.pop()]:
                if u in ordered and u not in connected:
                    connected.add(u)
                    stack.append(u)
        result.append({u for x in connected for u in adj[x]} - ordered)
    return result


@pytest.mark.parametrize("seed", range(60))
def test_generate_seq_is_the_papers_fig3(seed):
    adj, _ = _random_graph(seed)
    assert generate_seq(adj) == _paper_generate_seq(adj)


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("name", ORDERINGS)
def test_dependent_sets_match_the_papers_definition(seed, name):
    adj, counts = _random_graph(seed)
    order = compute_ordering(adj, counts, name)
    assert sorted(order) == list(range(len(adj)))
    steps = elimination_steps(adj, counts, order)
    position = {v: i for i, v in enumerate(order)}
    for step, expected in zip(steps, _paper_dependent_sets(adj, order), strict=True):
        assert set(step.dependent_set) == expected
        assert list(step.dependent_set) == sorted(expected, key=position.get)
        assert step.table_entries == math.prod(counts[u] for u in expected)
        assert step.work == step.table_entries * counts[step.vertex]


def _paper_greedy(adj, score):
    """Eliminate, one at a time, the vertex of least ``score(v, d)``, every score recomputed from the
    paper's d sets after each step (no heap, no incremental update)."""
    d = {v: set(adj[v]) for v in range(len(adj))}
    order = []
    while d:
        v = min(d, key=lambda x: score(x, d))
        order.append(v)
        for u in d[v]:
            d[u] = (d[u] | d[v]) - {v, u}
        del d[v]
    return order


def _paper_min_table(adj, counts):
    """min-table by its definition: the step of fewest sums K(v) prod K(d(v)) first, lowest id on ties."""
    return _paper_greedy(adj, lambda v, d: (counts[v] * math.prod(counts[u] for u in d[v]), v))


def _paper_min_fill(adj, counts):
    """min-fill by its definition: least weight of new ties between v's neighbours (each weighted by
    the product of the two counts), then the smallest step, then the lowest id."""
    def score(v, d):
        nb = sorted(d[v])
        fill = sum(counts[a] * counts[b] for i, a in enumerate(nb) for b in nb[i + 1:] if b not in d[a])
        return fill, counts[v] * math.prod(counts[u] for u in nb), v

    return _paper_greedy(adj, score)


def _paper_work(adj, counts, order):
    """Sums examined under ``order``, from the paper's dependent sets: sum of K(v(i)) prod K(D(i))."""
    return sum(counts[v] * math.prod(counts[u] for u in dep)
               for v, dep in zip(order, _paper_dependent_sets(adj, order)))


@pytest.mark.parametrize("seed", range(60))
def test_weighted_heuristics_match_their_definitions(seed):
    adj, counts = _random_graph(seed)
    assert compute_ordering(adj, counts, "min-table") == _paper_min_table(adj, counts)
    assert compute_ordering(adj, counts, "min-fill") == _paper_min_fill(adj, counts)


@pytest.mark.parametrize("seed", range(60))
def test_auto_is_the_cheapest_heuristic_by_an_independent_count(seed):
    # Run each heuristic of auto's list (by the reference implementations above) and count its work
    # from the paper's dependent sets; auto must be the first of the cheapest, and the exact search's
    # estimate under auto must report that work.
    import numpy as np

    from pase.ir.costgraph import CostGraph
    from pase.search.exact import estimate

    adj, counts = _random_graph(seed)
    candidates = [_paper_generate_seq(adj), _paper_min_table(adj, counts), _paper_min_fill(adj, counts)]
    works = [_paper_work(adj, counts, order) for order in candidates]
    auto = compute_ordering(adj, counts, "auto")
    assert auto == candidates[works.index(min(works))]
    assert _paper_work(adj, counts, auto) == min(works)
    edges = tuple((u, v, np.zeros((counts[u], counts[v]))) for u in range(len(adj)) for v in adj[u] if u < v)
    g = CostGraph(tuple(np.zeros(k) for k in counts), edges)
    est = estimate(g, ordering="auto", prune=False)
    assert list(est.ordering) == auto and est.total_work == min(works)
    tables = [math.prod(counts[u] for u in dep) for dep in _paper_dependent_sets(adj, auto)]
    assert est.max_table_entries == max(tables, default=0)


def test_auto_leaves_breadth_first_out():
    # A star eliminated breadth-first from its hub ties all five leaves into one table, then four...:
    # 2 x (2^5 + 2^4 + 2^3 + 2^2 + 2 + 1) sums. Auto's candidates take the leaves first: five steps
    # of 2 x 2 sums, then the hub alone (2). On a path breadth-first from an end is optimal (three
    # steps of 3 x 3, then 3), and auto matches it.
    star = adjacency(6, [(0, leaf) for leaf in range(1, 6)])
    counts = [2] * 6
    assert elimination_work(star, counts, breadth_first(star)) == 2 * (2 ** 5 + 2 ** 4 + 2 ** 3 + 2 ** 2 + 2 + 1)
    assert elimination_work(star, counts, compute_ordering(star, counts, "auto")) == 5 * 4 + 2
    path = adjacency(4, [(0, 1), (1, 2), (2, 3)])
    assert elimination_work(path, [3] * 4, compute_ordering(path, [3] * 4, "auto")) == \
        elimination_work(path, [3] * 4, breadth_first(path)) == 3 * 9 + 3


def test_star_hub_waits_for_its_leaves():
    # A merge point (concat) with five inputs: GenerateSeq keeps it until it is no bigger than a leaf.
    adj = adjacency(6, [(leaf, 5) for leaf in range(5)])
    order = generate_seq(adj)
    assert order.index(5) >= 4
    assert max(len(s.dependent_set) for s in elimination_steps(adj, [3] * 6, order)) == 1


def test_breadth_first_order_and_components():
    adj = adjacency(7, [(0, 2), (0, 1), (1, 3), (2, 4), (5, 6)])
    assert breadth_first(adj) == [0, 1, 2, 3, 4, 5, 6]
    assert breadth_first(adjacency(3, [(2, 1)])) == [0, 1, 2]


def test_weighted_orderings_use_configuration_counts():
    # Path 0 - 1 - 2 with a huge middle vertex: eliminating the middle first would build a
    # 2 x 2 table at a cost of 1000 x 4, while eliminating an end costs 2 x 1000.
    adj = adjacency(3, [(0, 1), (1, 2)])
    counts = [2, 1000, 2]
    for order in (min_table(adj, counts), min_fill(adj, counts), compute_ordering(adj, counts)):
        assert order[0] != 1
    assert elimination_work(adj, counts, [0, 1, 2]) == 2 * 1000 + 1000 * 2 + 2


def test_invalid_orderings():
    adj = adjacency(3, [(0, 1)])
    with pytest.raises(ValueError, match="unknown ordering 'dfs'"):
        compute_ordering(adj, [1, 1, 1], "dfs")
    for bad in ([0, 1], [0, 1, 1], [0, 1, 3]):
        with pytest.raises(ValueError, match="every vertex 0..2 exactly once"):
            elimination_steps(adj, [1, 1, 1], bad)


def test_empty_graph():
    assert compute_ordering([], [], "auto") == []
    assert elimination_steps([], [], []) == []


@pytest.mark.parametrize("seed", range(30))
def test_connected_sets_are_the_components_reached_through_eliminated_vertices(seed):
    # Reference: a search from each vertex through the vertices eliminated before it.
    rng = random.Random(seed)
    n = rng.randint(1, 14)
    edges = {tuple(sorted(rng.sample(range(n), 2))) for _ in range(rng.randint(0, 2 * n))} if n > 1 else set()
    adj = adjacency(n, sorted(edges))
    order = rng.sample(range(n), n)
    position = {v: i for i, v in enumerate(order)}
    for i, (v, x) in enumerate(zip(order, connected_sets(adj, order))):
        done, seen, stack = set(order[:i]), {v}, [v]
        while stack:
            for w in adj[stack.pop()]:
                if w in done and w not in seen:
                    seen.add(w)
                    stack.append(w)
        assert x == tuple(sorted(seen - {v}, key=position.__getitem__))
    with pytest.raises(ValueError, match="each of the"):
        connected_sets(adj, order + order[:1])
