"""The layer library: builders for every op and the op's cost formulas.

Each op registers an :class:`OpSpec` in :data:`OPS`: a builder that turns
keyword parameters into a :class:`~pase.graph.Layer`, and two vectorised
formulas over a batch of configurations:

* ``flops(layer, block)``: training FLOPs (forward + backward) of one device's
  block of the iteration space, ``block`` a float array ``(K, ndims)`` of
  per-device dimension sizes. A multiply-add counts as 2 FLOPs. Evaluated on
  the unsplit sizes it gives the layer's total training FLOPs.
* ``collectives(layer, cfg, block)``: the communication inside the layer
  under configurations ``cfg`` (float array ``(K, ndims)`` of split factors),
  as a list of :class:`Collective`: all-reduces of partial sums,
  weight-gradient all-reduces, halo exchange, normalisation statistics.

That list is the only statement of an op's communication. Priced on a flat
ring of the ``k`` devices of each group it gives the elements one device
sends (:func:`comm_elements`, the paper's model): ``2 (k - 1) / k`` times the
block for an all-reduce, ``(k - 1) / k`` of the result for an all-gather, the
elements themselves for an exchange. :mod:`pase.topology` prices the same
list on a two-level cluster.

The shared rule for contractions (GEMM, Einsum, convolution, embedding,
reduce): splitting a dimension that a tensor does not index leaves partial
results of that tensor on the devices of the split, which a ring all-reduce
combines. That covers the forward output (split reduction dimension), every
input gradient in the backward pass, and every weight gradient over the
output dimensions the weight lacks (the data-parallel all-reduce).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd, prod
from typing import Callable, Sequence

import numpy as np

from pase.errors import GraphError
from pase.graph import Layer, TensorSpec

__all__ = [
    "Collective",
    "OpSpec",
    "OPS",
    "build_layer",
    "training_flops",
    "tensor_splits",
    "edge_blocks",
    "collectives",
    "comm_elements",
    "fully_connected",
    "einsum",
    "conv2d",
    "pooling",
    "elementwise",
    "batch_norm",
    "layer_norm",
    "softmax",
    "softmax_cross_entropy",
    "embedding",
    "lstm",
    "concat",
    "split",
    "reshape",
    "transpose",
    "reduce_mean",
]

# FLOPs per element of the normalisation and softmax ops (forward + backward).
# Forward batch/layer norm: mean (1), variance (2), normalise (2), scale+shift (2), ~1 misc;
# backward about 1.5x forward. Softmax forward: max, subtract, exp, sum, divide (5);
# backward y * (dy - sum(dy * y)) (4).
NORM_FLOPS_PER_ELEMENT = 20
SOFTMAX_FLOPS_PER_ELEMENT = 9
# Softmax plus log, pick and their gradients.
XENT_FLOPS_PER_ELEMENT = 11
# LSTM gate nonlinearities and cell update per hidden unit and step, forward + backward.
LSTM_POINTWISE_FLOPS = 30


KINDS = ("allreduce", "allgather", "exchange")


@dataclass(frozen=True, eq=False)
class Collective:
    """One communication inside a layer, for every configuration of a batch.

    Attributes
    ----------
    kind : str
        ``"allreduce"`` (``elements``: the block reduced), ``"allgather"``
        (``elements``: the gathered result) or ``"exchange"`` (``elements``:
        what each device sends to its neighbours).
    elements : ndarray
        ``(K,)`` elements per device, one per configuration.
    dims : tuple of str
        The group: devices that differ only in these dimensions of the layer.
    what : str
        Short description (``"y partial sums"``, ``"weight gradient"``...).
    """

    kind: str
    elements: np.ndarray
    dims: tuple[str, ...]
    what: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"collective {self.what!r}: kind {self.kind!r} is not one of {KINDS}")

    def ring_elements(self, k: np.ndarray) -> np.ndarray:
        """Elements one device sends in this collective on a flat ring of ``k`` devices."""
        if self.kind == "allreduce":
            return allreduce(self.elements, k)
        if self.kind == "allgather":
            return self.elements * (k - 1) / k
        return self.elements


@dataclass(frozen=True)
class OpSpec:
    """An op: its builder and cost formulas (see the module docstring)."""

    name: str
    build: Callable[..., Layer]
    flops: Callable[[Layer, np.ndarray], np.ndarray]
    collectives: Callable[[Layer, np.ndarray, np.ndarray], list[Collective]]
    spatial_dims: tuple[str, ...] = ()


OPS: dict[str, OpSpec] = {}


def _register(name, flops, collectives=None, spatial_dims=()):
    def wrap(build):
        OPS[name] = OpSpec(name, build, flops, collectives or contraction_collectives, spatial_dims)
        return build

    return wrap


def build_layer(op: str, name: str, **params) -> Layer:
    """Build a layer of op kind ``op`` from its builder's keyword parameters.

    Raises
    ------
    GraphError
        The op is unknown or a parameter is missing, unknown or invalid; the
        message names the layer.
    """
    if op not in OPS:
        raise GraphError(f"layer {name!r}: unknown op {op!r}; known ops: {', '.join(sorted(OPS))}")
    try:
        return OPS[op].build(name, **params)
    except TypeError as exc:
        raise GraphError(f"layer {name!r} ({op}): {exc}") from None


def training_flops(layer: Layer) -> float:
    """Training FLOPs (forward + backward) of the whole, unsplit layer."""
    block = np.asarray(layer.sizes, dtype=float)[None, :]
    return float(OPS[layer.op].flops(layer, block)[0])


def collectives(layer: Layer, configs: np.ndarray) -> list[Collective]:
    """The collectives of ``layer`` under each configuration (rows of ``configs``)."""
    cfg = np.asarray(configs, dtype=float)
    return OPS[layer.op].collectives(layer, cfg, np.asarray(layer.sizes, dtype=float) / cfg)


def comm_elements(layer: Layer, configs: np.ndarray) -> np.ndarray:
    """Elements one device sends inside ``layer`` under each configuration (flat ring model)."""
    cfg = np.asarray(configs, dtype=float)
    total = np.zeros(len(cfg))
    for c in collectives(layer, cfg):
        total += c.ring_elements(split_over(layer, cfg, c.dims))
    return total


# -- shared helpers ------------------------------------------------------------------


def _check_sizes(name: str, **sizes) -> None:
    for field, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise GraphError(f"layer {name!r}: {field} must be a positive integer, got {value!r}")


def _check_letters(name: str, dims: Sequence[str], shape: Sequence[int]) -> tuple[str, ...]:
    dims = tuple(dims)
    if len(dims) != len(shape):
        raise GraphError(f"layer {name!r}: {len(dims)} dimension names {dims} for a shape of {len(shape)} axes")
    _check_sizes(name, **{f"shape[{i}]": s for i, s in enumerate(shape)})
    return dims


def _params(**kw) -> tuple[tuple[str, object], ...]:
    return tuple((k, list(v) if isinstance(v, tuple) else v) for k, v in kw.items())


def column(layer: Layer, arr: np.ndarray, dim: str) -> np.ndarray:
    """Column of ``arr`` (shape ``(K, ndims)``) for dimension ``dim``."""
    return arr[:, layer.dims.index(dim)]


def split_over(layer: Layer, cfg: np.ndarray, dims) -> np.ndarray:
    """Number of devices a configuration spreads over the dimensions ``dims``."""
    idx = [layer.dims.index(d) for d in dims]
    return np.prod(cfg[:, idx], axis=1) if idx else np.ones(len(cfg))


def tensor_splits(layer: Layer, tensor: TensorSpec, cfg: np.ndarray) -> np.ndarray:
    """Split factor of every axis of ``tensor`` under each configuration, ``(K, naxes)`` int."""
    cols = [cfg[:, layer.dims.index(a)] if a is not None else np.ones(len(cfg), dtype=np.int64) for a in tensor.axes]
    return np.stack(cols, axis=1) if cols else np.ones((len(cfg), 0), dtype=np.int64)


def edge_blocks(
    src: Layer, src_output: int, src_configs: np.ndarray,
    dst: Layer, dst_input: int, dst_configs: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """What a consumer device needs of an edge's tensor and what it already holds, in elements.

    Returns ``needed`` ``(K_dst,)`` and ``held`` ``(K_src, K_dst)``. Aligned
    blocks overlap by the smaller extent along every axis. Nothing is held
    when the consumer uses more devices than the producer (some of its devices
    took no part), nor, as in the paper's prototype, when it cuts the tensor
    into more pieces than the producer did (the producer's replicas of a piece
    cannot in general sit where every consumer of it wants them).
    """
    tensor = dst.inputs[dst_input]
    shape = np.asarray(tensor.shape, dtype=float)
    src_split = tensor_splits(src, src.outputs[src_output], src_configs)  # (Ks, A)
    dst_split = tensor_splits(dst, tensor, dst_configs)  # (Kd, A)
    need = shape / dst_split
    held = np.prod(np.minimum((shape / src_split)[:, None, :], need[None, :, :]), axis=2)
    more_devices = np.prod(dst_configs, axis=1)[None, :] > np.prod(src_configs, axis=1)[:, None]
    more_pieces = np.prod(dst_split, axis=1)[None, :] > np.prod(src_split, axis=1)[:, None]
    return np.prod(need, axis=1), np.where(more_devices | more_pieces, 0.0, held)


def block_elements(layer: Layer, tensor: TensorSpec, cfg: np.ndarray) -> np.ndarray:
    """Elements of ``tensor`` each device holds under each configuration."""
    out = np.full(len(cfg), float(prod(tensor.shape)))
    for size, axis in zip(tensor.shape, tensor.axes):
        if axis is not None:
            out /= column(layer, cfg, axis)
    return out


def allreduce(elements: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Elements one device sends in a ring all-reduce of ``elements`` among ``k`` devices."""
    return 2.0 * (k - 1) / k * elements


