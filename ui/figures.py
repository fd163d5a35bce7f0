"""Figure builders: plain functions that return plotly figures (no Streamlit).

Every number drawn comes from :mod:`pase` (plans, sweeps, search statistics);
these functions only arrange and colour it.
"""

from __future__ import annotations

from itertools import product
from typing import Mapping, Sequence

import networkx as nx
import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from pase.model.cost import LayerCost
from pase.model.memory import MemoryReport
from ui.fmt import compact_config, config_str, fmt_time, plotly_text
from ui.graphview import KINDS, GraphView, kind_of
from ui.palette import GAIN_COLORSCALE, NODE_TIME_COLORSCALE, SCALED_NODE_OUTLINE
from ui.palette import (
    CAPACITY_COLOR, COST_COLORS, EDGE_COLORSCALE, FOUND_RING, INK, KIND_COLORS, MEMORY_COLORS, MUTED_LINE, OUTLINE,
    PARTIAL_SUM_SCALE, REPLICATED_SCALE, STEP_COLORS, UNCOSTED_EDGE_COLOR, ZERO_EDGE_COLOR, device_color,
    ordering_color, strategy_color,
)

__all__ = [
    "KIND_COLORS",
    "COST_COLORS",
    "strategy_graph_figure",
    "edge_level",
    "edge_style",
    "node_label",
    "cost_breakdown_figure",
    "SORT_KEYS",
    "sort_layers",
    "totals_figure",
    "memory_figure",
    "layer_compare_figure",
    "paired_colors",
    "sweep_figure",
    "sweep_panels_figure",
    "split_changes_figure",
    "gemm_cube_figure",
    "gemm_tensors_figure",
    "search_step_figure",
    "dependent_sets_figure",
]

# Memory parts: LayerMemory / MemoryReport.totals() field -> (label, colour).
MEMORY_PARTS = {
    field: (label, MEMORY_COLORS[label]) for field, label in (
        ("weights_bytes", "weights"), ("gradient_bytes", "gradients"), ("optimizer_bytes", "optimizer state"),
        ("activation_bytes", "activations"), ("buffer_bytes", "largest comm buffer"), ("reserved_bytes", "reserve"))
}
# Edges: colour and width on an absolute scale of redistribution time, 0 to the largest edge's,
# in EDGE_LEVELS steps (ui.palette.EDGE_COLORSCALE).
EDGE_LEVELS = 10

# Above this many nodes, node labels are left to the hover.
MAX_LABELLED_NODES = 600
# Node labels: font size (px) and the longest line drawn (characters).
LABEL_FONT_PX = 11
LABEL_CHARS = 18
# The layout leaves about this many pixels per generation (column) and per branch (row):
# labels sit under the nodes of even columns and over those of odd ones, so neighbouring
# columns' labels never meet. A graph of more generations than a plot this wide holds
# opens on its first columns, to pan along.
COLUMN_PX = 72
ROW_PX = 104
NOMINAL_PLOT_PX = 1000
PLOT_DOMAIN = (0.0, 0.94)  # of the figure's width: the rest holds the colour bar
# What the strategy graph's nodes can be coloured by (strategy_graph_figure's color_by).
NODE_COLOR_MODES = ("kind", "time", "gain")


def _empty_axes(fig: go.Figure) -> None:
    fig.update_xaxes(visible=False, showgrid=False, zeroline=False)
    fig.update_yaxes(visible=False, showgrid=False, zeroline=False)


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


