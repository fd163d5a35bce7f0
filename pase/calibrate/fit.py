"""Fit a calibration (:class:`~pase.hardware.efficiency.Efficiency`) to kernel and collective timings.

The timings are rows in the format of ``pase/hardware/data/h200-kernels.json``
(what ``pase calibrate`` writes too; :data:`SECTIONS`): matrix products in
BF16 (``gemm_bf16``: ``m, n, k, flops, fwd_s, dgrad_s, wgrad_s``) and FP8
(``gemm_fp8``: ``m, n, k, flops, s``), fused causal attention (``attention``:
``b, hq, hkv, s, d, fwd_flops, fwd_s, fwd_bwd_s``), memory-bound kernels
(``memory_bound``: ``kind, m, h, bytes, s``) and, from two or more GPUs, NCCL
collectives (``collectives``: ``op, ranks, scope, bytes, s``). Seconds per
call, each the median of CUDA-event timings.

Every figure is fitted to the kernels that measure it, under the kernel time
:mod:`pase.model.roofline` prices::

    max(C, M) + (1 - memory_overlap) min(C, M) + kernel_overhead_s,   C = FLOPs / rate,  M = bytes / memory_Bps

* ``memory_Bps`` and ``kernel_overhead_s``: copies (``C = 0``), least squares
  of ``t = bytes / memory_Bps + overhead`` weighted by ``1 / t`` (relative
  errors);
* each fraction-of-peak curve (forward, input-gradient and weight-gradient
  products, FP8 products, attention forward and backward): its values at
  fixed FLOP anchors (:func:`anchors`), the curve piecewise linear in log
  FLOPs between them as :func:`~pase.hardware.efficiency.curve_fraction`
  reads it, fitted by least squares of log time (Gauss-Newton with a
  Levenberg-Marquardt damping, fractions kept in (0, 1]);
* the attention curves from the rows whose heads are 128 wide where there
  are some, and the other head shapes' rates relative to them
  (``attention_shapes``, :func:`pase.hardware.attention_kernels.relative_rates`:
  DeepSeek-V3's MLA rows of ``pase calibrate``);
* ``vector_flops``: RMSNorm forward and forward-plus-backward kernels, as
  :mod:`pase.ops.norm` counts their FLOPs (4 and 13 per element) and the
  roofline their bytes (input and output; the backward one and a half times
  the forward's), least squares of log time: the rate a normalisation's
  counted FLOPs run at, well below the CUDA cores' peak, since a row reduction
  is neither bound by its FLOPs nor by a copy's bandwidth;
* links (``intra``/``inter`` efficiency and latency): each scope's collectives,
  least squares of ``t = steps x latency + bus bytes / bus bandwidth`` with
  :mod:`pase.hardware.mesh`'s steps and bytes (a reduce-scatter, all-gather or
  all-to-all of ``M`` bytes among ``k`` ranks: ``k - 1`` steps and
  ``(k - 1) / k M`` bytes; an all-reduce twice both), the bus bandwidth kept
  as measured (:attr:`LinkFit.bus_Bps`): its fraction of a link's nominal
  bandwidth depends on the cluster it is applied to.

``memory_overlap`` is not fitted: the matrix products are bound by their
FLOPs and the memory-bound kernels do few, so no row separates it; the
calibration takes 1, the roofline, and says so.

The ``add``, ``swiglu_fwd`` and ``cross_entropy_fwd_bwd`` rows are compared
(:func:`residuals`) but not fitted: their kernels are not the ones pase's
model prices (an unfused three-kernel SwiGLU, a cross-entropy upcast to FP32 in
several kernels; the H200 file's adds move their stated bytes faster than the
HBM's peak, so they cannot be single passes over three distinct tensors).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from pase.errors import ClusterError
from pase.hardware.calibration import Calibration
from pase.hardware.attention_kernels import (REFERENCE_WIDTH, measured_shapes, relative_rates, shape_factor,
                                             shape_name)
from pase.hardware.efficiency import Efficiency, curve_fraction
from pase.ops.norm import RMS_NORM_FLOPS_PER_ELEMENT, RMS_NORM_FORWARD_FLOPS

__all__ = ["SECTIONS", "FitResult", "LinkFit", "anchors", "fit_curve", "fit_memory", "fit_vector_flops",
           "fit_links", "fit_efficiency", "kernel_s", "launch_cases", "residuals", "summary", "calibrate",
           "attention_rows", "ATTENTION_BACKENDS"]

# The row sections a measurement file may hold, each with the columns the fit reads.
SECTIONS = {
    "gemm_bf16": ("m", "n", "k", "flops", "fwd_s", "dgrad_s", "wgrad_s"),
    "gemm_fp8": ("m", "n", "k", "flops", "s"),
    "attention": ("b", "hq", "hkv", "s", "d", "fwd_flops", "fwd_s", "fwd_bwd_s"),
    "memory_bound": ("kind", "m", "h", "bytes", "s"),
    "collectives": ("op", "ranks", "scope", "bytes", "s"),
    "launch": ("case", "dtype", "kernels", "alone_s", "stream_s", "gpu_s", "host_s"),
}
BF16_BYTES = 2
FP8_BYTES = 1
# A fused attention backward does 2.5 times its forward's FLOPs (the measurement files count fwd + bwd at 3.5x).
ATTENTION_BACKWARD_FLOPS = 2.5
# The fused attention the fit prices by: cuDNN's where measured (Transformer Engine, which Megatron-Core and NeMo
# train with, runs cuDNN's fused attention on Hopper and Blackwell), else FlashAttention's (a row without a
# "backend" is torch's flash backend, as the files before pase recorded one were timed).
ATTENTION_BACKENDS = ("cudnn", "flash")
# The memory overlap every fit assumes (the roofline); see the module docstring.
MEMORY_OVERLAP = 1.0
# Bytes a normalisation row's kernels touch, in units of one (m, h) BF16 tensor, and their kernel counts.
_NORM_ROWS = {"rmsnorm_fwd": (RMS_NORM_FORWARD_FLOPS, ((RMS_NORM_FORWARD_FLOPS, 2.0),)),
              "rmsnorm_fwd_bwd": (RMS_NORM_FLOPS_PER_ELEMENT,
                                  ((RMS_NORM_FORWARD_FLOPS, 2.0),
                                   (RMS_NORM_FLOPS_PER_ELEMENT - RMS_NORM_FORWARD_FLOPS, 3.0)))}
_COLLECTIVE_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}
_MIN_FRACTION = 1e-4


def kernel_s(flops, nbytes, rate_flops, memory_Bps: float, overhead_s: float,
             overlap: float = MEMORY_OVERLAP) -> np.ndarray:
    """Seconds of kernels of ``flops`` FLOPs at ``rate_flops`` FLOP/s moving ``nbytes`` bytes at ``memory_Bps``
    bytes/s, each paying ``overhead_s`` seconds (the roofline's kernel time, the module docstring)."""
    compute = np.asarray(flops, dtype=float) / np.asarray(rate_flops, dtype=float)
    memory = np.asarray(nbytes, dtype=float) / memory_Bps
    return np.maximum(compute, memory) + (1.0 - overlap) * np.minimum(compute, memory) + overhead_s


def anchors(flops: Sequence[float]) -> tuple[float, ...]:
    """FLOP anchors of a fitted curve: the decades and half decades within a quarter of a decade of some
    kernel's FLOPs, so that every anchor's value is held by kernels near it.

    A kernel beyond the last anchor (or before the first) reads the curve's flat end, as the model does.
    """
    logs = np.log10(np.asarray(flops, dtype=float))
    grid = np.arange(math.floor(2 * logs.min()), math.ceil(2 * logs.max()) + 1) / 2
    return tuple(float(10 ** g) for g in grid if np.any(np.abs(logs - g) <= 0.25))


def fit_curve(flops, nbytes, times_s, peak_flops: float, memory_Bps: float, overhead_s: float, *,
              kernels=1, points: Sequence[float] | None = None) -> tuple[tuple[float, float], ...]:
    """The fraction-of-peak curve that best reproduces ``times_s`` (least squares of log time).

    Row ``i`` is ``kernels[i]`` kernels of ``flops[i]`` FLOPs and ``nbytes[i]``
    bytes each together taking ``times_s[i]`` seconds, each kernel's rate
    ``peak_flops`` times the curve's fraction at its FLOPs. ``points``: the
    FLOP anchors (default :func:`anchors`). Returns the curve, (FLOPs,
    fraction) pairs.

    Raises
    ------
    ClusterError
        No rows, or a time or FLOP count that is not positive.
    """
    f = np.asarray(flops, dtype=float)
    b = np.broadcast_to(np.asarray(nbytes, dtype=float), f.shape)
    t = np.asarray(times_s, dtype=float)
    n = np.broadcast_to(np.asarray(kernels, dtype=float), f.shape)
    if f.size == 0 or not (np.all(f > 0) and np.all(t > 0)):
        raise ClusterError("a curve needs rows of positive FLOPs and seconds")
    xs = tuple(points) if points is not None else anchors(f)
    log_t = np.log(t)

    def model(y):
        return np.log(n * kernel_s(f, b, peak_flops * curve_fraction(tuple(zip(xs, y)), f), memory_Bps, overhead_s))

    # The starting fractions: each row's own achieved fraction after the overhead, averaged near each anchor.
    achieved = np.clip(f / np.maximum(t / n - overhead_s, 1e-9) / peak_flops, _MIN_FRACTION, 1.0)
    y = np.array([np.exp(np.mean(np.log(achieved[np.argsort(np.abs(np.log(f / x)))[:3]]))) for x in xs])
    y = _least_squares(model, log_t, y)
    return tuple((float(x), float(v)) for x, v in zip(xs, y))


def _least_squares(model, target: np.ndarray, y: np.ndarray, iterations: int = 200) -> np.ndarray:
    """``y`` (fractions in (0, 1]) minimising ``sum (model(y) - target)^2``: Levenberg-Marquardt on log ``y``
    with a forward-difference Jacobian (the curves have a few parameters and a few hundred rows)."""
    u, damping, h = np.log(y), 1e-3, 1e-6
    cost = float(np.sum((model(np.exp(u)) - target) ** 2))
    for _ in range(iterations):
        now = model(np.exp(u))
        r = now - target
        # The derivative may look just past a fraction of 1: the model reads it as a rate above the peak.
        jac = np.stack([(model(np.exp(u + h * np.eye(len(u))[j])) - now) / h for j in range(len(u))], axis=1)
        normal, gradient = jac.T @ jac, jac.T @ r
        while True:
            step = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), gradient)
            trial = np.clip(u - step, math.log(_MIN_FRACTION), 0.0)
            trial_cost = float(np.sum((model(np.exp(trial)) - target) ** 2))
            if trial_cost <= cost or damping > 1e8:
                break
            damping *= 10
        if trial_cost > cost:
            break
        improved = cost - trial_cost
        u, cost, damping = trial, trial_cost, max(damping / 10, 1e-9)
        if improved <= 1e-12 * max(cost, 1e-30):
            break
    return np.exp(u)


