"""A plan's step time in today's units: samples and tokens per second, model FLOPs, MFU, time to train.

Definitions (``T`` the plan's step time in seconds, ``p`` its devices, ``F``
one device's peak FLOP/s as the cluster gives it):

* **batch** ``B``: the size of dimension ``b`` of the layers whose output has a
  ``b`` axis (the samples' batch; the largest if layers disagree); ``None``
  when no layer has one.
* **sequence length** ``S``: the size of dimension ``s`` of the layers whose
  output has both a ``b`` and an ``s`` axis (``rnnlm``, ``transformer``,
  ``gpt``; a convolution's ``s`` is its kernel width and never an output
  axis); ``None`` without a sequence.
* ``samples_per_s = B / T``; ``tokens_per_s = B * S / T``.
* ``model_flops_per_step``: the training FLOPs (forward and backward) of the
  whole, unsplit graph, each layer counted once, as the plan's cost model
  counts them on one device: under the corrected model a graph input takes no
  gradient (a fully connected layer fed by the graph's input does ``4bnc``
  rather than ``6bnc``); under the paper's model every input does. Work
  replicated across devices does not count.
* ``model_flops_per_device_per_s = model_flops_per_step / (p * T)``.
* ``mfu = model_flops_per_step / (p * F * T)``: model FLOPs utilisation
  against the cluster's *peak* figure (``cluster.peak_flops``, whose source
  is the hardware preset or the ``--tflops`` given), not a measured rate. On
  one device with no communication it is ``compute_s / step_time_s`` = 1.
* Training on ``N`` tokens (or samples): ``time_s = N / tokens_per_s``
  (fractional steps allowed), ``gpu_hours = time_s * p / 3600``, and
  ``cost = gpu_hours * price_per_gpu_hour`` when a price is given.

A graph that does no work (data movement only) can take 0 s a step: every rate
and the MFU are then ``None`` rather than infinite or NaN, so that JSON stays
strict.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from numbers import Real

import numpy as np

from pase.errors import PaseError
from pase.ir.graph import Graph

# Plans are taken as :class:`pase.planner.Plan` without importing it: pase.planner imports this module.

__all__ = [
    "ThroughputError", "Throughput", "TrainingEstimate",
    "batch_size", "sequence_length", "model_flops", "throughput", "training_estimate", "estimate_from_rate",
]


class ThroughputError(PaseError, ValueError):
    """A training estimate's input is invalid (a non-positive amount, a negative price...)."""


def batch_size(graph: Graph) -> int | None:
    """Samples per step: the size of dimension ``b`` on layers whose output has a ``b`` axis (None: no batch)."""
    sizes = [layer.size_of["b"] for layer in graph.layers
             if "b" in layer.dims and any("b" in t.axes for t in layer.outputs)]
    return max(sizes) if sizes else None


def sequence_length(graph: Graph) -> int | None:
    """Tokens per sample: the size of ``s`` on layers with an output over both ``b`` and ``s`` (None: no sequence)."""
    sizes = [layer.size_of["s"] for layer in graph.layers
             if "s" in layer.dims and any("b" in t.axes and "s" in t.axes for t in layer.outputs)]
    return max(sizes) if sizes else None


def model_flops(graph: Graph, cost_model: str = "corrected") -> float:
    """Training FLOPs of one step of the whole, unsplit graph (each layer once).

    Under ``"corrected"`` a graph input (an input no edge feeds) takes no
    gradient, as in :func:`pase.model.cost.build_cost_model`; under
    ``"paper"`` every input does (the sum of :func:`pase.ops.training_flops`).
    """
    from pase.model.cost import layer_compute_flops  # late: pase.model imports widely

    total = 0.0
    counted: dict = {}  # repeated blocks: each distinct layer is counted once
    for layer in graph.layers:
        if cost_model == "paper":
            needs = None
        else:
            fed = {e.dst_input for e in graph.in_edges(layer.name)}
            needs = tuple(t.differentiable and i in fed for i, t in enumerate(layer.inputs))
        key = (graph.kind(layer.name), needs)
        if key not in counted:
            ones = np.ones((1, len(layer.dims)), dtype=np.int64)
            counted[key] = float(layer_compute_flops(layer, ones, None if needs is None else list(needs))[0])
        total += counted[key]
    return total


@dataclass(frozen=True)
class Throughput:
    """A plan's rates; every rate is None when the step takes 0 s (see the module's formulas)."""

    batch: int | None
    sequence_length: int | None
    devices: int
    peak_flops: float
    step_time_s: float
    samples_per_s: float | None
    tokens_per_s: float | None
    model_flops_per_step: float
    model_flops_per_device_per_s: float | None
    mfu: float | None

    def to_dict(self) -> dict:
        """Plain, JSON-ready fields (no NaN or infinity)."""
        return asdict(self)

    def rates(self) -> dict:
        """The rate fields only, as :meth:`pase.planner.Plan.to_dict` and sweep records name them."""
        return {k: getattr(self, k) for k in ("samples_per_s", "tokens_per_s", "model_flops_per_step",
                                              "model_flops_per_device_per_s", "mfu")}


