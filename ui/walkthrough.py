"""The Learn page's walk-through: data, tensor, sequence and pipeline parallelism and ZeRO on one tiny model.

Plain functions over :mod:`pase` (no Streamlit). Every step is one
:class:`~pase.model.training.Parallelism` of :func:`pase.models.teaching.tiny_lm`
on the same eight GPUs (two nodes of four, the ``dgx-h100`` preset's figures),
modelled by :func:`~pase.model.training.evaluate_training`. A step reports

* what each device holds: the stage reports' weights, gradients, optimizer
  state, activations and buffers (:mod:`pase.model.memory`'s counts), with the
  device's tensor, data and pipeline coordinates;
* what crosses which link: every collective and send of the step, with the
  bytes one device sends across each mesh axis. They are priced by the cost
  model's own functions (the layers' collectives and the edges'
  redistributions on the stage's tensor-parallel group, the gradient reduction
  over the data-parallel replicas); the bytes on an axis are the seconds of the
  same call on a *probe* mesh whose axis carries one byte per second and whose
  other axes are free, so no volume is re-derived here. A pipeline send's bytes
  are its time in the schedule (the stage report's ``send_s``) at its axis's
  bandwidth.

:func:`holdings_figure` and :func:`traffic_figure` draw a step in the shared palette.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable, Mapping

import numpy as np
import plotly.graph_objects as go

from pase.hardware.cluster import PRESETS, Cluster
from pase.hardware.mesh import DeviceMesh
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.model.cost import build_cost_model, collective_s
from pase.model.layout import axis_factors, redistribute_s, tensor_layout
from pase.model.memory import MemoryOptions
from pase.model.training import Parallelism, TrainingPlan, check_devices, evaluate_training, group_cluster
from pase.models.teaching import tiny_lm
from pase.ops import OPS, CollectiveOptions, collectives, partial_collectives
from pase.strategies.baselines import tensor_parallel_strategy
from ui.fmt import plotly_text
from ui.palette import MEMORY_COLORS, PARALLELISM_COLORS
from ui.training_figures import device_coordinates

__all__ = ["STEPS", "ZERO_STAGES", "GLOBAL_BATCH", "walk_cluster", "walk_graph", "Transfer", "WalkStep",
           "walk_step", "holdings_figure", "traffic_figure", "transfer_rows", "step_story", "summary_rows",
           "step_parallelism", "weight_rows", "gradient_share", "stage_layers", "LINK_NAMES", "MB", "fmt_mb"]

# Sequences per training step; every step runs microbatches of one sequence per replica.
GLOBAL_BATCH = 8
STEPS = ("Data parallelism", "Tensor parallelism", "Sequence parallelism", "Pipeline parallelism", "ZeRO")
ZERO_STAGES = (1, 2, 3)
# What each mesh axis of the walk-through's cluster is, in words.
LINK_NAMES = {"gpu": "NVLink, inside a node", "node": "network, between nodes"}
# The byte rate of a probe mesh's measured axis (1 B/s: seconds are bytes) and of its free axes.
_PROBE_BPS, _FREE_BPS = 1.0, 1e300


def walk_cluster() -> Cluster:
    """Eight GPUs of the ``dgx-h100`` preset as two nodes of four: NVLink inside a node, the network between."""
    return replace(PRESETS["dgx-h100"], devices=8, devices_per_node=4, name="2 nodes x 4 H100")


def walk_graph(batch: int = 1) -> Graph:
    """The walk-through's model at ``batch`` sequences (:func:`pase.models.teaching.tiny_lm`)."""
    return tiny_lm(batch=batch)


def step_parallelism(step: str, zero: int = 3) -> Parallelism:
    """The configuration of walk-through ``step`` (one of :data:`STEPS`); ``zero``: the ZeRO step's stage.

    Raises ``ValueError`` for an unknown step.
    """
    G = GLOBAL_BATCH
    if step == "Data parallelism":
        return Parallelism(data=8, global_batch=G)
    if step == "Tensor parallelism":
        return Parallelism(tensor=4, data=2, global_batch=G)
    if step == "Sequence parallelism":
        return Parallelism(tensor=4, data=2, global_batch=G, sequence_parallel=True)
    if step == "Pipeline parallelism":
        # One block per stage, cut where the second block begins (the time-balanced cut, one LayerNorm later,
        # would leave a block split over the two stages).
        cut = [layer.name for layer in walk_graph().layers].index("h.1.ln")
        return Parallelism(tensor=4, pipeline=2, global_batch=G, stage_cuts=(cut,))
    if step == "ZeRO":
        return Parallelism(data=8, global_batch=G, zero=zero)
    raise ValueError(f"unknown walk-through step {step!r}; choose one of {', '.join(STEPS)}")


