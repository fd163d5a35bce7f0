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
from ui.figures.graph import NOMINAL_PLOT_PX, PLOT_DOMAIN
from ui.fmt import compact_config, config_str, fmt_bytes, fmt_count, fmt_time
from ui.graphview import (EdgeInfo, GraphView, NodeInfo, auto_group_depth, build_graph_view, group_key,
                          groups_of, layered_layout, short_name)
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

    lr = layered_layout(dag, direction="LR")
    assert all(lr[u][0] < lr[v][0] for u, v in dag.edges), "producers left of consumers"
    assert {x for x, _ in lr.values()} == {-y for _, y in pos.values()}


def test_layered_layout_keeps_chains_straight_and_branches_side_by_side():
    import networkx as nx

    # stem -> three branches of different lengths -> join -> tail
    g = nx.DiGraph([("stem", "a1"), ("stem", "b1"), ("stem", "c1"), ("b1", "b2"), ("c1", "c2"), ("c2", "c3"),
                    ("a1", "join"), ("b2", "join"), ("c3", "join"), ("join", "tail")])
    pos = layered_layout(g, direction="LR")
    assert pos["stem"][1] == pos["join"][1] == pos["tail"][1], "the trunk stays on one line"
    assert pos["b1"][1] == pos["b2"][1] and pos["c1"][1] == pos["c2"][1] == pos["c3"][1], "branches stay straight"
    assert len({pos[n][1] for n in ("a1", "b1", "c1")}) == 3, "branches side by side"


def test_layered_layout_puts_an_input_just_before_its_first_consumer():
    import networkx as nx

    # A decoder's embedding: an input consumed only at the fourth generation, and one consumed by two layers.
    g = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "d"), ("e", "d"), ("f", "c"), ("f", "d")])
    pos = layered_layout(g, direction="LR")
    assert pos["e"][0] == pos["d"][0] - 1, "one column before its consumer, not in the first"
    assert pos["f"][0] == pos["c"][0] - 1, "before the first of its consumers"
    assert pos["a"][0] == 0 and all(pos[u][0] < pos[v][0] for u, v in g.edges)
    assert len({pos[n] for n in g}) == len(g), "no two nodes at one place"


def test_short_names():
    assert short_name("Mixed_5b.branch3x3dbl_2.bn") == "branch3x3dbl_2.bn"
    assert short_name("h.0.attn.q") == "attn.q"
    assert short_name("fc") == "fc"
    assert short_name("encoder.0.self_attention_projection") == "self_att…rojection"
    assert all(len(short_name(n)) <= 18 for n in ("x" * 40, "a.b" * 20, "model.layers.17.mlp.down_proj"))


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
        assert node.name == short_name(row.name) and node.op == row.op


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
    # Line traces join edges (straight or elbows: 2 or 4 points) with None separators.
    assert sum(x is None for t in edge_traces for x in t.x) == len(view.edges)
    assert all(len(t.x) == len(t.customdata) for t in edge_traces)
    assert len(edge_traces) <= F.EDGE_LEVELS + 1
    labels = [text for t in node_traces for text in t.text]
    assert all("<br>" in text for text in labels), "name, op and split on every node"
    assert node_traces[0].textfont.size >= 11
    most = max(e.cost_s for e in view.edges)
    scales = _traces(fig, name="edge scale")
    assert len(scales) == (most > 0)
    for scale in scales:
        assert scale.marker.showscale and scale.marker.cmin == 0 and scale.marker.cmax == pytest.approx(1e3 * most)


def test_strategy_graph_of_300_layers_is_a_few_traces():
    g = module_graph(blocks=125)
    assert len(g) > max(300, F.MAX_LABELLED_NODES)
    c = Cluster(devices=2, peak_flops=10e12, bandwidth_Bps=16e9)
    p = evaluate(g, c, {layer.name: tuple(2 if d == "b" else 1 for d in layer.dims) for layer in g})
    fig = F.strategy_graph_figure(build_graph_view(g, p))
    assert len(fig.data) <= len(F.KINDS) + F.EDGE_LEVELS + 3
    assert not any(t.mode and "text" in t.mode for t in _traces(fig, legendgroup="kinds")), \
        "labels left to the hover above the label limit"


