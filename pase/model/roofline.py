"""Kernel times on a calibrated device: the roofline of every layer's forward and backward.

A layer's work on one device, under each configuration, is a few kernels
(:class:`~pase.ops.Flops`): the forward; for a matrix product the weight
gradient and each input's gradient as one kernel each (``dW = dy^T x``,
``dx = dy W``); for any other op one backward kernel. A kernel takes::

    max(C, M) + (1 - memory_overlap) min(C, M) + kernel_overhead_s,   C = FLOPs / rate, M = bytes / memory_Bps

(``memory_overlap`` 1: the roofline; less: part of the shorter time is not
hidden behind the longer)

with ``rate`` the peak times the matrix-size efficiency
(:meth:`~pase.hardware.efficiency.Efficiency.matmul_fraction`) for matrix
products (``FullyConnected``, ``Einsum``, ``Conv2D``, ``GroupedConv2D``
(a depthwise one is bound by its bytes), ``LSTM``, and ``MoEExperts``, the
experts' batched products) and
``vector_flops`` for the rest. Bytes: a kernel reads its activation inputs
(and a product its weights) and writes its outputs, each block once; a
product's backward kernels touch as many bytes as its forward, another op's
backward one and a half times as many (it reads the output gradient and what
it saved, and writes the input gradient). An embedding reads only the rows it
gathers, not its table. Assumptions of the ops, as frameworks run them: the
pointwise ops an op fuses (bias, activation) run inside its kernel; layers
that move no data and compute nothing (reshapes, views) take no time.

A product's backward kernels run on the calibration's input-gradient and
weight-gradient curves where it has them. Training in FP8 (Transformer
Engine's recipes, delayed or current scaling, and MXFP8 alike), a product
with weights inside a transformer block (:func:`fp8_products`) runs its
forward and both backward products at the cluster's FP8 peak times the FP8
curve (``fp8_matmul_curve``; the BF16 curve's fractions where the
calibration has none) and casts what it multiplies to FP8 as its recipe
does (:mod:`pase.model.precision`: each cast memory-bound kernels of its
own, an activation input's forward, its output gradient's backward, its
weights' once a step with the optimizer's). Products of two activations
(unfused attention) stay in BF16, as Transformer Engine runs attention; so
do normalisations and the other vector kernels.

Fusion of element-wise chains (:func:`fused_chains`, :func:`fused_times_s`;
a documented assumption, applied where the cost model is asked to,
``build_cost_model(fuse_elementwise=True)``, on calibrated clusters only): an
element-wise layer (:data:`ELEMENTWISE_OPS`: ``Elementwise``, ``Dropout``,
``Gelu``) whose output only another element-wise layer of the same iteration
space and the same configuration reads runs in one kernel with it, as
frameworks fuse such chains (Megatron-LM's bias + dropout + residual add,
PyTorch's and XLA's pointwise fusion). A chain, every element-wise layer so
joined, is one forward kernel that reads each of the chain's inputs and
writes each of its outputs once (an intermediate is written only when a
backward reads it, then once) and does all of its layers' FLOPs, and one
backward kernel of the same rule (one and a half times those bytes, all of
its layers' backward FLOPs); one kernel overhead each. Row reductions
(softmax, normalisations) and products end a chain: they run as kernels of
their own (Megatron's fused softmax and LayerNorm are each one kernel
already). The chain's time is charged to its last layer (the one writing its
result); the others take none of their own.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from pase.hardware.efficiency import Efficiency, curve_fraction
from pase.ir.graph import Graph, Layer
from pase.model.precision import DELAYED, Cast, Fp8Recipe
from pase.ops import OPS, block_elements, saved_tensors

__all__ = ["ELEMENTWISE_OPS", "MATRIX_OPS", "block_of", "blocks", "fp8_products", "fused_chains",
           "fused_times_s", "layer_times_s", "matrix_kernel_s", "vector_kernel_s"]

MATRIX_OPS = frozenset({"FullyConnected", "Einsum", "Conv2D", "GroupedConv2D", "LSTM", "MoEExperts"})
# Ops whose every output element depends only on the inputs' elements at the same index: they fuse into chains.
ELEMENTWISE_OPS = frozenset({"Elementwise", "Dropout", "Gelu"})
# Backward bytes of a non-matrix kernel relative to its forward's.
VECTOR_BACKWARD_BYTES = 1.5


def _kernel_s(flops: np.ndarray, nbytes: np.ndarray, matrix: bool, peak: float, eff: Efficiency,
              product: str = "forward", fp8_peak: float | None = None) -> np.ndarray:
    if not matrix:
        rate = eff.vector_flops
    elif fp8_peak is not None:
        rate = fp8_peak * curve_fraction(eff.fp8_matmul_curve or eff.matmul_curve, flops)
    else:
        rate = peak * eff.matmul_fraction(flops, product)
    compute, memory = flops / rate, nbytes / eff.memory_Bps
    busy = np.maximum(compute, memory) + (1.0 - eff.memory_overlap) * np.minimum(compute, memory)
    # A product's kernel with no FLOPs does not exist (no weights: no weight gradient).
    runs = (flops > 0) if matrix else ((flops > 0) | (nbytes > 0))
    return np.where(runs, busy + eff.kernel_overhead_s, 0.0)


def matrix_kernel_s(flops, nbytes, peak: float, eff: Efficiency, product: str = "forward",
                    fp8_peak: float | None = None) -> np.ndarray:
    """Seconds of matrix-product kernels of ``flops`` FLOPs moving ``nbytes`` (arrays), the module docstring's
    rule: ``product`` ``"forward"``, ``"dgrad"`` or ``"wgrad"`` picks the curve; ``fp8_peak`` runs them in FP8."""
    return _kernel_s(np.asarray(flops, dtype=float), np.asarray(nbytes, dtype=float), True, peak, eff, product,
                     fp8_peak)


def vector_kernel_s(flops, nbytes, eff: Efficiency) -> np.ndarray:
    """Seconds of vector (non-product) kernels of ``flops`` FLOPs moving ``nbytes`` (arrays), at ``vector_flops``."""
    return _kernel_s(np.asarray(flops, dtype=float), np.asarray(nbytes, dtype=float), False, 0.0, eff)


def layer_times_s(layer: Layer, configs: np.ndarray, peak_flops: float, efficiency: Efficiency,
                  bytes_per_element: int, needs_gradient=None, *,
                  fp8_peak_flops: float | None = None, casts: Sequence[Cast] | None = None,
                  recipe: Fp8Recipe | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of ``layer`` on one device under each configuration (rows of ``configs``).

    ``needs_gradient[i]`` False leaves out input ``i``'s gradient kernel (a
    graph input), as the cost model's FLOP count does. ``fp8_peak_flops``
    (training in FP8): a product with weights runs its three products at that
    peak on the FP8 curve and pays its activations' quantisation under
    ``recipe`` (:mod:`pase.model.precision`; default delayed scaling):
    ``casts[i]`` input ``i``'s cast (:func:`pase.model.precision.input_casts`;
    default the recipe's activation cast, its own each), and its output
    gradient's.
    """
    cfg = np.asarray(configs, dtype=float)
    flops = OPS[layer.op].flops(layer, np.asarray(layer.sizes, dtype=float) / cfg)
    if not np.any(flops.forward) and not np.any(flops.total(needs_gradient)):
        return np.zeros(len(cfg)), np.zeros(len(cfg))
    matrix = layer.op in MATRIX_OPS
    elements = sum((block_elements(layer, t, cfg) for t in (*layer.inputs, *layer.outputs)), np.zeros(len(cfg)))
    if matrix:
        elements = elements + sum((block_elements(layer, w, cfg) for w in layer.weights), np.zeros(len(cfg)))
    nbytes = elements * bytes_per_element
    fp8 = fp8_peak_flops if matrix and layer.weights else None
    forward = _kernel_s(flops.forward, nbytes, matrix, peak_flops, efficiency, fp8_peak=fp8)
    gradients = [g for i, g in enumerate(flops.inputs) if needs_gradient is None or needs_gradient[i]]
    if matrix:
        backward = _kernel_s(flops.backward, nbytes, True, peak_flops, efficiency, "wgrad", fp8) + sum(
            (_kernel_s(g, nbytes, True, peak_flops, efficiency, "dgrad", fp8) for g in gradients), np.zeros(len(cfg)))
        if fp8 is not None:
            forward, backward = _quantised(layer, cfg, efficiency, forward, backward, casts, recipe or DELAYED)
    else:
        work = flops.backward + sum(gradients, np.zeros(len(cfg)))
        backward = _kernel_s(work, VECTOR_BACKWARD_BYTES * nbytes, False, peak_flops, efficiency)
    return forward, backward


