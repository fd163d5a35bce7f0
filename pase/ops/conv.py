"""Window ops over images: 2-D convolution and pooling."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pase.errors import GraphError
from pase.ir.graph import Layer, TensorSpec
from pase.ops.registry import (
    Collective, CollectiveOptions, Flops, block_elements, check_fused, check_letters, check_sizes, column, halo, no_collectives,
    params, register, weight_gradient_collectives,
)

def _conv_out(name, size, k, stride, pad, which):
    out = (size + 2 * pad - k) // stride + 1
    if out <= 0:
        raise GraphError(f"layer {name!r}: a {which} of {size} with kernel {k}, stride {stride}, pad {pad} leaves no output")
    return out


def _conv_flops(layer, blk):
    p = layer.param_dict
    b, c, h, w, n, r, s = blk.T
    gemm, out = 2.0 * b * n * c * h * w * r * s, b * n * h * w
    return Flops(forward=gemm + (p["bias"] + p["pointwise"]) * out,
                 backward=gemm + (p["bias"] + 2.0 * p["pointwise"]) * out,
                 inputs=(gemm,))


def _conv_collectives(layer, cfg, blk, options=CollectiveOptions()):
    return weight_gradient_collectives(layer, cfg, blk) + [halo(layer, cfg, blk)]


def _conv_saved(layer):
    return frozenset({0}), frozenset({0}) if layer.param_dict.get("pointwise", 0) else frozenset()


@register("Conv2D", _conv_flops, _conv_collectives, saved=_conv_saved, spatial_dims=("h", "w"), onnx=("Conv",))
def conv2d(
    name: str, b: int, c: int, height: int, width: int, n: int, r: int, s: int | None = None,
    *, stride: int = 1, pad: int | Sequence[int] = 0, pointwise: int = 0, bias: bool = True,
) -> Layer:
    """2-D convolution over ``b c h w n r s`` (``h w``: output rows and columns).

    ``height``/``width`` are the input's; the output has
    ``(height + 2 pad - r) // stride + 1`` rows. ``pad`` is one number or a
    ``(rows, columns)`` pair (InceptionV3's 1x7 and 7x1 kernels). FLOPs: forward ``2bnchwrs``,
    backward data and weight gradients as much again each (``6bnchwrs``; the
    data gradient is skipped for a graph input); bias
    and fused pointwise ops as in :func:`fully_connected`. Communication: the
    contraction rule (split ``c``: partial outputs; split ``n``: partial
    input gradients; split ``b h w``: all-reduce weight gradients) plus halo
    exchange when ``h`` or ``w`` is split. ``r`` and ``s`` are never split.
    """
    s = r if s is None else s
    check_sizes(name, b=b, c=c, height=height, width=width, n=n, r=r, s=s, stride=stride)
    check_fused(name, pointwise, bias)
    pads = (pad, pad) if isinstance(pad, (int, np.integer)) else tuple(pad)
    if len(pads) != 2 or any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0 for x in pads):
        raise GraphError(f"layer {name!r}: pad must be an integer >= 0 or a (rows, columns) pair of them, got {pad!r}")
    pad_h, pad_w = pads
    pad = int(pad_h) if pad_h == pad_w else (int(pad_h), int(pad_w))
    h = _conv_out(name, height, r, stride, pad_h, "height")
    w = _conv_out(name, width, s, stride, pad_w, "width")
    weights = (TensorSpec((n, c, r, s), ("n", "c", "r", "s"), "weight"),)
    if bias:
        weights += (TensorSpec((n,), ("n",), "bias"),)
    return Layer(
        name, "Conv2D", ("b", "c", "h", "w", "n", "r", "s"), (b, c, h, w, n, r, s),
        inputs=(TensorSpec((b, c, height, width), ("b", "c", "h", "w"), "x"),),
        outputs=(TensorSpec((b, n, h, w), ("b", "n", "h", "w"), "y"),),
        weights=weights,
        split_base=(b, c, h, w, n, 1, 1),
        params=params(b=b, c=c, height=height, width=width, n=n, r=r, s=s, stride=stride,
                       pad=pad, pointwise=pointwise, bias=bool(bias)),
    )


def _pool_flops(layer, blk):
    p = layer.param_dict
    window = np.prod(blk, axis=1) * p["kernel"] ** 2
    # Max pooling routes each output's gradient to its one winner; average pooling spreads it over the window.
    backward = np.prod(blk, axis=1) if p["mode"] == "max" else window
    return Flops(forward=window, backward=np.zeros(len(blk)), inputs=(backward,))


def _pool_collectives(layer, cfg, blk, options=CollectiveOptions()):
    return [halo(layer, cfg, blk)]


def _pool_saved(layer):
    # Max pooling needs the input to find the winners; average pooling nothing.
    return (frozenset({0}) if layer.param_dict.get("mode", "max") == "max" else frozenset()), frozenset()


@register("Pooling", _pool_flops, _pool_collectives, contraction=False, saved=_pool_saved, spatial_dims=("h", "w"),
          onnx=("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool"))
def pooling(
    name: str, b: int, c: int, height: int, width: int, kernel: int, stride: int | None = None,
    *, pad: int = 0, mode: str = "max",
) -> Layer:
    """Max or average pooling over ``b c h w`` (output rows and columns).

    A global average pool is ``kernel = height = width``. FLOPs: forward
    ``kernel^2`` compares or adds per output; backward one per output for max
    pooling (the gradient goes to the window's maximum) and ``kernel^2`` for
    average pooling. Communication: halo exchange when ``h`` or ``w`` is
    split; nothing else (no reduction across devices).
    """
    stride = kernel if stride is None else stride
    check_sizes(name, b=b, c=c, height=height, width=width, kernel=kernel, stride=stride)
    if mode not in ("max", "avg"):
        raise GraphError(f"layer {name!r}: pooling mode must be 'max' or 'avg', got {mode!r}")
    h = _conv_out(name, height, kernel, stride, pad, "height")
    w = _conv_out(name, width, kernel, stride, pad, "width")
    return Layer(
        name, "Pooling", ("b", "c", "h", "w"), (b, c, h, w),
        inputs=(TensorSpec((b, c, height, width), ("b", "c", "h", "w"), "x"),),
        outputs=(TensorSpec((b, c, h, w), ("b", "c", "h", "w"), "y"),),
        params=params(b=b, c=c, height=height, width=width, kernel=kernel, stride=stride, pad=pad, mode=mode),
    )
