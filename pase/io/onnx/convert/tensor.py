"""Operators that make no layer: constants, shape queries and shape arithmetic, and
those that pass an activation through unchanged (Identity, Dropout, Cast)."""

from __future__ import annotations

from math import prod

import numpy as np

from pase.errors import FormatError
from pase.io.onnx.convert.registry import Unsupported, converter
from pase.io.onnx.reader import check_shape, tensor_value
from pase.io.onnx.values import Act, Const


@converter("Constant", inputs=0, on_constants=True)
def constant(imp, ins, attrs):
    """A Constant node's value, from whichever value attribute it has."""
    where = imp.where()
    if "value" in attrs:
        return [tensor_value(attrs["value"], where)]
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in attrs:
            return [Const.of(np.array(attrs[key], dtype=dtype))]
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in attrs:
            return [Const.of(np.array(list(attrs[key]), dtype=dtype))]
    if "sparse_value" in attrs:
        return [Const(check_shape(attrs["sparse_value"].dims, where), None)]
    raise FormatError(f"{where}: a Constant without a supported value attribute")


@converter("Shape", "Size", on_constants=True)
def shape_of(imp, ins, attrs):
    """The input's shape (or a slice of it) or element count, as a constant."""
    x = ins[0]
    if imp.node.op_type == "Size":
        return [Const.of(np.array(prod(x.shape), dtype=np.int64))]
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    return [Const.of(np.array(x.shape, dtype=np.int64)[slice(start, None if end is None else int(end))])]


@converter("ConstantOfShape", "Range", "NonZero", inputs=0)
def constant_only(imp, ins, attrs):
    """Refuses: these map only when their inputs are constants (and the node folds)."""
    raise Unsupported("")


@converter("Identity", "Dropout", "Cast", act_first=True, const_shape="first")
@converter("CastLike", inputs=2, act_first=True, const_shape="first")
def pass_through(imp, ins, attrs):
    """Input 0 unchanged; any further outputs (Dropout's mask) as loose activations."""
    x = ins[0]
    return [x] + [Act(x.shape, None) for _ in imp.node.output[1:]]