def strategy_graph_figure(
    view: GraphView,
    *,
    highlight: str | None = None,
    title: str | None = None,
    labels: bool | None = None,
    color_by: str = "kind",
) -> go.Figure:
    """The computation graph, layered left to right, coloured by parallelism kind, time or gain.

    One scatter trace per kind, one line trace per edge colour step (edges
    joined with ``None`` separators), one invisible trace of edge midpoints for
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

    # Edges: width and colour on an absolute scale of their time.
    max_s = max((e.cost_s for e in view.edges), default=0.0)
    buckets: dict[int, list] = {}
    for e in view.edges:
        buckets.setdefault(edge_level(e.cost_s, max_s), []).append(e)
    for b in sorted(buckets):
        xs, ys, ids = [], [], []
        for e in buckets[b]:
            (x0, y0), (x1, y1) = pos[e.src], pos[e.dst]
            xs += [x0, x1, None]
            ys += [y0, y1, None]
            ids += [f"{e.src}\u2192{e.dst}"] * 3
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
            x=[(pos[e.src][0] + pos[e.dst][0]) / 2 for e in view.edges],
            y=[(pos[e.src][1] + pos[e.dst][1]) / 2 for e in view.edges],
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
                                                      len=0.42 if scaled else 0.8, tickformat=".3g",
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
        sizes = [14 + 4 * min(np.log2(len(n.members)), 5) if n.is_group else 12 for n in nodes]
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
            textposition=["top center" if round(n.x) % 2 else "bottom center" for n in nodes],
            textfont=dict(size=LABEL_FONT_PX, color=INK),
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
                                      thickness=12, len=0.42, y=0.0, yanchor="bottom", tickformat=".3g")),
        ))

    if highlight is not None and highlight in pos:
        x, y = pos[highlight]
        fig.add_trace(go.Scatter(
            x=[x], y=[y], mode="markers+text", text=[plotly_text(highlight)], textposition="top center",
            textfont=dict(size=LABEL_FONT_PX + 1),
            marker=dict(size=28, color="rgba(0,0,0,0)", line=dict(color=FOUND_RING, width=3)),
            hoverinfo="skip", name="found", showlegend=False,
        ))

    # Axes: about COLUMN_PX per generation and ROW_PX per branch; a longer or wider graph opens on a window.
    _empty_axes(fig)
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
    # Most of a column beside the first and last nodes, so that their centred labels are not clipped.
    x_lo, x_hi = min(xs) - 0.9, max(xs) + 0.9
    if x_hi - x_lo > columns:
        x_hi = x_lo + columns
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
    fig.update_layout(
        title=title, height=height, margin=dict(l=10, r=10, t=top_margin, b=10),
        hovermode="closest", plot_bgcolor="white", dragmode="pan",
        legend=dict(orientation="h", x=0.0, xanchor="left", y=1.0, yanchor="bottom", bgcolor="rgba(255,255,255,0.8)"),
        uirevision="strategy-graph" if highlight is None else f"find-{highlight}",
    )
    fig.update_xaxes(range=[x_lo, x_hi], domain=list(PLOT_DOMAIN))
    fig.update_yaxes(range=[y_lo, y_hi])
    return fig


SORT_KEYS = {
    "graph order": None,
    "total": lambda r: -r.total_s,
    "compute": lambda r: -r.compute_s,
    "intra-layer comm": lambda r: -r.intra_comm_s,
    "edge comm": lambda r: -r.edge_comm_s,
    "name": lambda r: r.name,
}


def sort_layers(rows: Sequence[LayerCost], sort_by: str = "graph order") -> list[LayerCost]:
    """``rows`` ordered by one of :data:`SORT_KEYS` (ties keep graph order)."""
    if sort_by not in SORT_KEYS:
        raise ValueError(f"sort_by must be one of {', '.join(SORT_KEYS)}, got {sort_by!r}")
    key = SORT_KEYS[sort_by]
    return list(rows) if key is None else sorted(rows, key=key)


def cost_breakdown_figure(
    rows: Sequence[LayerCost], *, sort_by: str = "graph order", limit: int | None = None,
) -> go.Figure:
    """Per-layer step time as stacked horizontal bars: compute, intra-layer comm, edge comm.

    ``limit`` keeps the first ``limit`` layers after sorting.
    """
    rows = sort_layers(rows, sort_by)
    if limit is not None:
        rows = rows[:limit]
    names = [plotly_text(r.name) for r in rows]
    fig = go.Figure()
    for label, attr in (("compute", "compute_s"), ("intra-layer comm", "intra_comm_s"), ("edge comm", "edge_comm_s")):
        values = [getattr(r, attr) * 1e3 for r in rows]
        fig.add_trace(go.Bar(
            y=names, x=values, orientation="h", name=label, marker_color=COST_COLORS[label],
            customdata=[[config_str(r.config), compact_config(r.dims, r.config), fmt_time(r.total_s)] for r in rows],
            hovertemplate="<b>%{y}</b> %{customdata[1]}<br>" + label + ": %{x:.4g} ms<br>total %{customdata[2]}<extra></extra>",
        ))
    fig.update_layout(
        barmode="stack", height=int(max(300, 18 * len(rows) + 120)),
        margin=dict(l=10, r=10, t=30, b=40), xaxis_title="time per step (ms)",
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0, traceorder="normal"),
        yaxis=dict(autorange="reversed", type="category", automargin=True),
    )
    return fig


MEMORY_TOP_PX = 56  # the plot height of the total's bar
MEMORY_GAP_PX = 72  # between the total's axis and the layers' title: room for tick labels and the title
MEMORY_MARGIN_TOP_PX = 96  # the legend, then the total's title and the capacity label


def memory_figure(report: MemoryReport, *, limit: int | None = 40) -> go.Figure:
    """Memory per device: the total against the capacity (top), and the layers holding most (below).

    Both are stacked bars of weights, gradients, optimizer state and kept
    activations (GB); the total adds the largest communication buffer and the
    reserve, and a red line marks the capacity when it is known. ``limit``
    keeps the layers with the most resident memory. Only the parts that hold
    some memory are drawn, so the legend lists exactly those. The rows are
    laid out in pixels, so the titles clear the axes at every height.
    """
    layers = sorted(report.layers, key=lambda r: -r.resident_bytes)[:limit]
    height = int(max(360, 18 * len(layers) + 260))
    margin = dict(l=10, r=10, t=MEMORY_MARGIN_TOP_PX, b=40)
    plot_px = height - margin["t"] - margin["b"]
    spacing = MEMORY_GAP_PX / plot_px
    fig = make_subplots(rows=2, cols=1, row_heights=[MEMORY_TOP_PX, plot_px - MEMORY_TOP_PX - MEMORY_GAP_PX],
                        vertical_spacing=spacing,
                        subplot_titles=("per device, all layers", f"the {len(layers)} layers holding most"))
    totals = report.totals()
    for field, (label, color) in MEMORY_PARTS.items():
        per_layer = [getattr(r, field) / 1e9 for r in layers] if field not in ("buffer_bytes", "reserved_bytes") else []
        drawn_total = totals[field] > 0
        drawn_layers = any(v > 0 for v in per_layer)
        if drawn_total:
            fig.add_trace(go.Bar(y=["total"], x=[totals[field] / 1e9], orientation="h", name=label,
                                 marker_color=color, legendgroup=label,
                                 hovertemplate=f"{label}: %{{x:.4g}} GB<extra></extra>"), row=1, col=1)
        if drawn_layers:
            fig.add_trace(go.Bar(y=[r.name for r in layers], x=per_layer, orientation="h",
                                 name=label, marker_color=color, legendgroup=label, showlegend=not drawn_total,
                                 hovertemplate="<b>%{y}</b><br>" + label + ": %{x:.4g} GB<extra></extra>"),
                          row=2, col=1)
    if report.capacity_bytes is not None:
        cap = report.capacity_bytes / 1e9
        fig.add_vline(x=cap, line_color=CAPACITY_COLOR, line_width=2, row=1, col=1,
                      annotation_text=f"capacity {cap:.3g} GB", annotation_position="top right")
    fig.update_layout(
        barmode="stack", height=height, margin=margin,
        legend=dict(orientation="h", y=1 + 48 / plot_px, yanchor="bottom", x=0, traceorder="normal"),
    )
    fig.update_xaxes(title_text="GB per device", row=2, col=1)
    fig.update_yaxes(autorange="reversed", type="category", automargin=True, row=2, col=1)
    return fig


def totals_figure(totals: Mapping[str, Mapping[str, float]], *, speedups: Mapping[str, float] | None = None) -> go.Figure:
    """Stacked step time per strategy; ``totals[label]`` is a plan's ``totals_s()``.

    ``speedups[label]`` (how many times the found strategy beats that one) is
    written at the end of each bar.
    """
    labels = list(totals)
    fig = go.Figure()
    for label, key in (("compute", "compute_s"), ("intra-layer comm", "intra_comm_s"), ("edge comm", "edge_comm_s")):
        fig.add_trace(go.Bar(
            y=labels, x=[totals[l][key] * 1e3 for l in labels], orientation="h", name=label,
            marker_color=COST_COLORS[label], hovertemplate="%{y}: %{x:.4g} ms<extra>" + label + "</extra>",
        ))
    if speedups:
        for l in labels:
            if l in speedups:
                total = sum(totals[l].values()) * 1e3
                fig.add_annotation(x=total, y=l, text=f"  {speedups[l]:.2f}×", showarrow=False, xanchor="left")
    fig.update_layout(
        barmode="stack", height=int(max(220, 46 * len(labels) + 110)), xaxis_title="estimated step time (ms)",
        margin=dict(l=10, r=60, t=30, b=40), yaxis=dict(autorange="reversed", automargin=True),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0, traceorder="normal"),
    )
    return fig


def layer_compare_figure(
    plans: Mapping[str, Sequence[LayerCost]], *, only: Sequence[str] | None = None,
) -> go.Figure:
    """Per-layer total time of several strategies side by side (grouped bars).

    ``plans[label]`` is a plan's layers; ``only`` restricts to these layer names
    (e.g. where the strategies differ), in graph order.
    """
    labels = list(plans)
    first = plans[labels[0]]
    names = [r.name for r in first if only is None or r.name in set(only)]
    fig = go.Figure()
    for i, label in enumerate(labels):
        by_name = {r.name: r for r in plans[label]}
        rows = [by_name[n] for n in names]
        fig.add_trace(go.Bar(
            y=[plotly_text(n) for n in names], x=[r.total_s * 1e3 for r in rows], orientation="h",
            name=plotly_text(label),
            marker_color=strategy_color(label, labels),
            customdata=[[config_str(r.config), compact_config(r.dims, r.config)] for r in rows],
            hovertemplate="<b>%{y}</b><br>" + plotly_text(label) + ": %{customdata[1]} %{customdata[0]}<br>%{x:.4g} ms"
                          "<extra></extra>",
        ))
    fig.update_layout(
        barmode="group", height=int(max(300, (10 + 8 * len(labels)) * len(names) + 120)),
        xaxis_title="time per step (ms)", margin=dict(l=10, r=10, t=30, b=40),
        yaxis=dict(autorange="reversed", type="category", automargin=True),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0),
    )
    return fig


def paired_colors(records: Sequence[Mapping], series: str = "strategy") -> dict[str, str]:
    """Series name -> colour: a strategy's series share its hue (:func:`ui.palette.strategy_color`).

    When a strategy has several series (a second parameter varies, or GPU
    types side by side), they differ in lightness, darkest first in order of
    appearance, so the n-th value (or GPU type) is the n-th shade of every
    strategy; a strategy with one series keeps its plain colour.
    """
    import colorsys

    names = list(dict.fromkeys(r[series] for r in records))
    strategy_of = {r[series]: r.get("strategy", r[series]) for r in records}
    strategies = list(dict.fromkeys(strategy_of[n] for n in names))
    siblings = {s: [n for n in names if strategy_of[n] == s] for s in strategies}
    colors = {}
    for name in names:
        base = strategy_color(strategy_of[name], strategies)
        group = siblings[strategy_of[name]]
        if len(group) == 1:
            colors[name] = base
            continue
        h, _, sat = colorsys.rgb_to_hls(*(int(base[i:i + 2], 16) / 255 for i in (1, 3, 5)))
        light = 0.3 + 0.45 * group.index(name) / (len(group) - 1)
        colors[name] = "#" + "".join(f"{round(c * 255):02x}" for c in colorsys.hls_to_rgb(h, light, sat))
    return colors


def _runs(record: Mapping) -> bool:
    """Whether a sweep record's plan can run: it fits memory (or there is no limit) and has a step time."""
    return record.get("fits_memory") is not False and record.get("step_time_s") is not None


