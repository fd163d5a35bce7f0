"""The op registry: one :class:`OpSpec` per op kind holds everything the tool knows of it.

An op module (:mod:`.gemm`, :mod:`.conv`, :mod:`.norm`, :mod:`.sequence`,
:mod:`.movement`, :mod:`.moe`) registers each op with :func:`register`; adding an op touches
its module and its tests only. A spec holds:

* ``build``: keyword parameters -> :class:`~pase.ir.graph.Layer` (the graph
  format's ``params`` of the op are this function's keywords);
* ``flops(layer, block)``: a :class:`Flops` of one device's block of the
  iteration space (``block`` a float array ``(K, ndims)`` of per-device
  dimension sizes): forward, backward always paid (weight gradients, derivatives
  of fused pointwise ops) and, per activation input, the FLOPs of that input's
  gradient, which a graph input (training data) does not need. A multiply-add
  counts as 2 FLOPs;
* ``collectives(layer, cfg, block, options)``: the communication that stays
  inside the layer under configurations ``cfg`` (float ``(K, ndims)``), as
  :class:`Collective` values: weight-gradient all-reduces, halo exchange,
  normalisation statistics, recurrent state;
* ``contraction``: whether the contraction rule below applies;
* ``saved(layer)``: which inputs and outputs the backward pass reads (the
  memory model counts them), and ``saved_extra(layer, cfg, block)`` elements it
  keeps besides (softmax probabilities, LSTM gates), each of
  ``saved_extra_bytes`` bytes (``None``: the activations' bytes per element;
  ``1`` for a dropout mask, whatever the precision);
* ``spatial_dims``: dimensions split only when the options allow (image rows);
* ``onnx``: the ONNX operators :func:`pase.io.onnx.from_onnx` imports as this
  op (the converters live in :mod:`pase.io.onnx`, which the ops never import);
* ``params_schema()``: the JSON Schema of the op's ``params`` in the graph
  format, read off the builder's signature (:func:`pase.io.graph_json.graph_schema`
  assembles the file format's schema from these).

The contraction rule (GEMM, Einsum, convolution, embedding, reduce): splitting
a dimension that a tensor does not index leaves *partial sums* of that tensor
on the devices of the split. For the output (a split reduction dimension) and
for every input gradient those are pending sums (:func:`partial_collectives`):
the paper's model all-reduces them inside the layer, the corrected model leaves
them ``Partial`` for the edge to finish (:mod:`pase.model.layout`). A weight
gradient's partial sums over the output dimensions the weight lacks (the
data-parallel all-reduce) always stay inside the layer.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import types
import typing
from collections import abc
from dataclasses import dataclass, field
from math import prod
from typing import Callable, Sequence

import numpy as np

from pase.errors import GraphError
from pase.ir.graph import Layer, TensorSpec

__all__ = [
    "Collective", "CollectiveOptions", "Flops", "OpSpec", "OPS", "register", "build_layer",
    "training_flops", "collectives", "partial_collectives", "saved_tensors",
    "column", "split_over", "tensor_splits", "block_elements", "missing_dims",
]

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
    weight_gradient : bool
        Whether it reduces a weight's gradient: once per training step,
        whatever the microbatches (a pipeline accumulates them), where the
        others run for every microbatch.
    """

    kind: str
    elements: np.ndarray
    dims: tuple[str, ...]
    what: str = ""
    weight_gradient: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"collective {self.what!r}: kind {self.kind!r} is not one of {KINDS}")


@dataclass(frozen=True)
class CollectiveOptions:
    """Modelling choices an op's collectives depend on.

    Parameters
    ----------
    sync_batchnorm : bool
        Whether BatchNorm all-reduces its statistics over a split batch
        (SyncBatchNorm; the paper's model). PyTorch's DDP does not by default:
        each device normalises over its own samples. Splits of image rows and
        columns always synchronise (a spatial shard is not a sample).
    """

    sync_batchnorm: bool = True


@dataclass(frozen=True)
class Flops:
    """Training FLOPs of one device's block, per configuration (each ``(K,)``).

    ``forward`` runs once; ``backward`` is the backward work every layer does
    (weight gradients, derivatives of fused pointwise ops); ``inputs[i]`` is the
    work of activation input ``i``'s gradient, skipped when that input takes no
    gradient (a graph input under the corrected model).
    """

    forward: np.ndarray
    backward: np.ndarray
    inputs: tuple[np.ndarray, ...] = ()

    def total(self, needs_gradient: Sequence[bool] | None = None) -> np.ndarray:
        """Forward plus backward FLOPs; ``needs_gradient[i]`` False drops input ``i``'s gradient."""
        out = self.forward + self.backward
        for i, g in enumerate(self.inputs):
            if needs_gradient is None or needs_gradient[i]:
                out = out + g
        return out


def _no_extra(layer, cfg, blk):
    return np.zeros(len(cfg))


def _saves_inputs(layer):
    return frozenset(range(len(layer.inputs))), frozenset()