def _quantised(layer: Layer, cfg: np.ndarray, eff: Efficiency, forward: np.ndarray, backward: np.ndarray,
               casts: Sequence[Cast] | None, recipe: Fp8Recipe) -> tuple[np.ndarray, np.ndarray]:
    """``forward`` and ``backward`` of an FP8 product with its activations' casts added: per input its
    :class:`~pase.model.precision.Cast` (default the recipe's activation cast, its own each), the bytes and
    launches of its kernels shared by its ``readers``; backward its output gradient's cast; each a memory-bound
    kernel. Its weights' casts are the step's (:func:`pase.model.precision.weight_cast_s`)."""
    per_input = [recipe.activation] * len(layer.inputs) if casts is None else casts

    def seconds(tensor, nbytes: float, c: Cast) -> np.ndarray:
        if nbytes <= 0:
            return np.zeros(len(cfg))
        return (block_elements(layer, tensor, cfg) * nbytes / eff.memory_Bps + c.kernels * eff.kernel_overhead_s) \
            / c.readers

    for t, c in zip(layer.inputs, per_input):
        forward, backward = forward + seconds(t, c.forward, c), backward + seconds(t, c.backward, c)
    gradient = recipe.gradient
    for t in layer.outputs:
        backward = backward + seconds(t, gradient.backward, gradient)
    return forward, backward


