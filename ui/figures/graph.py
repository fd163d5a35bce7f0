"""The strategy graph: the computation graph laid out left to right, coloured by parallelism kind, node
time or gain over data parallelism, with edges on a scale of redistribution time, routed clear of the node
labels (:mod:`ui.figures.routing`)."""

from __future__ import annotations

import html
import math
import re

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from ui.figures.routing import Node, label_size, place_labels_and_edges
from ui.fmt import fmt_time, plotly_text
from ui.graphview import KINDS, GraphView
from ui.palette import (
    EDGE_COLORSCALE, FOUND_RING, GAIN_COLORSCALE, INK, KIND_COLORS, NODE_TIME_COLORSCALE, SCALED_NODE_OUTLINE,
    UNCOSTED_EDGE_COLOR, ZERO_EDGE_COLOR,
)

__all__ = ["strategy_graph_figure", "edge_level", "edge_style", "node_label", "EDGE_LEVELS", "MAX_LABELLED_NODES",
           "NODE_COLOR_MODES"]

# Edges: colour and width on an absolute scale of redistribution time, 0 to the largest edge's,
# in EDGE_LEVELS steps (ui.palette.EDGE_COLORSCALE).
EDGE_LEVELS = 10

# Above this many nodes, node labels are left to the hover.
MAX_LABELLED_NODES = 600
# Node labels: font size (px) and the longest line drawn (characters).
LABEL_FONT_PX = 11
LABEL_CHARS = 18
# A halo of the plot's white round every label's glyphs (CSS text-shadow), so that an edge passing behind a
# label does not cross its letters; unblurred, as a blur costs the browser far more to paint.
LABEL_HALO = "-1px -1px 0 #fff, 1px -1px 0 #fff, -1px 1px 0 #fff, 1px 1px 0 #fff"
# The layout leaves about this many pixels per generation (column) and per branch (row):
# labels sit under the nodes of even columns and over those of odd ones, so neighbouring
# columns' labels never meet, and edges between rows run round them (ui.figures.routing).
# A graph of more generations than a plot this wide holds opens on its first columns, to pan along.
COLUMN_PX = 72
# A graph a little longer than the window is drawn whole, its columns down to this many pixels apart: a label
# (LABEL_CHARS at LABEL_FONT_PX, about 115 px at most) still clears the next one on its side, two columns on.
FIT_COLUMN_PX = 62
ROW_PX = 104
NOMINAL_PLOT_PX = 1000
PLOT_DOMAIN = (0.0, 0.94)  # of the figure's width: the rest holds the colour bar
# What the strategy graph's nodes can be coloured by (strategy_graph_figure's color_by).
NODE_COLOR_MODES = ("kind", "time", "gain")