def test_find_highlights_and_zooms(graph, solved):
    view = build_graph_view(graph, solved)
    fig = F.strategy_graph_figure(view, highlight="block1.cat")
    (ring,) = _traces(fig, name="found")
    node = view.node("block1.cat")
    assert (ring.x[0], ring.y[0]) == (node.x, node.y)
    lo, hi = fig.layout.yaxis.range
    assert lo < node.y < hi
    lo, hi = fig.layout.xaxis.range
    assert lo < node.x < hi


# -- legibility: labels that do not overlap, edge colours on an absolute scale ---------------------

WINDOW = (1500, 1000)


def _label_boxes(fig, width=WINDOW[0]):
    """Each node label's box in pixels, estimated from its text and font size (0.6 em a character,
    1.25 em a line) and its node's position on the figure's axes, for a window ``width`` wide."""
    import html
    import re

    lay = fig.layout
    height = lay.height or WINDOW[1]
    assert height <= WINDOW[1], "the graph fits the window's height"
    d0, d1 = lay.xaxis.domain or (0, 1)
    plot_w = (width - lay.margin.l - lay.margin.r) * (d1 - d0)
    plot_h = height - lay.margin.t - lay.margin.b
    (x0, x1), (y0, y1) = lay.xaxis.range, lay.yaxis.range
    boxes = []
    for t in _traces(fig, legendgroup="kinds"):
        assert t.text is not None, "labels are drawn"
        n = len(t.x)
        sizes = list(t.marker.size) if isinstance(t.marker.size, (list, tuple)) else [t.marker.size] * n
        where = list(t.textposition) if isinstance(t.textposition, (list, tuple)) else [t.textposition] * n
        font = t.textfont.size
        for x, y, text, size, at in zip(t.x, t.y, t.text, sizes, where):
            lines = [html.unescape(re.sub("<[^>]+>", "", line)) for line in text.split("<br>")]
            w, h = max(map(len, lines)) * 0.6 * font, len(lines) * 1.25 * font
            px, py = (x - x0) / (x1 - x0) * plot_w, (y1 - y) / (y1 - y0) * plot_h
            # plotly.js (Drawing.textPointPosition) sets text off a marker's centre by its radius / 0.8 + 1 px on
            # each side its position names, and centres it on the others.
            r = size / 2 / 0.8 + 1
            vertical, horizontal = at.split()
            top = {"bottom": py + r, "top": py - r - h, "middle": py - h / 2}[vertical]
            left = {"center": px - w / 2, "right": px + r, "left": px - r - w}[horizontal]
            boxes.append((left, top, left + w, top + h, lines[0]))
    return boxes


def _edge_points(fig, width=WINDOW[0], step_px=0.5):
    """Each drawn edge (its id) with points every ``step_px`` along its polyline, in the pixels of
    :func:`_label_boxes`; ``straight``: along the line between its ends' nodes instead (the drawing before
    edges were routed round labels)."""
    lay = fig.layout
    d0, d1 = lay.xaxis.domain or (0, 1)
    plot_w = (width - lay.margin.l - lay.margin.r) * (d1 - d0)
    plot_h = (lay.height or WINDOW[1]) - lay.margin.t - lay.margin.b
    (x0, x1), (y0, y1) = lay.xaxis.range, lay.yaxis.range

    def px(x, y):
        return np.array([(x - x0) / (x1 - x0) * plot_w, (y1 - y) / (y1 - y0) * plot_h])

    drawn, straight = {}, {}
    for t in _traces(fig, legendgroup="edges"):
        polyline = []
        for x, y, key in zip(t.x, t.y, t.customdata):
            if x is not None:
                polyline.append((key, px(x, y)))
                continue
            for out, corners in ((drawn, [p for _, p in polyline]), (straight, [polyline[0][1], polyline[-1][1]])):
                pts = [a + (b - a) * f for a, b in zip(corners, corners[1:])
                       for f in np.linspace(0, 1, max(2, int(np.linalg.norm(b - a) / step_px) + 1))]
                out[polyline[0][0]] = np.array(pts)
            polyline = []
    return drawn, straight