@dataclass(frozen=True)
class OpSpec:
    """An op's builder and rules (see the module docstring)."""

    name: str
    build: Callable[..., Layer]
    flops: Callable[[Layer, np.ndarray], Flops]
    collectives: Callable[[Layer, np.ndarray, np.ndarray, CollectiveOptions], list[Collective]]
    contraction: bool = True
    saved: Callable[[Layer], tuple[frozenset[int], frozenset[int]]] = _saves_inputs
    saved_extra: Callable[[Layer, np.ndarray, np.ndarray], np.ndarray] = field(default=_no_extra)
    saved_extra_bytes: int | None = None
    spatial_dims: tuple[str, ...] = ()
    onnx: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        """The first line of the builder's docstring."""
        return (self.build.__doc__ or self.name).strip().splitlines()[0]

    def params_schema(self) -> dict:
        """JSON Schema (draft 2020-12) of the op's graph-format ``params``: the builder's keywords.

        Each keyword's type comes from the builder's annotation, ``required``
        lists those without a default, and no other key is allowed. Value
        checks the schema cannot express (sizes positive, letters distinct)
        stay with the builder.
        """
        hints = typing.get_type_hints(self.build)
        properties, required = {}, []
        for param in list(inspect.signature(self.build).parameters.values())[1:]:
            prop = _json_type(hints[param.name])
            if param.default is inspect.Parameter.empty:
                required.append(param.name)
            else:
                prop["default"] = list(param.default) if isinstance(param.default, tuple) else param.default
            properties[param.name] = prop
        return {"description": f"{self.name}: {self.summary}", "type": "object", "properties": properties,
                "required": required, "additionalProperties": False}


