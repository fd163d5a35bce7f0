"""The importer core: walks the ONNX nodes in topological order, keeps a value per
tensor, hands each node to its converter (:mod:`pase.io.onnx.convert`) and collects
the layers they emit; unsupported nodes are listed or approximated.

:class:`Importer` also holds what every converter shares: :meth:`Importer.emit`
(add a layer) and the data-movement helpers (:meth:`~Importer.reshape`,
:meth:`~Importer.transpose`, :meth:`~Importer.crop`, :meth:`~Importer.adapt`)
that compose and cancel reshapes and transposes as they go.

Every shape a node yields and every layer it emits is checked against the size
limits of :mod:`pase.limits` (the same as graph files get), with the node named,
and the folded constants of one import hold at most ``MAX_FOLD_BYTES``.
"""

from __future__ import annotations

import heapq
import warnings
from dataclasses import replace
from math import prod

import numpy as np

from pase.errors import FormatError, PaseError
from pase.io.onnx.build import build_graph
from pase.io.onnx.convert import CONVERTERS, Unsupported
from pase.io.onnx.fold import Fold, fold
from pase.io.onnx.reader import (check_shape, infer_node, infer_shapes, input_shapes, node_label, read_attrs,
                                 tensor_value)
from pase.io.onnx.shapes import broadcast, letters, reshape_axis, unit_reshape
from pase.io.onnx.values import Act, Const, Spec, Unknown
from pase.ir.graph import Graph
from pase.limits import MAX_FOLD_BYTES, MAX_LAYER_INPUTS, MAX_LAYERS, MAX_NODE_OUTPUTS, MAX_NODES, check_layer_size
from pase.ops import build_layer

# Folded constants up to this many elements are "small": they may use all of
# MAX_FOLD_BYTES, larger ones only half of it.
_SMALL_CONSTANT = 4096

# ONNX element types of trainable tensors (float, float16, double, bfloat16): an
# initializer of another type (a boolean causal mask, integer ids) is never a parameter.
_FLOAT_TYPES = frozenset({1, 10, 11, 16})

# Operators whose output is its first input viewed (transposed, reshaped, sliced,
# broadcast, rows gathered, cast): folding one keeps the initializer it is a view of.
_VIEWS = frozenset({"Identity", "Dropout", "Cast", "CastLike", "Transpose", "Reshape", "Squeeze", "Unsqueeze",
                    "Flatten", "Slice", "Expand", "Tile", "Gather"})


class OnnxImportWarning(UserWarning):
    """An operator was approximated (``unsupported="elementwise"``)."""