def _crossings(boxes, edges):
    """(edge, label) pairs where a point of the edge lies strictly inside the label's box."""
    out = []
    for key, pts in edges.items():
        for left, top, right, bottom, label in boxes:
            inside = (pts[:, 0] > left) & (pts[:, 0] < right) & (pts[:, 1] > top) & (pts[:, 1] < bottom)
            if inside.any():
                out.append((key, label))
    return out


def _overlapping(boxes):
    boxes = sorted(boxes)  # by left edge: only boxes starting before one ends can meet it
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if b[0] >= a[2]:
                break
            if a[1] < b[3] and b[1] < a[3]:
                out.append((a[4], b[4]))
    return out


@pytest.fixture(scope="module")
def paper_plans():
    """Sample graphs solved at p=64 (about 0.3 s for Inception, 1.5 s each for the Transformer and GPT)."""
    import pase

    cluster = pase.preset("paper-model", devices=64)
    cache = {}

    def get(name):
        if name not in cache:
            g = pase.sample(name)
            cache[name] = (g, pase.plan(g, cluster))
        return cache[name]

    return get


@pytest.mark.parametrize("name, depth", [("inception3", None), ("transformer", 2), ("gpt", 2), ("gpt", None)])
def test_node_labels_do_not_overlap(name, depth, paper_plans):
    g, p = paper_plans(name)
    view = build_graph_view(g, p, depth=depth)
    fig = F.strategy_graph_figure(view)
    boxes = _label_boxes(fig)
    assert len(boxes) == len(view.nodes)
    assert min(b[2] - b[0] for b in boxes) > 0
    assert not _overlapping(boxes), _overlapping(boxes)[:5]
    # The graph runs left to right over the width: at least 10 columns show at once (all, if fewer).
    lo, hi = fig.layout.xaxis.range
    assert hi - lo >= min(10, view.generations)
    assert {n.x for n in view.nodes} == set(map(float, range(view.generations)))
    if depth is None:  # Inception's branches, GPT's q/k/v: side by side in one column
        assert max(sum(n.x == x for n in view.nodes) for x in range(view.generations)) >= 3


@pytest.mark.parametrize("name, depth", [("transformer", 2), ("transformer", None), ("gpt", 2), ("gpt", None),
                                         ("inception3", None)])
@pytest.mark.parametrize("width", [round(NOMINAL_PLOT_PX / PLOT_DOMAIN[1]) + 20, WINDOW[0]])
def test_edges_keep_clear_of_node_labels(name, depth, width, paper_plans):
    """Issue 30: no edge runs through a node's label, in a window of the plot's nominal width and a wider one
    (the ungrouped Inception and Transformer, 200-odd nodes, keep a few where wide labels fill a gap from both
    sides: a tenth at most of what straight edges crossed); every edge runs from its source to its target,
    straight or as an elbow of horizontal and vertical runs."""
    g, p = paper_plans(name)
    view = build_graph_view(g, p, depth=depth)
    fig = F.strategy_graph_figure(view)
    boxes = _label_boxes(fig, width)
    assert not _overlapping(boxes), _overlapping(boxes)[:5]
    drawn, straight = _edge_points(fig, width)
    assert len(drawn) == len(view.edges)
    ends = {f"{e.src}\u2192{e.dst}": (e.src, e.dst) for e in view.edges}
    pos = {n.key: (n.x, n.y) for n in view.nodes}
    for t in _traces(fig, legendgroup="edges"):
        xs, ys, keys = list(t.x), list(t.y), list(t.customdata)
        starts = [0] + [i + 1 for i, x in enumerate(xs) if x is None][:-1]
        for i in starts:
            j = xs.index(None, i)
            src, dst = ends[keys[i]]
            assert (xs[i], ys[i]) == pos[src] and (xs[j - 1], ys[j - 1]) == pos[dst]
            corners = list(zip(xs[i:j], ys[i:j]))
            assert len(corners) == 2 or all(a[0] == b[0] or a[1] == b[1] for a, b in zip(corners, corners[1:]))
    crossed, before = _crossings(boxes, drawn), _crossings(boxes, straight)
    if name in ("inception3", "transformer") and depth is None:
        assert len(crossed) <= len(before) / 10, (len(before), crossed)
    else:
        assert not crossed, crossed


