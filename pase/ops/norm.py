"""Pointwise and normalising ops: elementwise, dropout, GeLU, batch, layer and RMS norm, softmax, cross-entropy."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pase.errors import GraphError
from pase.ir.graph import Layer, TensorSpec
from pase.ops.registry import (
    Collective, CollectiveOptions, Flops, block_elements, check_fused, check_letters, check_sizes, column, halo, no_collectives,
    params, register, weight_gradient_collectives,
)

# FLOPs per element of the normalisation and softmax ops (forward + backward).
# Forward batch/layer norm: mean (1), variance (2), normalise (2), scale+shift (2), ~1 misc;
# backward about 1.5x forward: the scale and shift gradients (3) and the input's (9).
NORM_FLOPS_PER_ELEMENT = 20
NORM_FORWARD_FLOPS = 8
NORM_WEIGHT_GRADIENT_FLOPS = 3
# RMSNorm (Zhang and Sennrich 2019), y = g * x / rms(x), rms(x) = sqrt(mean(x^2) + eps), per element, counted as
# LayerNorm's 8 + 3 + 9 (tests/test_layers.py) with the mean and the shift left out:
#   forward 4: square (1), sum (1); xhat = x * rstd (1, no subtraction); y = g xhat (1, no shift);
#   scale gradient 2: dg += dy * xhat (2; no shift gradient);
#   input gradient 7: dx = rstd / N (N u - xhat sum(u xhat)) with u = dy g: u (1), u xhat and its sum (2),
#   N u (1), one subtraction (1, LayerNorm's sum(u) term is gone), xhat * sum (1), * rstd / N (1).
# 4 + 2 + 7 = 13 per element, 0.65 of LayerNorm's 20 (the per-row rsqrt is not counted, as in LayerNorm).
RMS_NORM_FLOPS_PER_ELEMENT = 13
RMS_NORM_FORWARD_FLOPS = 4
RMS_NORM_WEIGHT_GRADIENT_FLOPS = 2
# Softmax forward: max, subtract, exp, sum, divide (5); backward y * (dy - sum(dy * y)) (4).
SOFTMAX_FLOPS_PER_ELEMENT = 9
SOFTMAX_FORWARD_FLOPS = 5
# Softmax plus log and pick (6), and the logits' gradient p - onehot, scaled (5).
XENT_FLOPS_PER_ELEMENT = 11
XENT_FORWARD_FLOPS = 6
# Dropout: the mask's product forward (1), the same product backward (1); drawing the mask is not counted.
DROPOUT_FLOPS_PER_ELEMENT = 2
# Bytes per element of a dropout mask: one byte (a bool), whatever the activations' precision.
DROPOUT_MASK_BYTES = 1
# GeLU: the value forward (1), its derivative and the chain-rule product backward (2), as a fused pointwise op.
GELU_FLOPS_PER_ELEMENT = 3


def _elementwise_flops(layer, blk):
    p = layer.param_dict
    elements = np.prod(blk, axis=1)
    # The sum's gradients are copies; a fused op costs its value forward, derivative and product backward.
    # A gated product's input gradient is dy times the other factors: inputs - 1 products per element.
    per_input = (p["inputs"] - 1) * elements if p.get("gated") else np.zeros(len(blk))
    return Flops(forward=elements * ((p["inputs"] - 1) + p["pointwise"]), backward=2.0 * p["pointwise"] * elements,
                 inputs=tuple(per_input for _ in range(p["inputs"])))


def _elementwise_saved(layer):
    if layer.param_dict.get("gated"):
        # d x0 = dy * x1 * f'(x0), d x1 = dy * f(x0): the backward reads every input, not the output.
        return frozenset(range(len(layer.inputs))), frozenset()
    return frozenset(), frozenset({0}) if layer.param_dict.get("pointwise", 0) else frozenset()


@register("Elementwise", _elementwise_flops, no_collectives, contraction=False, saved=_elementwise_saved,
          onnx=("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Relu", "Gelu", "Sigmoid", "Tanh"))
def elementwise(name: str, shape: Sequence[int], dims: Sequence[str], *, inputs: int = 2, pointwise: int = 0,
                gated: bool = False) -> Layer:
    """N-ary elementwise op (residual add, gating...) with ``pointwise`` fused ops.

    FLOPs per element: ``inputs - 1`` additions (their gradients are copies)
    plus 3 per fused pointwise op (value, derivative, chain-rule product).
    Keeps its output for backward when it fuses an op, else nothing.
    ``gated``: the inputs are multiplied, the first through the fused ops,
    ``y = f(x0) * x1 * ...`` (SwiGLU's ``silu(gate) * up``): each input's
    gradient is ``inputs - 1`` more products per element, and the backward
    reads every input instead of the output. No communication: every tensor
    indexes every dimension. Assumed fused with the element-wise layers it
    feeds or is fed by in one kernel, where the roofline prices chains
    (:func:`pase.model.roofline.fused_chains`).
    """
    shape = tuple(shape)
    dims = check_letters(name, dims, shape)
    check_sizes(name, inputs=inputs)
    check_fused(name, pointwise)
    if not isinstance(gated, (bool, np.bool_)):
        raise GraphError(f"layer {name!r}: gated must be true or false, got {gated!r}")
    if gated and inputs < 2:
        raise GraphError(f"layer {name!r}: a gated elementwise op needs at least 2 inputs, got {inputs}")
    # ``gated`` is written only when set: the files of ungated graphs stay as they were.
    extra = {"gated": True} if gated else {}
    return Layer(
        name, "Elementwise", dims, shape,
        inputs=tuple(TensorSpec(shape, dims, f"x{i}") for i in range(inputs)),
        outputs=(TensorSpec(shape, dims, "y"),),
        params=params(shape=shape, dims=dims, inputs=inputs, pointwise=pointwise, **extra),
    )


def _unary_layer(op: str, name: str, shape: Sequence[int], dims: Sequence[str]) -> Layer:
    """A one-input, one-output pointwise layer of op ``op`` over ``dims`` (every tensor indexes every dimension)."""
    shape = tuple(shape)
    dims = check_letters(name, dims, shape)
    return Layer(name, op, dims, shape, inputs=(TensorSpec(shape, dims, "x"),), outputs=(TensorSpec(shape, dims, "y"),),
                 params=params(shape=shape, dims=dims))


def _dropout_flops(layer, blk):
    elements = np.prod(blk, axis=1)
    forward = DROPOUT_FLOPS_PER_ELEMENT / 2
    return Flops(forward=forward * elements, backward=np.zeros(len(blk)),
                 inputs=((DROPOUT_FLOPS_PER_ELEMENT - forward) * elements,))


def _dropout_mask(layer, cfg, blk):
    return block_elements(layer, layer.outputs[0], cfg)


@register("Dropout", _dropout_flops, no_collectives, contraction=False,
          saved=lambda layer: (frozenset(), frozenset()), saved_extra=_dropout_mask,
          saved_extra_bytes=DROPOUT_MASK_BYTES)
def dropout(name: str, shape: Sequence[int], dims: Sequence[str]) -> Layer:
    """Dropout (training mode): ``y = x * mask / (1 - p)``, elementwise over ``dims``.

    Keeps for backward only its mask, ``DROPOUT_MASK_BYTES`` (1) byte per
    element whatever the activations' precision, not its input. FLOPs:
    ``DROPOUT_FLOPS_PER_ELEMENT`` (2) per element, the mask's product forward
    and backward (drawing the mask is not counted). No communication. Assumed
    fused with the element-wise layers it feeds or is fed by (Megatron-LM's
    bias + dropout + add), where the roofline prices chains
    (:func:`pase.model.roofline.fused_chains`).
    """
    return _unary_layer("Dropout", name, shape, dims)


def _gelu_flops(layer, blk):
    elements = np.prod(blk, axis=1)
    return Flops(forward=elements, backward=np.zeros(len(blk)), inputs=((GELU_FLOPS_PER_ELEMENT - 1) * elements,))


@register("Gelu", _gelu_flops, no_collectives, contraction=False,
          saved=lambda layer: (frozenset({0}), frozenset()))
def gelu(name: str, shape: Sequence[int], dims: Sequence[str]) -> Layer:
    """GeLU as a vertex of its own (not fused into the product before it), elementwise over ``dims``.

    Keeps its input for backward (its derivative is a function of the input),
    as Megatron-LM's unfused GeLU does; the next product keeps the output, so
    both count. FLOPs: ``GELU_FLOPS_PER_ELEMENT`` (3) per element, the value
    forward, the derivative and the chain-rule product backward (a fused
    pointwise op's count). No communication. Assumed fused with the
    element-wise layers it feeds or is fed by, where the roofline prices
    chains (:func:`pase.model.roofline.fused_chains`).
    """
    return _unary_layer("Gelu", name, shape, dims)


def _norm_flops(layer, blk):
    elements = np.prod(blk, axis=1)
    return Flops(forward=NORM_FORWARD_FLOPS * elements,
                 backward=NORM_WEIGHT_GRADIENT_FLOPS * elements,
                 inputs=((NORM_FLOPS_PER_ELEMENT - NORM_FORWARD_FLOPS - NORM_WEIGHT_GRADIENT_FLOPS) * elements,))


def _stats(layer, cfg, over, per_row, per_row_backward) -> Collective:
    """All-reduce of per-row statistics over the normalised dimensions ``over``."""
    rows = np.prod(np.where([d in over for d in layer.dims], 1, layer.sizes / cfg), axis=1)
    return Collective("allreduce", (per_row + per_row_backward) * rows, tuple(over), "statistics")


def _bn_collectives(layer, cfg, blk, options=CollectiveOptions()):
    # Mean and variance forward, two gradient sums backward, per channel.
    over = ("b", "h", "w") if options.sync_batchnorm else ("h", "w")
    return weight_gradient_collectives(layer, cfg, blk) + [_stats(layer, cfg, over, 2, 2)]


@register("BatchNorm", _norm_flops, _bn_collectives, contraction=False,
          onnx=("BatchNormalization", "InstanceNormalization"))
def batch_norm(name: str, b: int, c: int, h: int, w: int) -> Layer:
    """Batch normalisation over ``b c h w`` with per-channel scale and shift.

    FLOPs: ``NORM_FLOPS_PER_ELEMENT`` per element. Communication: splitting
    ``b h w`` all-reduces 2 statistics per channel forward and 2 backward, and
    the scale and shift gradients (contraction rule).
    """
    check_sizes(name, b=b, c=c, h=h, w=w)
    dims = ("b", "c", "h", "w")
    return Layer(
        name, "BatchNorm", dims, (b, c, h, w),
        inputs=(TensorSpec((b, c, h, w), dims, "x"),),
        outputs=(TensorSpec((b, c, h, w), dims, "y"),),
        weights=(TensorSpec((c,), ("c",), "scale"), TensorSpec((c,), ("c",), "shift")),
        params=params(b=b, c=c, h=h, w=w),
    )


def _ln_collectives(layer, cfg, blk, options=CollectiveOptions()):
    axis = layer.param_dict["axis"]
    return weight_gradient_collectives(layer, cfg, blk) + [_stats(layer, cfg, (axis,), 2, 2)]


def _row_norm(op: str, name: str, shape: Sequence[int], dims: Sequence[str], axis: str | None,
              weights: tuple[str, ...]) -> Layer:
    """A normalisation over dimension ``axis`` (default the last) with one weight vector of that length per name."""
    shape = tuple(shape)
    dims = check_letters(name, dims, shape)
    axis = dims[-1] if axis is None else axis
    if axis not in dims:
        raise GraphError(f"layer {name!r}: normalised axis {axis!r} is not one of {dims}")
    n = shape[dims.index(axis)]
    return Layer(
        name, op, dims, shape,
        inputs=(TensorSpec(shape, dims, "x"),),
        outputs=(TensorSpec(shape, dims, "y"),),
        weights=tuple(TensorSpec((n,), (axis,), w) for w in weights),
        params=params(shape=shape, dims=dims, axis=axis),
    )


@register("LayerNorm", _norm_flops, _ln_collectives, contraction=False, onnx=("LayerNormalization",))
def layer_norm(name: str, shape: Sequence[int], dims: Sequence[str], axis: str | None = None) -> Layer:
    """Layer normalisation over dimension ``axis`` (default the last) with scale and shift.

    FLOPs: ``NORM_FLOPS_PER_ELEMENT`` per element. Communication: splitting
    ``axis`` all-reduces 2 statistics per row forward and 2 backward; scale and
    shift gradients are all-reduced over the other split dimensions.
    """
    return _row_norm("LayerNorm", name, shape, dims, axis, ("scale", "shift"))


def _rms_norm_flops(layer, blk):
    elements = np.prod(blk, axis=1)
    return Flops(forward=RMS_NORM_FORWARD_FLOPS * elements,
                 backward=RMS_NORM_WEIGHT_GRADIENT_FLOPS * elements,
                 inputs=((RMS_NORM_FLOPS_PER_ELEMENT - RMS_NORM_FORWARD_FLOPS - RMS_NORM_WEIGHT_GRADIENT_FLOPS) * elements,))


def _rms_collectives(layer, cfg, blk, options=CollectiveOptions()):
    # The sum of squares forward, sum(u xhat) backward, per row.
    axis = layer.param_dict["axis"]
    return weight_gradient_collectives(layer, cfg, blk) + [_stats(layer, cfg, (axis,), 1, 1)]


@register("RMSNorm", _rms_norm_flops, _rms_collectives, contraction=False)
def rms_norm(name: str, shape: Sequence[int], dims: Sequence[str], axis: str | None = None) -> Layer:
    """RMS normalisation over dimension ``axis`` (default the last) with a scale and no shift (Llama's norm).

    ``y = scale * x / sqrt(mean(x^2) + eps)``. Keeps its input for backward.
    FLOPs: ``RMS_NORM_FLOPS_PER_ELEMENT`` (13) per element, LayerNorm's count
    without the mean and the shift (the hand count is at the constant).
    Communication: splitting ``axis`` all-reduces 1 statistic per row forward
    (the sum of squares) and 1 backward; the scale's gradient is all-reduced
    over the other split dimensions.
    """
    return _row_norm("RMSNorm", name, shape, dims, axis, ("scale",))


def _softmax_flops(layer, blk):
    elements = np.prod(blk, axis=1)
    return Flops(forward=SOFTMAX_FORWARD_FLOPS * elements, backward=np.zeros(len(blk)),
                 inputs=((SOFTMAX_FLOPS_PER_ELEMENT - SOFTMAX_FORWARD_FLOPS) * elements,))


def _softmax_collectives(layer, cfg, blk, options=CollectiveOptions()):
    # Max and sum forward, one dot product backward, per row.
    return [_stats(layer, cfg, (layer.param_dict["axis"],), 2, 1)]


MASKS = ("none", "causal")


@register("Softmax", _softmax_flops, _softmax_collectives, contraction=False,
          saved=lambda layer: (frozenset(), frozenset({0})), onnx=("Softmax", "LogSoftmax"))
def softmax(name: str, shape: Sequence[int], dims: Sequence[str], axis: str | None = None, mask: str = "none",
            window: int = 0, rotary: bool = False) -> Layer:
    """Softmax along dimension ``axis`` (default the last).

    FLOPs: ``SOFTMAX_FLOPS_PER_ELEMENT`` per element. Communication: splitting
    ``axis`` all-reduces the row maximum and sum forward and one sum backward.

    ``mask`` says which scores attention keeps, for a softmax over attention
    scores (``"none"``: every pair; ``"causal"``: a query sees its own and
    earlier positions, as a decoder does), ``window`` (positions, 0 for none)
    the sliding window a query sees. The softmax itself computes every
    element whatever the mask, as unfused attention does; a fused (flash)
    attention kernel skips the masked blocks (:mod:`pase.model.attention`).
    ``rotary``: the attention's q and k carry rotary position embeddings
    (RoPE), applied to them by a kernel of their own before the scores
    (priced by :mod:`pase.model.attention`; it changes no FLOP count here).

    Raises ``GraphError`` for an unknown mask, a negative window or a ``rotary`` that is not a bool.
    """
    shape = tuple(shape)
    dims = check_letters(name, dims, shape)
    axis = dims[-1] if axis is None else axis
    if axis not in dims:
        raise GraphError(f"layer {name!r}: softmax axis {axis!r} is not one of {dims}")
    if mask not in MASKS:
        raise GraphError(f"layer {name!r}: unknown attention mask {mask!r}; choose one of {', '.join(MASKS)}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise GraphError(f"layer {name!r}: window must be a whole number of positions >= 0 (0: none), got {window!r}")
    if not isinstance(rotary, bool):
        raise GraphError(f"layer {name!r}: rotary must be true or false, got {rotary!r}")
    masking = (({"mask": mask} if mask != "none" else {}) | ({"window": window} if window else {})
               | ({"rotary": True} if rotary else {}))
    return Layer(
        name, "Softmax", dims, shape,
        inputs=(TensorSpec(shape, dims, "x"),),
        outputs=(TensorSpec(shape, dims, "y"),),
        params=params(shape=shape, dims=dims, axis=axis, **masking),
    )


def _xent_flops(layer, blk):
    elements = np.prod(blk, axis=1)
    return Flops(forward=XENT_FORWARD_FLOPS * elements, backward=np.zeros(len(blk)),
                 inputs=((XENT_FLOPS_PER_ELEMENT - XENT_FORWARD_FLOPS) * elements, np.zeros(len(blk))))


def _xent_saved(layer):
    # The labels; the probabilities are kept besides (saved_extra).
    return frozenset(i for i, t in enumerate(layer.inputs) if not t.differentiable), frozenset()


def _xent_extra(layer, cfg, blk):
    return block_elements(layer, layer.inputs[0], cfg)


@register("SoftmaxCrossEntropy", _xent_flops, _softmax_collectives, contraction=False, saved=_xent_saved,
          saved_extra=_xent_extra, onnx=("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"))
def softmax_cross_entropy(name: str, shape: Sequence[int], dims: Sequence[str] = ("b", "n"), axis: str | None = None) -> Layer:
    """Softmax plus cross-entropy loss against integer labels, classes along ``axis``.

    Inputs: logits (``shape``) and labels (``shape`` without ``axis``, no
    gradient). Output: the per-example loss. FLOPs:
    ``XENT_FLOPS_PER_ELEMENT`` per logit. Communication: as :func:`softmax`.
    """
    shape = tuple(shape)
    dims = check_letters(name, dims, shape)
    axis = dims[-1] if axis is None else axis
    if axis not in dims:
        raise GraphError(f"layer {name!r}: class axis {axis!r} is not one of {dims}")
    keep = [i for i, d in enumerate(dims) if d != axis]
    row_shape = tuple(shape[i] for i in keep)
    row_dims = tuple(dims[i] for i in keep)
    return Layer(
        name, "SoftmaxCrossEntropy", dims, shape,
        inputs=(TensorSpec(shape, dims, "logits"), TensorSpec(row_shape, row_dims, "labels", differentiable=False)),
        outputs=(TensorSpec(row_shape, row_dims, "loss"),),
        params=params(shape=shape, dims=dims, axis=axis),
    )
