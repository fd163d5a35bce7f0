"""Routing and indexing: TopK, ArgMax / ArgMin, OneHot, CumSum, and the gathers and
scatters at computed indices (GatherElements, GatherND, ScatterElements, ScatterND),
the bookkeeping of a mixture-of-experts router (GShard / Switch "batched experts").

Every output has its exact ONNX shape. Values stay what the cost model sees of them:

* an *index* tensor (TopK's second output, ArgMax, OneHot, and whatever is computed
  from such tensors and constants only: the dispatch mask's comparisons, cumulative
  slot counts, casts) is integer data that takes no gradient, as in torch's autograd.
  It is held as a loose activation (no layer, like a graph input): a layer reading it
  (the dispatch ``einsum("bsec,bsd->becd", mask, x)``) takes no gradient through it,
  so its backward FLOPs are torch's; the comparisons themselves cost nothing pase
  models (as the shape arithmetic of a ``Reshape`` target);
* a *value* selected or scattered from an activation (TopK's values, the gates; a
  gather or scatter of activation rows) is data movement of the activation to the
  result's shape (:meth:`~pase.io.onnx.importer.Importer.adapt`: a crop or a pad),
  through which the gradient flows; a scatter into an activation with an activation
  an element-wise layer of both.

The experts themselves need no converter: their batched products over stacked weights
(``einsum("becd,efd->becf", x, w_gate)``, or ``x @ w`` with ``w[E, d, f]``) are
Einsum layers whose iteration space has the expert axis, indexing every weight and
contracted by none, so splitting it is expert parallelism with no communication inside
the layer and the weight gradients all-reduced over each expert's replicas only. They
are deliberately not rewritten into :mod:`pase.ops.moe`'s ``MoERouter`` /
``MoEExperts`` / ``MoECombine``: those price a sparse dispatcher (a copy per slot, the
k-of-E work), while a batched-experts module computes its dense dispatch and combine
einsums over every token, expert and slot, and the Einsum layers count exactly that
(torch's own count); and the Einsum form holds for any expert network (SwiGLU or not,
biases, shared experts) where matching a subgraph would hold for one.
"""

from __future__ import annotations

import numpy as np

from pase.errors import FormatError
from pase.io.onnx.convert.norm import elementwise
from pase.io.onnx.convert.registry import Unsupported, converter
from pase.io.onnx.reader import check_shape
from pase.io.onnx.shapes import norm_axis
from pase.io.onnx.values import Act, Const


def _index(like, shape, axis: int | None = -1) -> Act:
    """A loose activation of ``shape`` (an index tensor: no layer, no gradient) with its
    batch axis at ``axis``, by default ``like``'s where the shapes agree on it."""
    shape = tuple(int(d) for d in shape)
    if axis == -1:
        axis = like.batch_axis if isinstance(like, Act) else None
        if axis is not None and (len(shape) != len(like.shape) or shape[axis] != like.shape[axis]):
            axis = None
    outer = like.outer if axis is not None else 1
    return Act(shape, None, 0, axis, False, outer)


def _selected(imp, data, shape):
    """``data`` brought to ``shape`` as data movement (values picked or spread from it); a
    constant that is no trainable tensor gives a loose activation; a trainable one read at
    computed indices is not mapped."""
    if isinstance(data, Act):
        return imp.adapt(data, check_shape(shape, imp.where()))
    if data.source:
        raise Unsupported("a weight read at computed indices")
    return Act(tuple(int(d) for d in shape), None)