def test_the_explorers_llama3_view_keeps_edges_clear_of_labels():
    """Llama 3 8B as the explorer opens it (a node a block, the first block layer by layer): where issue 30 saw an
    edge through "0.ffn_norm" and "ffn.up", no edge crosses a label."""
    from pase.models import batch_builder

    g = batch_builder("llama3-8b")(8)
    first = next(k for k, ms in groups_of([layer.name for layer in g.layers], 2).items() if len(ms) > 1)
    view = build_graph_view(g, depth=2, expanded=[first])
    fig = F.strategy_graph_figure(view)
    boxes = _label_boxes(fig)
    drawn, straight = _edge_points(fig)
    assert _crossings(boxes, straight), "straight edges would cross labels here"
    assert not _crossings(boxes, drawn), _crossings(boxes, drawn)


def _luminance(color: str) -> float:
    import plotly.colors as pc

    r, g, b = pc.unlabel_rgb(pc.convert_colors_to_same_type(color, "rgb")[0][0])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_edge_colours_follow_their_times_on_an_absolute_scale():
    ms = [0.0, 0.5, 1.0, 1.0, 3.0, 5.0, 9.70, 9.79, 9.79]
    nodes = tuple(NodeInfo(f"n{i}", (f"n{i}",), "data", "1", "", 0.0, 0.0, 0.0, x=float(i), y=0.0)
                  for i in range(len(ms) + 1))
    edges = tuple(EdgeInfo(f"n{i}", f"n{i + 1}", t / 1e3) for i, t in enumerate(ms))
    fig = F.strategy_graph_figure(GraphView(nodes, edges, False, len(nodes)))
    colour, width = {}, {}
    for t in _traces(fig, legendgroup="edges"):
        for key in t.customdata:
            colour[key], width[key] = t.line.color, t.line.width
    by_time = [(t, colour[f"n{i}→n{i + 1}"], width[f"n{i}→n{i + 1}"]) for i, t in enumerate(ms)]
    assert by_time[2][1] == by_time[3][1] and by_time[7][1] == by_time[8][1], "equal times, equal colours"
    costly = [(t, _luminance(c), w) for t, c, w in by_time if t > 0]
    for (t0, l0, w0), (t1, l1, w1) in zip(costly, costly[1:]):
        assert l1 <= l0 and w1 >= w0, "darker and wider as the time grows"
    span = _luminance(F.edge_style(0)[0]) - _luminance(F.edge_style(F.EDGE_LEVELS - 1)[0])
    assert abs(_luminance(by_time[6][1]) - _luminance(by_time[7][1])) <= span / F.EDGE_LEVELS, \
        "9.70 ms and 9.79 ms look alike"
    assert _luminance(by_time[1][1]) - _luminance(by_time[6][1]) > span / 2, "0.5 ms and 9.7 ms do not"
    (scale,) = _traces(fig, name="edge scale")
    assert scale.marker.showscale and scale.marker.cmax == pytest.approx(9.79)


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
    assert totals.loc[totals["strategy"] == "PaSE", "PaSE speedup (×)"].item() == pytest.approx(1.0)
    assert (totals["PaSE speedup (×)"] >= 1 - 1e-9).all()


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


# -- one palette: colours keep one meaning on every page -----------------------------------------


def _bar_colours(fig) -> set[str]:
    return {t.marker.color for t in fig.data if isinstance(t, go.Bar)}


def test_compare_page_never_uses_one_colour_for_two_meanings(solved, data_parallel):
    from ui.palette import COST_COLORS, STRATEGY_COLORS

    plans = {"PaSE": solved, "data parallel": data_parallel, "Megatron": data_parallel, "your plan": solved,
             "someone's plan": data_parallel}
    totals = F.totals_figure({k: p.totals_s() for k, p in plans.items()})
    layers = F.layer_compare_figure({k: p.layers for k, p in plans.items()})
    costs = {t.name: t.marker.color for t in totals.data}
    strategies = {t.name: t.marker.color for t in layers.data}
    assert set(costs) == set(COST_COLORS) and set(strategies) == set(plans)
    assert len(set(costs.values())) == len(costs) and len(set(strategies.values())) == len(strategies)
    assert not set(costs.values()) & set(strategies.values()), "a cost component's colour is not a strategy's"
    assert not set(COST_COLORS.values()) & set(STRATEGY_COLORS.values())
    # The explorer's breakdown names the cost components in the same colours.
    breakdown = F.cost_breakdown_figure(solved.layers)
    assert {t.name: t.marker.color for t in breakdown.data} == costs


