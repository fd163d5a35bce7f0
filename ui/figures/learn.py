"""The Learn page's figures: the GEMM iteration space cut among devices, and the search's steps."""

from __future__ import annotations

from itertools import product
from typing import Mapping, Sequence

import networkx as nx
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ui.palette import (
    MUTED_LINE, OUTLINE, PARTIAL_SUM_SCALE, REPLICATED_SCALE, STEP_COLORS, device_color, ordering_color,
)

__all__ = ["gemm_cube_figure", "gemm_tensors_figure", "STEP_ORDER", "search_step_figure", "dependent_sets_figure"]

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
    fig.update_xaxes(visible=False, showgrid=False, zeroline=False)
    fig.update_yaxes(visible=False, showgrid=False, zeroline=False)
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