@converter("TopK", inputs=lambda opset: 2 if opset >= 10 else 1, act_first=True, keeps_name=True)
def top_k(imp, ins, attrs):
    """The ``k`` largest (or smallest) along ``axis``: the values as a crop of the input
    (the gradient flows to the selected elements), the indices as an index tensor."""
    x = ins[0]
    rank = len(x.shape)
    axis = norm_axis(int(attrs.get("axis", -1)), rank, imp.where())
    if imp.opset >= 10:
        k = int(np.asarray(imp.const_value(ins[1], "k")).reshape(-1)[0])
    else:
        k = int(attrs.get("k", 0))
    if not 0 < k <= x.shape[axis]:
        raise FormatError(f"{imp.where()}: k {k} is out of range for axis {axis} of {x.shape}")
    shape = list(x.shape)
    shape[axis] = k
    return [imp.adapt(x, tuple(shape)), _index(x, shape)]


@converter("ArgMax", "ArgMin", act_first=True)
def arg_max(imp, ins, attrs):
    """The position of the largest (smallest) element along ``axis``: an index tensor."""
    x = ins[0]
    axis = norm_axis(int(attrs.get("axis", 0)), len(x.shape), imp.where())
    keep = bool(attrs.get("keepdims", 1))
    shape = [1 if i == axis else d for i, d in enumerate(x.shape)] if keep else \
        [d for i, d in enumerate(x.shape) if i != axis]
    batch = x.batch_axis
    if batch == axis:
        batch = None
    elif batch is not None and not keep and batch > axis:
        batch -= 1
    return [_index(x, shape, batch)]


@converter("OneHot", inputs=3)
def one_hot(imp, ins, attrs):
    """One-hot rows of ``depth`` at the indices, the new axis at ``axis``: an index tensor
    (a mask built from integers carries no gradient)."""
    idx = ins[0]
    depth = int(np.asarray(imp.const_value(ins[1], "depth")).reshape(-1)[0])
    if depth <= 0:
        raise FormatError(f"{imp.where()}: depth {depth} is not positive")
    rank = len(idx.shape) + 1
    axis = norm_axis(int(attrs.get("axis", -1)), rank, imp.where())
    shape = list(idx.shape)
    shape.insert(axis, depth)
    batch = idx.batch_axis if isinstance(idx, Act) else None
    if batch is not None and batch >= axis:
        batch += 1  # the new axis goes in front of it
    return [_index(idx, shape, batch)]


@converter("CumSum", inputs=2, act_first=True)
def cum_sum(imp, ins, attrs):
    """Running sums along an axis: element-wise (same shape; fused into an activation's
    producer, an index tensor of an index tensor)."""
    if not isinstance(ins[1], Const):
        raise FormatError(f"{imp.where()}: axis computed at run time")
    return [elementwise(imp, [ins[0]], False)]


@converter("GatherElements", inputs=2, keeps_name=True)
def gather_elements(imp, ins, attrs):
    """Elements of the data at the indices (the indices' shape)."""
    return [_selected(imp, ins[0], ins[1].shape)]


@converter("GatherND", inputs=2, keeps_name=True)
def gather_nd(imp, ins, attrs):
    """Slices of the data at index tuples: shape ``indices[:-1] + data[batch_dims + m:]``."""
    data, idx = ins[0], ins[1]
    b = int(attrs.get("batch_dims", 0))
    if not idx.shape:
        raise FormatError(f"{imp.where()}: scalar indices")
    m = idx.shape[-1]
    if b < 0 or b + m > len(data.shape) or tuple(idx.shape[:b]) != tuple(data.shape[:b]):
        raise FormatError(f"{imp.where()}: indices {idx.shape} do not fit data {data.shape} at batch_dims {b}")
    return [_selected(imp, data, tuple(idx.shape[:-1]) + tuple(data.shape[b + m:]))]


@converter("ScatterElements", "ScatterND", inputs=3)
def scatter(imp, ins, attrs):
    """The data with the updates written at the indices (the data's shape): element-wise of
    the data and the updates (each brought to that shape), an index tensor when neither is
    an activation."""
    data, updates = ins[0], ins[2]
    acts = [v for v in (data, updates) if isinstance(v, Act)]
    if not acts:
        return [_index(ins[1], data.shape)]
    return [elementwise(imp, [data, updates], False, out_shape=data.shape)]
