"""The search is exact: equal to brute force on many small random graphs, whatever the ordering or pruning.

Also: statistics and estimate, progress callback, the memory guard, the solve-instance CLI.
"""

from __future__ import annotations

import gzip
import json
import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pase.search import exact as search
from pase.cli import main
from pase.ir.costgraph import CostGraph
from pase.errors import SearchTooLargeError
from pase.search.ordering import adjacency, elimination_steps
from pase.search.exact import ORDERINGS, estimate, solve


def brute_force(g: CostGraph) -> float:
    """Minimum over every assignment, vectorised over the assignments."""
    grids = np.meshgrid(*[np.arange(k) for k in g.config_counts], indexing="ij")
    a = [x.ravel() for x in grids]
    total = np.zeros(a[0].size)
    for v, c in enumerate(g.node_costs):
        total += c[a[v]]
    for u, v, m in g.edges:
        total += m[a[u], a[v]]
    return float(total.min())


SHAPES = ("tree", "dag", "star", "complete", "disconnected", "ladder")


def random_graph(seed: int, shape: str, *, max_nodes: int = 7, max_configs: int = 4,
                 costs: str = "uniform") -> CostGraph:
    """A small random cost graph.

    shape: tree; dag (tree plus extra edges: multi-branch, merge points); star (one
    high-degree merge point); complete; disconnected (two pieces and an isolated node);
    ladder (two chains with rungs, like residual blocks).
    costs: uniform, integers (many ties), sparse (mostly zero), huge (mixing 1e-3 and 1e15..1e18).
    """
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, max_nodes + 1))
    pairs: set[tuple[int, int]] = set()
    if shape in ("tree", "dag"):
        pairs = {(int(rng.integers(v)), v) for v in range(1, n)}
        if shape == "dag":
            for _ in range(int(rng.integers(1, n + 1))):
                u, v = sorted(int(x) for x in rng.choice(n, size=2, replace=False))
                pairs.add((u, v))
    elif shape == "star":
        hub = int(rng.integers(n))
        pairs = {(v, hub) for v in range(n) if v != hub}
        pairs |= {(v, v + 1) for v in range(n - 1) if hub not in (v, v + 1) and rng.random() < 0.3}
    elif shape == "complete":
        n = min(n, 5)
        pairs = {(u, v) for u in range(n) for v in range(u + 1, n)}
    elif shape == "disconnected":
        n = max(n, 4)
        cut = int(rng.integers(1, n - 1))
        pairs = {(int(rng.integers(v)), v) for v in range(1, cut)}
        pairs |= {(int(rng.integers(cut, v)), v) for v in range(cut + 1, n - 1)}  # node n-1 isolated
    elif shape == "ladder":
        n = max(4, n - n % 2)
        half = n // 2
        pairs = {(v, v + 1) for v in range(half - 1)} | {(half + v, half + v + 1) for v in range(half - 1)}
        pairs |= {(v, half + v) for v in range(half) if v % 2 == 0 or rng.random() < 0.5}
    counts = [int(rng.integers(1, max_configs + 1)) for _ in range(n)]

    def draw(size):
        if costs == "integers":
            return rng.integers(0, 4, size=size).astype(float)
        if costs == "sparse":
            return np.where(rng.random(size) < 0.7, 0.0, rng.random(size))
        if costs == "huge":
            return np.where(rng.random(size) < 0.5, rng.random(size) * 1e-3, 10.0 ** rng.uniform(15, 18, size))
        return rng.random(size)

    edges = []
    for u, v in sorted(pairs):
        if rng.random() < 0.5:  # either direction
            u, v = v, u
        edges.append((u, v, draw((counts[u], counts[v]))))
    return CostGraph(tuple(draw(k) for k in counts), tuple(edges))


def assert_optimal(g: CostGraph, **kwargs):
    result = solve(g, **kwargs)
    best = brute_force(g)
    assert math.isclose(result.cost, best, rel_tol=1e-12, abs_tol=0.0), (result.cost, best)
    assert result.cost == g.cost_of(result.assignment)
    assert result.assignment.shape == (g.num_nodes,)
    return result


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("costs", ["uniform", "integers", "sparse", "huge"])
@pytest.mark.parametrize("seed", range(12))
def test_equals_brute_force(shape, costs, seed):
    g = random_graph(seed, shape, costs=costs)
    assert_optimal(g)
    assert_optimal(g, prune=True)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    shape=st.sampled_from(SHAPES),
    costs=st.sampled_from(["uniform", "integers", "sparse", "huge"]),
    ordering=st.sampled_from(ORDERINGS),
    prune=st.booleans(),
)
def test_equals_brute_force_property(seed, shape, costs, ordering, prune):
    assert_optimal(random_graph(seed, shape, costs=costs), ordering=ordering, prune=prune)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), shape=st.sampled_from(SHAPES), data=st.data())