def _missing(layer: Layer, tensor: TensorSpec) -> tuple[str, ...]:
    return tuple(d for d in layer.dims if d not in tensor.axes)


def contraction_collectives(layer: Layer, cfg: np.ndarray, block: np.ndarray) -> list[Collective]:
    """All-reduces of partial sums: outputs, input gradients, weight gradients (module docstring).

    A weight's gradient sums the output gradient over the output dimensions
    the weight lacks (the batch, image rows...); devices that differ only in a
    dimension the output lacks (an in-channel split for a bias) compute the
    same gradient and exchange nothing.
    """
    out = [Collective("allreduce", block_elements(layer, t, cfg), _missing(layer, t), f"{t.name} {role}")
           for t, role in ([(t, "partial sums") for t in layer.outputs]
                           + [(t, "gradient") for t in layer.inputs if t.differentiable])]
    out_dims = {a for t in layer.outputs for a in t.axes}
    for w in layer.weights:
        reduced = tuple(d for d in _missing(layer, w) if d in out_dims)
        out.append(Collective("allreduce", block_elements(layer, w, cfg), reduced, f"{w.name} weight gradient"))
    return out


def _halo(layer: Layer, cfg: np.ndarray, block: np.ndarray) -> Collective:
    """Exchange of the halo rows and columns a device needs when a window op splits h or w.

    A block of ``h_b`` output rows reads ``(h_b - 1) * stride + r`` input rows,
    ``r - stride`` more than it owns; the same volume of gradient flows back.
    """
    p = layer.param_dict
    x = layer.inputs[0]
    b, c = block[:, 0], block[:, 1]
    h_in = x.shape[2] / column(layer, cfg, "h")
    w_in = x.shape[3] / column(layer, cfg, "w")
    kh, kw = p.get("r", p.get("kernel")), p.get("s", p.get("kernel"))
    halo_h = np.where(column(layer, cfg, "h") > 1, max(kh - p["stride"], 0), 0)
    halo_w = np.where(column(layer, cfg, "w") > 1, max(kw - p["stride"], 0), 0)
    return Collective("exchange", 2.0 * b * c * ((h_in + halo_h) * (w_in + halo_w) - h_in * w_in), ("h", "w"), "halo")


