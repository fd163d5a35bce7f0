"""The approximate search: never worse than its seeds, exact when one window covers the graph."""

import itertools

import numpy as np
import pytest

from pase.search.approx import ApproxResult, improve
from pase.search.solver import exact, exact_or_approximate
from pase.ir.costgraph import CostGraph
from pase.errors import SearchTooLargeError
from pase.models import sample
from pase.planner import PlanOptions, plan
from pase.hardware.cluster import Cluster


def _random_graph(rng, n, k_max, extra_edges):
    counts = rng.integers(1, k_max + 1, size=n)
    nodes = tuple(rng.random(c) * 10 for c in counts)
    pairs = {(i - 1 - int(rng.integers(0, min(i, 3))), i) for i in range(1, n)}
    while len(pairs) < n - 1 + extra_edges:
        u, v = sorted(rng.choice(n, 2, replace=False))
        pairs.add((int(u), int(v)))
    edges = tuple((u, v, rng.random((counts[u], counts[v])) * 10) for u, v in sorted(pairs))
    return CostGraph(nodes, edges)


def _brute_force(g):
    return min(g.cost_of(a) for a in itertools.product(*(range(c) for c in g.config_counts)))


@pytest.mark.parametrize("seed", range(15))
def test_equals_brute_force_when_one_window_covers_the_graph(seed):
    rng = np.random.default_rng(seed)
    g = _random_graph(rng, 6, 3, 4)
    r = improve(g, [[0] * 6])
    assert r.cost == pytest.approx(_brute_force(g), rel=1e-12)
    assert r.cost == pytest.approx(g.cost_of(r.assignment), rel=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_never_worse_than_the_best_seed_with_small_windows(seed):
    rng = np.random.default_rng(100 + seed)
    g = _random_graph(rng, 30, 4, 25)
    seeds = [rng.integers(0, g.config_counts) for _ in range(3)]
    r = improve(g, seeds, window_table_entries=16)
    assert r.cost <= min(r.seed_costs) * (1 + 1e-12)
    assert r.cost == pytest.approx(g.cost_of(r.assignment), rel=1e-12)
    assert r.windows_solved > 1


def test_bad_seeds_and_budgets_are_refused():
    g = _random_graph(np.random.default_rng(0), 4, 3, 0)
    with pytest.raises(ValueError, match="at least one seed"):
        improve(g, [])
    with pytest.raises(ValueError, match="seed 0"):
        improve(g, [[0, 0]])
    with pytest.raises(SearchTooLargeError, match="configurations"):
        improve(g, [[0] * 4], window_table_entries=1)


def test_densenet_falls_back_to_the_approximate_search():
    g = sample("densenet121", batch=32)
    cluster = Cluster(8, 10e12, 16e9)
    with pytest.raises(SearchTooLargeError, match="table entries"):
        plan(g, cluster, PlanOptions(approximate=False))
    result = plan(g, cluster)
    assert not result.exact
    assert result.to_dict()["exact"] is False
    assert result.search.cost <= min(result.search.seed_costs)


def test_the_composed_solver_is_exact_within_budget_and_local_search_beyond_it():
    rng = np.random.default_rng(7)
    g = _random_graph(rng, 8, 3, 6)
    calls = []

    def seeds():
        calls.append(1)
        return [[0] * 8, list(rng.integers(0, g.config_counts))]

    solver = exact_or_approximate(seeds)
    roomy = solver(g)
    assert roomy.cost == pytest.approx(_brute_force(g), rel=1e-12) and not calls
    tight = [solver(g, memory_budget_bytes=1) for _ in range(2)]
    assert all(isinstance(r, ApproxResult) for r in tight)
    assert all(r.cost <= min(r.seed_costs) * (1 + 1e-12) for r in tight)
    assert tight[0].seed_costs == tight[1].seed_costs and len(calls) == 1
    with pytest.raises(SearchTooLargeError):
        exact()(g, memory_budget_bytes=1)