def fit_memory(rows: Sequence[Mapping]) -> tuple[float, float]:
    """``(memory_Bps, kernel_overhead_s)`` from ``copy`` rows of a ``memory_bound`` section: least squares of
    ``t = bytes / memory_Bps + overhead`` weighted by ``1 / t``.

    Raises
    ------
    ClusterError
        Fewer than two copies of different sizes, or a fit that is not physical (a bandwidth that is not
        positive; a negative overhead is read as none, refitting the bandwidth alone).
    """
    copies = [r for r in rows if r["kind"] == "copy"]
    nbytes = np.array([float(r["bytes"]) for r in copies])
    t = np.array([float(r["s"]) for r in copies])
    if len(set(nbytes)) < 2:
        raise ClusterError("fitting the memory bandwidth needs copies of at least two sizes (memory_bound rows "
                           "of kind 'copy')")
    a = np.stack([nbytes, np.ones_like(nbytes)], axis=1) / t[:, None]
    (per_byte, overhead), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if overhead < 0:
        per_byte, overhead = float(np.sum(nbytes / t) / np.sum((nbytes / t) ** 2)), 0.0
    if not per_byte > 0:
        raise ClusterError(f"the copies do not fit a positive memory bandwidth (seconds per byte {per_byte!r})")
    return 1.0 / float(per_byte), float(overhead)


