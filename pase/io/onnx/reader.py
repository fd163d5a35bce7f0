"""Reading an ONNX model safely: bytes and files with their size limits (the file's,
and the memory its parse would take), checked views of its protobuf (attributes,
tensors, shapes, the model's input shapes, the size of its local functions once
inlined) and ONNX shape inference.

Nothing here executes anything from the model, and tensors stored as external
data are never read: no path named in a model is ever opened. Shape inference
runs without ONNX's data propagation, which holds one entry per element of every
one-dimensional tensor it meets (a ``Range`` to 2**62 took 13 GB); the constants
pase folds itself stand in for it (:func:`infer_node`).
"""

from __future__ import annotations

from math import prod
from pathlib import Path

import numpy as np

from pase.errors import FormatError
from pase.io.onnx.values import Const
from pase.limits import (MAX_ATTRIBUTE_VALUES, MAX_DIM, MAX_FOLD_ELEMENTS, MAX_NODES, MAX_ONNX_PARSE_BYTES, MAX_RANK,
                         MAX_TENSOR_ELEMENTS)

# Constants up to this many elements go into shape inference as values (reshape
# targets, axes, pads); larger ones as typed inputs, their shapes being enough.
_INFERENCE_VALUES = 4096


def onnx_module():
    """The ``onnx`` package, or a FormatError saying how to install it."""
    try:
        import onnx
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise FormatError("reading .onnx files needs the onnx package: pip install 'pase[onnx]'") from None
    return onnx


def read_model(source, max_bytes: int):
    """``(ModelProto, name)`` from a path, bytes or a ModelProto; files over ``max_bytes`` are refused unread."""
    onnx = onnx_module()
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
    check_parse_cost(data)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:
        raise FormatError(f"not a valid ONNX file: {type(exc).__name__}: {str(exc)[:200]}") from None
    return model, name


# -- the cost of parsing, from the wire format ------------------------------------------------------

# Estimated parse cost, in bytes, per protobuf entry (a field of a message, an element of
# an unpacked repeated field): upb takes 16 to 360 bytes for each; the floor keeps the
# walk to at most MAX_ONNX_PARSE_BYTES / 128 entries, a few seconds.
_ENTRY_COST = 128
# Kinds of fields other than messages, in a layout.
_BYTES, _FIXED, _VARINT = "bytes", "fixed", "varint"
_LAYOUTS: dict = {}