@dataclass(frozen=True)
class Transfer:
    """One communication of a step, as it crosses one mesh axis.

    ``bytes_per_device``: what one device sends across ``axis`` each time it
    runs; ``times``: how often it runs per step (per microbatch, or once);
    ``seconds``: its time on that axis each time. ``kind`` is the parallelism it
    belongs to (a key of :data:`ui.palette.PARALLELISM_COLORS`); every device of
    pipeline stage ``stage`` sends it.
    """

    kind: str
    collective: str
    what: str
    axis: str
    bytes_per_device: float
    times: int
    seconds: float
    stage: int = 0  # the pipeline stage whose devices send it

    @property
    def step_bytes(self) -> float:
        """Bytes one device sends across the axis for it in a whole step."""
        return self.bytes_per_device * self.times


@dataclass(frozen=True)
class WalkStep:
    """A walk-through step: its configuration, the modelled step and its transfers."""

    name: str
    plan: TrainingPlan
    transfers: tuple[Transfer, ...]
    coordinates: tuple[tuple[int, int, int, int], ...]  # per device: tensor, context, data, pipeline
    graph: Graph  # at the microbatch size
    strategy: Mapping[str, tuple[int, ...]]  # every layer's split on the tensor-parallel group

    @property
    def parallelism(self) -> Parallelism:
        return self.plan.parallelism

    def stage_of(self, device: int):
        """The stage report of ``device`` (every device of a stage holds as much)."""
        return self.plan.stages[self.coordinates[device][3]]

    def bytes_by_axis(self, stage: int = 0) -> dict[str, float]:
        """Bytes one device of ``stage`` sends per step across each mesh axis (axes without traffic left out)."""
        out: dict[str, float] = {}
        for t in self.transfers:
            if t.stage == stage:
                out[t.axis] = out.get(t.axis, 0.0) + t.step_bytes
        return out


def _probe(mesh: DeviceMesh, axis: int, measure: bool) -> DeviceMesh:
    """``mesh`` with every axis but ``axis`` free; ``measure``: ``axis`` carries one byte per second, no latency."""
    axes = []
    for j, a in enumerate(mesh.axes):
        if j != axis:
            axes.append(replace(a, bandwidth_Bps=_FREE_BPS, latency_s=0.0, efficiency=1.0))
        elif measure:
            axes.append(replace(a, bandwidth_Bps=_PROBE_BPS, latency_s=0.0, efficiency=1.0))
        else:
            axes.append(a)
    return DeviceMesh(tuple(axes))


def _per_axis(mesh: DeviceMesh, seconds: Callable[[DeviceMesh], float]) -> list[tuple[str, float, float]]:
    """``(axis name, bytes, seconds)`` per axis a communication priced by ``seconds(mesh)`` crosses."""
    out = []
    for j, a in enumerate(mesh.axes):
        nbytes = float(seconds(_probe(mesh, j, True)))
        # An axis the communication does not cross still shows its bytes over the free axes' 1e300 B/s.
        if nbytes >= 1.0:
            out.append((a.name, nbytes, float(seconds(_probe(mesh, j, False)))))
    return out


def _edge_collective(src, dst) -> str:
    """The collective a redistribution from layout ``src`` to ``dst`` (their first configuration) runs."""
    wanted = int(np.bitwise_or.reduce(dst.shard[0])) if dst.shard.shape[1] else 0
    held = int(np.bitwise_or.reduce(src.shard[0])) if src.shard.shape[1] else 0
    pending = int(src.partial[0])
    if pending:
        return "all-reduce" if pending & ~wanted else "reduce-scatter"
    return "all-to-all" if held & ~wanted and wanted & ~held else "all-gather"


