"""Reading an ONNX model safely: bytes and files with their size limit, checked
views of its protobuf (attributes, tensors, shapes, the model's input shapes) and
ONNX shape inference.

Nothing here executes anything from the model, and tensors stored as external
data are never read: no path named in a model is ever opened.
"""

from __future__ import annotations

from math import prod
from pathlib import Path

from pase.errors import FormatError
from pase.io.onnx.values import Const
from pase.limits import MAX_DIM, MAX_FOLD_ELEMENTS, MAX_TENSOR_ELEMENTS


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
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:
        raise FormatError(f"not a valid ONNX file: {type(exc).__name__}: {str(exc)[:200]}") from None
    return model, name


def node_label(node) -> str:
    """How messages name a node: its name and op type, or its op type and first output."""
    return f"{node.name!r} ({node.op_type})" if node.name else f"({node.op_type} -> {list(node.output)[:1]})"


def read_attrs(node) -> dict:
    """A node's attributes as Python values (byte strings decoded)."""
    from onnx import helper

    out = {}
    for a in node.attribute:
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
    """``shape`` as a tuple of ints, refusing negative, absurdly large or too many-element shapes."""
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


def infer_shapes(model, shapes: dict) -> dict[str, tuple]:
    """Static shapes of the model's tensors by ONNX shape inference, with the inputs at
    ``shapes``; tensors it cannot size are left out (all of them when it fails)."""
    onnx = onnx_module()
    out: dict[str, tuple] = {}
    try:
        m = onnx.ModelProto()
        m.ir_version = model.ir_version
        m.opset_import.extend(model.opset_import)
        g = m.graph
        g.node.extend(model.graph.node)
        for t in model.graph.initializer:
            # Large and external weights go in as typed inputs: inference needs only their shapes.
            if is_external(t) or prod(t.dims) > 4096:
                g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
            else:
                g.initializer.append(t)
        for name, shape in shapes.items():
            src = next(i for i in model.graph.input if i.name == name)
            g.input.append(onnx.helper.make_tensor_value_info(name, src.type.tensor_type.elem_type, list(shape)))
        g.output.extend(model.graph.output)
        for o in g.output:
            o.type.tensor_type.ClearField("shape")
        inferred = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False, data_prop=False)
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = vi.type.tensor_type
            if tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim):
                out[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    except Exception:
        pass
    return out