def _layout(descriptor) -> tuple[dict, int]:
    """``({field number: kind}, cost of one message)`` of a protobuf message type: a
    field's kind is the layout of its message type, or ``_BYTES`` (strings too),
    ``_FIXED`` or ``_VARINT``. Recursive types share their layouts."""
    layout = _LAYOUTS.get(descriptor.full_name)
    if layout is None:
        fields: dict = {}
        # A parsed message holds a slot per declared field (measured: 355 bytes for a
        # NodeProto with three strings).
        layout = _LAYOUTS[descriptor.full_name] = (fields, max(_ENTRY_COST, 32 + 24 * len(descriptor.fields)))
        for f in descriptor.fields:
            if f.message_type is not None:
                fields[f.number] = _layout(f.message_type)
            elif f.type in (f.TYPE_STRING, f.TYPE_BYTES):
                fields[f.number] = _BYTES
            elif f.type in (f.TYPE_FLOAT, f.TYPE_DOUBLE, f.TYPE_FIXED32, f.TYPE_FIXED64, f.TYPE_SFIXED32,
                            f.TYPE_SFIXED64):
                fields[f.number] = _FIXED
            else:
                fields[f.number] = _VARINT
    return layout


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at ``data[i:]`` and the offset after it; IndexError past the end."""
    value, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def parse_cost(data: bytes, limit: int) -> int:
    """Estimated bytes that parsing ``data`` as an ONNX ModelProto would allocate, read
    from the wire format without parsing; the walk stops once the estimate passes
    ``limit`` and returns it. Malformed data ends the walk (the parser reports it)."""
    model = _layout(onnx_module().ModelProto.DESCRIPTOR)
    cost = model[1]
    pending = [(model, 0, len(data))]
    try:
        while pending:
            (fields, _), i, end = pending.pop()
            while i < end:
                key = data[i]  # most keys and lengths are one byte: read those inline
                i += 1
                if key >= 0x80:
                    key, i = _varint(data, i - 1)
                wire = key & 7
                if wire == 2:
                    n = data[i]
                    i += 1
                    if n >= 0x80:
                        n, i = _varint(data, i - 1)
                    kind = fields.get(key >> 3, _BYTES)
                    if kind.__class__ is tuple:  # a message
                        cost += kind[1]
                        if n:
                            pending.append((kind, i, i + n))
                    elif kind is _VARINT:  # packed: 8 bytes per element, from one byte each
                        ends = np.count_nonzero(np.frombuffer(data, np.uint8, min(n, len(data) - i), i) < 0x80)
                        cost += _ENTRY_COST + 8 * int(ends)
                    else:
                        cost += _ENTRY_COST + n
                    i += n
                elif wire == 0:
                    _, i = _varint(data, i)
                    cost += _ENTRY_COST
                elif wire == 1 or wire == 5:
                    i += 8 if wire == 1 else 4
                    cost += _ENTRY_COST
                else:
                    return cost  # groups: not ONNX
                if cost > limit:
                    return cost
    except (IndexError, ValueError):  # past the end: truncated or malformed
        pass
    return cost


def check_parse_cost(data: bytes, limit: int = MAX_ONNX_PARSE_BYTES) -> None:
    """Refuse, before parsing, an ONNX file whose parse would take more than ``limit``
    bytes of memory (millions of tiny nodes, names or dimensions); files too small to
    come near it are not walked."""
    # No entry costs more than 300 times its size on the wire (an empty AttributeProto: 2 bytes).
    if len(data) * 300 <= limit:
        return
    cost = parse_cost(data, limit)
    if cost > limit:
        raise FormatError(
            f"parsing the file would take more than {limit / 2**30:.0f} GiB of memory: it holds millions of tiny "
            "entries (nodes, names, dimensions), more than any model of at most "
            f"{MAX_NODES:,} nodes; simplify the graph or export it again"
        )


# -- checked views ---------------------------------------------------------------------------------------


def node_label(node) -> str:
    """How messages name a node: its name and op type, or its op type and first output."""
    return f"{node.name!r} ({node.op_type})" if node.name else f"({node.op_type} -> {list(node.output)[:1]})"


def read_attrs(node) -> dict:
    """A node's attributes as Python values (byte strings decoded)."""
    from onnx import helper

    out = {}
    for a in node.attribute:
        n = max(len(a.ints), len(a.floats), len(a.strings), len(a.tensors), len(a.graphs))
        if n > MAX_ATTRIBUTE_VALUES:
            raise FormatError(f"node {node_label(node)}: attribute {a.name!r} lists {n:,} values; at most "
                              f"{MAX_ATTRIBUTE_VALUES:,} are accepted (store large constants as tensors)")
        try:
            v = helper.get_attribute_value(a)
        except Exception:
            raise FormatError(f"node {node_label(node)}: attribute {a.name!r} cannot be read") from None
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        out[a.name] = v
    return out


def is_external(tensor) -> bool:
    """True when a TensorProto's data is stored outside the model (and must not be read)."""
    onnx = onnx_module()
    return tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data) > 0


def check_shape(shape, where: str) -> tuple:
    """``shape`` as a tuple of ints, refusing negative, absurdly large, too many-element or
    too many-axis shapes (limits :data:`~pase.limits.MAX_DIM`, ``MAX_TENSOR_ELEMENTS``,
    ``MAX_RANK``); the FormatError names ``where``."""
    if len(shape) > MAX_RANK:
        raise FormatError(f"{where}: a shape of {len(shape)} axes; at most {MAX_RANK} are accepted")
    shape = tuple(int(d) for d in shape)
    for d in shape:
        if d < 0:
            raise FormatError(f"{where}: shape {shape} has a negative dimension")
        if d > MAX_DIM:
            raise FormatError(f"{where}: dimension {d} of shape {shape} is absurdly large (limit {MAX_DIM})")
    if prod(shape) > MAX_TENSOR_ELEMENTS:
        raise FormatError(f"{where}: shape {shape} has {prod(shape):.3g} elements; at most {MAX_TENSOR_ELEMENTS:.3g} are accepted")
    return shape


