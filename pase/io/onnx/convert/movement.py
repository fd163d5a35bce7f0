"""Data movement and reductions: Reshape, Flatten, Squeeze, Unsqueeze and Transpose
(composed and cancelled by the importer's helpers), Concat and Split; Slice, Gather
at constant indices, Pad, Expand and Tile as crops and pads; ``Reduce*`` as ReduceMean.
"""

from __future__ import annotations

from math import prod

import numpy as np

from pase.errors import FormatError
from pase.io.onnx.convert.registry import converter
from pase.io.onnx.convert.sequence import embedding
from pase.io.onnx.reader import check_shape
from pase.io.onnx.shapes import axes_arg, batch_slot, broadcast, letters, norm_axis, reshape_axis, resolve_reshape
from pase.io.onnx.values import Act, Const

# -- reshapes and transposes ------------------------------------------------------------------------


@converter("Reshape", inputs=2, act_first=True, keeps_name=True)
def reshape(imp, ins, attrs):
    """The input at the constant target shape (one fixed at export for another batch size rescaled)."""
    x = ins[0]
    target = [int(t) for t in np.asarray(imp.const_value(ins[1], "target shape")).reshape(-1)]
    allowzero = int(attrs.get("allowzero", 0))
    try:
        shape = resolve_reshape(x.shape, target, allowzero, imp.where())
    except FormatError:
        shape = None
    if shape is not None and prod(shape) != prod(x.shape):
        shape = None
    if shape is None or _loses_batch(imp, x, shape):
        # A target fixed at the export batch: its -1 would absorb the batch change
        # (view(4, 256, -1, 64) at batch 8 giving 24 heads instead of 12).
        shape = _export_batch_target(imp, x, target, allowzero) or shape
    if shape is None:
        shape = _rebatch_target(imp, x, target, allowzero)
    return [imp.reshape(x, check_shape(shape, imp.where()))]


def _loses_batch(imp, x: Act, shape) -> bool:
    """Whether reshaping ``x`` to ``shape`` cuts the batch across axes, when the batch
    differs from the export's (a sign that the target was fixed at the export batch)."""
    old, new = imp.old_batch, imp.new_batch
    if not old or not new or old == new or x.batch_axis is None:
        return False
    axis, _ = reshape_axis(x.shape, shape, x.batch_axis, x.outer, new)
    return axis is None


def _export_batch_target(imp, x: Act, target, allowzero):
    """The target resolved as at export (``x`` at the export batch), its batch slot then
    rescaled to this import's batch; None when that reading does not keep the batch."""
    old, new, a = imp.old_batch, imp.new_batch, x.batch_axis
    if not old or not new or old == new or a is None or x.shape[a] % new:
        return None
    at_export = list(x.shape)
    at_export[a] = x.shape[a] // new * old
    try:
        shape = list(resolve_reshape(at_export, target, allowzero, imp.where()))
    except FormatError:
        return None
    if prod(shape) != prod(at_export):
        return None
    j, _ = reshape_axis(tuple(at_export), tuple(shape), a, x.outer, old)
    if j is None:
        return None
    shape[j] = shape[j] // old * new
    return tuple(shape) if prod(shape) == prod(x.shape) else None


def _rebatch_target(imp, x: Act, target, allowzero):
    """A Reshape target fixed at export for another batch size, rescaled to this one."""
    old, new = imp.old_batch, imp.new_batch
    if old and new and old != new and x.batch_axis is not None and -1 not in target:
        fixed = [x.shape[i] if t == 0 and not allowzero and i < len(x.shape) else t for i, t in enumerate(target)]
        slot = batch_slot(fixed, prod(x.shape[:x.batch_axis]) * x.outer, old)
        j = slot[0] if slot else None
        if j is not None and (fixed[j] * new) % old == 0:
            fixed[j] = fixed[j] * new // old
            if prod(fixed) == prod(x.shape) and min(fixed) > 0:
                return tuple(fixed)
    raise FormatError(
        f"{imp.where()}: cannot reshape {x.shape} to {target}"
        + (f" (the target was fixed when the model was exported with batch {old}; export it with batch {new} "
           "or with a dynamic batch axis)" if old and new and old != new else "")
    )