def _need_gb(record: Mapping) -> str:
    """"N GB of C GB" for a record that does not fit (its least need where nothing fits)."""
    need, cap = record.get("memory_per_device_bytes"), record.get("memory_capacity_bytes")
    if need is None or cap is None:
        return "more memory than the device has"
    return f"{need / 1e9:.3g} GB of {cap / 1e9:g} GB"


def sweep_figure(records: Sequence[Mapping], *, by: str = "devices", series: str = "strategy",
                 show: str = "step time") -> go.Figure:
    """Step time (or throughput, or MFU) and speedup over data parallelism against ``by`` (Fig. 6, modelled).

    ``show`` picks the left panel: ``"step time"`` (ms per step), ``"throughput"``
    (tokens/s when every record has ``tokens_per_s``, else samples/s) or
    ``"MFU"`` (``mfu`` in percent of the cluster's peak FLOP/s).

    ``records`` are :func:`pase.analysis.sweep.sweep` or
    :func:`~pase.analysis.sweep.training_sweep` records (``devices``,
    ``strategy``, ``step_time_s``, ``speedup_over_dp``...); one line per
    value of ``series``. A point whose plan does not fit memory
    (``fits_memory`` False) is left out of both panels (a gap in its line). When ``series`` is not ``"strategy"`` (a second
    parameter varies), a strategy's lines share its hue and differ in
    lightness, darkest first. Device counts are labelled at every swept value;
    the speedup axis starts at 0.
    """
    if show not in ("step time", "throughput", "MFU"):
        raise ValueError(f"show must be 'step time', 'throughput' or 'MFU', got {show!r}")
    tokens = bool(records) and all(r.get("tokens_per_s") is not None for r in records)
    left, left_title, left_unit, left_scale = {
        "step time": ("step_time_s", "Estimated step time", "ms per step", 1e3),
        "throughput": (("tokens_per_s", "Estimated throughput", "tokens/s", 1.0) if tokens
                       else ("samples_per_s", "Estimated throughput", "samples/s", 1.0)),
        "MFU": ("mfu", "Model FLOPs utilisation (of peak)", "% of peak FLOP/s", 100.0),
    }[show]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(left_title, "Speedup over data parallelism"),
                        horizontal_spacing=0.1)
    names = list(dict.fromkeys(r[series] for r in records))
    strategy_of = {r[series]: r.get("strategy", r[series]) for r in records}
    colors = paired_colors(records, series)

    for name in names:
        pts = sorted((r for r in records if r[series] == name), key=lambda r: r[by])
        color = colors[name]
        width = 3 if strategy_of[name] == "PaSE" else 1.8
        hover = [f"{plotly_text(r.get('label', name))}<br>{by} = {r[by]:g}<br>"
                 + (f"does not fit in memory ({_need_gb(r)})" if not _runs(r) else
                    f"{fmt_time(r['step_time_s'])}"
                    + ("" if r.get("speedup_over_dp") is None else f", {r['speedup_over_dp']:.2f}× data parallel"))
                 + (f"<br>uses {r['devices_used']} of {r['devices']} devices"
                    if r.get("devices_used") is not None and r["devices_used"] < r["devices"] else "")
                 + (f"<br>MFU {r['mfu'] * 100:.1f}% of peak" if r.get("mfu") is not None else "")
                 for r in pts]
        for col, key in ((1, left), (2, "speedup_over_dp")):
            scale = left_scale if col == 1 else 1.0
            fig.add_trace(go.Scatter(
                # A plan that does not fit cannot run: no time, rate or speedup is drawn for it (a gap).
                x=[r[by] for r in pts], y=[None if r.get(key) is None or not _runs(r) else r[key] * scale
                                           for r in pts],
                mode="lines+markers",
                name=str(name), legendgroup=str(name), showlegend=col == 1,
                line=dict(color=color, width=width), hovertext=hover, hoverinfo="text",
            ), row=1, col=col)
    log_x = by in ("devices", "bandwidth_Bps", "peak_flops")
    fig.update_xaxes(title_text=by, type="log" if log_x else "linear")
    if by == "devices":
        ticks = sorted({r["devices"] for r in records})
        fig.update_xaxes(tickvals=ticks, ticktext=[str(t) for t in ticks])
    fig.update_yaxes(title_text=left_unit, type="linear" if show == "MFU" else "log", row=1, col=1)
    if show == "MFU":
        fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="× data parallel", rangemode="tozero", row=1, col=2)
    fig.update_layout(height=430, margin=dict(l=10, r=10, t=50, b=40), hovermode="closest")
    return fig


