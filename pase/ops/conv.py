"""Window ops over images: 2-D convolution (plain, dilated, grouped and depthwise) and pooling."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pase.errors import GraphError
from pase.ir.graph import Layer, TensorSpec
from pase.ops.registry import (
    Collective, CollectiveOptions, Flops, check_fused, check_sizes, column, halo, params, register,
    weight_gradient_collectives,
)

def _conv_out(name, size, k, stride, pad, which):
    out = (size + 2 * pad - k) // stride + 1
    if out <= 0:
        raise GraphError(f"layer {name!r}: a {which} of {size} with kernel {k}, stride {stride}, pad {pad} leaves no output")
    return out


def _window_halo(layer, cfg, block, channels) -> Collective:
    """The halo exchange of a convolution whose kernel may be dilated: a block of ``h_b``
    output rows reads ``(h_b - 1) * stride + (r - 1) * dilation + 1`` input rows, the
    effective kernel's span, over ``channels`` input channels per device (an array)."""
    p = layer.param_dict
    dilation = p.get("dilation", 1)
    x = layer.inputs[0]
    b = column(layer, block, "b")
    split_h, split_w = column(layer, cfg, "h"), column(layer, cfg, "w")
    h_in, w_in = x.shape[2] / split_h, x.shape[3] / split_w
    kh, kw = (p["r"] - 1) * dilation + 1, (p["s"] - 1) * dilation + 1
    halo_h = np.where(split_h > 1, max(kh - p["stride"], 0), 0)
    halo_w = np.where(split_w > 1, max(kw - p["stride"], 0), 0)
    return Collective("exchange", 2.0 * b * channels * ((h_in + halo_h) * (w_in + halo_w) - h_in * w_in), ("h", "w"),
                      "halo")


def _check_dilation(name, dilation) -> int:
    if isinstance(dilation, bool) or not isinstance(dilation, (int, np.integer)) or dilation < 1:
        raise GraphError(f"layer {name!r}: dilation must be an integer >= 1, got {dilation!r}")
    return int(dilation)


def _pads(name, pad) -> tuple[int, int]:
    pads = (pad, pad) if isinstance(pad, (int, np.integer)) else tuple(pad)
    if len(pads) != 2 or any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0 for x in pads):
        raise GraphError(f"layer {name!r}: pad must be an integer >= 0 or a (rows, columns) pair of them, got {pad!r}")
    return int(pads[0]), int(pads[1])


def _conv_flops(layer, blk):
    p = layer.param_dict
    b, c, h, w, n, r, s = blk.T
    gemm, out = 2.0 * b * n * c * h * w * r * s, b * n * h * w
    return Flops(forward=gemm + (p["bias"] + p["pointwise"]) * out,
                 backward=gemm + (p["bias"] + 2.0 * p["pointwise"]) * out,
                 inputs=(gemm,))


def _conv_collectives(layer, cfg, blk, options=CollectiveOptions()):
    return weight_gradient_collectives(layer, cfg, blk) + [_window_halo(layer, cfg, blk, column(layer, blk, "c"))]


def _conv_saved(layer):
    return frozenset({0}), frozenset({0}) if layer.param_dict.get("pointwise", 0) else frozenset()


def _window(name: str, height: int, width: int, r: int, s: int, stride: int, pad, dilation: int, pointwise: int,
            bias: bool) -> tuple[int, int, int | tuple[int, int], int]:
    """A convolution's output rows and columns, its ``pad`` as recorded and its checked ``dilation``.

    Raises ``GraphError`` naming layer ``name`` for a bad pad, dilation or fused op, or an empty output.
    """
    check_fused(name, pointwise, bias)
    dilation = _check_dilation(name, dilation)
    pad_h, pad_w = _pads(name, pad)
    h = _conv_out(name, height, (r - 1) * dilation + 1, stride, pad_h, "height")
    w = _conv_out(name, width, (s - 1) * dilation + 1, stride, pad_w, "width")
    return h, w, (pad_h if pad_h == pad_w else (pad_h, pad_w)), dilation


