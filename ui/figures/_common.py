"""What several figure modules share."""

from __future__ import annotations

import plotly.graph_objects as go


def empty_axes(fig: go.Figure) -> None:
    """Hide both axes of ``fig`` (their lines, grid and zero line): a drawing, not a chart."""
    fig.update_xaxes(visible=False, showgrid=False, zeroline=False)
    fig.update_yaxes(visible=False, showgrid=False, zeroline=False)