def block_of(name: str) -> tuple[str, int] | None:
    """The transformer block of a layer name and its number: the name up to its first numbered part, when more
    parts follow (``("h.3", 3)`` for ``h.3.attn.q``); None for a layer in no block (embeddings, the output
    layer, the loss)."""
    parts = name.split(".")
    num = next((i for i, p in enumerate(parts) if p.isdigit()), None)
    if num is None or num + 1 >= len(parts):
        return None
    return ".".join(parts[:num + 1]), int(parts[num])


def blocks(graph: Graph) -> dict[str, str]:
    """Layer name -> its block (:func:`block_of`), as frameworks build, checkpoint and quantise each transformer
    layer; layers in no block are left out."""
    return {layer.name: found[0] for layer in graph.layers if (found := block_of(layer.name)) is not None}


def fp8_products(graph: Graph) -> frozenset[str]:
    """The layers of ``graph`` that train in FP8 under an FP8 precision
    (:data:`pase.ir.configs.FP8_PRECISIONS`): the products with weights inside
    its blocks (:func:`blocks`), Transformer Engine's linear layers in Megatron-Core's transformer layers.
    The embedding and the output layer (Megatron-Core's own ``ColumnParallelLinear``) stay in BF16, as
    Transformer Engine advises for the first and last layers. Derived once per graph."""
    def compute() -> frozenset[str]:
        inside = blocks(graph)
        return frozenset(l.name for l in graph.layers if l.name in inside and l.weights and l.op in MATRIX_OPS)
    return graph.derived("fp8 products", compute)


def _works(layer: Layer, cfg: np.ndarray) -> bool:
    """Whether ``layer`` does any FLOPs under its one configuration ``cfg`` (``(1, ndims)``)."""
    flops = OPS[layer.op].flops(layer, np.asarray(layer.sizes, dtype=float) / cfg)
    return bool(np.any(flops.total()))


