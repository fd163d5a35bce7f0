"""A fused attention kernel's work and its rate by head shape.

What a kernel computes (:func:`computed_fraction`): under a causal mask the
score pairs at or below the diagonal, under a sliding window those within it.

How fast, by head shape (:func:`shape_factor`). A calibration's attention
curves (:attr:`~pase.hardware.efficiency.Efficiency.attention_curve` and the
backward's) are fitted to kernels whose heads are 128 wide (the H200's
kernel file, the A100's published FlashAttention-2 figures, ``pase
calibrate``'s 128-wide rows). A kernel of other head widths does its FLOPs at
another rate: on Hopper, with narrower heads each score's exponential serves
fewer FLOPs and the exponentials (3.9 TFLOP/s against 989 of products) bound
the kernel (FlashAttention-3, Shah et al. 2024, section 3.1); DeepSeek-V3's
multi-head latent attention (``q k`` 192 wide, ``v`` 128) runs a slower
backward; a sliding window's kernel (GPT-OSS's) loops over few key blocks a
query tile. A calibration carries its head shapes' rates
(``Efficiency.attention_shapes``, :func:`relative_rates`), a shape being both
head widths and whether a window bounds the kernel: each shape's rate over
the unwindowed 128-wide kernels' at the same forward FLOPs (interpolated in
log FLOPs, held flat beyond them), at each size timed, the forward and the
backward each, interpolated in log FLOPs between the sizes and held flat
beyond. So the calibration's own 128-wide level stands and only the shape's
effect is taken from kernels timed beside 128-wide ones in the same run:

* the ``dgx-h100`` and ``dgx-h200`` presets, NVIDIA's published cuDNN 9.19
  timings on one H200 (``data/cudnn-attention-h200.json``, the ``"hopper"``
  table of :func:`published_rates`, :data:`SOURCES`): MLA's backward at 0.75
  of the 128-wide rate, 64-wide heads under a 1,024-token window at 0.55-0.7;
* ``dgx-b200``, NVIDIA's cuDNN 9.22 timings of the same shapes on one GB200
  (``data/cudnn-attention-gb200.json``, ``"blackwell"``): MLA's backward at
  0.8-0.87, GPT-OSS's 64-wide heads under its 128-token window at a tenth
  to a fifth;
* ``pase calibrate``'s own, from the MLA and 64-wide rows (no window) it
  times beside its 128-wide ones (:func:`pase.calibrate.fit.fit_efficiency`);
* ``dgx-a100``, none (the balance of its exponentials and products is
  neither Hopper's nor Blackwell's): every shape on its curves.

A shape a calibration lacks runs at factor 1 (the 128-wide curves): on the
presets, 64-wide heads without a window, which the published runs did not
time, though Hopper's narrow heads are likely slower. A windowed shape's
rates apply whatever the window's width (the H200's were timed under 1,024
tokens, GPT-OSS's is 128). The H200's MLA rows' backward is cuDNN's
deterministic one (that run timed no other); on the GB200 the two differ by
under 10% for that shape, either way.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

__all__ = ["REFERENCE_WIDTH", "SHAPE_TABLES", "SOURCES", "ShapeRates", "computed_fraction", "measured_shapes", "published_rates",
           "relative_rates", "shape_factor", "shape_name"]

# The published timings behind each preset's head-shape rates, by the GPU family they were timed on.
SHAPE_TABLES = {name: Path(__file__).resolve().parent / "data" / f"cudnn-attention-{gpu}.json"
                for name, gpu in (("hopper", "h200"), ("blackwell", "gb200"))}
# The width every calibration's attention curves were measured at.
REFERENCE_WIDTH = 128


def computed_fraction(queries: int, keys: int, mask: str = "none", window: int = 0) -> float:
    """Fraction of the ``queries x keys`` score pairs a fused kernel computes under ``mask`` and ``window``.

    Query ``i`` (of ``queries``, aligned with the last of ``keys``: the
    newest positions) sees the keys up to its own position under a causal
    mask, and at most ``window`` of them (its own included) with a sliding
    window. ``"none"`` without a window: every pair, 1.
    """
    offset = keys - queries  # query i sits at key position offset + i
    i = np.arange(queries, dtype=float)
    seen = np.full(queries, float(keys)) if mask == "none" else np.clip(offset + i + 1, 0, keys)
    if window:
        seen = np.minimum(seen, window)
    return float(seen.sum() / (queries * keys))


@functools.cache
def _published(table: str) -> dict:
    return json.loads(SHAPE_TABLES[table].read_text())


# Where each table's rates come from, in words.
SOURCES = {"hopper": f"published: NVIDIA's cuDNN 9.19 attention timings on one H200 "
                     f"({_published('hopper')['source']}); each head shape's rate over the 128-wide kernels' at the "
                     "same FLOPs (pase.hardware.attention_kernels)",
           "blackwell": f"published: NVIDIA's cuDNN 9.22 attention timings on one GB200 "
                        f"({_published('blackwell')['source']}); each head shape's rate over the 128-wide kernels' at "
                        "the same FLOPs, carried to the B200 (the same Blackwell SMs, at 1,000 W against the GB200's "
                        "1,200; pase.hardware.attention_kernels)"}


def _forward_flops(row: dict) -> float:
    """FLOPs of a published row's forward as pase counts a fused kernel's: both products over the pairs it
    computes."""
    s = row["s"]
    return 2.0 * row["b"] * s * s * row["hq"] * (row["d_qk"] + row["d_v"]) * computed_fraction(
        s, s, "causal", row["window"])


# A calibration's head-shape rates: per head shape ``(d_qk, d_v, windowed, points)``, the points ``(forward FLOPs,
# forward factor, backward factor)`` ascending in FLOPs (:func:`relative_rates`).
ShapeRates = tuple[tuple[int, int, bool, tuple[tuple[float, float, float], ...]], ...]


def _shape(row) -> tuple[int, int, bool]:
    return int(row["d_qk"]), int(row["d_v"]), bool(row.get("window", 0))


def relative_rates(rows) -> ShapeRates:
    """Head-shape rates from timed kernels (the module docstring): ``rows`` of ``d_qk``, ``d_v``, ``window`` (0 or
    left out: none), ``flops`` (the forward's, pase's count), ``fwd_s`` and ``bwd_s``; each shape other than 128 x
    128 without a window, at each of its sizes, its forward and backward rates over the 128-wide unwindowed rows' at
    the same forward FLOPs (interpolated in log FLOPs, held flat beyond them). Empty without such rows."""
    def rate(rs, key):  # FLOPs per second of the pass, counted at the forward's FLOPs for both passes
        return np.array([r["flops"] / r[key] for r in rs])

    reference = (REFERENCE_WIDTH, REFERENCE_WIDTH, False)
    ref = sorted((r for r in rows if _shape(r) == reference), key=lambda r: r["flops"])
    if not ref:
        return ()
    log_ref = np.log10([r["flops"] for r in ref])
    out = []
    for shape in sorted({_shape(r) for r in rows} - {reference}):
        mine = sorted((r for r in rows if _shape(r) == shape), key=lambda r: r["flops"])
        at = np.log10([r["flops"] for r in mine])
        fwd, bwd = (rate(mine, key) / np.interp(at, log_ref, rate(ref, key)) for key in ("fwd_s", "bwd_s"))
        points: dict[float, tuple[float, float]] = {}
        for f, a, b in zip((r["flops"] for r in mine), fwd, bwd):
            points.setdefault(float(f), (float(a), float(b)))  # one point a size: the first row of it
        out.append((*shape, tuple((f, a, b) for f, (a, b) in sorted(points.items()))))
    return tuple(out)


@functools.cache
def published_rates(table: str) -> ShapeRates:
    """The head-shape rates of a published table of :data:`SHAPE_TABLES` (``"hopper"``, ``"blackwell"``)."""
    return relative_rates([dict(d_qk=r["d_qk"], d_v=r["d_v"], window=r["window"], flops=_forward_flops(r),
                                fwd_s=r["fwd_ms"] / 1e3, bwd_s=r["bwd_ms"] / 1e3) for r in _published(table)["rows"]])


def measured_shapes(rates: ShapeRates) -> tuple[tuple[int, int, bool], ...]:
    """The head shapes ``(d_qk, d_v, windowed)`` with rates of their own in ``rates``."""
    return tuple((q, v, w) for q, v, w, _ in rates)


def shape_name(shape: tuple[int, int, bool]) -> str:
    """A head shape in words: ``"192/128-wide heads"``, ``"64/64-wide heads under a sliding window"``."""
    q, v, windowed = shape
    return f"{q}/{v}-wide heads" + (" under a sliding window" if windowed else "")


def shape_factor(rates: ShapeRates | None, d_qk: int, d_v: int, windowed: bool, forward_flops,
                 backward: bool = False) -> np.ndarray:
    """The rate of a fused attention kernel with ``d_qk``-wide score heads and ``d_v``-wide value heads, under a
    sliding window or not (``windowed``), over an unwindowed 128-wide kernel's at the same forward FLOPs
    (``forward_flops``, per kernel, array or scalar), in its forward or its ``backward``, by a calibration's
    ``rates`` (``Efficiency.attention_shapes``): interpolated in log FLOPs between its points and held flat
    beyond them; 1 without rates or for a shape they lack."""
    flops = np.asarray(forward_flops, dtype=float)
    key = (int(d_qk), int(d_v), bool(windowed))
    points = next((p for q, v, w, p in rates or () if (q, v, w) == key), None)
    if points is None:
        return np.ones_like(flops)
    at = np.log10([f for f, _, _ in points])
    return np.interp(np.log10(np.maximum(flops, 1.0)), at, [b if backward else a for _, a, b in points])