# -- GEMM-like ops -------------------------------------------------------------------


def _fc_flops(layer, blk):
    p = layer.param_dict
    b, n, c = blk.T
    return 6.0 * b * n * c + (2.0 * p["bias"] + 3.0 * p["pointwise"]) * b * n


@_register("FullyConnected", _fc_flops)
def fully_connected(name: str, b: int, n: int, c: int, *, pointwise: int = 0, bias: bool = True) -> Layer:
    """Fully connected layer ``y[b, n] = x[b, c] W[n, c] (+ bias[n])`` over ``b n c``.

    FLOPs: forward ``2bnc``; backward ``dx = dy W`` and ``dW = dy^T x``, ``2bnc``
    each, so ``6bnc``; a bias adds ``bn`` forward and ``bn`` for its gradient;
    each fused pointwise op (ReLU...) ``3bn`` (value, derivative, product).
    Communication: splitting ``c`` all-reduces ``y``; splitting ``n``
    all-reduces ``dx``; splitting ``b`` all-reduces ``dW`` and ``dbias``.
    """
    _check_sizes(name, b=b, n=n, c=c)
    weights = (TensorSpec((n, c), ("n", "c"), "weight"),)
    if bias:
        weights += (TensorSpec((n,), ("n",), "bias"),)
    return Layer(
        name, "FullyConnected", ("b", "n", "c"), (b, n, c),
        inputs=(TensorSpec((b, c), ("b", "c"), "x"),),
        outputs=(TensorSpec((b, n), ("b", "n"), "y"),),
        weights=weights,
        params=_params(b=b, n=n, c=c, pointwise=pointwise, bias=bool(bias)),
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
    # One multiply-add per point of the iteration space for a product of two operands;
    # the backward pass computes one such product per operand gradient.
    per_point = 2.0 if len(operands) > 1 else 1.0
    return per_point * (1 + len(operands)) * total + (2.0 * p["bias"] + 3.0 * p["pointwise"]) * out_elems


@_register("Einsum", _einsum_flops)
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
    _check_sizes(name, **{d: sizes[d] for d in dims})
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
        params=_params(equation=equation, sizes={d: int(sizes[d]) for d in dims},
                       weights=list(weights), pointwise=pointwise, bias=bool(bias)),
    )