def _memory_report(graph, **changes):
    import dataclasses

    p = plan(graph, Cluster(8, 10e12, 16e9, memory_bytes=80e9))
    return dataclasses.replace(p.memory, **changes) if changes else p.memory


@pytest.mark.parametrize("reserve", [0.0, 2e9])
def test_memory_legend_lists_exactly_the_parts_drawn(graph, reserve):
    report = _memory_report(graph, reserved_bytes=reserve)
    fig = F.memory_figure(report, limit=5)
    drawn = {t.name for t in fig.data if isinstance(t, go.Bar) and any(x > 0 for x in t.x)}
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert sorted(legend) == sorted(drawn), "one legend entry per part with a non-zero bar"
    assert all(any(x > 0 for x in t.x) for t in fig.data if isinstance(t, go.Bar)), "no all-zero bars"
    expected = {label for field, (label, _) in F.MEMORY_PARTS.items() if report.totals()[field] > 0}
    assert set(legend) == expected
    assert ("reserve" in legend) == (reserve > 0) and "largest comm buffer" not in legend
    colours = {t.name: t.marker.color for t in fig.data}
    assert colours == {label: c for label, c in F.MEMORY_PARTS.values() if label in colours}


@pytest.mark.parametrize("limit", [1, 5, 40])
def test_memory_titles_clear_the_axes(graph, limit):
    fig = F.memory_figure(_memory_report(graph), limit=limit)
    m = fig.layout.margin
    plot_px = fig.layout.height - m.t - m.b
    top, rows = fig.layout.yaxis.domain, fig.layout.yaxis2.domain
    titles = {a.text: a for a in fig.layout.annotations if a.yref == "paper"}
    layers_title = titles[f"the {min(limit, len(graph.layers))} layers holding most"]
    assert layers_title.y == pytest.approx(rows[1]) and layers_title.yanchor == "bottom"
    # Below the total's bar: its tick labels (about 20 px), then the layers' title (about 22 px).
    assert (top[0] - rows[1]) * plot_px >= 60
    assert top[1] - top[0] > 0 and (top[1] - top[0]) * plot_px >= 40, "the total's bar keeps its height"
    # Above it: its own title, then the legend.
    assert (fig.layout.legend.y - 1) * plot_px >= 40 and m.t >= 80


def test_cube_colours_match_the_device_ids():
    from ui.palette import device_color

    for splits in ((2, 2, 4), (1, 2, 1), (4, 2, 2)):
        fig = F.gemm_cube_figure((64, 32, 16), splits)
        mesh, ids = fig.data
        blocks = len(ids.text)
        assert blocks == splits[0] * splits[1] * splits[2] and len(mesh.facecolor) == 12 * blocks
        label_colour = dict(zip(ids.text, ids.textfont.color))
        assert sorted(map(int, label_colour)) == list(range(blocks)), "every device id written once"
        for b, device in enumerate(ids.text):
            faces = set(mesh.facecolor[12 * b:12 * (b + 1)])
            assert faces == {label_colour[device]} == {device_color(int(device))}
            assert ids.marker.color[b] == label_colour[device]
            assert f"device {device}<br>" in ids.hovertext[b]


def test_learn_ordering_panels_share_one_legend():
    from ui.learnkit import small_layout

    g = small_graph()
    pos = small_layout(g)

    def legend(fig):
        return [(t.name, t.marker.color) for t in fig.data if t.showlegend is not False]

    for step in range(1, len(g) + 1):
        panels = []
        for name in ORDERING_FUNCS:
            steps = walk(g, 4, ConfigOptions(), name)
            s = steps[step - 1]
            panels.append(F.search_step_figure(g.nx, pos, done=[t.vertex for t in steps[:step - 1]],
                                               current=s.vertex, dependent=s.dependent, connected=s.connected))
        first, second = (legend(f) for f in panels)
        assert first == second and len(first) == 5, step
        assert [f.layout.legend.to_plotly_json() for f in panels][0] == panels[1].layout.legend.to_plotly_json()
    # Section 3's two panels: the same orderings in the same colours.
    sets = F.dependent_sets_figure({"GenerateSeq": [1, 2], "breadth-first": [3, 1]})
    tables = F.dependent_sets_figure({"GenerateSeq": [4, 8], "breadth-first": [9, 1]}, log_y=True)
    assert [(t.name, t.line.color) for t in sets.data] == [(t.name, t.line.color) for t in tables.data]
    assert len({t.line.color for t in sets.data}) == 2