def fit_vector_flops(rows: Sequence[Mapping], memory_Bps: float, overhead_s: float) -> float:
    """``vector_flops`` from the normalisation rows of a ``memory_bound`` section (the module docstring): the
    one rate minimising the squared log-time errors (a golden-section search over 1e9 .. 1e16 FLOP/s).

    Raises
    ------
    ClusterError
        No ``rmsnorm_fwd`` or ``rmsnorm_fwd_bwd`` row.
    """
    norms = [r for r in rows if r["kind"] in _NORM_ROWS]
    if not norms:
        raise ClusterError("fitting the vector rate needs normalisation rows (memory_bound kinds "
                           f"{', '.join(_NORM_ROWS)})")

    def cost(log_rate: float) -> float:
        return sum((math.log(_norm_s(r, 10 ** log_rate, memory_Bps, overhead_s)) - math.log(r["s"])) ** 2
                   for r in norms)

    low, high = 9.0, 16.0
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        a, b = high - ratio * (high - low), low + ratio * (high - low)
        if cost(a) <= cost(b):  # on a memory-bound plateau, toward the slower rate that first leaves it
            high = b
        else:
            low = a
    return float(10 ** ((low + high) / 2))


def _norm_s(row: Mapping, vector_flops: float, memory_Bps: float, overhead_s: float) -> float:
    """Seconds the model gives a normalisation row: its kernels' FLOPs and bytes per element (``_NORM_ROWS``)."""
    elements = float(row["m"]) * float(row["h"])
    return float(sum(kernel_s(per * elements, tensors * elements * BF16_BYTES, vector_flops, memory_Bps, overhead_s)
                     for per, tensors in _NORM_ROWS[row["kind"]][1]))