def _conv_out(name, size, k, stride, pad, which):
    out = (size + 2 * pad - k) // stride + 1
    if out <= 0:
        raise GraphError(f"layer {name!r}: a {which} of {size} with kernel {k}, stride {stride}, pad {pad} leaves no output")
    return out


def _conv_flops(layer, blk):
    p = layer.param_dict
    b, c, h, w, n, r, s = blk.T
    return 6.0 * b * n * c * h * w * r * s + (2.0 * p["bias"] + 3.0 * p["pointwise"]) * b * n * h * w


def _conv_collectives(layer, cfg, blk):
    return contraction_collectives(layer, cfg, blk) + [_halo(layer, cfg, blk)]


@_register("Conv2D", _conv_flops, _conv_collectives, spatial_dims=("h", "w"))
def conv2d(
    name: str, b: int, c: int, height: int, width: int, n: int, r: int, s: int | None = None,
    *, stride: int = 1, pad: int | Sequence[int] = 0, pointwise: int = 0, bias: bool = True,
) -> Layer:
    """2-D convolution over ``b c h w n r s`` (``h w``: output rows and columns).

    ``height``/``width`` are the input's; the output has
    ``(height + 2 pad - r) // stride + 1`` rows. ``pad`` is one number or a
    ``(rows, columns)`` pair (InceptionV3's 1x7 and 7x1 kernels). FLOPs: forward ``2bnchwrs``,
    backward data and weight gradients as much again each (``6bnchwrs``); bias
    and fused pointwise ops as in :func:`fully_connected`. Communication: the
    contraction rule (split ``c``: all-reduce outputs; split ``n``: all-reduce
    input gradients; split ``b h w``: all-reduce weight gradients) plus halo
    exchange when ``h`` or ``w`` is split. ``r`` and ``s`` are never split.
    """
    s = r if s is None else s
    _check_sizes(name, b=b, c=c, height=height, width=width, n=n, r=r, s=s, stride=stride)
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
        params=_params(b=b, c=c, height=height, width=width, n=n, r=r, s=s, stride=stride,
                       pad=pad, pointwise=pointwise, bias=bool(bias)),
    )


def _pool_flops(layer, blk):
    k = layer.param_dict["kernel"]
    return 2.0 * np.prod(blk, axis=1) * k * k


@_register("Pooling", _pool_flops, lambda layer, cfg, blk: [_halo(layer, cfg, blk)], spatial_dims=("h", "w"))
def pooling(
    name: str, b: int, c: int, height: int, width: int, kernel: int, stride: int | None = None,
    *, pad: int = 0, mode: str = "max",
) -> Layer:
    """Max or average pooling over ``b c h w`` (output rows and columns).

    A global average pool is ``kernel = height = width``. FLOPs: forward
    ``kernel^2`` compares or adds per output, backward as many, so
    ``2 bchw kernel^2``. Communication: halo exchange when ``h`` or ``w`` is
    split; nothing else (no reduction across devices).
    """
    stride = kernel if stride is None else stride
    _check_sizes(name, b=b, c=c, height=height, width=width, kernel=kernel, stride=stride)
    if mode not in ("max", "avg"):
        raise GraphError(f"layer {name!r}: pooling mode must be 'max' or 'avg', got {mode!r}")
    h = _conv_out(name, height, kernel, stride, pad, "height")
    w = _conv_out(name, width, kernel, stride, pad, "width")
    return Layer(
        name, "Pooling", ("b", "c", "h", "w"), (b, c, h, w),
        inputs=(TensorSpec((b, c, height, width), ("b", "c", "h", "w"), "x"),),
        outputs=(TensorSpec((b, c, h, w), ("b", "c", "h", "w"), "y"),),
        params=_params(b=b, c=c, height=height, width=width, kernel=kernel, stride=stride, pad=pad, mode=mode),
    )


# -- pointwise and normalisation ops ------------------------------------------------------