# Marker symbols of the GPU types in sweep_panels_figure, in order of appearance.
_CLUSTER_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "pentagon", "hexagon", "star", "cross")


def _duration_unit(seconds: Sequence[float]) -> tuple[float, str]:
    """(scale in seconds, unit) that keeps the largest of ``seconds`` readable (s, min, h or days)."""
    top = max(seconds, default=0.0)
    for scale, unit in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
        if top >= scale:
            return scale, unit
    return 1.0, "s"


def sweep_panels_figure(records: Sequence[Mapping], *, series: str = "strategy") -> go.Figure:
    """Small multiples against the device count: every quantity of a sweep, one line per ``series``.

    ``records`` are :func:`pase.analysis.sweep.sweep` records (any GPU types,
    ``cluster``), optionally with the fields of
    :func:`pase.analysis.sweep.with_training_estimates`. Panels: step time
    (ms), throughput (tokens/s when every record has ``tokens_per_s``, else
    samples/s), MFU (% of the cluster's peak FLOP/s), memory per device (GB,
    1e9 bytes, logarithmic so that capacity and use both show; each GPU type's
    capacity as a dotted line, a point that does not fit drawn as an x) and, with estimates, time to train, GPU-hours and (with
    a price) cost. A plan that does not fit memory is drawn in the memory
    panel only: its time, rates and cost are not results. A series has the same colour (:func:`paired_colors`) in
    every panel and its GPU type the same marker symbol; a point where some
    devices stay idle (``idle_devices`` > 0) has an open marker. The device
    axes are logarithmic, labelled at every swept count.
    """
    import math

    tokens = bool(records) and all(r.get("tokens_per_s") is not None for r in records)
    rate = "tokens_per_s" if tokens else "samples_per_s"
    estimated = bool(records) and all("time_to_train_s" in r for r in records)
    priced = estimated and any(r.get("train_cost") is not None for r in records)
    t_scale, t_unit = _duration_unit([r["time_to_train_s"] for r in records
                                      if estimated and r["time_to_train_s"] is not None])
    unit = records[0].get("train_unit", "") if estimated else ""
    # (record field, title, y-axis title, scale, logarithmic)
    panels = [
        ("step_time_s", "Step time", "ms per step", 1e3, True),
        (rate, "Throughput", "tokens/s" if tokens else "samples/s", 1.0, True),
        ("mfu", "MFU (of peak FLOP/s)", "% of peak", 100.0, False),
        ("memory_per_device_bytes", "Memory per device", "GB", 1e-9, True),
    ]
    if estimated:
        amount = records[0]["train_amount"]
        panels += [("time_to_train_s", f"Time to train {amount:.3g} {unit}", t_unit, 1 / t_scale, True),
                   ("gpu_hours", "GPU-hours", "GPU-hours", 1.0, True)]
    if priced:
        panels.append(("train_cost", "Cost", "GPU-hours x price", 1.0, True))
    cols = max(1, math.ceil(len(panels) / 2))
    rows = math.ceil(len(panels) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[p[1] for p in panels],
                        horizontal_spacing=0.07, vertical_spacing=0.2)
    colors = paired_colors(records, series)
    clusters = list(dict.fromkeys(r.get("cluster", "") for r in records))
    strategies = list(dict.fromkeys(r.get("strategy", "") for r in records))
    for name in colors:
        pts = sorted((r for r in records if r[series] == name), key=lambda r: r["devices"])
        symbol = _CLUSTER_SYMBOLS[clusters.index(pts[0].get("cluster", "")) % len(_CLUSTER_SYMBOLS)]
        dash = "solid" if pts[0].get("strategy", "") == strategies[0] else "dash"
        symbols = [("x" if r.get("fits_memory") is False else symbol) + ("-open" if r.get("idle_devices") else "")
                   for r in pts]
        hover = [f"{plotly_text(str(name))}<br>p = {r['devices']}: "
                 + (f"needs {_need_gb(r)}" if not _runs(r) else f"{fmt_time(r['step_time_s'])} per step")
                 + (f"<br>idle: {r['idle_devices']} of {r['devices']} devices (layers split over at most "
                    f"{r['devices_used']})" if r.get("idle_devices") else "")
                 + ("<br>does not fit in memory" if r.get("fits_memory") is False else "")
                 for r in pts]
        for i, (key, _, _, scale, _) in enumerate(panels):
            # Only memory is drawn for a plan that does not fit (an x); its time, rate and cost are not results.
            fig.add_trace(go.Scatter(
                x=[r["devices"] for r in pts],
                y=[None if r.get(key) is None or (key != "memory_per_device_bytes" and not _runs(r))
                   else r[key] * scale for r in pts],
                mode="lines+markers", name=plotly_text(str(name)), legendgroup=str(name), showlegend=i == 0,
                line=dict(color=colors[name], width=2.5 if dash == "solid" else 1.5, dash=dash),
                marker=dict(symbol=symbols, size=8, color=colors[name]),
                hovertext=hover, hoverinfo="text+y",
            ), row=i // cols + 1, col=i % cols + 1)
    memory_at = [i for i, p in enumerate(panels) if p[0] == "memory_per_device_bytes"][0]
    # One line per capacity, naming every GPU type that has it (two 80 GB GPUs share one line and label).
    capacities: dict[float, list[str]] = {}
    for r in records:
        if r.get("memory_capacity_bytes") is not None and r.get("cluster", "") not in capacities.get(
                r["memory_capacity_bytes"], []):
            capacities.setdefault(r["memory_capacity_bytes"], []).append(r.get("cluster", ""))
    ticks = sorted({r["devices"] for r in records})
    for capacity, names in capacities.items():
        # A trace rather than a shape: shapes on a logarithmic axis take log10 positions.
        text = plotly_text(f"{', '.join(names)}: {capacity / 1e9:g} GB")
        fig.add_trace(go.Scatter(
            x=[ticks[0], ticks[-1]], y=[capacity * 1e-9] * 2, mode="lines+text", text=[text, ""],
            textposition="top right", textfont=dict(size=10, color=CAPACITY_COLOR), name=f"capacity {text}",
            line=dict(color=CAPACITY_COLOR, dash="dot", width=1), showlegend=False, hoverinfo="name",
        ), row=memory_at // cols + 1, col=memory_at % cols + 1)
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(t) for t in ticks])
    fig.update_xaxes(title_text="devices", row=rows)
    for i, (_, _, title, _, log) in enumerate(panels):
        fig.update_yaxes(title_text=title, type="log" if log else "linear", row=i // cols + 1, col=i % cols + 1,
                         **({} if log else {"rangemode": "tozero"}))
    fig.update_layout(height=300 * rows + 120, margin=dict(l=10, r=10, t=50, b=40), hovermode="closest",
                      legend=dict(orientation="h", y=-0.12, yanchor="top", x=0))
    return fig