class Importer:
    """One import: walks the nodes, keeps a value per tensor, collects layer specs, builds the Graph."""

    def __init__(self, model, *, batch, symbols, unsupported, name, buffers=()):
        self.model = model
        self.buffers = frozenset(buffers)  # initializers known not to be trainable
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
        self.specs: list[Spec] = []
        self.names: set[str] = set()
        self.unsupported: list[tuple[str, str, str]] = []
        self.unsized: list[tuple[str, str, str]] = []  # unsupported nodes whose output shapes are unknown
        self.param_shapes: dict[str, tuple] = {}  # trainable initializer -> its shape
        self.old_batch: int | None = None
        self.new_batch: int | None = None
        self.input_shapes: dict[str, tuple] = {}
        self._inferred: dict[str, tuple] | None = None
        self._types: dict[str, int] = {}
        self._node_inferred: dict[str, tuple | None] = {}
        self.held_bytes = 0  # bytes of the folded constants in self.values
        self.consumers: dict[str, int] = {}
        self.picks: dict = {}  # (tensor key, axis) -> the Split shared by Gathers of single elements
        self._named = False
        self.node = None

    # -- naming and layers ------------------------------------------------------------------

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

    def where(self) -> str:
        """The current node as messages name it (``model`` outside the walk)."""
        return f"node {node_label(self.node)}" if self.node is not None else "model"

    def emit(self, op: str, params: dict, inputs: list, suffix: str = "", sources: dict | None = None) -> Spec:
        """Add a layer of builder ``op`` reading ``inputs`` (an Act or None per slot), named
        after the current node plus ``suffix``; checks the parameters and input shapes.
        ``sources`` maps a weight's name to the constant it is (an initializer, or a view
        of one, is recorded so that weights naming the same initializer are tied)."""
        if suffix and not self._named and self.node is not None:
            conv = CONVERTERS.get(self.node.op_type)
            if conv is not None and conv.keeps_name:
                suffix = ""  # the layer a Reshape, Transpose... node maps to keeps the node's name
        self._named = True
        name = self._unique(self._base() + suffix)
        try:
            layer = build_layer(op, name, **params)
        except PaseError as exc:
            raise FormatError(f"{self.where()}: {exc}") from None
        check_layer_size(layer, self.where(), "; check the node's attributes and input shapes")
        if len(inputs) > len(layer.inputs):
            raise FormatError(f"{self.where()}: {len(inputs)} inputs for a {op} layer")
        for slot, act in enumerate(inputs):
            if isinstance(act, Act) and act.src is not None and act.shape != layer.inputs[slot].shape:
                raise FormatError(
                    f"{self.where()}: input {slot} has shape {act.shape} but the {op} layer expects "
                    f"{layer.inputs[slot].shape}"
                )
        spec = Spec(op, name, params, list(inputs) + [None] * (len(layer.inputs) - len(inputs)),
                    [t.shape for t in layer.outputs], self.where())
        for weight, const in (sources or {}).items():
            if isinstance(const, Const) and const.source:
                spec.sources[weight] = const.source
        self.specs.append(spec)
        if len(self.specs) > MAX_LAYERS:
            raise FormatError(f"the model maps to more than {MAX_LAYERS} layers")
        return spec

    def inferred_shape(self, tensor: str):
        """A tensor's shape by ONNX shape inference, only when folding could not give it:
        of the whole model (run once), else of the current node alone with the values
        pase folded for its inputs (:func:`~pase.io.onnx.reader.infer_node`); None when
        neither sizes it."""
        if self._inferred is None:
            self._inferred, self._types = infer_shapes(self.model, self.input_shapes)
        shape = self._inferred.get(tensor)
        if shape is None and self.node is not None and tensor in self.node.output:
            if tensor not in self._node_inferred:
                found = infer_node(self.model, self.node, self.values, self._types)
                self._node_inferred.update({name: found.get(name) for name in self.node.output if name})
            shape = self._node_inferred.get(tensor)
        return shape

    def extra_weight(self, spec: Spec, const: Const, act: Act | None = None) -> None:
        """Record that layer ``spec`` reads the trainable initializer behind ``const`` outside
        its weight slots (added, multiplied or concatenated with activation ``act``): it
        becomes an extra weight of the layer, with the initializer's full size, so that it
        counts as a parameter and its gradient is all-reduced. An initializer the exporter
        stored already broadcast over the export batch (the same values for every sample:
        a class token) counts one sample. Constants that are no trainable initializer are
        ignored."""
        if not const.source:
            return
        full = list(self.param_shapes[const.source])
        stored = self.values.get(const.source)
        if act is not None and act.batch_axis is not None and len(full) == len(act.shape) and self.old_batch:
            j = act.batch_axis
            value = stored.value if isinstance(stored, Const) else None
            if full[j] == self.old_batch > 1 and value is not None and (value == value.take([0], axis=j)).all():
                full[j] = 1
        spec.extras.append((const.source, tuple(full), tuple(const.shape)))

    def rebatch(self, const: Const, act: Act) -> Const:
        """``const`` (aligned on the right with ``act``) with the axis that meets ``act``'s
        batch axis resized from the export batch to this import's: a tensor the exporter
        folded at the export batch (an expanded class token, token-type embeddings).
        Unchanged when nothing needs resizing."""
        old, new, axis = self.old_batch, self.new_batch, act.batch_axis
        if not old or not new or old == new or axis is None:
            return const
        j = axis - (len(act.shape) - len(const.shape))
        if not 0 <= j < len(const.shape):
            return const
        size, want = const.shape[j], act.shape[axis]
        if size == want or size == 1 or size * new != want * old:
            return const
        shape = list(const.shape)
        shape[j] = want
        return Const(tuple(shape), None, const.source)

    def batch_hint(self) -> str:
        """The advice to add to a shape mismatch when the batch differs from the export's."""
        if self.old_batch and self.new_batch and self.old_batch != self.new_batch:
            return (f" (the model was exported with batch {self.old_batch} and a shape here is fixed at it; "
                    f"export it with batch {self.new_batch} or with a dynamic batch axis)")
        return ""

    def hold(self, value):
        """``value`` (a node's output) as it is kept: a folded constant stays a value while
        the folded constants held stay within ``MAX_FOLD_BYTES`` (half of it for large
        ones), else becomes a shape only; anything else unchanged."""
        if not isinstance(value, Const) or value.value is None:
            return value
        nbytes = value.value.nbytes
        budget = MAX_FOLD_BYTES if value.value.size <= _SMALL_CONSTANT else MAX_FOLD_BYTES // 2
        if self.held_bytes + nbytes > budget:
            return Const(value.shape, None, value.source)
        self.held_bytes += nbytes
        return value

    def const_value(self, v, what: str):
        """The value of constant input ``v`` (None when absent); a FormatError naming ``what``
        when it is not a folded constant."""
        if v is None:
            return None
        if not isinstance(v, Const) or v.value is None:
            raise FormatError(
                f"{self.where()}: its {what} is computed at run time (or stored as external data) and "
                "could not be folded to a constant"
            )
        return v.value

    # -- activations: data movement helpers (compose and cancel) ------------------------------------

    def reshape(self, act: Act, shape, suffix=".reshape") -> Act:
        """``act`` reshaped to ``shape``, a reshape of a reshape collapsed into one."""
        shape = tuple(int(d) for d in shape)
        if prod(shape) != prod(act.shape):
            raise FormatError(f"{self.where()}: cannot reshape {act.shape} to {shape}")
        if shape == act.shape:
            return act
        axis, outer = reshape_axis(act.shape, shape, act.batch_axis, act.outer, self.new_batch)
        image = act.image and len(shape) == 4 and axis == 0
        if act.src is None:
            return Act(shape, None, 0, axis, image, outer)
        if act.src.op == "Reshape" and isinstance(act.src.inputs[0], Act):
            return self.reshape(act.src.inputs[0], shape, suffix)
        dims = letters(len(act.shape), act.batch_axis, act.image)
        spec = self.emit("Reshape", dict(shape=list(act.shape), dims=list(dims), out_shape=list(shape)), [act], suffix)
        return Act.of(spec, 0, axis, image, outer)

    def transpose(self, act: Act, perm, suffix=".transpose") -> Act:
        """``act`` with its axes permuted by ``perm``: transposes compose, and one that moves
        only size-1 axes is a reshape."""
        perm = [int(p) for p in perm]
        if sorted(perm) != list(range(len(act.shape))):
            raise FormatError(f"{self.where()}: perm {perm} is not a permutation of {len(act.shape)} axes")
        if perm == sorted(perm):
            return act
        shape = tuple(act.shape[p] for p in perm)
        moved = [p for p in perm if act.shape[p] != 1]
        if moved == sorted(moved):  # only size-1 axes move: a reshape
            return self.reshape(act, shape, suffix)
        axis = perm.index(act.batch_axis) if act.batch_axis is not None else None
        image = act.image and axis == 0
        if act.src is None:
            return Act(shape, None, 0, axis, image, act.outer)
        if act.src.op == "Transpose" and isinstance(act.src.inputs[0], Act):
            inner = act.src.params["perm"]
            return self.transpose(act.src.inputs[0], [inner[p] for p in perm], suffix)
        if act.src.op == "Reshape" and isinstance(act.src.inputs[0], Act) and unit_reshape(act.src.inputs[0].shape, act.shape):
            # Transpose the tensor before it gained or lost size-1 axes, then reshape:
            # keeps transposes next to transposes so that they cancel.
            x = act.src.inputs[0]
            big_y = [i for i, d in enumerate(act.shape) if d != 1]
            big_x = [i for i, d in enumerate(x.shape) if d != 1]
            to_x = dict(zip(big_y, big_x))
            order = [to_x[p] for p in perm if act.shape[p] != 1]
            perm_x = [i for i, d in enumerate(x.shape) if d == 1] + order
            return self.reshape(self.transpose(x, perm_x, suffix), shape, suffix)
        dims = letters(len(act.shape), act.batch_axis, act.image)
        spec = self.emit("Transpose", dict(shape=list(act.shape), dims=list(dims), perm=perm), [act], suffix)
        return Act.of(spec, 0, axis, image, act.outer)

    def crop(self, act: Act, axis: int, size: int, suffix=".slice") -> Act:
        """The first ``size`` elements of ``act`` along ``axis`` (a Split layer)."""
        n = act.shape[axis]
        if size == n:
            return act
        if size <= 0:
            raise FormatError(f"{self.where()}: the result is zero-sized along axis {axis}")
        if act.src is None:
            shape = list(act.shape)
            shape[axis] = size
            return Act(tuple(shape), None, 0, act.batch_axis, act.image, act.outer)
        dims = letters(len(act.shape), act.batch_axis, act.image)
        spec = self.emit("Split", dict(shape=list(act.shape), dims=list(dims), axis=dims[axis], parts=[size, n - size]),
                         [act], suffix)
        return Act.of(spec, 0, act.batch_axis, act.image, act.outer)

    def _grow(self, act: Act, axis: int, size: int, suffix=".pad") -> Act:
        """``act`` padded to ``size`` along ``axis`` (a Concat with a constant)."""
        n = act.shape[axis]
        if size == n:
            return act
        extra = list(act.shape)
        extra[axis] = size - n
        if act.src is None:
            out = list(act.shape)
            out[axis] = size
            return Act(tuple(out), None, 0, act.batch_axis, act.image, act.outer)
        dims = letters(len(act.shape), act.batch_axis, act.image)
        spec = self.emit("Concat", dict(shapes=[list(act.shape), extra], dims=list(dims), axis=dims[axis]), [act, None],
                         suffix)
        return Act.of(spec, 0, act.batch_axis, act.image, act.outer)

    def adapt(self, act: Act, shape) -> Act:
        """``act`` brought to ``shape`` by crops, pads and reshapes: the cost-model view of a
        slice, gather, pad, expand or an op of unknown semantics."""
        shape = tuple(int(d) for d in shape)
        if act.shape == shape:
            return act
        if prod(act.shape) == prod(shape):
            return self.reshape(act, shape)
        x = act
        if len(x.shape) < len(shape):
            x = self.reshape(x, (1,) * (len(shape) - len(x.shape)) + x.shape)
        if len(x.shape) != len(shape):
            x = self.reshape(x, (prod(x.shape),))
            target = (prod(shape),)
        else:
            target = shape
        for axis, size in enumerate(target):
            if size < x.shape[axis]:
                x = self.crop(x, axis, size)
            elif size > x.shape[axis]:
                x = self._grow(x, axis, size)
        return self.reshape(x, shape)

    # -- the walk ------------------------------------------------------------------------------------

    def run(self) -> Graph:
        """Convert every node and build the graph; warns with :class:`OnnxImportWarning`
        when operators were approximated."""
        g = self.g
        if len(g.node) == 0:
            raise FormatError("the model's graph has no nodes")
        if len(g.node) > MAX_NODES:
            raise FormatError(f"the model has {len(g.node)} nodes; at most {MAX_NODES} are accepted")
        for node in g.node:
            for what, names, limit in (("inputs", node.input, MAX_LAYER_INPUTS),
                                       ("outputs", node.output, MAX_NODE_OUTPUTS)):
                if len(names) > limit:
                    raise FormatError(
                        f"node {node_label(node)} has {len(names):,} {what}; at most {limit:,} are accepted"
                    )
        fingerprints: dict = {}
        for t in g.initializer:
            if not t.name:
                raise FormatError("an initializer has no name")
            value = self.hold(tensor_value(t, f"initializer {t.name!r}"))
            if t.data_type in _FLOAT_TYPES and prod(value.shape) > 1 and t.name not in self.buffers:
                # A trainable tensor, as far as the file tells (buffers of float type are
                # told apart only where they end up: see extra_weight). An optimising
                # exporter stores a tied table twice, once transposed: the transpose of
                # another initializer is that parameter. Equal copies in the same
                # orientation are not (cloned layers of a fresh model start equal).
                key = _fingerprint(value.value)
                source = t.name
                if key is not None:
                    source = fingerprints.get((key[0], not key[1]), t.name)
                    fingerprints.setdefault(key, t.name)
                self.param_shapes.setdefault(source, value.shape)
                value = replace(value, source=source)
            self.values[t.name] = value
        for t in g.sparse_initializer:
            self.values[t.values.name or t.indices.name] = Const(check_shape(t.dims, "sparse initializer"), None)
        self.input_shapes, self.old_batch, self.new_batch = input_shapes(g, self.batch, self.symbols)
        for name, shape in self.input_shapes.items():
            self.values[name] = Act(shape, None, 0, 0 if shape and shape[0] == self.new_batch else None, len(shape) == 4)
        for node in g.node:
            for t in node.input:
                if t:
                    self.consumers[t] = self.consumers.get(t, 0) + 1
        for node in _topological(g.node, set(self.values)):
            self.node = node
            self._named = False
            if any(isinstance(self.values.get(t), Unknown) for t in node.input if t):
                # Downstream of an operator of unknown output shape: nothing to convert, but
                # an unsupported operator here is listed too.
                if not self._supported(node):
                    self.unsupported.append((node.op_type, node.name or (node.output[0] if node.output else ""), ""))
                for name in node.output:
                    if name:
                        self.values[name] = Unknown()
                continue
            try:
                outs = self._convert(node)
            except Unsupported as exc:
                outs = self._fallback(node, str(exc))
            except PaseError:
                if self.unsupported and self.unsupported_mode == "error":
                    break
                raise
            except (ValueError, TypeError, KeyError, IndexError, ArithmeticError, AttributeError,
                    RecursionError, MemoryError) as exc:
                if self.unsupported and self.unsupported_mode == "error":
                    break
                raise FormatError(f"{self.where()}: cannot be imported ({type(exc).__name__}: {exc})") from None
            if len(outs) < len([o for o in node.output if o]):
                outs = list(outs) + [None] * (len(node.output) - len(outs))
            for name, value in zip(node.output, outs):
                if name:
                    if value is None:
                        value = Act((), None)
                    if not isinstance(value, Unknown):
                        check_shape(value.shape, self.where())
                        value = self.hold(value)
                    self.values[name] = value
        self.node = None
        if self.unsized and self.unsupported_mode == "elementwise":
            raise FormatError(
                f"the model uses operators pase cannot import whose output shapes are unknown, so they cannot be "
                f"approximated: {_unsupported_listing(self.unsized)}. Re-export without them (or with static shapes "
                "that ONNX shape inference can propagate)"
            )
        if self.unsupported:
            listing = _unsupported_listing(self.unsupported)
            if self.unsupported_mode == "error":
                raise FormatError(
                    f"the model uses operators pase cannot import: {listing}. Re-export without them, or import "
                    "with unsupported='elementwise' to treat them as element-wise layers"
                )
            warnings.warn(f"treated as element-wise layers (approximate cost): {listing}", OnnxImportWarning, stacklevel=3)
        outputs = {self.values[o.name].key() for o in g.output
                   if isinstance(self.values.get(o.name), Act) and self.values[o.name].src is not None}
        return build_graph(self.name, self.specs, outputs, {k: prod(v) for k, v in self.param_shapes.items()})

    @staticmethod
    def _supported(node) -> bool:
        """Whether a converter maps ``node`` (default domain, a registered operator)."""
        return node.domain in ("", "ai.onnx") and node.op_type in CONVERTERS

    def _convert(self, node) -> list:
        """The values of a node's outputs, from its converter, or by folding when all its
        inputs are constants; Unsupported when no converter maps it."""
        op = node.op_type
        ins = [self.values[t] if t else None for t in node.input]
        default_domain = node.domain in ("", "ai.onnx")
        conv = CONVERTERS.get(op) if default_domain else None
        if conv is None:
            if ins and not any(isinstance(v, Act) for v in ins) and op not in ("If", "Loop", "Scan"):
                # Computed from constants only (a causal mask from Trilu...): a constant, whatever the op.
                return self._fold_node(node, op if default_domain else "", read_attrs(node), ins)
            raise Unsupported("" if default_domain else f"domain {node.domain!r}")
        need = conv.min_inputs(self.opset)
        if len(ins) < need or any(v is None for v in ins[:need]):
            raise FormatError(f"{self.where()}: needs {need} input(s), has {sum(v is not None for v in ins)}")
        attrs = read_attrs(node)
        if not conv.on_constants and not any(isinstance(v, Act) for v in ins):
            return self._fold_node(node, op, attrs, ins)
        if conv.act_first and not isinstance(ins[0], Act):
            raise FormatError(f"{self.where()}: input 0 must be an activation, but it is a constant")
        return conv.fn(self, ins, attrs)

    def _fold_node(self, node, op, attrs, ins) -> list:
        """Constants for the outputs of a node whose inputs are all constants: their values
        when the node folds, else their shapes only."""
        vals = [v.value if isinstance(v, Const) else None for v in ins]
        present = [v for v in ins if v is not None]
        # A view of a trainable initializer stays that initializer (a transposed tied table,
        # a sliced position embedding, an expanded class token).
        source = ins[0].source if op in _VIEWS and isinstance(ins[0], Const) else ""
        if all(isinstance(v, Const) and v.value is not None for v in present):
            try:
                return [Const.of(o, source) for o in fold(op, attrs, vals, self.opset)]
            except Fold as exc:
                if exc.shape is not None:
                    return [Const(check_shape(exc.shape, self.where()), None, source)]
            except FormatError:
                raise
            except Exception:
                pass
        # Value unknown (external data, too large, or an op we do not evaluate): shapes only.
        conv = CONVERTERS.get(op)
        rule = conv.const_shape if conv is not None else None
        out = []
        for name in node.output:
            shape = self.inferred_shape(name) if name else None
            if shape is None and rule == "first" and ins and ins[0] is not None:
                shape = ins[0].shape
            if shape is None and rule == "broadcast":
                shape = broadcast([v.shape for v in present], self.where())
            if shape is None:
                shape = ()
            out.append(Const(check_shape(shape, self.where()), None, source))
        return out

    # -- unsupported: error list, or the element-wise approximation ----------------------------------

    def _fallback(self, node, reason: str) -> list:
        """Record an unsupported node; its outputs as an element-wise layer over its
        activations, or all :class:`~.values.Unknown` when ONNX shape inference does not
        size them (a shape is never guessed)."""
        entry = (node.op_type, node.name or (node.output[0] if node.output else ""), reason)
        self.unsupported.append(entry)
        ins = [self.values[t] if t else None for t in node.input]
        acts = [v for v in ins if isinstance(v, Act)]
        live = [a for a in acts if a.src is not None]
        shapes = [self.inferred_shape(name) if name else () for name in node.output]
        if any(s is None for s in shapes):
            self.unsized.append(entry)
            return [Unknown() for _ in node.output]
        outs = []
        for k, name in enumerate(node.output):
            if not name:
                outs.append(None)
                continue
            shape = check_shape(shapes[k], self.where())
            if k > 0 or not live or not shape or 0 in shape:
                outs.append(Act(shape, None) if acts or not ins else Const(shape, None))
                continue
            main = live[0]
            axis = main.batch_axis if len(shape) == len(main.shape) else None
            inputs = [self.adapt(main, shape)]
            for a in live[1:]:
                if a.key() != main.key():
                    inputs.append(self.adapt(a, shape))
            dims = letters(len(shape), axis, main.image and len(shape) == 4)
            spec = self.emit("Elementwise", dict(shape=list(shape), dims=list(dims), inputs=len(inputs), pointwise=1),
                             inputs)
            outs.append(Act.of(spec, 0, axis))
        return outs