def _elementwise_flops(layer, blk):
    p = layer.param_dict
    return np.prod(blk, axis=1) * ((p["inputs"] - 1) + 3.0 * p["pointwise"])


@_register("Elementwise", _elementwise_flops)
def elementwise(name: str, shape: Sequence[int], dims: Sequence[str], *, inputs: int = 2, pointwise: int = 0) -> Layer:
    """N-ary elementwise op (residual add, gating...) with ``pointwise`` fused ops.

    FLOPs per element: ``inputs - 1`` additions (their gradients are copies)
    plus 3 per fused pointwise op (value, derivative, chain-rule product).
    No communication: every tensor indexes every dimension.
    """
    shape = tuple(shape)
    dims = _check_letters(name, dims, shape)
    _check_sizes(name, inputs=inputs)
    if pointwise < 0:
        raise GraphError(f"layer {name!r}: pointwise must be >= 0, got {pointwise}")
    return Layer(
        name, "Elementwise", dims, shape,
        inputs=tuple(TensorSpec(shape, dims, f"x{i}") for i in range(inputs)),
        outputs=(TensorSpec(shape, dims, "y"),),
        params=_params(shape=shape, dims=dims, inputs=inputs, pointwise=pointwise),
    )


def _norm_flops(layer, blk):
    return NORM_FLOPS_PER_ELEMENT * np.prod(blk, axis=1)


def _stats(layer, cfg, over, per_row, per_row_backward) -> Collective:
    """All-reduce of per-row statistics over the normalised dimensions ``over``."""
    rows = np.prod(np.where([d in over for d in layer.dims], 1, layer.sizes / cfg), axis=1)
    return Collective("allreduce", (per_row + per_row_backward) * rows, tuple(over), "statistics")


def _bn_collectives(layer, cfg, blk):
    # Mean and variance forward, two gradient sums backward, per channel.
    return contraction_collectives(layer, cfg, blk) + [_stats(layer, cfg, ("b", "h", "w"), 2, 2)]


@_register("BatchNorm", _norm_flops, _bn_collectives)
def batch_norm(name: str, b: int, c: int, h: int, w: int) -> Layer:
    """Batch normalisation over ``b c h w`` with per-channel scale and shift.

    FLOPs: ``NORM_FLOPS_PER_ELEMENT`` per element. Communication: splitting
    ``b h w`` all-reduces 2 statistics per channel forward and 2 backward, and
    the scale and shift gradients (contraction rule).
    """
    _check_sizes(name, b=b, c=c, h=h, w=w)
    dims = ("b", "c", "h", "w")
    return Layer(
        name, "BatchNorm", dims, (b, c, h, w),
        inputs=(TensorSpec((b, c, h, w), dims, "x"),),
        outputs=(TensorSpec((b, c, h, w), dims, "y"),),
        weights=(TensorSpec((c,), ("c",), "scale"), TensorSpec((c,), ("c",), "shift")),
        params=_params(b=b, c=c, h=h, w=w),
    )


def _ln_collectives(layer, cfg, blk):
    axis = layer.param_dict["axis"]
    return contraction_collectives(layer, cfg, blk) + [_stats(layer, cfg, (axis,), 2, 2)]


@_register("LayerNorm", _norm_flops, _ln_collectives)
def layer_norm(name: str, shape: Sequence[int], dims: Sequence[str], axis: str | None = None) -> Layer:
    """Layer normalisation over dimension ``axis`` (default the last) with scale and shift.

    FLOPs: ``NORM_FLOPS_PER_ELEMENT`` per element. Communication: splitting
    ``axis`` all-reduces 2 statistics per row forward and 2 backward; scale and
    shift gradients are all-reduced over the other split dimensions.
    """
    shape = tuple(shape)
    dims = _check_letters(name, dims, shape)
    axis = dims[-1] if axis is None else axis
    if axis not in dims:
        raise GraphError(f"layer {name!r}: normalised axis {axis!r} is not one of {dims}")
    n = shape[dims.index(axis)]
    return Layer(
        name, "LayerNorm", dims, shape,
        inputs=(TensorSpec(shape, dims, "x"),),
        outputs=(TensorSpec(shape, dims, "y"),),
        weights=(TensorSpec((n,), (axis,), "scale"), TensorSpec((n,), (axis,), "shift")),
        params=_params(shape=shape, dims=dims, axis=axis),
    )


def _softmax_flops(layer, blk):
    return SOFTMAX_FLOPS_PER_ELEMENT * np.prod(blk, axis=1)


def _softmax_collectives(layer, cfg, blk):
    # Max and sum forward, one dot product backward, per row.
    return [_stats(layer, cfg, (layer.param_dict["axis"],), 2, 1)]