def _group_transfers(graph: Graph, cluster: Cluster, par: Parallelism, strategy: dict,
                     options: ConfigOptions) -> list[Transfer]:
    """The collectives inside one stage replica's ``t x c`` group: the layers' own and the edges' redistributions.

    As :func:`pase.model.cost.build_cost_model` prices them on the group (its
    ``_layer_comm_s`` and corrected edge rule): a layer's collectives, plus the
    pending sums of an output no layer reads; per edge, the tensor from the
    producer's layout to the consumer's and its gradient back.
    """
    group = group_cluster(cluster, par)
    if group.devices == 1:
        return []
    configs = {name: np.array([cfg]) for name, cfg in strategy.items()}
    model = build_cost_model(graph, group, options, configs=configs)
    mesh, bpe = group.mesh, group.bytes_per_element
    kind = "sequence" if par.sequence_parallel else "tensor"
    m = par.microbatches
    # The stage of each layer: its index against the stage cuts (a layer's edges are costed with the consumer).
    cuts = par.stage_cuts or ()
    stage = {layer.name: sum(i >= c for c in cuts) for i, layer in enumerate(graph.layers)}
    out: list[Transfer] = []
    for layer in graph.layers:
        place = model.placements[layer.name]
        found = collectives(layer, configs[layer.name], CollectiveOptions(sync_batchnorm=options.batchnorm_synchronised))
        if OPS[layer.op].contraction:
            read = {e.src_output for e in graph.out_edges(layer.name)}
            found += [c for i, c in enumerate(partial_collectives(layer, configs[layer.name], [False] * len(layer.inputs)))
                      if i not in read]
        for c in found:
            k = axis_factors(layer, place, c.dims)
            name = {"allreduce": "all-reduce", "allgather": "all-gather", "exchange": "exchange"}[c.kind]
            for axis, nbytes, secs in _per_axis(mesh, lambda mm: collective_s(c, k, mm, bpe)[0]):
                out.append(Transfer(kind, name, f"{layer.name}: {c.what}", axis, nbytes,
                                    1 if c.weight_gradient else m, secs, stage[layer.name]))
    for e in graph.edges:
        src, dst = graph.layer(e.src), graph.layer(e.dst)
        sp, dp = model.placements[e.src], model.placements[e.dst]
        tensor = dst.inputs[e.dst_input]
        moves = [("forward", tensor_layout(src, src.outputs[e.src_output], sp, partial=True),
                  tensor_layout(dst, tensor, dp, partial=False))]
        if tensor.differentiable:
            moves.append(("its gradient back", tensor_layout(dst, tensor, dp, partial=True),
                          tensor_layout(src, src.outputs[e.src_output], sp, partial=False)))
        for direction, a, b in moves:
            for axis, nbytes, secs in _per_axis(mesh, lambda mm: redistribute_s(a, b, mm, bpe)[0, 0]):
                out.append(Transfer(kind, _edge_collective(a, b), f"{e.src} → {e.dst}, {direction}", axis, nbytes,
                                    m, secs, stage[e.dst]))
    return out


def _data_transfers(plan: TrainingPlan, cluster: Cluster, memory: MemoryOptions) -> list[Transfer]:
    """The weight and gradient traffic among the data-parallel replicas, per stage: all-reduce, or ZeRO's."""
    par = plan.parallelism
    if par.data == 1:
        return []
    data_k = np.array(check_devices(par, cluster)[1], dtype=float)
    mesh, bpe = cluster.mesh, cluster.bytes_per_element
    per_weight = memory.bytes_per_parameter(bpe)["weights"]
    out: list[Transfer] = []
    for s in plan.stages:
        # The stage's whole weight (and gradient) block in bytes: the memory model's parameter count (which
        # ZeRO-3 shards d ways) at the cluster's element size.
        block = s.weights_bytes / per_weight * (par.data if par.zero == 3 else 1) * bpe
        where = f" (stage {s.index})" if par.pipeline > 1 else ""
        if par.zero == 0:
            ops = [("data", "all-reduce", "gradients" + where, "allreduce_s", 1)]
        elif par.zero < 3:
            ops = [("ZeRO", "reduce-scatter", "gradients, each device keeping its shard" + where, "reduce_scatter_s", 1),
                   ("ZeRO", "all-gather", "updated weights from their owners" + where, "allgather_s", 1)]
        else:
            m = par.microbatches
            ops = [("ZeRO", "all-gather", "weights before each layer's forward" + where, "allgather_s", m),
                   ("ZeRO", "all-gather", "weights again before its backward" + where, "allgather_s", m),
                   ("ZeRO", "reduce-scatter", "gradients to their owners" + where, "reduce_scatter_s", m)]
        for kind, name, what, price, times in ops:
            # The mesh's pricing of this collective (DeviceMesh.allreduce_s...), on the probe meshes.
            for axis, nbytes, secs in _per_axis(mesh, lambda mm: getattr(mm, price)(block, data_k)):
                out.append(Transfer(kind, name, what, axis, nbytes, times, secs, s.index))
    return out