@dataclass(frozen=True)
class LinkFit:
    """A link class's collectives fitted: ``bus_Bps`` (bytes/s, nccl-tests' bus bandwidth) and ``latency_s`` per
    collective step, from ``rows`` collectives of ``ranks`` ranks."""

    bus_Bps: float
    latency_s: float
    rows: int
    ranks: tuple[int, ...]


def fit_links(rows: Sequence[Mapping]) -> dict[str, LinkFit]:
    """Each scope's (``"intra"``, ``"inter"``) :class:`LinkFit` from ``collectives`` rows (the module docstring).

    A scope with fewer than two message sizes is left out. Raises ``ClusterError`` for an unknown collective.
    """
    out = {}
    for scope in ("intra", "inter"):
        mine = [r for r in rows if r["scope"] == scope and int(r["ranks"]) > 1]
        if len({float(r["bytes"]) for r in mine}) < 2:
            continue
        steps, bus, t = [], [], []
        for r in mine:
            if r["op"] not in _COLLECTIVE_FACTOR:
                raise ClusterError(f"collectives: unknown op {r['op']!r}; known: {', '.join(_COLLECTIVE_FACTOR)}")
            k, factor = int(r["ranks"]), _COLLECTIVE_FACTOR[r["op"]]
            steps.append(factor * (k - 1))
            bus.append(factor * (k - 1) / k * float(r["bytes"]))
            t.append(float(r["s"]))
        steps, bus, t = np.array(steps), np.array(bus), np.array(t)
        a = np.stack([steps, bus], axis=1) / t[:, None]
        (latency, per_byte), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        if latency < 0:
            latency, per_byte = 0.0, float(np.sum(bus / t) / np.sum((bus / t) ** 2))
        if per_byte > 0:
            out[scope] = LinkFit(1.0 / float(per_byte), float(latency), len(mine),
                                 tuple(sorted({int(r["ranks"]) for r in mine})))
    return out


@dataclass(frozen=True)
class FitResult:
    """What :func:`fit_efficiency` fitted: the calibration, the measured links and each row's fitted time.

    ``rows``: section -> list of ``(label, measured_s, fitted_s)``; ``excluded``: section -> why rows of it
    were compared but not fitted.
    """

    efficiency: Efficiency
    links: dict[str, LinkFit]
    rows: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)
    launch: list[dict] = field(default_factory=list)

    def errors(self, section: str) -> np.ndarray:
        """Relative errors ``fitted / measured - 1`` of a section's fitted rows."""
        return np.array([fit / meas - 1 for _, meas, fit in self.rows.get(section, [])])


def attention_rows(measurements: Mapping) -> tuple[list[dict], str | None]:
    """The attention rows the fit uses and their backend: the first of :data:`ATTENTION_BACKENDS` measured."""
    rows = _rows(measurements, "attention")
    for backend in ATTENTION_BACKENDS:
        chosen = [r for r in rows if r.get("backend", "flash") == backend]
        if chosen:
            return chosen, backend
    return [], None