def test_any_explicit_ordering_is_exact(seed, shape, data):
    g = random_graph(seed, shape)
    order = data.draw(st.permutations(range(g.num_nodes)))
    r = assert_optimal(g, ordering=order, prune=False)
    assert r.ordering == tuple(order)


@pytest.mark.parametrize("seed", range(20))
def test_high_degree_merge_points_with_more_configurations(seed):
    # A concat with 6 inputs, each a short branch, then a tail: big dependent sets if ordered badly.
    rng = np.random.default_rng(seed)
    n, hub = 11, 8
    pairs = [(0, 1), (0, 2), (0, 3), (1, 4), (2, 5), (3, 6), (0, 7)] + [(v, hub) for v in (1, 4, 5, 6, 7, 3)]
    pairs += [(hub, 9), (9, 10)]
    counts = rng.integers(1, 6, size=n)
    g = CostGraph(tuple(rng.random(k) for k in counts),
                  tuple((u, v, rng.random((counts[u], counts[v]))) for u, v in pairs))
    for ordering in ("auto", "generateseq", "bfs"):
        assert_optimal(g, ordering=ordering, prune=seed % 2 == 0)


@pytest.mark.parametrize("tile, threads", [(1, 1), (5, 2), (16, 3), (64, 2)])
@pytest.mark.parametrize("seed", range(8))
def test_tiled_and_threaded_kernel(monkeypatch, seed, tile, threads):
    # Real instances tile their big steps and split them across threads; force that on small graphs.
    monkeypatch.setattr(search, "_TILE", tile)
    monkeypatch.setattr(search, "_THREADED_WORK", 0)
    monkeypatch.setattr(search, "_STEP_PRUNE_WORK", 0)
    monkeypatch.setattr(search, "_threads", lambda: threads)
    for shape in ("dag", "complete", "ladder"):
        assert_optimal(random_graph(seed, shape, max_nodes=8, max_configs=6), prune=False)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("costs", ["uniform", "integers", "sparse", "huge"])
def test_steps_dropping_dominated_configurations(monkeypatch, shape, costs):
    # Real instances test only their large steps; here every step does.
    monkeypatch.setattr(search, "_STEP_PRUNE_WORK", 0)
    for seed in range(10):
        g = random_graph(seed, shape, max_nodes=8, max_configs=6, costs=costs)
        assert_optimal(g, prune=False)
        assert_optimal(g, prune=True)


def test_single_configuration_nodes_and_isolated_nodes():
    rng = np.random.default_rng(0)
    counts = [1, 3, 1, 1, 2, 1]
    g = CostGraph(tuple(rng.random(k) for k in counts),
                  ((0, 1, rng.random((1, 3))), (1, 2, rng.random((3, 1))), (4, 1, rng.random((2, 3)))))
    r = assert_optimal(g, prune=True)
    assert r.assignment[0] == r.assignment[2] == r.assignment[3] == r.assignment[5] == 0


def test_all_zero_costs():
    g = random_graph(3, "dag", costs="uniform")
    z = CostGraph(tuple(np.zeros_like(c) for c in g.node_costs), tuple((u, v, np.zeros_like(m)) for u, v, m in g.edges))
    assert solve(z).cost == 0.0 and solve(z, prune=True).cost == 0.0


def test_single_node_and_empty_graph():
    r = solve(CostGraph((np.array([3.0, 1.0, 2.0]),), ()))
    assert r.cost == 1.0 and r.assignment.tolist() == [1]
    r = solve(CostGraph((), ()))
    assert r.cost == 0.0 and r.assignment.size == 0 and r.steps == ()


def test_disconnected_components_add_up():
    a, b = random_graph(1, "dag"), random_graph(2, "complete")
    n = a.num_nodes
    joined = CostGraph(a.node_costs + b.node_costs, a.edges + tuple((u + n, v + n, m) for u, v, m in b.edges))
    r = solve(joined)
    assert math.isclose(r.cost, solve(a).cost + solve(b).cost, rel_tol=1e-14)
    # Each component ends with a step whose dependent set is empty.
    assert sum(1 for s in r.steps if not s.dependent_set) == 2