def _pipeline_transfers(plan: TrainingPlan, cluster: Cluster) -> list[Transfer]:
    """The pipeline's sends: each stage boundary's activation forward and its gradient back, per microbatch."""
    par = plan.parallelism
    if par.pipeline == 1:
        return []
    pipe_k = check_devices(par, cluster)[2]
    j = max(i for i, k in enumerate(pipe_k) if k > 1)
    a = cluster.mesh.axes[j]
    out = []
    for s in plan.stages[:-1]:
        if s.send_s > 0:
            # The schedule's send time is bytes / bandwidth + latency on that axis (DeviceMesh.send_recv_s);
            # bytes are whole, so rounding undoes the floating-point error of the division.
            nbytes = float(round((s.send_s - a.latency_s) * a.effective_Bps))
            m = par.microbatches
            out.append(Transfer("pipeline", "send", f"stage {s.index} → {s.index + 1}: the boundary activation",
                                a.name, nbytes, m, s.send_s, s.index))
            out.append(Transfer("pipeline", "send", f"stage {s.index + 1} → {s.index}: its gradient",
                                a.name, nbytes, m, s.send_s, s.index + 1))
    return out


@lru_cache(maxsize=16)
def walk_step(step: str, zero: int = 3) -> WalkStep:
    """Walk-through ``step`` (one of :data:`STEPS`; ``zero`` the ZeRO step's stage), modelled and its traffic listed.

    Raises ``ValueError`` for an unknown step, and pase's errors if the model refuses the configuration.
    """
    cluster = walk_cluster()
    par = step_parallelism(step, zero)
    options, memory = ConfigOptions(), MemoryOptions()
    graph = walk_graph(par.microbatch_size)
    strategy = tensor_parallel_strategy(graph, par.tensor, par.context, par.sequence_parallel)
    plan = evaluate_training(graph, cluster, par, strategy=strategy, options=options, memory=memory)
    transfers = (_group_transfers(graph, cluster, plan.parallelism, strategy, options)
                 + _data_transfers(plan, cluster, memory) + _pipeline_transfers(plan, cluster))
    return WalkStep(step, plan, tuple(transfers), tuple(device_coordinates(plan)), graph, strategy)


def _shard_lines(step: WalkStep, n: int) -> list[str]:
    """Device ``n``'s place in the configuration, one short line each: tensor shard, stage, replica or ZeRO shard."""
    t, _, d, s = step.coordinates[n]
    par = step.parallelism
    lines = []
    if par.tensor > 1:
        lines.append(f"shard {t + 1}/{par.tensor}")
    if par.pipeline > 1:
        lines.append(f"stage {s}")
    if par.data > 1:
        lines.append(f"replica {d}" if par.zero == 0 else f"ZeRO {d + 1}/{par.data}")
    return lines


def _device_label(step: WalkStep, n: int) -> str:
    """``"GPU 5<br>node 1<br>shard 2/4<br>replica 1"``: the device, its node and its place in the configuration."""
    gpu = step.plan.cluster.mesh.shape[-1]
    return "<br>".join([f"GPU {n}", f"node {n // gpu}", *_shard_lines(step, n)])


# The walk-through's unit, in the figures, the tables and the text alike.
MB = 1e6


def fmt_mb(nbytes: float) -> str:
    """``"16.8 MB"``: bytes in the walk-through's unit, three significant digits."""
    return f"{nbytes / MB:.3g} MB"