def test_figures_take_their_colours_from_the_palette():
    import inspect
    import re

    from ui import graphview, palette

    assert F.KIND_COLORS is palette.KIND_COLORS and F.COST_COLORS is palette.COST_COLORS
    assert tuple(palette.KIND_COLORS) == graphview.KINDS
    for module in (F, graphview):
        assert not re.findall(r"#[0-9a-fA-F]{3,6}\b", inspect.getsource(module)), module.__name__


# -- click to expand, colour by time or gain -----------------------------------------------------

def test_toggle_module_expands_a_module_and_collapses_it_from_a_layer(graph):
    from ui.graphview import toggle_module

    modules = {k: ms for k, ms in groups_of([layer.name for layer in graph], 1).items() if len(ms) > 1}
    assert set(modules) == {"block0", "block1", "block2"}
    assert toggle_module([], "block1", modules) == ["block1"]
    assert toggle_module(["block1"], "block0", modules) == ["block1", "block0"]
    assert toggle_module(["block1"], "block1", modules) == ["block1"], "an expanded module stays expanded"
    assert toggle_module(["block1", "block0"], "block1.right.a", modules) == ["block0"]
    assert toggle_module(["block1"], "block0.left", modules) == ["block1"], "a layer of a collapsed module: no change"
    assert toggle_module(["block1"], "stem", modules) == ["block1"], "a single layer: no change"
    assert toggle_module(["block1"], "block0\u2192block1", modules) == ["block1"], "an edge: no change"
    # What a click does to the view: the module's node becomes its layers, and back.
    after = build_graph_view(graph, None, depth=1, expanded=toggle_module([], "block1", modules))
    assert "block1" not in {n.key for n in after.nodes} and "block1.cat" in {n.key for n in after.nodes}
    back = build_graph_view(graph, None, depth=1, expanded=toggle_module(["block1"], "block1.cat", modules))
    assert "block1" in {n.key for n in back.nodes}


def test_view_carries_the_baseline_time_of_each_node(graph, solved, data_parallel):
    for depth in (None, 1):
        view = build_graph_view(graph, solved, depth=depth, baseline=data_parallel)
        dp = {r.name: r.total_s for r in data_parallel.layers}
        for n in view.nodes:
            assert n.baseline_s == pytest.approx(sum(dp[m] for m in n.members))
            assert n.gain_s == pytest.approx(n.baseline_s - n.total_s)
        assert sum(n.gain_s for n in view.nodes) == pytest.approx(data_parallel.step_time_s - solved.step_time_s)
    assert all(n.gain_s is None for n in build_graph_view(graph, solved).nodes)
    same = build_graph_view(graph, data_parallel, baseline=data_parallel)
    assert all(n.gain_s == 0 for n in same.nodes)


def _scaled_view(times_ms, baseline_ms=None):
    nodes = tuple(
        NodeInfo(f"n{i}", (f"n{i}",), "data", "1", "", t / 1e3, 0.0, 0.0, x=float(i), y=0.0,
                 baseline_s=None if baseline_ms is None else baseline_ms[i] / 1e3)
        for i, t in enumerate(times_ms))
    edges = tuple(EdgeInfo(f"n{i}", f"n{i + 1}", 1e-3) for i in range(len(nodes) - 1))
    return GraphView(nodes, edges, False, len(nodes))


def _node_colours(fig):
    (trace,) = _traces(fig, legendgroup="kinds")
    return dict(zip(trace.customdata, trace.marker.color)), trace


def _rgb(color):
    import plotly.colors as pc

    return pc.unlabel_rgb(pc.convert_colors_to_same_type(color, "rgb")[0][0])