def _rows(measurements: Mapping, section: str) -> list[dict]:
    """A section's rows, each checked to hold its columns (``ClusterError`` naming the section and column)."""
    part = measurements.get(section)
    if part is None:
        return []
    rows = part.get("rows") if isinstance(part, Mapping) else None
    if not isinstance(rows, list):
        raise ClusterError(f"measurements: {section} needs a list of rows")
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ClusterError(f"measurements: {section} row {i} is not an object")
        for col in SECTIONS[section]:
            v = r.get(col)
            if col in ("kind", "op", "scope", "case", "dtype"):
                if not isinstance(v, str):
                    raise ClusterError(f"measurements: {section} row {i} needs {col} (a name)")
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
                raise ClusterError(f"measurements: {section} row {i}: {col} must be a positive number, got {v!r}")
    return [dict(r) for r in rows]


def _gemm_bytes(r: Mapping, element_bytes: int) -> float:
    """Bytes a product of ``x (m, k)``, ``W (n, k)`` and ``y (m, n)`` moves: each operand once (as the roofline)."""
    m, n, k = float(r["m"]), float(r["n"]), float(r["k"])
    return (m * k + n * k + m * n) * element_bytes


def _attention_bytes(r: Mapping) -> tuple[float, float]:
    """Forward and backward bytes of a fused attention kernel: q, k, v and o once forward; those and the output's,
    q's, k's and v's gradients backward (BF16). v and o have ``dv`` elements a head where a row gives one (MLA's
    192-wide queries and keys, 128-wide values), else ``d``."""
    b, s, d = float(r["b"]), float(r["s"]), float(r["d"])
    dv = float(r.get("dv", d))
    q, o = b * float(r["hq"]) * s * d * BF16_BYTES, b * float(r["hq"]) * s * dv * BF16_BYTES
    k, v = b * float(r["hkv"]) * s * d * BF16_BYTES, b * float(r["hkv"]) * s * dv * BF16_BYTES
    forward = q + k + v + o
    return forward, 2 * forward