def holdings_figure(step: WalkStep) -> go.Figure:
    """What each device holds, in MB: weights, gradients, optimizer state, activations and buffers, stacked."""
    n = len(step.coordinates)
    x = [_device_label(step, i) for i in range(n)]
    # (legend, colour of ui.palette.MEMORY_COLORS, field of the stage report); "transient" as on the Training page:
    # the largest communication buffer, and under ZeRO-3 the largest layer's gathered weights.
    parts = [("weights", "weights", "weights_bytes"), ("gradients", "gradients", "gradient_bytes"),
             ("optimizer state", "optimizer state", "optimizer_bytes"), ("activations", "activations", "activation_bytes"),
             ("transient", "largest comm buffer", "transient_bytes")]
    fig = go.Figure()
    for label, colour, field in parts:
        values = [getattr(step.stage_of(i), field) / MB for i in range(n)]
        if not any(values):
            continue
        fig.add_trace(go.Bar(x=x, y=values, name=label, marker_color=MEMORY_COLORS[colour],
                             hovertemplate=f"%{{x}}<br>{label}: %{{y:.3g}} MB<extra></extra>"))
    fig.update_layout(barmode="stack", title=dict(text=plotly_text("What each device holds"), font=dict(size=14)),
                      yaxis=dict(title="MB per device", rangemode="tozero"), xaxis=dict(tickfont=dict(size=11)),
                      height=400, margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.38, traceorder="normal"))
    return fig


def traffic_figure(step: WalkStep) -> go.Figure:
    """What crosses which link: MB one device sends per step across each mesh axis (a row per axis, and per
    stage when the step is pipelined), one bar piece per transfer, coloured by the parallelism it belongs to."""
    cluster = step.plan.cluster
    stages = step.parallelism.pipeline

    def row(stage: int, axis: str) -> str:
        a = next(a for a in cluster.mesh.axes if a.name == axis)
        head = f"stage {stage} devices · " if stages > 1 else ""
        return f"{head}{axis}: {LINK_NAMES.get(axis, 'link')}<br>{a.bandwidth_Bps / 1e9:g} GB/s"

    rows = [row(s, a.name) for s in range(stages) for a in cluster.mesh.axes]
    fig = go.Figure()
    seen: set[str] = set()
    for t in step.transfers:
        fig.add_trace(go.Bar(
            y=[row(t.stage, t.axis)], x=[t.step_bytes / MB], orientation="h", name=t.kind, legendgroup=t.kind,
            showlegend=t.kind not in seen,
            marker=dict(color=PARALLELISM_COLORS[t.kind], line=dict(width=1, color="white")),
            hovertemplate=plotly_text(f"{t.collective}: {t.what}<br>{fmt_mb(t.bytes_per_device)} x {t.times} = ")
            + "%{x:.3g} MB<extra></extra>"))
        seen.add(t.kind)
    if not step.transfers:
        fig.add_annotation(text="nothing crosses any link", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(barmode="stack", title=dict(text=plotly_text("What crosses which link, per device and step"),
                                                  font=dict(size=14)),
                      xaxis=dict(title="MB sent by one device per step", rangemode="tozero"),
                      yaxis=dict(categoryorder="array", categoryarray=rows[::-1]), height=140 + 60 * len(rows),
                      margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.35, traceorder="normal"))
    return fig


def transfer_rows(step: WalkStep) -> list[dict]:
    """The step's transfers as table rows (per device)."""
    return [{"parallelism": t.kind, "collective": t.collective, "what": t.what, "link": t.axis, "stage": t.stage,
             "MB each time": float(f"{t.bytes_per_device / MB:.4g}"), "times per step": t.times,
             "MB per step": float(f"{t.step_bytes / MB:.4g}"), "µs each time": float(f"{t.seconds * 1e6:.4g}")}
            for t in step.transfers]


