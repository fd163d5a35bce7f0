"""Data movement: concatenation, broadcasting, splitting, reshaping and transposition, and the mean reduction."""

from __future__ import annotations

from math import gcd, prod
from typing import Sequence

import numpy as np

from pase.errors import GraphError
from pase.ir.graph import Layer, TensorSpec
from pase.ops.registry import (
    Collective, CollectiveOptions, Flops, block_elements, check_letters, check_sizes, column, halo, no_collectives,
    params, register, weight_gradient_collectives,
)

def _zero_flops(layer, blk):
    zero = np.zeros(len(blk))
    return Flops(forward=zero, backward=zero, inputs=tuple(zero for _ in layer.inputs))


def _nothing_saved(layer):
    return frozenset(), frozenset()


@register("Concat", _zero_flops, no_collectives, contraction=False, saved=_nothing_saved,
          onnx=("Concat", "Pad", "Expand", "Tile"))
def concat(name: str, shapes: Sequence[Sequence[int]], dims: Sequence[str], axis: str) -> Layer:
    """Concatenate input tensors along dimension ``axis`` (which is never split).

    FLOPs: 0 (a copy). Communication: none inside the layer; inputs laid out
    differently arrive through edge costs.
    """
    shapes = [tuple(s) for s in shapes]
    if not shapes:
        raise GraphError(f"layer {name!r}: concat needs at least one input")
    dims = check_letters(name, dims, shapes[0])
    if axis not in dims:
        raise GraphError(f"layer {name!r}: concat axis {axis!r} is not one of {dims}")
    a = dims.index(axis)
    for i, s in enumerate(shapes):
        check_letters(name, dims, s)
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
        params=params(shapes=[list(s) for s in shapes], dims=dims, axis=axis),
    )


def _broadcast_flops(layer, blk):
    # Forward a copy; backward the output's gradient summed over the broadcast dimensions: one add an element.
    zero = np.zeros(len(blk))
    return Flops(forward=zero, backward=zero, inputs=(np.prod(blk, axis=1),))


@register("Broadcast", _broadcast_flops, no_collectives, saved=_nothing_saved)
def broadcast(name: str, shape: Sequence[int], dims: Sequence[str], axes: Sequence[str]) -> Layer:
    """Copy the input along the new dimensions ``axes`` into an output of ``shape`` over ``dims``.

    The input is the output without ``axes`` (a key shared by every head: multi-head latent attention's
    decoupled RoPE key). FLOPs: 0 forward; backward one add per output element (the gradient summed over
    ``axes``). Communication: none inside the layer; a split of one of ``axes`` leaves the input's gradient a
    partial sum, finished on the edge (the contraction rule). Keeps nothing.

    Raises ``GraphError`` when ``axes`` is empty or names a dimension not in ``dims``.
    """
    shape = tuple(shape)
    dims = check_letters(name, dims, shape)
    axes = tuple(axes)
    if not axes or any(a not in dims for a in axes) or len(set(axes)) != len(axes):
        raise GraphError(f"layer {name!r}: broadcast axes {list(axes)} must be distinct dimensions of {dims}")
    kept = tuple(d for d in dims if d not in axes)
    if not kept:
        raise GraphError(f"layer {name!r}: broadcast keeps no dimension of {dims} for its input")
    in_shape = tuple(n for d, n in zip(dims, shape) if d not in axes)
    return Layer(
        name, "Broadcast", dims, shape,
        inputs=(TensorSpec(in_shape, kept, "x"),),
        outputs=(TensorSpec(shape, dims, "y"),),
        params=params(shape=shape, dims=dims, axes=axes),
    )


@register("Split", _zero_flops, no_collectives, contraction=False, saved=_nothing_saved,
          onnx=("Split", "Slice", "Gather"))
def split(name: str, shape: Sequence[int], dims: Sequence[str], axis: str, parts: Sequence[int]) -> Layer:
    """Split a tensor along ``axis`` (never split across devices) into ``parts`` sizes.

    FLOPs: 0. Communication: none inside the layer.
    """
    shape = tuple(shape)
    dims = check_letters(name, dims, shape)
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
        params=params(shape=shape, dims=dims, axis=axis, parts=parts),
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


@register("Reshape", _zero_flops, no_collectives, contraction=False, saved=_nothing_saved,
          onnx=("Reshape", "Flatten", "Squeeze", "Unsqueeze"))
def reshape(name: str, shape: Sequence[int], dims: Sequence[str], out_shape: Sequence[int]) -> Layer:
    """Reshape (flatten, unflatten heads...) a row-major tensor; ``dims`` names the input axes.

    A split stays a contiguous block split only on the leading axis of each
    group of axes that merge or divide, and only by a factor dividing that
    axis's size on both sides, so the other axes of a group are never split.
    FLOPs: 0. Communication: none inside the layer.
    """
    shape, out_shape = tuple(shape), tuple(out_shape)
    dims = check_letters(name, dims, shape)
    check_sizes(name, **{f"out_shape[{i}]": s for i, s in enumerate(out_shape)})
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
        params=params(shape=shape, dims=dims, out_shape=out_shape),
    )


@register("Transpose", _zero_flops, no_collectives, contraction=False, saved=_nothing_saved,
          onnx=("Transpose",))
def transpose(name: str, shape: Sequence[int], dims: Sequence[str], perm: Sequence[int]) -> Layer:
    """Permute axes: output axis ``i`` is input axis ``perm[i]``.

    FLOPs: 0. Communication: none inside the layer (each device permutes its block).
    """
    shape = tuple(shape)
    dims = check_letters(name, dims, shape)
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(shape))):
        raise GraphError(f"layer {name!r}: perm {perm} is not a permutation of {len(shape)} axes")
    return Layer(
        name, "Transpose", dims, shape,
        inputs=(TensorSpec(shape, dims, "x"),),
        outputs=(TensorSpec(tuple(shape[p] for p in perm), tuple(dims[p] for p in perm), "y"),),
        params=params(shape=shape, dims=dims, perm=perm),
    )


def _reduce_flops(layer, blk):
    # One add per input element forward, one broadcast copy backward.
    elements = np.prod(blk, axis=1)
    return Flops(forward=elements, backward=np.zeros(len(blk)), inputs=(elements,))


@register("ReduceMean", _reduce_flops, saved=_nothing_saved,
          onnx=("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                "ReduceLogSumExp", "ReduceSumSquare", "GlobalAveragePool"))
def reduce_mean(name: str, shape: Sequence[int], dims: Sequence[str], reduce: Sequence[str]) -> Layer:
    """Mean over the dimensions ``reduce`` (dropped from the output).

    FLOPs: ``2`` per input element. Communication: splitting a reduced
    dimension all-reduces the output (contraction rule).
    """
    shape = tuple(shape)
    dims = check_letters(name, dims, shape)
    reduce = tuple(reduce)
    if not reduce or not set(reduce) <= set(dims) or set(reduce) == set(dims):
        raise GraphError(f"layer {name!r}: reduced dimensions {reduce} must be some but not all of {dims}")
    keep = [i for i, d in enumerate(dims) if d not in reduce]
    return Layer(
        name, "ReduceMean", dims, shape,
        inputs=(TensorSpec(shape, dims, "x"),),
        outputs=(TensorSpec(tuple(shape[i] for i in keep), tuple(dims[i] for i in keep), "y"),),
        params=params(shape=shape, dims=dims, reduce=reduce),
    )