def fit_efficiency(measurements: Mapping, peak_flops: float, fp8_peak_flops: float | None = None, *,
                   source: str) -> FitResult:
    """The calibration ``measurements`` (sections of :data:`SECTIONS`) imply on a device of ``peak_flops`` BF16
    (and ``fp8_peak_flops`` FP8) dense FLOP/s.

    ``source`` names the measurements (file, date, machine) in every fitted
    figure's :attr:`~pase.hardware.efficiency.Efficiency.sources`. Curves
    without rows are left out (the calibration then runs those kernels on the
    forward matrix curve); link figures are left at their defaults and
    returned measured in :attr:`FitResult.links`.

    Raises
    ------
    ClusterError
        No BF16 matrix products, no copies of two sizes, no normalisation
        rows, FP8 rows without an FP8 peak, or a malformed row (named).
    """
    gemm, fp8 = _rows(measurements, "gemm_bf16"), _rows(measurements, "gemm_fp8")
    (attention, backend), memory = attention_rows(measurements), _rows(measurements, "memory_bound")
    collectives = _rows(measurements, "collectives")
    if not gemm:
        raise ClusterError("measurements: no gemm_bf16 rows; the matrix curve needs them")
    if fp8 and fp8_peak_flops is None:
        raise ClusterError("measurements: gemm_fp8 rows need the device's FP8 peak (fp8_peak_flops)")
    memory_Bps, overhead_s = fit_memory(memory)
    vector = fit_vector_flops(memory, memory_Bps, overhead_s)
    how = "least squares of log time at fixed FLOP anchors (pase.calibrate.fit)"
    sources = {
        "memory_Bps": f"fitted (pase.calibrate.fit) to the copies of {source}: least squares of bytes / bandwidth + overhead",
        "kernel_overhead_s": f"fitted with memory_Bps to the copies of {source}",
        "vector_flops": f"fitted to the RMSNorm rows of {source} (their counted FLOPs' rate; least squares of log "
                        "time)",
        "memory_overlap": "assumed: 1, the roofline (the measured kernels are bound by their FLOPs or by their "
                          "bytes, so no row separates it)",
    }
    gemm_bytes = np.array([_gemm_bytes(r, BF16_BYTES) for r in gemm])
    gemm_flops = np.array([r["flops"] for r in gemm], dtype=float)
    curves = {}
    for name, col in (("matmul_curve", "fwd_s"), ("matmul_dgrad_curve", "dgrad_s"), ("matmul_wgrad_curve", "wgrad_s")):
        curves[name] = fit_curve(gemm_flops, gemm_bytes, [r[col] for r in gemm], peak_flops, memory_Bps, overhead_s)
        sources[name] = f"fitted to the BF16 products' {col} of {source}: {how}"
    if fp8:
        curves["fp8_matmul_curve"] = fit_curve([r["flops"] for r in fp8], [_gemm_bytes(r, FP8_BYTES) for r in fp8],
                                               [r["s"] for r in fp8], fp8_peak_flops, memory_Bps, overhead_s)
        sources["fp8_matmul_curve"] = f"fitted to the FP8 products (fractions of the FP8 peak) of {source}: {how}"
    shapes = None
    if attention:
        if any(r["fwd_bwd_s"] <= r["fwd_s"] for r in attention):
            raise ClusterError("measurements: an attention row's fwd_bwd_s is not above its fwd_s")
        # The curves from the 128-wide rows where there are some; the other head shapes as rates relative to them
        # (pase.hardware.attention_kernels), as the model prices them.
        widths = [dict(d_qk=r["d"], d_v=r.get("dv", r["d"]), flops=r["fwd_flops"], fwd_s=r["fwd_s"],
                       bwd_s=r["fwd_bwd_s"] - r["fwd_s"]) for r in attention]
        shapes = relative_rates(widths) or None
        reference = [r for r, w in zip(attention, widths) if w["d_qk"] == w["d_v"] == REFERENCE_WIDTH] if shapes \
            else attention
        fwd_flops = np.array([r["fwd_flops"] for r in reference], dtype=float)
        fwd_b, bwd_b = np.array([_attention_bytes(r) for r in reference]).T
        bwd_s = np.array([r["fwd_bwd_s"] - r["fwd_s"] for r in reference])
        curves["attention_curve"] = fit_curve(fwd_flops, fwd_b, [r["fwd_s"] for r in reference], peak_flops,
                                              memory_Bps, overhead_s)
        curves["attention_backward_curve"] = fit_curve(ATTENTION_BACKWARD_FLOPS * fwd_flops, bwd_b, bwd_s,
                                                       peak_flops, memory_Bps, overhead_s)
        kernel = {"cudnn": "cuDNN's fused attention (as Transformer Engine runs it)",
                  "flash": "FlashAttention's fused attention (torch's flash backend)"}[backend]
        heads = "the 128-wide heads' " if shapes else "the "
        sources["attention_curve"] = f"fitted to {heads}forwards of {kernel} of {source}: {how}"
        sources["attention_backward_curve"] = (f"fitted to {heads}backwards (fwd_bwd_s - fwd_s, "
                                               f"{ATTENTION_BACKWARD_FLOPS:g}x the forward's FLOPs) of {kernel} of "
                                               f"{source}: {how}")
        if shapes:
            named = ", ".join(shape_name(shape) for shape in measured_shapes(shapes))
            sources["attention_shapes"] = (f"measured: the rates of {named} over the 128-wide heads' at "
                                           f"the same FLOPs, {kernel} of {source} (pase.hardware.attention_kernels)")
    sms = measurements.get("sms")
    if sms is not None:
        sources["sms"] = f"measured: the multiprocessor count CUDA reports, {source}"
    efficiency = Efficiency(vector_flops=vector, memory_Bps=memory_Bps, kernel_overhead_s=overhead_s,
                            memory_overlap=MEMORY_OVERLAP, sources=sources, sms=sms, attention_shapes=shapes,
                            **curves)
    links = fit_links(collectives)
    result = FitResult(efficiency, links)
    result.rows.update(residuals(measurements, efficiency, peak_flops, fp8_peak_flops))
    result.excluded.update(_EXCLUDED)
    result.launch.extend(launch_cases(measurements, efficiency, peak_flops, fp8_peak_flops))
    return result