def _fingerprint(value):
    """``(key, transposed)`` for a non-square matrix: ``key`` equal for two matrices holding
    the same values up to a transpose, ``transposed`` telling the orientation; None for
    other tensors and unknown values (external data, too large to read)."""
    if value is None or value.ndim != 2 or value.shape[0] == value.shape[1]:
        return None
    transposed = value.shape[0] < value.shape[1]
    if transposed:
        value = value.T
    return (value.shape, hash(np.ascontiguousarray(value).tobytes())), transposed


def _unsupported_listing(unsupported) -> str:
    """``(op, node, reason)`` entries as one line, grouped by op and reason."""
    by_op: dict[str, list] = {}
    for op, node, reason in unsupported:
        by_op.setdefault((op, reason), []).append(node)
    parts = []
    for (op, reason), nodes in by_op.items():
        what = f"{op} ({reason})" if reason else op
        parts.append(f"{what} x{len(nodes)}, e.g. {nodes[0]!r}")
    return "; ".join(parts)


def _topological(nodes, available: set):
    """Nodes in file order where valid, else moved after their producers; refuses cycles and
    dangling inputs. ``available``: the tensors there before any node (inputs, initializers)."""
    produced: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for o in node.output:
            if not o:
                continue
            if o in produced or o in available:
                raise FormatError(f"tensor {o!r} is produced twice (node {node_label(node)})")
            produced[o] = i
    deps = [0] * len(nodes)
    users: dict[int, list] = {}
    for i, node in enumerate(nodes):
        srcs = set()
        for t in node.input:
            if not t or t in available:
                continue
            if t not in produced:
                raise FormatError(f"node {node_label(node)} reads tensor {t!r}, which no node, input or initializer provides")
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
        stuck = [node_label(nodes[i]) for i in range(len(nodes)) if deps[i] > 0][:3]
        raise FormatError(f"the model's graph has a cycle through nodes {', '.join(stuck)}")
    return order
