"""Shape and axis arithmetic: dimension letters, where the batch axis goes through a
reshape, broadcasting, and ONNX's axis and reshape-target conventions."""

from __future__ import annotations

from math import prod

import numpy as np

from pase.errors import FormatError

_GENERIC = {0: "", 1: "n", 2: "sd", 3: "hsd", 4: "ghsd"}
_SPARE = "efijklmopqrtuvxyzacwn"


def letters(rank: int, batch_axis: int | None = None, image: bool = False) -> tuple:
    """Dimension letters for a tensor: ``b`` on the batch axis, ``b c h w`` for images."""
    if image and rank == 4 and batch_axis in (0, None):
        return ("b", "c", "h", "w")
    k = rank - (batch_axis is not None)
    rest = list(_GENERIC.get(k) or [c for c in _SPARE if c not in "bhsdg"][:k])
    if len(rest) < k:
        raise FormatError(f"a tensor of rank {rank} has too many dimensions to name")
    if batch_axis is not None:
        rest.insert(batch_axis, "b")
    return tuple(rest)


def batch_slot(shape, before, batch):
    """``(axis, outer)``: the axis of ``shape`` holding a batch factor of size ``batch`` that
    starts after ``before`` elements' worth of outer axes, and the factor in front of it
    within that axis; None when the batch factor is cut across axes."""
    acc = 1
    for j, d in enumerate(shape):
        if batch == 1 and acc == before and d == 1:
            return j, 1
        if before % acc == 0 and acc <= before < acc * d:
            outer = before // acc
            return (j, outer) if d % (outer * batch) == 0 else None
        acc *= max(d, 1)
    return None


def reshape_axis(in_shape, out_shape, axis, outer, batch):
    """Where the batch axis lands after a reshape: ``(axis, outer)``, or ``(None, 1)`` when lost."""
    if axis is None or not batch or in_shape[axis] % (outer * batch):
        return None, 1
    slot = batch_slot(out_shape, prod(in_shape[:axis]) * outer, batch)
    return slot if slot is not None else (None, 1)


def unit_reshape(a, b) -> bool:
    """True when reshaping ``a`` to ``b`` only inserts or removes size-1 axes."""
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def broadcast(shapes, where):
    """The numpy broadcast of ``shapes``, or a FormatError naming ``where``. Computed with
    Python integers: numpy refuses sizes past its index range as not broadcasting, and
    the caller's size check gives the better message."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise FormatError(f"{where}: input shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def axes_arg(attrs, vals, index):
    """A node's ``axes``: the attribute (older opsets), else the constant input ``index``; None when absent."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    if len(vals) > index and vals[index] is not None:
        return [int(a) for a in np.asarray(vals[index]).reshape(-1)]
    return None


def norm_axis(axis: int, rank: int, where: str) -> int:
    """``axis`` (negative counting from the end) as an index into ``rank`` axes."""
    if not -rank <= axis < rank:
        raise FormatError(f"{where}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def resolve_reshape(in_shape, target, allowzero, where) -> tuple:
    """An ONNX Reshape target made explicit: ``0`` copies the input's axis (unless
    ``allowzero``), ``-1`` takes what is left."""
    target = [int(t) for t in target]
    out = []
    for i, t in enumerate(target):
        if t == 0 and not allowzero:
            if i >= len(in_shape):
                raise FormatError(f"{where}: target shape {target} copies axis {i} that the input {tuple(in_shape)} lacks")
            out.append(int(in_shape[i]))
        else:
            out.append(t)
    if out.count(-1) > 1 or any(t < -1 for t in out):
        raise FormatError(f"{where}: target shape {target} is invalid")
    if -1 in out:
        known = prod(t for t in out if t != -1)
        total = prod(in_shape)
        if known == 0 or total % known:
            raise FormatError(f"{where}: cannot reshape {tuple(in_shape)} to {target}")
        out[out.index(-1)] = total // known
    return tuple(out)