@_register("Softmax", _softmax_flops, _softmax_collectives)
def softmax(name: str, shape: Sequence[int], dims: Sequence[str], axis: str | None = None) -> Layer:
    """Softmax along dimension ``axis`` (default the last).

    FLOPs: ``SOFTMAX_FLOPS_PER_ELEMENT`` per element. Communication: splitting
    ``axis`` all-reduces the row maximum and sum forward and one sum backward.
    """
    shape = tuple(shape)
    dims = _check_letters(name, dims, shape)
    axis = dims[-1] if axis is None else axis
    if axis not in dims:
        raise GraphError(f"layer {name!r}: softmax axis {axis!r} is not one of {dims}")
    return Layer(
        name, "Softmax", dims, shape,
        inputs=(TensorSpec(shape, dims, "x"),),
        outputs=(TensorSpec(shape, dims, "y"),),
        params=_params(shape=shape, dims=dims, axis=axis),
    )


def _xent_flops(layer, blk):
    return XENT_FLOPS_PER_ELEMENT * np.prod(blk, axis=1)


@_register("SoftmaxCrossEntropy", _xent_flops, _softmax_collectives)
def softmax_cross_entropy(name: str, shape: Sequence[int], dims: Sequence[str] = ("b", "n"), axis: str | None = None) -> Layer:
    """Softmax plus cross-entropy loss against integer labels, classes along ``axis``.

    Inputs: logits (``shape``) and labels (``shape`` without ``axis``, no
    gradient). Output: the per-example loss. FLOPs:
    ``XENT_FLOPS_PER_ELEMENT`` per logit. Communication: as :func:`softmax`.
    """
    shape = tuple(shape)
    dims = _check_letters(name, dims, shape)
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
        params=_params(shape=shape, dims=dims, axis=axis),
    )


# -- sequence ops ---------------------------------------------------------------------


def _embedding_flops(layer, blk):
    b, s, d, v = blk.T
    # A gather forward and a scatter-add backward, one op per output element each;
    # a vocabulary shard does not shrink the work: every device scans every token.
    return 2.0 * b * s * d


@_register("Embedding", _embedding_flops)
def embedding(name: str, b: int, s: int, d: int, v: int) -> Layer:
    """Embedding lookup ``y[b, s, d] = W[ids[b, s], d]`` over ``b s d v``.

    FLOPs: ``2bsd`` (gather forward, scatter-add backward), whatever the
    vocabulary split. Communication: splitting ``v`` leaves each device the
    rows of its vocabulary shard, so the output is all-reduced; splitting
    ``b s`` all-reduces the ``v x d`` weight gradient (the cost that makes
    data parallelism poor for large vocabularies).
    """
    _check_sizes(name, b=b, s=s, d=d, v=v)
    return Layer(
        name, "Embedding", ("b", "s", "d", "v"), (b, s, d, v),
        inputs=(TensorSpec((b, s), ("b", "s"), "ids", differentiable=False),),
        outputs=(TensorSpec((b, s, d), ("b", "s", "d"), "y"),),
        weights=(TensorSpec((v, d), ("v", "d"), "weight"),),
        params=_params(b=b, s=s, d=d, v=v),
    )


def _lstm_flops(layer, blk):
    l, b, s, d, e = blk.T
    full_e = layer.size_of["e"]
    # Per layer and step: gates = [x; h] @ W, 4e outputs over d + e inputs. The
    # recurrent input h is gathered whole, so its part does not shrink with the e split.
    gemm = 6.0 * l * b * s * 4 * e * (d + full_e)
    k_l = layer.size_of["l"] / l
    seq = layer.size_of["s"]
    # Splitting l pipelines layers over the sequence: s + k_l - 1 stage-steps instead of s.
    return (gemm + LSTM_POINTWISE_FLOPS * l * b * s * e) * (seq + k_l - 1) / seq


def _lstm_collectives(layer, cfg, blk):
    l, b, s, d, e = blk.T
    full_e = layer.size_of["e"]
    return [
        Collective("allreduce", l * b * s * 4 * e, ("d",), "input projection partial sums"),
        # h gathered whole every step, forward and backward.
        Collective("allgather", 2.0 * l * s * b * full_e, ("e",), "hidden state"),
        Collective("allreduce", b * s * d, ("e",), "x gradient"),
        # Activations and gradients between stages.
        Collective("exchange", np.where(column(layer, cfg, "l") > 1, 2.0 * b * s * e, 0.0), ("l",), "pipeline stages"),
    ] + [Collective("allreduce", block_elements(layer, w, cfg), ("b",), f"{w.name} weight gradient")
         for w in layer.weights]