def test_colour_by_time_darkens_with_each_nodes_time():
    times = [0.0, 0.2, 0.2, 1.0, 3.0, 3.1, 8.0]
    fig = F.strategy_graph_figure(_scaled_view(times), color_by="time")
    colours, trace = _node_colours(fig)
    assert trace.text is not None and all("<br>" in t for t in trace.text), "nodes keep their labels"
    by_time = [colours[f"n{i}"] for i in range(len(times))]
    assert by_time[1] == by_time[2], "equal times, equal colours"
    lum = [_luminance(c) for c in by_time]
    for (t0, l0), (t1, l1) in zip(zip(times, lum), list(zip(times, lum))[1:]):
        assert l1 < l0 if t1 > t0 else l1 == l0, "darker as the time grows"
    assert lum[0] > lum[3] > lum[-1]
    (scale,) = _traces(fig, name="node scale")
    assert scale.marker.showscale and scale.marker.cmin == 0 and scale.marker.cmax == pytest.approx(8.0)
    (edges,) = _traces(fig, name="edge scale")
    assert edges.marker.colorbar.y != scale.marker.colorbar.y, "two colour bars, one above the other"


def test_colour_by_gain_is_centred_on_data_parallelism():
    from plotly.colors import sample_colorscale
    from ui.palette import GAIN_COLORSCALE

    times = [1.0, 1.0, 2.0, 0.5, 4.0]
    dp = [1.0, 3.0, 2.5, 0.4, 1.0]  # gains: 0, +2, +0.5, -0.1, -3 ms
    fig = F.strategy_graph_figure(_scaled_view(times, dp), color_by="gain")
    colours, trace = _node_colours(fig)
    mid = sample_colorscale(GAIN_COLORSCALE, [0.5])[0]
    assert colours["n0"] == mid, "no gain: the midpoint colour"
    for key in ("n1", "n2"):  # faster than data parallelism: the green side
        r, g, b = _rgb(colours[key])
        assert g > r, (key, colours[key])
    for key in ("n3", "n4"):  # slower: the magenta side
        r, g, b = _rgb(colours[key])
        assert r > g, (key, colours[key])
    assert _luminance(colours["n1"]) < _luminance(colours["n2"]), "a larger gain, a stronger colour"
    (scale,) = _traces(fig, name="node scale")
    assert scale.marker.showscale and scale.marker.cmin == pytest.approx(-3.0) and scale.marker.cmax == pytest.approx(3.0)
    assert any("gain" in h for h in trace.hovertext)
    with pytest.raises(ValueError, match="baseline"):
        F.strategy_graph_figure(_scaled_view(times), color_by="gain")
    with pytest.raises(ValueError):
        F.strategy_graph_figure(_scaled_view(times), color_by="nonsense")


def test_colour_by_kind_stays_the_default(graph, solved, data_parallel):
    view = build_graph_view(graph, solved, depth=1, baseline=data_parallel)
    assert F.strategy_graph_figure(view).to_dict() == F.strategy_graph_figure(view, color_by="kind").to_dict()
    unsolved = build_graph_view(graph, None, depth=1)
    fig = F.strategy_graph_figure(unsolved, color_by="time")
    assert not _traces(fig, name="node scale"), "an unsolved graph is drawn by kind"


@pytest.mark.parametrize("name, depth", [("transformer", 2), ("alexnet", None), ("gpt", None)])
def test_the_graph_opens_on_whole_columns_each_with_room_for_its_label(name, depth):
    """A graph a little longer than the window (the Transformer grouped: 15 columns) is drawn whole; a longer one
    opens on a window in which every node has most of a column (0.9) on either side, so that neither a node nor its
    centred label is cut at the window's edge."""
    from pase.models import sample

    view = build_graph_view(sample(name), depth=depth)
    fig = F.strategy_graph_figure(view)
    lo, hi = fig.layout.xaxis.range
    columns = sorted({n.x for n in view.nodes})
    shown = [x for x in columns if lo <= x <= hi]
    assert shown == columns[:len(shown)] and len(shown) >= 10, (lo, hi, columns)
    assert shown[0] - lo >= 0.9 - 1e-9 and hi - shown[-1] >= 0.9 - 1e-9, (lo, hi, shown)
    if len(columns) <= 15:
        assert shown == columns, "drawn whole"