def tensor_value(tensor, where: str) -> Const:
    """A TensorProto as a constant; external or huge data is left unread."""
    from onnx import numpy_helper

    shape = check_shape(tensor.dims, where)
    if is_external(tensor) or prod(shape) > MAX_FOLD_ELEMENTS:
        return Const(shape, None)
    try:
        value = numpy_helper.to_array(tensor)
    except Exception as exc:
        raise FormatError(f"{where}: tensor data cannot be read ({type(exc).__name__}: {exc})") from None
    if tuple(value.shape) != shape:
        raise FormatError(f"{where}: tensor data has shape {value.shape}, declared {shape}")
    return Const(shape, value)


def input_shapes(graph, batch: int | None, symbols: dict) -> tuple[dict, int | None, int | None]:
    """The shapes of the graph's real inputs (initializers excluded), with the first axis
    set to ``batch`` where it holds the batch and symbolic sizes taken from ``symbols``;
    and the batch size the model was exported with (None when symbolic) and the one
    of this import (None when no input has a batch axis)."""
    inits = {t.name for t in graph.initializer}
    real = [i for i in graph.input if i.name not in inits]
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
    old_batch = first[0] if first is not None and isinstance(first[0], int) else None
    batch_symbol = first[0] if first is not None and isinstance(first[0], str) else None
    out = {}
    for name, dims in shapes.items():
        where = f"model input {name!r}"
        resolved = []
        for i, d in enumerate(dims):
            if i == 0 and batch is not None and (d == batch_symbol if isinstance(d, str) else d == old_batch):
                resolved.append(batch)
            elif isinstance(d, int):
                resolved.append(d)
            elif d in symbols:
                resolved.append(int(symbols[d]))
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
        out[name] = check_shape(resolved, where)
        if 0 in out[name]:
            raise FormatError(f"{where} is zero-sized: shape {out[name]}")
    if batch is not None:
        new_batch = batch
    elif old_batch is not None:
        new_batch = old_batch
    elif batch_symbol is not None:
        new_batch = int(symbols[batch_symbol])
    else:
        new_batch = None
    return out, old_batch, new_batch


def infer_shapes(model, shapes: dict) -> tuple[dict[str, tuple], dict[str, int]]:
    """Static shapes and ONNX element types of the model's tensors by ONNX shape
    inference, with the inputs at ``shapes``: ``({tensor: shape}, {tensor: elem_type})``.
    Tensors it cannot size are left out (all of them when it fails).

    Runs without data propagation (see the module docstring), so shapes computed from
    other tensors' values are missing here; :func:`infer_node` gives them from the
    values pase folded.
    """
    onnx = onnx_module()
    try:
        m = onnx.ModelProto()
        m.ir_version = model.ir_version
        m.opset_import.extend(model.opset_import)
        g = m.graph
        g.node.extend(model.graph.node)
        for t in model.graph.initializer:
            # Large and external weights go in as typed inputs: inference needs only their shapes.
            if is_external(t) or prod(t.dims) > _INFERENCE_VALUES:
                g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
            else:
                g.initializer.append(t)
        declared = {i.name: i for i in model.graph.input}
        for name, shape in shapes.items():
            g.input.append(onnx.helper.make_tensor_value_info(name, declared[name].type.tensor_type.elem_type,
                                                              list(shape)))
        g.output.extend(model.graph.output)
        for o in g.output:
            o.type.tensor_type.ClearField("shape")
        inferred = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False, data_prop=False)
    except Exception:
        return {}, {}
    return _shapes_and_types(list(inferred.graph.input) + list(inferred.graph.value_info)
                             + list(inferred.graph.output))