def launch_cases(measurements: Mapping, efficiency: Efficiency, peak_flops: float,
                 fp8_peak_flops: float | None = None) -> list[dict]:
    """The ``launch`` rows per kernel, with what ``efficiency`` prices each kernel at (``model_s``).

    Each: ``case``, ``kernels``, and seconds per kernel ``alone_s``, ``gpu_s``,
    ``stream_s``, ``host_s`` (``graph_s`` where measured, ``model_s`` for
    products and for copies of stated ``bytes``); ``host_share``, the part of the time alone that is
    not the GPU's (``1 - gpu_s / alone_s``); ``bound``, ``"host"`` where a
    run of such calls back to back (an eager step) goes at the host's pace,
    slower than the GPU's by over 10%, else ``"gpu"``.
    """
    e = efficiency
    out = []
    for r in _rows(measurements, "launch"):
        n = float(r["kernels"])
        case = {"case": r["case"], "kernels": int(n),
                **{col: float(r[col]) / n for col in ("alone_s", "gpu_s", "stream_s", "host_s", "graph_s")
                   if col in r}}
        flops = float(r.get("flops", 0.0)) / n
        if flops > 0 and (r["dtype"] == "bf16" or (fp8_peak_flops is not None and e.fp8_matmul_curve is not None)):
            fp8 = r["dtype"] == "fp8"
            rate = (fp8_peak_flops * curve_fraction(e.fp8_matmul_curve, flops) if fp8
                    else peak_flops * e.matmul_fraction(flops, "forward"))
            nbytes = _gemm_bytes(r, FP8_BYTES if fp8 else BF16_BYTES) if {"m", "n", "k"} <= set(r) else 0.0
            case["model_s"] = float(kernel_s(flops, nbytes, rate, e.memory_Bps, e.kernel_overhead_s,
                                             e.memory_overlap))
        elif flops == 0 and "bytes" in r:  # a copy of its stated bytes
            case["model_s"] = float(kernel_s(0.0, float(r["bytes"]), 1.0, e.memory_Bps, e.kernel_overhead_s))
        case["host_share"] = max(0.0, 1.0 - case["gpu_s"] / case["alone_s"])
        case["bound"] = "host" if case["stream_s"] > 1.1 * case["gpu_s"] else "gpu"
        out.append(case)
    return out


_EXCLUDED = {
    "add": "compared, not fitted: the copies fit the bandwidth (the H200 file's adds move their stated bytes faster "
           "than its HBM's peak, so they were not three distinct tensors)",
    "swiglu_fwd": "compared, not fitted: an unfused three-kernel SwiGLU (pase prices it fused)",
    "cross_entropy_fwd_bwd": "compared, not fitted: several kernels, the logits upcast to FP32",
}


