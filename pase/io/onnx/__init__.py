"""Import ONNX models as pase graphs: :func:`from_onnx`.

An ONNX graph is a list of operator nodes over named tensors. The importer
walks it in topological order and keeps, for every tensor, one of:

* a *constant* (an initializer, a ``Constant`` node, or anything computed from
  constants only, such as the shape arithmetic ``Shape -> Gather -> Concat``
  that exporters emit before a ``Reshape``): folded with numpy, never a layer.
  Constants that feed a GEMM, a convolution or a ``Gather`` become that
  layer's weight tensors;
* an *activation*: the output of a pase layer, or a graph input (training
  data, labels), which is never a layer itself.

Operators map to the builders of :mod:`pase.ops` with the paper's dimension
letters (``b n c`` for a fully connected layer, ``b c h w n r s`` for a
convolution; ``b`` is the batch axis wherever it can be traced). Pointwise
operators (ReLU, GELU, a bias ``Add``, a scale ``Mul``...) whose activation
input comes from one layer are fused into that layer as ``pointwise`` ops, the
paper's convention; pure data movement (Reshape, Transpose, Squeeze...) that
cancels out is removed, and consecutive ``LSTM`` nodes become one multi-layer
``LSTM`` vertex. The batch size is the first dimension of the model's inputs,
or the ``batch`` argument.

How operators map (:data:`SUPPORTED_OPS` lists them all):

* ``Gemm`` / 2-D ``MatMul`` with a weight: ``FullyConnected``; other
  ``MatMul`` and ``Einsum`` (batched, attention ``q k^T``): ``Einsum``.
* ``Conv`` (2-D, and 1-D through a height-1 image): ``Conv2D``; pooling:
  ``Pooling`` (a global pool of a non-square map: ``ReduceMean``).
* ``BatchNormalization``, ``LayerNormalization``, ``Softmax`` /
  ``LogSoftmax``; ``SoftmaxCrossEntropyLoss`` and ``LogSoftmax`` followed by
  ``NegativeLogLikelihoodLoss``: one ``SoftmaxCrossEntropy``.
* ``Gather`` from a weight: ``Embedding``; ``LSTM``: ``LSTM`` (a
  bidirectional one: two LSTMs and a ``Concat``); ``Reduce*``: ``ReduceMean``.
* ``Concat``, ``Split``, ``Reshape`` / ``Flatten`` / ``Squeeze`` /
  ``Unsqueeze``, ``Transpose``: their pase layers. ``Slice``, ``Gather`` at
  constant indices, ``Pad``, ``Expand`` and ``Tile`` of an activation are
  modelled as crops (``Split``) and pads (``Concat``) of it.
* Element-wise operators with two different activations: ``Elementwise``,
  or an ``Einsum`` when one is broadcast (``x * gate[b, c]``).

Not mapped (listed in the error, or element-wise with ``unsupported=
"elementwise"``): control flow, other domains, GRU/RNN, grouped or dilated
convolutions, 3-D convolutions, non-square pooling windows.

Safety: the model is parsed from bytes (at most :data:`MAX_ONNX_BYTES`) with
protobuf; nothing is executed, no pickle is involved, and tensors stored as
*external data* are never read: their shapes suffice, and no path named in a
model is ever opened. Every problem raises a :class:`~pase.errors.PaseError`
subclass whose message names the node.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pase.errors import FormatError, GraphError, PaseError
from pase.limits import MAX_DIM, MAX_FOLD_ELEMENTS, MAX_LAYERS, MAX_NODES, MAX_ONNX_BYTES, MAX_TENSOR_ELEMENTS
from pase.ir.graph import Graph
from pase.ops import build_layer

__all__ = ["from_onnx", "SUPPORTED_OPS", "OnnxImportWarning"]


DATA_MOVEMENT = ("Reshape", "Transpose", "Split", "Concat")


class OnnxImportWarning(UserWarning):
    """An operator was approximated (``unsupported="elementwise"``)."""


class _Unsupported(Exception):
    """Internal: this node cannot be mapped; the message says why."""


# -- values ------------------------------------------------------------------------------


@dataclass(eq=False)
class _Spec:
    """A pase layer to build: builder op, name, keyword params, and one activation per input slot."""

    op: str
    name: str
    params: dict
    inputs: list  # _Act (with or without producer) or None per slot
    out_shapes: list
    node: str
    logsoftmax: bool = False


@dataclass(eq=False)
class _Act:
    """An activation: output ``index`` of layer ``src``, or a graph input when ``src`` is None."""

    shape: tuple
    src: _Spec | None = None
    index: int = 0
    batch_axis: int | None = None
    image: bool = False
    outer: int = 1  # the batch axis holds outer x batch x inner elements (merged axes)

    def key(self):
        return (id(self.src), self.index) if self.src is not None else id(self)


@dataclass(eq=False)
class _Const:
    """A constant tensor: its shape, and its value when known and small enough to fold."""

    shape: tuple
    value: np.ndarray | None = None


# -- ONNX helpers -----------------------------------------------------------------------------


def _onnx():
    try:
        import onnx
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise FormatError("reading .onnx files needs the onnx package: pip install 'pase[onnx]'") from None
    return onnx


def _attrs(node) -> dict:
    from onnx import helper

    out = {}
    for a in node.attribute:
        try:
            v = helper.get_attribute_value(a)
        except Exception:
            raise FormatError(f"node {_node_label(node)}: attribute {a.name!r} cannot be read") from None
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        out[a.name] = v
    return out


def _node_label(node) -> str:
    return f"{node.name!r} ({node.op_type})" if node.name else f"({node.op_type} -> {list(node.output)[:1]})"


def _is_external(tensor) -> bool:
    onnx = _onnx()
    return tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data) > 0


def _check_shape(shape, where: str) -> tuple:
    shape = tuple(int(d) for d in shape)
    for d in shape:
        if d < 0:
            raise FormatError(f"{where}: shape {shape} has a negative dimension")
        if d > MAX_DIM:
            raise FormatError(f"{where}: dimension {d} of shape {shape} is absurdly large (limit {MAX_DIM})")
    if prod(shape) > MAX_TENSOR_ELEMENTS:
        raise FormatError(f"{where}: shape {shape} has {prod(shape):.3g} elements; at most {MAX_TENSOR_ELEMENTS:.3g} are accepted")
    return shape


def _tensor_value(tensor, where: str) -> _Const:
    """A TensorProto as a constant; external or huge data is left unread."""
    from onnx import numpy_helper

    shape = _check_shape(tensor.dims, where)
    if _is_external(tensor) or prod(shape) > MAX_FOLD_ELEMENTS:
        return _Const(shape, None)
    try:
        value = numpy_helper.to_array(tensor)
    except Exception as exc:
        raise FormatError(f"{where}: tensor data cannot be read ({type(exc).__name__}: {exc})") from None
    if tuple(value.shape) != shape:
        raise FormatError(f"{where}: tensor data has shape {value.shape}, declared {shape}")
    return _Const(shape, value)


def _np_dtype(onnx_type: int):
    from onnx import helper

    try:
        return helper.tensor_dtype_to_np_dtype(onnx_type)
    except Exception:
        raise _Fold() from None


class _Fold(Exception):
    """Internal: constant folding not possible; fall back to inferred shapes."""


# -- constant folding ---------------------------------------------------------------------------

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


def _axes_arg(attrs, vals, index):
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    if len(vals) > index and vals[index] is not None:
        return [int(a) for a in np.asarray(vals[index]).reshape(-1)]
    return None


def _norm_axis(axis: int, rank: int, where: str) -> int:
    if not -rank <= axis < rank:
        raise FormatError(f"{where}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def _resolve_reshape(in_shape, target, allowzero, where) -> tuple:
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


def _fold_guard(op: str, attrs: dict, vals: list) -> None:
    """Refuse (shapes only) a fold whose result would be too large to compute."""
    arrays = [np.asarray(v) for v in vals if v is not None]
    if sum(a.size for a in arrays) > MAX_FOLD_ELEMENTS:
        raise _Fold()
    if op in _BINARY or op in _VARIADIC or op in ("Div", "Mod", "Where"):
        try:
            out = np.broadcast_shapes(*[a.shape for a in arrays])
        except ValueError:
            raise _Fold() from None
        if prod(out) > MAX_FOLD_ELEMENTS:
            raise _Fold()
    elif op == "Gather" and len(arrays) > 1:
        axis = int(attrs.get("axis", 0))
        if arrays[0].ndim == 0 or not -arrays[0].ndim <= axis < arrays[0].ndim:
            raise _Fold()
        rest = prod(arrays[0].shape) // max(arrays[0].shape[axis], 1)
        if rest * arrays[1].size > MAX_FOLD_ELEMENTS:
            raise _Fold()


def _fold(op: str, attrs: dict, vals: list, opset: int) -> list:
    """Evaluate an all-constant node with numpy; raise _Fold when it cannot."""
    if any(v is None for v in vals[:1]):
        raise _Fold()
    x = vals[0]
    _fold_guard(op, attrs, vals)
    with np.errstate(all="ignore"):
        if op in ("Identity", "Dropout"):
            return [x]
        if op == "Cast":
            return [x.astype(_np_dtype(attrs.get("to", 1)))]
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
            axes = _axes_arg(attrs, vals, 1)
            rank = x.ndim + len(axes)
            out = x
            for a in sorted(_norm_axis(a, rank, op) for a in axes):
                out = np.expand_dims(out, a)
            return [out]
        if op == "Squeeze":
            axes = _axes_arg(attrs, vals, 1)
            return [np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(_norm_axis(a, x.ndim, op) for a in axes))]
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
                    raise _Fold()
                index[_norm_axis(int(a), x.ndim, op)] = slice(int(s), int(e), int(st))
            return [x[tuple(index)]]
        if op == "Reshape":
            target = vals[1].reshape(-1).tolist()
            return [x.reshape(_resolve_reshape(x.shape, target, attrs.get("allowzero", 0), op))]
        if op == "Transpose":
            perm = attrs.get("perm", list(range(x.ndim))[::-1])
            return [np.transpose(x, perm)]
        if op == "ConstantOfShape":
            shape = tuple(int(d) for d in x.reshape(-1))
            if prod(shape) > MAX_FOLD_ELEMENTS or any(d < 0 for d in shape):
                raise _Fold()
            fill = attrs.get("value")
            if fill is not None:
                from onnx import numpy_helper

                fill = numpy_helper.to_array(fill).reshape(-1)[0]
            else:
                fill = np.float32(0)
            return [np.full(shape, fill)]
        if op == "Range":
            start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in vals[:3])
            if delta == 0 or abs((limit - start) / delta) > MAX_FOLD_ELEMENTS:
                raise _Fold()
            return [np.arange(start, limit, delta, dtype=np.asarray(vals[0]).dtype)]
        if op == "Expand":
            shape = np.broadcast_shapes(x.shape, tuple(int(d) for d in vals[1].reshape(-1)))
            if prod(shape) > MAX_FOLD_ELEMENTS:
                raise _Fold()
            return [np.broadcast_to(x, shape).copy()]
        if op == "Tile":
            reps = vals[1].reshape(-1).tolist()
            if x.size * prod(reps) > MAX_FOLD_ELEMENTS:
                raise _Fold()
            return [np.tile(x, reps)]
        if op in ("ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"):
            fn = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max,
                  "ReduceMin": np.min, "ReduceMean": np.mean}[op]
            axes = _axes_arg(attrs, vals, 1)
            keep = bool(attrs.get("keepdims", 1))
            if axes is None or not axes:
                if attrs.get("noop_with_empty_axes", 0):
                    return [x]
                return [np.asarray(fn(x, keepdims=keep))]
            return [np.asarray(fn(x, axis=tuple(_norm_axis(a, x.ndim, op) for a in axes), keepdims=keep))]
        if op == "MatMul":
            if x.size * vals[1].size > MAX_FOLD_ELEMENTS:
                raise _Fold()
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
            if parts is None:
                raise _Fold()
            return list(np.split(x, np.cumsum(parts)[:-1], axis=axis))
    raise _Fold()


# -- letters ----------------------------------------------------------------------------------------

_GENERIC = {0: "", 1: "n", 2: "sd", 3: "hsd", 4: "ghsd"}
_SPARE = "efijklmopqrtuvxyzacwn"


def _letters(rank: int, batch_axis: int | None = None, image: bool = False) -> tuple:
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


def _batch_slot(shape, before, batch):
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


def _reshape_axis(in_shape, out_shape, axis, outer, batch):
    """Where the batch axis lands after a reshape: ``(axis, outer)``, or ``(None, 1)`` when lost."""
    if axis is None or not batch or in_shape[axis] % (outer * batch):
        return None, 1
    slot = _batch_slot(out_shape, prod(in_shape[:axis]) * outer, batch)
    return slot if slot is not None else (None, 1)


def _unit_reshape(a, b) -> bool:
    """True when reshaping ``a`` to ``b`` only inserts or removes size-1 axes."""
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def _broadcast(shapes, where):
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise FormatError(f"{where}: input shapes {[tuple(s) for s in shapes]} do not broadcast") from None


# -- the importer ------------------------------------------------------------------------------------

_POINTWISE_UNARY = {
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Gelu", "Sigmoid", "HardSigmoid", "HardSwish",
    "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Softplus", "Softsign", "Mish",
    "Clip", "Sin", "Cos", "Sign", "Floor", "Ceil", "Round", "Not", "ThresholdedRelu", "IsNaN", "IsInf",
    "Swish",
}
_POINTWISE_NARY = {
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "BitwiseAnd", "BitwiseOr",
}
_BINARY_MIN = {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
               "And", "Or", "Xor", "Mod", "PRelu", "BitwiseAnd", "BitwiseOr"}
_MOVE_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Gather", "Expand", "Tile", "Pad"}
_PASS_THROUGH = {"Identity", "Dropout", "Cast", "CastLike"}
_SHAPE_OPS = {"Shape", "Size", "Constant", "ConstantOfShape", "Range", "NonZero"}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSumExp", "ReduceSumSquare"}
_NAMED = {
    "Gemm", "MatMul", "Einsum", "Conv", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
    "BatchNormalization", "InstanceNormalization", "LayerNormalization", "Softmax", "LogSoftmax",
    "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Concat", "Split", "Slice", "Reshape", "Flatten",
    "Squeeze", "Unsqueeze", "Transpose", "Gather", "LSTM", "Expand", "Tile", "Pad",
}
# Inputs every node of an op must have (ONNX's required inputs), and ops whose input 0 must be an activation.
_MIN_INPUTS = {
    "Gemm": 2, "MatMul": 2, "Conv": 2, "BatchNormalization": 5, "InstanceNormalization": 3, "LayerNormalization": 2,
    "Reshape": 2, "Gather": 2, "Expand": 2, "Tile": 2, "LSTM": 3, "SoftmaxCrossEntropyLoss": 2,
    "NegativeLogLikelihoodLoss": 2, "Where": 3, "Einsum": 1, "CastLike": 2,
}
_ACT_FIRST = (_PASS_THROUGH | _REDUCE | {
    "Conv", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization",
    "InstanceNormalization", "LayerNormalization", "Softmax", "LogSoftmax", "SoftmaxCrossEntropyLoss",
    "NegativeLogLikelihoodLoss", "Split", "Slice", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
    "Transpose", "Expand", "Tile", "Pad", "LSTM"} | _POINTWISE_UNARY)
SUPPORTED_OPS = frozenset(_POINTWISE_UNARY | _POINTWISE_NARY | _PASS_THROUGH | _SHAPE_OPS | _REDUCE | _NAMED)
"""ONNX operators (default domain) that :func:`from_onnx` maps."""


class _Importer:
    """One import: walks the nodes, keeps a value per tensor, collects layer specs, builds the Graph."""

    def __init__(self, model, *, batch, symbols, unsupported, name):
        self.model = model
        self.g = model.graph
        self.batch = batch
        self.symbols = dict(symbols or {})
        self.unsupported_mode = unsupported
        self.name = name
        self.opset = 0
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = int(imp.version)
        if self.opset <= 0:
            raise FormatError("the model declares no opset for the default ONNX domain")
        self.values: dict[str, object] = {}
        self.specs: list[_Spec] = []
        self.names: set[str] = set()
        self.unsupported: list[tuple[str, str, str]] = []
        self.old_batch: int | None = None
        self.new_batch: int | None = None
        self._inferred: dict[str, tuple] | None = None
        self.consumers: dict[str, int] = {}
        self._picks: dict = {}
        self._named = False
        self.node = None

    # -- naming and specs -------------------------------------------------------------------

    def _unique(self, base: str) -> str:
        base = (base or "layer").lstrip("/") or "layer"
        name, i = base, 1
        while name in self.names:
            i += 1
            name = f"{base}_{i}"
        self.names.add(name)
        return name

    def _base(self) -> str:
        n = self.node
        return (n.name or f"{n.op_type}_{len(self.specs)}").lstrip("/") or n.op_type

    def _where(self) -> str:
        return f"node {_node_label(self.node)}" if self.node is not None else "model"

    def _emit(self, op: str, params: dict, inputs: list, suffix: str = "") -> _Spec:
        if suffix and not self._named and self.node is not None and self.node.op_type in _MOVE_OPS:
            suffix = ""  # the layer a Reshape, Transpose... node maps to keeps the node's name
        self._named = True
        name = self._unique(self._base() + suffix)
        try:
            layer = build_layer(op, name, **params)
        except PaseError as exc:
            raise FormatError(f"{self._where()}: {exc}") from None
        if len(inputs) > len(layer.inputs):
            raise FormatError(f"{self._where()}: {len(inputs)} inputs for a {op} layer")
        for slot, act in enumerate(inputs):
            if isinstance(act, _Act) and act.src is not None and act.shape != layer.inputs[slot].shape:
                raise FormatError(
                    f"{self._where()}: input {slot} has shape {act.shape} but the {op} layer expects "
                    f"{layer.inputs[slot].shape}"
                )
        spec = _Spec(op, name, params, list(inputs) + [None] * (len(layer.inputs) - len(inputs)),
                     [t.shape for t in layer.outputs], self._where())
        self.specs.append(spec)
        if len(self.specs) > self.max_layers:
            raise FormatError(f"the model maps to more than {self.max_layers} layers")
        return spec

    @staticmethod
    def _out(spec: _Spec, index: int = 0, batch_axis: int | None = None, image: bool = False, outer: int = 1) -> _Act:
        return _Act(tuple(spec.out_shapes[index]), spec, index, batch_axis, image, outer if batch_axis is not None else 1)

    # -- shapes of the model's inputs -----------------------------------------------------------

    def _input_shapes(self):
        inits = {t.name for t in self.g.initializer}
        real = [i for i in self.g.input if i.name not in inits]
        if not real:
            raise FormatError("the model has no inputs (every input is an initializer)")
        shapes = {}
        for inp in real:
            where = f"model input {inp.name!r}"
            if not inp.type.HasField("tensor_type"):
                raise FormatError(f"{where} is not a tensor; only tensor inputs are supported")
            tt = inp.type.tensor_type
            if not tt.HasField("shape"):
                raise FormatError(f"{where} has no shape; export the model with input shapes")
            dims = []
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_value") and d.dim_value <= 0:
                    raise FormatError(f"{where} has a zero-sized or negative dimension ({d.dim_value})")
                else:
                    dims.append(d.dim_param or f"?{len(dims)}")
            shapes[inp.name] = dims
        first = next((s for s in shapes.values() if s), None)
        if first is not None and isinstance(first[0], int):
            self.old_batch = first[0]
        batch_symbol = first[0] if first is not None and isinstance(first[0], str) else None
        out = {}
        for name, dims in shapes.items():
            where = f"model input {name!r}"
            resolved = []
            for i, d in enumerate(dims):
                if i == 0 and self.batch is not None and (d == batch_symbol if isinstance(d, str) else d == self.old_batch):
                    resolved.append(self.batch)
                elif isinstance(d, int):
                    resolved.append(d)
                elif d in self.symbols:
                    resolved.append(int(self.symbols[d]))
                elif i == 0 and d == batch_symbol:
                    what = "an unknown batch dimension" if d.startswith("?") else f"a symbolic batch dimension {d!r}"
                    raise FormatError(f"{where} has {what}; give the batch size (batch=..., CLI --batch)")
                elif d.startswith("?"):
                    raise FormatError(f"{where} has an unknown size on axis {i}; export the model with fixed shapes")
                else:
                    raise FormatError(
                        f"{where} has a symbolic dimension {d!r} (axis {i}); give its size with symbols={{{d!r}: ...}} "
                        "or export the model with fixed shapes"
                    )
            out[name] = _check_shape(resolved, where)
            if 0 in out[name]:
                raise FormatError(f"{where} is zero-sized: shape {out[name]}")
        if self.batch is not None:
            self.new_batch = self.batch
        elif self.old_batch is not None:
            self.new_batch = self.old_batch
        elif batch_symbol is not None:
            self.new_batch = int(self.symbols[batch_symbol])
        self.input_shapes = out
        return out

    # -- onnx shape inference, only when a shape is needed that folding could not give ------------

    def _inferred_shape(self, tensor: str):
        if self._inferred is None:
            self._inferred = {}
            onnx = _onnx()
            try:
                m = onnx.ModelProto()
                m.ir_version = self.model.ir_version
                m.opset_import.extend(self.model.opset_import)
                g = m.graph
                g.node.extend(self.g.node)
                for t in self.g.initializer:
                    if _is_external(t) or prod(t.dims) > 4096:
                        g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
                    else:
                        g.initializer.append(t)
                for name, shape in self.input_shapes.items():
                    src = next(i for i in self.g.input if i.name == name)
                    g.input.append(onnx.helper.make_tensor_value_info(name, src.type.tensor_type.elem_type, list(shape)))
                g.output.extend(self.g.output)
                for o in g.output:
                    o.type.tensor_type.ClearField("shape")
                inferred = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False, data_prop=True)
                for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
                    tt = vi.type.tensor_type
                    if tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim):
                        self._inferred[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
            except Exception:
                pass
        return self._inferred.get(tensor)

    # -- activations: data movement helpers (compose and cancel) ------------------------------------

    def _reshape(self, act: _Act, shape, suffix=".reshape") -> _Act:
        shape = tuple(int(d) for d in shape)
        if prod(shape) != prod(act.shape):
            raise FormatError(f"{self._where()}: cannot reshape {act.shape} to {shape}")
        if shape == act.shape:
            return act
        axis, outer = _reshape_axis(act.shape, shape, act.batch_axis, act.outer, self.new_batch)
        image = act.image and len(shape) == 4 and axis == 0
        if act.src is None:
            return _Act(shape, None, 0, axis, image, outer)
        if act.src.op == "Reshape" and isinstance(act.src.inputs[0], _Act):
            return self._reshape(act.src.inputs[0], shape, suffix)
        dims = _letters(len(act.shape), act.batch_axis, act.image)
        spec = self._emit("Reshape", dict(shape=list(act.shape), dims=list(dims), out_shape=list(shape)), [act], suffix)
        return self._out(spec, 0, axis, image, outer)

    def _transpose(self, act: _Act, perm, suffix=".transpose") -> _Act:
        perm = [int(p) for p in perm]
        if sorted(perm) != list(range(len(act.shape))):
            raise FormatError(f"{self._where()}: perm {perm} is not a permutation of {len(act.shape)} axes")
        if perm == sorted(perm):
            return act
        shape = tuple(act.shape[p] for p in perm)
        moved = [p for p in perm if act.shape[p] != 1]
        if moved == sorted(moved):  # only size-1 axes move: a reshape
            return self._reshape(act, shape, suffix)
        axis = perm.index(act.batch_axis) if act.batch_axis is not None else None
        image = act.image and axis == 0
        if act.src is None:
            return _Act(shape, None, 0, axis, image, act.outer)
        if act.src.op == "Transpose" and isinstance(act.src.inputs[0], _Act):
            inner = act.src.params["perm"]
            return self._transpose(act.src.inputs[0], [inner[p] for p in perm], suffix)
        if act.src.op == "Reshape" and isinstance(act.src.inputs[0], _Act) and _unit_reshape(act.src.inputs[0].shape, act.shape):
            # Transpose the tensor before it gained or lost size-1 axes, then reshape:
            # keeps transposes next to transposes so that they cancel.
            x = act.src.inputs[0]
            big_y = [i for i, d in enumerate(act.shape) if d != 1]
            big_x = [i for i, d in enumerate(x.shape) if d != 1]
            to_x = dict(zip(big_y, big_x))
            order = [to_x[p] for p in perm if act.shape[p] != 1]
            perm_x = [i for i, d in enumerate(x.shape) if d == 1] + order
            return self._reshape(self._transpose(x, perm_x, suffix), shape, suffix)
        dims = _letters(len(act.shape), act.batch_axis, act.image)
        spec = self._emit("Transpose", dict(shape=list(act.shape), dims=list(dims), perm=perm), [act], suffix)
        return self._out(spec, 0, axis, image, act.outer)

    def _crop(self, act: _Act, axis: int, size: int, suffix=".slice") -> _Act:
        n = act.shape[axis]
        if size == n:
            return act
        if size <= 0:
            raise FormatError(f"{self._where()}: the result is zero-sized along axis {axis}")
        if act.src is None:
            shape = list(act.shape)
            shape[axis] = size
            return _Act(tuple(shape), None, 0, act.batch_axis, act.image, act.outer)
        dims = _letters(len(act.shape), act.batch_axis, act.image)
        spec = self._emit("Split", dict(shape=list(act.shape), dims=list(dims), axis=dims[axis], parts=[size, n - size]),
                          [act], suffix)
        return self._out(spec, 0, act.batch_axis, act.image, act.outer)

    def _grow(self, act: _Act, axis: int, size: int, suffix=".pad") -> _Act:
        n = act.shape[axis]
        if size == n:
            return act
        extra = list(act.shape)
        extra[axis] = size - n
        if act.src is None:
            out = list(act.shape)
            out[axis] = size
            return _Act(tuple(out), None, 0, act.batch_axis, act.image, act.outer)
        dims = _letters(len(act.shape), act.batch_axis, act.image)
        spec = self._emit("Concat", dict(shapes=[list(act.shape), extra], dims=list(dims), axis=dims[axis]), [act, None],
                          suffix)
        return self._out(spec, 0, act.batch_axis, act.image, act.outer)

    def _adapt(self, act: _Act, shape) -> _Act:
        """``act`` brought to ``shape`` by crops, pads and reshapes: the cost-model view of a
        slice, gather, pad, expand or an op of unknown semantics."""
        shape = tuple(int(d) for d in shape)
        if act.shape == shape:
            return act
        if prod(act.shape) == prod(shape):
            return self._reshape(act, shape)
        x = act
        if len(x.shape) < len(shape):
            x = self._reshape(x, (1,) * (len(shape) - len(x.shape)) + x.shape)
        if len(x.shape) != len(shape):
            x = self._reshape(x, (prod(x.shape),))
            target = (prod(shape),)
        else:
            target = shape
        for axis, size in enumerate(target):
            if size < x.shape[axis]:
                x = self._crop(x, axis, size)
            elif size > x.shape[axis]:
                x = self._grow(x, axis, size)
        return self._reshape(x, shape)

    # -- fusion ------------------------------------------------------------------------------------

    def _fusion_target(self, act: _Act) -> _Spec | None:
        spec = act.src
        seen = 0
        while spec is not None and seen < 64:
            if "pointwise" in spec.params:
                return spec
            if spec.op in ("Reshape", "Transpose", "Split", "BatchNorm") and isinstance(spec.inputs[0], _Act):
                spec = spec.inputs[0].src
                seen += 1
                continue
            return None
        return None

    def _try_bias(self, act: _Act, const: _Const) -> bool:
        spec = act.src
        if spec is None or spec.params.get("bias", True) or act.index != 0:
            return False
        shape = tuple(const.shape)
        while shape and shape[0] == 1:
            shape = shape[1:]
        out = act.shape
        if spec.op in ("FullyConnected", "Einsum"):
            if spec.op == "Einsum" and not spec.params.get("weights"):
                return False
            if shape != (out[-1],):
                return False
            if spec.op == "Einsum":
                eq = spec.params["equation"]
                lhs, rhs = eq.split("->")
                weight_letters = "".join(lhs.split(",")[i] for i in spec.params["weights"])
                if rhs[-1] not in weight_letters:
                    return False
        elif spec.op == "Conv2D":
            if shape not in ((out[1], 1, 1),):
                return False
        else:
            return False
        spec.params["bias"] = True
        return True

    # -- element-wise -----------------------------------------------------------------------------

    def _elementwise(self, ins: list, pointwise: bool, out_shape=None) -> _Act:
        acts = [v for v in ins if isinstance(v, _Act)]
        shapes = [v.shape for v in ins if v is not None]
        if out_shape is None:
            out_shape = _broadcast(shapes, self._where())
        out_shape = tuple(out_shape)
        lead = next((a for a in acts if a.batch_axis is not None), acts[0])
        shift = len(out_shape) - len(lead.shape)
        axis = lead.batch_axis + shift if lead.batch_axis is not None and shift >= 0 else None
        outer = lead.outer
        if axis is not None and out_shape[axis] != lead.shape[lead.batch_axis]:
            axis, outer = None, 1
        image = lead.image and len(out_shape) == 4
        distinct: dict = {}
        for a in acts:
            if a.src is not None or a.shape == out_shape:
                distinct.setdefault(a.key(), a)
        live = [a for a in distinct.values() if a.src is not None]
        if not live:
            return _Act(out_shape, None, 0, axis, image, outer)
        dims = _letters(len(out_shape), axis, image)
        if len(distinct) == 1 and live[0].shape == out_shape:
            x = live[0]
            consts = [v for v in ins if isinstance(v, _Const)]
            if self.node.op_type == "Add" and len(consts) == 1 and self._try_bias(x, consts[0]):
                return x
            # One activation (x + c, x * f(x)...): a pointwise op of the layer that made x.
            target = self._fusion_target(x)
            if target is not None:
                target.params["pointwise"] = target.params.get("pointwise", 0) + 1
                return x
            spec = self._emit("Elementwise", dict(shape=list(out_shape), dims=list(dims), inputs=1, pointwise=1), [x])
            return self._out(spec, 0, axis, image, outer)
        full = [a for a in distinct.values() if a.shape == out_shape]
        partial = [a for a in distinct.values() if a.shape != out_shape]
        if len(full) == 1 and len(partial) == 1:
            einsum = self._broadcast_einsum(full[0], partial[0], out_shape, dims)
            if einsum is not None:
                return self._out(einsum, 0, axis, image, outer)
        inputs = full + [self._adapt(a, out_shape) for a in partial]
        spec = self._emit("Elementwise", dict(shape=list(out_shape), dims=list(dims), inputs=len(inputs),
                                              pointwise=int(pointwise)), inputs)
        return self._out(spec, 0, axis, image, outer)

    def _broadcast_einsum(self, full: _Act, part: _Act, out_shape, dims):
        """A binary op with one operand broadcast: an Einsum such as ``bhst,bt->bhst``."""
        shift = len(out_shape) - len(part.shape)
        if shift < 0:
            return None
        keep = [i for i, d in enumerate(part.shape) if d == out_shape[i + shift] and d > 1]
        if not keep:
            return None
        squeezed = tuple(part.shape[i] for i in keep)
        if any(d != 1 for i, d in enumerate(part.shape) if i not in keep):
            return None
        src = self._reshape(part, squeezed)
        term = "".join(dims[i + shift] for i in keep)
        eq = f"{''.join(dims)},{term}->{''.join(dims)}"
        return self._emit("Einsum", dict(equation=eq, sizes=dict(zip(dims, out_shape))), [full, src])

    # -- dispatch ------------------------------------------------------------------------------------

    def run(self) -> Graph:
        self.max_layers = MAX_LAYERS
        g = self.g
        if len(g.node) == 0:
            raise FormatError("the model's graph has no nodes")
        if len(g.node) > MAX_NODES:
            raise FormatError(f"the model has {len(g.node)} nodes; at most {MAX_NODES} are accepted")
        for t in g.initializer:
            if not t.name:
                raise FormatError("an initializer has no name")
            self.values[t.name] = _tensor_value(t, f"initializer {t.name!r}")
        for t in g.sparse_initializer:
            self.values[t.values.name or t.indices.name] = _Const(_check_shape(t.dims, "sparse initializer"), None)
        for name, shape in self._input_shapes().items():
            self.values[name] = _Act(shape, None, 0, 0 if shape and shape[0] == self.new_batch else None, len(shape) == 4)
        for node in g.node:
            for t in node.input:
                if t:
                    self.consumers[t] = self.consumers.get(t, 0) + 1
        for node in self._topological(g.node):
            self.node = node
            self._named = False
            try:
                outs = self._convert(node)
            except _Unsupported as exc:
                outs = self._fallback(node, str(exc))
            except PaseError:
                if self.unsupported and self.unsupported_mode == "error":
                    break
                raise
            except (ValueError, TypeError, KeyError, IndexError, ArithmeticError, AttributeError,
                    RecursionError, MemoryError) as exc:
                if self.unsupported and self.unsupported_mode == "error":
                    break
                raise FormatError(f"{self._where()}: cannot be imported ({type(exc).__name__}: {exc})") from None
            if len(outs) < len([o for o in node.output if o]):
                outs = list(outs) + [None] * (len(node.output) - len(outs))
            for name, value in zip(node.output, outs):
                if name:
                    if value is None:
                        value = _Act((), None)
                    self.values[name] = value
        self.node = None
        if self.unsupported:
            listing = self._unsupported_listing()
            if self.unsupported_mode == "error":
                raise FormatError(
                    f"the model uses operators pase cannot import: {listing}. Re-export without them, or import "
                    "with unsupported='elementwise' to treat them as element-wise layers"
                )
            warnings.warn(f"treated as element-wise layers (approximate cost): {listing}", OnnxImportWarning, stacklevel=3)
        return self._build()

    def _unsupported_listing(self) -> str:
        by_op: dict[str, list] = {}
        for op, node, reason in self.unsupported:
            by_op.setdefault((op, reason), []).append(node)
        parts = []
        for (op, reason), nodes in by_op.items():
            what = f"{op} ({reason})" if reason else op
            parts.append(f"{what} x{len(nodes)}, e.g. {nodes[0]!r}")
        return "; ".join(parts)

    def _topological(self, nodes):
        """Nodes in file order where valid, else moved after their producers; refuses cycles and dangling inputs."""
        import heapq

        available = set(self.values)
        produced: dict[str, int] = {}
        for i, node in enumerate(nodes):
            for o in node.output:
                if not o:
                    continue
                if o in produced or o in available:
                    raise FormatError(f"tensor {o!r} is produced twice (node {_node_label(node)})")
                produced[o] = i
        deps = [0] * len(nodes)
        users: dict[int, list] = {}
        for i, node in enumerate(nodes):
            srcs = set()
            for t in node.input:
                if not t or t in available:
                    continue
                if t not in produced:
                    raise FormatError(f"node {_node_label(node)} reads tensor {t!r}, which no node, input or initializer provides")
                srcs.add(produced[t])
            deps[i] = len(srcs)
            for j in srcs:
                users.setdefault(j, []).append(i)
        heap = [i for i in range(len(nodes)) if deps[i] == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            i = heapq.heappop(heap)
            order.append(nodes[i])
            for j in users.get(i, ()):
                deps[j] -= 1
                if deps[j] == 0:
                    heapq.heappush(heap, j)
        if len(order) != len(nodes):
            stuck = [_node_label(nodes[i]) for i in range(len(nodes)) if deps[i] > 0][:3]
            raise FormatError(f"the model's graph has a cycle through nodes {', '.join(stuck)}")
        return order

    def _convert(self, node) -> list:
        op = node.op_type
        ins = [self.values[t] if t else None for t in node.input]
        default_domain = node.domain in ("", "ai.onnx")
        if op not in SUPPORTED_OPS or not default_domain:
            if ins and not any(isinstance(v, _Act) for v in ins) and op not in ("If", "Loop", "Scan"):
                # Computed from constants only (a causal mask from Trilu...): a constant, whatever the op.
                return self._fold_node(node, op if default_domain else "", _attrs(node), ins)
            raise _Unsupported("" if default_domain else f"domain {node.domain!r}")
        need = _MIN_INPUTS.get(op, 0 if op in _SHAPE_OPS and op not in ("Shape", "Size") else 1)
        if op in _BINARY_MIN:
            need = 2
        elif op == "Slice" and self.opset >= 10:
            need = 3
        elif op == "Pad" and self.opset >= 11:
            need = 2
        if len(ins) < need or any(v is None for v in ins[:need]):
            raise FormatError(f"{self._where()}: needs {need} input(s), has {sum(v is not None for v in ins)}")
        attrs = _attrs(node)
        if op == "Constant":
            return [self._constant(attrs)]
        if op in ("Shape", "Size"):
            x = ins[0]
            if x is None:
                raise FormatError(f"{self._where()}: no input")
            shape = np.array(x.shape, dtype=np.int64)
            if op == "Size":
                return [self._const(np.array(prod(x.shape), dtype=np.int64))]
            start, end = int(attrs.get("start", 0)), attrs.get("end")
            return [self._const(shape[slice(start, None if end is None else int(end))])]
        acts = [v for v in ins if isinstance(v, _Act)]
        if not acts:
            return self._fold_node(node, op, attrs, ins)
        if op in _ACT_FIRST and not isinstance(ins[0], _Act):
            raise FormatError(f"{self._where()}: input 0 must be an activation, but it is a constant")
        if op in _PASS_THROUGH:
            x = ins[0]
            if not isinstance(x, _Act):
                raise FormatError(f"{self._where()}: input is not an activation")
            extra = [_Act(x.shape, None) for _ in node.output[1:]]
            return [x] + extra
        handler = getattr(self, f"_op_{op}", None)
        if handler is not None:
            return handler(ins, attrs)
        if op in _POINTWISE_UNARY:
            return [self._elementwise([ins[0]], True)]
        if op in _POINTWISE_NARY:
            return [self._elementwise([v for v in ins if v is not None], op not in ("Add", "Sub", "Sum"))]
        if op in _REDUCE:
            return self._reduce(ins, attrs)
        raise _Unsupported("")

    @staticmethod
    def _const(value) -> _Const:
        value = np.asarray(value)
        return _Const(tuple(int(d) for d in value.shape), value)

    def _constant(self, attrs) -> _Const:
        where = self._where()
        if "value" in attrs:
            return _tensor_value(attrs["value"], where)
        for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
            if key in attrs:
                return self._const(np.array(attrs[key], dtype=dtype))
        for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
            if key in attrs:
                return self._const(np.array(list(attrs[key]), dtype=dtype))
        if "sparse_value" in attrs:
            return _Const(_check_shape(attrs["sparse_value"].dims, where), None)
        raise FormatError(f"{where}: a Constant without a supported value attribute")

    def _fold_node(self, node, op, attrs, ins) -> list:
        vals = [v.value if isinstance(v, _Const) else None for v in ins]
        present = [v for v in ins if v is not None]
        if all(isinstance(v, _Const) and v.value is not None for v in present):
            try:
                outs = _fold(op, attrs, vals, self.opset)
                return [self._const(o) for o in outs]
            except _Fold:
                pass
            except FormatError:
                raise
            except Exception:
                pass
        # Value unknown (external data, too large, or an op we do not evaluate): shapes only.
        out = []
        for name in node.output:
            shape = self._inferred_shape(name) if name else None
            if shape is None and op in _PASS_THROUGH | _POINTWISE_UNARY and ins and ins[0] is not None:
                shape = ins[0].shape
            if shape is None and op in _POINTWISE_NARY:
                shape = _broadcast([v.shape for v in present], self._where())
            if shape is None:
                shape = ()
            out.append(_Const(_check_shape(shape, self._where()), None))
        return out

    def _value(self, v, what: str):
        if v is None:
            return None
        if not isinstance(v, _Const) or v.value is None:
            raise FormatError(
                f"{self._where()}: its {what} is computed at run time (or stored as external data) and "
                "could not be folded to a constant"
            )
        return v.value

    # -- unsupported: error list, or the element-wise approximation ----------------------------------

    def _fallback(self, node, reason: str) -> list:
        self.unsupported.append((node.op_type, node.name or (node.output[0] if node.output else ""), reason))
        ins = [self.values[t] if t else None for t in node.input]
        acts = [v for v in ins if isinstance(v, _Act)]
        live = [a for a in acts if a.src is not None]
        outs = []
        for k, name in enumerate(node.output):
            if not name:
                outs.append(None)
                continue
            shape = self._inferred_shape(name) or (acts[0].shape if acts else None)
            if shape is None:
                shape = ()
            shape = _check_shape(shape, self._where())
            if k > 0 or not live or not shape or 0 in shape:
                outs.append(_Act(shape, None) if acts or not ins else _Const(shape, None))
                continue
            main = live[0]
            axis = main.batch_axis if len(shape) == len(main.shape) else None
            inputs = [self._adapt(main, shape)]
            for a in live[1:]:
                if a.key() != main.key():
                    inputs.append(self._adapt(a, shape))
            dims = _letters(len(shape), axis, main.image and len(shape) == 4)
            spec = self._emit("Elementwise", dict(shape=list(shape), dims=list(dims), inputs=len(inputs), pointwise=1),
                              inputs)
            outs.append(self._out(spec, 0, axis))
        return outs

    # -- GEMMs -------------------------------------------------------------------------------------

    def _op_Gemm(self, ins, attrs):
        a, b = ins[0], ins[1]
        c = ins[2] if len(ins) > 2 else None
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise FormatError(f"{self._where()}: Gemm needs 2-D inputs, got {a.shape} and {b.shape}")
        if isinstance(a, _Act) and attrs.get("transA", 0):
            a = self._transpose(a, [1, 0])
        elif attrs.get("transA", 0):
            a = _Const(a.shape[::-1])
        if isinstance(b, _Act) and attrs.get("transB", 0):
            b = self._transpose(b, [1, 0])
        elif attrs.get("transB", 0):
            b = _Const(b.shape[::-1])
        m, k = a.shape
        if b.shape[0] != k:
            raise FormatError(f"{self._where()}: inner dimensions differ: {a.shape} x {b.shape}")
        n = b.shape[1]
        if isinstance(a, _Act) and isinstance(b, _Const):
            bias = isinstance(c, _Const) and prod(c.shape) > 0
            spec = self._emit("FullyConnected", dict(b=m, n=n, c=k, pointwise=0, bias=bias), [a])
            out = self._out(spec, 0, 0 if a.batch_axis == 0 else None, outer=a.outer)
        else:
            out = self._matmul(a, b)
            if isinstance(c, _Const) and prod(c.shape) > 0:
                self._bias_or_pointwise(out, c)
        if isinstance(c, _Act):
            out = self._elementwise([out, c], False)
        return [out]

    def _bias_or_pointwise(self, out: _Act, c: _Const):
        if not self._try_bias(out, c):
            target = self._fusion_target(out)
            if target is not None:
                target.params["pointwise"] = target.params.get("pointwise", 0) + 1

    def _op_MatMul(self, ins, attrs):
        return [self._matmul(ins[0], ins[1])]

    def _matmul(self, a, b) -> _Act:
        where = self._where()
        ra, rb = len(a.shape), len(b.shape)
        if ra == 0 or rb == 0:
            raise FormatError(f"{where}: MatMul of a scalar")
        ka = a.shape[-1]
        kb = b.shape[0] if rb == 1 else b.shape[-2]
        if ka != kb:
            raise FormatError(f"{where}: inner dimensions differ: {a.shape} x {b.shape}")
        if isinstance(a, _Act) and isinstance(b, _Const) and ra == 2 and rb == 2:
            spec = self._emit("FullyConnected", dict(b=a.shape[0], n=b.shape[1], c=ka, pointwise=0, bias=False), [a])
            return self._out(spec, 0, 0 if a.batch_axis == 0 else None, outer=a.outer)
        lead_a = a.shape[:-2] if ra >= 2 else ()
        lead_b = b.shape[:-2] if rb >= 2 else ()
        lead = _broadcast([lead_a, lead_b], where)
        weight_b = isinstance(b, _Const)
        m_letter, k_letter, n_letter = ("s", "d", "e") if weight_b else ("s", "d", "t")
        # Where the batch axis lands in the output: a leading axis, or the rows (m) of A.
        batch_pos, outer = None, 1
        for x, r in ((a, ra), (b, rb)):
            if not isinstance(x, _Act) or x.batch_axis is None:
                continue
            ax = x.batch_axis
            if r >= 2 and ax < r - 2:
                batch_pos = ax + len(lead) - (r - 2)
            elif x is a and r >= 2 and ax == r - 2:
                batch_pos = len(lead)
            if batch_pos is not None:
                outer = x.outer
                break
        if batch_pos == len(lead):
            m_letter = "b"
        spare = [c for c in "shgfijlmopqruvwxyzac" if c not in (m_letter, k_letter, n_letter)]
        lead_letters = ["b" if i == batch_pos else spare.pop(0) for i in range(len(lead))]
        sizes = {ll: d for ll, d in zip(lead_letters, lead)}
        sizes[k_letter] = ka
        if ra >= 2:
            sizes[m_letter] = a.shape[-2]
        if rb >= 2:
            sizes[n_letter] = b.shape[-1]

        def operand(x, r, tail):
            lead_x = x.shape[:-2] if r >= 2 else ()
            shift = len(lead) - len(lead_x)
            keep = [i for i, d in enumerate(lead_x) if not (d == 1 and lead[i + shift] != 1)]
            letters = "".join(lead_letters[i + shift] for i in keep) + tail
            if len(keep) != len(lead_x) and isinstance(x, _Act):
                x = self._reshape(x, tuple(lead_x[i] for i in keep) + x.shape[len(lead_x):])
            return x, letters

        a2, ta = operand(a, ra, (m_letter if ra >= 2 else "") + k_letter)
        b2, tb = operand(b, rb, k_letter + (n_letter if rb >= 2 else ""))
        out_term = "".join(lead_letters) + (m_letter if ra >= 2 else "") + (n_letter if rb >= 2 else "")
        eq = f"{ta},{tb}->{out_term}"
        weights = [i for i, x in enumerate((a2, b2)) if isinstance(x, _Const)]
        inputs = [x for x in (a2, b2) if isinstance(x, _Act)]
        spec = self._emit("Einsum", dict(equation=eq, sizes=sizes, weights=weights, pointwise=0, bias=False), inputs)
        return self._out(spec, 0, out_term.index("b") if "b" in out_term and batch_pos is not None else None, outer=outer)

    def _op_Einsum(self, ins, attrs):
        eq = str(attrs.get("equation", "")).replace(" ", "")
        if "->" in eq:
            lhs, rhs = eq.split("->", 1)
        else:
            lhs = eq
            letters = [c for c in lhs if c.isalpha()]
            rhs = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
        terms = lhs.split(",")
        if len(terms) != len(ins):
            raise FormatError(f"{self._where()}: equation {eq!r} has {len(terms)} operands, the node {len(ins)}")
        if "." in eq:
            raise _Unsupported("ellipsis in the equation")
        sizes = {}
        for t, x in zip(terms, ins):
            if len(t) != len(x.shape) or not t.isalpha():
                raise FormatError(f"{self._where()}: term {t!r} does not fit an operand of shape {x.shape}")
            if len(set(t)) != len(t):
                raise _Unsupported("repeated index (diagonal)")
            for c, d in zip(t, x.shape):
                if sizes.setdefault(c, d) != d:
                    raise _Unsupported("broadcasting in the equation")
        weights = [i for i, x in enumerate(ins) if isinstance(x, _Const)]
        inputs = [x for x in ins if isinstance(x, _Act)]
        spec = self._emit("Einsum", dict(equation=f"{lhs}->{rhs}", sizes=sizes, weights=weights, pointwise=0, bias=False),
                          inputs)
        return [self._out(spec, 0, rhs.index("b") if "b" in rhs else None)]

    # -- convolution and pooling -----------------------------------------------------------------

    def _window(self, x_shape, kernel, attrs, *, ceil_mode=False):
        """Per spatial axis: (stride, symmetric pad) reproducing ONNX's output size, or _Unsupported."""
        spatial = x_shape[2:]
        nd = len(spatial)
        strides = [int(s) for s in attrs.get("strides", [1] * nd)]
        dil = [int(d) for d in attrs.get("dilations", [1] * nd)]
        if len(strides) != nd or len(kernel) != nd:
            raise FormatError(f"{self._where()}: kernel {kernel} or strides {strides} do not fit input {x_shape}")
        if any(d != 1 for d in dil):
            raise _Unsupported("dilation")
        if any(s <= 0 for s in strides) or any(k <= 0 for k in kernel):
            raise FormatError(f"{self._where()}: strides {strides} and kernel {kernel} must be positive")
        auto = attrs.get("auto_pad", "NOTSET")
        pads = [int(p) for p in attrs.get("pads", [0] * 2 * nd)]
        if len(pads) != 2 * nd or any(p < 0 for p in pads):
            raise FormatError(f"{self._where()}: pads {pads} do not fit input {x_shape}")
        outs, result = [], []
        for i in range(nd):
            size, k, s = spatial[i], kernel[i], strides[i]
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                out = -(-size // s)
                total = max((out - 1) * s + k - size, 0)
            elif auto == "VALID":
                total = 0
                out = (size - k) // s + 1
            else:
                total = pads[i] + pads[i + nd]
                span = size + total - k
                out = (-(-span // s) if ceil_mode else span // s) + 1
            if out <= 0:
                raise FormatError(f"{self._where()}: input size {size} with kernel {k} leaves no output")
            # A symmetric pad giving the same output size: half the total, or the least that suffices.
            least = max(0, -(-((out - 1) * s + k - size) // 2))
            for p in (total // 2, -(-total // 2), least, least + 1):
                if (size + 2 * p - k) // s + 1 == out:
                    break
            else:
                raise _Unsupported("padding that no symmetric pad reproduces")
            outs.append(out)
            result.append((s, p))
        return result, outs

    def _op_Conv(self, ins, attrs):
        x, w = ins[0], ins[1]
        bias = len(ins) > 2 and ins[2] is not None
        if not isinstance(w, _Const):
            raise _Unsupported("weights computed at run time")
        if int(attrs.get("group", 1)) != 1:
            raise _Unsupported(f"grouped convolution, group={attrs.get('group')}")
        if len(x.shape) not in (3, 4) or len(w.shape) != len(x.shape):
            raise _Unsupported(f"{len(x.shape) - 2}-D convolution") if len(x.shape) > 4 else FormatError(
                f"{self._where()}: input {x.shape} and weight {w.shape} do not fit a convolution")
        if w.shape[1] != x.shape[1]:
            raise FormatError(f"{self._where()}: weight {w.shape} expects {w.shape[1]} input channels, input has {x.shape[1]}")
        one_d = len(x.shape) == 3
        kernel = list(w.shape[2:])
        win, outs = self._window(x.shape, kernel, attrs)
        if one_d:
            x = self._reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
            kernel = [1] + kernel
            win = [(win[0][0], 0)] + win
        (sh, ph), (sw, pw) = win
        b, c, height, width = x.shape
        if sh != sw:
            if height == 1 and kernel[0] == 1 and ph == 0:
                sh = sw
            elif width == 1 and kernel[1] == 1 and pw == 0:
                sw = sh
            else:
                raise _Unsupported("different strides along height and width")
        pad = ph if ph == pw else [ph, pw]
        spec = self._emit("Conv2D", dict(b=b, c=c, height=height, width=width, n=w.shape[0], r=kernel[0], s=kernel[1],
                                         stride=sh, pad=pad, pointwise=0, bias=bias), [x])
        out = self._out(spec, 0, 0 if x.batch_axis == 0 else None, True)
        if one_d:
            out = self._reshape(out, (b, w.shape[0], out.shape[3]))
        return [out]

    def _pool(self, ins, attrs, mode):
        x = ins[0]
        if len(x.shape) != 4:
            raise _Unsupported(f"{len(x.shape) - 2}-D pooling")
        kernel = [int(k) for k in attrs.get("kernel_shape", [])]
        if len(kernel) != 2:
            raise FormatError(f"{self._where()}: kernel_shape {kernel} does not fit input {x.shape}")
        if kernel[0] != kernel[1]:
            raise _Unsupported(f"non-square kernel {kernel}")
        win, outs = self._window(x.shape, kernel, attrs, ceil_mode=bool(attrs.get("ceil_mode", 0)))
        (sh, ph), (sw, pw) = win
        if sh != sw or ph != pw:
            raise _Unsupported("different strides or pads along height and width")
        b, c, height, width = x.shape
        spec = self._emit("Pooling", dict(b=b, c=c, height=height, width=width, kernel=kernel[0], stride=sh, pad=ph,
                                          mode=mode), [x])
        return [self._out(spec, 0, x.batch_axis, True)]

    def _op_MaxPool(self, ins, attrs):
        return self._pool(ins, attrs, "max")

    def _op_AveragePool(self, ins, attrs):
        return self._pool(ins, attrs, "avg")

    def _op_LpPool(self, ins, attrs):
        return self._pool(ins, attrs, "avg")

    def _global_pool(self, ins, mode):
        x = ins[0]
        if len(x.shape) < 3:
            raise FormatError(f"{self._where()}: global pooling needs an input of rank 3 or more, got {x.shape}")
        if len(x.shape) == 4 and x.shape[2] == x.shape[3]:
            b, c, h, w = x.shape
            spec = self._emit("Pooling", dict(b=b, c=c, height=h, width=w, kernel=h, stride=h, pad=0, mode=mode), [x])
            return [self._out(spec, 0, x.batch_axis, True)]
        dims = _letters(len(x.shape), x.batch_axis, x.image)
        spec = self._emit("ReduceMean", dict(shape=list(x.shape), dims=list(dims), reduce=list(dims[2:])), [x])
        out = self._out(spec, 0, x.batch_axis if x.batch_axis in (0, 1) else None)
        return [self._reshape(out, x.shape[:2] + (1,) * (len(x.shape) - 2))]

    def _op_GlobalAveragePool(self, ins, attrs):
        return self._global_pool(ins, "avg")

    def _op_GlobalMaxPool(self, ins, attrs):
        return self._global_pool(ins, "max")

    # -- normalisation, softmax, losses ------------------------------------------------------------

    def _op_BatchNormalization(self, ins, attrs):
        x = ins[0]
        if len(x.shape) < 2:
            raise FormatError(f"{self._where()}: batch normalisation of a tensor of rank {len(x.shape)}")
        shape4 = x.shape if len(x.shape) == 4 else (x.shape[0], x.shape[1], 1, prod(x.shape[2:]))
        x4 = self._reshape(x, shape4)
        spec = self._emit("BatchNorm", dict(b=shape4[0], c=shape4[1], h=shape4[2], w=shape4[3]), [x4])
        out = self._reshape(self._out(spec, 0, x4.batch_axis, True), x.shape)
        return [out] + [_Act((x.shape[1],), None) for _ in range(4)]

    _op_InstanceNormalization = _op_BatchNormalization

    def _normalised(self, x: _Act, axis: int, op: str, **extra):
        """A LayerNorm/Softmax over axes ``axis..`` (merged into one by a reshape when several)."""
        rank = len(x.shape)
        axis = _norm_axis(axis, rank, self._where())
        shape = x.shape if axis == rank - 1 else x.shape[:axis] + (prod(x.shape[axis:]),)
        x2 = self._reshape(x, shape)
        dims = _letters(len(shape), x2.batch_axis, x2.image)
        spec = self._emit(op, dict(shape=list(shape), dims=list(dims), axis=dims[-1], **extra), [x2])
        return spec, x2

    def _op_LayerNormalization(self, ins, attrs):
        x = ins[0]
        spec, x2 = self._normalised(x, int(attrs.get("axis", -1)), "LayerNorm")
        out = self._reshape(self._out(spec, 0, x2.batch_axis, x2.image), x.shape)
        return [out, _Act((), None), _Act((), None)]

    def _softmax(self, ins, attrs, log):
        x = ins[0]
        rank = len(x.shape)
        axis = int(attrs.get("axis", -1 if self.opset >= 13 else 1))
        axis = _norm_axis(axis, rank, self._where())
        if self.opset >= 13 or axis == rank - 1:
            dims = _letters(rank, x.batch_axis, x.image)
            spec = self._emit("Softmax", dict(shape=list(x.shape), dims=list(dims), axis=dims[axis]), [x])
            spec.logsoftmax = log
            return [self._out(spec, 0, x.batch_axis, x.image)]
        spec, x2 = self._normalised(x, axis, "Softmax")
        spec.logsoftmax = log
        return [self._reshape(self._out(spec, 0, x2.batch_axis), x.shape)]

    def _op_Softmax(self, ins, attrs):
        return self._softmax(ins, attrs, False)

    def _op_LogSoftmax(self, ins, attrs):
        return self._softmax(ins, attrs, True)

    def _loss(self, scores: _Act, labels, reduction: str, fuse_from_logsoftmax: bool):
        if len(scores.shape) < 2:
            raise FormatError(f"{self._where()}: scores of shape {scores.shape} have no class axis")
        label_shape = scores.shape[:1] + scores.shape[2:]
        label_act = labels if isinstance(labels, _Act) and labels.src is not None else None
        if label_act is not None and label_act.shape != label_shape:
            label_act = self._adapt(label_act, label_shape)
        spec = scores.src
        if (fuse_from_logsoftmax and spec is not None and spec.op == "Softmax" and spec.logsoftmax
                and scores.index == 0 and spec.params["axis"] == spec.params["dims"][1]
                and tuple(spec.params["shape"]) == scores.shape):
            # LogSoftmax -> NLL loss: one SoftmaxCrossEntropy vertex.
            spec.op = "SoftmaxCrossEntropy"
            spec.inputs = [spec.inputs[0], label_act]
            spec.out_shapes = [label_shape]
            out_spec = spec
        else:
            dims = _letters(len(scores.shape), scores.batch_axis)
            out_spec = self._emit("SoftmaxCrossEntropy", dict(shape=list(scores.shape), dims=list(dims), axis=dims[1]),
                                  [scores, label_act])
        if reduction == "none":
            return self._out(out_spec, 0, scores.batch_axis if scores.batch_axis == 0 else None)
        return _Act((), None)

    def _op_SoftmaxCrossEntropyLoss(self, ins, attrs):
        loss = self._loss(ins[0], ins[1], attrs.get("reduction", "mean"), False)
        return [loss, _Act(ins[0].shape, None)]

    def _op_NegativeLogLikelihoodLoss(self, ins, attrs):
        scores = ins[0]
        single = self.consumers.get(self.node.input[0], 0) == 1
        return [self._loss(scores, ins[1], attrs.get("reduction", "mean"), single)]

    def _reduce(self, ins, attrs):
        x = ins[0]
        if not isinstance(x, _Act):
            raise FormatError(f"{self._where()}: input is not an activation")
        vals = [v.value if isinstance(v, _Const) else None for v in ins]
        if len(ins) > 1 and ins[1] is not None and not isinstance(ins[1], _Const):
            raise FormatError(f"{self._where()}: axes computed at run time")
        axes = _axes_arg(attrs, vals, 1)
        rank = len(x.shape)
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(rank))
        axes = sorted({_norm_axis(a, rank, self._where()) for a in axes})
        keep = bool(attrs.get("keepdims", 1))
        kept_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        out_shape = kept_shape if keep else tuple(d for i, d in enumerate(x.shape) if i not in axes)
        if len(axes) == rank or x.src is None:
            return [_Act(out_shape, None)]
        dims = _letters(rank, x.batch_axis, x.image)
        spec = self._emit("ReduceMean", dict(shape=list(x.shape), dims=list(dims), reduce=[dims[a] for a in axes]), [x])
        axis = x.batch_axis
        if axis is not None:
            axis = None if axis in axes else axis - sum(1 for a in axes if a < axis)
        out = self._out(spec, 0, axis)
        return [self._reshape(out, out_shape)]

    # -- data movement ---------------------------------------------------------------------------------

    def _op_Reshape(self, ins, attrs):
        x = ins[0]
        target = [int(t) for t in np.asarray(self._value(ins[1], "target shape")).reshape(-1)]
        allowzero = int(attrs.get("allowzero", 0))
        try:
            shape = _resolve_reshape(x.shape, target, allowzero, self._where())
        except FormatError:
            shape = None
        if shape is None or prod(shape) != prod(x.shape):
            shape = self._rebatch_target(x, target, allowzero)
        return [self._reshape(x, _check_shape(shape, self._where()))]

    def _rebatch_target(self, x: _Act, target, allowzero):
        """A Reshape target fixed at export for another batch size, rescaled to this one."""
        old, new = self.old_batch, self.new_batch
        if old and new and old != new and x.batch_axis is not None and -1 not in target:
            fixed = [x.shape[i] if t == 0 and not allowzero and i < len(x.shape) else t for i, t in enumerate(target)]
            slot = _batch_slot(fixed, prod(x.shape[:x.batch_axis]) * x.outer, old)
            j = slot[0] if slot else None
            if j is not None and (fixed[j] * new) % old == 0:
                fixed[j] = fixed[j] * new // old
                if prod(fixed) == prod(x.shape) and min(fixed) > 0:
                    return tuple(fixed)
        raise FormatError(
            f"{self._where()}: cannot reshape {x.shape} to {target}"
            + (f" (the target was fixed when the model was exported with batch {old}; export it with batch {new} "
               "or with a dynamic batch axis)" if old and new and old != new else "")
        )

    def _op_Flatten(self, ins, attrs):
        x = ins[0]
        axis = int(attrs.get("axis", 1))
        rank = len(x.shape)
        if not -rank <= axis <= rank:
            raise FormatError(f"{self._where()}: axis {axis} out of range for rank {rank}")
        axis %= rank + 1 if axis < 0 else rank + 1
        return [self._reshape(x, (prod(x.shape[:axis]), prod(x.shape[axis:])))]

    def _op_Squeeze(self, ins, attrs):
        x = ins[0]
        vals = [v.value if isinstance(v, _Const) else None for v in ins]
        axes = _axes_arg(attrs, vals, 1)
        rank = len(x.shape)
        if axes is None:
            axes = [i for i, d in enumerate(x.shape) if d == 1]
        axes = {_norm_axis(a, rank, self._where()) for a in axes}
        if any(x.shape[a] != 1 for a in axes):
            raise FormatError(f"{self._where()}: cannot squeeze axes {sorted(axes)} of shape {x.shape}")
        return [self._reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))]

    def _op_Unsqueeze(self, ins, attrs):
        x = ins[0]
        vals = [v.value if isinstance(v, _Const) else None for v in ins]
        axes = _axes_arg(attrs, vals, 1)
        if axes is None:
            raise FormatError(f"{self._where()}: no axes")
        rank = len(x.shape) + len(axes)
        axes = sorted({_norm_axis(a, rank, self._where()) for a in axes})
        shape = list(x.shape)
        for a in axes:
            shape.insert(a, 1)
        return [self._reshape(x, tuple(shape))]

    def _op_Transpose(self, ins, attrs):
        x = ins[0]
        perm = attrs.get("perm", list(range(len(x.shape)))[::-1])
        return [self._transpose(x, perm)]

    def _op_Concat(self, ins, attrs):
        present = [v for v in ins if v is not None and 0 not in v.shape]
        rank = len(present[0].shape) if present else 0
        if any(len(v.shape) != rank for v in present) or rank == 0:
            raise FormatError(f"{self._where()}: inputs of different ranks {[v.shape for v in present]}")
        axis = _norm_axis(int(attrs.get("axis", 0)), rank, self._where())
        for v in present:
            if v.shape[:axis] + v.shape[axis + 1:] != present[0].shape[:axis] + present[0].shape[axis + 1:]:
                raise FormatError(f"{self._where()}: input shapes {[v.shape for v in present]} differ off axis {axis}")
        acts = [v for v in present if isinstance(v, _Act)]
        lead = next((a for a in acts if a.batch_axis is not None), acts[0])
        out_shape = list(present[0].shape)
        out_shape[axis] = sum(v.shape[axis] for v in present)
        if not any(a.src is not None for a in acts):
            return [_Act(tuple(out_shape), None, 0, lead.batch_axis, lead.image, lead.outer)]
        if len(present) == 1:
            return [present[0]]
        dims = _letters(rank, lead.batch_axis, lead.image)
        inputs = [v if isinstance(v, _Act) and v.src is not None else None for v in present]
        spec = self._emit("Concat", dict(shapes=[list(v.shape) for v in present], dims=list(dims), axis=dims[axis]),
                          inputs)
        return [self._out(spec, 0, lead.batch_axis, lead.image, lead.outer)]

    def _op_Split(self, ins, attrs):
        x = ins[0]
        rank = len(x.shape)
        axis = _norm_axis(int(attrs.get("axis", 0)), rank, self._where())
        n_out = len(self.node.output)
        if "split" in attrs:
            parts = [int(p) for p in attrs["split"]]
        elif len(ins) > 1 and ins[1] is not None:
            parts = [int(p) for p in np.asarray(self._value(ins[1], "split sizes")).reshape(-1)]
        else:
            k = int(attrs.get("num_outputs", n_out))
            if k != n_out or k <= 0:
                raise FormatError(f"{self._where()}: splits into {k} parts but has {n_out} outputs")
            size = -(-x.shape[axis] // k)
            parts = [size] * (k - 1) + [x.shape[axis] - size * (k - 1)]
        if sum(parts) != x.shape[axis] or any(p < 0 for p in parts) or len(parts) != n_out:
            raise FormatError(f"{self._where()}: parts {parts} do not split axis {axis} of {x.shape} into {n_out} outputs")
        shapes = []
        for p in parts:
            s = list(x.shape)
            s[axis] = p
            shapes.append(tuple(s))
        if x.src is None:
            return [_Act(s, None, 0, x.batch_axis, x.image, x.outer) for s in shapes]
        if 0 in parts:
            raise FormatError(f"{self._where()}: a zero-sized part in {parts}")
        if len(parts) == 1:
            return [x]
        dims = _letters(rank, x.batch_axis, x.image)
        spec = self._emit("Split", dict(shape=list(x.shape), dims=list(dims), axis=dims[axis], parts=parts), [x])
        return [self._out(spec, i, x.batch_axis, x.image, x.outer) for i in range(len(parts))]

    def _op_Slice(self, ins, attrs):
        x = ins[0]
        rank = len(x.shape)
        if self.opset < 10:
            starts, ends = list(attrs.get("starts", [])), list(attrs.get("ends", []))
            axes = list(attrs.get("axes", range(len(starts))))
            steps = [1] * len(starts)
        else:
            starts = np.asarray(self._value(ins[1], "starts")).reshape(-1).tolist()
            ends = np.asarray(self._value(ins[2], "ends")).reshape(-1).tolist()
            axes = (np.asarray(self._value(ins[3], "axes")).reshape(-1).tolist()
                    if len(ins) > 3 and ins[3] is not None else list(range(len(starts))))
            steps = (np.asarray(self._value(ins[4], "steps")).reshape(-1).tolist()
                     if len(ins) > 4 and ins[4] is not None else [1] * len(starts))
        if not (len(starts) == len(ends) == len(axes) == len(steps)):
            raise FormatError(f"{self._where()}: starts, ends, axes and steps differ in length")
        shape = list(x.shape)
        for s, e, a, st in zip(starts, ends, axes, steps):
            a = _norm_axis(int(a), rank, self._where())
            if int(st) == 0:
                raise FormatError(f"{self._where()}: a slice step of 0")
            shape[a] = len(range(*slice(int(s), int(e), int(st)).indices(x.shape[a])))
        if 0 in shape:
            raise FormatError(f"{self._where()}: the slice of {x.shape} is zero-sized")
        return [self._adapt(x, tuple(shape))]

    def _op_Gather(self, ins, attrs):
        data, idx = ins[0], ins[1]
        axis = int(attrs.get("axis", 0))
        if isinstance(data, _Const):
            return [self._embedding(data, idx, axis)]
        rank = len(data.shape)
        axis = _norm_axis(axis, rank, self._where())
        if isinstance(idx, _Act):
            raise _Unsupported("gather of an activation at computed indices")
        out_shape = data.shape[:axis] + tuple(idx.shape) + data.shape[axis + 1:]
        if 0 in out_shape:
            raise FormatError(f"{self._where()}: the result is zero-sized")
        if idx.shape == () and idx.value is not None:
            n = data.shape[axis]
            i = int(idx.value) % n if -n <= int(idx.value) < n else None
            if i is None:
                raise FormatError(f"{self._where()}: index {int(idx.value)} is out of range for axis {axis} of {data.shape}")
            return [self._reshape(self._pick(data, axis, i), out_shape)]
        return [self._adapt(data, out_shape)]

    def _pick(self, x: _Act, axis: int, i: int) -> _Act:
        """Element ``i`` along ``axis`` (kept as a size-1 axis): one output of a Split that
        is shared by every pick from the same tensor (the q, k, v of a packed projection)."""
        n = x.shape[axis]
        if x.src is None:
            return self._crop(x, axis, 1)
        key = (x.key(), axis)
        spec = self._picks.get(key)
        if spec is None:
            parts = [1] * n if n <= 16 else None
            if parts is None:
                parts = [p for p in (i, 1, n - i - 1) if p]
            dims = _letters(len(x.shape), x.batch_axis, x.image)
            spec = self._emit("Split", dict(shape=list(x.shape), dims=list(dims), axis=dims[axis], parts=parts), [x], ".split")
            if n <= 16:
                self._picks[key] = spec
            else:
                return self._out(spec, 1 if i else 0, x.batch_axis, x.image, x.outer)
        return self._out(spec, i, x.batch_axis, x.image, x.outer)

    def _embedding(self, weight: _Const, ids: _Act, axis: int):
        if len(weight.shape) != 2 or axis not in (0, -2):
            raise _Unsupported("gather from a weight other than an embedding table")
        v, d = weight.shape
        shape = ids.shape
        if len(shape) == 0:
            raise _Unsupported("gather of one row")
        flat = (shape[0], prod(shape[1:])) if len(shape) >= 2 else (shape[0], 1)
        ids2 = self._reshape(ids, flat) if ids.src is not None else _Act(flat, None, 0, ids.batch_axis)
        spec = self._emit("Embedding", dict(b=flat[0], s=flat[1], d=d, v=v), [ids2 if ids2.src is not None else None])
        out = self._out(spec, 0, 0 if ids.batch_axis == 0 else None)
        return self._reshape(out, tuple(shape) + (d,))

    def _op_Expand(self, ins, attrs):
        x = ins[0]
        target = tuple(int(t) for t in np.asarray(self._value(ins[1], "shape")).reshape(-1))
        return [self._adapt(x, _check_shape(_broadcast([x.shape, target], self._where()), self._where()))]

    def _op_Tile(self, ins, attrs):
        x = ins[0]
        reps = [int(r) for r in np.asarray(self._value(ins[1], "repeats")).reshape(-1)]
        if len(reps) != len(x.shape) or any(r <= 0 for r in reps):
            raise FormatError(f"{self._where()}: repeats {reps} do not fit shape {x.shape}")
        return [self._adapt(x, _check_shape([d * r for d, r in zip(x.shape, reps)], self._where()))]

    def _op_Pad(self, ins, attrs):
        x = ins[0]
        rank = len(x.shape)
        if "pads" in attrs:
            pads = [int(p) for p in attrs["pads"]]
        else:
            pads = [int(p) for p in np.asarray(self._value(ins[1], "pads")).reshape(-1)]
        axes = list(range(rank))
        if len(ins) > 3 and ins[3] is not None:
            axes = [_norm_axis(int(a), rank, self._where()) for a in np.asarray(self._value(ins[3], "axes")).reshape(-1)]
        if len(pads) != 2 * len(axes):
            raise FormatError(f"{self._where()}: pads {pads} do not fit shape {x.shape}")
        shape = list(x.shape)
        for i, a in enumerate(axes):
            shape[a] += pads[i] + pads[i + len(axes)]
        if any(d <= 0 for d in shape):
            raise FormatError(f"{self._where()}: padding leaves shape {shape}")
        return [self._adapt(x, _check_shape(shape, self._where()))]

    # -- recurrent ---------------------------------------------------------------------------------------

    def _op_LSTM(self, ins, attrs):
        x, w = ins[0], ins[1]
        if not isinstance(w, _Const) or not isinstance(ins[2], _Const):
            raise _Unsupported("weights computed at run time")
        if len(x.shape) != 3 or len(w.shape) != 3:
            raise FormatError(f"{self._where()}: input {x.shape} and weight {w.shape} do not fit an LSTM")
        hidden = int(attrs.get("hidden_size", w.shape[1] // 4))
        direction = attrs.get("direction", "forward")
        layout = int(attrs.get("layout", 0))
        dirs = 2 if direction == "bidirectional" else 1
        if w.shape[0] != dirs or w.shape[1] != 4 * hidden:
            raise FormatError(f"{self._where()}: weight {w.shape} does not fit hidden size {hidden}, {dirs} direction(s)")
        xb = x if layout == 1 else self._transpose(x, [1, 0, 2])
        b, s, d = xb.shape
        if d != w.shape[2]:
            raise FormatError(f"{self._where()}: input width {d} differs from the weight's {w.shape[2]}")
        outs = []
        for k in range(dirs):
            suffix = "" if dirs == 1 else (".forward", ".backward")[k]
            spec = self._emit("LSTM", dict(l=1, b=b, s=s, d=d, e=hidden), [xb if xb.src is not None else None], suffix)
            outs.append(self._out(spec, 0, 0))
        if dirs == 1:
            y = outs[0]
        else:
            both = self._emit("Concat", dict(shapes=[[b, s, hidden]] * 2, dims=["b", "s", "e"], axis="e"), outs, ".concat")
            y = self._out(both, 0, 0)
        y = self._reshape(y, (b, s, dirs, hidden))  # (b, s, dirs, e)
        y = y if layout == 1 else self._transpose(y, [1, 2, 0, 3])  # (s, dirs, b, e)
        state = (dirs, b, hidden) if layout == 0 else (b, dirs, hidden)
        return [y, _Act(state, None), _Act(state, None)]

    # -- assembling the graph -----------------------------------------------------------------------------

    def _build(self) -> Graph:
        specs = self.specs
        outputs = {self.values[o.name].key() for o in self.g.output
                   if isinstance(self.values.get(o.name), _Act) and self.values[o.name].src is not None}
        self._drop_dead(specs, outputs)
        # Merge chains of single-layer LSTMs into one multi-layer vertex (the paper's form).
        changed = True
        while changed:
            changed = False
            users = self._users(specs)
            for spec in specs:
                x = spec.inputs[0] if spec.op == "LSTM" else None
                if not isinstance(x, _Act) or x.src is None or x.src.op != "LSTM":
                    continue
                prev = x.src
                p, q = prev.params, spec.params
                if (users.get((id(prev), 0)) == [spec] and (id(prev), 0) not in outputs
                        and p["b"] == q["b"] and p["s"] == q["s"] and p["e"] == q["d"]):
                    q["l"] += p["l"]
                    q["d"] = p["d"]
                    spec.inputs = list(prev.inputs)
                    specs.remove(prev)
                    changed = True
                    break
        self._drop_dead(specs, outputs)
        graph = Graph(self.name)
        for spec in specs:
            try:
                layer = build_layer(spec.op, spec.name, **spec.params)
            except PaseError as exc:
                raise FormatError(f"{spec.node}: {exc}") from None
            inputs = [(a.src.name, a.index) if isinstance(a, _Act) and a.src is not None else None for a in spec.inputs]
            graph.add_layer(layer, inputs)
        graph.validate()
        return graph

    def _drop_dead(self, specs, outputs):
        """Remove data movement nobody reads (left behind when reshapes and transposes cancelled)."""
        changed = True
        while changed:
            users = self._users(specs)
            dead = [s for s in specs if s.op in DATA_MOVEMENT
                    and not any(users.get((id(s), i)) or (id(s), i) in outputs for i in range(len(s.out_shapes)))]
            changed = bool(dead)
            for s in dead:
                specs.remove(s)

    @staticmethod
    def _users(specs):
        users: dict = {}
        for s in specs:
            for a in s.inputs:
                if isinstance(a, _Act) and a.src is not None:
                    users.setdefault((id(a.src), a.index), []).append(s)
        return users


# -- public entry point -------------------------------------------------------------------------------


def _read_model(source, max_bytes: int):
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        return source, "model"
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, name = bytes(source), "model"
    elif isinstance(source, (str, Path)):
        path = Path(source)
        try:
            size = path.stat().st_size
            if size > max_bytes:
                raise FormatError(
                    f"{path.name} is {size / 2**20:.1f} MiB; at most {max_bytes / 2**20:.0f} MiB is accepted "
                    "(save the weights as external data to keep the graph file small)"
                )
            data = path.read_bytes()
        except OSError as exc:
            raise FormatError(f"cannot read {path}: {exc.strerror}") from None
        name = path.stem
    else:
        raise FormatError(f"an ONNX model must be a path, bytes or onnx.ModelProto, not {type(source).__name__}")
    if len(data) > max_bytes:
        raise FormatError(
            f"the file is {len(data) / 2**20:.1f} MiB; at most {max_bytes / 2**20:.0f} MiB is accepted "
            "(save the weights as external data to keep the graph file small)"
        )
    if not data:
        raise FormatError("the file is empty")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:
        raise FormatError(f"not a valid ONNX file: {type(exc).__name__}: {str(exc)[:200]}") from None
    return model, name


def from_onnx(
    source,
    *,
    batch: int | None = None,
    unsupported: str = "error",
    symbols: Mapping[str, int] | None = None,
    name: str | None = None,
    max_bytes: int = MAX_ONNX_BYTES,
) -> Graph:
    """Build a pase graph from an ONNX model.

    Parameters
    ----------
    source : path, bytes or onnx.ModelProto
        The model. Files over ``max_bytes`` are refused before parsing;
        external data files are never opened (weights' shapes suffice).
    batch : int, optional
        Batch size; default the first dimension of the model's first input.
        Exporters often bake the export-time batch into ``Reshape`` targets;
        those are rescaled where the batch axis can be traced.
    unsupported : {"error", "elementwise"}
        What to do with operators that have no pase counterpart: raise a
        :class:`~pase.errors.FormatError` listing them all, or model each as an
        element-wise layer (with an :class:`OnnxImportWarning`).
    symbols : mapping, optional
        Sizes of symbolic input dimensions other than the batch
        (``{"sequence": 128}``).
    name : str, optional
        Graph name; default the file's stem or the ONNX graph's name.

    Returns
    -------
    Graph
        Validated: acyclic, connected, shapes agreeing on every edge.

    Raises
    ------
    FormatError
        Not an ONNX model, too large, malformed, unsupported operators, a
        symbolic dimension without a size, a shape that cannot be folded.
    GraphError
        The imported graph is invalid (e.g. not connected).

    Examples
    --------
    >>> import onnx
    >>> from onnx import helper, TensorProto
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 10])
    >>> w = helper.make_tensor("w", TensorProto.FLOAT, [64, 10], [0.0] * 640)
    >>> nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
    ...          helper.make_node("Relu", ["h"], ["y"])]
    >>> model = helper.make_model(helper.make_graph(nodes, "mlp", [x], [y], [w]))
    >>> g = from_onnx(model)
    >>> [str(layer) for layer in g]
    ['fc: FullyConnected(b=32 n=10 c=64)']
    >>> g.layer("fc").param_dict["pointwise"]
    1
    """
    if unsupported not in ("error", "elementwise"):
        raise ValueError(f"unsupported must be 'error' or 'elementwise', got {unsupported!r}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0):
        raise GraphError(f"batch must be a positive integer, got {batch!r}")
    model, stem = _read_model(source, max_bytes)
    if not model.HasField("graph"):
        raise FormatError("not an ONNX model: it has no graph")
    if model.functions:
        try:
            from onnx import inliner

            model = inliner.inline_local_functions(model)
        except Exception as exc:
            raise FormatError(f"the model's local functions cannot be inlined: {exc}") from None
    graph_name = name or (stem if stem != "model" else (model.graph.name or "onnx-model"))
    imp = _Importer(model, batch=batch, symbols=symbols, unsupported=unsupported, name=graph_name)
    try:
        return imp.run()
    except PaseError:
        raise
    except RecursionError:
        raise FormatError("the model is nested too deeply") from None
    except Exception as exc:  # a malformed model must never escape as a traceback
        raise FormatError(f"{imp._where()}: cannot be imported ({type(exc).__name__}: {exc})") from None
