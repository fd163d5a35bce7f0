"""Constant folding: evaluating with numpy an ONNX node whose inputs are all constants.

Exporters compute reshape targets, masks and the like from constants
(``Shape -> Gather -> Concat``); folding turns them back into constants. A fold
that is not possible or would build a large array raises :class:`Fold`, and the
importer keeps only the result's shape.
"""

from __future__ import annotations

import math
from math import prod

import numpy as np

from pase.io.onnx.shapes import axes_arg, norm_axis, resolve_reshape
from pase.limits import MAX_FOLD_ELEMENTS, MAX_NODE_OUTPUTS


class Fold(Exception):
    """Constant folding not possible: the result's shape when known (``shape``), else
    the importer falls back to inferred shapes."""

    def __init__(self, shape: tuple | None = None):
        super().__init__()
        self.shape = shape


def np_dtype(onnx_type: int):
    """The numpy dtype of an ONNX element type; Fold for one numpy lacks."""
    from onnx import helper

    try:
        return helper.tensor_dtype_to_np_dtype(onnx_type)
    except Exception:
        raise Fold() from None


_UNARY = {
    "Neg": np.negative, "Abs": np.abs, "Sqrt": np.sqrt, "Floor": np.floor, "Ceil": np.ceil,
    "Reciprocal": np.reciprocal, "Exp": np.exp, "Log": np.log, "Sign": np.sign, "Not": np.logical_not,
    "Relu": lambda x: np.maximum(x, 0), "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Tanh": np.tanh,
    "Erf": None, "Round": np.round, "Sin": np.sin, "Cos": np.cos, "Identity": lambda x: x,
}
_BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Pow": np.power,
    "Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
    "BitShift": None,
}
_VARIADIC = {"Min": np.minimum, "Max": np.maximum, "Sum": np.add}


def _fold_guard(op: str, attrs: dict, vals: list) -> None:
    """Refuse (shapes only) a fold whose result would be too large to compute."""
    arrays = [np.asarray(v) for v in vals if v is not None]
    if sum(a.size for a in arrays) > MAX_FOLD_ELEMENTS:
        raise Fold()
    if op in _BINARY or op in _VARIADIC or op in ("Div", "Mod", "Where"):
        try:
            out = np.broadcast_shapes(*[a.shape for a in arrays])
        except ValueError:
            raise Fold() from None
        if prod(out) > MAX_FOLD_ELEMENTS:
            raise Fold()
    elif op == "Gather" and len(arrays) > 1:
        axis = int(attrs.get("axis", 0))
        if arrays[0].ndim == 0 or not -arrays[0].ndim <= axis < arrays[0].ndim:
            raise Fold()
        rest = prod(arrays[0].shape) // max(arrays[0].shape[axis], 1)
        if rest * arrays[1].size > MAX_FOLD_ELEMENTS:
            raise Fold()
    elif op == "NonZero" and arrays[0].ndim * arrays[0].size > MAX_FOLD_ELEMENTS:
        raise Fold()  # one index per axis and element


