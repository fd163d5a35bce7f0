"""Figures of a 3-D parallel training plan (:class:`pase.model.training.TrainingPlan`): plain functions, no Streamlit.

* :func:`schedule_figure`: the pipeline schedule as a Gantt chart, one row per
  pipeline device position (stage);
* :func:`stage_memory_figure`: memory per device of each stage against the capacity;
* :func:`memory_timeline_figure`: that memory over the step, as activations are
  kept by the forwards and freed by the backwards (needs a recorded schedule);
* :func:`mesh_figure`: the cluster's devices as a grid coloured by pipeline stage,
  from :func:`device_coordinates`;
* :func:`stage_rows`: the stage table;
* :func:`plans_figure`: the step times of several plans (the search's best and the baselines) side by side.

Every number comes from the plan; these functions only arrange and colour it.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from pase.model.training import TrainingPlan
from ui.fmt import fmt_time, plotly_text
from ui.palette import CAPACITY_COLOR, INK, MEMORY_COLORS, device_color

__all__ = ["OPERATION_COLORS", "IDLE_COLOR", "CHUNK_PATTERNS", "MAX_DEVICE_CELLS", "time_unit", "schedule_figure",
           "stage_memory_figure", "memory_timeline_figure", "device_coordinates", "mesh_figure", "stage_rows",
           "plans_figure"]

# The pipeline schedule's colours, used nowhere else in the app (ui/palette.py has none of these hues):
# forward and backward work, the gradient reduction after a device's last backward, and idle time.
OPERATION_COLORS = {"forward": "#5a9bd4", "backward": "#f28e2b", "weight gradient": "#e15759",
                    "gradient reduction": "#b07aa1"}
IDLE_COLOR = "#ededed"
# Chunks of an interleaved stage (virtual stages 0, 1, ... of a device): the fill pattern of their bars.
CHUNK_PATTERNS = ["", "/", ".", "x", "\\", "+", "-", "|"]
# Above this many devices the mesh grid draws one cell per node (row of the mesh) instead of one per device.
MAX_DEVICE_CELLS = 1024
# Above this many microbatches the schedule draws the first and last WINDOW_MICROBATCHES of them bar by bar and the
# steady state between as one band per stage: 1,024 microbatches bar by bar are a 3.7 MB figure that reads as a
# barcode and blocks a browser for tens of seconds.
MAX_DRAWN_MICROBATCHES = 48
WINDOW_MICROBATCHES = 16
STEADY_COLOR = "#c9a27e"  # between the forward blue and the backward orange: both, interleaved
# A legend under the plot (and its x axis title), left-aligned: clear of plotly's toolbar at the top right.
LEGEND_BELOW = dict(orientation="h", x=0, xanchor="left", y=-0.22, yanchor="top")
# Below this share of the step a bar is too narrow for its microbatch number.
_TEXT_SHARE = 0.012
# Stage rows of the Gantt chart: the operations' lane and, below it, the reductions' lane (in row units).
_OP_LANE = (-0.42, 0.6)  # offset, width
_REDUCE_LANE = (0.22, 0.2)


def time_unit(seconds: float) -> tuple[float, str]:
    """The scale and unit for an axis reaching ``seconds``: ``(1.0, "s")`` from a second up, else ``(1e-3, "ms")``."""
    return (1.0, "s") if seconds >= 1.0 else (1e-3, "ms")


def schedule_figure(plan: TrainingPlan) -> go.Figure:
    """The plan's pipeline schedule as a Gantt chart (needs a plan evaluated with ``record=True``).

    One row per pipeline device position (stage 0 at the top). The forward and
    backward operations are horizontal bars, one trace per kind however many
    microbatches there are: ``"forward"`` and ``"backward"`` hold exactly one
    bar per operation, labelled with its microbatch number when wide enough,
    the chunk of an interleaved stage as its fill pattern. Each stage's gradient
    reduction is a thin bar below its row (from its last backward's end, or
    its start under ``overlap``); the grey bar behind each row spans the step,
    so idle time shows as grey gaps. Times on the x axis in ms (steps under a
    second) or s; hover gives stage, microbatch, chunk, start and end.

    Above :data:`MAX_DRAWN_MICROBATCHES` microbatches, only the first and the
    last :data:`WINDOW_MICROBATCHES` (the fill and the drain, where the bubble
    is) are drawn bar by bar; each stage's operations on the microbatches
    between are one ``"steady state"`` band from the first one's start to the
    last one's end (hover: how many, and the share of the band spent working),
    so the figure's size does not grow with the microbatches. The legend's
    swatches are plain colours, the bars' own.

    Raises ``ValueError`` when the plan's schedule holds no operations (evaluated without ``record``).
    """
    sched = plan.schedule
    ops = sched.operations
    if not ops:
        raise ValueError("the plan's schedule has no operations recorded; evaluate it with record=True")
    step = plan.step_time_s
    scale, unit = time_unit(step)
    S = len(plan.stages)
    v = plan.parallelism.virtual_stages
    m = plan.parallelism.microbatches
    windowed = m > MAX_DRAWN_MICROBATCHES
    middle = [o for o in ops if WINDOW_MICROBATCHES <= o.microbatch < m - WINDOW_MICROBATCHES] if windowed else []
    if windowed:
        ops = [o for o in ops if not WINDOW_MICROBATCHES <= o.microbatch < m - WINDOW_MICROBATCHES]
    # Bar outlines separate wide bars; on hundreds of bars a row they would paint the row white.
    outline = 0.5 if len(ops) <= 100 * S else 0.0
    fig = go.Figure()
    busy = sched.busy_s
    fig.add_trace(go.Bar(
        name="idle", orientation="h", y=list(range(S)), base=[0.0] * S, x=[step / scale] * S,
        width=_OP_LANE[1], offset=_OP_LANE[0], marker=dict(color=IDLE_COLOR), showlegend=True,
        customdata=[[s, fmt_time(max(0.0, step - busy[s])), max(0.0, 1 - busy[s] / step) if step > 0 else 0.0]
                    for s in range(S)],
        hovertemplate="stage %{customdata[0]}: idle %{customdata[1]} (%{customdata[2]:.0%} of the step)<extra></extra>",
    ))
    # A zero-bubble schedule's backward is its input gradient; its deferred weight gradients are bars of their own.
    drawn = (("F", "forward"), ("B", "backward")) + ((("W", "weight gradient"),) if any(o.kind == "W" for o in ops)
                                                    else ())
    for kind, name in drawn:
        mine = [o for o in ops if o.kind == kind]
        fig.add_trace(go.Bar(
            name=name, legendgroup=name, showlegend=False, orientation="h", y=[o.device for o in mine], base=[o.start_s / scale for o in mine],
            x=[(o.end_s - o.start_s) / scale for o in mine], width=_OP_LANE[1], offset=_OP_LANE[0],
            marker=dict(color=OPERATION_COLORS[name], line=dict(width=outline, color="white"),
                        pattern=dict(shape=[CHUNK_PATTERNS[o.chunk % len(CHUNK_PATTERNS)] for o in mine],
                                     fgcolor=INK, size=6, solidity=0.25)),
            text=[str(o.microbatch) if o.end_s - o.start_s >= _TEXT_SHARE * step else "" for o in mine],
            textposition="inside", insidetextanchor="middle", textfont=dict(color="white", size=10),
            customdata=[[o.device, o.microbatch, o.chunk, fmt_time(o.start_s), fmt_time(o.end_s)] for o in mine],
            hovertemplate=(f"<b>{name}</b> stage %{{customdata[0]}}, microbatch %{{customdata[1]}}"
                           + (", chunk %{customdata[2]}" if v > 1 else "")
                           + "<br>%{customdata[3]} to %{customdata[4]}<extra></extra>"),
        ))
    if middle:
        rows = sorted({o.device for o in middle})
        band = {s: (min(o.start_s for o in middle if o.device == s), max(o.end_s for o in middle if o.device == s),
                    sum(o.end_s - o.start_s for o in middle if o.device == s)) for s in rows}
        fig.add_trace(go.Bar(
            name="steady state", legendgroup="steady state", showlegend=False, orientation="h", y=rows,
            base=[band[s][0] / scale for s in rows], x=[(band[s][1] - band[s][0]) / scale for s in rows],
            width=_OP_LANE[1], offset=_OP_LANE[0], marker=dict(color=STEADY_COLOR),
            text=[f"microbatches {WINDOW_MICROBATCHES} to {m - WINDOW_MICROBATCHES - 1}"] * len(rows),
            textposition="inside", insidetextanchor="middle", textfont=dict(color="white", size=10),
            customdata=[[s, m - 2 * WINDOW_MICROBATCHES, fmt_time(band[s][0]), fmt_time(band[s][1]),
                         band[s][2] / (band[s][1] - band[s][0]) if band[s][1] > band[s][0] else 1.0] for s in rows],
            hovertemplate=("<b>steady state</b> stage %{customdata[0]}: forwards and backwards of %{customdata[1]} "
                           "microbatches, interleaved<br>%{customdata[2]} to %{customdata[3]}, working "
                           "%{customdata[4]:.0%} of it<extra></extra>"),
        ))
    # The legend: plain swatches in the bars' colours (a bar trace's swatch would show its first bar's pattern).
    for name, color in (*((name, OPERATION_COLORS[name]) for _, name in drawn),
                        *((("steady state", STEADY_COLOR),) if middle else ())):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, legendgroup=name,
                                 marker=dict(symbol="square", size=12, color=color), hoverinfo="skip"))
    last = {}  # device -> its last backward
    for o in ops:
        if o.kind in "BW" and (o.device not in last or o.end_s > last[o.device].end_s):
            last[o.device] = o
    starts, lengths, hover = [], [], []
    for s, st in enumerate(plan.stages):
        last_b = last[s]
        start = last_b.start_s if plan.parallelism.overlap else last_b.end_s
        starts.append(start / scale)
        lengths.append(st.reduce_s / scale)
        hover.append([s, fmt_time(start), fmt_time(start + st.reduce_s), fmt_time(sched.exposed_reduce_s[s])])
    fig.add_trace(go.Bar(
        name="gradient reduction", orientation="h", y=list(range(S)), base=starts, x=lengths,
        width=_REDUCE_LANE[1], offset=_REDUCE_LANE[0], marker=dict(color=OPERATION_COLORS["gradient reduction"]),
        customdata=hover,
        hovertemplate=("<b>gradient reduction</b> stage %{customdata[0]}<br>%{customdata[1]} to %{customdata[2]}"
                       "<br>exposed: %{customdata[3]}<extra></extra>"),
    ))
    p = plan.parallelism
    fig.update_layout(
        barmode="overlay", height=int(min(900, max(240, 48 * S + 140))), margin=dict(l=10, r=10, t=70, b=40),
        xaxis=dict(title=f"time in the step ({unit})", range=[0, step / scale * 1.01]),
        yaxis=dict(tickvals=list(range(S)), ticktext=[f"stage {s}" for s in range(S)], autorange="reversed"),
        uniformtext=dict(minsize=8, mode="hide"), plot_bgcolor="white", hovermode="closest",
        legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0),
        title=dict(y=0.98, yanchor="top", text=f"{p.schedule} schedule, {p.microbatches:,} microbatches"
                        + (f", {v} chunks per stage (patterns)" if v > 1 else "")
                        + (f"; the first and last {WINDOW_MICROBATCHES} drawn one by one, the steady state between "
                           "as one band" if middle else ""), font=dict(size=13)),
    )
    return fig


def stage_memory_figure(plan: TrainingPlan) -> go.Figure:
    """Memory per device of each stage (GB, 1e9 bytes) as stacked bars against the capacity.

    Parts: weights, gradients, optimizer state, activations (times the
    microbatches in flight), transient (communication buffers, ZeRO-3's
    gathered weights, a recomputed block) and, when not zero, the reserve (the
    rest of the stage's ``memory_bytes``); the parts of a stage sum to its
    ``memory_bytes``. A horizontal line marks the capacity when it is known.
    """
    stages = plan.stages
    x = [f"stage {s.index}" for s in stages]
    parts = [
        ("weights", MEMORY_COLORS["weights"], [s.weights_bytes for s in stages]),
        ("gradients", MEMORY_COLORS["gradients"], [s.gradient_bytes for s in stages]),
        ("optimizer state", MEMORY_COLORS["optimizer state"], [s.optimizer_bytes for s in stages]),
        *([("FP8 weight copies", MEMORY_COLORS["FP8 weight copies"], [s.fp8_bytes for s in stages])]
          if any(s.fp8_bytes for s in stages) else []),
        ("activations", MEMORY_COLORS["activations"], [s.activation_bytes for s in stages]),
        ("transient", MEMORY_COLORS["largest comm buffer"], [s.transient_bytes for s in stages]),
    ]
    reserve = [s.memory_bytes - sum(p[2][i] for p in parts) for i, s in enumerate(stages)]
    if any(r > 1e-9 * s.memory_bytes for r, s in zip(reserve, stages)):
        parts.append(("reserve", MEMORY_COLORS["reserve"], reserve))
    fig = go.Figure()
    for label, color, values in parts:
        fig.add_trace(go.Bar(name=label, x=x, y=[b / 1e9 for b in values], marker_color=color,
                             hovertemplate="%{x}: " + label + " %{y:.4g} GB<extra></extra>"))
    cap = plan.memory_capacity_bytes
    if cap is not None:
        fig.add_hline(y=cap / 1e9, line=dict(color=CAPACITY_COLOR, dash="dash"),
                      annotation_text=f"capacity {cap / 1e9:.3g} GB", annotation_position="top left")
    top = max([s.memory_bytes for s in stages] + [cap or 0.0]) / 1e9
    # The legend below the bars: above them, in a half-width column, it wraps under plotly's toolbar (top right).
    fig.update_layout(barmode="stack", height=400, margin=dict(l=10, r=10, t=30, b=40),
                      yaxis=dict(title="memory per device (GB)", range=[0, top * 1.12]),
                      legend=LEGEND_BELOW)
    return fig


def memory_timeline_figure(plan: TrainingPlan) -> go.Figure:
    """Memory per device of each stage (GB, 1e9 bytes) over the step, one step line per stage, against the capacity.

    Needs a plan evaluated with ``record=True``. Stage ``s``'s line is its
    resident memory (weights, gradients and optimizer state, held all step)
    plus the activations it holds at each moment: every forward of a chunk
    adds one microbatch's activations of that chunk when it starts, every
    backward frees them when it ends. Under the interleaved schedule each
    chunk's microbatch counts ``1/v`` of the stage's per-microbatch
    activations, an even split over the stage's chunks: that is how the memory
    model counts them (:func:`pase.model.pipeline.in_flight`; the plan keeps
    no per-chunk bytes), so with chunks of unequal activations a real device's
    curve differs by that split. The line's peak is therefore exactly the
    stage's weights, gradients, optimizer state and ``activation_bytes``: its
    ``memory_bytes`` less the transient buffers and the reserve, which are not
    drawn (a transient buffer is the peak of a short-lived buffer, not memory
    held all step; the title gives the largest). The time axis is the Gantt
    chart's (:func:`schedule_figure`, :func:`time_unit`), from 0 to the step
    time; a dashed line marks the capacity when it is known. Hover gives the
    stage, the time, the GB and the microbatches' worth in flight. Above
    :data:`MAX_DRAWN_MICROBATCHES` microbatches, a stage's steady state (the
    band of :func:`schedule_figure`) is drawn at its highest level, the fill
    and the drain step by step, so the figure's size does not grow with the
    microbatches.

    Raises ``ValueError`` when the plan's schedule holds no operations (evaluated without ``record``).
    """
    ops = plan.schedule.operations
    if not ops:
        raise ValueError("the plan's schedule has no operations recorded; evaluate it with record=True")
    step = plan.step_time_s
    scale, unit = time_unit(step)
    v = plan.parallelism.virtual_stages
    # Per device, (time, +1 or -1 chunk-microbatch) in its execution order: the recorded operations are sorted
    # stably by start, so one device's keep their order even where a backward ends as the next forward starts.
    events: list[list[tuple[float, int]]] = [[] for _ in plan.stages]
    # A microbatch is freed by its backward, under a zero-bubble schedule by its weight gradient.
    frees = "W" if any(o.kind == "W" for o in ops) else "B"
    for o in ops:
        if o.kind == "F" or o.kind == frees:
            events[o.device].append((o.start_s, 1) if o.kind == "F" else (o.end_s, -1))
    # Above MAX_DRAWN_MICROBATCHES, each stage's steady state (as in schedule_figure) is drawn as its highest level.
    m = plan.parallelism.microbatches
    steady: dict[int, tuple[float, float]] = {}
    if m > MAX_DRAWN_MICROBATCHES:
        for o in ops:
            if WINDOW_MICROBATCHES <= o.microbatch < m - WINDOW_MICROBATCHES:
                t0, t1 = steady.get(o.device, (o.start_s, o.end_s))
                steady[o.device] = (min(t0, o.start_s), max(t1, o.end_s))
    fig = go.Figure()
    for st, mine in zip(plan.stages, events):
        resident = st.weights_bytes + st.gradient_bytes + st.optimizer_bytes + st.fp8_bytes
        # A held chunk-microbatch's share of activation_bytes, which holds in_flight * v of them at the peak.
        peak = st.in_flight * v
        times, counts = [0.0], [0]
        for t, delta in mine:
            if t == times[-1]:  # simultaneous events: only the level after all of them is held
                counts[-1] += delta
            else:
                times.append(t)
                counts.append(counts[-1] + delta)
        times.append(step)
        counts.append(counts[-1])
        if st.index in steady:  # the steady state's points: its highest level from its start to its end
            t0, t1 = steady[st.index]
            inside = [i for i, t in enumerate(times) if t0 <= t <= t1]
            if len(inside) > 2:
                first, last = inside[0], inside[-1]
                top = max(counts[i] for i in inside[:-1])
                times[first:last + 1] = [t0, t1]
                counts[first:last + 1] = [top, counts[last]]
        gb = [(resident + st.activation_bytes * k / peak) / 1e9 for k in counts]
        # One number of hover data per point, no text: a step of 1,024 microbatches has thousands of points a
        # stage, and the figure's size is the page's load time.
        fig.add_trace(go.Scatter(
            name=f"stage {st.index}", x=[t / scale for t in times], y=gb,
            mode="lines", line_shape="hv", line=dict(color=device_color(st.index), width=2),
            customdata=[_sig(k / v, 4) for k in counts],
            hovertemplate=(f"stage {st.index} at %{{x:.4g}} {unit}: %{{y:.4g}} GB, "
                           "%{customdata:.3g} microbatches' activations held"
                           + (f" (each chunk's counted as 1/{v} of the stage's: split evenly over its chunks)"
                              if v > 1 else "") + "<extra></extra>"),
        ))
    cap = plan.memory_capacity_bytes
    if cap is not None:
        fig.add_hline(y=cap / 1e9, line=dict(color=CAPACITY_COLOR, dash="dash"),
                      annotation_text=f"capacity {cap / 1e9:.3g} GB", annotation_position="top left")
    top = max([s.weights_bytes + s.gradient_bytes + s.optimizer_bytes + s.fp8_bytes + s.activation_bytes
               for s in plan.stages]
              + [cap or 0.0]) / 1e9
    big = max(plan.stages, key=lambda s: s.transient_bytes)
    fig.update_layout(
        height=420, margin=dict(l=10, r=10, t=70, b=40), plot_bgcolor="white", hovermode="closest",
        xaxis=dict(title=f"time in the step ({unit})", range=[0, step / scale * 1.01]),
        yaxis=dict(title="memory per device (GB)", range=[0, top * 1.12], gridcolor=IDLE_COLOR),
        legend=LEGEND_BELOW,
        title=dict(y=0.98, yanchor="top", font=dict(size=12),
                   text=f"transient buffers not drawn: up to {big.transient_bytes / 1e9:.3g} GB more at moments "
                        f"(stage {big.index})"),
    )
    return fig


def device_coordinates(plan: TrainingPlan) -> list[tuple[int, int, int, int]]:
    """Per device id, its ``(tensor, context, data, pipeline)`` coordinates under the plan's placement.

    Device ids count the cluster's mesh row-major (outermost axis first: device
    ``n`` of 8-GPU nodes is GPU ``n % 8`` of node ``n // 8``). The groups
    follow ``plan.to_dict()["mesh"]``: the ``t x c`` group innermost, then
    the data-parallel replicas, then the pipeline, each spanning the mesh axes
    listed there (a factor of an axis shared by several groups: the inner
    group varies fastest along it). A group's rank counts its axes' parts with
    the innermost axis fastest; inside the ``t x c`` group, tensor varies
    fastest (``tensor = rank % t``, ``context = rank // t``).
    """
    mesh = plan.cluster.mesh
    spans = plan.to_dict()["mesh"]
    names = [a.name for a in mesh.axes]
    ext = {g: [spans[g].get(n, 1) for n in names] for g in ("tensor x context", "data", "pipeline")}
    t = plan.parallelism.tensor
    out = []
    for n in range(mesh.devices):
        coords, rest = [], n
        for size in reversed(mesh.shape):
            rest, x = divmod(rest, size)
            coords.append(x)
        coords.reverse()  # per axis, outermost first
        ranks = dict.fromkeys(ext, 0)
        for j, x in enumerate(coords):
            inner = 1
            for g in ("tensor x context", "data", "pipeline"):
                k = ext[g][j]
                ranks[g] = ranks[g] * k + (x // inner) % k
                inner *= k
        group = ranks["tensor x context"]
        out.append((group % t, group // t, ranks["data"], ranks["pipeline"]))
    return out


def mesh_figure(plan: TrainingPlan) -> go.Figure:
    """The cluster's devices as a grid coloured by pipeline stage, from :func:`device_coordinates`.

    Rows are the mesh's outer axes (nodes), columns its innermost axis (GPUs of
    a node); a flat cluster wraps its devices into rows of up to 32. Each cell
    shows (as text up to 256 devices, always on hover) the device's tensor,
    data and pipeline coordinates. Above :data:`MAX_DEVICE_CELLS` devices it
    draws one cell per node instead (coloured by its first device's stage, the
    hover giving the node's stages and replicas), and its title says so.
    """
    mesh = plan.cluster.mesh
    coords = device_coordinates(plan)
    p = plan.parallelism
    N = len(coords)
    width = mesh.shape[-1] if len(mesh.shape) > 1 else min(32, N)
    S = p.pipeline
    colorscale = _stage_colorscale(S)
    if N <= MAX_DEVICE_CELLS:
        rows = math.ceil(N / width)
        z = [[None] * width for _ in range(rows)]
        text = [[""] * width for _ in range(rows)]
        hover = [[""] * width for _ in range(rows)]
        for n, (t, c, d, s) in enumerate(coords):
            r, col = divmod(n, width)
            z[r][col] = s
            label = f"t{t}" + (f" c{c}" if p.context > 1 else "") + f" d{d} p{s}"
            text[r][col] = label if N <= 256 else ""
            hover[r][col] = f"device {n}: tensor {t}" + (f", context {c}" if p.context > 1 else "") + \
                f", data {d}, pipeline stage {s}"
        title = f"{N} devices ({rows} x {width}), coloured by pipeline stage"
        x_title, y_title = (mesh.axes[-1].name, " x ".join(a.name for a in mesh.axes[:-1])) if len(mesh.shape) > 1 \
            else (f"device (rows of {width})", "row")
    else:
        nodes = math.ceil(N / width)
        cols = math.ceil(math.sqrt(nodes))
        rows = math.ceil(nodes / cols)
        z = [[None] * cols for _ in range(rows)]
        text = [[""] * cols for _ in range(rows)]
        hover = [[""] * cols for _ in range(rows)]
        for node in range(nodes):
            mine = coords[node * width:(node + 1) * width]
            stages = sorted({s for *_, s in mine})
            replicas = sorted({d for _, _, d, _ in mine})
            r, col = divmod(node, cols)
            z[r][col] = stages[0]
            hover[r][col] = (f"node {node} (devices {node * width} to {node * width + len(mine) - 1}): "
                             f"pipeline stage{'s' if len(stages) > 1 else ''} {_span(stages)}, "
                             f"data replica{'s' if len(replicas) > 1 else ''} {_span(replicas)}")
        title = (f"{N:,} devices: too many to draw one by one, so one cell per node of {width} "
                 f"({nodes:,} nodes), coloured by its first device's pipeline stage")
        x_title, y_title = "node (column)", "node (row)"
    fig = go.Figure(go.Heatmap(
        z=z, text=text, texttemplate="%{text}", textfont=dict(size=9, color="white"), hovertext=hover,
        hoverinfo="text", colorscale=colorscale, zmin=-0.5, zmax=S - 0.5, xgap=2, ygap=2,
        colorbar=dict(title="stage", tickvals=list(range(S)) if S <= 16 else None),
    ))
    fig.update_layout(title=dict(text=plotly_text(title), font=dict(size=13)),
                      height=int(min(900, max(220, 34 * len(z) + 110))), margin=dict(l=10, r=10, t=40, b=40),
                      xaxis=dict(title=x_title, showgrid=False, tickvals=_cell_ticks(len(z[0]))), plot_bgcolor="white",
                      yaxis=dict(title=y_title, autorange="reversed", showgrid=False, tickvals=_cell_ticks(len(z))))
    return fig


def _cell_ticks(cells: int, most: int = 16) -> list[int]:
    """Ticks of a grid axis of ``cells`` cells: whole cell numbers (plotly's own ticks put nodes at -0.5 and 0.5),
    every one up to ``most`` cells, else evenly spaced from 0."""
    return list(range(0, cells, math.ceil(cells / most)))


def plans_figure(plans: dict[str, TrainingPlan], best: str) -> go.Figure:
    """One horizontal bar per plan that fits memory: its step time, and how many times slower than ``best`` it is.

    A plan that does not fit (``fits_memory`` False) gets no bar (it cannot run, so its time is no result) but
    keeps its row, labelled "does not fit"; the x axis is the step time in the unit of :func:`time_unit`.
    """
    names = list(plans)
    runs = {n: p for n, p in plans.items() if p.fits_memory is not False}
    scale, unit = time_unit(max((p.step_time_s for p in runs.values()), default=1.0))
    base = plans[best].step_time_s if best in runs else None
    text = [("" if n not in runs else
             fmt_time(plans[n].step_time_s) + ("" if base is None or n == best
                                               else f" ({plans[n].step_time_s / base:.2f}× the best)"))
            for n in names]
    fig = go.Figure(go.Bar(
        y=[plotly_text(n) for n in names], x=[runs[n].step_time_s / scale if n in runs else None for n in names],
        orientation="h", text=text, textposition="outside", cliponaxis=False,
        marker_color=[OPERATION_COLORS["forward"] if n == best else "#9c9c9c" for n in names],
        hovertext=[plotly_text(p.label) for p in plans.values()], hoverinfo="text+x", showlegend=False))
    # A bar's outside text needs a bar: the rows without one say so from the axis, with the memory they need.
    idle = [n for n in names if n not in runs]
    if idle:
        fig.add_trace(go.Scatter(
            y=[plotly_text(n) for n in idle], x=[0.0] * len(idle), mode="text", textposition="middle right",
            text=[f"does not fit in memory (needs {plans[n].memory_per_device_bytes / 1e9:.3g} GB)" for n in idle],
            textfont=dict(color="#6b6b6b"), hoverinfo="skip", showlegend=False, cliponaxis=False))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(title_text=f"step time ({unit})", rangemode="tozero")
    # Room on the right for the longest bar's label (outside text is not counted by automargin).
    fig.update_layout(height=80 + 44 * len(names), margin=dict(l=10, r=170, t=20, b=40))
    return fig


def _stage_colorscale(stages: int) -> list:
    """A stepped colourscale over ``zmin = -0.5 .. zmax = stages - 0.5``: stage ``s`` in ``device_color(s)``."""
    if stages == 1:
        return [[0.0, device_color(0)], [1.0, device_color(0)]]
    scale = []
    for s in range(stages):
        scale += [[s / stages, device_color(s)], [(s + 1) / stages, device_color(s)]]
    return scale


def _span(values: list[int]) -> str:
    """``"3"`` or ``"0 to 7"``: the sorted ``values``' range."""
    return str(values[0]) if len(values) == 1 else f"{values[0]} to {values[-1]}"


def stage_rows(plan: TrainingPlan) -> list[dict]:
    """The stage table: per stage its layers (first to last layer of each chunk, the first two and the last of
    many: ``StageReport.chunks_text``), layer count, forward, backward, send and reduction ms (per microbatch; the
    reduction once a step), microbatches in flight, memory (GB)."""
    return [{
        "stage": s.index,
        "layers": s.chunks_text(" … "),
        "layer count": s.layer_count,
        "forward ms": _sig(s.forward_s * 1e3),
        "backward ms": _sig(s.backward_s * 1e3),
        "send ms": _sig(s.send_s * 1e3),
        "reduction ms (per step)": _sig(s.reduce_s * 1e3),
        "in flight": s.in_flight,
        "memory GB": _sig(s.memory_bytes / 1e9),
    } for s in plan.stages]


def _sig(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant digits (table cells, figure data)."""
    return float(f"{x:.{digits}g}")
