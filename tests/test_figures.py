"""Figure builders, graph views and tables of the app, without Streamlit."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from pase import ops as L
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.planner import PlanOptions, evaluate, parallelism_kind, plan
from ui import figures as F
from ui.fmt import compact_config, config_str, fmt_bytes, fmt_count, fmt_time
from ui.graphview import (auto_group_depth, build_graph_view, group_key, groups_of,
                          layered_layout)
from pase.models.teaching import small_graph
from ui.learnkit import ORDERING_FUNCS, gemm_communication, gemm_cost, gemm_costs, walk
from ui.tables import comparison_table, differing_layers, strategy_table, totals_table

CLUSTER = Cluster(devices=4, peak_flops=10e12, bandwidth_Bps=16e9, name="test")


def module_graph(blocks: int = 3, width: int = 64) -> Graph:
    """stem -> blocks of (two branches -> concat -> fc) -> head, with dotted module names."""
    g = Graph("modules")
    g.add_layer(L.fully_connected("stem", b=32, n=width, c=width))
    prev = "stem"
    for i in range(blocks):
        p = f"block{i}"
        g.add_layer(L.fully_connected(f"{p}.left", b=32, n=width, c=width), [prev])
        g.add_layer(L.fully_connected(f"{p}.right.a", b=32, n=width, c=width), [prev])
        g.add_layer(L.fully_connected(f"{p}.right.b", b=32, n=width, c=width), [f"{p}.right.a"])
        g.add_layer(L.concat(f"{p}.cat", [(32, width)] * 2, ("b", "n"), "n"), [f"{p}.left", f"{p}.right.b"])
        g.add_layer(L.fully_connected(f"{p}.proj", b=32, n=width, c=2 * width), [f"{p}.cat"])
        prev = f"{p}.proj"
    g.add_layer(L.fully_connected("head", b=32, n=16, c=width), [prev])
    g.add_layer(L.softmax_cross_entropy("loss", (32, 16), ("b", "n")), ["head"])
    g.validate()
    return g


@pytest.fixture(scope="module")
def graph():
    return module_graph()


@pytest.fixture(scope="module")
def solved(graph):
    return plan(graph, CLUSTER, PlanOptions(memory_limit_bytes=None))


@pytest.fixture(scope="module")
def data_parallel(graph):
    from pase.analysis.baselines import data_parallel

    return data_parallel(graph, CLUSTER)


# -- formatting ----------------------------------------------------------------------------------


def test_formatting():
    assert fmt_time(0.0123) == "12.3 ms" and fmt_time(2.5) == "2.5 s" and fmt_time(3e-6) == "3 µs"
    assert fmt_time(0) == "0 s"
    assert fmt_count(1_500_000) == "1.5M" and fmt_count(12) == "12"
    assert fmt_bytes(2048) == "2 KiB"
    assert config_str((1, 4, 8)) == "(1, 4, 8)"
    assert compact_config(("b", "n", "c"), (1, 4, 8)) == "n4·c8"
    assert compact_config(("b", "n"), (1, 1)) == "1"


# -- graph view ----------------------------------------------------------------------------------


def test_group_keys():
    assert group_key("block0.right.a", 1) == "block0"
    assert group_key("block0.right.a", 2) == "block0.right"
    assert group_key("stem", 1) == "stem"
    assert group_key("block0.right.a", None) == "block0.right.a"
    names = ["stem", "block0.left", "block0.right.a", "block1.left"]
    assert groups_of(names, 1) == {"stem": ["stem"], "block0": ["block0.left", "block0.right.a"],
                                   "block1": ["block1.left"]}
    assert auto_group_depth(names, target=3) == 1
    assert auto_group_depth(names, target=10) == 2


def test_layered_layout_puts_every_edge_downwards():
    import networkx as nx

    g = nx.gnp_random_graph(40, 0.1, seed=3, directed=True)
    dag = nx.DiGraph([(u, v) for u, v in g.edges if u < v])
    dag.add_nodes_from(range(40))
    pos = layered_layout(dag)
    assert set(pos) == set(dag.nodes)
    assert all(pos[u][1] > pos[v][1] for u, v in dag.edges), "producers above consumers"
    rows = {}
    for n, (x, y) in pos.items():
        rows.setdefault(y, []).append(x)
    for xs in rows.values():
        assert len(set(xs)) == len(xs), "no two nodes of a row overlap"


def test_edge_costs_add_up_to_each_layers_edge_time(solved, data_parallel):
    for p in (solved, data_parallel):
        costs = p.edge_costs_s
        incoming = {}
        for (_, dst), t in costs.items():
            assert t >= 0
            incoming[dst] = incoming.get(dst, 0.0) + t
        for row in p.layers:
            assert incoming.get(row.name, 0.0) == pytest.approx(row.edge_comm_s, rel=1e-9, abs=1e-15)


def test_edge_costs_on_a_two_level_cluster(graph):
    two = Cluster(devices=8, peak_flops=10e12, bandwidth_Bps=100e9, devices_per_node=2, inter_bandwidth_Bps=5e9)
    p = plan(graph, two, PlanOptions(memory_limit_bytes=None))
    costs = p.edge_costs_s
    for row in p.layers:
        got = sum(t for (_, dst), t in costs.items() if dst == row.name)
        assert got == pytest.approx(row.edge_comm_s, rel=1e-9, abs=1e-15)


def test_view_of_every_layer(graph, solved):
    view = build_graph_view(graph, solved)
    assert len(view.nodes) == len(graph) and not view.grouped and view.solved
    assert {(e.src, e.dst) for e in view.edges} == {(e.src, e.dst) for e in graph.edges}
    for node in view.nodes:
        row = next(r for r in solved.layers if r.name == node.key)
        assert node.kind == parallelism_kind(row.dims, row.config)
        assert node.label == compact_config(row.dims, row.config)
        assert row.name in node.hover and config_str(row.config) in node.hover


def test_grouped_view_keeps_costs_and_can_expand(graph, solved):
    view = build_graph_view(graph, solved, depth=1)
    keys = {n.key for n in view.nodes}
    assert keys == {"stem", "block0", "block1", "block2", "head", "loss"}
    assert sum(n.total_s for n in view.nodes) == pytest.approx(sum(r.total_s for r in solved.layers))
    block = view.node("block1")
    assert block.is_group and len(block.members) == 5
    assert view.node_of_layer("block1.right.a").key == "block1"
    # Edges inside a group disappear; the chain between groups remains.
    assert ("block0", "block1") in {(e.src, e.dst) for e in view.edges}
    assert all(e.src != e.dst for e in view.edges)

    expanded = build_graph_view(graph, solved, depth=1, expanded=["block1"])
    keys = {n.key for n in expanded.nodes}
    assert "block1" not in keys and "block1.right.a" in keys and "block0" in keys
    assert sum(n.total_s for n in expanded.nodes) == pytest.approx(sum(r.total_s for r in solved.layers))


def test_unsolved_view(graph):
    view = build_graph_view(graph, None, depth=None, config_counts={"stem": 7})
    assert not view.solved and {n.kind for n in view.nodes} == {"unsolved"}
    assert "7 configurations" in view.node("stem").hover
    assert all(e.cost_s == 0 for e in view.edges)


# -- figures -------------------------------------------------------------------------------------


def _traces(fig, **match):
    return [t for t in fig.data if all(getattr(t, k) == v for k, v in match.items())]


def test_strategy_graph_figure(graph, solved):
    view = build_graph_view(graph, solved)
    fig = F.strategy_graph_figure(view)
    assert isinstance(fig, go.Figure)
    node_traces = _traces(fig, legendgroup="kinds")
    assert sum(len(t.x) for t in node_traces) == len(graph)
    assert {t.name for t in node_traces} <= set(F.KIND_COLORS)
    for t in node_traces:
        assert t.marker.color == F.KIND_COLORS[t.name]
    edge_traces = _traces(fig, legendgroup="edges")
    # Line traces join edges with None separators: three points per edge.
    assert sum(len(t.x) for t in edge_traces) == 3 * len(view.edges)
    assert len(edge_traces) <= 6


def test_strategy_graph_of_300_layers_is_a_few_traces():
    g = module_graph(blocks=60)
    assert len(g) > max(300, F.MAX_LABELLED_NODES)
    c = Cluster(devices=2, peak_flops=10e12, bandwidth_Bps=16e9)
    p = evaluate(g, c, {layer.name: tuple(2 if d == "b" else 1 for d in layer.dims) for layer in g})
    fig = F.strategy_graph_figure(build_graph_view(g, p))
    assert len(fig.data) <= 14
    assert not any(t.mode and "text" in t.mode for t in _traces(fig, legendgroup="kinds")), \
        "labels left to the hover above the label limit"


def test_find_highlights_and_zooms(graph, solved):
    view = build_graph_view(graph, solved)
    fig = F.strategy_graph_figure(view, highlight="block1.cat")
    (ring,) = _traces(fig, name="found")
    node = view.node("block1.cat")
    assert (ring.x[0], ring.y[0]) == (node.x, node.y)
    lo, hi = fig.layout.yaxis.range
    assert lo < node.y < hi and hi - lo < view.generations + 2


def test_cost_breakdown_sorts_and_stacks(solved):
    fig = F.cost_breakdown_figure(solved.layers, sort_by="total", limit=5)
    assert fig.layout.barmode == "stack" and len(fig.data) == 3
    names = list(fig.data[0].y)
    assert len(names) == 5
    totals = {r.name: r.total_s for r in solved.layers}
    assert [totals[n] for n in names] == sorted(totals.values(), reverse=True)[:5]
    for sort_by in F.SORT_KEYS:
        assert len(F.sort_layers(solved.layers, sort_by)) == len(solved.layers)
    with pytest.raises(ValueError):
        F.sort_layers(solved.layers, "nonsense")
    ordered = F.cost_breakdown_figure(solved.layers)
    assert list(ordered.data[0].y) == [r.name for r in solved.layers]


def test_totals_and_layer_comparison(solved, data_parallel):
    plans = {"PaSE": solved, "data parallel": data_parallel}
    fig = F.totals_figure({k: p.totals_s() for k, p in plans.items()}, speedups={"data parallel": 1.5})
    assert list(fig.data[0].y) == ["PaSE", "data parallel"]
    assert fig.layout.annotations[0].text.strip() == "1.50×"
    differ = differing_layers(plans, "PaSE")
    fig = F.layer_compare_figure({k: p.layers for k, p in plans.items()}, only=differ)
    assert len(fig.data) == 2 and list(fig.data[0].y) == [r.name for r in solved.layers if r.name in differ]


def test_sweep_and_split_changes(graph):
    from pase.analysis.sweep import sweep

    records = sweep(graph, [1, 2, 4], CLUSTER)
    fig = F.sweep_figure(records)
    pase_lines = [t for t in fig.data if t.name == "PaSE"]
    assert len(pase_lines) == 2  # step time and speedup
    assert list(pase_lines[0].x) == [1, 2, 4]
    configs = {r["devices"]: r["configs"] for r in records if r["strategy"] == "PaSE"}
    layers = [(layer.name, layer.dims) for layer in graph.layers]
    heat = F.split_changes_figure(layers, configs)
    (trace,) = heat.data
    assert np.shape(trace.z) == (len(layers), 3)
    assert list(trace.x) == ["1", "2", "4"]


def test_gemm_figures():
    fig = F.gemm_cube_figure((64, 32, 16), (2, 2, 4))
    mesh, centres = fig.data
    assert len(mesh.i) == 12 * 16 and len(centres.x) == 16
    assert len(set(mesh.facecolor)) == 16, "one colour per device"
    # Every block fits inside the box.
    assert max(mesh.x) <= 64 and max(mesh.y) <= 32 and max(mesh.z) <= 16 and min(mesh.x) >= 0
    tensors = F.gemm_tensors_figure((2, 1, 4))
    a, b, c = tensors.data
    assert np.shape(a.z) == (2, 4) and np.shape(b.z) == (4, 1) and np.shape(c.z) == (2, 1)
    assert np.all(np.array(c.z) == 4), "each C block is a partial sum on the 4 k-split devices"
    assert np.all(np.array(b.z) == 2), "each B block is replicated on the 2 i-split devices"


def test_search_figures():
    g = small_graph()
    steps = walk(g, 4, ConfigOptions(), "GenerateSeq")
    from ui.learnkit import small_layout

    fig = F.search_step_figure(g.nx, small_layout(g), done=["loss"], current="fc", dependent=["cat"],
                               connected=["loss"])
    names = {t.name for t in fig.data}
    assert {"v(i): current", "D(i): dependent set", "X(i): connected set"} <= names
    fig = F.dependent_sets_figure({"GenerateSeq": [len(s.dependent) for s in steps]}, log_y=True)
    assert fig.layout.yaxis.type == "log" and len(fig.data[0].y) == len(g)


# -- learn material ------------------------------------------------------------------------------


def test_gemm_costs_come_from_the_cost_model():
    c = Cluster(devices=8, peak_flops=10e12, bandwidth_Bps=16e9)
    one = gemm_cost((256, 256, 256), (1, 1, 1), c.with_devices(1))
    split = gemm_cost((256, 256, 256), (2, 2, 2), c)
    assert split.compute_flops == pytest.approx(one.compute_flops / 8)
    assert one.intra_comm_s == 0 and split.intra_comm_s > 0
    rows = gemm_costs((256, 256, 256), c)
    assert any(r.config == split.config for r in rows)
    assert "k split 4" in gemm_communication((1, 1, 4))[0]
    assert "Nothing split" in gemm_communication((1, 1, 1))[0]


def test_walks_match_the_paper():
    g = small_graph()
    gs = walk(g, 4, ConfigOptions(), "GenerateSeq")
    bfs = walk(g, 4, ConfigOptions(), "breadth-first")
    assert sorted(s.vertex for s in gs) == sorted(layer.name for layer in g)
    assert bfs[0].vertex == "in" and set(bfs[0].dependent) == {"a", "b", "c"}
    assert max(len(s.dependent) for s in gs) < max(len(s.dependent) for s in bfs)
    assert gs[-1].dependent == () and bfs[-1].dependent == ()
    assert set(ORDERING_FUNCS) == {"GenerateSeq", "breadth-first"}
    # X(i) of the last vertex is everything eliminated before it.
    assert set(gs[-1].connected) == {s.vertex for s in gs[:-1]}


# -- tables --------------------------------------------------------------------------------------


def test_tables(solved, data_parallel):
    t = strategy_table(solved)
    assert list(t["layer"]) == [r.name for r in solved.layers]
    assert t["total_ms"].sum() == pytest.approx(solved.step_time_s * 1e3, rel=1e-6)
    plans = {"PaSE": solved, "data parallel": data_parallel}
    cmp = comparison_table(plans, "PaSE")
    assert set(cmp.loc[cmp["differs"], "layer"]) == set(differing_layers(plans, "PaSE"))
    totals = totals_table(plans, "PaSE")
    assert totals.loc[totals["strategy"] == "PaSE", "PaSE speedup"].item() == pytest.approx(1.0)
    assert (totals["PaSE speedup"] >= 1 - 1e-9).all()


def test_memory_figure_adds_up_to_the_total_and_marks_capacity(graph):
    from pase.hardware.cluster import Cluster
    from ui.figures import memory_figure

    p = plan(graph, Cluster(8, 10e12, 16e9, memory_bytes=80e9))
    fig = memory_figure(p.memory, limit=5)
    total = sum(t.x[0] for t in fig.data if list(t.y) == ["total"])
    assert total * 1e9 == pytest.approx(p.memory_per_device_bytes)
    layer_traces = [t for t in fig.data if list(t.y) != ["total"]]
    assert all(len(t.y) == min(5, len(p.layers)) for t in layer_traces)
    assert any("capacity" in (a.text or "") for a in fig.layout.annotations)
