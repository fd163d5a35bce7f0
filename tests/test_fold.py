"""Repeated blocks folded by min-plus chains (pase.search.fold): the same optimum as the unfolded search,
checked against brute force on small random block graphs and against pase.search.exact on the samples."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pase.cli import main
from pase.hardware.cluster import preset
from pase.model.cost import build_cost_model
from pase.models import sample
from pase.search import exact, fold
from pase.ir.costgraph import CostGraph
from pase.search.solver import exact as exact_solver


def _block_graph(rng, blocks: int, size: int, configs: int, shared: bool) -> CostGraph:
    """Head -> ``blocks`` identical blocks of ``size`` vertices (a chain inside, a skip edge from the
    previous port to the block's last vertex) -> tail; with ``shared``, a vertex before the head that the
    first vertex of every block reads. Random costs, identical (fresh copies) in every block."""
    node_costs, edges = [], []

    def vertex(cost):
        node_costs.append(np.array(cost, dtype=float))
        return len(node_costs) - 1

    source = vertex(rng.uniform(0, 5, configs)) if shared else None
    head = vertex(rng.uniform(0, 5, configs))
    if shared:
        edges.append((source, head, rng.uniform(0, 5, (configs, configs))))
    block_costs = [rng.uniform(0, 5, configs) for _ in range(size)]
    block_edges = [rng.uniform(0, 5, (configs, configs)) for _ in range(size + 1)]
    read = rng.uniform(0, 5, (configs, configs))
    port = head
    for _ in range(blocks):
        ids = [vertex(c.copy()) for c in block_costs]
        edges.append((port, ids[0], block_edges[0].copy()))
        edges += [(a, b, m.copy()) for a, b, m in zip(ids, ids[1:], block_edges[1:size], strict=False)]
        if size > 1:
            edges.append((port, ids[-1], block_edges[size].copy()))
        if shared:
            edges.append((source, ids[0], read.copy()))
        port = ids[-1]
    tail = vertex(rng.uniform(0, 5, configs))
    edges.append((port, tail, rng.uniform(0, 5, (configs, configs))))
    return CostGraph(tuple(node_costs), tuple(edges))


def _brute_force(g: CostGraph) -> float:
    """Least objective over every assignment, by summing each term over the full grid of assignments."""
    n = g.num_nodes
    total = np.zeros(g.config_counts)
    for v, c in enumerate(g.node_costs):
        total += c.reshape([-1 if x == v else 1 for x in range(n)])
    for u, v, m in g.edges:
        total += (m if u < v else m.T).reshape([m.shape[[u, v].index(x)] if x in (u, v) else 1 for x in range(n)])
    best = float(total.min())
    # Cross-check the grid against the objective itself at its minimum.
    assert g.cost_of(list(np.unravel_index(int(total.argmin()), total.shape))) == pytest.approx(best, rel=1e-12)
    return best


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_folded_chain_equals_brute_force(seed, shared):
    rng = np.random.default_rng(seed)
    blocks, size, configs = int(rng.integers(3, 7)), int(rng.integers(2, 4)), int(rng.integers(2, 5))
    while configs ** (blocks * size + 2 + shared) > 5e6:  # keep the enumeration small
        configs -= 1
    g = _block_graph(rng, blocks, size, configs, shared)
    chain = fold.find_chain(g)
    assert chain is not None and chain.blocks >= 2 and chain.period == size
    assert chain.shared == ((0,) if shared else ())
    f = fold.fold_chain(g, chain, memory_budget_bytes=1 << 30, always=True)
    inner = exact.solve(f.graph)
    assignment = f.expand(inner.assignment)
    best = _brute_force(g)
    assert g.cost_of(assignment) == pytest.approx(best, rel=1e-12)
    assert inner.cost == pytest.approx(best, rel=1e-12)  # the folded graph's optimum is the same


@pytest.mark.parametrize("seed", range(4))
def test_solve_equals_brute_force_on_long_chains(seed):
    """A chain of 7 to 20 blocks (products by repeated squaring, every binary digit pattern) of one vertex."""
    rng = np.random.default_rng(100 + seed)
    blocks = int(rng.integers(7, 15))
    g = _block_graph(rng, blocks, 1, 2, False)
    chain = fold.find_chain(g)
    assert chain is not None and chain.blocks >= blocks - 1
    f = fold.fold_chain(g, chain, memory_budget_bytes=1 << 30, always=True)
    assignment = f.expand(exact.solve(f.graph).assignment)
    assert g.cost_of(assignment) == pytest.approx(_brute_force(g), rel=1e-12)


def test_blocks_that_differ_in_one_cost_are_not_folded():
    rng = np.random.default_rng(7)
    g = _block_graph(rng, 4, 3, 3, False)
    assert fold.find_chain(g).blocks >= 3
    costs = [c.copy() for c in g.node_costs]
    costs[7][1] += 1e-9  # the first vertex of the third block
    h = CostGraph(tuple(costs), g.edges)
    chain = fold.find_chain(h)
    assert chain is None or not (chain.start < 7 <= chain.end)
    edges = [(u, v, m.copy()) for u, v, m in g.edges]
    u, v, m = edges[5]
    m[0, 0] += 1.0
    chain = fold.find_chain(CostGraph(g.node_costs, tuple(edges)))
    assert chain is None or not (chain.start < max(u, v) <= chain.end)


def test_a_fold_over_the_memory_budget_is_not_made():
    g = _block_graph(np.random.default_rng(3), 5, 2, 3, True)
    assert fold.fold_chain(g, fold.find_chain(g), memory_budget_bytes=100, always=True) is None


@pytest.mark.parametrize("name", ["gpt", "transformer", "resnet101"])
@pytest.mark.parametrize("devices", [8, 16])
def test_folded_search_equals_the_unfolded_one_on_the_samples(name, devices):
    g = build_cost_model(sample(name), preset("dgx-a100", devices=devices, calibrated=False)).cost_graph()
    plain = exact.solve(g)
    folded = exact_solver()(g)
    assert folded.cost == pytest.approx(plain.cost, rel=1e-9)
    assert g.cost_of(folded.assignment) == folded.cost
    if name == "gpt" and devices == 16:  # at 8 devices its blocks are too small for folding to pay
        assert isinstance(folded, fold.FoldedSearchResult) and folded.blocks_folded >= 10
    # Every chain folded, paying or not (resnet101's stages are too short to pay on few devices).
    graph, folds = g, []
    while (chain := fold.find_chain(graph)) is not None:
        folds.append(fold.fold_chain(graph, chain, memory_budget_bytes=1 << 32, always=True))
        graph = folds[-1].graph
    assert sum(f.chain.blocks for f in folds) >= 9
    assignment = exact.solve(graph).assignment
    for f in reversed(folds):
        assignment = f.expand(assignment)
    assert g.cost_of(assignment) == pytest.approx(plain.cost, rel=1e-9)


def test_solve_folds_reports_progress_and_matches_the_plain_search():
    g = _block_graph(np.random.default_rng(11), 6, 3, 4, True)
    calls = []
    result = fold.solve(g, progress=lambda done, total: calls.append((done, total)))
    plain = exact.solve(g)
    assert result.cost == pytest.approx(plain.cost, rel=1e-12) and g.cost_of(result.assignment) == result.cost
    assert calls[-1] == (g.num_nodes, g.num_nodes)
    # An explicit ordering names every vertex: that search runs unfolded.
    assert not isinstance(exact_solver(list(range(g.num_nodes)))(g), fold.FoldedSearchResult)


def test_solve_stats_report_the_folded_blocks(capsys):
    assert main(["solve", "gpt", "-p", "64", "--cluster", "dgx-a100", "--peak-rates", "--stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    assert stats["blocks_folded"] >= 10 and stats["block_tables"] >= 1 and stats["block_table_entries"] > 0
