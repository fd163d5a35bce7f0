"""What the 3-D model reports of a configuration: :class:`TrainingPlan` (step time, rates, memory, schedule)
and its :class:`StageReport` per pipeline stage. The model: :mod:`pase.model.training`."""

from __future__ import annotations

from dataclasses import dataclass, field

from pase.hardware.cluster import Cluster
from pase.hardware.published_runs import beside
from pase.model.cost import describe_model
from pase.model.expert_overlap import unmerged_share
from pase.model.parallelism import Parallelism, check_devices
from pase.model.pipeline import ScheduleResult


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

    def chunks_text(self, to: str = " .. ") -> str:
        """Its chunks' runs as text, ``first .. last`` each (``to`` between): all of them up to three, else the
        first two, "...", and the last with how many there are (an interleaved stage of 24 chunks)."""
        runs = [first if first == last else f"{first}{to}{last}" for first, last in self.layers]
        if len(runs) > 3:
            runs = [*runs[:2], "...", f"{runs[-1]} ({len(runs)} chunks)"]
        return "; ".join(runs)

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
        """Which step-time model priced the plan, in words, and how far it was from published runs of the
        plan's kind on its preset (:func:`pase.model.cost.describe_model`)."""
        return describe_model(self.cluster, self.attention, self.precision, experts=self.experts is not None)

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

        ``published_runs``: NVIDIA's published runs of the plan's model on its preset's system, and the plan
        against those of its own configuration (:func:`pase.hardware.published_runs.beside`; None where none).
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
            "published_runs": beside(self),
        }

    def exposed_dispatch_s(self, stage: StageReport) -> float:
        """Seconds a step of ``stage``'s device spends on token dispatch and combine that no overlap hides: all of
        them without one; under an overlap each block's exposed share, and under the 1F1B all-to-all overlap all of
        them in the stage's unmerged warm-up and cool-down (:func:`pase.model.expert_overlap.unmerged_share`).
        0 for a plan without experts."""
        if self.experts is None:
            return 0.0
        par, e = self.parallelism, self.experts
        m, whole = par.microbatches, e["dispatch_s_per_block"]
        share = e["dispatch_exposed_s_per_block"] / whole if whole > 0 else 0.0
        if e["dispatch_overlap"]:
            share += (1 - share) * float(unmerged_share(par.pipeline, par.virtual_stages, m)[stage.index % par.pipeline])
        return stage.dispatch_s * m * share

    def experts_dict(self) -> dict | None:
        """An MoE plan as its user reads it (None without experts): :func:`pase.model.experts.experts_summary`,
        and per step on the busiest stage's device the seconds of token dispatch and combine (before overlap)
        and of the experts' compute, ``m`` microbatches of each, and of the dispatch what stays exposed
        (:meth:`exposed_dispatch_s`)."""
        if self.experts is None:
            return None
        m = self.parallelism.microbatches
        busiest = max(self.stages, key=lambda s: s.dispatch_s + s.expert_compute_s)
        return {**self.experts, "dispatch_s_per_step": busiest.dispatch_s * m,
                "dispatch_exposed_s_per_step": self.exposed_dispatch_s(busiest),
                "expert_compute_s_per_step": busiest.expert_compute_s * m,
                "expert_parameters_per_device": max(s.expert_params for s in self.stages)}