def test_pruning_drops_a_dominated_configuration_and_keeps_the_optimum():
    # Configuration 2 of node 1 behaves exactly like configuration 0 on every edge but costs more.
    m01 = np.array([[1.0, 5.0, 1.0], [4.0, 0.0, 4.0]])
    m12 = np.array([[0.0, 2.0], [3.0, 1.0], [0.0, 2.0]])
    g = CostGraph((np.array([0.0, 1.0]), np.array([2.0, 2.5, 9.0]), np.array([1.0, 0.0])),
                  ((0, 1, m01), (1, 2, m12)))
    r = assert_optimal(g, prune=True)
    assert r.pruned_configs >= 1
    assert estimate(g, prune=True).config_counts[1] <= 2
    assert solve(g, prune=False).pruned_configs == 0


@pytest.mark.parametrize("delta", [1e-6, 1e-12])
def test_pruning_keeps_a_configuration_better_by_a_hair(monkeypatch, delta):
    # Node 0's configuration 1 beats its configuration 0 by delta when node 1 takes
    # configuration 0 and loses otherwise; node 1's own cost forces configuration 0.
    monkeypatch.setattr(search, "_STEP_PRUNE_WORK", 0)
    g = CostGraph((np.array([0.0, 0.0]), np.array([0.0, 100.0])),
                  ((1, 0, np.array([[1.0, 1.0 - delta], [0.0, 5.0]])),))
    for prune in (False, True):
        r = assert_optimal(g, prune=prune, ordering="generateseq")
        assert r.assignment.tolist() == [1, 0] and r.cost == 1.0 - delta


def test_statistics_and_estimate_agree():
    g = random_graph(5, "ladder", max_nodes=10, max_configs=5)
    est = estimate(g, ordering="generateseq", prune=False)
    r = solve(g, ordering="generateseq", prune=False)
    assert r.ordering == est.ordering and r.steps == est.steps
    assert r.steps == tuple(elimination_steps(adjacency(g.num_nodes, g.edges), g.config_counts, r.ordering))
    assert [s.vertex for s in r.steps] == list(r.ordering)
    assert r.max_table_entries == max(s.table_entries for s in r.steps)
    assert r.total_table_entries == sum(s.table_entries for s in r.steps)
    assert r.max_dependent_set == max(len(s.dependent_set) for s in r.steps)
    assert r.total_work == sum(s.work for s in r.steps)
    assert r.peak_table_bytes == est.peak_bytes >= 8 * est.total_table_entries
    assert r.search_time_s > 0


def test_progress_reports_every_step():
    g = random_graph(7, "dag", max_nodes=9)
    calls = []
    solve(g, progress=lambda done, total: calls.append((done, total)))
    n = g.num_nodes
    assert calls == [(i, n) for i in range(1, n + 1)]


def _big_graph():
    # Six mutually connected layers with 60 configurations each: breadth-first or not,
    # some table spans five of them (60**5 entries, about 6 GB).
    rng = np.random.default_rng(0)
    k = 60
    return CostGraph(tuple(rng.random(k) for _ in range(6)),
                     tuple((u, v, rng.random((k, k))) for u in range(6) for v in range(u + 1, 6)))