def weight_rows(step: WalkStep) -> list[dict]:
    """Which block of which weight a GPU holds: per weight, its shape, the split of its axes on the tensor-parallel
    group (the strategy's factors of the dimensions they follow), the stage holding it, and a GPU's share."""
    par = step.parallelism
    cuts = par.stage_cuts or ()
    rows = []
    for i, layer in enumerate(step.graph.layers):
        split = dict(zip(layer.dims, step.strategy[layer.name]))
        for w in layer.weights:
            factors = [split.get(a, 1) if a is not None else 1 for a in w.axes]
            block = [n // f for n, f in zip(w.shape, factors)]
            share = 1 / math.prod(factors) / (par.data if par.zero == 3 else 1)
            row = {"layer": layer.name, "weight": w.name, "shape": " × ".join(map(str, w.shape)),
                   "block of each GPU": " × ".join(map(str, block)) + (f", then 1/{par.data} of it (ZeRO-3)"
                                                                       if par.zero == 3 else ""),
                   "GPU's share": f"1/{round(1 / share)}" if share < 1 else "all"}
            if par.pipeline > 1:
                row["stage"] = sum(i >= c for c in cuts)
            rows.append(row)
    return rows


def gradient_share(p: int) -> float:
    """The ring all-reduce's bytes per device over the block's: ``2 (p - 1) / p``."""
    return 2 * (p - 1) / p if p > 1 else 0.0


def stage_layers(step: WalkStep, stage: int) -> str:
    """``"embed … h.0.add"``: the first and last layer of a stage."""
    first, last = step.plan.stages[stage].layers[0]
    return first if first == last else f"{first} … {last}"


def _axis_bytes(step: WalkStep, axis: str, stage: int = 0, kinds: tuple[str, ...] | None = None) -> float:
    return sum(t.step_bytes for t in step.transfers
               if t.axis == axis and t.stage == stage and (kinds is None or t.kind in kinds))


def step_story(step: WalkStep) -> list[str]:
    """A step in plain words (markdown paragraphs), every number from the model (the step's plan and transfers)."""
    par, st0 = step.parallelism, step.plan.stages[0]
    B = fmt_mb
    m = par.microbatches
    nvlink, network = _axis_bytes(step, "gpu"), _axis_bytes(step, "node")
    if step.name == "Data parallelism":
        d, gpus = par.data, step.plan.cluster.mesh.shape[-1]
        return [
            f"Every one of the {d} GPUs holds **the whole model**: {B(st0.weights_bytes)} of bf16 weights, as much "
            f"again of gradients and {B(st0.optimizer_bytes)} of Adam state (an fp32 master copy and two moments). "
            f"Each works on its own sequence of the {par.global_batch}, keeping {B(st0.activation_bytes)} of "
            "activations for its backward pass.",
            f"After the backward pass the GPUs **all-reduce their gradients**: each sends 2(p − 1)/p = "
            f"{gradient_share(d):g} × {B(st0.gradient_bytes)}, {B(nvlink)} over NVLink inside its node and "
            f"{B(network)} over the network (reduced inside each node first, then 1/{gpus} of it between the "
            "nodes).",
        ]
    if step.name in ("Tensor parallelism", "Sequence parallelism"):
        t = par.tensor
        # The per-microbatch redistributions between layers (edges, "a → b"), not the layers' own collectives.
        moves = [x for x in step.transfers if x.kind in ("tensor", "sequence") and x.times == m and "→" in x.what]
        each = max((x.bytes_per_device for x in moves), default=0.0)
        text = [
            f"The {t} GPUs of a node **split every weight matrix {t} ways** (Megatron's rule: ff1 by its columns, "
            f"ff2 by its rows, both vocabulary tables by their rows); the LayerNorms' few weights stay whole. Each "
            f"GPU holds {B(st0.weights_bytes)} of weights, 1/{t} of the model's split weights, and "
            f"{B(st0.optimizer_bytes)} of optimizer state. The {par.data} nodes are data-parallel replicas, each "
            f"running {m} microbatches of one sequence.",
        ]
        if step.name == "Tensor parallelism":
            text.append(
                f"Inside a node, every microbatch **all-reduces** the partial sums of ff2 and of the embedding "
                f"(forward) and the input gradients of ff1 and the head (backward): {len(moves)} all-reduces "
                f"of {B(each)} each, plus the loss's statistics, {B(nvlink)} per step over NVLink. Only the "
                f"gradient all-reduce of each GPU's 1/{t} shard crosses the network: {B(network)}.")
        else:
            before = walk_step("Tensor parallelism").plan.stages[0].activation_bytes
            text.append(
                f"**Sequence parallelism** also splits the layers between the products (LayerNorms, dropout, "
                f"residual adds) along the sequence. Each all-reduce becomes a **reduce-scatter** into those "
                f"layers and an **all-gather** out of them, {B(each)} each: the same bytes in all "
                f"({B(nvlink)} per step over NVLink), but what those layers keep for the backward shrinks {t} "
                f"ways, so a GPU's activations drop from {B(before)} to {B(st0.activation_bytes)}. The LayerNorms now see a part of the "
                "sequence each, so their small weight gradients are all-reduced too.")
        return text
    if step.name == "Pipeline parallelism":
        st1 = step.plan.stages[1]
        sends = [x for x in step.transfers if x.kind == "pipeline"]
        return [
            f"Node 0 runs **stage 0** ({stage_layers(step, 0)}) and node 1 **stage 1** ({stage_layers(step, 1)}), "
            f"each still splitting its layers {par.tensor} ways over its GPUs. A GPU holds only its stage's "
            f"weights: {B(st0.weights_bytes)} on stage 0, {B(st1.weights_bytes)} on stage 1. With no data "
            f"parallelism the batch of {par.global_batch} runs as {m} microbatches through the pipeline "
            f"({par.schedule}); stage 0 keeps {st0.in_flight:g} of them in flight at once "
            f"({B(st0.activation_bytes)} of activations).",
            f"Per microbatch, each GPU of stage 0 **sends** its 1/{par.tensor} of the boundary activation, "
            f"{B(sends[0].bytes_per_device)}, across the network to stage 1, which sends the gradient back: "
            f"{m} x {B(sends[0].bytes_per_device)} = {B(sends[0].step_bytes)} each way per step, far less than a "
            f"gradient all-reduce. The price is the bubble: devices idle "
            f"{step.plan.schedule.bubble_fraction:.0%} of the step while the pipeline fills and drains.",
        ]
    d, z = par.data, par.zero
    held = {1: "the optimizer state", 2: "the optimizer state and the gradients",
            3: "the optimizer state, the gradients and the weights"}[z]
    text = [
        f"**ZeRO-{z}** is data parallelism over the {d} GPUs that shards {held} over the replicas: each GPU "
        f"keeps 1/{d} of them. Per GPU: {B(st0.weights_bytes)} of weights, {B(st0.gradient_bytes)} of gradients, "
        f"{B(st0.optimizer_bytes)} of optimizer state (data parallelism: "
        f"{B(walk_step('Data parallelism').plan.stages[0].memory_bytes)} in all, ZeRO-{z}: "
        f"{B(st0.memory_bytes)}).",
    ]
    if z < 3:
        text.append(
            f"The gradient all-reduce becomes a **reduce-scatter** (each GPU receives the summed gradients of its "
            f"own shard, updates it) and an **all-gather** of the updated weights: the same bytes, "
            f"{B(nvlink)} over NVLink and {B(network)} over the network per GPU and step.")
    else:
        text.append(
            f"Before each layer's forward, and again before its backward, the GPUs **all-gather** its weights, "
            f"and they **reduce-scatter** its gradient after: every microbatch, {B(nvlink + network)} per GPU and "
            f"step ({B(nvlink)} over NVLink, {B(network)} over the network), "
            f"{(nvlink + network) / sum(walk_step('Data parallelism').bytes_by_axis().values()):.3g} times data "
            "parallelism's.")
    return text


def summary_rows(zero: int = 3) -> list[dict]:
    """Every step at a glance: memory per device (the largest stage), bytes per device per step on each link,
    and the modelled step time."""
    rows = []
    for name in STEPS:
        step = walk_step(name, zero)
        worst = max(range(step.parallelism.pipeline), key=lambda s: sum(step.bytes_by_axis(s).values()))
        by_axis = step.bytes_by_axis(worst)
        rows.append({"step": name if name != "ZeRO" else f"ZeRO-{zero}", "configuration": step.parallelism.describe(),
                     "memory per GPU (MB)": float(f"{step.plan.memory_per_device_bytes / MB:.4g}"),
                     "NVLink MB per GPU": float(f"{by_axis.get('gpu', 0.0) / MB:.4g}"),
                     "network MB per GPU": float(f"{by_axis.get('node', 0.0) / MB:.4g}"),
                     "step µs": float(f"{step.plan.step_time_s * 1e6:.4g}")})
    return rows