@_register("LSTM", _lstm_flops, _lstm_collectives)
def lstm(name: str, l: int, b: int, s: int, d: int, e: int) -> Layer:
    """A whole ``l``-layer LSTM as one vertex over ``l b s d e`` (the paper's form).

    ``d``: input features, ``e``: hidden units (each layer's input is taken as
    ``d`` wide, exact when ``d == e``). FLOPs per layer and step: the gate GEMM
    ``[x; h] (4e x (d+e))``, ``2 * 4e(d+e)`` forward and twice that backward,
    plus ``LSTM_POINTWISE_FLOPS`` per hidden unit. Splitting ``l`` k ways
    pipelines the layers over the sequence: ``s + k - 1`` stage-steps instead
    of ``s``, plus activations and gradients passed between stages. Splitting
    ``e`` gathers the hidden state every step; splitting ``d`` all-reduces the
    input projection; ``b`` all-reduces weight gradients. ``s`` is never split
    (the recurrence is sequential).
    """
    _check_sizes(name, l=l, b=b, s=s, d=d, e=e)
    dims = ("l", "b", "s", "d", "e")
    return Layer(
        name, "LSTM", dims, (l, b, s, d, e),
        inputs=(TensorSpec((b, s, d), ("b", "s", "d"), "x"),),
        outputs=(TensorSpec((b, s, e), ("b", "s", "e"), "y"),),
        weights=(
            TensorSpec((l, d, 4 * e), ("l", "d", "e"), "w_input"),
            TensorSpec((l, e, 4 * e), ("l", None, "e"), "w_hidden"),
            TensorSpec((l, 4 * e), ("l", "e"), "bias"),
        ),
        split_base=(l, b, 1, d, e),
        params=_params(l=l, b=b, s=s, d=d, e=e),
    )


# -- data movement ------------------------------------------------------------------


def _zero_flops(layer, blk):
    return np.zeros(len(blk))


def _no_collectives(layer, cfg, blk):
    return []


@_register("Concat", _zero_flops, _no_collectives)
def concat(name: str, shapes: Sequence[Sequence[int]], dims: Sequence[str], axis: str) -> Layer:
    """Concatenate input tensors along dimension ``axis`` (which is never split).

    FLOPs: 0 (a copy). Communication: none inside the layer; inputs laid out
    differently arrive through edge costs.
    """
    shapes = [tuple(s) for s in shapes]
    if not shapes:
        raise GraphError(f"layer {name!r}: concat needs at least one input")
    dims = _check_letters(name, dims, shapes[0])
    if axis not in dims:
        raise GraphError(f"layer {name!r}: concat axis {axis!r} is not one of {dims}")
    a = dims.index(axis)
    for i, s in enumerate(shapes):
        _check_letters(name, dims, s)
        if s[:a] + s[a + 1:] != shapes[0][:a] + shapes[0][a + 1:]:
            raise GraphError(f"layer {name!r}: input {i} shape {s} differs from {shapes[0]} off the concat axis {axis!r}")
    out = list(shapes[0])
    out[a] = sum(s[a] for s in shapes)
    base = tuple(1 if d == axis else n for d, n in zip(dims, out))
    return Layer(
        name, "Concat", dims, tuple(out),
        inputs=tuple(TensorSpec(s, dims, f"x{i}") for i, s in enumerate(shapes)),
        outputs=(TensorSpec(tuple(out), dims, "y"),),
        split_base=base,
        params=_params(shapes=[list(s) for s in shapes], dims=dims, axis=axis),
    )


@_register("Split", _zero_flops, _no_collectives)
def split(name: str, shape: Sequence[int], dims: Sequence[str], axis: str, parts: Sequence[int]) -> Layer:
    """Split a tensor along ``axis`` (never split across devices) into ``parts`` sizes.

    FLOPs: 0. Communication: none inside the layer.
    """
    shape = tuple(shape)
    dims = _check_letters(name, dims, shape)
    if axis not in dims:
        raise GraphError(f"layer {name!r}: split axis {axis!r} is not one of {dims}")
    a = dims.index(axis)
    parts = [int(p) for p in parts]
    if any(p <= 0 for p in parts) or sum(parts) != shape[a]:
        raise GraphError(f"layer {name!r}: parts {parts} must be positive and sum to {shape[a]} (axis {axis!r})")
    outs = []
    for i, p in enumerate(parts):
        s = list(shape)
        s[a] = p
        outs.append(TensorSpec(tuple(s), dims, f"y{i}"))
    return Layer(
        name, "Split", dims, shape,
        inputs=(TensorSpec(shape, dims, "x"),),
        outputs=tuple(outs),
        split_base=tuple(1 if d == axis else n for d, n in zip(dims, shape)),
        params=_params(shape=shape, dims=dims, axis=axis, parts=parts),
    )


