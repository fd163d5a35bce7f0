"""Figures of the time to train with failures and checkpoints (:mod:`pase.analysis.time_to_train`), for the
What-if page: plain functions returning plotly figures."""

from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ui.figures.sweeps import LOG_TICK_FORMAT, log_axis
from ui.fmt import plotly_text

__all__ = ["time_to_train_figure"]


def time_to_train_figure(records: Sequence[Mapping], *, series: str = "series") -> go.Figure:
    """Wall-clock days to train, goodput and (when priced) cost against the device count, one line per ``series``.

    ``records`` carry :data:`pase.analysis.time_to_train.SWEEP_FIELDS`
    (:func:`~pase.analysis.time_to_train.with_time_to_train`); records whose
    ``goodput`` is None (a 0 s step, or a plan that does not fit memory) are
    left out. The days panel also draws each series' failure-free days
    (``time_to_train_s`` of :func:`pase.analysis.sweep.with_training_estimates`,
    when present) dotted, so the gap is what failures and checkpoints cost.
    The device axes are logarithmic.
    """
    shown = [r for r in records if r.get("goodput") is not None]
    priced = any(r.get("wall_cost") is not None for r in shown)
    panels = [("wall_days", "Days to train (dotted: without failures)", "days"),
              ("goodput", "Goodput (useful share of wall time)", "goodput")]
    if priced:
        panels.append(("wall_cost", "Cost (GPU-hours x price)", "cost"))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[1] for p in panels], horizontal_spacing=0.08)
    names = list(dict.fromkeys(r[series] for r in shown))
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    for n, name in enumerate(names):
        pts = sorted((r for r in shown if r[series] == name), key=lambda r: r["devices"])
        color = palette[n % len(palette)]
        x = [r["devices"] for r in pts]
        hover = [f"{plotly_text(str(name))}<br>p = {r['devices']:,}: {r['wall_days']:.3g} days, goodput "
                 f"{r['goodput']:.3f}, {r['interruptions_per_day']:.3g} interruptions a day" for r in pts]
        for i, (key, _, _) in enumerate(panels):
            fig.add_trace(go.Scatter(x=x, y=[r[key] for r in pts], mode="lines+markers",
                                     name=plotly_text(str(name)), legendgroup=str(name), showlegend=i == 0,
                                     line=dict(color=color), hovertext=hover, hoverinfo="text"),
                          row=1, col=i + 1)
        if all(r.get("time_to_train_s") is not None for r in pts):
            fig.add_trace(go.Scatter(x=x, y=[r["time_to_train_s"] / 86400 for r in pts], mode="lines",
                                     name=f"{plotly_text(str(name))} without failures", legendgroup=str(name),
                                     showlegend=False, line=dict(color=color, dash="dot"), hoverinfo="skip"),
                          row=1, col=1)
    counts = sorted({r["devices"] for r in shown})
    for i, (key, _, title) in enumerate(panels):
        fig.update_xaxes(type="log", title_text="devices", tickvals=counts, ticktext=[f"{n:,}" for n in counts],
                         row=1, col=i + 1)
        if title == "goodput":
            # A share of the wall time, drawn from 0 to all of it (a range of 0.9998 to 0.9999 would need ticks of
            # five figures and read as a steep fall).
            fig.update_yaxes(title_text=title, range=[0, 1.05], tickformat=".0%", row=1, col=i + 1)
            continue
        drawn = [r.get(key) for r in shown]
        if key == "wall_days":  # the dotted lines too
            drawn += [r["time_to_train_s"] / 86400 for r in shown if r.get("time_to_train_s") is not None]
        fig.update_yaxes(title_text=title, type="log", tickformat=LOG_TICK_FORMAT, **log_axis(drawn), row=1, col=i + 1)
    fig.update_layout(height=380, margin=dict(t=60, b=40), legend=dict(orientation="h", y=-0.25))
    return fig
