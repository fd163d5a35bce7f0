"""Guards that refuse a search, a cost model or a configuration list before allocating for it.

Dense graphs are refused by the exact search at once (and planned by the
approximate one); edge tables are counted, and computed in bounded scratch,
before any exists; the search's memory estimate bounds what it allocates,
address space included; configurations are counted before they are listed.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from pase import ops
from pase.cli import main
from pase.errors import ConfigurationError, SearchTooLargeError
from pase.hardware.cluster import Cluster
from pase.io.graph_json import save_graph
from pase.ir.configs import ConfigOptions, count_configs, layer_configs, split_factors
from pase.ir.graph import Graph
from pase.limits import MAX_DEPENDENT_SET, MAX_LAYER_CONFIGS, MAX_SEARCH_DEVICES
from pase.model import cost as cost_module
from pase.model.cost import build_cost_model
from pase.planner import PlanOptions, plan
from pase.ir.costgraph import CostGraph
from pase.search.exact import estimate, solve
from pase.search.ordering import (
    adjacency, breadth_first, compute_ordering, degeneracy, elimination_steps, generate_seq, min_fill, min_table,
)

INSTANCES = Path(__file__).resolve().parent / "data" / "instances"
CLUSTER = dict(peak_flops=10e12, bandwidth_Bps=16e9)


def _peak_bytes(fn):
    """Run ``fn``; return what it returned or raised, and the peak of traced allocations (numpy's included)."""
    tracemalloc.start()
    try:
        try:
            outcome = fn()
        except Exception as exc:  # the caller asserts which
            outcome = exc
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- 1. densely connected graphs -----------------------------------------------------------------


def _dense_graph(n: int) -> Graph:
    """Layer ``i`` reads the outputs of all ``i`` layers before it (a dense block taken to the extreme)."""
    g = Graph(f"dense{n}")
    g.add_layer(ops.fully_connected("l0", b=32, n=64, c=64))
    for i in range(1, n):
        g.add_layer(ops.elementwise(f"l{i}", [32, 64], "bn", inputs=i), inputs=[f"l{j}" for j in range(i)])
    return g


@pytest.fixture(scope="module")
def dense150() -> Graph:
    return _dense_graph(150)


@pytest.mark.parametrize("devices", [1, 4])
def test_a_150_layer_dense_graph_is_refused_before_any_table(dense150, devices):
    # On one device every table has one entry, so no memory budget stops it: its 149-axis
    # tables used to reach numpy's 64-axis limit after minutes of bucket planning.
    g = build_cost_model(dense150, Cluster(devices, **CLUSTER)).cost_graph()
    for ordering in ("auto", "generateseq", "min-table", "min-fill"):
        error, peak = _peak_bytes(lambda: solve(g, ordering=ordering))
        assert isinstance(error, SearchTooLargeError), error
        message = str(error)
        assert "dependent set of at least 149 layers" in message and f"limit of {MAX_DEPENDENT_SET}" in message
        assert "approximate search" in message
        assert peak < 4 * 2**20  # no pruned copy, no table: only the orderings' bookkeeping
    with pytest.raises(SearchTooLargeError, match="dependent set of at least 149"):
        estimate(g)


def test_an_explicit_ordering_too_wide_is_estimated_but_not_run():
    g = build_cost_model(_dense_graph(40), Cluster(1, **CLUSTER)).cost_graph()
    order = list(range(g.num_nodes))
    est = estimate(g, ordering=order)
    assert est.max_dependent_set == 39 and est.ordering == tuple(order)
    assert est.peak_bytes >= 8 * est.total_table_entries
    calls = []
    with pytest.raises(SearchTooLargeError, match="the given ordering leaves a dependent set of 39 layers"):
        solve(g, ordering=order, progress=lambda *a: calls.append(a))
    assert calls == []


def test_a_dense_graph_is_planned_by_the_approximate_search():
    g = _dense_graph(40)  # degeneracy 39: no ordering fits
    cluster = Cluster(4, **CLUSTER)
    with pytest.raises(SearchTooLargeError, match="every ordering"):
        plan(g, cluster, PlanOptions(approximate=False, memory_limit_bytes=None))
    result = plan(g, cluster, PlanOptions(memory_limit_bytes=None))
    assert not result.exact
    cost_graph = build_cost_model(g, cluster).cost_graph()
    assert result.search.cost == cost_graph.cost_of(result.search.assignment)
    assert result.search.cost <= min(result.search.seed_costs)
    assert result.cost == pytest.approx(result.search.cost, rel=1e-12)


def test_a_dense_graph_file_is_solved_approximately_by_the_cli(tmp_path, capsys):
    path = tmp_path / "dense50.json"
    save_graph(_dense_graph(50), path)
    assert 10_000 < path.stat().st_size < 40_000
    assert main(["solve", str(path), "--devices", "4"]) == 0
    assert "approximate" in capsys.readouterr().out


def _random_adjacency(seed: int, n: int, density: float) -> list[set[int]]:
    rng = np.random.default_rng(seed)
    return adjacency(n, [(u, v) for u, v in itertools.combinations(range(n), 2) if rng.random() < density])


@pytest.mark.parametrize("seed", range(30))
def test_bounded_orderings_are_the_unbounded_ones_or_none(seed):
    rng = np.random.default_rng(seed)
    adj = _random_adjacency(seed, int(rng.integers(2, 14)), float(rng.uniform(0.1, 0.9)))
    counts = [int(k) for k in rng.integers(1, 6, size=len(adj))]
    for name in ("generateseq", "min-table", "min-fill", "auto"):
        free = compute_ordering(adj, counts, name)
        width = max(len(s.dependent_set) for s in elimination_steps(adj, counts, free))
        for bound in range(len(adj)):
            bounded = compute_ordering(adj, counts, name, max_dependent_set=bound)
            if name != "auto" and bound >= width:
                assert bounded == free  # the bound never changes an ordering it does not stop
            if bounded is not None:
                assert max(len(s.dependent_set) for s in elimination_steps(adj, counts, bounded)) <= bound
            else:
                assert bound < width


def _brute_degeneracy(adj) -> int:
    n = len(adj)
    return max(min(len(adj[v] & set(sub)) for v in sub)
               for r in range(1, n + 1) for sub in itertools.combinations(range(n), r))


@pytest.mark.parametrize("seed", range(20))
def test_degeneracy_is_its_definition_and_a_lower_bound_on_every_ordering(seed):
    rng = np.random.default_rng(seed)
    adj = _random_adjacency(seed, int(rng.integers(1, 9)), float(rng.uniform(0.1, 0.9)))
    assert degeneracy(adj) == _brute_degeneracy(adj)
    counts = [2] * len(adj)
    for order in (generate_seq(adj), min_table(adj, counts), min_fill(adj, counts), breadth_first(adj),
                  list(rng.permutation(len(adj)))):
        assert max(len(s.dependent_set) for s in elimination_steps(adj, counts, order)) >= degeneracy(adj)


def test_orderings_of_a_complete_graph_stop_at_once():
    n = 400
    adj = [set(range(n)) - {v} for v in range(n)]
    # Unbounded min-fill alone took minutes at this size; each ordering now stops at the first dependent set
    # past the limit (no duration asserted: a regression shows as a test that runs for minutes).
    for name in ("generateseq", "min-table", "min-fill", "auto"):
        assert compute_ordering(adj, [3] * n, name, max_dependent_set=MAX_DEPENDENT_SET) is None
    assert degeneracy(adj) == n - 1
    steps = elimination_steps(adj, [3] * n, range(n), max_dependent_set=MAX_DEPENDENT_SET)
    assert len(steps) == 1 and len(steps[0].dependent_set) == n - 1


# -- 2. edge tables of wide graphs ---------------------------------------------------------------


def _wide_graph(width: int, size: int) -> Graph:
    """One layer fanning out to ``width`` six-dimensional branches that an Elementwise joins."""
    dims, shape = "bsdhkq", [size] * 6
    g = Graph("wide")
    g.add_layer(ops.elementwise("in", shape, dims, inputs=1))
    for i in range(width):
        g.add_layer(ops.elementwise(f"br{i}", shape, dims, inputs=1), inputs=["in"])
    g.add_layer(ops.elementwise("out", shape, dims, inputs=width), inputs=[f"br{i}" for i in range(width)])
    return g


def test_a_wide_graph_on_1024_devices_is_refused_before_any_table():
    # 8,008 configurations per layer: one table is 0.5 GB, computing it took 30 times that.
    g = _wide_graph(5, 1024)
    error, peak = _peak_bytes(lambda: build_cost_model(g, Cluster(1024, **CLUSTER)))
    assert isinstance(error, SearchTooLargeError), error
    message = str(error)
    assert "GiB" in message and "over the budget" in message and "8,008" in message
    assert "powers_of_two=True" in message and "fewer devices" in message
    assert peak < 64 * 2**20  # the configurations and table keys only
    with pytest.raises(SearchTooLargeError, match="over the budget of 0.50 GiB"):
        build_cost_model(_wide_graph(1, 1024), Cluster(1024, **CLUSTER), table_budget_bytes=2**29)


def _five_dim_pair() -> Graph:
    g = Graph("pair5")
    g.add_layer(ops.elementwise("a", [128] * 5, "bsdhk", inputs=1))
    g.add_layer(ops.einsum("b", "bsdhk,bsdhk->bsdhk", {d: 128 for d in "bsdhk"}, weights=[1]), inputs=["a"])
    return g


def test_edge_tables_are_computed_in_bounded_scratch(monkeypatch):
    monkeypatch.setattr(cost_module, "_EDGE_SCRATCH_BYTES", 4 * 2**20)
    model, peak = _peak_bytes(lambda: build_cost_model(_five_dim_pair(), Cluster(128, **CLUSTER)))
    [(_, table)] = model.edge_tables
    assert table.shape == (792, 792)
    assert peak < table.nbytes + 12 * 2**20  # a single pass held 30 tables' worth of temporaries


@pytest.mark.parametrize("cost_model", ["corrected", "paper"])
def test_edge_tables_in_blocks_are_the_single_pass_ones(monkeypatch, cost_model):
    g, options = _five_dim_pair(), ConfigOptions(cost_model=cost_model)
    cluster = Cluster(16, 10e12, 150e9, devices_per_node=4, inter_bandwidth_Bps=10e9)
    whole = build_cost_model(g, cluster, options).edge_tables[0][1]
    monkeypatch.setattr(cost_module, "_EDGE_SCRATCH_BYTES", 2**16)
    assert np.array_equal(build_cost_model(g, cluster, options).edge_tables[0][1], whole)


def test_the_cost_graph_shares_the_tables_of_repeated_blocks():
    from pase.models import sample

    model = build_cost_model(sample("transformer"), Cluster(8, **CLUSTER))
    graph = model.cost_graph()
    distinct_model = {id(t): t.nbytes for _, t in model.edge_tables}
    distinct_graph = {id(m.base if m.base is not None else m): m.nbytes for _, _, m in graph.edges}
    tensors: dict[tuple[str, str], list] = {}
    for edge, table in model.edge_tables:
        tensors.setdefault((edge.src, edge.dst), []).append(table)
    sums = sum(ts[0].nbytes for ts in tensors.values() if len(ts) > 1)  # several tensors add into a new matrix
    assert len(distinct_graph) < len(graph.edges)
    assert sum(distinct_graph.values()) <= sum(distinct_model.values()) + sums


# -- 3. the search's estimate bounds what it allocates ------------------------------------------

_UNDER_RLIMIT_AS = textwrap.dedent('''
    import gc, json, resource, sys
    import numpy as np
    from pase.io.instance import load_instance
    from pase.ir.costgraph import CostGraph
    from pase.search.exact import estimate, solve

    def address_space():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))

    def clique(seed, counts):
        rng = np.random.default_rng(seed)
        nodes = tuple(rng.random(k) * 10 for k in counts)
        edges = tuple((u, v, rng.random((counts[u], counts[v])) * 10)
                      for u in range(len(counts)) for v in range(u + 1, len(counts)))
        return CostGraph(nodes, edges)

    # The first search of the process starts its worker threads: their stacks and malloc
    # arenas are new address space (later searches reuse them).
    cases = [(lambda: clique(0, [500, 100, 100, 8]), None),  # threaded steps
             (lambda: clique(1, [2, 300, 80, 80]), None),  # operands of three axes, dropped configurations
             (lambda: clique(2, [1200, 1200]), True),  # pruning copies of large edges
             (lambda: load_instance(sys.argv[1])[0], None)]
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    graphs, results = [], []
    for make, prune in cases:
        g = make()
        graphs.append(g)
        peak = estimate(g, prune=prune).peak_bytes
        gc.collect()
        limit = address_space() + peak + int(sys.argv[2])
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        try:
            results.append(solve(g, prune=prune))
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    print(json.dumps([[r.cost, g.cost_of(r.assignment), solve(g, prune=False, ordering="generateseq").cost]
                      for r, g in zip(results, graphs)]))
''')


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the address space from /proc")
def test_searches_complete_under_an_address_space_limit_just_above_their_estimate():
    # For the interpreter's own small objects; an estimate that left out the worker threads
    # failed the first search even with twice this.
    margin = 2 * 2**20
    run = subprocess.run([sys.executable, "-c", _UNDER_RLIMIT_AS, str(INSTANCES / "transformer-p8.json.gz"),
                          str(margin)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    for cost, recomputed, reference in json.loads(run.stdout):
        assert cost == recomputed
        assert cost == pytest.approx(reference, rel=1e-12)


def test_the_estimate_counts_the_pruning_scratch_and_the_worker_threads(monkeypatch):
    from pase.search import exact

    rng = np.random.default_rng(3)
    g = CostGraph((rng.random(1500), rng.random(1500)), ((0, 1, rng.random((1500, 1500))),))
    assert estimate(g, prune=True).peak_bytes >= 2 * g.edges[0][2].nbytes  # a copy and a difference matrix
    big = CostGraph(tuple(rng.random(k) for k in (500, 100, 100, 8)),
                    tuple((u, v, rng.random((k, m))) for (u, k), (v, m)
                          in itertools.combinations(enumerate((500, 100, 100, 8)), 2)))
    monkeypatch.setattr(exact, "_threads", lambda: 2)
    with_worker = estimate(big).peak_bytes
    monkeypatch.setattr(exact, "_threads", lambda: 1)
    assert with_worker - estimate(big).peak_bytes >= exact._WORKER_BYTES


# -- 4. configurations counted before they are listed --------------------------------------------


def _brute_split_factors(layer, dim, devices, options):
    """split_factors by its definition, trying every number."""
    i = layer.dims.index(dim)
    size, base = layer.sizes[i], layer.split_base[i]
    if not options.spatial_split and dim in ops.OPS[layer.op].spatial_dims:
        return [1]
    return [f for f in range(1, min(base, devices) + 1)
            if base % f == 0 and (f == 1 or size // f >= options.min_shard)
            and (not options.powers_of_two or f & (f - 1) == 0) and (not options.tiles_mesh or devices % f == 0)]


def _some_layers():
    yield ops.fully_connected("fc", b=48, n=96, c=60)
    yield ops.conv2d("conv", b=16, c=12, height=28, width=28, n=24, r=3, s=3, pad=1)
    yield ops.concat("cat", [[8, 6], [8, 10]], "bn", "n")
    yield ops.elementwise("e4", [12, 18, 7, 16], "abcd")
    yield ops.elementwise("prime", [2**31 - 1, 2**30], "ab")


@pytest.mark.parametrize("devices", [1, 2, 6, 8, 12, 16, 30, 64, 96])
def test_split_factors_and_counts_match_their_definitions(devices):
    options = [ConfigOptions(), ConfigOptions(cost_model="paper"), ConfigOptions(powers_of_two=True, min_shard=3),
               ConfigOptions(spatial_split=True, cost_model="paper", min_shard=2)]
    for layer, opts in itertools.product(_some_layers(), options):
        for d in layer.dims:
            if layer.name != "prime":  # the definition would try two billion numbers
                assert split_factors(layer, d, devices, opts) == _brute_split_factors(layer, d, devices, opts)
        rows = layer_configs(layer, devices, opts)
        assert count_configs(layer, devices, opts) == len(rows) == len({tuple(r) for r in rows})


def test_split_factors_are_fast_for_huge_dimensions_and_clusters():
    layer = ops.elementwise("prime", [2**31 - 1, 2**30], "ab")
    # Trying every number up to 2**31 looped for minutes (no duration asserted: a regression shows as a test
    # that runs for minutes).
    assert split_factors(layer, "a", MAX_SEARCH_DEVICES, ConfigOptions(cost_model="paper")) == [1]
    assert split_factors(layer, "b", MAX_SEARCH_DEVICES) == [2**k for k in range(21)]
    assert len(layer_configs(layer, MAX_SEARCH_DEVICES)) == 21
    for devices in (3_000_000_000, MAX_SEARCH_DEVICES + 1):
        with pytest.raises(ConfigurationError, match=r"at most 1,048,576 = 2\*\*20 devices"):
            split_factors(layer, "b", devices)
        with pytest.raises(ConfigurationError, match="2..20 devices"):
            layer_configs(layer, devices)


def test_a_layer_of_twenty_dimensions_is_refused_before_its_configurations_are_listed():
    layer = ops.elementwise("e", [2] * 20, "abcdefghijklmnopqrst", inputs=1)
    assert count_configs(layer, 1024) == sum(math.comb(20, k) for k in range(11)) > MAX_LAYER_CONFIGS
    error, peak = _peak_bytes(lambda: layer_configs(layer, 1024))
    assert isinstance(error, ConfigurationError), error
    message = str(error)
    assert "'e'" in message and "616,666 configurations" in message and f"{MAX_LAYER_CONFIGS:,}" in message
    assert "fewer devices" in message and "powers_of_two=True" in message
    assert peak < 2**20
    big = ops.elementwise("big", [4] * 20, "abcdefghijklmnopqrst", inputs=1)
    error, peak = _peak_bytes(lambda: layer_configs(big, 1024))
    assert isinstance(error, ConfigurationError) and "14,279,415 configurations" in str(error), error
    assert peak < 2**20  # refused from the count: listing them took gigabytes


def test_the_cli_refuses_a_tiny_file_of_a_twenty_dimension_layer(tmp_path, capsys):
    path = tmp_path / "wide20.json"
    path.write_text(json.dumps({"format": "pase-graph", "version": 1, "name": "wide20", "layers": [
        {"name": "e", "op": "Elementwise", "params": {"shape": [2] * 20, "dims": "abcdefghijklmnopqrst", "inputs": 1},
         "inputs": []}]}))
    assert path.stat().st_size < 400
    assert main(["solve", str(path), "--devices", "1024"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pase: error: layer 'e'") and "616,666 configurations" in err and "Traceback" not in err
