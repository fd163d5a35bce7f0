"""Matrix products: fully connected layers and general tensor contractions (Einsum)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pase.errors import GraphError
from pase.ir.graph import Layer, TensorSpec
from pase.ops.registry import (
    Collective, CollectiveOptions, Flops, block_elements, check_fused, check_letters, check_sizes, column, halo, no_collectives,
    params, register, weight_gradient_collectives,
)

def _fc_flops(layer, blk):
    p = layer.param_dict
    b, n, c = blk.T
    gemm, out = 2.0 * b * n * c, b * n
    return Flops(forward=gemm + (p["bias"] + p["pointwise"]) * out,
                 backward=gemm + (p["bias"] + 2.0 * p["pointwise"]) * out,
                 inputs=(gemm,))


def _fused_output(layer):
    # A fused nonlinearity's derivative reads the output; the GEMM's gradients read the inputs.
    return frozenset(range(len(layer.inputs))), frozenset({0}) if layer.param_dict.get("pointwise", 0) else frozenset()


@register("FullyConnected", _fc_flops, saved=_fused_output, onnx=("Gemm", "MatMul"))
def fully_connected(name: str, b: int, n: int, c: int, *, pointwise: int = 0, bias: bool = True) -> Layer:
    """Fully connected layer ``y[b, n] = x[b, c] W[n, c] (+ bias[n])`` over ``b n c``.

    FLOPs: forward ``2bnc``; backward ``dx = dy W`` and ``dW = dy^T x``, ``2bnc``
    each, so ``6bnc`` (``4bnc`` when ``x`` is a graph input and takes no
    gradient); a bias adds ``bn`` forward and ``bn`` for its gradient; each
    fused pointwise op (ReLU...) ``3bn`` (value, derivative, product).
    Communication: splitting ``c`` leaves ``y`` partial; splitting ``n``
    leaves ``dx`` partial; splitting ``b`` all-reduces ``dW`` and ``dbias``.
    """
    check_sizes(name, b=b, n=n, c=c)
    check_fused(name, pointwise, bias)
    weights = (TensorSpec((n, c), ("n", "c"), "weight"),)
    if bias:
        weights += (TensorSpec((n,), ("n",), "bias"),)
    return Layer(
        name, "FullyConnected", ("b", "n", "c"), (b, n, c),
        inputs=(TensorSpec((b, c), ("b", "c"), "x"),),
        outputs=(TensorSpec((b, n), ("b", "n"), "y"),),
        weights=weights,
        params=params(b=b, n=n, c=c, pointwise=pointwise, bias=bool(bias)),
    )


def _parse_equation(name: str, equation: str) -> tuple[list[str], str]:
    try:
        lhs, out = equation.replace(" ", "").split("->")
    except ValueError:
        raise GraphError(f"layer {name!r}: einsum equation {equation!r} must look like 'bsd,ed->bse'") from None
    operands = lhs.split(",")
    for term in operands + [out]:
        if not term.isalpha() or len(set(term)) != len(term):
            raise GraphError(f"layer {name!r}: einsum term {term!r} must be distinct letters")
    if not set(out) <= set("".join(operands)):
        raise GraphError(f"layer {name!r}: einsum output {out!r} uses letters no operand has")
    return operands, out


def _einsum_flops(layer, blk):
    p = layer.param_dict
    operands, out = _parse_equation(layer.name, p["equation"])
    total = np.prod(blk, axis=1)
    out_elems = np.prod(blk[:, [layer.dims.index(d) for d in out]], axis=1)
    # One multiply-add per point of the iteration space for a product of two operands
    # (1 FLOP for a one-operand sum); the backward pass computes one such product per
    # operand gradient: the weights' always, each activation input's when it takes one.
    per_point = 2.0 if len(operands) > 1 else 1.0
    n_weights = len(p["weights"])
    return Flops(forward=per_point * total + (p["bias"] + p["pointwise"]) * out_elems,
                 backward=per_point * n_weights * total + (p["bias"] + 2.0 * p["pointwise"]) * out_elems,
                 inputs=tuple(per_point * total for _ in range(len(operands) - n_weights)))


def _einsum_saved(layer):
    keep = frozenset(range(len(layer.inputs))) if (layer.weights or len(layer.inputs) > 1) else frozenset()
    return keep, frozenset({0}) if layer.param_dict.get("pointwise", 0) else frozenset()


@register("Einsum", _einsum_flops, saved=_einsum_saved, onnx=("MatMul", "Einsum", "Mul"))
def einsum(
    name: str,
    equation: str,
    sizes: dict[str, int],
    *,
    weights: Sequence[int] = (),
    pointwise: int = 0,
    bias: bool = False,
) -> Layer:
    """General tensor contraction, e.g. ``"bsd,ed->bse"`` (a feed-forward GEMM).

    ``sizes`` maps every letter to its size; ``weights`` lists the operand
    positions that are trainable weights (the rest are activation inputs, in
    order). The iteration space is every letter, in order of first appearance.

    FLOPs: forward one multiply-add (2 FLOPs) per point of the iteration space
    for two operands (1 FLOP for a one-operand sum); backward one product of
    the same size per operand, so ``6 prod(sizes)`` for two operands; a bias
    ``2`` and a fused pointwise op ``3`` per output element. Communication: the
    contraction rule of the module docstring.
    """
    operands, out = _parse_equation(name, equation)
    dims = tuple(dict.fromkeys("".join(operands) + out))
    missing = [d for d in dims if d not in sizes]
    if missing:
        raise GraphError(f"layer {name!r}: einsum sizes lack letter(s) {missing}")
    check_sizes(name, **{d: sizes[d] for d in dims})
    check_fused(name, pointwise, bias)
    weights = tuple(weights)
    for w in weights:
        if not 0 <= w < len(operands):
            raise GraphError(f"layer {name!r}: weight operand {w} out of range for {equation!r}")
    if len(weights) == len(operands):
        raise GraphError(f"layer {name!r}: every operand of {equation!r} is a weight; one must be an input")

    def spec(term, role):
        return TensorSpec(tuple(sizes[d] for d in term), tuple(term), role)

    ins = tuple(spec(t, f"x{i}") for i, t in enumerate(operands) if i not in weights)
    ws = tuple(spec(t, f"w{i}") for i, t in enumerate(operands) if i in weights)
    if bias:
        # One bias per output feature: the output letters some weight indexes
        # ("bsd,hcd->bshc" has a bias over h c), never the batch or sequence.
        weight_letters = set("".join(operands[i] for i in weights))
        bias_term = "".join(d for d in out if d in weight_letters)
        if not bias_term:
            raise GraphError(f"layer {name!r}: a bias needs an output letter that a weight operand of {equation!r} has")
        ws += (spec(bias_term, "bias"),)
    return Layer(
        name, "Einsum", dims, tuple(sizes[d] for d in dims),
        inputs=ins, outputs=(spec(out, "y"),), weights=ws,
        params=params(equation=equation, sizes={d: int(sizes[d]) for d in dims},
                       weights=list(weights), pointwise=pointwise, bias=bool(bias)),
    )