def test_budget_refusal_before_allocating():
    g = _big_graph()
    calls = []
    tracemalloc.start()
    try:
        with pytest.raises(SearchTooLargeError) as info:
            solve(g, memory_budget_bytes=2**30, progress=lambda *a: calls.append(a), prune=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20  # nothing near a table's size was allocated
    assert calls == []
    message = str(info.value)
    assert f"{60**5:,}" in message  # the largest table
    assert "GiB" in message and "fewer devices" in message and "powers of two" in message
    assert "minimum shard size" in message
    assert estimate(g, prune=False).peak_bytes > 2**30


def test_default_budget_refuses_what_cannot_fit():
    k = 400  # a 7-clique of 400 configurations: tables of 400**6 entries (3e16 bytes)
    rng = np.random.default_rng(1)
    g = CostGraph(tuple(rng.random(k) for _ in range(7)),
                  tuple((u, v, rng.random((k, k))) for u in range(7) for v in range(u + 1, 7)))
    with pytest.raises(SearchTooLargeError):
        solve(g, prune=False)


def test_a_generous_budget_lets_it_run():
    g = random_graph(4, "dag")
    assert solve(g, memory_budget_bytes=estimate(g).peak_bytes).cost == pytest.approx(brute_force(g), rel=1e-12)
    with pytest.raises(SearchTooLargeError):
        solve(g, memory_budget_bytes=estimate(g).peak_bytes - 1)


def _pairwise_greedy_split(bucket, scopes, counts):
    """The bucket split by its definition: merge the pair of smallest merged sum, earliest pair on ties."""
    groups = [(f,) for f in sorted(bucket, key=lambda f: -math.prod(counts[x] for x in scopes[f]))]
    while len(groups) > 2:
        best = None
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                size = math.prod(counts[x] for x in set().union(*(scopes[f] for f in groups[i] + groups[j])))
                if best is None or size < best[0]:
                    best = (size, i, j)
        _, i, j = best
        groups = [g for k, g in enumerate(groups) if k not in (i, j)] + [groups[i] + groups[j]]
    return tuple(groups)


@pytest.mark.parametrize("seed", range(40))
def test_bucket_split_is_the_pairwise_greedy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    counts = [int(k) for k in rng.integers(1, 6, size=n)]
    for _ in range(20):
        scopes = []
        for _ in range(int(rng.integers(0, 14))):
            others = [int(x) for x in rng.choice(np.arange(1, n), size=int(rng.integers(0, min(3, n - 1) + 1)),
                                                 replace=False)] if n > 1 else []
            scopes.append(tuple(rng.permutation([0] + others).tolist()))
        bucket = [int(f) for f in rng.permutation(len(scopes))]
        assert search._split_bucket(bucket, scopes, counts) == _pairwise_greedy_split(bucket, scopes, counts)


def test_a_hub_with_thousands_of_tables_is_planned_exactly():
    # Every leaf of a star leaves a table over the hub in its bucket: the pairwise greedy took
    # cubic time in their number (18 s for 400 leaves). A regression shows as this test running
    # for minutes; no wall-clock goal is asserted (tests pass on any machine, however loaded).
    rng = np.random.default_rng(0)
    leaves = 3000
    g = CostGraph(tuple(rng.random(3) for _ in range(leaves + 1)),
                  tuple((0, v, rng.random((3, 3))) for v in range(1, leaves + 1)))
    r = solve(g, ordering="generateseq")
    assert r.cost == g.cost_of(r.assignment)
    best_hub = min(range(3), key=lambda a: g.node_costs[0][a] + sum(
        min(c + m[a]) for c, (_, _, m) in zip(g.node_costs[1:], g.edges)))
    assert r.cost == pytest.approx(g.node_costs[0][best_hub] + sum(
        min(c + m[best_hub]) for c, (_, _, m) in zip(g.node_costs[1:], g.edges)), rel=1e-12)


def test_invalid_ordering_argument():
    g = random_graph(0, "tree")
    with pytest.raises(ValueError, match="unknown ordering"):
        solve(g, ordering="random")
    with pytest.raises(ValueError, match="exactly once"):
        solve(g, ordering=[0] * g.num_nodes)


# -- CLI ----------------------------------------------------------------------------------------


def _write_instance(path, g: CostGraph, *, compress: bool):
    doc = {
        "name": "random",
        "devices": 4,
        "nodes": [{"id": v, "op": "Op", "dims": [8], "configs": [[i + 1] for i in range(c.size)], "cost": c.tolist()}
                  for v, c in enumerate(g.node_costs)],
        "edges": [{"src": u, "dst": v, "cost": m.tolist()} for u, v, m in g.edges],
    }
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if compress else data)


@pytest.mark.parametrize("compress", [False, True])
def test_cli_solve_instance_json(tmp_path, capsys, compress):
    g = random_graph(11, "ladder", max_nodes=8)
    path = tmp_path / "g.json.gz"
    _write_instance(path, g, compress=compress)
    assert main(["solve-instance", str(path), "--json", "--ordering", "generateseq"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert math.isclose(out["cost"], brute_force(g), rel_tol=1e-12)
    assert out["cost"] == g.cost_of(out["assignment"])
    assert out["search_time_s"] >= 0 and out["max_table_entries"] >= 1
    assert out["ordering_name"] == "generateseq" and sorted(out["ordering"]) == list(range(g.num_nodes))


def test_cli_solve_instance_text(tmp_path, capsys):
    g = random_graph(12, "star")
    path = tmp_path / "g.json"
    _write_instance(path, g, compress=False)
    assert main(["solve-instance", str(path)]) == 0
    out = capsys.readouterr().out
    assert "optimal cost" in out and "largest dependent set" in out and "random:" in out
    assert out.count("Op") == g.num_nodes


def test_cli_solve_instance_malformed(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"nodes": [{"id": 0, "cost": [1.0]}, {"id": 1, "cost": [2.0]}], '
                    '"edges": [{"src": 0, "dst": 1, "cost": [[1.0, 2.0]]}]}')
    assert main(["solve-instance", str(path)]) == 2
    err = capsys.readouterr().err
    assert "edge 0 (0 -> 1): cost matrix has shape (1, 2), expected (1, 1)" in err
    assert main(["solve-instance", str(tmp_path / "missing.json")]) == 2
    assert "cannot read instance" in capsys.readouterr().err
