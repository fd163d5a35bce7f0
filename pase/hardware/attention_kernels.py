"""A fused attention kernel's work and its rate by head shape.

What a kernel computes (:func:`computed_fraction`): under a causal mask the
score pairs at or below the diagonal, under a sliding window those within it.

How fast, by head shape (:func:`shape_factor`). A calibration's attention
curves (:attr:`~pase.hardware.efficiency.Efficiency.attention_curve` and the
backward's) were measured on kernels whose heads are 128 wide (the H200's
kernel file, the A100's published FlashAttention-2 figures). On Hopper a
kernel of other head widths does its FLOPs at another rate: with narrower
heads each score's exponential serves fewer FLOPs, and Hopper's exponentials
(3.9 TFLOP/s against 989 of products) bound such a kernel (FlashAttention-3,
Shah et al. 2024, section 3.1); DeepSeek-V3's multi-head latent attention
(``q k`` 192 wide, ``v`` 128) runs a slower backward. NVIDIA's published
cuDNN timings on one H200 (``data/cudnn-attention-h200.json``, the
``"hopper"`` table, :data:`SOURCES`) time each such shape beside 128-wide
kernels in the same run; a shape's factor is its rate over the 128-wide
kernels' rate at the same forward FLOPs (interpolated in log FLOPs, held
flat beyond them), per measured size, interpolated in log FLOPs between
them and held flat beyond,
the forward and the backward each. So a calibration's own 128-wide level
stands and only the shape's effect is taken from the published run. A
calibration names its table (``Efficiency.attention_shapes``): the H100's and
H200's ``"hopper"``; the B200's ``"blackwell"``, NVIDIA's timings of the same
shapes on one GB200 (``data/cudnn-attention-gb200.json``: MLA's backward at
about 0.9 of the 128-wide rate where Hopper's is 0.75, and GPT-OSS's
64-wide heads under its 128-token window at a tenth to a fifth, which may
hold the cuDNN regression NVIDIA's Megatron-Bridge 26.06.01 table notes for
GPT-OSS, NVIDIA/cudnn-frontend#256); the A100's none (the
balance of its exponentials and products is neither's), so every shape runs
on its curves.

A shape the table lacks runs at factor 1 (the 128-wide curves). Each run
measured 64-wide heads only under a sliding window (the H200's of 1,024
tokens, the GB200's of 128, GPT-OSS's own): their factor is applied to
64-wide heads whatever their mask. The H200's MLA rows' backward is cuDNN's
deterministic one (that run timed no other); on the GB200 the two differ by
under 10% for that shape, either way.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

__all__ = ["SHAPE_TABLES", "SOURCES", "computed_fraction", "shape_factor", "measured_shapes"]

# The published timings behind each table of head-shape rates, by the name a calibration gives it.
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
SOURCES = {"hopper": f"published: NVIDIA's cuDNN 9.19 attention timings on one H200 ({_published('hopper')['source']}); "
                     "each head shape's rate over the 128-wide kernels' at the same FLOPs (pase.hardware.attention_kernels)",
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


@functools.cache
def _factors(table: str) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per head shape ``(d_qk, d_v)`` of ``table`` other than the reference: its rows' log10 forward FLOPs (sorted)
    and its forward and backward rates over the reference rows' at those FLOPs."""
    rows = _published(table)["rows"]
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


def measured_shapes(table: str = "hopper") -> tuple[tuple[int, int], ...]:
    """The head shapes ``(d_qk, d_v)`` with a factor of their own in ``table`` (other than 128 x 128)."""
    return tuple(_factors(table))


def shape_factor(table: str | None, d_qk: int, d_v: int, forward_flops, backward: bool = False) -> np.ndarray:
    """The rate of a fused attention kernel with ``d_qk``-wide score heads and ``d_v``-wide value heads over a
    128-wide kernel's at the same forward FLOPs (``forward_flops``, per kernel, array or scalar), in its forward
    or its ``backward``, by ``table`` (a calibration's ``attention_shapes``): 1 without a table or for a shape
    it lacks (the module docstring)."""
    flops = np.asarray(forward_flops, dtype=float)
    measured = None if table is None else _factors(table).get((int(d_qk), int(d_v)))
    if measured is None:
        return np.ones_like(flops)
    at, fwd, bwd = measured
    return np.interp(np.log10(np.maximum(flops, 1.0)), at, bwd if backward else fwd)