def fold(op: str, attrs: dict, vals: list, opset: int) -> list:
    """Evaluate an all-constant node with numpy; raise Fold when it cannot."""
    if any(v is None for v in vals[:1]):
        raise Fold()
    x = vals[0]
    _fold_guard(op, attrs, vals)
    with np.errstate(all="ignore"):
        if op in ("Identity", "Dropout"):
            return [x]
        if op == "Cast":
            return [x.astype(np_dtype(attrs.get("to", 1)))]
        if op == "CastLike":
            return [x.astype(vals[1].dtype)]
        if op in _UNARY and _UNARY[op] is not None:
            return [np.asarray(_UNARY[op](x))]
        if op in _BINARY and _BINARY[op] is not None:
            return [np.asarray(_BINARY[op](x, vals[1]))]
        if op in _VARIADIC:
            out = x
            for v in vals[1:]:
                out = _VARIADIC[op](out, v)
            return [np.asarray(out)]
        if op == "Div":
            y = vals[1]
            if np.issubdtype(x.dtype, np.integer) and np.issubdtype(y.dtype, np.integer):
                return [np.trunc(x / y).astype(np.result_type(x, y))]
            return [np.asarray(x / y)]
        if op == "Mod":
            y = vals[1]
            return [np.fmod(x, y) if attrs.get("fmod", 0) else np.mod(x, y)]
        if op == "Where":
            return [np.where(x, vals[1], vals[2])]
        if op == "Concat":
            return [np.concatenate([np.asarray(v) for v in vals], axis=int(attrs.get("axis", 0)))]
        if op == "Unsqueeze":
            axes = axes_arg(attrs, vals, 1)
            rank = x.ndim + len(axes)
            out = x
            for a in sorted(norm_axis(a, rank, op) for a in axes):
                out = np.expand_dims(out, a)
            return [out]
        if op == "Squeeze":
            axes = axes_arg(attrs, vals, 1)
            return [np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(norm_axis(a, x.ndim, op) for a in axes))]
        if op == "Gather":
            return [np.take(x, vals[1].astype(np.int64), axis=int(attrs.get("axis", 0)))]
        if op == "Slice":
            if opset < 10:
                starts, ends = attrs["starts"], attrs["ends"]
                axes = attrs.get("axes", list(range(len(starts))))
                steps = [1] * len(starts)
            else:
                starts, ends = vals[1].reshape(-1).tolist(), vals[2].reshape(-1).tolist()
                axes = vals[3].reshape(-1).tolist() if len(vals) > 3 and vals[3] is not None else list(range(len(starts)))
                steps = vals[4].reshape(-1).tolist() if len(vals) > 4 and vals[4] is not None else [1] * len(starts)
            index = [slice(None)] * x.ndim
            for s, e, a, st in zip(starts, ends, axes, steps):
                if st == 0:
                    raise Fold()
                index[norm_axis(int(a), x.ndim, op)] = slice(int(s), int(e), int(st))
            return [x[tuple(index)]]
        if op == "Reshape":
            target = vals[1].reshape(-1).tolist()
            return [x.reshape(resolve_reshape(x.shape, target, attrs.get("allowzero", 0), op))]
        if op == "Transpose":
            perm = attrs.get("perm", list(range(x.ndim))[::-1])
            return [np.transpose(x, perm)]
        if op == "ConstantOfShape":
            shape = tuple(int(d) for d in x.reshape(-1))
            if prod(shape) > MAX_FOLD_ELEMENTS or any(d < 0 for d in shape):
                raise Fold()
            fill = attrs.get("value")
            if fill is not None:
                from onnx import numpy_helper

                fill = numpy_helper.to_array(fill).reshape(-1)[0]
            else:
                fill = np.float32(0)
            return [np.full(shape, fill)]
        if op == "Range":
            start, limit, delta = (np.asarray(v).reshape(-1)[0].item() for v in vals[:3])
            # Python numbers: the length of an int64 range near the type's ends would wrap around.
            span = limit - start
            if delta == 0 or not math.isfinite(span / delta):
                raise Fold()
            length = max(int(-(-span // delta)), 0)  # the ceiling, exact for integers
            if length > MAX_FOLD_ELEMENTS:
                raise Fold((length,))
            return [np.arange(start, limit, delta, dtype=np.asarray(vals[0]).dtype)]
        if op == "Expand":
            shape = np.broadcast_shapes(x.shape, tuple(int(d) for d in vals[1].reshape(-1)))
            if prod(shape) > MAX_FOLD_ELEMENTS:
                raise Fold()
            return [np.broadcast_to(x, shape).copy()]
        if op == "Tile":
            reps = vals[1].reshape(-1).tolist()
            if x.size * prod(reps) > MAX_FOLD_ELEMENTS:
                raise Fold()
            return [np.tile(x, reps)]
        if op in ("ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"):
            fn = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max,
                  "ReduceMin": np.min, "ReduceMean": np.mean}[op]
            axes = axes_arg(attrs, vals, 1)
            keep = bool(attrs.get("keepdims", 1))
            if axes is None or not axes:
                if attrs.get("noop_with_empty_axes", 0):
                    return [x]
                return [np.asarray(fn(x, keepdims=keep))]
            return [np.asarray(fn(x, axis=tuple(norm_axis(a, x.ndim, op) for a in axes), keepdims=keep))]
        if op == "MatMul":
            if x.size * vals[1].size > MAX_FOLD_ELEMENTS:
                raise Fold()
            return [np.matmul(x, vals[1])]
        if op == "NonZero":
            return [np.array(np.nonzero(x), dtype=np.int64)]
        if op == "Trilu":
            k = int(np.asarray(vals[1]).reshape(-1)[0]) if len(vals) > 1 and vals[1] is not None else 0
            return [np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k)]
        if op == "Split":
            axis = int(attrs.get("axis", 0))
            parts = attrs.get("split")
            if parts is None and len(vals) > 1 and vals[1] is not None:
                parts = vals[1].reshape(-1).tolist()
            if parts is None or len(parts) > MAX_NODE_OUTPUTS:
                raise Fold()
            return list(np.split(x, np.cumsum(parts)[:-1], axis=axis))
    raise Fold()