def _json_type(hint) -> dict:
    """JSON Schema of a builder annotation (int, bool, str, None, unions, sequences, mappings)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is str:
        return {"type": "string"}
    if hint is type(None):
        return {"type": "null"}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_json_type(a) for a in args]}
    if origin is dict:
        return {"type": "object", "additionalProperties": _json_type(args[1])}
    if isinstance(origin, type) and issubclass(origin, abc.Sequence):
        return {"type": "array", "items": _json_type(args[0])}
    raise TypeError(f"no JSON Schema for builder annotation {hint!r}")


OPS: dict[str, OpSpec] = {}


def register(name, flops, collectives=None, *, contraction=True, saved=_saves_inputs, saved_extra=_no_extra,
             saved_extra_bytes=None, spatial_dims=(), onnx=()):
    """Decorator registering a builder as op ``name`` with its rules (:class:`OpSpec`); the builder it returns
    reuses layers inside :func:`reusing_layers`."""
    def wrap(build):
        OPS[name] = OpSpec(name, build, flops, collectives or weight_gradient_collectives, contraction,
                           saved, saved_extra, saved_extra_bytes, spatial_dims, tuple(onnx))

        @functools.wraps(build)
        def reused(name: str, *args, **kwargs) -> Layer:
            built = _REUSE.get()
            if built is None:
                return build(name, *args, **kwargs)
            try:
                key = (build, _key(args), _key(kwargs))
                layer = built.get(key)
            except TypeError:  # an unhashable argument: built afresh
                return build(name, *args, **kwargs)
            if layer is None:
                layer = built[key] = build(name, *args, **kwargs)
                layer.signature  # computed once, kept by every renamed copy
                return layer
            return layer.renamed(name)

        return reused

    return wrap


# Inside reusing_layers(): per (builder, arguments but the name), the layer built (see there).
_REUSE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("reused_layers", default=None)


@contextlib.contextmanager
def reusing_layers():
    """Within it, an op builder called again with the arguments of an earlier call but another name returns that
    layer renamed (:meth:`Layer.renamed`), equal to what it would build, without building it: a model's repeated
    blocks (1,792 layers of 24 kinds in Megatron's 530B GPT) are built once per kind. The builders' output depends
    on the name only through :attr:`Layer.name`; a call whose arguments cannot be hashed builds afresh. Per thread
    (a context variable); nested uses share the outer one's layers."""
    if _REUSE.get() is not None:
        yield
        return
    token = _REUSE.set({})
    try:
        yield
    finally:
        _REUSE.reset(token)


def _key(value):
    """``value`` as a hashable key equal only for arguments a builder cannot tell apart: every value but a string
    or an integer tagged with its type (``True`` is not ``1``, nor ``2.0`` ``2``), a float by its bits,
    containers by their items;
    TypeError for what cannot be hashed."""
    kind = type(value)
    if kind is str or kind is int:
        return value
    if kind is tuple or kind is list:
        return kind, tuple([_key(v) for v in value])
    if kind is dict:
        return kind, tuple([(_key(k), _key(v)) for k, v in value.items()])
    if kind is float:
        return kind, value.hex()  # -0.0 is not 0.0
    hash(value)
    return kind, value


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
    """Training FLOPs (forward + backward, every input's gradient included) of the whole, unsplit layer."""
    block = np.asarray(layer.sizes, dtype=float)[None, :]
    return float(OPS[layer.op].flops(layer, block).total()[0])


def collectives(layer: Layer, configs: np.ndarray, options: CollectiveOptions = CollectiveOptions()) -> list[Collective]:
    """The collectives that stay inside ``layer`` under each configuration (rows of ``configs``)."""
    cfg = np.asarray(configs, dtype=float)
    return OPS[layer.op].collectives(layer, cfg, np.asarray(layer.sizes, dtype=float) / cfg, options)


def partial_collectives(layer: Layer, configs: np.ndarray, gradient_inputs: Sequence[bool] | None = None) -> list[Collective]:
    """All-reduces that finish a contraction's pending sums: its outputs and its input gradients.

    ``gradient_inputs[i]`` False leaves out input ``i`` (it takes no gradient);
    by default every differentiable input counts. Empty for ops without the
    contraction rule.
    """
    if not OPS[layer.op].contraction:
        return []
    cfg = np.asarray(configs, dtype=float)
    out = [Collective("allreduce", block_elements(layer, t, cfg), missing_dims(layer, t), f"{t.name} partial sums")
           for t in layer.outputs]
    for i, t in enumerate(layer.inputs):
        wanted = t.differentiable if gradient_inputs is None else gradient_inputs[i]
        if wanted:
            out.append(Collective("allreduce", block_elements(layer, t, cfg), missing_dims(layer, t), f"{t.name} gradient"))
    return out


def saved_tensors(layer: Layer) -> tuple[frozenset[int], frozenset[int]]:
    """Indices of the inputs and of the outputs the backward pass of ``layer`` reads."""
    return OPS[layer.op].saved(layer)


# -- shared helpers ------------------------------------------------------------------


def check_sizes(name: str, **sizes) -> None:
    """Raise GraphError naming ``name`` unless every keyword value is a positive integer."""
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise GraphError(f"layer {name!r}: {key} must be a positive integer, got {value!r}")


def check_fused(name: str, pointwise: int, bias: bool = False) -> None:
    """Raise GraphError naming ``name`` unless ``pointwise`` is an integer >= 0 and ``bias`` a bool."""
    if isinstance(pointwise, bool) or not isinstance(pointwise, (int, np.integer)) or pointwise < 0:
        raise GraphError(f"layer {name!r}: pointwise (fused ops) must be an integer >= 0, got {pointwise!r}")
    if not isinstance(bias, (bool, np.bool_)):
        raise GraphError(f"layer {name!r}: bias must be true or false, got {bias!r}")


def check_letters(name: str, dims: Sequence[str], shape: Sequence[int]) -> tuple[str, ...]:
    """Dimension names for ``shape``, checked: one per axis, every size positive."""
    dims = tuple(dims)
    if len(dims) != len(shape):
        raise GraphError(f"layer {name!r}: {len(dims)} dimension names {dims} for a shape of {len(shape)} axes")
    check_sizes(name, **{f"shape[{i}]": s for i, s in enumerate(shape)})
    return dims


def params(**kw) -> tuple[tuple[str, object], ...]:
    """A layer's builder arguments as the ``params`` pairs of the graph format."""
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


def block_elements(layer: Layer, tensor: TensorSpec, cfg: np.ndarray) -> np.ndarray:
    """Elements of ``tensor`` each device holds under each configuration."""
    if len(cfg) == 1:  # one configuration (the 3-D model's): the same divisions in the same order, on scalars
        elements, row = float(prod(tensor.shape)), cfg[0]
        for axis in tensor.axes:
            if axis is not None:
                elements /= row[layer.dims.index(axis)]
        return np.array([elements], dtype=float)
    out = np.full(len(cfg), float(prod(tensor.shape)))
    for axis in tensor.axes:
        if axis is not None:
            out /= column(layer, cfg, axis)
    return out


def missing_dims(layer: Layer, tensor: TensorSpec) -> tuple[str, ...]:
    """The layer's dimensions that ``tensor`` does not index (its partial-sum dimensions under contraction)."""
    return tuple(d for d in layer.dims if d not in tensor.axes)


def weight_gradient_collectives(layer: Layer, cfg: np.ndarray, block: np.ndarray,
                                options: CollectiveOptions = CollectiveOptions()) -> list[Collective]:
    """All-reduce of each weight's gradient over the output dimensions it lacks (the batch, image rows...).

    Devices that differ only in a dimension the output lacks (an in-channel
    split for a bias) compute the same gradient and exchange nothing.
    """
    out_dims = {a for t in layer.outputs for a in t.axes}
    return [Collective("allreduce", block_elements(layer, w, cfg), tuple(d for d in missing_dims(layer, w) if d in out_dims),
                       f"{w.name} weight gradient", weight_gradient=True)
            for w in layer.weights]


def no_collectives(layer, cfg, blk, options=CollectiveOptions()):
    """Ops that communicate nothing inside the layer."""
    return []


def halo(layer: Layer, cfg: np.ndarray, block: np.ndarray) -> Collective:
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