def infer_node(model, node, values: dict, types: dict) -> dict[str, tuple]:
    """The static shapes of ``node``'s outputs by ONNX shape inference of that node alone,
    its inputs taken from ``values`` (tensor -> :class:`~pase.io.onnx.values.Act` or
    Const: small folded constants go in as values, the rest as shapes) with element
    types from ``types`` (float when unknown). This is what data propagation would give,
    bounded by the limits of folding. Empty when inference fails or the node has
    subgraphs (their outer-scope tensors are not at hand here)."""
    onnx = onnx_module()
    from onnx import helper, numpy_helper

    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return {}
    try:
        g = onnx.GraphProto()
        g.node.append(node)
        for name in dict.fromkeys(t for t in node.input if t):
            v = values.get(name)
            if v is None:
                return {}
            elem = types.get(name)
            value = getattr(v, "value", None)
            if value is not None and value.size <= _INFERENCE_VALUES:
                if elem:
                    value = value.astype(helper.tensor_dtype_to_np_dtype(elem))
                g.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
            else:
                g.input.append(helper.make_tensor_value_info(name, elem or onnx.TensorProto.FLOAT, list(v.shape)))
        for name in node.output:
            if name:
                g.output.append(onnx.ValueInfoProto(name=name))
        m = onnx.ModelProto(ir_version=model.ir_version, graph=g)
        m.opset_import.extend(model.opset_import)
        inferred = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False, data_prop=False)
    except Exception:
        return {}
    return _shapes_and_types(inferred.graph.output)[0]


def _shapes_and_types(value_infos) -> tuple[dict[str, tuple], dict[str, int]]:
    """``({name: shape}, {name: elem_type})`` of tensor value infos; only fully known, positive shapes."""
    shapes, types = {}, {}
    for vi in value_infos:
        tt = vi.type.tensor_type
        if tt.elem_type:
            types[vi.name] = int(tt.elem_type)
        if tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim):
            shapes[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    return shapes, types


def check_expanded_size(model, limit: int = MAX_NODES) -> None:
    """Refuse a model with more than ``limit`` nodes once its local functions are inlined,
    before inlining: nodes of the graph and of its subgraphs (``If`` and ``Loop`` bodies)
    are counted, and a call of a local function counts as the nodes of its body, each
    function's count computed once (so ``f1`` calling ``f0`` eight times, ``f2`` calling
    ``f1`` eight times... is counted in a few steps, not 8**n). A function calling itself
    is refused too."""
    onnx = onnx_module()
    GRAPH, GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS
    functions = {(f.domain, f.name, f.overload): f for f in model.functions}
    counts: dict = {}
    calling: list = []

    def of_nodes(nodes) -> int:
        total = 0
        for node in nodes:
            key = (node.domain, node.op_type, node.overload)
            total += of_function(key) if key in functions else 1
            for a in node.attribute:
                if a.type == GRAPH:
                    total += of_nodes(a.g.node)
                elif a.type == GRAPHS:
                    total += sum(of_nodes(sub.node) for sub in a.graphs)
        return total

    def of_function(key) -> int:
        if key not in counts:
            if key in calling:
                raise FormatError(f"local function {_function_name(key)} calls itself (through "
                                  f"{' -> '.join(_function_name(k) for k in calling[calling.index(key):])}); "
                                  "ONNX functions cannot recurse")
            calling.append(key)
            counts[key] = of_nodes(functions[key].node)
            calling.pop()
        return counts[key]

    try:
        total = of_nodes(model.graph.node)
    except RecursionError:
        raise FormatError("the model's local functions or subgraphs are nested too deeply") from None
    if total > limit:
        if counts:
            key = max(counts, key=counts.get)
            raise FormatError(f"the model has {_count(total)} nodes once its local functions are inlined (function "
                              f"{_function_name(key)} alone expands to {_count(counts[key])}); at most {limit:,} "
                              "are accepted: export the model without functions or simplify it")
        raise FormatError(f"the model has {total:,} nodes, its subgraphs included; at most {limit:,} are accepted")


def _count(n: int) -> str:
    """A node count for messages: in full, or to three digits past a billion."""
    return f"{n:,}" if n < 10**9 else f"{n:.3g}"


def _function_name(key) -> str:
    """A local function as messages name it: ``'domain.name'``."""
    domain, name, overload = key
    return repr(f"{domain}.{name}" + (f":{overload}" if overload else ""))