def split_changes_figure(
    layers: Sequence[tuple[str, Sequence[str]]],
    configs: Mapping[int, Mapping[str, Sequence[int]]],
    *,
    ops: Mapping[str, str] | None = None,
) -> go.Figure:
    """Each layer's chosen split (rows) at each device count (columns), coloured by parallelism kind.

    ``layers`` is (name, dims) per row; ``configs[devices][name]`` the chosen
    configuration. A cell whose kind differs from the column to its left has a
    bold label. ``ops`` (layer name -> op) adds what each dimension letter
    means to the hover text (:mod:`ui.glossary`).
    """
    from ui.glossary import describe_dims

    devices = sorted(configs)
    kinds = ("data", "tensor", "hybrid", "replicated")
    kinds_index = {k: i for i, k in enumerate(kinds)}
    z, text, hover = [], [], []
    for name, dims in layers:
        zrow, trow, hrow, prev = [], [], [], None
        for p in devices:
            cfg = tuple(configs[p][name])
            kind = kind_of(tuple(dims), cfg)
            label = compact_config(dims, cfg)
            zrow.append(kinds_index[kind])
            trow.append(f"<b>{label}</b>" if prev is not None and kind != prev else label)
            hrow.append(f"{plotly_text(name)} at p={p}: {config_str(cfg)} {label} ({kind})"
                        + (f"<br>{plotly_text(describe_dims(ops[name], dims))}" if ops and name in ops else ""))
            prev = kind
        z.append(zrow)
        text.append(trow)
        hover.append(hrow)
    n = len(kinds)
    scale = []
    for i, k in enumerate(kinds):
        scale += [[i / n, KIND_COLORS[k]], [(i + 1) / n, KIND_COLORS[k]]]
    x = [str(p) for p in devices]
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=[plotly_text(name) for name, _ in layers], text=text, texttemplate="%{text}", textfont=dict(size=10, color="white"),
        hovertext=hover, hoverinfo="text", colorscale=scale, zmin=-0.5, zmax=n - 0.5, xgap=2, ygap=1,
        colorbar=dict(tickvals=list(range(n)), ticktext=list(kinds), title="kind"),
    ))
    fig.update_layout(
        height=int(max(260, 20 * len(layers) + 120)), margin=dict(l=10, r=10, t=30, b=40),
        xaxis=dict(title="devices", type="category", side="top"),
        yaxis=dict(autorange="reversed", type="category", automargin=True),
    )
    return fig