@register("Conv2D", _conv_flops, _conv_collectives, saved=_conv_saved, spatial_dims=("h", "w"), onnx=("Conv",))
def conv2d(
    name: str, b: int, c: int, height: int, width: int, n: int, r: int, s: int | None = None,
    *, stride: int = 1, pad: int | Sequence[int] = 0, pointwise: int = 0, bias: bool = True, dilation: int = 1,
) -> Layer:
    """2-D convolution over ``b c h w n r s`` (``h w``: output rows and columns).

    ``height``/``width`` are the input's; the output has
    ``(height + 2 pad - (r - 1) dilation - 1) // stride + 1`` rows. ``pad`` is one number or a
    ``(rows, columns)`` pair (InceptionV3's 1x7 and 7x1 kernels). A ``dilation`` spreads the
    ``r x s`` kernel over ``(r - 1) dilation + 1`` rows (DeepLab, TCNs): that span sets the
    output size and the halo, the ``r x s`` taps the FLOPs and weights. FLOPs: forward ``2bnchwrs``,
    backward data and weight gradients as much again each (``6bnchwrs``; the
    data gradient is skipped for a graph input); bias
    and fused pointwise ops as in :func:`fully_connected`. Communication: the
    contraction rule (split ``c``: partial outputs; split ``n``: partial
    input gradients; split ``b h w``: all-reduce weight gradients) plus halo
    exchange when ``h`` or ``w`` is split. ``r`` and ``s`` are never split.
    """
    s = r if s is None else s
    check_sizes(name, b=b, c=c, height=height, width=width, n=n, r=r, s=s, stride=stride)
    h, w, pad, dilation = _window(name, height, width, r, s, stride, pad, dilation, pointwise, bias)
    weights = (TensorSpec((n, c, r, s), ("n", "c", "r", "s"), "weight"),)
    if bias:
        weights += (TensorSpec((n,), ("n",), "bias"),)
    # dilation is recorded only when set, so that graphs of plain convolutions keep their files.
    extra = dict(dilation=dilation) if dilation != 1 else {}
    return Layer(
        name, "Conv2D", ("b", "c", "h", "w", "n", "r", "s"), (b, c, h, w, n, r, s),
        inputs=(TensorSpec((b, c, height, width), ("b", "c", "h", "w"), "x"),),
        outputs=(TensorSpec((b, n, h, w), ("b", "n", "h", "w"), "y"),),
        weights=weights,
        split_base=(b, c, h, w, n, 1, 1),
        params=params(b=b, c=c, height=height, width=width, n=n, r=r, s=s, stride=stride,
                       pad=pad, pointwise=pointwise, bias=bool(bias), **extra),
    )


def _grouped_flops(layer, blk):
    p = layer.param_dict
    b, g, c, h, w, n, r, s = blk.T
    gemm, out = 2.0 * b * g * n * c * h * w * r * s, b * g * n * h * w
    return Flops(forward=gemm + (p["bias"] + p["pointwise"]) * out,
                 backward=gemm + (p["bias"] + 2.0 * p["pointwise"]) * out,
                 inputs=(gemm,))


def _grouped_collectives(layer, cfg, blk, options=CollectiveOptions()):
    channels = column(layer, blk, "g") * layer.param_dict["c"]
    return weight_gradient_collectives(layer, cfg, blk) + [_window_halo(layer, cfg, blk, channels)]


@register("GroupedConv2D", _grouped_flops, _grouped_collectives, saved=_conv_saved, spatial_dims=("h", "w"),
          onnx=("Conv",))
def grouped_conv2d(
    name: str, b: int, g: int, c: int, height: int, width: int, n: int, r: int, s: int | None = None,
    *, stride: int = 1, pad: int | Sequence[int] = 0, pointwise: int = 0, bias: bool = True, dilation: int = 1,
) -> Layer:
    """Grouped 2-D convolution over ``b g c h w n r s``, ``g`` groups of ``c`` to ``n`` channels.

    Each group convolves its ``c`` input channels into its own ``n`` output
    channels (depthwise: ``c = 1``; the MobileNet, EfficientNet and ConvNeXt
    blocks, ResNeXt's grouped 3x3s).

    The image has ``g c`` input and ``g n`` output channels, group-major as in ONNX and
    torch; output size, ``pad`` and ``dilation`` as in :func:`conv2d`. FLOPs: forward
    ``2bgnchwrs``, backward data and weight gradients as much again each; bias and fused
    pointwise ops as in :func:`conv2d`. Communication: splitting ``g`` costs nothing (each
    device holds its groups' channels and weights), splitting ``b h w`` all-reduces the
    weight gradients, and ``h w`` exchange halos. ``c``, ``n``, ``r`` and ``s`` are never
    split (the channel axis of the image is split by group).
    """
    s = r if s is None else s
    check_sizes(name, b=b, g=g, c=c, height=height, width=width, n=n, r=r, s=s, stride=stride)
    h, w, pad, dilation = _window(name, height, width, r, s, stride, pad, dilation, pointwise, bias)
    weights = (TensorSpec((g * n, c, r, s), ("g", None, None, None), "weight"),)
    if bias:
        weights += (TensorSpec((g * n,), ("g",), "bias"),)
    return Layer(
        name, "GroupedConv2D", ("b", "g", "c", "h", "w", "n", "r", "s"), (b, g, c, h, w, n, r, s),
        inputs=(TensorSpec((b, g * c, height, width), ("b", "g", "h", "w"), "x"),),
        outputs=(TensorSpec((b, g * n, h, w), ("b", "g", "h", "w"), "y"),),
        weights=weights,
        split_base=(b, g, 1, h, w, 1, 1, 1),
        params=params(b=b, g=g, c=c, height=height, width=width, n=n, r=r, s=s, stride=stride,
                       pad=pad, pointwise=pointwise, bias=bool(bias), dilation=dilation),
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
