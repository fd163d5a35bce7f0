"""What a device and its links achieve, as against their published peaks: the calibration of a cluster.

The paper prices every FLOP at the peak rate and every byte at the nominal
link bandwidth. An :class:`Efficiency` says what kernels and collectives
reach instead, in a few physically meaningful numbers, each with its source
(:attr:`Efficiency.sources`):

* matrix products run at a fraction of the peak that grows with their size
  (``matmul_curve``: points of (FLOPs per kernel, fraction of peak),
  interpolated in log FLOPs and held flat beyond the ends), a layer's
  backward products on curves of their own where measured
  (``matmul_dgrad_curve`` for an input gradient ``dx = dy W``,
  ``matmul_wgrad_curve`` for a weight gradient ``dW = dy^T x``; without
  them, the forward's); FP8 products on
  their own curve (``fp8_matmul_curve``, fractions of the cluster's FP8
  peak, :attr:`~pase.hardware.cluster.Cluster.fp8_peak_flops`);
* fused (flash) attention kernels on curves of their own, forward
  (``attention_curve``) and backward (``attention_backward_curve``), in the
  FLOPs the kernel does (a causal kernel half the square's) against
  fractions of the (BF16) peak; without them a fused attention kernel runs
  on the matrix curve;
* other kernels (normalisations, softmax, elementwise, embeddings) run on
  the vector units at ``vector_flops``;
* every kernel moves its operands through memory at ``memory_Bps`` and takes
  at least ``kernel_overhead_s`` (launch and tail); ``memory_overlap`` is the
  fraction of the shorter of a kernel's compute and memory times hidden behind
  the longer (1: the roofline, their maximum; 0: their sum, as Calculon's
  ``no_overlap`` processing mode prices kernels);
* ``attention_shapes``, the rates at which this GPU's fused attention
  kernels run head shapes other than the curves' 128-wide heads, relative to
  them (:mod:`pase.hardware.attention_kernels`: per shape ``(d_qk, d_v,
  windowed, points)``, each point ``(forward FLOPs, forward factor, backward
  factor)``); None: every head shape on the attention curves;
* ``sms``, the device's streaming multiprocessors (where known): what a
  communication kernel that holds some of them (DeepEP's) leaves the
  computation it overlaps (:mod:`pase.model.expert_overlap`);
* each link class reaches a fraction of its nominal bandwidth in a collective
  (``intra_efficiency`` inside a node, ``inter_efficiency`` between nodes)
  and pays a latency per collective step (``intra_latency_s``,
  ``inter_latency_s``).

:mod:`pase.model.roofline` turns these into kernel times; a cluster with
``efficiency`` set is priced with them unless the cost model is the paper's.

:data:`CALCULON_A100` is Calculon's published A100 system file as this model
reads it; :data:`A100_FITTED` (the ``dgx-a100`` preset's calibration) starts
from it, takes its matrix curve from published kernel figures
(:data:`A100_KERNEL_CURVE`) and fits three figures no A100 kernel source gives
(the HBM fraction, NVLink's efficiency, the compute/memory overlap) to
Korthikanti et al.'s Table 5 and Megatron-LM's Table 1
(``benchmarks/fit_calibration.py``; BENCHMARKS.md, "Published measurements
against the model" and "The A100 calibration out of sample").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from pase.errors import ClusterError
from pase.hardware.attention_kernels import ShapeRates
from pase.limits import MAX_LATENCY_S, MAX_SMS

__all__ = ["Efficiency", "curve_fraction", "CALCULON_A100", "A100_FITTED", "A100_HBM_BPS", "A100_KERNEL_CURVE",
           "A100_MAMF_FRACTION", "derated"]


@dataclass(frozen=True)
class Efficiency:
    """Achievable rates of one device and its links (see the module docstring); rates per second.

    Raises
    ------
    ClusterError
        A fraction outside (0, 1], a rate that is not positive and finite, a
        latency or overhead outside 0 .. ``MAX_LATENCY_S`` seconds, a matrix
        curve that is empty or not ascending in FLOPs, an SM count that is
        not a whole number from 1 to ``MAX_SMS``, or head-shape rates that are
        not widths and ascending points of positive factors up to
        ``MAX_SHAPE_FACTOR``.
    """

    matmul_curve: tuple[tuple[float, float], ...]
    vector_flops: float
    memory_Bps: float
    kernel_overhead_s: float = 0.0
    intra_efficiency: float = 1.0
    inter_efficiency: float = 1.0
    intra_latency_s: float = 0.0
    inter_latency_s: float = 0.0
    memory_overlap: float = 1.0
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    fp8_matmul_curve: tuple[tuple[float, float], ...] | None = None
    matmul_dgrad_curve: tuple[tuple[float, float], ...] | None = None
    matmul_wgrad_curve: tuple[tuple[float, float], ...] | None = None
    attention_curve: tuple[tuple[float, float], ...] | None = None
    attention_backward_curve: tuple[tuple[float, float], ...] | None = None
    sms: int | None = None
    attention_shapes: ShapeRates | None = None

    def __post_init__(self):
        for name in ("matmul_curve", *_OPTIONAL_CURVES):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _check_curve(name, value))
        curve = self.matmul_curve
        for name in ("intra_efficiency", "inter_efficiency"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ClusterError(f"{name} must be a fraction in (0, 1], got {value!r}")
        if not 0 <= self.memory_overlap <= 1:
            raise ClusterError(f"memory_overlap must be a fraction from 0 to 1, got {self.memory_overlap!r}")
        for name in ("vector_flops", "memory_Bps"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                raise ClusterError(f"{name} must be a positive, finite rate, got {value!r}")
        for name in ("kernel_overhead_s", "intra_latency_s", "inter_latency_s"):
            value = getattr(self, name)
            if not 0 <= value <= MAX_LATENCY_S:
                raise ClusterError(f"{name} must be from 0 to {MAX_LATENCY_S:g} s, got {value!r}")
        if self.sms is not None and (isinstance(self.sms, bool) or not isinstance(self.sms, (int, float))
                                     or not float(self.sms).is_integer() or not 1 <= self.sms <= MAX_SMS):
            raise ClusterError(f"sms (streaming multiprocessors) must be a whole number from 1 to {MAX_SMS}, "
                               f"got {self.sms!r}")
        if self.sms is not None:
            object.__setattr__(self, "sms", int(self.sms))
        if self.attention_shapes is not None:
            object.__setattr__(self, "attention_shapes", _check_shapes(self.attention_shapes))

    def matmul_fraction(self, flops, product: str = "forward") -> np.ndarray:
        """Fraction of the peak a matrix-product kernel of ``flops`` FLOPs reaches (array in, array out).

        ``product``: ``"forward"``, ``"dgrad"`` (an input gradient) or
        ``"wgrad"`` (a weight gradient); a backward product without a curve of
        its own runs on the forward's.
        """
        curve = {"forward": None, "dgrad": self.matmul_dgrad_curve, "wgrad": self.matmul_wgrad_curve}[product]
        return curve_fraction(self.matmul_curve if curve is None else curve, flops)

    def to_dict(self) -> dict:
        """Plain types for JSON, sources included (curves this calibration lacks are left out)."""
        out = {"matmul_curve": [list(p) for p in self.matmul_curve], "vector_flops": self.vector_flops,
               "memory_Bps": self.memory_Bps, "kernel_overhead_s": self.kernel_overhead_s,
               "intra_efficiency": self.intra_efficiency, "inter_efficiency": self.inter_efficiency,
               "intra_latency_s": self.intra_latency_s, "inter_latency_s": self.inter_latency_s,
               "memory_overlap": self.memory_overlap}
        out.update({name: [list(p) for p in getattr(self, name)] for name in _OPTIONAL_CURVES
                    if getattr(self, name) is not None})
        if self.sms is not None:
            out["sms"] = self.sms
        if self.attention_shapes is not None:
            out["attention_shapes"] = [[q, v, w, [list(p) for p in points]] for q, v, w, points in self.attention_shapes]
        out["sources"] = dict(self.sources)
        return out

    @classmethod
    def from_dict(cls, data) -> "Efficiency":
        """The calibration :meth:`to_dict` wrote.

        Raises
        ------
        ClusterError
            Not an object, an unknown or missing field, a value of the wrong
            type, or one this class refuses (a fraction above 1, a rate that
            is not positive...), each naming the field.
        """
        if not isinstance(data, dict):
            raise ClusterError(f"an efficiency must be an object of fields, got {type(data).__name__}")
        known = {"matmul_curve", "vector_flops", "memory_Bps", "kernel_overhead_s", "intra_efficiency",
                 "inter_efficiency", "intra_latency_s", "inter_latency_s", "memory_overlap", "sources", "sms",
                 "attention_shapes", *_OPTIONAL_CURVES}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ClusterError(f"unknown efficiency field {unknown[0]!r}; known: {', '.join(sorted(known))}")
        for name in ("matmul_curve", "vector_flops", "memory_Bps"):
            if name not in data:
                raise ClusterError(f"efficiency field {name!r} is missing")
        values = {}
        for name, value in data.items():
            if name == "sources":
                if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                          for k, v in value.items()):
                    raise ClusterError("efficiency field 'sources' must map field names to words")
                values[name] = dict(value)
            elif name == "matmul_curve" or name in _OPTIONAL_CURVES:
                values[name] = value  # checked by _check_curve, naming the field
            elif name == "attention_shapes":
                values[name] = value  # checked by __post_init__, naming the field
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ClusterError(f"efficiency field {name!r} must be a number, got {value!r}")
            elif name == "sms":
                values[name] = value  # checked by __post_init__, naming the field
            else:
                values[name] = float(value)
        return cls(**values)


_OPTIONAL_CURVES = ("fp8_matmul_curve", "matmul_dgrad_curve", "matmul_wgrad_curve", "attention_curve", "attention_backward_curve")


# The largest head-shape factor a calibration may hold: a shape at four times the 128-wide kernels' rate (the
# published ones lie between a tenth and 1.1).
MAX_SHAPE_FACTOR = 4.0


def _check_shapes(shapes) -> ShapeRates:
    """``shapes`` as head-shape rates (:mod:`pase.hardware.attention_kernels`); ``ClusterError`` unless each is two
    whole head widths from 1 to 1,024, whether windowed (true or false), and points of positive, ascending FLOPs
    with factors in (0, ``MAX_SHAPE_FACTOR``]."""
    bad = ClusterError("attention_shapes needs, per head shape, [d_qk, d_v, windowed, [[forward FLOPs, forward "
                       f"factor, backward factor], ...]] with FLOPs ascending and factors in (0, {MAX_SHAPE_FACTOR:g}], "
                       f"got {shapes!r}"[:400])
    try:
        out = []
        for q, v, windowed, points in shapes:
            widths = [w for w in (q, v) if not isinstance(w, bool) and float(w).is_integer() and 1 <= w <= 1024]
            pts = tuple((float(f), float(a), float(b)) for f, a, b in points)
            flops = [f for f, _, _ in pts]
            if len(widths) < 2 or not isinstance(windowed, bool) or not pts or flops != sorted(set(flops)) \
                    or not all(0 < f < math.inf for f in flops) \
                    or not all(0 < x <= MAX_SHAPE_FACTOR for _, a, b in pts for x in (a, b)):
                raise bad
            out.append((int(q), int(v), windowed, pts))
    except (TypeError, ValueError):
        raise bad from None
    return tuple(out)


def _check_curve(name: str, points) -> tuple[tuple[float, float], ...]:
    """``points`` as a tuple of (FLOPs, fraction) floats; ``ClusterError`` naming ``name`` unless the FLOPs are
    positive, finite and strictly ascending and every fraction is in (0, 1]."""
    try:
        curve = tuple((float(f), float(e)) for f, e in points)
    except (TypeError, ValueError):
        raise ClusterError(f"{name} needs points of (FLOPs per kernel, fraction of peak), got {points!r}") from None
    flops = [f for f, _ in curve]
    if not curve or any(not (0 < f < math.inf) for f in flops) or flops != sorted(set(flops)):
        raise ClusterError(f"{name} needs points of ascending, positive FLOPs per kernel, got {curve}")
    if any(not 0 < e <= 1 for _, e in curve):
        raise ClusterError(f"{name} fractions of peak must be in (0, 1], got {curve}")
    return curve


def curve_fraction(curve: Sequence[tuple[float, float]], flops) -> np.ndarray:
    """A curve's fraction of peak at ``flops`` FLOPs per kernel: interpolated in log FLOPs, flat beyond the ends
    (array in, array out)."""
    f = np.log10(np.maximum(np.asarray(flops, dtype=float), 1.0))
    return np.interp(f, np.log10([p for p, _ in curve]), [e for _, e in curve])


def derated(efficiency: Efficiency, memory_Bps: float, source: str) -> Efficiency:
    """``efficiency`` carried to another memory system of the same GPU: the same figures, its memory bandwidth at
    ``memory_Bps`` (the reference's achieved fraction of the other's published bandwidth, ``source``)."""
    sources = {**efficiency.sources, "memory_Bps": f"the same achieved fraction of {source}"}
    return replace(efficiency, memory_Bps=memory_Bps, sources=sources)


_CALCULON = "Calculon (calculon-ai/calculon) A100 system file, as summarised in published-measurements.md"

# A100 SXM 80 GB as the open-source calculator Calculon models it (its published validation
# reaches 3.65% mean error on Korthikanti et al.'s Table 5).
CALCULON_A100 = Efficiency(
    matmul_curve=((1e9, 0.60), (16e9, 0.90), (128e9, 0.95)),
    vector_flops=78e12,
    memory_Bps=2048e9,
    kernel_overhead_s=5e-6,
    intra_efficiency=0.65,
    inter_efficiency=0.90,
    intra_latency_s=5e-6,
    inter_latency_s=10e-6,
    sources={
        "matmul_curve": f"{_CALCULON}: 95% of peak at 128 GFLOP per kernel and above, 90% at 16, 60% at 1",
        "vector_flops": f"{_CALCULON}: vector operations at 78 TFLOP/s",
        "memory_Bps": f"{_CALCULON}: HBM at 2,048 GB/s",
        "kernel_overhead_s": "assumed: 5 us per kernel launch and tail, a typical CUDA figure",
        "intra_efficiency": f"{_CALCULON}: NVLink at 65% of nominal in collectives",
        "inter_efficiency": f"{_CALCULON}: InfiniBand at 90% of nominal",
        "intra_latency_s": "assumed: 5 us per collective step inside a node (NCCL over NVLink)",
        "inter_latency_s": "assumed: 10 us per collective step between nodes (NCCL over InfiniBand)",
    },
)

A100_HBM_BPS = 2039e9  # A100 SXM 80 GB: published HBM2e bandwidth
# The best bf16 matrix product measured on an A100 SXM: 267.9 of its 312 TFLOP/s (shape 6912 x 16384 x 2048,
# CUDA 12.1; S. Bekman, ml-engineering, compute/accelerator, "Maximum Achievable Matmul FLOPS comparison table").
A100_MAMF_FRACTION = 267.9 / 312
_MAMF = ("the best bf16 matrix product measured on an A100 SXM, 267.9 of 312 TFLOP/s (ml-engineering's "
         "\"maximum achievable matmul FLOPS\" table, CUDA 12.1)")
# The A100's matrix-product curve from published kernel figures, fixed before any step time is scored: Calculon's
# published A100 curve (60%, 90%, 95% of peak at 1, 16 and 128 GFLOP per kernel) has the size dependence, but its
# top is above any A100 product measured, so its points are scaled by the measured best over Calculon's 95%.
A100_KERNEL_CURVE = tuple((f, e * A100_MAMF_FRACTION / 0.95) for f, e in ((1e9, 0.60), (16e9, 0.90), (128e9, 0.95)))
_FITTED = "fitted to Korthikanti Table 5 and Megatron Table 1 (benchmarks/fit_calibration.py)"
_FA2 = ("FlashAttention-2's published A100 80 GB benchmarks (Dao, \"FlashAttention-2\", arXiv 2307.08691, "
        "section 4.1)")

# A100 SXM 80 GB: Calculon's figures, the matrix curve from published kernel figures (A100_KERNEL_CURVE), and
# three figures no A100 kernel source here gives fitted to the published runs (benchmarks/validate_published.py):
# the HBM fraction, NVLink's efficiency, the compute/memory overlap; the rest Calculon's or assumed as in
# CALCULON_A100. Fitted with the roofline's fused element-wise chains, sequence parallelism's backward re-gather
# and, in Table 5's runs (the Megatron-LM of 2022), the asynchronous tensor-parallel backward priced
# (pase.model.roofline, pase.model.training.layer_times). Each table predicted by the same method fitted to the
# other alone: BENCHMARKS.md, "The A100 calibration out of sample".
A100_FITTED = Efficiency(
    matmul_curve=A100_KERNEL_CURVE,
    vector_flops=78e12,
    memory_Bps=0.6811 * A100_HBM_BPS,
    kernel_overhead_s=5e-6,
    intra_efficiency=0.6397,
    inter_efficiency=0.90,
    intra_latency_s=5e-6,
    inter_latency_s=10e-6,
    memory_overlap=0.0118,
    sources={
        "matmul_curve": f"published kernel figures, not fitted: Calculon's A100 curve (60/90/95% of peak at 1, 16 "
                        f"and 128 GFLOP per kernel) scaled so that its top is {_MAMF}: 54%, 81%, 86%; the HBM "
                        f"fraction, NVLink's efficiency and the compute/memory overlap {_FITTED}",
        "vector_flops": f"{_CALCULON}: vector operations at 78 TFLOP/s",
        "memory_Bps": f"{_FITTED}: the achieved fraction of the published 2,039 GB/s",
        "kernel_overhead_s": "assumed: 5 us per kernel launch and tail, a typical CUDA figure",
        "intra_efficiency": f"{_FITTED}: NVLink's fraction of nominal in collectives (Calculon's 65% the start)",
        "inter_efficiency": f"{_CALCULON}: InfiniBand at 90% of nominal",
        "intra_latency_s": "assumed: 5 us per collective step inside a node (NCCL over NVLink)",
        "inter_latency_s": "assumed: 10 us per collective step between nodes (NCCL over InfiniBand)",
        "memory_overlap": f"{_FITTED}: the fraction of the shorter of a kernel's compute and memory times "
                          "hidden behind the longer (1: the roofline; Calculon's A100 file sums them, 0)",
        "attention_curve": f"{_FA2}: the forward at 50% to 73% of the A100's peak from sequence 512 to 16k (batch "
                           "x sequence 16k, 16 heads of 128: 68.7 GFLOP to 2.2 TFLOP per kernel); not fitted",
        "attention_backward_curve": "the forward's fractions times 0.75, the backward-to-forward rate ratio "
                                    "measured on one H200 (0.68 to 0.79, measurements/h200-kernels.json), carried "
                                    "to the A100; an assumption, not measured on it",
    },
    attention_curve=((68.7e9, 0.50), (2.2e12, 0.73)),
    attention_backward_curve=((68.7e9, 0.50 * 0.75), (2.2e12, 0.73 * 0.75)),
)


# The paper's nodes (paper-1080ti, paper-2080ti) train in fp32 on the CUDA cores: Pascal has no tensor
# cores and the 2080 Ti's run fp16, not fp32, so matrix and vector kernels share one fp32 peak.
GTX1080TI_FP32_FLOPS = 11.3e12  # published spec: 3,584 CUDA cores x 2 x 1,582 MHz boost
GTX1080TI_MEMORY_BPS = 484e9  # published spec: 11 GB GDDR5X, 352-bit at 11 Gb/s
RTX2080TI_FP32_FLOPS = 13.4e12  # published spec: 4,352 CUDA cores x 2 x 1,545 MHz boost (reference card)
RTX2080TI_MEMORY_BPS = 616e9  # published spec: 11 GB GDDR6, 352-bit at 14 Gb/s

_DEEPBENCH = ("DeepBench's published GTX 1080 Ti training results (baidu-research/DeepBench, "
              "results/train/DeepBench_NV_1080Ti.xlsx; CUDA 8, cuDNN 6, NCCL 2.0, one 8-GPU PCIe node)")
_A100_CARRIED = "carried over from the A100 fit (A100_FITTED), not measured on this GPU"

# GTX 1080 Ti nodes: kernels and the PCIe ring from DeepBench's measurements, the rest carried over.
# The matrix curve is three of DeepBench's SGEMM results as fractions of the 11.3 TFLOP/s peak:
# 1760 x 32 x 1760 (0.198 GFLOP) at 5.08 TFLOP/s, 2048 x 128 x 2048 (1.07 GFLOP) at 7.84,
# 1760 x 7000 x 1760 (43.4 GFLOP) at 10.89. Its 77 untransposed SGEMMs lie a median 0.04 of peak from
# the curve; with a transposed operand they run a median 0.12 below it, and 16-column products at
# about 0.15 of peak, far below it.
# DeepBench's convolutions are not used: cuDNN's Winograd and FFT kernels count direct-convolution
# FLOPs and so report more than the peak, a fraction this model cannot hold.
# The ring: DeepBench's seven NCCL all-reduces on 8 GPUs (400 KB to 258 MB) fit 2 (n - 1) / n M /
# (0.73 x 12 GB/s) + 2 (n - 1) x 4.9 us within 1.5%; 12 GB/s is the preset's peer-to-peer PCIe 3.0 x16
# figure. DeepBench's node (one Xeon E5-2690 v4 on an ASUS X99-E WS board: one PCIe root) need not be
# wired as the paper's nodes are.
GTX1080TI_FP32 = Efficiency(
    matmul_curve=((0.198e9, 5.08e12 / GTX1080TI_FP32_FLOPS), (1.07e9, 7.84e12 / GTX1080TI_FP32_FLOPS),
                  (43.4e9, 10.89e12 / GTX1080TI_FP32_FLOPS)),
    vector_flops=GTX1080TI_FP32_FLOPS,
    memory_Bps=A100_FITTED.memory_Bps / A100_HBM_BPS * GTX1080TI_MEMORY_BPS,
    kernel_overhead_s=A100_FITTED.kernel_overhead_s,
    intra_efficiency=0.73,
    inter_efficiency=A100_FITTED.inter_efficiency,
    intra_latency_s=4.9e-6,
    inter_latency_s=A100_FITTED.inter_latency_s,
    memory_overlap=A100_FITTED.memory_overlap,
    sources={
        "matmul_curve": f"{_DEEPBENCH}: SGEMM at 45%, 69% and 96% of the 11.3 TFLOP/s fp32 peak at 0.198, 1.07 "
                        "and 43.4 GFLOP per kernel",
        "vector_flops": "published spec: the 11.3 TFLOP/s fp32 peak (no tensor cores; every kernel on the CUDA cores)",
        "memory_Bps": f"the published 484 GB/s GDDR5X at the A100 fit's achieved fraction ({_A100_CARRIED})",
        "kernel_overhead_s": f"assumed 5 us per kernel launch and tail, a typical CUDA figure ({_A100_CARRIED})",
        "intra_efficiency": f"{_DEEPBENCH}: NCCL all-reduce on 8 GPUs, 73% of the 12 GB/s peer-to-peer PCIe link "
                            "(fitted with the latency, within 1.5% from 400 KB to 258 MB)",
        "inter_efficiency": f"Calculon's 90% of nominal InfiniBand ({_A100_CARRIED})",
        "intra_latency_s": f"{_DEEPBENCH}: 4.9 us per ring step, fitted with the efficiency",
        "inter_latency_s": f"assumed 10 us per collective step between nodes ({_A100_CARRIED})",
        "memory_overlap": f"the fraction of the shorter of compute and memory time hidden ({_A100_CARRIED})",
    },
)

# RTX 2080 Ti nodes: no DeepBench training results exist for Turing, so the 1080 Ti's measured matrix curve
# and ring efficiency are carried over; the peak, the memory and the link latency change. Without
# peer-to-peer every ring step is two PCIe copies through host memory (the preset's 6 GB/s), so its latency
# is taken as twice the 1080 Ti's measured one.
RTX2080TI_FP32 = replace(
    GTX1080TI_FP32,
    vector_flops=RTX2080TI_FP32_FLOPS,
    memory_Bps=A100_FITTED.memory_Bps / A100_HBM_BPS * RTX2080TI_MEMORY_BPS,
    intra_latency_s=2 * GTX1080TI_FP32.intra_latency_s,
    sources={
        **GTX1080TI_FP32.sources,
        "matmul_curve": f"the GTX 1080 Ti's curve as fractions of peak ({_DEEPBENCH}): assumed for Turing, "
                        "not measured on it",
        "vector_flops": "published spec: the 13.4 TFLOP/s fp32 peak (fp32 does not run on the tensor cores)",
        "memory_Bps": f"the published 616 GB/s GDDR6 at the A100 fit's achieved fraction ({_A100_CARRIED})",
        "intra_efficiency": "the GTX 1080 Ti's 73% NCCL ring efficiency (DeepBench), assumed for the host-staged "
                            "6 GB/s link; not measured on these nodes",
        "intra_latency_s": "assumed: twice the GTX 1080 Ti's measured 4.9 us per ring step (DeepBench), as "
                           "each step is two PCIe copies through host memory without peer-to-peer",
    },
)
