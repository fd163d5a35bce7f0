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
* ``Conv`` (2-D, and 1-D through a height-1 image): ``Conv2D``, or
  ``GroupedConv2D`` with ``group > 1`` (depthwise included); a dilated kernel
  keeps its taps and is sized by its span; pooling: ``Pooling`` (a global pool
  of a non-square map: ``ReduceMean``).
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
* A mixture-of-experts router's bookkeeping (:mod:`.convert.routing`):
  ``TopK`` values as a crop of the scores; ``TopK`` indices, ``ArgMax`` and
  ``OneHot`` as index tensors (no layer and no gradient, as in torch: a dispatch
  mask built from them is read like a graph input); ``CumSum`` element-wise;
  ``GatherElements`` / ``GatherND`` (and ``Gather`` at computed indices) and
  ``ScatterElements`` / ``ScatterND`` as data movement to their exact shapes.
  Batched experts (stacked weights ``[E, ...]`` applied by ``Einsum`` or
  ``MatMul``) are ``Einsum`` layers with the expert axis in their iteration
  space: splitting it is expert parallelism.

Not mapped (listed in the error, all at once, or element-wise with
``unsupported="elementwise"``): control flow, other domains, GRU/RNN, 3-D
convolutions, non-square pooling windows. An unmapped operator whose output
shape ONNX shape inference cannot give is never approximated by a guessed
shape: what depends on it is not converted, and the import is refused.

Parameters: an initializer several layers read (a language model's head tied
to its token embedding; also an optimising exporter's transposed copy of one)
is one parameter, tied in the graph (:attr:`~pase.ir.graph.TensorSpec.tied`);
a floating-point initializer of more than one element that reaches an
activation outside any weight slot (a position embedding added, a class token
concatenated, an RMSNorm scale multiplied in, through the exporter's slices and
expands) becomes an extra weight, of its full size, of the nearest layer
upstream that all-reduces weight gradients. A float *buffer* used the same way
(a cached rotary table) is counted too unless named in ``buffers``: the file
does not tell them apart.

Batch: tensors the exporter fixed at the export batch (``Reshape`` targets,
``-1`` included; ``Expand`` targets; constants folded at that batch such as
token-type ids or an expanded class token) are resized where the batch axis
is traced; a shape that still disagrees is refused with a message to export
with a dynamic batch axis.

Safety: the model is parsed from bytes (at most :data:`MAX_ONNX_BYTES`, and at
most ``MAX_ONNX_PARSE_BYTES`` of memory as estimated from the bytes before
parsing) with protobuf; nothing is executed, no pickle is involved, and tensors
stored as *external data* are never read: their shapes suffice, and no path
named in a model is ever opened. Local functions are inlined only when the
result stays within ``MAX_NODES`` nodes (counted before inlining), ONNX shape
inference runs without data propagation, constant folding is bounded per value
and per import, and every derived dimension and tensor is held to the limits
graph files get (:mod:`pase.limits`). Every problem raises a
:class:`~pase.errors.PaseError` subclass whose one-line message names the node.

Layout: this module is the public surface; the work is done by

* :mod:`.reader`: reading the bytes or file (size limit), checked views of the
  protobuf (attributes, tensors, shapes, the model's input shapes) and ONNX
  shape inference;
* :mod:`.importer`: the walk over the nodes (topological order, a value per
  tensor, dispatch to the converters, the fallback for unsupported operators)
  and the data-movement helpers the converters share; :mod:`.values` holds
  its value types, :mod:`.fold` the constant folding, :mod:`.shapes` the
  dimension letters and batch-axis tracing, :mod:`.fusion` the bias and
  pointwise fusion, :mod:`.build` the final graph (dead data movement
  dropped, LSTM chains merged);
* :mod:`.convert`: one converter per operator, registered by ONNX op type
  with :func:`~.convert.registry.converter` in modules that mirror
  :mod:`pase.ops` (:mod:`~.convert.gemm`, :mod:`~.convert.conv`,
  :mod:`~.convert.norm`, :mod:`~.convert.sequence`, :mod:`~.convert.movement`,
  and :mod:`~.convert.tensor` for operators that make no layer).
  :data:`SUPPORTED_OPS` is the registry's keys, so mapping another operator
  is one decorated function there.
"""

from __future__ import annotations

from typing import Collection, Mapping

from pase.errors import FormatError, GraphError, PaseError
from pase.io.onnx import convert, importer, reader
from pase.io.onnx.importer import OnnxImportWarning
from pase.ir.graph import Graph
from pase.limits import MAX_ONNX_BYTES

__all__ = ["from_onnx", "SUPPORTED_OPS", "OnnxImportWarning"]

SUPPORTED_OPS = frozenset(convert.CONVERTERS)
"""ONNX operators (default domain) that :func:`from_onnx` maps."""

# Longest error message; longer ones (a node's 4096 split sizes) are cut in the middle.
_MESSAGE_CHARS = 360


def _clip(message: str) -> str:
    """``message`` cut to about ``_MESSAGE_CHARS`` characters, keeping its start (the node
    and the problem) and its end (the fix)."""
    keep = (_MESSAGE_CHARS - 5) // 2
    return f"{message[:keep]} ... {message[-keep:]}"


def from_onnx(
    source,
    *,
    batch: int | None = None,
    unsupported: str = "error",
    symbols: Mapping[str, int] | None = None,
    name: str | None = None,
    max_bytes: int = MAX_ONNX_BYTES,
    buffers: Collection[str] = (),
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
    buffers : collection of str, optional
        Names of initializers that are not trainable (a module's buffers, such
        as a cached rotary table): never counted as parameters. By default
        every floating-point initializer of more than one element that reaches
        an activation is one.

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
    model, stem = reader.read_model(source, max_bytes)
    if not model.HasField("graph"):
        raise FormatError("not an ONNX model: it has no graph")
    reader.check_expanded_size(model)
    if model.functions:
        try:
            from onnx import inliner

            model = inliner.inline_local_functions(model)
        except Exception as exc:
            raise FormatError(f"the model's local functions cannot be inlined: {exc}") from None
    graph_name = name or (stem if stem != "model" else (model.graph.name or "onnx-model"))
    imp = importer.Importer(model, batch=batch, symbols=symbols, unsupported=unsupported, name=graph_name,
                            buffers=buffers)
    try:
        return imp.run()
    except PaseError as exc:
        message = str(exc)
        if len(message) > _MESSAGE_CHARS:
            raise type(exc)(_clip(message)) from None
        raise
    except RecursionError:
        raise FormatError("the model is nested too deeply") from None
    except Exception as exc:  # a malformed model must never escape as a traceback
        raise FormatError(f"{imp.where()}: cannot be imported ({type(exc).__name__}: {exc})") from None
