"""A 3-D training configuration (:class:`Parallelism`: tensor, context, data, pipeline and expert sizes,
schedule, recomputation, ZeRO, overlaps) and how its groups sit on the cluster's mesh. The model that prices
it: :mod:`pase.model.training`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster
from pase.model.groups import group_extents
from pase.model.pipeline import CHUNKED, SCHEDULES, ZERO_BUBBLE, schedule_problem
from pase.model.recompute import DEFAULT_MODULES, check_modules

# Token dispatchers (:mod:`pase.model.experts`): Megatron-Core's all-to-all (its default) and DeepEP (its flex
# dispatcher with ``moe_enable_deepep``).
DISPATCHERS = ("alltoall", "deepep")

RECOMPUTE = ("none", "selective", "full")


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
    dispatcher : str
        How tokens reach their experts (:data:`DISPATCHERS`):
        ``"alltoall"``, Megatron-Core's all-to-all (its default), or
        ``"deepep"``, DeepEP (Megatron-Core's flex dispatcher), which sends a
        token across the network once per node and forwards it over NVLink.
    shared_expert_overlap : bool
        Run each block's shared experts beside its dispatch and combine
        (Megatron-Core's ``moe_shared_expert_overlap``, with the all-to-all
        dispatcher and without ``expert_overlap``); off by default.

    Raises
    ------
    ConfigurationError
        A size is not a positive integer, ZeRO is not 0-3, the recomputation
        or schedule is unknown, ``v > 1`` without the interleaved schedule,
        the batch does not split (:meth:`microbatches`), ``etp x ep`` does
        not divide a stage's devices, the imbalance is below 1, the
        capacity factor not positive or the dispatcher unknown.
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
    dispatcher: str = "alltoall"
    shared_expert_overlap: bool = False

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
        if self.dispatcher not in DISPATCHERS:
            raise ConfigurationError(f"unknown token dispatcher {self.dispatcher!r}; use one of "
                                     f"{', '.join(DISPATCHERS)}")
        if self.capacity_factor is not None and (
                isinstance(self.capacity_factor, bool) or not isinstance(self.capacity_factor, (int, float))
                or not 0 < self.capacity_factor < math.inf):
            raise ConfigurationError(f"the capacity factor must be a positive number, not {self.capacity_factor!r}")
        if self.dispatcher == "deepep" and self.capacity_factor is not None:
            raise ConfigurationError("DeepEP keeps every token: it does not drop tokens past a capacity and pad up "
                                     "to it (Megatron-Core refuses the pair); drop --capacity-factor or use "
                                     "--dispatcher alltoall")
        if self.shared_expert_overlap and self.expert_overlap:
            raise ConfigurationError("the shared-expert overlap and the 1F1B all-to-all overlap hide the same exchanges "
                                     "(Megatron-Core runs one or the other); drop --shared-expert-overlap or "
                                     "--ep-overlap")
        if self.shared_expert_overlap and self.dispatcher != "alltoall":
            raise ConfigurationError("the shared-expert overlap runs with the all-to-all dispatcher only "
                                     "(Megatron-Core's rule); drop --shared-expert-overlap or use --dispatcher alltoall")
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
            ["ep-overlap"] if self.expert_overlap else []) + (["fp8-dispatch"] if self.fp8_dispatch else []) + (
            ["deepep"] if self.dispatcher == "deepep" else []) + (
            ["shared-overlap"] if self.shared_expert_overlap else [])
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

