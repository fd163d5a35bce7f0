"""Memory per device: the total against the capacity, and the layers holding most."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pase.model.memory import MemoryReport
from ui.palette import CAPACITY_COLOR, MEMORY_COLORS

__all__ = ["MEMORY_PARTS", "memory_figure"]

# Memory parts: LayerMemory / MemoryReport.totals() field -> (label, colour).
MEMORY_PARTS = {
    field: (label, MEMORY_COLORS[label]) for field, label in (
        ("weights_bytes", "weights"), ("gradient_bytes", "gradients"), ("optimizer_bytes", "optimizer state"),
        ("activation_bytes", "activations"), ("buffer_bytes", "largest comm buffer"), ("reserved_bytes", "reserve"))
}
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