# -- Learn: the GEMM iteration space --------------------------------------------------------

def gemm_cube_figure(sizes: Sequence[int], splits: Sequence[int], dims: Sequence[str] = ("i", "j", "k")) -> go.Figure:
    """The iteration space of ``C[i, j] = sum_k A[i, k] B[k, j]`` cut into per-device blocks (the paper's Fig. 1).

    ``splits`` gives the split factor of i, j, k; block ``(a, b, c)`` goes to
    device ``(a * sj + b) * sk + c``. Blocks are drawn slightly apart, one
    colour per device (:func:`ui.palette.device_color`), all in one Mesh3d
    trace; each block's device id is written at its centre in that colour.
    """
    I, J, K = (int(s) for s in sizes)
    si, sj, sk = (int(s) for s in splits)
    bi, bj, bk = I / si, J / sj, K / sk
    gap = 0.06
    xs, ys, zs, fi, fj, fk, colors = [], [], [], [], [], [], []
    # Unit-cube corners and its 12 triangles.
    corners = list(product((0, 1), repeat=3))
    faces = [(0, 1, 3), (0, 3, 2), (4, 5, 7), (4, 7, 6), (0, 1, 5), (0, 5, 4),
             (2, 3, 7), (2, 7, 6), (0, 2, 6), (0, 6, 4), (1, 3, 7), (1, 7, 5)]
    cx, cy, cz, ctext, cids, ccolors = [], [], [], [], [], []
    for a, b, c in product(range(si), range(sj), range(sk)):
        device = (a * sj + b) * sk + c
        x0, y0, z0 = a * bi, b * bj, c * bk
        base = len(xs)
        for (u, v, w) in corners:
            xs.append(x0 + (gap + u * (1 - 2 * gap)) * bi)
            ys.append(y0 + (gap + v * (1 - 2 * gap)) * bj)
            zs.append(z0 + (gap + w * (1 - 2 * gap)) * bk)
        for f in faces:
            fi.append(base + f[0])
            fj.append(base + f[1])
            fk.append(base + f[2])
            colors.append(device_color(device))
        cx.append(x0 + bi / 2)
        cy.append(y0 + bj / 2)
        cz.append(z0 + bk / 2)
        cids.append(str(device))
        ccolors.append(device_color(device))
        ctext.append(
            f"device {device}<br>{dims[0]} {a * bi:g}–{(a + 1) * bi:g}, {dims[1]} {b * bj:g}–{(b + 1) * bj:g}, "
            f"{dims[2]} {c * bk:g}–{(c + 1) * bk:g}"
        )
    fig = go.Figure([
        go.Mesh3d(x=xs, y=ys, z=zs, i=fi, j=fj, k=fk, facecolor=colors, opacity=0.85, flatshading=True,
                  hoverinfo="skip", name="blocks"),
        go.Scatter3d(x=cx, y=cy, z=cz, mode="markers+text", marker=dict(size=4, color=ccolors,
                                                                         line=dict(color=OUTLINE, width=1)),
                     text=cids, textposition="top center", textfont=dict(size=13, color=ccolors),
                     hovertext=ctext, hoverinfo="text", name="device ids", showlegend=False),
    ])
    fig.update_layout(
        scene=dict(
            xaxis=dict(title=f"{dims[0]} (rows of A and C)", range=[0, I]),
            yaxis=dict(title=f"{dims[1]} (columns of B and C)", range=[0, J]),
            zaxis=dict(title=f"{dims[2]} (reduction)", range=[0, K]),
            aspectmode="cube",
            camera=dict(eye=dict(x=1.6, y=-1.6, z=1.1)),
        ),
        height=460, margin=dict(l=0, r=0, t=10, b=0), showlegend=False,
    )
    return fig