@dataclass(frozen=True)
class TrainingEstimate:
    """Time, GPU-hours and cost to train on ``amount`` tokens or samples (``unit``); None at a 0 s step."""

    amount: float
    unit: str
    time_s: float | None
    gpu_hours: float | None
    cost: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def throughput(plan) -> Throughput:
    """Samples/s, tokens/s, model FLOPs per step and per device per second, and MFU of ``plan`` (a Plan)."""
    t = float(plan.step_time_s)
    p = int(plan.cluster.devices)
    peak = float(plan.cluster.peak_flops)
    b, s = batch_size(plan.graph), sequence_length(plan.graph)
    flops = model_flops(plan.graph, plan.cost_model)
    live = t > 0 and math.isfinite(t)
    return Throughput(
        batch=b, sequence_length=s, devices=p, peak_flops=peak, step_time_s=t,
        samples_per_s=b / t if live and b is not None else None,
        tokens_per_s=b * s / t if live and b is not None and s is not None else None,
        model_flops_per_step=flops,
        model_flops_per_device_per_s=flops / (p * t) if live else None,
        mfu=flops / (p * peak * t) if live else None,
    )


def _check_positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ThroughputError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def training_estimate(plan, *, tokens: float | None = None, samples: float | None = None,
                      price_per_gpu_hour: float | None = None) -> TrainingEstimate:
    """Time and GPU-hours (and cost, given a price) to train ``plan``'s model on ``tokens`` or ``samples``.

    ``time_s = N / rate`` (``rate`` = tokens/s or samples/s), ``gpu_hours =
    time_s * devices / 3600``, ``cost = gpu_hours * price_per_gpu_hour``.
    At a 0 s step time every result is None.

    Raises
    ------
    ThroughputError
        Neither or both of ``tokens`` and ``samples``; a non-positive or
        non-finite amount; a negative or non-finite price; ``tokens`` for a
        model without a sequence dimension, or either without a batch.
    """
    if (tokens is None) == (samples is None):
        raise ThroughputError("give exactly one of tokens or samples to train on")
    unit, amount = ("tokens", tokens) if tokens is not None else ("samples", samples)
    amount = _check_positive(unit, amount)
    if price_per_gpu_hour is not None:
        if (isinstance(price_per_gpu_hour, bool) or not isinstance(price_per_gpu_hour, Real)
                or not math.isfinite(price_per_gpu_hour) or price_per_gpu_hour < 0):
            raise ThroughputError(f"price per GPU-hour must be a finite number >= 0, got {price_per_gpu_hour!r}")
    rates = throughput(plan)
    if rates.batch is None:
        raise ThroughputError(f"{plan.graph.name!r} has no batch dimension 'b': samples per step are unknown")
    if unit == "tokens" and rates.sequence_length is None:
        raise ThroughputError(f"{plan.graph.name!r} has no sequence dimension 's': train on samples instead")
    rate = rates.tokens_per_s if unit == "tokens" else rates.samples_per_s
    return estimate_from_rate(amount, rate, rates.devices, price_per_gpu_hour, unit=unit)


def estimate_from_rate(amount: float, rate_per_s: float | None, devices: int,
                       price_per_gpu_hour: float | None = None, *, unit: str = "tokens") -> TrainingEstimate:
    """:func:`training_estimate` from a rate already known (a sweep record's ``tokens_per_s``...).

    ``time_s = amount / rate_per_s``, ``gpu_hours = time_s * devices / 3600``,
    ``cost = gpu_hours * price_per_gpu_hour`` (None without a price). A rate
    of None (a 0 s step) gives None for all three.

    Raises
    ------
    ThroughputError
        ``amount`` or ``devices`` not positive, a negative price, a rate <= 0.

    >>> e = estimate_from_rate(3600.0, 1.0, 2, 1.5)
    >>> (e.time_s, e.gpu_hours, e.cost)
    (3600.0, 2.0, 3.0)
    """
    amount = _check_positive(unit, amount)
    _check_positive("devices", devices)
    if price_per_gpu_hour is not None:
        if (isinstance(price_per_gpu_hour, bool) or not isinstance(price_per_gpu_hour, Real)
                or not math.isfinite(price_per_gpu_hour) or price_per_gpu_hour < 0):
            raise ThroughputError(f"price per GPU-hour must be a finite number >= 0, got {price_per_gpu_hour!r}")
    if rate_per_s is None:  # a 0 s step
        return TrainingEstimate(amount, unit, None, None, None)
    rate = _check_positive(f"{unit} per second", rate_per_s)
    time_s = amount / rate
    gpu_hours = time_s * int(devices) / 3600.0
    cost = None if price_per_gpu_hour is None else gpu_hours * float(price_per_gpu_hour)
    return TrainingEstimate(amount, unit, time_s, gpu_hours, cost)