@converter("Flatten", act_first=True, keeps_name=True)
def flatten(imp, ins, attrs):
    """The input as a matrix: the axes before ``axis`` as rows, the rest as columns."""
    x = ins[0]
    axis = int(attrs.get("axis", 1))
    rank = len(x.shape)
    if not -rank <= axis <= rank:
        raise FormatError(f"{imp.where()}: axis {axis} out of range for rank {rank}")
    axis %= rank + 1 if axis < 0 else rank + 1
    return [imp.reshape(x, (prod(x.shape[:axis]), prod(x.shape[axis:])))]


@converter("Squeeze", act_first=True, keeps_name=True)
def squeeze(imp, ins, attrs):
    """The input without the given size-1 axes (all of them when none are given)."""
    x = ins[0]
    vals = [v.value if isinstance(v, Const) else None for v in ins]
    axes = axes_arg(attrs, vals, 1)
    rank = len(x.shape)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = {norm_axis(a, rank, imp.where()) for a in axes}
    if any(x.shape[a] != 1 for a in axes):
        raise FormatError(f"{imp.where()}: cannot squeeze axes {sorted(axes)} of shape {x.shape}")
    return [imp.reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


@converter("Unsqueeze", act_first=True, keeps_name=True)
def unsqueeze(imp, ins, attrs):
    """The input with size-1 axes inserted at the given positions of the result."""
    x = ins[0]
    vals = [v.value if isinstance(v, Const) else None for v in ins]
    axes = axes_arg(attrs, vals, 1)
    if axes is None:
        raise FormatError(f"{imp.where()}: no axes")
    rank = len(x.shape) + len(axes)
    axes = sorted({norm_axis(a, rank, imp.where()) for a in axes})
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [imp.reshape(x, tuple(shape))]


@converter("Transpose", act_first=True, keeps_name=True)
def transpose(imp, ins, attrs):
    """The input's axes permuted by ``perm`` (default: reversed)."""
    x = ins[0]
    perm = attrs.get("perm", list(range(len(x.shape)))[::-1])
    return [imp.transpose(x, perm)]


# -- concatenation and splitting ----------------------------------------------------------------------


@converter("Concat")
def concat(imp, ins, attrs):
    """A Concat layer of the inputs along ``axis`` (constant inputs as unread slots; a
    trainable one, such as a class token, an extra weight of the layer; one folded at
    the export batch resized to this import's)."""
    present = [v for v in ins if v is not None and 0 not in v.shape]
    rank = len(present[0].shape) if present else 0
    if any(len(v.shape) != rank for v in present) or rank == 0:
        raise FormatError(f"{imp.where()}: inputs of different ranks {[v.shape for v in present]}")
    axis = norm_axis(int(attrs.get("axis", 0)), rank, imp.where())
    acts = [v for v in present if isinstance(v, Act)]
    lead = next((a for a in acts if a.batch_axis is not None), acts[0])
    if lead.batch_axis != axis:
        present = [imp.rebatch(v, lead) if isinstance(v, Const) else v for v in present]
    for v in present:
        if v.shape[:axis] + v.shape[axis + 1:] != present[0].shape[:axis] + present[0].shape[axis + 1:]:
            raise FormatError(f"{imp.where()}: input shapes {[v.shape for v in present]} differ off axis {axis}"
                              f"{imp.batch_hint()}")
    out_shape = list(present[0].shape)
    out_shape[axis] = sum(v.shape[axis] for v in present)
    if not any(a.src is not None for a in acts):
        return [Act(tuple(out_shape), None, 0, lead.batch_axis, lead.image, lead.outer)]
    if len(present) == 1:
        return [present[0]]
    dims = letters(rank, lead.batch_axis, lead.image)
    inputs = [v if isinstance(v, Act) and v.src is not None else None for v in present]
    spec = imp.emit("Concat", dict(shapes=[list(v.shape) for v in present], dims=list(dims), axis=dims[axis]),
                    inputs)
    for v in present:
        if isinstance(v, Const):
            imp.extra_weight(spec, v, lead)
    return [Act.of(spec, 0, lead.batch_axis, lead.image, lead.outer)]


@converter("Split", act_first=True)
def split(imp, ins, attrs):
    """A Split layer into the given parts (or ``num_outputs`` near-equal ones) along ``axis``."""
    x = ins[0]
    rank = len(x.shape)
    axis = norm_axis(int(attrs.get("axis", 0)), rank, imp.where())
    n_out = len(imp.node.output)
    if "split" in attrs:
        parts = [int(p) for p in attrs["split"]]
    elif len(ins) > 1 and ins[1] is not None:
        parts = [int(p) for p in np.asarray(imp.const_value(ins[1], "split sizes")).reshape(-1)]
    else:
        k = int(attrs.get("num_outputs", n_out))
        if k != n_out or k <= 0:
            raise FormatError(f"{imp.where()}: splits into {k} parts but has {n_out} outputs")
        size = -(-x.shape[axis] // k)
        parts = [size] * (k - 1) + [x.shape[axis] - size * (k - 1)]
    if sum(parts) != x.shape[axis] or any(p < 0 for p in parts) or len(parts) != n_out:
        raise FormatError(f"{imp.where()}: parts {parts} do not split axis {axis} of {x.shape} into {n_out} outputs")
    shapes = []
    for p in parts:
        s = list(x.shape)
        s[axis] = p
        shapes.append(tuple(s))
    if x.src is None:
        return [Act(s, None, 0, x.batch_axis, x.image, x.outer) for s in shapes]
    if 0 in parts:
        raise FormatError(f"{imp.where()}: a zero-sized part in {parts}")
    if len(parts) == 1:
        return [x]
    dims = letters(rank, x.batch_axis, x.image)
    spec = imp.emit("Split", dict(shape=list(x.shape), dims=list(dims), axis=dims[axis], parts=parts), [x])
    return [Act.of(spec, i, x.batch_axis, x.image, x.outer) for i in range(len(parts))]


# -- crops and pads --------------------------------------------------------------------------------------


@converter("Slice", inputs=lambda opset: 3 if opset >= 10 else 1, act_first=True, keeps_name=True)
def slice_(imp, ins, attrs):
    """The sliced shape of the input, as crops (starts, ends... are inputs from opset 10)."""
    x = ins[0]
    rank = len(x.shape)
    if imp.opset < 10:
        starts, ends = list(attrs.get("starts", [])), list(attrs.get("ends", []))
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = np.asarray(imp.const_value(ins[1], "starts")).reshape(-1).tolist()
        ends = np.asarray(imp.const_value(ins[2], "ends")).reshape(-1).tolist()
        axes = (np.asarray(imp.const_value(ins[3], "axes")).reshape(-1).tolist()
                if len(ins) > 3 and ins[3] is not None else list(range(len(starts))))
        steps = (np.asarray(imp.const_value(ins[4], "steps")).reshape(-1).tolist()
                 if len(ins) > 4 and ins[4] is not None else [1] * len(starts))
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        raise FormatError(f"{imp.where()}: starts, ends, axes and steps differ in length")
    shape = list(x.shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = norm_axis(int(a), rank, imp.where())
        if int(st) == 0:
            raise FormatError(f"{imp.where()}: a slice step of 0")
        shape[a] = len(range(*slice(int(s), int(e), int(st)).indices(x.shape[a])))
    if 0 in shape:
        raise FormatError(f"{imp.where()}: the slice of {x.shape} is zero-sized")
    return [imp.adapt(x, tuple(shape))]


@converter("Gather", inputs=2, keeps_name=True)
def gather(imp, ins, attrs):
    """From a weight: an embedding lookup. From an activation at constant indices: one
    element as a shared Split output, several (or any at computed indices) as a crop or
    pad to the result's shape."""
    data, idx = ins[0], ins[1]
    axis = int(attrs.get("axis", 0))
    if isinstance(data, Const):
        return [embedding(imp, data, idx, axis)]
    rank = len(data.shape)
    axis = norm_axis(axis, rank, imp.where())
    out_shape = data.shape[:axis] + tuple(idx.shape) + data.shape[axis + 1:]
    if 0 in out_shape:
        raise FormatError(f"{imp.where()}: the result is zero-sized")
    if isinstance(idx, Act):
        # At computed indices (the tokens routed to an expert, index_select): rows of the
        # activation moved to the result's shape, the gradient flowing back to them.
        return [imp.adapt(data, out_shape)]
    if idx.shape == () and idx.value is not None:
        n = data.shape[axis]
        i = int(idx.value) % n if -n <= int(idx.value) < n else None
        if i is None:
            raise FormatError(f"{imp.where()}: index {int(idx.value)} is out of range for axis {axis} of {data.shape}")
        return [imp.reshape(_pick(imp, data, axis, i), out_shape)]
    return [imp.adapt(data, out_shape)]


def _pick(imp, x: Act, axis: int, i: int) -> Act:
    """Element ``i`` along ``axis`` (kept as a size-1 axis): one output of a Split that
    is shared by every pick from the same tensor (the q, k, v of a packed projection)."""
    n = x.shape[axis]
    if x.src is None:
        return imp.crop(x, axis, 1)
    key = (x.key(), axis)
    spec = imp.picks.get(key)
    if spec is None:
        parts = [1] * n if n <= 16 else None
        if parts is None:
            parts = [p for p in (i, 1, n - i - 1) if p]
        dims = letters(len(x.shape), x.batch_axis, x.image)
        spec = imp.emit("Split", dict(shape=list(x.shape), dims=list(dims), axis=dims[axis], parts=parts), [x], ".split")
        if n <= 16:
            imp.picks[key] = spec
        else:
            return Act.of(spec, 1 if i else 0, x.batch_axis, x.image, x.outer)
    return Act.of(spec, i, x.batch_axis, x.image, x.outer)


@converter("Expand", inputs=2, act_first=True, keeps_name=True)
def expand(imp, ins, attrs):
    """The input broadcast to the constant shape, as pads."""
    x = ins[0]
    target = tuple(int(t) for t in np.asarray(imp.const_value(ins[1], "shape")).reshape(-1))
    # A target fixed at the export batch (a grouped-query key/value expansion) gets this import's.
    target = imp.rebatch(Const(target), x).shape
    try:
        shape = broadcast([x.shape, target], imp.where())
    except FormatError as exc:
        raise FormatError(f"{exc}{imp.batch_hint()}") from None
    return [imp.adapt(x, check_shape(shape, imp.where()))]


@converter("Tile", inputs=2, act_first=True, keeps_name=True)
def tile(imp, ins, attrs):
    """The input repeated along each axis, as pads."""
    x = ins[0]
    reps = [int(r) for r in np.asarray(imp.const_value(ins[1], "repeats")).reshape(-1)]
    if len(reps) != len(x.shape) or any(r <= 0 for r in reps):
        raise FormatError(f"{imp.where()}: repeats {reps} do not fit shape {x.shape}")
    return [imp.adapt(x, check_shape([d * r for d, r in zip(x.shape, reps)], imp.where()))]


@converter("Pad", inputs=lambda opset: 2 if opset >= 11 else 1, act_first=True, keeps_name=True)
def pad(imp, ins, attrs):
    """The padded (or, with negative pads, cropped) shape of the input (pads are an input from opset 11)."""
    x = ins[0]
    rank = len(x.shape)
    if "pads" in attrs:
        pads = [int(p) for p in attrs["pads"]]
    else:
        pads = [int(p) for p in np.asarray(imp.const_value(ins[1], "pads")).reshape(-1)]
    axes = list(range(rank))
    if len(ins) > 3 and ins[3] is not None:
        axes = [norm_axis(int(a), rank, imp.where()) for a in np.asarray(imp.const_value(ins[3], "axes")).reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise FormatError(f"{imp.where()}: pads {pads} do not fit shape {x.shape}")
    shape = list(x.shape)
    for i, a in enumerate(axes):
        shape[a] += pads[i] + pads[i + len(axes)]
    if any(d <= 0 for d in shape):
        raise FormatError(f"{imp.where()}: padding leaves shape {shape}")
    return [imp.adapt(x, check_shape(shape, imp.where()))]


# -- reductions ---------------------------------------------------------------------------------------


@converter("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSumExp", "ReduceSumSquare", act_first=True)
def reduce(imp, ins, attrs):
    """A ReduceMean layer over the given axes (all when none are given); a reduction to a
    scalar, or of a graph input, makes no layer."""
    x = ins[0]
    vals = [v.value if isinstance(v, Const) else None for v in ins]
    if len(ins) > 1 and ins[1] is not None and not isinstance(ins[1], Const):
        raise FormatError(f"{imp.where()}: axes computed at run time")
    axes = axes_arg(attrs, vals, 1)
    rank = len(x.shape)
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted({norm_axis(a, rank, imp.where()) for a in axes})
    keep = bool(attrs.get("keepdims", 1))
    kept_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    out_shape = kept_shape if keep else tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if len(axes) == rank or x.src is None:
        return [Act(out_shape, None)]
    dims = letters(rank, x.batch_axis, x.image)
    spec = imp.emit("ReduceMean", dict(shape=list(x.shape), dims=list(dims), reduce=[dims[a] for a in axes]), [x])
    axis = x.batch_axis
    if axis is not None:
        axis = None if axis in axes else axis - sum(1 for a in axes if a < axis)
    out = Act.of(spec, 0, axis)
    return [imp.reshape(out, out_shape)]
