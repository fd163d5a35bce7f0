"""A fused attention kernel's work and its rate by head shape.

What a kernel computes (:func:`computed_fraction`): under a causal mask the
score pairs at or below the diagonal, under a sliding window those within it.

How fast, by head shape (:func:`shape_factor`). A calibration's attention
curves (:attr:`~pase.hardware.efficiency.Efficiency.attention_curve` and the
backward's) were measured on kernels whose heads are 128 wide (the H200's
kernel file, the A100's published FlashAttention-2 figures). A kernel of other
head widths does its FLOPs at another rate: with narrower heads each score's
exponential serves fewer FLOPs, and the softmax's exponentials bound such a
kernel (FlashAttention-3, Shah et al. 2024, section 3); DeepSeek-V3's
multi-head latent attention (``q k`` 192 wide, ``v`` 128) runs a slower
backward. NVIDIA's published cuDNN timings on one H200
(``data/cudnn-attention-h200.json``, :data:`SOURCE`) time each such shape
beside 128-wide kernels in the same run; a shape's factor is its rate over the
128-wide kernels' rate at the same FLOPs (interpolated in log FLOPs), per
measured size, interpolated in log FLOPs between them and held flat beyond,
the forward and the backward each. So the calibration's own 128-wide level
stands and only the shape's effect is taken from the published run.

A shape the run did not measure runs at factor 1 (the 128-wide curves). The
run measured 64-wide heads only under a 1,024-token sliding window (GPT-OSS's
is 128): their factor is applied to 64-wide heads whatever their mask. The
MLA rows' backward is cuDNN's deterministic one (the run timed no other);
NVIDIA's GB200 timings of the same shape differ by under 1% between the two.
Measured on an H200; carried over to every GPU, not measured elsewhere.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

__all__ = ["DATA", "SOURCE", "computed_fraction", "shape_factor", "measured_shapes"]

DATA = Path(__file__).resolve().parent / "data" / "cudnn-attention-h200.json"
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
def _published() -> dict:
    return json.loads(DATA.read_text())


SOURCE = (f"published: NVIDIA's cuDNN 9.19 attention timings on one H200 ({_published()['source']}); each head "
          "shape's rate over the 128-wide kernels' at the same FLOPs (pase.hardware.attention_kernels)")


def _forward_flops(row: dict) -> float:
    """FLOPs of a published row's forward as pase counts a fused kernel's: both products over the pairs it
    computes."""
    s = row["s"]
    return 2.0 * row["b"] * s * s * row["hq"] * (row["d_qk"] + row["d_v"]) * computed_fraction(
        s, s, "causal", row["window"])


@functools.cache
def _factors() -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per measured head shape ``(d_qk, d_v)`` other than the reference: its rows' log10 forward FLOPs (sorted) and
    its forward and backward rates over the reference rows' at those FLOPs."""
    rows = _published()["rows"]
    ref = sorted((r for r in rows if (r["d_qk"], r["d_v"]) == (REFERENCE_WIDTH, REFERENCE_WIDTH)), key=_forward_flops)
    log_ref = np.log10([_forward_flops(r) for r in ref])

    def rate(rs, key):  # FLOPs per second of the pass, counted at the forward's FLOPs for both passes
        return np.array([_forward_flops(r) / (r[key] / 1e3) for r in rs])

    out = {}
    for shape in sorted({(r["d_qk"], r["d_v"]) for r in rows} - {(REFERENCE_WIDTH, REFERENCE_WIDTH)}):
        mine = sorted((r for r in rows if (r["d_qk"], r["d_v"]) == shape), key=_forward_flops)
        at = np.log10([_forward_flops(r) for r in mine])
        out[shape] = (at, *(rate(mine, key) / np.interp(at, log_ref, rate(ref, key)) for key in ("fwd_ms", "bwd_ms")))
    return out


def measured_shapes() -> tuple[tuple[int, int], ...]:
    """The head shapes ``(d_qk, d_v)`` with a factor of their own (the published run's, other than 128 x 128)."""
    return tuple(_factors())


def shape_factor(d_qk: int, d_v: int, forward_flops, backward: bool = False) -> np.ndarray:
    """The rate of a fused attention kernel with ``d_qk``-wide score heads and ``d_v``-wide value heads over a
    128-wide kernel's at the same forward FLOPs (``forward_flops``, per kernel, array or scalar), in its forward
    or its ``backward``: the published run's (the module docstring), 1 for a shape it did not measure."""
    flops = np.asarray(forward_flops, dtype=float)
    measured = _factors().get((int(d_qk), int(d_v)))
    if measured is None:
        return np.ones_like(flops)
    at, fwd, bwd = measured
    return np.interp(np.log10(np.maximum(flops, 1.0)), at, bwd if backward else fwd)
