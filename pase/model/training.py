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
contiguous pieces minimising the slowest piece's ``f + b`` (any cut of the
topological order). Every tensor crossing a cut is sent once (however many
layers read it), ``1/(t c)`` of it per device (Megatron's scatter-gather),
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
(:func:`pase.model.roofline.fp8_weight_cast_s`: once a step, not a
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
  FP8 copy of each FP8 product's weight (``FP8_COPY_BYTES_PER_PARAMETER``);
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

Model FLOPs are the graph's training FLOPs (:func:`pase.analysis.throughput.model_flops`)
at the global batch; MFU divides them by ``N x peak x step time``, HFU adds
the recomputed FLOPs. Peak is the cluster's figure (a published specification
for the presets).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster
from pase.hardware.mesh import DeviceMesh
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph, Layer
from pase.model.attention import attention_core, flash_units, lse_bytes, masked_model_flops
from pase.model.cost import attention_kind, build_cost_model, describe_model
from pase.model.experts import apply_experts, expert_layout, moe_blocks
from pase.model.groups import group_extents
from pase.model.memory import FP8_COPY_BYTES_PER_PARAMETER, MemoryOptions, activation_bytes, buffer_elements
from pase.model.pipeline import CHUNKED, SCHEDULES, ZERO_BUBBLE, ScheduleResult, in_flight, schedule_problem, simulate
from pase.model.recompute import DEFAULT_MODULES, check_modules, module_plan
from pase.model.repeats import PeriodicCore, periodic_core
from pase.model.roofline import MATRIX_OPS, blocks, fp8_products, fp8_weight_cast_s
from pase.model.schedule_levels import simulate_levels, worth_levels
from pase.ops import block_elements

__all__ = ["RECOMPUTE", "Parallelism", "StageReport", "TrainingPlan", "LayerTimes", "evaluate_training",
           "cached_graph", "cached_times", "layer_times", "group_times", "assemble", "average_load_s", "check_devices",
           "group_extents", "group_cluster", "balanced_cuts", "attention_core", "blocks", "zero3_ring_s",
           "cut_weights_s"]

RECOMPUTE = ("none", "selective", "full")
# Mixed-precision Adam's update touches, per parameter: fp32 master, first and second moments read and
# written (24 bytes), the fp16 gradient read and the fp16 weight written (4).
OPTIMIZER_BYTES_PER_PARAMETER = 28

GraphSource = Callable[[int], Graph] | Graph


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, not {value!r}")


@dataclass(frozen=True)
class Parallelism:
    """One 3-D parallel training configuration (see the module docstring).

    Parameters
    ----------
    tensor, context, data, pipeline : int
        Tensor-, context-, data-parallel and pipeline sizes ``t c d p``.
    virtual_stages : int
        Chunks per device ``v`` (more than 1: the interleaved schedule).
    microbatch_size : int
        Samples per microbatch per data-parallel replica, ``b``.
    global_batch : int
        Samples per step, ``G``; a multiple of ``d b``.
    sequence_parallel : bool
        Megatron's sequence parallelism in the layers between tensor-parallel products.
    recompute : str
        ``"none"``, ``"selective"`` or ``"full"`` activation recomputation.
    recompute_modules : tuple of str or None
        Under ``"selective"``, the modules recomputed, as Megatron-Core's
        ``--recompute-modules`` names them (:mod:`pase.model.recompute`);
        ``None``: its default, the attention core.
    zero : int
        ZeRO stage 0 to 3 over the data-parallel replicas.
    schedule : str or None
        ``"1f1b"``, ``"interleaved"``, ``"gpipe"`` or ``"zb1p"`` (zero bubble,
        :mod:`pase.model.pipeline`; with ``virtual_stages`` chunks); ``None``:
        interleaved when ``virtual_stages > 1``, else 1F1B.
    stage_cuts : tuple of int or None
        Positions in the graph's layer order where virtual stages 1 ..
        ``p v - 1`` begin; ``None``: balanced (module docstring).
    overlap : bool
        Overlap each device's gradient reduction with its last backward.
    tp_overlap : bool
        Megatron-LM's asynchronous tensor-parallel backward (on a calibrated
        cluster): a product reduces its input gradient while it computes its
        weight gradient, and re-gathers a sequence-parallel input while it
        computes its input gradient (:func:`layer_times`).
    tp_comm_overlap : bool
        Transformer Engine's tensor-parallel communication overlap
        (Megatron-Core's ``--tp-comm-overlap``, userbuffers; on a calibrated
        cluster): in the forward, the all-gather feeding a product and the
        reduce-scatter of a product's partial sums run in chunks pipelined
        with the product (:func:`_forward_overlap`). With ``tp_overlap`` for
        the backward, as Megatron-Core runs both.
    ep : int
        Expert parallelism: the experts of a mixture-of-experts model dealt
        out over ``ep`` devices of a stage (:mod:`pase.model.experts`).
    etp : int or None
        Expert tensor parallelism, each expert's width split ``etp`` ways;
        ``None``: the tensor-parallel size (Megatron-Core's default).
        ``etp x ep`` must divide the stage's ``t c d`` devices; the rest are
        expert data parallelism.
    expert_imbalance : float
        The busiest expert's tokens over the mean, at least 1 (1: forced
        balance, as NVIDIA's benchmarks run); dropless routing.
    capacity_factor : float or None
        Token drop: each expert takes at most this factor of the mean and is
        padded up to it; ``None``: dropless (``expert_imbalance`` applies).
    expert_overlap : bool
        Hide each block's token dispatch and combine behind its experts'
        compute (Megatron-Core's all-to-all overlap); off by default.
    fp8_dispatch : bool
        Send the dispatched tokens in FP8 (DeepEP); the combine stays in the
        working precision.

    Raises
    ------
    ConfigurationError
        A size is not a positive integer, ZeRO is not 0-3, the recomputation
        or schedule is unknown, ``v > 1`` without the interleaved schedule,
        the batch does not split (:meth:`microbatches`), ``etp x ep`` does
        not divide a stage's devices, the imbalance is below 1 or the
        capacity factor not positive.
    """

    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    context: int = 1
    virtual_stages: int = 1
    microbatch_size: int = 1
    global_batch: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    recompute_modules: tuple[str, ...] | None = None
    zero: int = 0
    schedule: str | None = None
    stage_cuts: tuple[int, ...] | None = None
    overlap: bool = False
    tp_overlap: bool = False
    tp_comm_overlap: bool = False
    ep: int = 1
    etp: int | None = None
    expert_imbalance: float = 1.0
    capacity_factor: float | None = None
    expert_overlap: bool = False
    fp8_dispatch: bool = False

    def __post_init__(self):
        for name in ("tensor", "pipeline", "data", "context", "virtual_stages", "microbatch_size", "global_batch"):
            _positive(name.replace("_", " "), getattr(self, name))
        _positive("expert parallelism (ep)", self.ep)
        if self.etp is not None:
            _positive("expert tensor parallelism (etp)", self.etp)
        if (isinstance(self.expert_imbalance, bool) or not isinstance(self.expert_imbalance, (int, float))
                or not 1 <= self.expert_imbalance < math.inf):
            raise ConfigurationError(f"the expert imbalance (the busiest expert's tokens over the mean) must be a "
                                     f"number of at least 1, not {self.expert_imbalance!r}")
        if self.capacity_factor is not None and (
                isinstance(self.capacity_factor, bool) or not isinstance(self.capacity_factor, (int, float))
                or not 0 < self.capacity_factor < math.inf):
            raise ConfigurationError(f"the capacity factor must be a positive number, not {self.capacity_factor!r}")
        stage = self.tensor * self.context * self.data
        if stage % (self.expert_tensor * self.ep):
            raise ConfigurationError(
                f"expert tensor {self.expert_tensor} x expert {self.ep} = {self.expert_tensor * self.ep} devices must "
                f"divide the {stage} devices of a pipeline stage (tensor {self.tensor} x context {self.context} x "
                f"data {self.data}); choose an --ep and --etp whose product divides them")
        if self.recompute not in RECOMPUTE:
            raise ConfigurationError(f"unknown recomputation {self.recompute!r}; choose one of {', '.join(RECOMPUTE)}")
        if self.recompute_modules is not None:
            if self.recompute != "selective":
                raise ConfigurationError("recompute modules go with selective recomputation; add --recompute selective "
                                         "or leave --recompute-modules out")
            object.__setattr__(self, "recompute_modules", check_modules(self.recompute_modules))
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise ConfigurationError(f"ZeRO stage must be 0, 1, 2 or 3, not {self.zero!r}")
        if self.schedule is None:
            object.__setattr__(self, "schedule", "interleaved" if self.virtual_stages > 1 else "1f1b")
        if self.schedule not in SCHEDULES:
            raise ConfigurationError(f"unknown pipeline schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if self.virtual_stages > 1 and self.schedule not in CHUNKED:
            raise ConfigurationError(f"{self.virtual_stages} virtual stages per device need the interleaved schedule "
                                     f"(or zb1p), not {self.schedule}")
        if self.stage_cuts is not None:
            object.__setattr__(self, "stage_cuts", tuple(int(c) for c in self.stage_cuts))
        self.microbatches  # noqa: B018 - validates the batch split

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules selective recomputation recomputes: ``recompute_modules`` or Megatron-Core's default."""
        return DEFAULT_MODULES if self.recompute_modules is None else self.recompute_modules

    @property
    def devices(self) -> int:
        """``t x c x d x p``."""
        return self.tensor * self.context * self.data * self.pipeline

    @property
    def group(self) -> int:
        """Devices of one stage replica, ``t x c``."""
        return self.tensor * self.context

    @property
    def expert_tensor(self) -> int:
        """Expert tensor parallelism: ``etp``, or the tensor-parallel size when it is not given."""
        return self.tensor if self.etp is None else self.etp

    @property
    def expert_data(self) -> int:
        """Expert data parallelism: a stage's ``t c d`` devices over ``etp x ep``."""
        return self.tensor * self.context * self.data // (self.expert_tensor * self.ep)

    @property
    def microbatches(self) -> int:
        """``m = G / (d b)``.

        Raises ``ConfigurationError`` when ``G`` is not a multiple of ``d b``
        or the interleaved schedule gets an ``m`` that is not a multiple of ``p``.
        """
        per_step = self.data * self.microbatch_size
        if self.global_batch % per_step:
            raise ConfigurationError(
                f"the global batch {self.global_batch} does not split into microbatches of {self.microbatch_size} "
                f"over {self.data} data-parallel replicas (it must be a multiple of {per_step})")
        m = self.global_batch // per_step
        if self.schedule == "interleaved" and m % self.pipeline:
            raise ConfigurationError(
                f"the interleaved schedule needs the {m} microbatches to be a multiple of the {self.pipeline} "
                "pipeline stages; change the microbatch size or the global batch")
        if self.schedule in ZERO_BUBBLE and (problem := schedule_problem(self.schedule, self.pipeline, m, 1)):
            raise ConfigurationError(problem)
        return m

    def describe(self) -> str:
        """Short label, ``"t8 p2 d32 mb1 1f1b"``."""
        parts = [f"t{self.tensor}"] + ([f"c{self.context}"] if self.context > 1 else []) + [
            f"p{self.pipeline}", f"d{self.data}", f"mb{self.microbatch_size}"]
        parts.append(f"v{self.virtual_stages}" if self.virtual_stages > 1 and self.schedule == "interleaved" else
                     f"{self.schedule} v{self.virtual_stages}" if self.virtual_stages > 1 else self.schedule)
        parts += (["sp"] if self.sequence_parallel else []) + (
            [f"recompute {self.recompute}"] if self.recompute != "none" else []) + (
            [f"({','.join(self.modules)})"] if self.recompute_modules is not None else []) + (
            [f"zero{self.zero}"] if self.zero else []) + (["tp-overlap"] if self.tp_overlap else []) + (
            ["tp-comm-overlap"] if self.tp_comm_overlap else [])
        if self.ep > 1 or self.etp is not None:
            parts += [f"ep{self.ep}", f"etp{self.expert_tensor}"]
        parts += ([f"imbalance {self.expert_imbalance:g}"] if self.expert_imbalance != 1 else []) + (
            [f"capacity {self.capacity_factor:g}"] if self.capacity_factor is not None else []) + (
            ["ep-overlap"] if self.expert_overlap else []) + (["fp8-dispatch"] if self.fp8_dispatch else [])
        return " ".join(parts)


def group_cluster(cluster: Cluster, par: Parallelism) -> Cluster:
    """The cluster's hardware on the ``t x c`` devices of one of ``par``'s groups (a sub-mesh).

    Raises ``ConfigurationError`` as :func:`check_devices`.
    """
    extents = check_devices(par, cluster)[0]
    axes = tuple(replace(a, size=k) for a, k in zip(cluster.mesh.axes, extents) if k > 1)
    if not axes:
        axes = (replace(cluster.mesh.axes[-1], size=1),)
    return replace(cluster, devices=math.prod(extents), mesh_axes=axes, devices_per_node=None, inter_bandwidth_Bps=None)


def balanced_cuts(times: Sequence[float], pieces: int) -> tuple[int, ...]:
    """Cut ``times`` (per layer, in order) into ``pieces`` non-empty runs minimising the largest run's sum.

    Returns the start index of runs 1 .. pieces - 1. Optimal to a relative
    1e-12. A limit (at least the largest time) is feasible exactly when runs
    that each go as far as the limit allows reach the end in ``pieces`` runs
    or fewer. The search keeps the interval [lo, hi] holding the optimum,
    between the lower bound max(largest time, mean run) and the upper bound
    mean run + largest time, and tries its middle: if feasible, hi becomes
    the largest run found (a sum the optimum cannot exceed); if not, lo
    becomes the least sum by which any run could grow (below it the runs,
    and the failure, stay the same). The cuts are those of the furthest-end
    runs at hi, each leaving a layer for every later run.

    Raises ``ConfigurationError`` when there are fewer layers than pieces.
    """
    n = len(times)
    if pieces > n:
        raise ConfigurationError(f"{pieces} pipeline stages need at least {pieces} layers; the graph has {n}")
    times = np.asarray(times, dtype=float)
    prefix = np.concatenate(([0.0], np.cumsum(times)))
    total, largest = float(prefix[n]), float(times.max(initial=0.0))
    after = np.arange(1, n + 2)

    def furthest(slack: float) -> list[int]:
        # Per start, the end of the furthest run from it within slack, at least one layer on (bisect_right
        # from start + 1, for every start at once).
        return (np.maximum(np.searchsorted(prefix, prefix + slack, side="right"), after) - 1).tolist()

    def runs(limit: float) -> tuple[bool, float, float]:
        # Furthest-end runs within limit: whether they reach the end in `pieces`, their largest sum,
        # and the least sum one of them would have with the next layer added.
        end = furthest(limit * (1 + 1e-12))
        starts, start = [], 0
        while start < n and len(starts) < pieces:
            starts.append(start)
            start = end[start]
        first = np.array(starts)
        last = np.array(starts[1:] + [start])  # each run ends where the next starts
        biggest = float((prefix[last] - prefix[first]).max())
        short = last < n
        grow = float((prefix[last[short] + 1] - prefix[first[short]]).min()) if short.any() else math.inf
        return start == n, biggest, grow

    lo, hi = max(largest, total / pieces), min(total, total / pieces + largest)
    while hi - lo > 1e-12 * max(hi, 1e-30):
        mid = lo if lo > (lo + hi) / 2 * (1 - 1e-3) else (lo + hi) / 2
        ok, biggest, grow = runs(mid)
        if ok:
            hi = min(hi, biggest)
        else:
            lo = max(mid, min(grow, hi))
    end = furthest(hi * (1 + 1e-12))
    cuts, start = [], 0
    for k in range(pieces - 1):
        start = min(end[start], n - (pieces - 1 - k))
        cuts.append(start)
    return tuple(cuts)


@dataclass(frozen=True)
class StageReport:
    """One device position of the pipeline: its chunks' layers, times per microbatch and memory per device (bytes).

    ``layers`` lists, per chunk, the first and last layer name of its run. ``expert_params``: expert weight
    elements per device (included in the weights' bytes); ``dispatch_s`` and ``expert_compute_s``: one
    microbatch's token dispatch and combine and its experts' compute, forward and backward, over its
    expert blocks (:mod:`pase.model.experts`).
    """

    index: int
    layers: tuple[tuple[str, str], ...]
    layer_count: int
    forward_s: float
    backward_s: float
    send_s: float
    reduce_s: float
    optimizer_s: float
    in_flight: float
    weights_bytes: float
    gradient_bytes: float
    optimizer_bytes: float
    activation_bytes: float
    transient_bytes: float
    memory_bytes: float
    fp8_bytes: float = 0.0
    expert_params: float = 0.0
    dispatch_s: float = 0.0
    expert_compute_s: float = 0.0

    def to_dict(self) -> dict:
        """Plain types for JSON."""
        return {"index": self.index, "layers": [list(r) for r in self.layers], "layer_count": self.layer_count,
                "forward_s": self.forward_s, "backward_s": self.backward_s, "send_s": self.send_s,
                "reduce_s": self.reduce_s, "optimizer_s": self.optimizer_s, "in_flight_microbatches": self.in_flight,
                "weights_bytes": self.weights_bytes, "gradient_bytes": self.gradient_bytes,
                "optimizer_bytes": self.optimizer_bytes, "activation_bytes": self.activation_bytes,
                "fp8_bytes": self.fp8_bytes, "transient_bytes": self.transient_bytes,
                "memory_bytes": self.memory_bytes, "expert_parameters": self.expert_params,
                "dispatch_s": self.dispatch_s, "expert_compute_s": self.expert_compute_s}


@dataclass(frozen=True)
class TrainingPlan:
    """A configuration's modelled training step.

    Attributes
    ----------
    parallelism : Parallelism
        The configuration (its ``stage_cuts`` filled in).
    cluster : Cluster
    graph_name : str
    step_time_s : float
    stages : tuple of StageReport
        One per pipeline device position.
    schedule : ScheduleResult
    model_flops_per_step, hardware_flops_per_step : float
        Training FLOPs of the global batch, without and with recomputation.
    memory_capacity_bytes : float or None
    label : str
    chosen : tuple of str
        Options the caller left out and the evaluation chose (``"microbatch size"``...).
    experts : dict or None
        A model with experts: its expert layout and dispatch (:meth:`experts_dict`).
    """

    parallelism: Parallelism
    cluster: Cluster
    graph_name: str
    step_time_s: float
    stages: tuple[StageReport, ...]
    schedule: ScheduleResult
    model_flops_per_step: float
    hardware_flops_per_step: float
    memory_capacity_bytes: float | None
    tokens_per_sample: int | None = None
    label: str = ""
    chosen: tuple[str, ...] = field(default=())
    attention: str = "unfused"
    precision: str = "bf16"
    experts: dict | None = None
    transformer_blocks: int | None = None  # blocks of the graph (frameworks stack and cut whole blocks)

    def step_time_model(self) -> dict:
        """Which step-time model priced the plan, in words (:func:`pase.model.cost.describe_model`)."""
        return describe_model(self.cluster, self.attention, self.precision)

    @property
    def memory_per_device_bytes(self) -> float:
        """The largest per-device memory over the stages."""
        return max(s.memory_bytes for s in self.stages)

    @property
    def fits_memory(self) -> bool | None:
        """Whether every stage fits the capacity (None: capacity unknown)."""
        cap = self.memory_capacity_bytes
        return None if cap is None else self.memory_per_device_bytes <= cap

    def _rate(self, flops: float) -> float | None:
        return flops / self.step_time_s if self.step_time_s > 0 else None

    @property
    def model_flops_per_device_per_s(self) -> float | None:
        """Model FLOPs per device per second."""
        rate = self._rate(self.model_flops_per_step)
        return None if rate is None else rate / self.parallelism.devices

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation against the cluster's peak."""
        rate = self.model_flops_per_device_per_s
        return None if rate is None else rate / self.cluster.peak_flops

    @property
    def hfu(self) -> float | None:
        """Hardware FLOPs utilisation: recomputed FLOPs counted too."""
        rate = self._rate(self.hardware_flops_per_step)
        return None if rate is None else rate / self.parallelism.devices / self.cluster.peak_flops

    def to_dict(self) -> dict:
        """The JSON of ``pase evaluate --tp ...``: step time, memory, rates, the pipeline and its stages.

        ``mesh`` says which mesh axes each group spans (``{"tensor x context":
        {"gpu": 8}, "data": {"node": 32}, "pipeline": {"node": 2}}``); stage
        ``s`` runs on pipeline coordinate ``s`` of it.
        """
        p = self.parallelism
        samples = p.global_batch / self.step_time_s if self.step_time_s > 0 else None
        return {
            "graph": self.graph_name, "cluster": self.cluster.name, "devices": p.devices, "label": self.label,
            "step_time_s": self.step_time_s,
            "memory_per_device_bytes": self.memory_per_device_bytes,
            "memory_capacity_bytes": self.memory_capacity_bytes, "fits_memory": self.fits_memory,
            "model_flops_per_step": self.model_flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step,
            "model_flops_per_device_per_s": self.model_flops_per_device_per_s, "mfu": self.mfu, "hfu": self.hfu,
            "samples_per_s": samples,
            "tokens_per_s": None if samples is None or self.tokens_per_sample is None
            else samples * self.tokens_per_sample,
            "bubble_fraction": self.schedule.bubble_fraction,
            "tensor_parallel": p.tensor, "context_parallel": p.context, "data_parallel": p.data,
            "pipeline_parallel": p.pipeline, "sequence_parallel": p.sequence_parallel,
            "zero_stage": p.zero, "recompute": p.recompute,
            "recompute_modules": list(p.modules) if p.recompute == "selective" else [],
            "mesh": {name: {a.name: k for a, k in zip(self.cluster.mesh.axes, extents) if k > 1}
                     for name, extents in zip(("tensor x context", "data", "pipeline"), check_devices(p, self.cluster))},
            "pipeline": {
                "stages": p.pipeline, "virtual_stages": p.virtual_stages, "schedule": p.schedule,
                "microbatches": p.microbatches, "microbatch_size": p.microbatch_size,
                "global_batch": p.global_batch, "stage_cuts": list(p.stage_cuts or ()),
                "stages_detail": [s.to_dict() for s in self.stages],
            },
            "chosen_by_search": list(self.chosen),
            "step_time_model": self.step_time_model(),
            "experts": self.experts_dict(),
            "transformer_blocks": self.transformer_blocks,
        }

    def experts_dict(self) -> dict | None:
        """An MoE plan as its user reads it (None without experts): :func:`pase.model.experts.experts_summary`,
        and per step on the busiest stage's device the seconds of token dispatch and combine (before overlap)
        and of the experts' compute, ``m`` microbatches of each."""
        if self.experts is None:
            return None
        m = self.parallelism.microbatches
        busiest = max(self.stages, key=lambda s: s.dispatch_s + s.expert_compute_s)
        return {**self.experts, "dispatch_s_per_step": busiest.dispatch_s * m,
                "expert_compute_s_per_step": busiest.expert_compute_s * m,
                "expert_parameters_per_device": max(s.expert_params for s in self.stages)}


def _graph_at(source: GraphSource, batch: int) -> Graph:
    if isinstance(source, Graph):
        from pase.analysis.throughput import batch_size  # late: pase.analysis imports the planner

        have = batch_size(source)
        if have != batch:
            raise ConfigurationError(
                f"graph {source.name!r} is built for a batch of {have}, but a microbatch of {batch} samples per "
                "replica is asked for; use a sample model (it is rebuilt at any batch) or give the graph at the "
                "microbatch size")
        return source
    return source(batch)


@dataclass(frozen=True)
class LayerTimes:
    """Per layer (graph order), seconds per microbatch on the group, and what stage memory needs."""

    graph: Graph
    layers: tuple[Layer, ...]
    edges: np.ndarray  # (E, 3): producer index, consumer index, tensor index
    tensor_elements: np.ndarray  # per tensor an edge carries, its elements
    tied: tuple  # per parameter several layers share: their indices and their blocks' elements
    forward_s: np.ndarray
    backward_s: np.ndarray
    recompute_s: np.ndarray  # extra backward seconds under the configuration's recomputation
    gradient_s: np.ndarray  # weight-gradient reductions inside the group, once a step
    params: np.ndarray  # weight elements per device
    fp8_params: np.ndarray  # of those, the weights of FP8 products (each also held as FP8 copies)
    activations: np.ndarray  # bytes kept per microbatch
    buffers: np.ndarray
    recompute_flops: np.ndarray
    block_transient: Mapping[str, float]
    block_of: Mapping[str, str]
    model_flops: float
    expert_params: np.ndarray  # expert weight elements per device (pase.model.experts), not in params
    dispatch_s: np.ndarray  # an expert block's dispatch and combine seconds, forward and backward, before overlap
    expert_compute_s: np.ndarray  # an expert block's products and activation seconds, forward and backward
    plain_activations: np.ndarray  # bytes kept per microbatch without recomputation
    weight_grad_s: np.ndarray  # of backward_s, the weight-gradient products' (a zero-bubble schedule defers them)
    attention: str = "unfused"  # how the attention cores ran ("flash" or "unfused")
    precision: str = "bf16"
    experts: dict | None = None  # pase.model.experts.experts_summary of a model with experts
    memo: dict = field(default_factory=dict, compare=False)  # what assemble derived, by what it depends on


def _tied(layers: Sequence[Layer], configs: Mapping[str, np.ndarray]) -> tuple:
    """Per weight several layers share (``TensorSpec.tied``): their indices in ``layers`` and their blocks' elements
    under ``configs`` (one configuration per layer)."""
    shared: dict[str, list[tuple[int, float]]] = {}
    for i, l in enumerate(layers):
        for w in l.weights:
            if w.tied:
                shared.setdefault(w.tied, []).append((i, float(block_elements(l, w, configs[l.name])[0])))
    return tuple((np.array([i for i, _ in v]), np.array([e for _, e in v])) for v in shared.values() if len(v) > 1)


def _edge_arrays(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """The graph's edges as (producer index, consumer index, tensor index) rows in its layer order, and per tensor
    an edge carries (a producer's output, however many read it) its elements; derived once per graph."""
    def compute():
        index = {l.name: i for i, l in enumerate(graph.layers)}
        tensors = {key: t for t, key in enumerate(dict.fromkeys((e.src, e.src_output) for e in graph.edges))}
        sizes = np.array([graph.layer(src).outputs[out].size for src, out in tensors], dtype=float)
        edges = np.array([(index[e.src], index[e.dst], tensors[(e.src, e.src_output)]) for e in graph.edges],
                         dtype=np.int64).reshape(-1, 3)
        return edges, sizes
    return graph.derived("training edges", compute)


def layer_times(graph: Graph, cluster: Cluster, strategy: Mapping[str, tuple[int, ...]], par: Parallelism,
                options: ConfigOptions = ConfigOptions(), memory: MemoryOptions = MemoryOptions(),
                recompute: Sequence[str] | None = None) -> LayerTimes | dict[str, LayerTimes]:
    """Per-layer seconds and bytes of one microbatch ``graph`` under ``strategy`` on ``par``'s group, its expert
    blocks costed under ``par``'s expert parallelism (:func:`pase.model.experts.apply_experts`).

    As :func:`group_times` otherwise; raises ``ConfigurationError`` as it and as ``apply_experts``.
    """
    times = group_times(graph, cluster, strategy, par, options, memory,
                        recompute=(par.recompute,) if recompute is None else recompute)
    out = {mode: apply_experts(lt, cluster, par, strategy, options.precision) for mode, lt in times.items()}
    return out[par.recompute] if recompute is None else out


def group_times(graph: Graph, cluster: Cluster, strategy: Mapping[str, tuple[int, ...]], par: Parallelism,
                options: ConfigOptions = ConfigOptions(), memory: MemoryOptions = MemoryOptions(),
                recompute: Sequence[str] | None = None) -> LayerTimes | dict[str, LayerTimes]:
    """Per-layer seconds and bytes of one microbatch ``graph`` under ``strategy`` on ``par``'s ``t x c`` group.

    Depends on ``par`` only through its group, sequence parallelism,
    tensor-parallel overlap and recomputation; :func:`assemble` turns it into
    a step. With ``recompute`` (a sequence of modes), returns mode -> times,
    costing the graph once.

    On a calibrated cluster (not under the paper's model, whose times stay
    as the paper prices them) two things Megatron does are priced: each chain
    of element-wise layers runs as one kernel
    (``build_cost_model(fuse_elementwise=True)``: its fused bias + dropout +
    residual add); and under sequence parallelism a layer keeps the
    producer's smaller block of an input it gathered (as the memory model
    counts it) and gathers it again in its backward, for its weight gradient:
    the backward pays the forward's gather once more, once per tensor and
    layout however many layers read it (the fused QKV product). Tensor-
    parallel collectives are exposed unless ``par.tp_overlap`` says otherwise
    (:func:`_backward_collectives`).

    Raises ``ConfigurationError`` when the sizes do not tile the cluster or a
    layer's split is invalid on the group.
    """
    group = group_cluster(cluster, par)
    configs = {name: np.array([cfg]) for name, cfg in strategy.items()}
    cost = build_cost_model(graph, group, options, configs=configs, shared_reads=True, fuse_elementwise=True,
                            context_ring=par.context > 1)
    layers = cost.layers
    index = {l.name: i for i, l in enumerate(layers)}

    def alike(value: Callable[[Layer], float]) -> np.ndarray:
        # Layers alike in what they are and how they split (repeated blocks) give alike values.
        memo: dict = {}
        return np.array([memo[k] if (k := (graph.kind(l.name), strategy[l.name])) in memo
                         else memo.setdefault(k, value(l)) for l in layers])

    edge_s = np.zeros(len(layers))
    for e, table in cost.edge_tables:  # an edge's seconds are the consumer's, as in CostModel.breakdown
        edge_s[index[e.dst]] += float(table[0, 0])
    fwd_flops = np.array([float(cost.forward_flops[l.name][0]) for l in layers])
    fwd_s = np.array([float(cost.forward_compute_s[l.name][0]) for l in layers])
    total_s = np.array([float(cost.compute_s[l.name][0]) for l in layers])
    grad = np.array([float(cost.gradient_comm_s[l.name][0]) for l in layers])
    comm = np.array([float(cost.comm_s[l.name][0]) for l in layers]) + edge_s - grad
    forward = fwd_s + comm / 2
    backward = total_s - fwd_s + comm / 2
    products = np.array([bool(l.weights) for l in layers])
    # A product's backward is its input-gradient and its weight-gradient products, of equal FLOPs.
    half = np.where(products, (total_s - fwd_s) / 2, 0.0)
    if cost.cluster.efficiency is not None and (par.sequence_parallel or par.tp_overlap):
        backward = backward + _backward_collectives(graph, cost, configs, group, par, half)
    if cost.cluster.efficiency is not None and par.tp_comm_overlap:
        forward = forward - _forward_overlap(graph, cost, fwd_s)
    params = alike(lambda l: float(sum(block_elements(l, w, configs[l.name])[0] for w in l.weights)))
    tied = _tied(layers, configs)
    edges, sizes = _edge_arrays(graph)
    bpe = group.bytes_per_element
    buffers = alike(lambda l: float(buffer_elements(l, configs[l.name])[0]) * bpe)
    flash = attention_kind(options, group) == "flash"
    units = flash_units(graph, explicit=options.attention == "flash") if flash else ()
    fused = frozenset().union(*(u.members for u in units))
    narrow = fp8_products(graph) if options.precision == "fp8" else frozenset()
    lse = {u.scores: float(lse_bytes(graph, u, configs[u.scores])[0]) for u in units}
    fp8_params = np.where([l.name in narrow for l in layers], params, 0.0)

    def kept(dropped: frozenset = frozenset(), checkpoints: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
        # A fused kernel keeps its log-sum-exp for its backward, unless recomputation reruns its forward.
        acts = activation_bytes(graph, configs, bpe, memory.index_bytes, producer_blocks=par.sequence_parallel,
                                fused=fused, narrow=narrow, dropped=dropped, checkpoints=checkpoints)
        rerun = dropped | frozenset(checkpoints or ())
        return {name: a + (0.0 if name in rerun else lse.get(name, 0.0)) for name, a in acts.items()}

    plain = kept()
    plain_array = np.array([float(plain[l.name][0]) for l in layers])
    zeros = np.zeros(len(layers))
    flops = _model_flops(graph, options, cluster)
    out = {}
    for mode in ((par.recompute,) if recompute is None else recompute):
        # Selective recomputation: Megatron-Core's modules (pase.model.recompute), checkpointed units and
        # discarded outputs; full: every block a unit.
        chosen = module_plan(graph, par.modules) if mode == "selective" else None
        block_of = blocks(graph) if mode == "full" else dict(chosen.units) if chosen is not None else {}
        transient: dict[str, float] = {}
        for l in layers:
            if l.name in block_of:
                transient[block_of[l.name]] = transient.get(block_of[l.name], 0.0) + float(plain[l.name][0])
        if mode == "full":
            recompute_flops, recompute_s = fwd_flops.copy(), forward.copy()
            acts = kept(checkpoints=block_of)
        elif chosen is not None:
            rerun = np.array([l.name in chosen.recomputed for l in layers], dtype=bool)
            # A checkpointed unit reruns its forward, its collectives included; a discarded output only its kernel.
            in_unit = np.array([l.name in chosen.units for l in layers], dtype=bool)
            recompute_flops = np.where(rerun, fwd_flops, 0.0)
            recompute_s = np.where(in_unit, forward, np.where(rerun, fwd_s, 0.0))
            acts = kept(dropped=chosen.discarded, checkpoints=chosen.units or None)
        else:
            recompute_flops, recompute_s = zeros, zeros
            acts = plain
        out[mode] = LayerTimes(
            graph=graph, layers=tuple(layers), edges=edges, tensor_elements=sizes, tied=tied,
            forward_s=forward, backward_s=backward, recompute_s=recompute_s, gradient_s=grad,
            params=params, fp8_params=fp8_params, activations=np.array([float(acts[l.name][0]) for l in layers]),
            buffers=buffers,
            recompute_flops=recompute_flops, block_transient=transient, block_of=block_of,
            model_flops=flops, expert_params=zeros, dispatch_s=zeros, expert_compute_s=zeros,
            plain_activations=plain_array, weight_grad_s=half, attention="flash" if units else "unfused",
            precision=options.precision)
    return out[par.recompute] if recompute is None else out


def _forward_overlap(graph: Graph, cost, compute_s: np.ndarray) -> np.ndarray:
    """Per layer, the forward seconds of tensor-parallel collectives hidden behind the products they feed or
    come from, as Transformer Engine's userbuffers overlap runs them (``Parallelism.tp_comm_overlap``).

    An edge's forward seconds are half its table (forward and backward move the same volumes), charged to its
    consumer. A redistribution of one producer output into products (the all-gather before a column-parallel
    product; several products reading it in one layout, as the fused QKV product does, share it) hides up to
    those products' forward compute (``compute_s``); a product's output redistributed into another layer (the
    reduce-scatter of a row-parallel product's partial sums) hides up to the product's own forward compute.
    """
    index = {l.name: i for i, l in enumerate(cost.layers)}
    product = {l.name: bool(l.weights) and l.op in MATRIX_OPS for l in cost.layers}
    gathers: dict = {}  # producer output -> [forward seconds, compute of the products reading it]
    hidden = np.zeros(len(cost.layers))
    for e, table in cost.edge_tables:
        seconds = float(table[0, 0]) / 2
        if product[e.dst]:
            entry = gathers.setdefault((e.src, e.src_output), [0.0, 0.0, index[e.dst]])
            entry[0] += seconds
            entry[1] += float(compute_s[index[e.dst]])
        elif product[e.src] and seconds > 0:
            hidden[index[e.dst]] += min(seconds, float(compute_s[index[e.src]]))
    for seconds, compute, first in gathers.values():
        hidden[first] += min(seconds, compute)
    return hidden


def _backward_collectives(graph: Graph, cost, configs: Mapping[str, np.ndarray], group: Cluster, par: Parallelism,
                          half: np.ndarray) -> np.ndarray:
    """Per layer, the seconds its backward adds to the cost model's collectives on a calibrated cluster
    (negative where it hides some of them); ``half`` is each layer's input-gradient (and weight-gradient)
    product's seconds, 0 for a layer without weights.

    Under sequence parallelism a layer keeps the producer's smaller block of
    an input it gathered and gathers it again in its backward, for its weight
    gradient: once per tensor and layout however many layers read it (the
    fused QKV product), charged to the first reader.

    Under ``par.tp_overlap``, Megatron-LM's asynchronous tensor-parallel
    backward (``LinearWithGradAccumulationAndAsyncCommunication``, on by
    default from February 2022, NVIDIA/Megatron-LM 83b1e42): a product
    computes its input gradient while the re-gather runs, then reduces the
    input gradient (an all-reduce, or a reduce-scatter under sequence
    parallelism) while it computes its weight gradient. Each collective hides
    up to that product's seconds, summed over the readers sharing it; the rest
    stays exposed. Without it every tensor-parallel collective is exposed.
    """
    from pase.model.layout import redistribute_s, tensor_layout
    from pase.ops import saved_tensors

    index = {l.name: i for i, l in enumerate(cost.layers)}
    mesh, bpe = group.mesh, group.bytes_per_element
    regathers: dict = {}  # (producer output, layout) -> [seconds, readers]
    reductions: dict = {}
    for e in graph.edges:
        src, dst = graph.layer(e.src), graph.layer(e.dst)
        tensor = dst.inputs[e.dst_input]
        if not tensor.differentiable:
            continue
        def held():
            return tensor_layout(src, src.outputs[e.src_output], cost.placements[e.src], partial=False)

        if (par.sequence_parallel and e.dst_input in saved_tensors(dst)[0]
                and block_elements(src, src.outputs[e.src_output], configs[e.src])[0]
                < block_elements(dst, tensor, configs[e.dst])[0]):
            wanted = tensor_layout(dst, tensor, cost.placements[e.dst], partial=False)
            key = (e.src, e.src_output, wanted.shard.tobytes())
            if key not in regathers:
                regathers[key] = [float(redistribute_s(held(), wanted, mesh, bpe)[0, 0]), []]
            regathers[key][1].append(index[e.dst])
        if par.tp_overlap and dst.weights:
            gradient = tensor_layout(dst, tensor, cost.placements[e.dst], partial=True)
            key = (e.src, e.src_output, gradient.shard.tobytes(), gradient.partial.tobytes())
            if key not in reductions:  # the readers' gradients are summed locally before one reduction
                reductions[key] = [float(redistribute_s(gradient, held(), mesh, bpe)[0, 0]), []]
            reductions[key][1].append(index[e.dst])
    added = np.zeros(len(cost.layers))
    for seconds, readers in regathers.values():
        added[readers[0]] += seconds - (min(seconds, float(half[readers].sum())) if par.tp_overlap else 0.0)
    for seconds, readers in reductions.values():
        added[readers[0]] -= min(seconds, float(half[readers].sum()))
    return added


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
        lt = layer_times(_graph_at(source, par.microbatch_size), cluster, strategy, par, options, memory)
    capacity = cluster.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    return assemble(lt, cluster, par, memory, capacity, label=label, record=record)


def cached_graph(source: GraphSource, batch: int, cache: dict) -> Graph:
    """``source`` at ``batch`` samples, built once per ``cache`` (see :func:`cached_times`).

    Raises ``ConfigurationError`` when ``source`` is a graph at another batch.
    """
    if ("graph", batch) not in cache:
        cache["graph", batch] = _graph_at(source, batch)
    return cache["graph", batch]


def cached_times(source: GraphSource, cluster: Cluster, par: Parallelism, options: ConfigOptions,
                 memory: MemoryOptions, cache: dict) -> dict[str, LayerTimes]:
    """Layer times of Megatron's splits for ``par``'s microbatch and group, per recomputation mode, memoised.

    ``cache`` keeps the graph of each microbatch size and the times of each
    (microbatch, tensor, context, sequence parallelism): everything else of
    ``par`` (pipeline and data sizes, schedule, ZeRO) is left to
    :func:`assemble`. One cache serves one source, cluster and options: the
    search, the baselines and the evaluation of a plan share it.

    Raises ``ConfigurationError`` as :func:`layer_times`.
    """
    b = par.microbatch_size
    base = ("times", b, par.tensor, par.context, par.sequence_parallel, par.tp_overlap, par.tp_comm_overlap,
            par.modules)
    # The expert blocks' costs depend on these too; the rest of the layers' times are shared by every expert layout.
    key = base + (par.ep, par.expert_tensor, par.etp is not None, par.expert_imbalance, par.capacity_factor,
                  par.expert_overlap, par.fp8_dispatch)
    if key not in cache:
        if base not in cache:
            _group_cache(source, cluster, par, options, memory, cache, base)
        if isinstance(cache[base], str):
            raise ConfigurationError(cache[base])
        strategy, times = cache[base]
        try:
            cache[key] = {mode: apply_experts(lt, cluster, par, strategy, options.precision)
                          for mode, lt in times.items()}
        except ConfigurationError as exc:
            cache[key] = str(exc)
    if isinstance(cache[key], str):
        raise ConfigurationError(cache[key])
    return cache[key]


def _group_cache(source: GraphSource, cluster: Cluster, par: Parallelism, options: ConfigOptions,
                 memory: MemoryOptions, cache: dict, key: tuple) -> None:
    """Fill ``cache[key]`` with Megatron's whole-graph splits and the group's layer times per recomputation mode
    (:func:`group_times`), or the message of the ``ConfigurationError`` they raise (and raise it)."""
    from pase.strategies.baselines import tensor_parallel_strategy

    b = par.microbatch_size
    if key not in cache:
        graph = cached_graph(source, b, cache)
        core = graph.derived("periodic core", lambda: periodic_core(graph, blocks(graph)))
        try:
            # Megatron's rule splits each layer by its own dimensions, alike in alike layers: the core's splits
            # are the whole run's.
            strategy = tensor_parallel_strategy(graph if core is None else core.graph, par.tensor, par.context,
                                                par.sequence_parallel)
        except ConfigurationError as exc:
            cache[key] = str(exc)  # the same sizes fail the same way for every pipeline and data size
            raise
        # Named modules go with selective recomputation alone (Parallelism refuses them with the other modes).
        modes = ("selective",) if par.recompute_modules is not None else RECOMPUTE
        if core is None:
            cache[key] = (strategy, group_times(graph, cluster, strategy, par, options, memory, recompute=modes))
        else:
            # Cost the graph with its run of identical blocks shortened to three, then spread the values over
            # the whole run: exact (pase.model.repeats) and as many times cheaper as the run is long.
            small = group_times(core.graph, cluster, strategy, par, options, memory, recompute=modes)
            names = [l.name for l in core.graph.layers]
            whole = {l.name: strategy[names[r]] for l, r in zip(graph.layers, core.representative)}
            # The tied weights' blocks depend on the splits alone: one list for every recomputation mode.
            tied = _tied(graph.layers, {l.name: np.array([whole[l.name]]) for l in _tying(graph)})
            cache[key] = (whole, {mode: _spread(lt, graph, core, tied, options, cluster) for mode, lt in small.items()})


# What LayerTimes holds of the whole graph; every other field holds one value per layer.
_GRAPH_FIELDS = frozenset({"graph", "layers", "edges", "tensor_elements", "tied", "block_transient", "block_of",
                           "model_flops", "attention", "precision", "experts", "memo"})


def _model_flops(graph: Graph, options: ConfigOptions, cluster: Cluster) -> float:
    """The graph's model FLOPs (:func:`pase.analysis.throughput.model_flops`), with a fused attention kernel's
    products counted as it computes them (a causal kernel half the square, as NVIDIA's "model TFLOP/s" counts
    them; :func:`pase.model.attention.masked_model_flops`); derived once per graph and attention kind."""
    from pase.analysis.throughput import model_flops  # late: pase.analysis imports the planner

    kind = attention_kind(options, cluster)

    def compute() -> float:
        flops = model_flops(graph, options.cost_model)
        if kind != "flash":
            return flops
        return flops - masked_model_flops(graph, flash_units(graph, explicit=options.attention == "flash"))
    return graph.derived(("model flops", options.cost_model, kind), compute)


def _tying(graph: Graph) -> tuple[Layer, ...]:
    """The layers of ``graph`` holding a tied weight (``TensorSpec.tied``); derived once per graph."""
    return graph.derived("tying layers", lambda: tuple(l for l in graph.layers if any(w.tied for w in l.weights)))


def _spread(small: LayerTimes, graph: Graph, core: PeriodicCore, tied: tuple, options: ConfigOptions,
            cluster: Cluster) -> LayerTimes:
    """The layer times of ``graph`` from those of its core (``small``, :func:`layer_times` of ``core.graph``):
    each layer takes its representative's values; what concerns the whole graph is derived from it (``tied``:
    :func:`_tied` of the whole graph's splits)."""
    rep = core.representative
    layers = tuple(graph.layers)
    per_layer = {f.name: getattr(small, f.name)[rep] for f in fields(LayerTimes) if f.name not in _GRAPH_FIELDS}
    # A checkpointed unit (a block, or a module of one) is named after its block: take the representative's unit
    # and put this layer's block in its name.
    whole, part = graph.derived("blocks", lambda: blocks(graph)), core.graph.derived("blocks", lambda: blocks(core.graph))
    block_of, transient = {}, {}
    for l, r in zip(layers, rep):
        unit = small.block_of.get(small.layers[r].name)
        if unit is not None:
            block_of[l.name] = whole[l.name] + unit[len(part[small.layers[r].name]):]
            transient[block_of[l.name]] = small.block_transient[unit]
    edges, sizes = _edge_arrays(graph)
    return LayerTimes(
        graph=graph, layers=layers, edges=edges, tensor_elements=sizes,
        tied=tied, block_transient=transient, block_of=block_of,
        model_flops=_model_flops(graph, options, cluster), attention=small.attention, precision=small.precision,
        **per_layer)


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


def check_devices(par: Parallelism, cluster: Cluster) -> list[tuple[int, ...]]:
    """The mesh extents of the tensor x context, data and pipeline groups of ``par`` on ``cluster``.

    Raises ``ConfigurationError`` when the sizes do not multiply to the
    cluster's devices or do not tile its mesh (:func:`group_extents`).
    """
    if par.devices != cluster.devices:
        raise ConfigurationError(
            f"tensor {par.tensor} x context {par.context} x data {par.data} x pipeline {par.pipeline} = "
            f"{par.devices:,} devices, but the cluster has {cluster.devices:,}; choose sizes whose product is "
            "the device count")
    return group_extents(cluster.mesh, (par.group, par.data, par.pipeline),
                         ("tensor x context", "data-parallel", "pipeline"))


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
    """Per layer, the seconds the balanced cuts even out (:func:`balanced_cuts`) under ZeRO stage ``zero`` over
    the data-parallel extents ``data_k``: a layer's forward and backward, or under ``overlap`` with ZeRO 3 the
    larger of its compute and its gathers. For searches that cut elsewhere than between any two layers (whole
    transformer blocks, :mod:`pase.frameworks`)."""
    zero3 = tuple(data_k) if zero == 3 and math.prod(data_k) > 1 else None
    return _loads(lt, cluster, zero3, overlap)["weight"]


def _stage_sums(lt: "LayerTimes", cluster: Cluster, par: Parallelism, zero3: tuple[int, ...] | None,
                expert3: tuple[int, ...] | None = None):
    """The cuts of ``par``'s ``p v`` virtual stages (given, or balanced) and, per virtual stage, one
    microbatch's forward and backward seconds; memoised on ``lt``.

    A stage's time is its layers' sum, except under overlapped ZeRO-3 (``par.overlap``), where the gathers
    run one layer ahead of the compute (:func:`_prefetched`).

    Raises ``ConfigurationError`` when given cuts are not increasing positions inside the layer order.
    """
    n, Q = len(lt.layers), par.pipeline * par.virtual_stages
    key = ("stages", Q, zero3, par.overlap, par.stage_cuts, expert3)
    if key not in lt.memo:
        loads = _loads(lt, cluster, zero3, par.overlap, expert3)
        cuts = _expert_whole_cuts(lt, loads["weight"], Q) if par.stage_cuts is None else par.stage_cuts
        if len(cuts) != Q - 1 or any(not 0 < c < n for c in cuts) or list(cuts) != sorted(set(cuts)):
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


def _expert_whole_cuts(lt: "LayerTimes", weight: np.ndarray, pieces: int) -> tuple[int, ...]:
    """:func:`balanced_cuts` of ``weight`` that never cut inside an expert block (between its router and its
    combine): Megatron-Core's MoE layer is one module of a transformer layer, and the pipeline passes only
    what leaves it, never its ``k`` dispatched copies of every token."""
    if lt.experts is None:
        return balanced_cuts(weight, pieces)

    def positions() -> np.ndarray:
        index = {l.name: i for i, l in enumerate(lt.graph.layers)}
        inside = np.zeros(len(index) + 1, dtype=bool)
        for block in moe_blocks(lt.graph):
            inside[index[block.router] + 1:index[block.combine] + 1] = True
        return np.flatnonzero(~inside[1:len(index)]) + 1
    allowed = lt.graph.derived("expert-whole cut positions", positions)
    if len(allowed) < pieces - 1:
        return balanced_cuts(weight, pieces)
    atoms = balanced_cuts(np.add.reduceat(weight, np.concatenate(([0], allowed))), pieces)
    return tuple(int(allowed[a - 1]) for a in atoms)


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
    first = np.zeros(len(lt.tensor_elements), dtype=np.int64)
    last = np.zeros(len(lt.tensor_elements), dtype=np.int64)
    first[lt.edges[:, 2]] = stage_of[lt.edges[:, 0]]
    np.maximum.at(last, lt.edges[:, 2], stage_of[lt.edges[:, 1]])
    change = np.zeros(Q + 1)
    np.add.at(change, first, lt.tensor_elements)
    np.add.at(change, last, -lt.tensor_elements)
    crossing = np.cumsum(change)[:Q - 1] * cluster.bytes_per_element / group
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
            lt.memo["unit transient"] = np.array([lt.block_transient.get(lt.block_of.get(l.name), 0.0)
                                                  for l in lt.layers])
        np.maximum.at(recomputed, layer_dev, lt.memo["unit transient"])
        transient += recomputed
    gathered = np.zeros(S)
    np.maximum.at(gathered, layer_dev, (lt.params + lt.expert_params) * cluster.bytes_per_element)
    lt.memo[key] = placed = {
        "bounds": bounds, "send": send, "params": params, "reduce": reduce, "transient": transient,
        "gathered": gathered, "activations": np.bincount(layer_dev, lt.activations, S),
        "fp8 copies": np.bincount(layer_dev, lt.fp8_params, S) * FP8_COPY_BYTES_PER_PARAMETER,
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
        lt.memo[key] = simulate_levels(par.schedule, fq, bq, m, send, reduce, par.overlap) or simulate(
            par.schedule, fq, bq, m, send_s=send, reduce_s=reduce, overlap=par.overlap)
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
    cuts, fq, bq = _stage_sums(lt, cluster, par, zero3, expert3)
    pipe_axis = max((j for j, k in enumerate(pipe_k) if k > 1), default=len(pipe_k) - 1)
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
    fp8 = placed["fp8 copies"]
    total = (states["weights"] + states["gradients"] + states["optimizer"] + fp8 + acts + transient
             + memory.reserve_on(cluster))
    if rejected is not None and capacity is not None and total.max() > capacity:
        rejected(float(total.max()))
        return None
    par = replace(par, stage_cuts=cuts)
    # The optimizer step reads and writes its state once a step; the roofline prices it on a calibrated cluster.
    optimizer = np.zeros(S) if cluster.efficiency is None else (
        (params / shard["optimizer"] + expert_params / expert_shard["optimizer"]) * OPTIMIZER_BYTES_PER_PARAMETER
        / cluster.efficiency.memory_Bps + fp8_weight_cast_s(fp8 / FP8_COPY_BYTES_PER_PARAMETER, cluster.efficiency))
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
        memory_capacity_bytes=capacity, tokens_per_sample=sequence_length(graph), label=label or par.describe(),
        attention=lt.attention, precision=lt.precision, experts=lt.experts,
        transformer_blocks=len(set(graph.derived("blocks", lambda: blocks(graph)).values())) or None,
    )
