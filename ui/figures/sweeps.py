"""The what-if sweeps: step time, throughput and speedup against the device count (and a second parameter),
the small multiples of every quantity, and each layer's split at each device count."""

from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ui.fmt import compact_config, config_str, fmt_time, fmt_words, plotly_text
from ui.graphview import kind_of
from ui.palette import CAPACITY_COLOR, KIND_COLORS, strategy_color

__all__ = ["paired_colors", "sweep_figure", "sweep_panels_figure", "split_changes_figure", "LOG_TICK_FORMAT",
           "RATE_TICK_FORMAT", "log_ticks", "log_axis"]

# Tick labels of a logarithmic axis: every tick a whole number of 3 significant figures ("20", "0.5", "1,000"),
# not plotly's leading digit alone ("2", "5") between powers of ten; a rate with an SI suffix ("400k", "1M"). The
# ticks themselves from log_ticks: plotly's own, labelled in full, would crowd an axis spanning a decade or two.
LOG_TICK_FORMAT = ",.3~r"
RATE_TICK_FORMAT = ".3~s"
# Ticks of a logarithmic axis, finest first: the mantissas of each power of ten.
_LOG_MANTISSAS = ((1, 1.5, 2, 3, 5, 7), (1, 2, 5), (1, 3), (1,))


def log_ticks(values: Sequence[float | None], most: int = 6) -> list[float] | None:
    """Tick values of a logarithmic axis over the positive ``values``: the finest of 1-1.5-2-3-5-7, 1-2-5, 1-3 and
    1 per power of ten that puts at most ``most`` ticks between the least and the largest value, else every n-th
    power of ten; None (plotly's own ticks) when no value is positive or the finest puts fewer than two there."""
    import math

    shown = [v for v in values if v is not None and v > 0]
    if not shown:
        return None
    lo, hi = min(shown), max(shown)
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    # Ticks just outside the values stay: plotly's range pads them a little.
    lo, hi = lo / 1.15, hi * 1.15
    for mantissas in _LOG_MANTISSAS:
        ticks = [float(f"{m * 10.0 ** e:.3g}") for e in range(first, last + 1) for m in mantissas
                 if lo <= m * 10.0 ** e <= hi]
        if len(ticks) < 2:  # a range within one step of the finest: plotly's own ticks, few and labelled in full
            return None
        if len(ticks) <= most:
            return ticks
    step = max(1, math.ceil((last - first + 1) / most))
    return [10.0 ** e for e in range(first, last + 1, step)]

def log_axis(values: Sequence[float | None], least_ratio: float = 3.0) -> dict:
    """The ``tickvals`` (:func:`log_ticks`) and, for values spanning less than ``least_ratio`` (largest / least), the
    ``range`` (log10 units) of a logarithmic y axis over the positive ``values``: such a range is widened to
    ``least_ratio`` around their geometric middle, so that a flat line (the GPU-hours of perfect scaling, equal up
    to rounding) reads flat and between labelled ticks, not as a staircase of rounding noise with none."""
    import math

    shown = [v for v in values if v is not None and v > 0]
    if not shown or max(shown) / min(shown) >= least_ratio:
        return {"tickvals": log_ticks(values)}
    middle = math.sqrt(min(shown) * max(shown))
    lo, hi = middle / math.sqrt(least_ratio), middle * math.sqrt(least_ratio)
    return {"tickvals": log_ticks([lo * 1.15, hi / 1.15]), "range": [math.log10(lo), math.log10(hi)]}


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
    return f"{need / 1e9:.3g} GB of {cap / 1e9:.3g} GB"


def _step_unit(records: Sequence[Mapping]) -> tuple[str, float]:
    """(axis title, scale from seconds) of step times: seconds once the longest step that runs is 10 s or more (a
    language model's), else milliseconds."""
    longest = max((r["step_time_s"] for r in records if r.get("step_time_s") is not None and _runs(r)), default=0.0)
    return ("s per step", 1.0) if longest >= 10.0 else ("ms per step", 1e3)


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
        "step time": ("step_time_s", "Estimated step time", *_step_unit(records)),
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
    fig.update_yaxes(title_text=left_unit, type="linear" if show == "MFU" else "log", row=1, col=1,
                     tickformat=RATE_TICK_FORMAT if show == "throughput" else LOG_TICK_FORMAT,
                     **({} if show == "MFU" else log_axis(
                         [r[left] * left_scale for r in records if r.get(left) is not None and _runs(r)])))
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
        ("step_time_s", "Step time", *_step_unit(records), True),
        (rate, "Throughput", "tokens/s" if tokens else "samples/s", 1.0, True),
        ("mfu", "MFU (of peak FLOP/s)", "% of peak", 100.0, False),
        ("memory_per_device_bytes", "Memory per device", "GB", 1e-9, True),
    ]
    if estimated:
        amount = records[0]["train_amount"]
        panels += [("time_to_train_s", f"Time to train {fmt_words(amount)} {unit}", t_unit, 1 / t_scale, True),
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
        text = plotly_text(f"{', '.join(names)}: {capacity / 1e9:.3g} GB")
        fig.add_trace(go.Scatter(
            x=[ticks[0], ticks[-1]], y=[capacity * 1e-9] * 2, mode="lines+text", text=[text, ""],
            # Under its line: above it, the label of a capacity at the top of the axis would leave the plot.
            textposition="bottom right", textfont=dict(size=10, color=CAPACITY_COLOR), name=f"capacity {text}",
            line=dict(color=CAPACITY_COLOR, dash="dot", width=1), showlegend=False, hoverinfo="name",
        ), row=memory_at // cols + 1, col=memory_at % cols + 1)
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(t) for t in ticks])
    fig.update_xaxes(title_text="devices", row=rows)
    for i, (key, _, title, scale, log) in enumerate(panels):
        ticks_as = RATE_TICK_FORMAT if key == rate else LOG_TICK_FORMAT
        drawn = [r[key] * scale for r in records if r.get(key) is not None
                 and (key == "memory_per_device_bytes" or _runs(r))]
        if key == "memory_per_device_bytes":
            drawn += [c * 1e-9 for c in capacities]
        fig.update_yaxes(title_text=title, type="log" if log else "linear", row=i // cols + 1, col=i % cols + 1,
                         **({"tickformat": ticks_as, **log_axis(drawn)} if log else {"rangemode": "tozero"}))
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
