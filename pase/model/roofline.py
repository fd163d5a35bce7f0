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
"""

from __future__ import annotations

import numpy as np

from pase.hardware.efficiency import Efficiency
from pase.ir.graph import Layer
from pase.ops import OPS, block_elements

__all__ = ["MATRIX_OPS", "layer_times_s"]

MATRIX_OPS = frozenset({"FullyConnected", "Einsum", "Conv2D", "GroupedConv2D", "LSTM", "MoEExperts"})
# Backward bytes of a non-matrix kernel relative to its forward's.
VECTOR_BACKWARD_BYTES = 1.5


def _kernel_s(flops: np.ndarray, nbytes: np.ndarray, matrix: bool, peak: float, eff: Efficiency) -> np.ndarray:
    rate = peak * eff.matmul_fraction(flops) if matrix else eff.vector_flops
    compute, memory = flops / rate, nbytes / eff.memory_Bps
    busy = np.maximum(compute, memory) + (1.0 - eff.memory_overlap) * np.minimum(compute, memory)
    # A product's kernel with no FLOPs does not exist (no weights: no weight gradient).
    runs = (flops > 0) if matrix else ((flops > 0) | (nbytes > 0))
    return np.where(runs, busy + eff.kernel_overhead_s, 0.0)


def layer_times_s(layer: Layer, configs: np.ndarray, peak_flops: float, efficiency: Efficiency,
                  bytes_per_element: int, needs_gradient=None) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of ``layer`` on one device under each configuration (rows of ``configs``).

    ``needs_gradient[i]`` False leaves out input ``i``'s gradient kernel (a
    graph input), as the cost model's FLOP count does.
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
    forward = _kernel_s(flops.forward, nbytes, matrix, peak_flops, efficiency)
    gradients = [g for i, g in enumerate(flops.inputs) if needs_gradient is None or needs_gradient[i]]
    if matrix:
        backward = sum((_kernel_s(g, nbytes, True, peak_flops, efficiency) for g in (flops.backward, *gradients)),
                       np.zeros(len(cfg)))
    else:
        work = flops.backward + sum(gradients, np.zeros(len(cfg)))
        backward = _kernel_s(work, VECTOR_BACKWARD_BYTES * nbytes, False, peak_flops, efficiency)
    return forward, backward