def gemm_tensors_figure(splits: Sequence[int], dims: Sequence[str] = ("i", "j", "k")) -> go.Figure:
    """Which devices hold each block of A (i x k), B (k x j) and C (i x j) for splits (si, sj, sk).

    A block held by several devices is replicated (A over the j split, B over
    the i split) or, for C, holds partial sums over the k split that an
    all-reduce must combine. Cell text lists the devices.
    """
    si, sj, sk = (int(s) for s in splits)

    def dev(a, b, c):
        return (a * sj + b) * sk + c

    panels = [
        ("A", si, sk, dims[0], dims[2], lambda r, q: [dev(r, b, q) for b in range(sj)], "replicated"),
        ("B", sk, sj, dims[2], dims[1], lambda r, q: [dev(a, q, r) for a in range(si)], "replicated"),
        ("C", si, sj, dims[0], dims[1], lambda r, q: [dev(r, q, c) for c in range(sk)], "partial sums"),
    ]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[
        f"A[{dims[0]},{dims[2]}]", f"B[{dims[2]},{dims[1]}]", f"C[{dims[0]},{dims[1]}]"], horizontal_spacing=0.06)
    for col, (name, rows, cols, rdim, cdim, holders, what) in enumerate(panels, start=1):
        z, text, hover = [], [], []
        for r in range(rows):
            zr, tr, hr = [], [], []
            for q in range(cols):
                hs = holders(r, q)
                zr.append(len(hs))
                shown = ",".join(map(str, hs[:6])) + ("…" if len(hs) > 6 else "")
                tr.append(shown)
                kind = what if len(hs) > 1 else "one device"
                hr.append(f"{name} block ({rdim} {r}, {cdim} {q}): devices {shown} ({kind})")
            z.append(zr)
            text.append(tr)
            hover.append(hr)
        fig.add_trace(go.Heatmap(
            z=z, text=text, texttemplate="%{text}", hovertext=hover, hoverinfo="text",
            colorscale=REPLICATED_SCALE if name != "C" else PARTIAL_SUM_SCALE,
            zmin=1, zmax=max(si, sj, sk, 2), showscale=False, xgap=2, ygap=2, textfont=dict(size=11),
        ), row=1, col=col)
        fig.update_xaxes(title_text=cdim, showticklabels=False, row=1, col=col)
        fig.update_yaxes(title_text=rdim, showticklabels=False, autorange="reversed", row=1, col=col)
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=40, b=30))
    return fig


