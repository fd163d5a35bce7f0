"""Attention as kernels run it: unfused (2021-22 Megatron, eager PyTorch) or fused (FlashAttention).

A graph spells attention out as the layers of its *core*
(:func:`attention_core`): the score product ``q k^T``, the softmax (and a
dropout) over the ``s x k`` scores, and the context product ``p v``. Unfused
attention runs them as those kernels: the ``s x k`` scores and probabilities
go through memory and are kept for the backward, as the graph counts them.

A fused kernel (FlashAttention 2 and 3, cuDNN's fused attention; ``"flash"``)
runs a core as one kernel (:class:`AttentionUnit`): it streams blocks of keys
past blocks of queries, so no ``s x k`` tensor is written to memory or kept
for the backward; the backward recomputes the scores inside its kernel. It
keeps ``q``, ``k``, ``v``, the output and the softmax's log-sum-exp per
query row (fp32, :data:`LSE_BYTES`). It skips the blocks a mask hides: a
causal kernel computes the pairs at or below the diagonal, a sliding window
those within the window (:func:`computed_fraction`).

Its FLOPs (:func:`flash_flops`): the two products' ``2 b s k h (c + c_v)``
(``h`` every query head, ``c`` the score heads' width, ``c_v`` the value
heads', :func:`head_widths`: 192 and 128 in DeepSeek-V3's attention) times
the computed fraction forward, and 2.5 times that
backward (the backward's five products against the forward's two: the
scores recomputed, and the gradients of the probabilities, ``q``, ``k`` and
``v``), as FlashAttention's authors count them. Its time
(:func:`flash_times_s`) is that of a kernel on the calibration's attention
curves (:attr:`~pase.hardware.efficiency.Efficiency.attention_curve`,
measured per kernel as a function of the FLOPs it does) at its head shape's
rate (:func:`pase.hardware.attention_kernels.shape_factor`: published cuDNN
timings of 192/128-wide heads and of 64-wide ones under a sliding window
against 128-wide ones), bounded below by its
bytes (``q``, ``k``, ``v``, the output, read and written once forward, twice
backward) at the memory bandwidth. Under context parallelism (``ring``: a
score product whose queries are split ``c`` ways across a context-parallel
group) a device runs its share as Transformer Engine's ring attention does:
``c`` kernels, one a ring step (its own key block, then each other rank's as
it arrives), each with ``1/c`` of its FLOPs and bytes (the load-balanced
split of a causal sequence gives every step the same number of pairs), so
each runs at the curve's fraction of its smaller size. The steps' output
corrections (merging each step's output by its log-sum-exp) are not priced.

Rotary position embeddings (a unit's ``rotary``, its softmax's): fused or
not, a calibrated model prices the kernels that rotate ``q`` and ``k``
(:func:`rotary_times_s`), charged to the score product.

A fused kernel runs head widths that are multiples of 8 up to 256
(:func:`flash_units`); where flash is the default, a core it cannot run stays
unfused.

Which kind of attention a cost model prices is :attr:`ConfigOptions.attention
<pase.ir.configs.ConfigOptions.attention>`: the calibrated model takes flash
by default, the paper's peak-rate model unfused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pase.errors import ConfigurationError
from pase.hardware.attention_kernels import computed_fraction, shape_factor
from pase.hardware.efficiency import Efficiency, curve_fraction
from pase.ir.graph import Graph, Layer
from pase.ops import OPS

__all__ = ["LSE_BYTES", "MAX_FLASH_HEAD_DIM", "FLASH_BACKWARD_RATIO", "AttentionUnit", "attention_core",
           "attention_units", "flash_units", "computed_fraction", "flash_flops", "flash_times_s", "lse_bytes",
           "masked_model_flops", "rotary_times_s"]

# The log-sum-exp a fused kernel keeps per query row for its backward: fp32.
LSE_BYTES = 4
# The widest head FlashAttention 2 and 3 take (their kernels are built for widths up to 256).
MAX_FLASH_HEAD_DIM = 256
# A fused backward's FLOPs over its forward's: five products against two (FlashAttention-2, section 3.1).
FLASH_BACKWARD_RATIO = 2.5


def attention_core(graph: Graph) -> frozenset[str]:
    """Layers of the attention core: each product of two activations (no weights) that a softmax reads (the
    scores), that softmax, and the non-contraction layers fed only by the core (a dropout before the context
    product)."""
    core: set[str] = set()
    for layer in graph.layers:
        feeds = [graph.layer(e.src) for e in graph.in_edges(layer.name)]
        if layer.op == "Softmax" and len(feeds) == 1 and OPS[feeds[0].op].contraction and not feeds[0].weights \
                and len(feeds[0].inputs) >= 2:
            core.update((feeds[0].name, layer.name))
        elif feeds and not OPS[layer.op].contraction and all(f.name in core for f in feeds):
            core.add(layer.name)
    return frozenset(core)


@dataclass(frozen=True)
class AttentionUnit:
    """One attention core as a fused kernel runs it.

    ``scores`` (the ``q k^T`` product, which carries the kernel's time),
    ``context`` (the ``p v`` product, whose output leaves the kernel),
    ``members`` every layer of the core (the softmax and dropouts between
    them too), ``mask`` and ``window`` the softmax's (:func:`pase.ops.norm.softmax`), ``widths`` its score and
    value heads' widths (:func:`head_widths`, found once with the unit).
    """

    scores: str
    context: str
    members: frozenset[str]
    mask: str = "none"
    window: int = 0
    rotary: bool = False
    widths: tuple[int, int] = (0, 0)

    @property
    def products(self) -> float:
        """The score and context products' work over the score product's alone: ``1 + d_v / d_qk`` (the context
        product runs the scores' iteration space at the value heads' width; 2 where the widths are equal)."""
        d_qk, d_v = self.widths
        return 1.0 + d_v / d_qk


def attention_units(graph: Graph) -> tuple[AttentionUnit, ...]:
    """The attention cores of ``graph`` that a fused kernel runs, in graph order (derived once per graph).

    A unit is a score product of the core, the non-contraction layers of the
    core it feeds in a chain (the softmax, a dropout), and the product of two
    activations that reads the chain's end (the context product, with ``v``). Cores of another shape (none in pase's models)
    are left to run unfused.
    """
    return graph.derived("attention units", lambda: _units(graph))


def _units(graph: Graph) -> tuple[AttentionUnit, ...]:
    core = attention_core(graph)
    units = []
    for layer in graph.layers:
        if layer.name not in core or not OPS[layer.op].contraction:
            continue
        readers = [e.dst for e in graph.out_edges(layer.name)]
        chain, mask, window, rotary = [layer.name], "none", 0, False
        while len(readers) == 1 and readers[0] in core and not OPS[graph.layer(readers[0]).op].contraction:
            step = graph.layer(readers[0])
            params = dict(step.params)
            if step.op == "Softmax":
                mask, window, rotary = params.get("mask", "none"), params.get("window", 0), params.get("rotary", False)
            chain.append(step.name)
            readers = [e.dst for e in graph.out_edges(step.name)]
        if len(chain) < 2 or len(readers) != 1:
            continue
        context = graph.layer(readers[0])
        if not OPS[context.op].contraction or context.weights or len(context.inputs) != 2:
            continue
        unit = AttentionUnit(layer.name, context.name, frozenset((*chain, context.name)), mask, window, rotary)
        units.append(replace(unit, widths=head_widths(graph, unit)))
    return tuple(units)


def flash_units(graph: Graph, explicit: bool) -> tuple[AttentionUnit, ...]:
    """The units of ``graph`` a fused kernel can run: FlashAttention 2 and 3 take head widths that are
    multiples of 8 up to :data:`MAX_FLASH_HEAD_DIM`. ``explicit`` (flash asked for by name): a unit it cannot
    run is refused; else (``"auto"``) it runs unfused.

    Raises ``ConfigurationError`` naming the layer and the fix.
    """
    units = []
    for unit in attention_units(graph):
        width = graph.layer(unit.scores).sizes[_head_width(graph.layer(unit.scores))]
        if width <= MAX_FLASH_HEAD_DIM and width % 8 == 0:
            units.append(unit)
        elif explicit:
            raise ConfigurationError(
                f"flash attention runs head widths that are multiples of 8 up to {MAX_FLASH_HEAD_DIM}, and "
                f"{unit.scores} has {width}; use --attention unfused (ConfigOptions(attention='unfused'))")
    return tuple(units)


def _fraction(unit: AttentionUnit, graph: Graph) -> float:
    size = graph.layer(unit.scores).size_of
    return computed_fraction(size["s"], size["k"], unit.mask, unit.window) if {"s", "k"} <= size.keys() else 1.0


def flash_flops(graph: Graph, unit: AttentionUnit, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward FLOPs of ``unit``'s fused kernel on one device, per configuration of its score
    product (rows of ``configs``, ``(K, ndims)``): the score and context products' forward FLOPs on that
    device's block times :func:`computed_fraction`, and :data:`FLASH_BACKWARD_RATIO` times that."""
    scores = graph.layer(unit.scores)
    block = np.asarray(scores.sizes, dtype=float) / np.asarray(configs, dtype=float)
    # The context product runs the score product's iteration space with the value heads' width in place of the
    # score heads' (DeepSeek-V3's attention: 128 against 192), split as the score heads are.
    forward = OPS[scores.op].flops(scores, block).forward * unit.products * _fraction(unit, graph)
    return forward, FLASH_BACKWARD_RATIO * forward