def _clip(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def edge_level(cost_s: float, max_s: float) -> int:
    """The colour step (0 .. EDGE_LEVELS - 1) of an edge of ``cost_s`` on a scale from 0 to ``max_s``; -1: no cost."""
    if cost_s <= 0 or max_s <= 0:
        return -1
    return min(EDGE_LEVELS - 1, int(cost_s / max_s * EDGE_LEVELS))


def edge_style(level: int) -> tuple[str, float]:
    """Colour and width of edges at colour step ``level`` (their centre on the colour scale)."""
    if level < 0:
        return ZERO_EDGE_COLOR, 1.0
    t = (level + 0.5) / EDGE_LEVELS
    return sample_colorscale(EDGE_COLORSCALE, [t])[0], 1.2 + 4.3 * t


def node_label(n, solved: bool) -> str:
    """A node's label: short name (bold), op and, once solved, its split; at most LABEL_CHARS a line."""
    lines = [f"<b>{plotly_text(_clip(n.name or n.key))}</b>"]
    if n.op:
        lines.append(plotly_text(_clip(n.op)))
    if solved and n.label:
        lines.append(plotly_text(_clip(n.label)))
    return "<br>".join(lines)


def _marker_px(n) -> float:
    """A node's marker size (px): a group's square grows with its layers' count."""
    return 14 + 4 * min(np.log2(len(n.members)), 5) if n.is_group else 12


def _label_below(n) -> bool:
    """Whether a node's label prefers its node's underside: labels sit under the nodes of even columns and over
    those of odd ones, so that neighbouring columns' labels never meet."""
    return not round(n.x) % 2


def _label_lines(n, solved: bool) -> list[str]:
    """The lines of a node's label as drawn (tags and entities resolved)."""
    return [html.unescape(re.sub("<[^>]+>", "", line)) for line in node_label(n, solved).split("<br>")]


def _window(view: GraphView, highlight: str | None, title: str | None):
    """The axes' ranges (about COLUMN_PX per generation and ROW_PX per branch; a longer or wider graph opens on a
    window), the figure's height and top margin: ``(x_lo, x_hi, y_lo, y_hi, height, top_margin)``."""
    pos = {n.key: (n.x, n.y) for n in view.nodes}
    xs = [n.x for n in view.nodes] or [0.0]
    ys = [n.y for n in view.nodes] or [0.0]
    columns = max(1, NOMINAL_PLOT_PX // COLUMN_PX)
    top_margin = 70 if title else 50
    max_plot_px = 860
    pad = 0.55  # room over the top node and under the bottom one for their labels, in rows
    span = max(ys) - min(ys) + 2 * pad
    plot_px = min(max(span * ROW_PX, 300), max_plot_px)
    rows = plot_px / ROW_PX
    height = int(plot_px + top_margin + 10)
    # Most of a column beside the first and last nodes, so that their centred labels are not clipped. The whole
    # graph when it fits at FIT_COLUMN_PX a column; else a window of the whole columns that fit at COLUMN_PX with
    # that margin, to pan along (no node of the window is cut at its edge).
    x_lo, x_hi = min(xs) - 0.9, max(xs) + 0.9
    if x_hi - x_lo > NOMINAL_PLOT_PX / FIT_COLUMN_PX:
        x_hi = min(xs) + math.floor(columns - 1.8) + 0.9
    if span <= rows:
        mid = (max(ys) + min(ys)) / 2
        y_lo, y_hi = mid - rows / 2, mid + rows / 2
    else:  # open on the top rows
        y_hi = max(ys) + pad
        y_lo = y_hi - rows
    if highlight is not None and highlight in pos:
        # Open on the found node, in the middle of a window of the same size.
        x, y = pos[highlight]
        x_lo, x_hi = x - (x_hi - x_lo) / 2, x + (x_hi - x_lo) / 2
        y_lo, y_hi = y - rows / 2, y + rows / 2
    return x_lo, x_hi, y_lo, y_hi, height, top_margin


def _routes(view: GraphView, labels: bool, window: tuple[float, float]):
    """Each node's label place (key -> plotly text position) and each edge's polyline on the axes (``(src, dst)``
    -> points), placed so that edges keep clear of labels (:func:`ui.figures.routing.place_labels_and_edges`) on a
    plot NOMINAL_PLOT_PX wide opening on the x ``window`` and ROW_PX a row; edges straight without labels."""
    pos = {n.key: (n.x, n.y) for n in view.nodes}
    if not labels:
        return ({n.key: "bottom center" if _label_below(n) else "top center" for n in view.nodes},
                {(e.src, e.dst): [pos[e.src], pos[e.dst]] for e in view.edges})
    column_px = NOMINAL_PLOT_PX / (window[1] - window[0])
    nodes = [Node(n.key, n.x * column_px, -n.y * ROW_PX, _marker_px(n),
                  *label_size(_label_lines(n, view.solved), LABEL_FONT_PX)) for n in view.nodes]
    places, routes = place_labels_and_edges(nodes, [_label_below(n) for n in view.nodes],
                                            [(e.src, e.dst) for e in view.edges], column_px,
                                            bounds=(window[0] * column_px, window[1] * column_px))
    out = {}
    for (src, dst), route in routes.items():
        (x0, y0), (x1, y1) = pos[src], pos[dst]
        # Back on the axes, the ends and the elbow's runs exactly on their nodes' rows.
        out[(src, dst)] = [(x0, y0), (x1, y1)] if len(route) == 2 else [
            (x0, y0), (route[1][0] / column_px, y0), (route[2][0] / column_px, y1), (x1, y1)]
    return dict(zip((n.key for n in view.nodes), places)), out


def _middle(route: list[tuple[float, float]]) -> tuple[float, float]:
    """Where an edge's hover point sits: the middle of its straight line, or of its elbow's vertical leg."""
    (xa, ya), (xb, yb) = route[len(route) // 2 - 1], route[len(route) // 2]
    return (xa + xb) / 2, (ya + yb) / 2


def strategy_graph_figure(
    view: GraphView,
    *,
    highlight: str | None = None,
    title: str | None = None,
    labels: bool | None = None,
    color_by: str = "kind",
) -> go.Figure:
    """The computation graph, layered left to right, coloured by parallelism kind, time or gain.

    One scatter trace per kind, one line trace per edge colour step (edges,
    straight or elbows round the labels, joined with ``None`` separators), one invisible trace of edge midpoints for
    edge hover and one for the colour bar of redistribution times (ms), so a
    300-layer graph is a handful of traces.

    Parameters
    ----------
    view : GraphView
        From :func:`ui.graphview.build_graph_view`.
    highlight : str, optional
        A node key to ring and zoom to (a found layer, or its group).
    labels : bool, optional
        Write each node's short name, op and split under it (default: when
        there are at most ``MAX_LABELLED_NODES`` nodes).
    color_by : {"kind", "time", "gain"}
        ``"kind"``: one trace per kind of parallelism; ``"time"``: one node
        trace on ``NODE_TIME_COLORSCALE`` from 0 to the largest node's total
        time; ``"gain"``: on ``GAIN_COLORSCALE`` over each node's data-parallel
        time minus its time (``NodeInfo.gain_s``, ms), centred on 0 (needs a
        view built with ``baseline=``). Both draw a colour bar. An unsolved
        view is always drawn by kind. Node traces are in legend group
        ``"kinds"`` whatever the colouring.
    """
    if color_by not in NODE_COLOR_MODES:
        raise ValueError(f"color_by must be one of {NODE_COLOR_MODES}, got {color_by!r}")
    if not view.solved:
        color_by = "kind"
    if color_by == "gain" and any(n.gain_s is None for n in view.nodes):
        raise ValueError("colouring by gain needs a view built with a baseline plan")
    scaled = color_by != "kind" and bool(view.nodes)
    fig = go.Figure()
    pos = {n.key: (n.x, n.y) for n in view.nodes}
    if labels is None:
        labels = len(view.nodes) <= MAX_LABELLED_NODES

    x_lo, x_hi, y_lo, y_hi, height, top_margin = _window(view, highlight, title)
    places, routes = _routes(view, labels, (x_lo, x_hi))

    # Edges: width and colour on an absolute scale of their time.
    max_s = max((e.cost_s for e in view.edges), default=0.0)
    buckets: dict[int, list] = {}
    for e in view.edges:
        buckets.setdefault(edge_level(e.cost_s, max_s), []).append(e)
    for b in sorted(buckets):
        xs, ys, ids = [], [], []
        for e in buckets[b]:
            route = routes[(e.src, e.dst)]
            xs += [x for x, _ in route] + [None]
            ys += [y for _, y in route] + [None]
            ids += [f"{e.src}\u2192{e.dst}"] * (len(route) + 1)
        group = buckets[b]
        color, width = edge_style(b)
        if b < 0:
            name = "no redistribution" if view.solved else "tensor"
            if not view.solved:
                color, width = UNCOSTED_EDGE_COLOR, 1.2
        else:
            lo, hi = min(e.cost_s for e in group), max(e.cost_s for e in group)
            name = f"redistribution {fmt_time(lo)}–{fmt_time(hi)}" if lo != hi else f"redistribution {fmt_time(lo)}"
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", line=dict(color=color, width=width), customdata=ids,
            hoverinfo="skip", name=name, legendgroup="edges", legendgrouptitle_text="Edges", showlegend=b < 0,
        ))
    if view.edges:
        fig.add_trace(go.Scatter(
            x=[_middle(routes[(e.src, e.dst)])[0] for e in view.edges],
            y=[_middle(routes[(e.src, e.dst)])[1] for e in view.edges],
            mode="markers", marker=dict(size=6, color="rgba(0,0,0,0)"),
            hovertext=[
                plotly_text(f"{e.src} → {e.dst}")
                + (f"<br>redistribution: {fmt_time(e.cost_s)}" if view.solved else "")
                + (f" ({e.tensors} tensors)" if e.tensors > 1 else "")
                for e in view.edges
            ],
            hoverinfo="text", showlegend=False, name="edge costs",
        ))
    if view.solved and max_s > 0 and view.nodes:
        n0 = view.nodes[0]
        fig.add_trace(go.Scatter(
            x=[n0.x], y=[n0.y], mode="markers", hoverinfo="skip", showlegend=False, name="edge scale",
            marker=dict(size=1, opacity=0, color=[0.0], cmin=0.0, cmax=max_s * 1e3, colorscale=EDGE_COLORSCALE,
                        showscale=True, colorbar=dict(title=dict(text="redistribution<br>(ms)", side="top"),
                                                      x=PLOT_DOMAIN[1] + 0.01, xanchor="left", thickness=12,
                                                      len=0.42 if scaled else 0.8, tickformat=".3~g",
                                                      **(dict(y=1.0, yanchor="top") if scaled else {}))),
        ))

    # Nodes: one trace per parallelism kind (or one on a colour scale); labels under them.
    # A click selects a node (the explorer expands or collapses its module): the others stay as they are.
    unselected = dict(marker=dict(opacity=1.0), textfont=dict(color=INK))
    if scaled:
        if color_by == "time":
            values = [n.total_s * 1e3 for n in view.nodes]
            lo, hi, mid, scale, bar = 0.0, max(values), None, NODE_TIME_COLORSCALE, "node time<br>(ms)"
            ts = [v / hi if hi > 0 else 0.0 for v in values]
        else:
            values = [n.gain_s * 1e3 for n in view.nodes]
            m = max(abs(v) for v in values)
            lo, hi, mid, scale, bar = -(m or 1.0), m or 1.0, 0.0, GAIN_COLORSCALE, "gain over data<br>parallelism (ms)"
            ts = [0.5 + v / (2 * m) if m > 0 else 0.5 for v in values]
        groups = [("nodes", list(view.nodes), sample_colorscale(scale, [min(1.0, max(0.0, t)) for t in ts]))]
        hovers = [n.hover + (f"<br>data parallel: {fmt_time(n.baseline_s)}; gain: {v:.4g} ms"
                             if color_by == "gain" else "") for n, v in zip(view.nodes, values)]
        hover_of = dict(zip((n.key for n in view.nodes), hovers))
        outline = dict(color=SCALED_NODE_OUTLINE, width=1)
    else:
        groups = [(kind, [n for n in view.nodes if n.kind == kind], None) for kind in KINDS]
        hover_of = {n.key: n.hover for n in view.nodes}
        outline = dict(color="white", width=1)
    for kind, nodes, colors in groups:
        if not nodes:
            continue
        sizes = [_marker_px(n) for n in nodes]
        symbols = ["square" if n.is_group else "circle" for n in nodes]
        if colors is not None:
            name = {"time": "node time", "gain": "gain over data parallelism"}[color_by]
        else:
            name = kind if kind != "unsolved" else ("layer" if not any(n.is_group for n in nodes) else "layer / module")
        fig.add_trace(go.Scatter(
            x=[n.x for n in nodes], y=[n.y for n in nodes],
            mode="markers+text" if labels else "markers",
            marker=dict(color=colors if colors is not None else KIND_COLORS[kind], size=sizes, symbol=symbols,
                        line=outline),
            text=[node_label(n, view.solved) for n in nodes] if labels else None,
            textposition=[places[n.key] for n in nodes],
            textfont=dict(size=LABEL_FONT_PX, color=INK, shadow=LABEL_HALO),
            hovertext=[hover_of[n.key] for n in nodes], hoverinfo="text",
            name=name, showlegend=colors is None, unselected=unselected,
            legendgroup="kinds", legendgrouptitle_text="Parallelism" if view.solved else "Not solved yet",
            customdata=[n.key for n in nodes],
        ))
    if scaled:
        n0 = view.nodes[0]
        fig.add_trace(go.Scatter(
            x=[n0.x], y=[n0.y], mode="markers", hoverinfo="skip", showlegend=False, name="node scale",
            marker=dict(size=1, opacity=0, color=[mid if mid is not None else lo], cmin=lo, cmax=hi or 1.0,
                        colorscale=scale, showscale=True,
                        colorbar=dict(title=dict(text=bar, side="top"), x=PLOT_DOMAIN[1] + 0.01, xanchor="left",
                                      thickness=12, len=0.42, y=0.0, yanchor="bottom", tickformat=".3~g")),
        ))

    if highlight is not None and highlight in pos:
        x, y = pos[highlight]
        fig.add_trace(go.Scatter(
            x=[x], y=[y], mode="markers+text", text=[plotly_text(highlight)], textposition="top center",
            textfont=dict(size=LABEL_FONT_PX + 1, shadow=LABEL_HALO),
            marker=dict(size=28, color="rgba(0,0,0,0)", line=dict(color=FOUND_RING, width=3)),
            hoverinfo="skip", name="found", showlegend=False,
        ))

    fig.update_layout(
        title=title, height=height, margin=dict(l=10, r=10, t=top_margin, b=10),
        hovermode="closest", plot_bgcolor="white", dragmode="pan",
        legend=dict(orientation="h", x=0.0, xanchor="left", y=1.0, yanchor="bottom", bgcolor="rgba(255,255,255,0.8)"),
        uirevision="strategy-graph" if highlight is None else f"find-{highlight}",
        # Hidden axes (a drawing, not a chart), set in this one call: update_xaxes and update_yaxes took most of
        # the figure's building time.
        xaxis=dict(visible=False, showgrid=False, zeroline=False, range=[x_lo, x_hi], domain=list(PLOT_DOMAIN)),
        yaxis=dict(visible=False, showgrid=False, zeroline=False, range=[y_lo, y_hi]),
    )
    return fig