# -- Learn: the search --------------------------------------------------------------------

STEP_ORDER = ("current", "dependent", "connected", "done", "pending")


def search_step_figure(
    g: nx.DiGraph | nx.MultiDiGraph,
    pos: Mapping[str, tuple[float, float]],
    *,
    done: Sequence[str] = (),
    current: str | None = None,
    dependent: Sequence[str] = (),
    connected: Sequence[str] = (),
    order: Mapping[str, int] | None = None,
) -> go.Figure:
    """A small graph at one step of the search: vertices already eliminated, the current vertex v(i),
    its connected set X(i) and its dependent set D(i).

    ``order`` (vertex -> position in the ordering) is written on each vertex.
    """
    fig = go.Figure()
    xs, ys = [], []
    for u, v in g.edges():
        xs += [pos[u][0], pos[v][0], None]
        ys += [pos[u][1], pos[v][1], None]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=MUTED_LINE, width=1.5), hoverinfo="skip",
                             showlegend=False))
    done, dependent, connected = set(done), set(dependent), set(connected)

    def state(n):
        if n == current:
            return "current"
        if n in dependent:
            return "dependent"
        if n in connected:
            return "connected"
        if n in done:
            return "done"
        return "pending"

    legend = {"current": "v(i): current", "dependent": "D(i): dependent set", "connected": "X(i): connected set",
              "done": "eliminated earlier", "pending": "not yet ordered"}
    for st_name in STEP_ORDER:
        ns = [n for n in g.nodes if state(n) == st_name]
        # A state with no vertex at this step still gets its (empty) legend entry: panels side by side
        # (one per ordering) then show the same legend.
        fig.add_trace(go.Scatter(
            x=[pos[n][0] for n in ns] or [None], y=[pos[n][1] for n in ns] or [None], mode="markers+text",
            marker=dict(size=30, color=STEP_COLORS[st_name], line=dict(color=OUTLINE, width=1.5)),
            text=[f"{n}" + (f" ({order[n] + 1})" if order and n in order else "") for n in ns],
            textposition="middle right", hoverinfo="text", hovertext=ns, name=legend[st_name],
            legendrank=STEP_ORDER.index(st_name),
        ))
    _empty_axes(fig)
    xs_all = [p[0] for p in pos.values()]
    fig.update_xaxes(range=[min(xs_all) - 1, max(xs_all) + 2.5])
    fig.update_layout(height=420, margin=dict(l=10, r=10, t=10, b=10), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.02, yanchor="top", x=0))
    return fig


def dependent_sets_figure(series: Mapping[str, Sequence[float]], *, y_title: str = "|D(i)|",
                          log_y: bool = False) -> go.Figure:
    """One line per ordering: the dependent-set size (or table size) at every step."""
    fig = go.Figure()
    for i, (name, values) in enumerate(series.items()):
        fig.add_trace(go.Scatter(
            x=list(range(1, len(values) + 1)), y=list(values), mode="lines", name=name,
            line=dict(color=ordering_color(name, i), width=2, shape="hv"),
        ))
    fig.update_layout(height=320, margin=dict(l=10, r=10, t=20, b=40), xaxis_title="step i",
                      yaxis_title=y_title, legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    if log_y:
        fig.update_yaxes(type="log")
    return fig
