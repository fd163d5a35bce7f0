"""Reading and writing graphs in pase's JSON format (``docs/graph-format.md``).

A file lists layers in an order where producers come first; each layer is an
op name, the keyword parameters of that op's builder in :mod:`pase.ops`,
and the producer feeding each input slot. Loading only parses JSON and calls
the builders: nothing in a file is evaluated, executed or used as a path.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from pase.errors import FormatError, GraphError, PaseError
from pase.io.files import read_limited
from pase.limits import MAX_FILE_BYTES, MAX_LAYER_INPUTS, MAX_LAYERS, MAX_ONNX_BYTES, MAX_RANK, check_layer_size
from pase.ir.graph import Graph, TensorSpec
from pase.ops import build_layer

__all__ = ["FORMAT", "VERSION", "MODEL_SUFFIXES",
           "graph_to_dict", "graph_from_dict", "dumps_graph", "loads_graph", "save_graph", "load_graph",
           "load_model_file", "is_hf_config_data"]

FORMAT = "pase-graph"
VERSION = 1
# File types :func:`load_model_file` reads.
MODEL_SUFFIXES = (".json", ".onnx")


def _short(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about uploaded data."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def graph_to_dict(graph: Graph) -> dict:
    """The JSON-ready form of ``graph`` (layers in topological order).

    A layer with tied weights (:attr:`~pase.ir.graph.TensorSpec.tied`) gets a
    ``tied`` object, weight name -> shared parameter name; other layers have none.
    Weights beyond those the op's builder makes (the importer's extra weights: a
    trainable tensor read outside a weight slot, such as a position table or a
    class token) are listed in ``extra_weights``, each with its shape, the layer
    dimension of each axis and its ``tied`` name, so that a round trip keeps the
    parameter count and the gradient all-reduce of each.
    """
    layers = []
    for layer in graph.layers:
        inputs: list = [None] * len(layer.inputs)
        for e in graph.in_edges(layer.name):
            inputs[e.dst_input] = e.src if e.src_output == 0 else [e.src, e.src_output]
        while inputs and inputs[-1] is None:
            inputs.pop()
        record = {"name": layer.name, "op": layer.op, "params": layer.param_dict, "inputs": inputs}
        own = _own_weights(layer)
        tied = {w.name: w.tied for w in layer.weights[:own] if w.tied}
        if tied:
            record["tied"] = tied
        if len(layer.weights) > own:
            record["extra_weights"] = [_extra_to_dict(w) for w in layer.weights[own:]]
        layers.append(record)
    return {"format": FORMAT, "version": VERSION, "name": graph.name, "layers": layers}


def _own_weights(layer) -> int:
    """How many of ``layer``'s weights its op's builder makes (the rest are extra weights);
    all of them for a layer its params do not rebuild (a file of it would not load anyway)."""
    try:
        return len(build_layer(layer.op, layer.name, **layer.param_dict).weights)
    except (PaseError, TypeError, ValueError):
        return len(layer.weights)


def _extra_to_dict(w: TensorSpec) -> dict:
    record = {"name": w.name, "shape": list(w.shape), "axes": list(w.axes)}
    if w.tied:
        record["tied"] = w.tied
    return record


def _extra_weights(spec: dict, where: str, dims: tuple) -> tuple:
    """The ``extra_weights`` of a layer record as tensors (weights beyond those its op's
    builder makes: trainable tensors an importer found read outside a weight slot, such as
    a position table added to the activations)."""
    extras = spec.get("extra_weights", [])
    if not isinstance(extras, list) or len(extras) > MAX_LAYER_INPUTS:
        raise FormatError(f"{where}: field 'extra_weights' must be a list of at most {MAX_LAYER_INPUTS} weights, "
                          f"got {_short(extras)}")
    out = []
    for j, w in enumerate(extras):
        at = f"{where}: extra_weights[{j}]"
        if not isinstance(w, dict):
            raise FormatError(f"{at} must be an object, got {_short(w)}")
        name, shape, axes, tied = w.get("name"), w.get("shape"), w.get("axes"), w.get("tied", "")
        if not isinstance(name, str) or not name:
            raise FormatError(f"{at}: field 'name' must be a non-empty string, got {_short(name)}")
        if (not isinstance(shape, list) or len(shape) > MAX_RANK
                or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape)):
            raise FormatError(f"{at}: field 'shape' must be a list of at most {MAX_RANK} positive integers, "
                              f"got {_short(shape)}")
        if not isinstance(axes, list) or len(axes) != len(shape) or not all(a is None or a in dims for a in axes):
            raise FormatError(f"{at}: field 'axes' must list, per axis of the shape, null or one of the layer's "
                              f"dimensions {list(dims)}, got {_short(axes)}")
        if not isinstance(tied, str):
            raise FormatError(f"{at}: field 'tied' must be a string, got {_short(tied)}")
        out.append(TensorSpec(tuple(shape), tuple(axes), name, tied=tied))
    return tuple(out)


def _where(i: int, spec) -> str:
    name = spec.get("name") if isinstance(spec, dict) else None
    return f"layer {i}" + (f" ({name!r})" if isinstance(name, str) else "")


def graph_from_dict(data: object) -> Graph:
    """Build and validate a graph from its JSON-ready form.

    Raises
    ------
    FormatError
        The structure is wrong; the message names the layer and field.
    GraphError
        The layers or their connections are invalid (bad parameter, shape
        mismatch, cycle, disconnected graph...).
    """
    if not isinstance(data, dict):
        raise FormatError(f"a graph file must hold a JSON object, not {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise FormatError(f"field 'format' must be {FORMAT!r}, got {_short(data.get('format'))}")
    if data.get("version") != VERSION or isinstance(data.get("version"), bool):
        raise FormatError(f"field 'version' must be {VERSION}, got {_short(data.get('version'))}")
    name = data.get("name", "graph")
    if not isinstance(name, str):
        raise FormatError(f"field 'name' must be a string, got {_short(name)}")
    specs = data.get("layers")
    if not isinstance(specs, list) or not specs:
        raise FormatError("field 'layers' must be a non-empty list")
    if len(specs) > MAX_LAYERS:
        raise FormatError(f"the graph has {len(specs)} layers; at most {MAX_LAYERS} are accepted")
    graph = Graph(name)
    # Where each name is defined, to tell a cycle or a misordered file from a typo.
    position = {}
    for k, other in enumerate(specs):
        if isinstance(other, dict) and isinstance(other.get("name"), str):
            position.setdefault(other["name"], k)
    for i, spec in enumerate(specs):
        where = _where(i, spec)
        if not isinstance(spec, dict):
            raise FormatError(f"{where}: must be an object")
        for field, kind in (("name", str), ("op", str), ("params", dict), ("inputs", list)):
            if not isinstance(spec.get(field, [] if field == "inputs" else None), kind):
                raise FormatError(f"{where}: field {field!r} must be a {kind.__name__}, got {_short(spec.get(field))}")
        inputs = []
        for j, src in enumerate(spec.get("inputs", [])):
            if src is None or isinstance(src, str):
                inputs.append(src)
            elif (isinstance(src, list) and len(src) == 2 and isinstance(src[0], str)
                  and isinstance(src[1], int) and not isinstance(src[1], bool)):
                inputs.append((src[0], src[1]))
            else:
                raise FormatError(f"{where}: inputs[{j}] must be null, a layer name or [name, output], got {_short(src)}")
            producer = inputs[-1] if isinstance(inputs[-1], str) else inputs[-1] and inputs[-1][0]
            if producer is not None and producer not in graph:
                if producer == spec["name"]:
                    raise GraphError(f"{where}: input {j} is the layer's own output: a cycle")
                if position.get(producer, -1) > i:
                    raise GraphError(f"{where}: input {j}: no earlier layer named {_short(producer)}; it is listed "
                                     "later, but layers must come after their producers (a graph with a cycle cannot)")
        count = spec["params"].get("inputs")
        if isinstance(count, int) and not isinstance(count, bool) and count > MAX_LAYER_INPUTS:
            raise FormatError(f"{where}: {count} inputs is absurdly many (at most {MAX_LAYER_INPUTS})")
        try:
            layer = build_layer(spec["op"], spec["name"], **spec["params"])
        except PaseError:
            raise
        except Exception as exc:  # any builder failure on uploaded parameters is a format error
            detail = " ".join(str(exc).split())[:200]
            raise FormatError(f"{where}: bad params for {_short(spec['op'], 30)}: {type(exc).__name__}: {detail}") from None
        tied = spec.get("tied", {})
        if not isinstance(tied, dict) or not all(isinstance(v, str) and v for v in tied.values()):
            raise FormatError(f"{where}: field 'tied' must map weight names to non-empty strings, got {_short(tied)}")
        if tied:
            layer = layer.with_tied(tied)
        extras = _extra_weights(spec, where, layer.dims)
        if extras:
            layer = replace(layer, weights=layer.weights + extras)
        check_layer_size(layer, where)
        graph.add_layer(layer, inputs)
    graph.validate()
    return graph


def dumps_graph(graph: Graph) -> str:
    """``graph`` as JSON text."""
    return json.dumps(graph_to_dict(graph), indent=1)


def loads_graph(text: str | bytes) -> Graph:
    """Parse a graph from JSON text.

    Raises
    ------
    FormatError
        The text is too large, not JSON, or not in the format.
    GraphError
        The graph it describes is invalid.
    """
    if len(text) > MAX_FILE_BYTES:
        raise FormatError(f"the file is {len(text) / 2**20:.1f} MiB; at most {MAX_FILE_BYTES / 2**20:.0f} MiB is accepted")
    try:
        data = json.loads(text)
    except RecursionError:
        raise FormatError("not valid JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, or an integer with too many digits
        raise FormatError(f"not valid JSON: {' '.join(str(exc).split())[:200]}") from None
    return graph_from_dict(data)


def save_graph(graph: Graph, path: str | Path) -> None:
    """Write ``graph`` to ``path`` as JSON."""
    Path(path).write_text(dumps_graph(graph) + "\n")


def load_graph(path: str | Path) -> Graph:
    """Read a graph file; errors as :func:`loads_graph`, plus ``FormatError`` if missing, unreadable or too large.

    The file is read through :func:`pase.io.files.read_limited`: at most ``MAX_FILE_BYTES``,
    whatever kind of file it is.
    """
    path = Path(path)
    data = read_limited(path, MAX_FILE_BYTES, what="graph file")
    try:
        return loads_graph(data)
    except (FormatError, GraphError) as exc:
        raise type(exc)(f"{path.name}: {exc}") from None


def load_model_file(source: str | Path | bytes, filename: str | None = None, *, batch: int | None = None) -> Graph:
    """Load an uploaded or local model file, by its suffix: ``.json`` (a pase graph, or a Hugging Face
    ``config.json``: :func:`pase.io.hf_config.from_hf_config`) or ``.onnx``.

    Parameters
    ----------
    source : path or bytes
        A file path, or the file's contents (an upload).
    filename : str, optional
        The file's name, whose suffix picks the format; needed with bytes,
        default the path's name. A file with another suffix is read as JSON
        when it starts with ``{``.
    batch : int, optional
        Batch size for an ONNX model (default: the model's own) or a Hugging
        Face config (default :data:`pase.io.hf_config.DEFAULT_BATCH`); a pase
        graph file fixes its own batch size, so it is refused there.

    Raises
    ------
    FormatError
        Too large, missing, unreadable, an unknown file type, or malformed;
        the message names the file. A path is read through
        :func:`pase.io.files.read_limited`, so a device or a pipe is bounded too.
    GraphError
        The model's graph is invalid.

    Examples
    --------
    >>> example = Path(__file__).resolve().parents[2] / "docs" / "example-graph.json"
    >>> g = load_model_file(example.read_bytes(), "example-graph.json")
    >>> len(g)
    4
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        filename = filename or path.name
        data = read_limited(path, _limit_for(filename), what="model file")
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        filename = filename or "upload"
    else:
        raise FormatError(f"a model file must be a path or bytes, not {type(source).__name__}")
    suffix = Path(filename).suffix.lower()
    if suffix not in MODEL_SUFFIXES:
        if data.lstrip()[:1] == b"{":
            suffix = ".json"
        else:
            raise FormatError(f"{filename}: unknown file type {suffix or '(no suffix)'!r}; expected a pase graph "
                              "(.json) or an ONNX model (.onnx)")
    if len(data) > _limit_for(filename):
        limit = _limit_for(filename)
        raise FormatError(f"{filename} is {len(data) / 2**20:.1f} MiB; at most {limit / 2**20:.0f} MiB is accepted")
    try:
        if suffix == ".onnx":
            from pase.io.onnx import from_onnx

            return from_onnx(data, batch=batch, name=Path(filename).stem or None)
        if is_hf_config_data(data):
            from pase.io.hf_config import from_hf_config  # late: it builds with the samples' code

            return from_hf_config(data, batch=batch)
        if batch is not None:
            raise GraphError("a pase graph file fixes its own batch size; a batch size applies to ONNX models, "
                             "Hugging Face configs and samples")
        return loads_graph(data)
    except (FormatError, GraphError) as exc:
        raise type(exc)(f"{filename}: {exc}") from None


def is_hf_config_data(data: bytes) -> bool:
    """Whether JSON ``data`` is a Hugging Face ``config.json`` (an object with ``model_type`` or ``architectures``
    and no pase ``format`` key) rather than a pase graph; False for anything unreadable (the graph reader says why)."""
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(parsed, dict) and "format" not in parsed and ("model_type" in parsed or "architectures" in parsed)


def _limit_for(filename: str) -> int:
    if Path(filename).suffix.lower() == ".onnx":
        return MAX_ONNX_BYTES
    return MAX_FILE_BYTES