def head_widths(graph: Graph, unit: AttentionUnit) -> tuple[int, int]:
    """The widths of ``unit``'s score heads (``q`` and ``k``, the score product's contraction) and value heads
    (``v`` and the output: the context product's output dimension the scores lack)."""
    scores, context = graph.layer(unit.scores), graph.layer(unit.context)
    value = next(a for a in context.outputs[0].axes if a not in scores.outputs[0].axes)
    return scores.sizes[_head_width(scores)], context.size_of[value]


def masked_model_flops(graph: Graph, units: tuple[AttentionUnit, ...]) -> float:
    """Training FLOPs of the attention products of ``units`` (of ``graph``) that a fused kernel skips (the
    masked pairs): per unit, the score and context products' forward and their two input gradients each, times
    the share of pairs the mask hides. The model FLOPs of flash attention are the graph's less these."""
    total = 0.0
    skipped: dict = {}  # per kind of score product and mask: repeated blocks' units are costed once
    for unit in units:
        key = (graph.kind(unit.scores), unit.mask, unit.window)
        if key not in skipped:
            scores = graph.layer(unit.scores)
            one = float(OPS[scores.op].flops(scores, np.asarray([scores.sizes], dtype=float)).forward[0])
            skipped[key] = 3 * one * unit.products * (1.0 - _fraction(unit, graph))
        total += skipped[key]
    return total


