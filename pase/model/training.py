"""Step time and memory of 3-D parallel training: tensor, context, data and pipeline parallelism.

A :class:`Parallelism` places ``N = t x c x d x p`` devices on the cluster's
mesh, innermost first: a *group* of ``t x c`` devices (tensor and context
parallelism) runs every layer of one pipeline stage under per-layer splits
(Megatron's rule, :func:`~pase.strategies.baselines.tensor_parallel_strategy`,
or any strategy of the graph on that group); ``d`` groups replicate it (data
parallelism); ``p`` stages, each ``v`` chunks under the interleaved
schedule, cut the layers into ``p v`` contiguous virtual stages. The global
batch ``G`` splits into ``m = G / (d b)`` microbatches of ``b`` samples per
replica. A group size that does not tile the mesh is refused.

Per microbatch (the graph built at batch ``b``, costed on the group by
:mod:`pase.model.cost`), layer ``i`` takes ``f_i`` forward and ``b_i``
backward seconds: its forward and backward compute (FLOPs at peak, or the
roofline on a calibrated cluster), and its activation communication (inside the layer and on its incoming
edges) half in each, since forward and backward move the same volumes; a
tensor several layers read in the same layout is redistributed once
(``build_cost_model(shared_reads=True)``: Megatron's fused QKV product).
Weight-gradient reductions are left out of ``f`` and ``b``: they run once a
step (below). Recomputation adds to ``b_i``: ``full`` the whole forward
(communication included, as Megatron re-runs it), ``selective`` the FLOPs of
the attention core (the score product and the softmax and dropout between it
and the context product).

Stages: unless the cuts are given, the layer order is cut into ``p v``
contiguous pieces minimising the slowest piece's ``f + b``, the slack spread
evenly, where the least crosses (between blocks) when that makes the slowest
piece with its sends faster, never inside an expert block
(:mod:`pase.model.stage_cuts`). Every tensor crossing a cut is sent once
(however many layers read it), ``1/(t c)`` of it per device (Megatron's scatter-gather),
across the mesh axis the pipeline's neighbours differ in, at every boundary
between its producer and its last consumer. The schedule's step time
is :func:`pase.model.pipeline.simulate`'s.

A weight several layers share (``TensorSpec.tied``: the vocabulary projection
and the token embedding) is held once per device that runs one of them; when
they run on different stages those devices also all-reduce its gradient,
across the pipeline's axis (Megatron's embedding group).

Gradients, once a step, per device: its group's weight-gradient reductions
(the cost model's), then its weight blocks reduced over the ``d`` replicas: an
all-reduce (ZeRO 0), a reduce-scatter and an all-gather of the updated weights
(ZeRO 1 and 2: the same time). ZeRO 3 instead all-gathers a layer's weights
before its forward and again before its backward and reduce-scatters its
gradient, every microbatch (DeepSpeed's schedule), inside ``f`` and ``b``; on
a calibrated cluster each of these is one flat ring over the ``d`` ranks, as
DeepSpeed ran it (:func:`zero3_ring_s`: every shard across the slowest link,
each ring step paying the latency of the link it crosses). ``overlap`` runs
these on their own stream, ahead of the layers that need them, as DeepSpeed's
prefetch does (a stage then takes the two-stream makespan of its gathers and
computes, :func:`_stage_sums`), and hides each device's reduction behind its
last backward; ``tp_overlap`` hides tensor-parallel backward collectives behind
the products that issue them (Megatron-LM's asynchronous backward,
:func:`_backward_collectives`). On a calibrated cluster each device then runs
its optimizer step, memory-bound:
``OPTIMIZER_BYTES_PER_PARAMETER`` per parameter whose state it holds, at the
achievable memory bandwidth (the paper's model leaves it out); training in
FP8, with it the step's casts of its FP8 products' weights
(:func:`pase.model.precision.weight_cast_s`: once a step, not a
microbatch).

Memory per device of a stage (the peak at the start of the first backward):

* weights, gradients and optimizer state of its layers' blocks, from
  :class:`~pase.model.memory.MemoryOptions` (mixed-precision Adam: 2 + 2 + 12
  bytes per parameter), the optimizer state sharded over the ``d`` replicas
  under ZeRO 1, the gradients too under 2, the weights too under 3
  (Rajbhandari et al.: ``4 + 12/d``, ``2 + 14/d``, ``16/d``); the optimizer
  state and gradients over the ``c`` context-parallel ranks as well, which
  hold the same weights (Megatron-Core's distributed optimizer shards over
  its data-parallel group with context parallelism); training in FP8, the
  FP8 copies of each FP8 product's weight (its recipe's ``copy_bytes``,
  :mod:`pase.model.precision`: the weight and its transpose);
* attention as :mod:`pase.model.attention` runs it: under flash attention
  no ``s x k`` tensor is kept, only each kernel's inputs and output and its
  log-sum-exp; training in FP8, a product keeps its activation input as the
  FP8 copy it multiplied (one byte an element);
* activations: what each layer keeps for backward on the group
  (:func:`pase.model.memory.activation_bytes`) times the microbatches the
  schedule holds on that device (:func:`pase.model.pipeline.in_flight`).
  Sequence parallelism keeps each gathered input at its producer's smaller
  block (re-gathered in the backward, as Megatron does); selective
  recomputation keeps nothing the attention core produces; full
  recomputation keeps only each block's input (blocks: layers whose names
  share a numbered prefix, ``h.3`` for ``h.3.attn.q``; the layers outside
  blocks, embeddings and loss, keep theirs) and, transiently, one block's
  activations while it is recomputed;
* transient: the largest communication buffer, the largest layer's gathered
  weights under ZeRO 3, and the reserve.

The configuration is :class:`~pase.model.parallelism.Parallelism`; the
per-layer times of one group, :mod:`pase.model.layer_times`; what a configuration
reports, :mod:`pase.model.training_plan`. This module cuts the stages, prices
the gradients and the schedule, and assembles the plan.

Model FLOPs are the graph's training FLOPs (:func:`pase.analysis.throughput.model_flops`)
at the global batch; MFU divides them by ``N x peak x step time``, HFU adds
the recomputed FLOPs. Peak is the cluster's figure (a published specification
for the presets).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster
from pase.hardware.mesh import DeviceMesh
from pase.ir.configs import ConfigOptions
from pase.model.attention import attention_core
from pase.model.expert_overlap import unmerged_share
from pase.model.experts import expert_layout
from pase.model.groups import group_extents
from pase.model.layer_times import (
    GraphSource,
    LayerTimes,
    cached_graph,
    cached_times,
    graph_at,
    group_times,
    layer_times,
)
from pase.model.memory import MemoryOptions
from pase.model.parallelism import RECOMPUTE, Parallelism, check_devices, group_cluster
from pase.model.pipeline import ZERO_BUBBLE, ScheduleResult, in_flight, simulate
from pase.model.precision import fp8_recipe, weight_cast_s
from pase.model.roofline import blocks
from pase.model.schedule_levels import simulate_levels, worth_levels
from pase.model.stage_cuts import crossings, default_cuts
from pase.model.training_plan import StageReport, TrainingPlan

__all__ = ["RECOMPUTE", "Parallelism", "StageReport", "TrainingPlan", "LayerTimes", "evaluate_training",
           "cached_graph", "cached_times", "layer_times", "group_times", "assemble", "average_load_s", "check_devices",
           "group_extents", "group_cluster", "attention_core", "blocks", "zero3_ring_s",
           "cut_weights_s"]

# Mixed-precision Adam's update touches, per parameter: fp32 master, first and second moments read and
# written (24 bytes), the fp16 gradient read and the fp16 weight written (4).
OPTIMIZER_BYTES_PER_PARAMETER = 28


def evaluate_training(
    source: GraphSource,
    cluster: Cluster,
    parallelism: Parallelism,
    *,
    strategy: Mapping[str, tuple[int, ...]] | None = None,
    options: ConfigOptions = ConfigOptions(),
    memory: MemoryOptions = MemoryOptions(),
    memory_limit_bytes: float | None = None,
    label: str = "",
    record: bool = False,
    cache: dict | None = None,
) -> TrainingPlan:
    """Model one training step of ``parallelism`` on ``cluster`` (see the module docstring).

    ``source`` builds the graph at a batch (``pase.models.batch_builder``), or
    is a graph already at the microbatch size. ``strategy`` gives every
    layer's split on the ``t x c`` group (default Megatron's,
    :func:`~pase.strategies.baselines.tensor_parallel_strategy`).
    ``memory_limit_bytes`` defaults to the cluster's memory. ``record`` keeps
    every pipeline operation's times (for a Gantt chart). ``cache`` (a dict,
    see :func:`cached_times`) keeps the graphs and Megatron-split layer times
    for the next call with the same source, cluster and options.

    Raises
    ------
    ConfigurationError
        The sizes do not multiply to the cluster's devices or do not tile its
        mesh, a split does not divide a dimension, there are fewer layers than
        virtual stages, the stage cuts are not increasing positions inside the
        layer order, or the batch does not split; each message names the
        constraint.
    GraphError
        The graph cannot be built at the microbatch size.
    """
    par = parallelism
    check_devices(par, cluster)
    if strategy is None:
        lt = cached_times(source, cluster, par, options, memory, {} if cache is None else cache)[par.recompute]
    else:
        lt = layer_times(graph_at(source, par.microbatch_size), cluster, strategy, par, options, memory)
    capacity = cluster.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    return assemble(lt, cluster, par, memory, capacity, label=label, record=record)


def _step_lower_bound(fq: Sequence[float], bq: Sequence[float], send: Sequence[float], S: int, m: int,
                      reduce: Sequence[float] | None, overlap: bool,
                      deferred: bool = False) -> float:
    """A lower bound of any schedule's step: device ``s`` cannot start before the first microbatch has passed
    the stages before it and their sends, works ``m`` times its chunks' ``f + b``, and its last backward (chunk
    0) must still pass back through those stages and sends (not counted with ``deferred`` weight gradients, a
    zero-bubble schedule's, which may run while it passes back); a serial reduction follows its own work
    (``reduce`` is only read then)."""
    fq, bq, send = (np.asarray(x, dtype=float) for x in (fq, bq, send))
    busy = m * np.bincount(np.arange(len(fq)) % S, fq + bq, S)
    sent = np.concatenate(([0.0], np.cumsum(send[:S - 1])))
    before_f = np.concatenate(([0.0], np.cumsum(fq[:S - 1]))) + sent
    tail = np.zeros(S) if deferred else np.concatenate(([0.0], np.cumsum(bq[:S - 1]))) + sent
    serial = np.zeros(S) if overlap else np.asarray(reduce, dtype=float)
    tail[0] = serial[0]
    return float(max((before_f + busy + tail).max(), (busy + serial).max()))


def zero3_ring_s(mesh: DeviceMesh, data_k: Sequence[int], nbytes) -> np.ndarray:
    """Seconds of one ZeRO-3 parameter all-gather (or gradient reduce-scatter) of each layer's ``nbytes``
    over the data-parallel group of extents ``data_k``, on a calibrated cluster.

    DeepSpeed's ZeRO-3 (the runs of Megatron-LM's Table 2) gathers a layer's
    parameters, sharded flat over all ``d`` ranks, with one ring collective
    over the whole group, layer by layer: ``d - 1`` steps, each moving
    ``nbytes / d`` at the achievable bandwidth ``B`` of the outermost mesh
    axis the group spans (the network as soon as it spans nodes: every shard
    crosses the slowest link). The ring visits the devices inner axes first,
    so of its ``d - 1`` steps ``(k_j - 1) prod_(i outer to j) k_i`` cross axis
    ``j``, each paying that axis's latency ``a_j``, as NCCL's own tuning model
    prices a ring (``src/graph/tuning.cc``: ``nNodes - 1`` network steps, the
    others inside a node)::

        (d - 1) / d * nbytes / B + sum_j (k_j - 1) prod_(i < j) k_i a_j      (0 for a layer without weights)

    Unlike :meth:`~pase.hardware.mesh.DeviceMesh.allgather_s` (a hierarchical
    collective whose outer stage moves only ``1/k_inner`` of the bytes), the
    bandwidth term does not shrink with the GPUs per node, and the latency
    grows with ``d``: what makes measured ZeRO-3 throughput fall as GPUs are
    added while the per-GPU work shrinks.
    """
    nbytes = np.asarray(nbytes, dtype=float)
    return np.where(nbytes > 0, mesh.flat_ring_s(nbytes, data_k), 0.0)


def _loads(lt: "LayerTimes", cluster: Cluster, zero3: tuple[int, ...] | None, overlap: bool,
           expert3: tuple[int, ...] | None = None) -> dict:
    """Per layer, one microbatch's forward and backward seconds and, with ZeRO-3 over the data-parallel extents
    ``zero3`` (None: no ZeRO-3) and the expert-data-parallel extents ``expert3`` (the experts' weights), its
    parameter gather's; memoised on ``lt``.

    Keys: ``forward`` and ``backward`` (serial ZeRO-3: the gathers and the reduce-scatter added in), ``gather``
    (None unless the gathers run overlapped), ``weight`` (what the balanced cuts even out: a layer's time, or
    under overlap the larger of its compute and its gathers and reduce-scatter) and ``total`` (a lower bound
    of the sum of every virtual stage's forward and backward).
    """
    key = ("loads", zero3, overlap, expert3)
    if key not in lt.memo:
        f_layer, b_layer, gather = lt.forward_s, lt.backward_s + lt.recompute_s, None

        def gathered(params: np.ndarray, extents: tuple[int, ...]) -> np.ndarray:
            nbytes = params * cluster.bytes_per_element
            if cluster.efficiency is None:
                return cluster.mesh.allgather_s(nbytes, np.tile(extents, (len(nbytes), 1)))
            return zero3_ring_s(cluster.mesh, extents, nbytes)

        if zero3 is not None or expert3 is not None:
            gather = (0.0 if zero3 is None else gathered(lt.params, zero3)) + (
                0.0 if expert3 is None else gathered(lt.expert_params, expert3))
        if gather is not None and overlap:
            weight = np.maximum(f_layer + b_layer, 3 * gather)
            total = max(float(f_layer.sum() + b_layer.sum()), 3 * float(gather.sum()))
        else:
            if gather is not None:
                # Gather before the forward, again before the backward, and reduce-scatter the gradient.
                f_layer, b_layer, gather = f_layer + gather, b_layer + 2 * gather, None
            weight = f_layer + b_layer
            total = float(weight.sum())
        lt.memo[key] = {"forward": f_layer, "backward": b_layer, "gather": gather, "weight": weight, "total": total}
    return lt.memo[key]


def average_load_s(lt: "LayerTimes", cluster: Cluster, data_k: Sequence[int], zero: int, microbatches: int,
                   stages: int, overlap: bool, expert_k: Sequence[int] | None = None) -> float:
    """Seconds of work of the average device in a step: ``m`` microbatches' forward and backward of every
    layer (ZeRO-3's gathers included over the data-parallel extents ``data_k`` and, given, the
    expert-data-parallel ones ``expert_k``, or under ``overlap`` at least what its stream moves) over
    ``stages`` devices. Every schedule's step is at least this, whatever the cuts: the search's cheapest
    bound (without ``expert_k``, a lower one)."""
    zero3 = tuple(data_k) if zero == 3 and math.prod(data_k) > 1 else None
    expert3 = tuple(expert_k) if zero == 3 and expert_k is not None and math.prod(expert_k) > 1 else None
    return microbatches * _loads(lt, cluster, zero3, overlap, expert3)["total"] / stages


def cut_weights_s(lt: "LayerTimes", cluster: Cluster, data_k: Sequence[int], zero: int, overlap: bool) -> np.ndarray:
    """Per layer, the seconds the balanced cuts even out (:func:`~pase.model.stage_cuts.balanced_cuts`) under
    ZeRO stage ``zero`` over the data-parallel extents ``data_k``: a layer's forward and backward, or under
    ``overlap`` with ZeRO 3 the larger of its compute and its gathers. For searches that cut elsewhere than
    between any two layers (whole transformer blocks, :mod:`pase.frameworks`)."""
    zero3 = tuple(data_k) if zero == 3 and math.prod(data_k) > 1 else None
    return _loads(lt, cluster, zero3, overlap)["weight"]


def _stage_sums(lt: "LayerTimes", cluster: Cluster, par: Parallelism, zero3: tuple[int, ...] | None,
                expert3: tuple[int, ...] | None, pipe_axis: int):
    """The cuts of ``par``'s ``p v`` virtual stages (given, or :func:`~pase.model.stage_cuts.default_cuts`)
    and, per virtual stage, one microbatch's forward and backward seconds; memoised on ``lt``.

    A stage's time is its layers' sum, except under overlapped ZeRO-3 (``par.overlap``), where the gathers
    run one layer ahead of the compute (:func:`_prefetched`).

    Raises ``ConfigurationError`` when given cuts are not increasing positions inside the layer order.
    """
    n, Q = len(lt.layers), par.pipeline * par.virtual_stages
    key = ("stages", Q, zero3, par.overlap, par.stage_cuts, expert3, pipe_axis, par.group)
    if key not in lt.memo:
        loads = _loads(lt, cluster, zero3, par.overlap, expert3)
        cuts = (default_cuts(lt, cluster, loads["weight"], Q, pipe_axis, par.group) if par.stage_cuts is None
                else par.stage_cuts)
        if par.stage_cuts is not None and (len(cuts) != Q - 1 or any(not 0 < c < n for c in cuts)
                                           or list(cuts) != sorted(set(cuts))):
            raise ConfigurationError(
                f"stage cuts {list(cuts)} must be {Q - 1} increasing positions between 1 and {n - 1}")
        f, b, g = loads["forward"], loads["backward"], loads["gather"]
        if g is None:
            starts = [0, *cuts]
            fq, bq = np.add.reduceat(f, starts), np.add.reduceat(b, starts)
        else:
            fq, bq = _prefetched(g, f, b, np.array([0, *cuts]), np.array([*cuts, n]))
        lt.memo[key] = (tuple(cuts), fq, bq)
    return lt.memo[key]


def _prefetched(gather: np.ndarray, forward: np.ndarray, backward: np.ndarray, lo: np.ndarray,
                hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of the runs of layers ``lo[q] .. hi[q] - 1`` whose parameters are gathered
    one layer ahead, as FSDP and DeepSpeed's ZeRO-3 prefetch (a prefetch bucket below one layer's weights:
    GPT-3's are 0.6 to 1.8 billion a layer).

    A stream of their own gathers the first layer's parameters, then each next layer's as the current one
    starts computing; a layer computes once its parameters are in and the layer before it is done. The
    stream is then always free when a gather is issued, so each layer after the first starts
    ``max(c_i, g_(i+1))`` after the one before it: the forward takes ``g_lo + sum max(c_i, g_(i+1)) +
    c_(hi-1)``, the backward the same in reverse order. The backward's reduce-scatters (each of a gather's
    size, once its layer is done) run on a reduction stream of their own (DeepSpeed's ``overlap_comm``), the
    last one after the last layer, and the links carry at most both streams: the backward is at least
    ``2 sum g``.
    """
    def stage_sum(x: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        prefix = np.concatenate(([0.0], np.cumsum(x)))
        return prefix[np.maximum(end, start)] - prefix[start]

    ahead = np.maximum(forward[:-1], gather[1:])  # layer i, then i + 1's parameters
    fq = gather[lo] + stage_sum(ahead, lo, hi - 1) + forward[hi - 1]
    behind = np.maximum(backward[1:], gather[:-1])  # layer i + 1's backward, then i's parameters
    chain = gather[hi - 1] + stage_sum(behind, lo, hi - 1) + backward[lo]
    return fq, np.maximum(chain + gather[lo], 2 * stage_sum(gather, lo, hi))


def _placement(lt: "LayerTimes", cluster: Cluster, cuts: tuple[int, ...], S: int, pipe_axis: int, group: int) -> dict:
    """What depends only on where the layers go (the cuts, the ``S`` devices of a pipeline along mesh axis
    ``pipe_axis``, groups of ``group`` devices), not on the schedule or ZeRO: per virtual stage its sends, per
    device its weight elements, in-group gradient seconds (tied weights' reductions included), activation
    bytes per microbatch and transient buffers, and (filled by :func:`assemble`) its gradients' all-reduce
    over each data-parallel group's mesh extents; memoised on ``lt``."""
    key = ("placement", cuts, S, pipe_axis, group)
    if key in lt.memo:
        return lt.memo[key]
    mesh, n, Q = cluster.mesh, len(lt.layers), len(cuts) + 1
    bounds = [0, *cuts, n]
    stage_of = np.repeat(np.arange(Q), np.diff(bounds))
    # Sends: each tensor crossing a boundary, 1/(t c) of it per device, across the pipeline's innermost axis.
    crossing = crossings(lt)[list(cuts)] * cluster.bytes_per_element / group
    send = np.where(crossing > 0, mesh.send_recv_s(crossing, pipe_axis), 0.0)

    # Per device position s: its chunks q = s, s + S, ... and their layers.
    layer_dev = stage_of % S
    params = np.bincount(layer_dev, lt.params, S)
    reduce = np.bincount(layer_dev, lt.gradient_s, S)
    for idx, elements in lt.tied:
        # A shared weight is held once per device; devices holding it sum its gradient (Megatron's
        # embedding group: the first and last stage), across the pipeline's axis.
        devices = layer_dev[idx]
        holders = np.unique(devices)
        for dev in holders:
            here = elements[devices == dev]
            params[dev] -= here.sum() - here.max()
        if len(holders) > 1:
            k = np.ones(len(mesh.shape))
            k[pipe_axis] = len(holders)
            reduce[holders] += float(mesh.allreduce_s(elements.max() * cluster.bytes_per_element, k))
    transient = np.zeros(S)
    np.maximum.at(transient, layer_dev, lt.buffers)
    if lt.block_transient:
        recomputed = np.zeros(S)
        if "unit transient" not in lt.memo:
            unit_of, transient_of = lt.block_of.get, lt.block_transient.get
            lt.memo["unit transient"] = np.array([transient_of(unit_of(l.name), 0.0) for l in lt.layers])
        np.maximum.at(recomputed, layer_dev, lt.memo["unit transient"])
        transient += recomputed
    gathered = np.zeros(S)
    np.maximum.at(gathered, layer_dev, (lt.params + lt.expert_params) * cluster.bytes_per_element)
    lt.memo[key] = placed = {
        "bounds": bounds, "send": send, "params": params, "reduce": reduce, "transient": transient,
        "gathered": gathered, "activations": np.bincount(layer_dev, lt.activations, S),
        "fp8 params": np.bincount(layer_dev, lt.fp8_params, S),
        "expert params": np.bincount(layer_dev, lt.expert_params, S),
        "dispatch": np.bincount(layer_dev, lt.dispatch_s, S), "expert compute": np.bincount(layer_dev, lt.expert_compute_s, S),
        "counts": np.bincount(layer_dev, minlength=S), "data-parallel reduce": {}}
    return placed


# The activations each device holds at once depend on the schedule and its sizes alone: shared by a search.
_in_flight = functools.lru_cache(maxsize=256)(in_flight)


def _schedule(lt: "LayerTimes", par: Parallelism, fq: list[float], bq: list[float], wq: list[float] | None, m: int,
              send: list[float], reduce: list[float], record: bool) -> ScheduleResult:
    """:func:`~pase.model.pipeline.simulate` of ``par``'s schedule on these stage times (``wq``: a zero-bubble
    schedule's deferred weight gradients); a long GPipe or 1F1B pipeline level by level
    (:mod:`pase.model.schedule_levels`, the same numbers), once per distinct input in a search (ZeRO stages
    often share every time), memoised on ``lt``."""
    if record or wq is not None or not worth_levels(par.schedule, par.pipeline, m, par.virtual_stages):
        return simulate(par.schedule, fq, bq, m, chunks=par.virtual_stages, send_s=send, reduce_s=reduce,
                        overlap=par.overlap, record=record, weight_s=wq)
    key = ("schedule", par.schedule, m, par.overlap, tuple(fq), tuple(bq), tuple(send), tuple(reduce))
    if key not in lt.memo:
        lt.memo[key] = simulate_levels(par.schedule, fq, bq, m, send, reduce, par.overlap)
    return lt.memo[key]


def assemble(lt: "LayerTimes", cluster: Cluster, par: Parallelism, memory: MemoryOptions, capacity: float | None,
             *, label: str = "", record: bool = False, bound_s: float | None = None,
             rejected: Callable[[float], None] | None = None, defer: bool = False) -> TrainingPlan | Deferred | None:
    """The step of ``par`` from its layers' times ``lt`` (:func:`layer_times` for the same group and options).

    For searches: with ``bound_s``, returns None without simulating the
    schedule when the step cannot beat it (a device's busy time alone
    reaches it); with ``rejected``, a stage over ``capacity`` is not simulated
    either: ``rejected(its bytes)`` is called and None returned; with
    ``defer``, returns a :class:`Deferred` (a lower bound of the step, and
    the simulation still to run) instead of the plan. What depends
    only on the stage count, the cuts or the pipeline's placement is memoised
    on ``lt``, so a search re-costs only what each configuration changes.

    Raises ``ConfigurationError`` as :func:`evaluate_training`.
    """
    _, data_k, pipe_k = check_devices(par, cluster)
    mesh = cluster.mesh
    graph, layers = lt.graph, lt.layers
    n, Q, S, v, m = len(layers), par.pipeline * par.virtual_stages, par.pipeline, par.virtual_stages, par.microbatches
    if Q > n:
        raise ConfigurationError(f"{Q} pipeline stages (x virtual stages) need at least {Q} layers; "
                                 f"graph {graph.name!r} has {n}")
    zero3 = tuple(data_k) if par.zero == 3 and par.data > 1 else None
    layout = expert_layout(par, mesh) if lt.experts is not None else None
    edp_k = None if layout is None or layout.edp == 1 else layout.edp_k
    expert3 = edp_k if par.zero == 3 else None
    if bound_s is not None and par.stage_cuts is None and average_load_s(
            lt, cluster, data_k, par.zero, m, S, par.overlap, edp_k) >= bound_s:
        return None  # some device works at least the average load, whatever the cuts
    pipe_axis = max((j for j, k in enumerate(pipe_k) if k > 1), default=len(pipe_k) - 1)
    cuts, fq, bq = _stage_sums(lt, cluster, par, zero3, expert3, pipe_axis)
    if lt.overlap_hidden_s is not None:
        # The passes the pipeline runs unmerged expose what the 1F1B all-to-all overlap hides in the others.
        key = ("unmerged", cuts, S, v, m)
        if key not in lt.memo:
            lt.memo[key] = (unmerged_share(S, v, m)[np.arange(Q) % S]
                            * np.add.reduceat(lt.overlap_hidden_s, [0, *cuts]) / 2)
        fq, bq = fq + lt.memo[key], bq + lt.memo[key]
    placed = _placement(lt, cluster, cuts, S, pipe_axis, par.group)
    bounds, params, bpe, d = placed["bounds"], placed["params"], cluster.bytes_per_element, par.data
    reduce = placed["reduce"]
    if d > 1 and par.zero != 3:
        across = placed["data-parallel reduce"]
        if data_k not in across:
            across[data_k] = mesh.allreduce_s(params * bpe, np.tile(data_k, (S, 1)))
        reduce = reduce + across[data_k]
    expert_params = placed["expert params"]
    if edp_k is not None and par.zero != 3:
        # Each expert's gradient is reduced over its replicas, the expert-data-parallel group.
        across = placed["data-parallel reduce"]
        if ("experts", edp_k) not in across:
            across["experts", edp_k] = mesh.allreduce_s(expert_params * bpe, np.tile(edp_k, (S, 1)))
        reduce = reduce + across["experts", edp_k]
    wq = None
    if par.schedule in ZERO_BUBBLE:
        # The weight gradients a zero-bubble schedule defers: each stage's products' (an expert block's stay in
        # its backward, whose time pase.model.experts replaced).
        w_layer = np.where(lt.expert_params > 0, 0.0, lt.weight_grad_s)
        wq = np.minimum(np.add.reduceat(w_layer, bounds[:-1]), bq)
    lower = _step_lower_bound(fq, bq, placed["send"], S, m, reduce, par.overlap, wq is not None)
    if bound_s is not None and lower >= bound_s:
        return None
    held = _in_flight(par.schedule, S, m, v)
    per_param = memory.bytes_per_parameter(bpe)
    # Context-parallel ranks hold the same weights: the distributed optimizer shards its state and gradients
    # over them too (Megatron-Core's data-parallel group with context parallelism).
    replicas = d * par.context
    shard = {"weights": d if par.zero >= 3 else 1, "gradients": replicas if par.zero >= 2 else 1,
             "optimizer": replicas if par.zero >= 1 else 1}
    acts = placed["activations"] * np.array(held)
    transient = placed["transient"] + (placed["gathered"] if zero3 is not None or expert3 is not None else 0.0)
    chunk_dev = np.arange(Q) % S
    fdev, bdev = np.bincount(chunk_dev, fq, S), np.bincount(chunk_dev, bq, S)
    sdev = np.bincount(chunk_dev[:Q - 1], placed["send"], S) if Q > 1 else np.zeros(S)
    # The experts' states are sharded over their own replicas, the expert-data-parallel group (Megatron-Core's
    # distributed optimizer over expert-DP).
    edp = 1 if layout is None else layout.edp
    expert_shard = {"weights": edp if par.zero >= 3 else 1, "gradients": edp if par.zero >= 2 else 1,
                    "optimizer": edp if par.zero >= 1 else 1}
    states = {k: params * per_param[k] / shard[k] + expert_params * per_param[k] / expert_shard[k]
              for k in ("weights", "gradients", "optimizer")}
    recipe = fp8_recipe(lt.precision)
    fp8 = placed["fp8 params"] * (0.0 if recipe is None else recipe.copy_bytes)
    total = (states["weights"] + states["gradients"] + states["optimizer"] + fp8 + acts + transient
             + memory.reserve_on(cluster))
    if rejected is not None and capacity is not None and total.max() > capacity:
        rejected(float(total.max()))
        return None
    par = replace(par, stage_cuts=cuts)
    # The optimizer step reads and writes its state once a step; the roofline prices it on a calibrated cluster.
    optimizer = np.zeros(S) if cluster.efficiency is None else (
        (params / shard["optimizer"] + expert_params / expert_shard["optimizer"]) * OPTIMIZER_BYTES_PER_PARAMETER
        / cluster.efficiency.memory_Bps + weight_cast_s(placed["fp8 params"], cluster.efficiency, recipe))
    reduce = reduce.tolist()

    def stages() -> tuple[StageReport, ...]:  # built only for a plan that is finished
        return tuple(StageReport(
            index=s, layers=tuple((layers[bounds[q]].name, layers[bounds[q + 1] - 1].name) for q in range(s, Q, S)),
            layer_count=int(placed["counts"][s]), forward_s=float(fdev[s]), backward_s=float(bdev[s]),
            send_s=float(sdev[s]), reduce_s=reduce[s], optimizer_s=float(optimizer[s]), in_flight=held[s],
            weights_bytes=float(states["weights"][s]),
            gradient_bytes=float(states["gradients"][s]), optimizer_bytes=float(states["optimizer"][s]),
            activation_bytes=float(acts[s]), transient_bytes=float(transient[s]), memory_bytes=float(total[s]),
            fp8_bytes=float(fp8[s]), expert_params=float(expert_params[s]),
            dispatch_s=float(placed["dispatch"][s]), expert_compute_s=float(placed["expert compute"][s]),
        ) for s in range(S))
    if defer:
        return Deferred(lower, lambda: _finish(lt, cluster, par, fq, bq, wq, placed, reduce, optimizer, stages,
                                               capacity, label, record))
    return _finish(lt, cluster, par, fq, bq, wq, placed, reduce, optimizer, stages, capacity, label, record)


@dataclass(frozen=True)
class Deferred:
    """A configuration :func:`assemble` has placed and found to fit, its schedule not yet simulated:
    ``lower_bound_s`` bounds its step from below, ``finish()`` simulates it and returns the plan."""

    lower_bound_s: float
    finish: Callable[[], TrainingPlan]


def _finish(lt: "LayerTimes", cluster: Cluster, par: Parallelism, fq: np.ndarray, bq: np.ndarray,
            wq: np.ndarray | None, placed: dict, reduce: list[float], optimizer: np.ndarray,
            stages: Callable[[], tuple], capacity: float | None, label: str, record: bool) -> TrainingPlan:
    """The plan of :func:`assemble`, its schedule simulated (``wq`` a zero-bubble schedule's deferred weight
    gradients per virtual stage, ``stages()`` its stage reports)."""
    from pase.analysis.throughput import sequence_length  # late: pase.analysis imports the planner

    graph, m, d = lt.graph, par.microbatches, par.data
    result = _schedule(lt, par, fq.tolist(), bq.tolist(), None if wq is None else wq.tolist(), m,
                       placed["send"].tolist(), reduce, record)
    replicas = m * d  # microbatch graphs per step
    return TrainingPlan(
        parallelism=par, cluster=cluster, graph_name=graph.name,
        step_time_s=max(f + e + o for f, e, o in zip(result.finish_s, result.exposed_reduce_s, optimizer)),
        stages=stages(), schedule=result, model_flops_per_step=lt.model_flops * replicas,
        hardware_flops_per_step=(lt.model_flops + float(lt.recompute_flops.sum()) * par.group) * replicas,
        memory_capacity_bytes=capacity, label=label or par.describe(),
        tokens_per_sample=graph.derived("sequence length", lambda: sequence_length(graph)),
        attention=lt.attention, precision=lt.precision, experts=lt.experts,
        transformer_blocks=len(set(graph.derived("blocks", lambda: blocks(graph)).values())) or None,
    )
