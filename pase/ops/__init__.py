"""The op library: every op's builder and rules, one module per family.

:mod:`.registry` defines :class:`OpSpec` (builder, FLOPs, collectives,
contraction rule, what the backward pass keeps) and :data:`OPS`; the families
register their ops on import: :mod:`.gemm` (``FullyConnected``, ``Einsum``),
:mod:`.conv` (``Conv2D``, ``GroupedConv2D``, ``Pooling``), :mod:`.norm` (``Elementwise``,
``Dropout``, ``Gelu``, ``BatchNorm``, ``LayerNorm``, ``RMSNorm``, ``Softmax``, ``SoftmaxCrossEntropy``),
:mod:`.sequence` (``Embedding``, ``LSTM``), :mod:`.movement` (``Concat``, ``Broadcast``,
``Split``, ``Reshape``, ``Transpose``, ``ReduceMean``), :mod:`.moe` (``MoERouter``,
``MoEExperts``, ``MoECombine``: mixture of experts).
"""

from pase.ops.conv import conv2d, grouped_conv2d, pooling
from pase.ops.gemm import einsum, fully_connected
from pase.ops.movement import broadcast, concat, reduce_mean, reshape, split, transpose
from pase.ops.moe import expert_capacity, moe_combine, moe_experts, moe_router
from pase.ops.norm import (
    DROPOUT_FLOPS_PER_ELEMENT, DROPOUT_MASK_BYTES, GELU_FLOPS_PER_ELEMENT, NORM_FLOPS_PER_ELEMENT,
    RMS_NORM_FLOPS_PER_ELEMENT, SOFTMAX_FLOPS_PER_ELEMENT, XENT_FLOPS_PER_ELEMENT,
    batch_norm, dropout, elementwise, gelu, layer_norm, rms_norm, softmax, softmax_cross_entropy,
)
from pase.ops.registry import (
    OPS, Collective, CollectiveOptions, Flops, OpSpec, block_elements, build_layer, collectives, column,
    missing_dims, partial_collectives, saved_tensors, split_over, tensor_splits, training_flops,
)
from pase.ops.sequence import LSTM_POINTWISE_FLOPS, embedding, lstm

__all__ = [
    "OPS", "OpSpec", "Collective", "CollectiveOptions", "Flops", "build_layer", "training_flops", "collectives",
    "partial_collectives", "saved_tensors", "column", "split_over", "tensor_splits", "block_elements", "missing_dims",
    "fully_connected", "einsum", "conv2d", "grouped_conv2d", "pooling", "elementwise", "dropout", "gelu", "batch_norm", "layer_norm", "rms_norm", "softmax",
    "softmax_cross_entropy", "embedding", "lstm", "concat", "broadcast", "split", "reshape", "transpose", "reduce_mean",
    "moe_router", "moe_experts", "moe_combine", "expert_capacity",
    "NORM_FLOPS_PER_ELEMENT", "RMS_NORM_FLOPS_PER_ELEMENT", "DROPOUT_FLOPS_PER_ELEMENT", "DROPOUT_MASK_BYTES", "GELU_FLOPS_PER_ELEMENT",
    "SOFTMAX_FLOPS_PER_ELEMENT", "XENT_FLOPS_PER_ELEMENT", "LSTM_POINTWISE_FLOPS",
]