def fused_chains(graph: Graph, configs: Mapping[str, np.ndarray]) -> list[tuple[str, ...]]:
    """The chains of element-wise layers of ``graph`` that run as one kernel each (the module docstring).

    An edge ``u -> v`` fuses when both layers are of :data:`ELEMENTWISE_OPS`
    and do FLOPs, have the same dimensions and sizes and one configuration
    each (``configs``: layer name -> ``(K, ndims)`` rows), the same, and ``v``
    is the only layer reading ``u``'s output. A chain is every layer joined by
    fused edges, in graph order; its last layer is the one whose output leaves
    the chain (each layer has one output, read inside the chain by one layer
    at most). Layers in no fused edge are in no chain.
    """
    def fusable(layer: Layer) -> bool:
        cfg = configs.get(layer.name)
        return layer.op in ELEMENTWISE_OPS and cfg is not None and len(cfg) == 1 and _works(layer, cfg)

    sink: dict[str, str] = {}  # layer -> the layer its output fuses into
    for u in graph.layers:
        readers = {e.dst for e in graph.out_edges(u.name)}
        if len(readers) != 1 or not fusable(u):
            continue
        v = graph.layer(readers.pop())
        if fusable(v) and (v.dims, v.sizes) == (u.dims, u.sizes) and np.array_equal(configs[u.name], configs[v.name]):
            sink[u.name] = v.name

    def end(name: str) -> str:
        while name in sink:
            name = sink[name]
        return name

    chains: dict[str, list[str]] = {}  # by last layer; graph order puts every member before it
    for layer in graph.layers:
        if layer.name in sink or layer.name in chains:
            chains.setdefault(end(layer.name), []).append(layer.name)
    return [tuple(members) for members in chains.values()]


def fused_times_s(graph: Graph, chain: Sequence[str], configs: Mapping[str, np.ndarray], peak_flops: float,
                  efficiency: Efficiency, bytes_per_element: int,
                  needs_gradient: Callable[[Layer], Sequence[bool] | None]) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds (each ``(1,)``) of the one kernel a chain of :func:`fused_chains` runs.

    Bytes: every input of a chain's layer that no other layer of the chain
    feeds, every output that leaves the chain, and each intermediate a
    backward reads (the consumer keeps it as an input or the producer as an
    output, :func:`~pase.ops.saved_tensors`) once; the backward kernel one and
    a half times as many. FLOPs: the layers' forward, and their backward with
    the input gradients ``needs_gradient(layer)`` asks for (as :func:`layer_times_s`).
    """
    members = set(chain)
    internal = [e for name in chain for e in graph.in_edges(name) if e.src in members]
    fed = {(e.dst, e.dst_input) for e in internal}
    consumed = {(e.src, e.src_output) for e in internal}
    kept = {(e.src, e.src_output) for e in internal if e.dst_input in saved_tensors(graph.layer(e.dst))[0]
            or e.src_output in saved_tensors(graph.layer(e.src))[1]}
    elements = forward_flops = backward_flops = 0.0
    for name in chain:
        layer, cfg = graph.layer(name), np.asarray(configs[name], dtype=float)
        elements += sum(float(block_elements(layer, t, cfg)[0]) for i, t in enumerate(layer.inputs)
                        if (name, i) not in fed)
        elements += sum(float(block_elements(layer, t, cfg)[0]) for o, t in enumerate(layer.outputs)
                        if (name, o) not in consumed or (name, o) in kept)
        flops = OPS[layer.op].flops(layer, np.asarray(layer.sizes, dtype=float) / cfg)
        forward_flops += float(flops.forward[0])
        backward_flops += float((flops.total(needs_gradient(layer)) - flops.forward)[0])
    nbytes = np.array([elements * bytes_per_element])
    forward = _kernel_s(np.array([forward_flops]), nbytes, False, peak_flops, efficiency)
    backward = _kernel_s(np.array([backward_flops]), VECTOR_BACKWARD_BYTES * nbytes, False, peak_flops, efficiency)
    return forward, backward