def residuals(measurements: Mapping, efficiency: Efficiency, peak_flops: float,
              fp8_peak_flops: float | None = None) -> dict[str, list[tuple[str, float, float]]]:
    """Each measured row beside the time ``efficiency`` gives it: section -> ``(label, measured_s, model_s)``.

    Sections: ``gemm_fwd``, ``gemm_dgrad``, ``gemm_wgrad``, ``gemm_fp8``,
    ``attention_fwd``, ``attention_bwd``, ``copy``, ``norm`` (what the fit
    used) and ``other_memory`` (the rows it leaves out, priced as one kernel
    of their stated bytes and no FLOPs).
    """
    e = efficiency
    out: dict[str, list[tuple[str, float, float]]] = {}

    def add(section, label, measured, model):
        out.setdefault(section, []).append((label, float(measured), float(model)))

    for r in _rows(measurements, "gemm_bf16"):
        label = f"{r.get('model', '')} {r.get('layer', '')} m={r['m']} n={r['n']} k={r['k']}".strip()
        nbytes = _gemm_bytes(r, BF16_BYTES)
        for section, col, product in (("gemm_fwd", "fwd_s", "forward"), ("gemm_dgrad", "dgrad_s", "dgrad"),
                                      ("gemm_wgrad", "wgrad_s", "wgrad")):
            rate = peak_flops * e.matmul_fraction(r["flops"], product)
            add(section, label, r[col], kernel_s(r["flops"], nbytes, rate, e.memory_Bps, e.kernel_overhead_s,
                                                 e.memory_overlap))
    if e.fp8_matmul_curve is not None and fp8_peak_flops is not None:
        for r in _rows(measurements, "gemm_fp8"):
            rate = fp8_peak_flops * curve_fraction(e.fp8_matmul_curve, r["flops"])
            add("gemm_fp8", f"m={r['m']} n={r['n']} k={r['k']}", r["s"],
                kernel_s(r["flops"], _gemm_bytes(r, FP8_BYTES), rate, e.memory_Bps, e.kernel_overhead_s,
                         e.memory_overlap))
    if e.attention_curve is not None and e.attention_backward_curve is not None:
        for r in attention_rows(measurements)[0]:
            dv = r.get("dv", r["d"])
            label = f"b={r['b']} hq={r['hq']} hkv={r['hkv']} s={r['s']} d={r['d']}" + (f" dv={dv}" * (dv != r["d"]))
            fwd_b, bwd_b = _attention_bytes(r)
            bwd_flops = ATTENTION_BACKWARD_FLOPS * r["fwd_flops"]
            fwd_x, bwd_x = (float(shape_factor(e.attention_shapes, r["d"], dv, False, r["fwd_flops"], backward=back))
                            for back in (False, True))
            add("attention_fwd", label, r["fwd_s"],
                kernel_s(r["fwd_flops"], fwd_b,
                         peak_flops * curve_fraction(e.attention_curve, r["fwd_flops"]) * fwd_x,
                         e.memory_Bps, e.kernel_overhead_s, e.memory_overlap))
            add("attention_bwd", label, r["fwd_bwd_s"] - r["fwd_s"],
                kernel_s(bwd_flops, bwd_b, peak_flops * curve_fraction(e.attention_backward_curve, bwd_flops) * bwd_x,
                         e.memory_Bps, e.kernel_overhead_s, e.memory_overlap))
    for r in _rows(measurements, "memory_bound"):
        label = f"{r['kind']} {r['m']}x{r['h']}"
        if r["kind"] == "copy":
            add("copy", label, r["s"], kernel_s(0.0, r["bytes"], 1.0, e.memory_Bps, e.kernel_overhead_s))
        elif r["kind"] in _NORM_ROWS:
            add("norm", label, r["s"], _norm_s(r, e.vector_flops, e.memory_Bps, e.kernel_overhead_s))
        else:
            add("other_memory", label, r["s"], kernel_s(0.0, r["bytes"], 1.0, e.memory_Bps, e.kernel_overhead_s))
    return out


def summary(result: FitResult) -> dict:
    """Per section: the fitted rows' count and median and largest absolute relative errors (for a file's ``fit``)."""
    out = {}
    for section in result.rows:
        err = np.abs(result.errors(section))
        out[section] = {"rows": int(err.size), "median_abs_error": round(float(np.median(err)), 4),
                        "max_abs_error": round(float(err.max()), 4)}
        if section == "other_memory":
            out[section]["note"] = "; ".join(result.excluded.values())
    if result.launch:
        out["launch"] = {"rows": len(result.launch), "cases": result.launch,
                         "note": "not fitted: seconds per kernel, each case timed alone, with the GPU held (its own "
                                 "time), back to back, as the host issues it and from a CUDA graph "
                                 "(pase.calibrate.profile.Timer); model_s, what this calibration prices it at"}
    return out


def calibrate(measurements: Mapping, *, peak_flops: float, fp8_peak_flops: float | None, device: str, date: str,
              where: str, environment: Mapping[str, str] | None = None,
              memory_bytes: float | None = None) -> Calibration:
    """The :class:`~pase.hardware.calibration.Calibration` ``measurements`` imply (:func:`fit_efficiency`), with
    the raw timings, the fit's quality and the measurement's provenance inside.

    ``where`` says how the timings were taken (a file, ``pase calibrate``); every
    fitted figure's source names "the kernel timings measured on one DEVICE, DATE (WHERE)".
    """
    source = f"the kernel timings measured on one {device}, {date} ({where})"
    result = fit_efficiency(measurements, peak_flops, fp8_peak_flops, source=source)
    links = {scope: {"bus_Bps": link.bus_Bps, "latency_s": link.latency_s, "ranks": list(link.ranks)}
             for scope, link in result.links.items()}
    return Calibration(result.efficiency, float(peak_flops), None if fp8_peak_flops is None else float(fp8_peak_flops),
                       device, date, links, dict(environment or {}), memory_bytes,
                       {k: v for k, v in measurements.items()}, summary(result))