def _reshape_groups(name, src, dst):
    """Pairs of (input axes, output axes) ranges whose sizes multiply to the same total."""
    if prod(src) != prod(dst):
        raise GraphError(f"layer {name!r}: cannot reshape {tuple(src)} ({prod(src)} elements) to {tuple(dst)} ({prod(dst)})")
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        gi, gj, pi, pj = [i], [j], src[i] if i < len(src) else 1, dst[j] if j < len(dst) else 1
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                pi *= src[i]
                gi.append(i)
                i += 1
            else:
                pj *= dst[j]
                gj.append(j)
                j += 1
        groups.append(([a for a in gi if a < len(src)], [b for b in gj if b < len(dst)]))
    return groups


@_register("Reshape", _zero_flops, _no_collectives)
def reshape(name: str, shape: Sequence[int], dims: Sequence[str], out_shape: Sequence[int]) -> Layer:
    """Reshape (flatten, unflatten heads...) a row-major tensor; ``dims`` names the input axes.

    A split stays a contiguous block split only on the leading axis of each
    group of axes that merge or divide, and only by a factor dividing that
    axis's size on both sides, so the other axes of a group are never split.
    FLOPs: 0. Communication: none inside the layer.
    """
    shape, out_shape = tuple(shape), tuple(out_shape)
    dims = _check_letters(name, dims, shape)
    _check_sizes(name, **{f"out_shape[{i}]": s for i, s in enumerate(out_shape)})
    base = [1] * len(dims)
    out_axes: list[str | None] = [None] * len(out_shape)
    for gi, gj in _reshape_groups(name, shape, out_shape):
        gi = [a for a in gi if shape[a] > 1] or gi[:1]
        gj = [b for b in gj if out_shape[b] > 1] or gj[:1]
        if gi and gj:
            base[gi[0]] = gcd(shape[gi[0]], out_shape[gj[0]])
            out_axes[gj[0]] = dims[gi[0]]
    return Layer(
        name, "Reshape", dims, shape,
        inputs=(TensorSpec(shape, dims, "x"),),
        outputs=(TensorSpec(out_shape, tuple(out_axes), "y"),),
        split_base=tuple(base),
        params=_params(shape=shape, dims=dims, out_shape=out_shape),
    )


@_register("Transpose", _zero_flops, _no_collectives)
def transpose(name: str, shape: Sequence[int], dims: Sequence[str], perm: Sequence[int]) -> Layer:
    """Permute axes: output axis ``i`` is input axis ``perm[i]``.

    FLOPs: 0. Communication: none inside the layer (each device permutes its block).
    """
    shape = tuple(shape)
    dims = _check_letters(name, dims, shape)
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(shape))):
        raise GraphError(f"layer {name!r}: perm {perm} is not a permutation of {len(shape)} axes")
    return Layer(
        name, "Transpose", dims, shape,
        inputs=(TensorSpec(shape, dims, "x"),),
        outputs=(TensorSpec(tuple(shape[p] for p in perm), tuple(dims[p] for p in perm), "y"),),
        params=_params(shape=shape, dims=dims, perm=perm),
    )


def _reduce_flops(layer, blk):
    # One add per input element forward, one broadcast copy backward.
    return 2.0 * np.prod(blk, axis=1)


@_register("ReduceMean", _reduce_flops)
def reduce_mean(name: str, shape: Sequence[int], dims: Sequence[str], reduce: Sequence[str]) -> Layer:
    """Mean over the dimensions ``reduce`` (dropped from the output).

    FLOPs: ``2`` per input element. Communication: splitting a reduced
    dimension all-reduces the output (contraction rule).
    """
    shape = tuple(shape)
    dims = _check_letters(name, dims, shape)
    reduce = tuple(reduce)
    if not reduce or not set(reduce) <= set(dims) or set(reduce) == set(dims):
        raise GraphError(f"layer {name!r}: reduced dimensions {reduce} must be some but not all of {dims}")
    keep = [i for i, d in enumerate(dims) if d not in reduce]
    return Layer(
        name, "ReduceMean", dims, shape,
        inputs=(TensorSpec(shape, dims, "x"),),
        outputs=(TensorSpec(tuple(shape[i] for i in keep), tuple(dims[i] for i in keep), "y"),),
        params=_params(shape=shape, dims=dims, reduce=reduce),
    )