def _io_elements(graph: Graph, unit: AttentionUnit, configs: np.ndarray) -> np.ndarray:
    """Elements of ``q``, ``k``, ``v`` and the output on one device per configuration: what the kernel reads
    and writes."""
    from pase.ops import block_elements

    scores = graph.layer(unit.scores)
    q, k = (block_elements(scores, t, np.asarray(configs, dtype=float)) for t in scores.inputs)
    return (q + k) * unit.products  # the output has q's rows, v has k's, each at the value heads' width


def flash_times_s(graph: Graph, unit: AttentionUnit, configs: np.ndarray, peak_flops: float,
                  efficiency: Efficiency, bytes_per_element: int, ring: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of ``unit``'s fused kernel on one device per configuration of its score
    product (the module docstring): FLOPs at the peak times the attention curves' fraction (the matrix
    curve's where the calibration has none) and its head shape's factor
    (:func:`pase.hardware.attention_kernels.shape_factor`), at least its bytes at the memory bandwidth, plus the kernel
    overhead. ``ring``: a split of the queries (``s``) is a context-parallel group running Transformer
    Engine's ring attention, as many kernels as ranks, each with its share's FLOPs and bytes over that count."""
    forward, backward = flash_flops(graph, unit, configs)
    nbytes = _io_elements(graph, unit, configs) * bytes_per_element
    scores = graph.layer(unit.scores)
    cfg = np.asarray(configs, dtype=float)
    steps = cfg[:, scores.dims.index("s")] if ring and "s" in scores.dims else np.ones(len(cfg))
    d_qk, d_v = unit.widths
    out = []
    for flops, curve, moved, back in ((forward / steps, efficiency.attention_curve, nbytes / steps, False),
                                      (backward / steps, efficiency.attention_backward_curve, 2 * nbytes / steps,
                                       True)):
        fraction = efficiency.matmul_fraction(flops) if curve is None else curve_fraction(curve, flops)
        fraction = fraction * shape_factor(efficiency.attention_shapes, d_qk, d_v, unit.window > 0, forward / steps,
                                           backward=back)
        busy = np.maximum(flops / (peak_flops * fraction), moved / efficiency.memory_Bps)
        out.append(np.where(flops > 0, steps * (busy + efficiency.kernel_overhead_s), 0.0))
    return out[0], out[1]


def rotary_times_s(graph: Graph, unit: AttentionUnit, configs: np.ndarray, efficiency: Efficiency,
                   bytes_per_element: int) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds on one device, per configuration of ``unit``'s score product, of applying
    rotary position embeddings to its ``q`` and ``k`` (0 for a unit without, ``unit.rotary`` False): one
    memory-bound kernel each way for each, as Megatron-Core's fused RoPE runs them (``apply_rope_fusion``):
    forward it reads the tensor and writes it rotated, backward it reads the gradient and writes it rotated
    back (the angles' table is negligible)."""
    from pase.ops import block_elements

    scores = graph.layer(unit.scores)
    cfg = np.asarray(configs, dtype=float)
    if not unit.rotary:
        return np.zeros(len(cfg)), np.zeros(len(cfg))
    elements = sum((block_elements(scores, t, cfg) for t in scores.inputs), np.zeros(len(cfg)))
    one_way = 2 * elements * bytes_per_element / efficiency.memory_Bps + 2 * efficiency.kernel_overhead_s
    return one_way, one_way


def lse_bytes(graph: Graph, unit: AttentionUnit, configs: np.ndarray) -> np.ndarray:
    """Bytes of the log-sum-exp a fused kernel keeps for its backward, one fp32 per query row and head, on one
    device per configuration of its score product."""
    scores = graph.layer(unit.scores)
    block = np.asarray(scores.sizes, dtype=float) / np.asarray(configs, dtype=float)
    rows = np.prod(block, axis=1) / block[:, scores.dims.index("k")] / block[:, _head_width(scores)]
    return rows * LSE_BYTES


def _head_width(scores: Layer) -> int:
    """Index of the score product's head-width dimension: the one its output lacks (the contraction)."""
    out = set(scores.outputs[0].axes)
    return next(i for i, d in enumerate(scores.dims) if d not in out)
