"""Step time per layer and per strategy: the cost breakdown, the strategies' totals and their layers side by side."""

from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go

from pase.model.cost import LayerCost
from ui.fmt import compact_config, config_str, fmt_time, plotly_text
from ui.palette import COST_COLORS, strategy_color

__all__ = ["SORT_KEYS", "sort_layers", "cost_breakdown_figure", "totals_figure", "layer_compare_figure"]

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
