"""Reading and writing graphs in pase's JSON format (``docs/graph-format.md``).

A file lists layers in an order where producers come first; each layer is an
op name, the keyword parameters of that op's builder in :mod:`pase.layers`,
and the producer feeding each input slot. Loading only parses JSON and calls
the builders: nothing in a file is evaluated, executed or used as a path.
"""

from __future__ import annotations

import json
from pathlib import Path

from pase.errors import FormatError, GraphError
from pase.graph import Graph
from pase.layers import build_layer

__all__ = ["FORMAT", "VERSION", "MAX_FILE_BYTES", "MAX_LAYERS", "graph_to_dict", "graph_from_dict",
           "dumps_graph", "loads_graph", "save_graph", "load_graph"]

FORMAT = "pase-graph"
VERSION = 1
# Uploads larger than this are refused before parsing (the largest sample is ~1 MB).
MAX_FILE_BYTES = 20 * 2**20
MAX_LAYERS = 20_000


def graph_to_dict(graph: Graph) -> dict:
    """The JSON-ready form of ``graph`` (layers in topological order)."""
    layers = []
    for layer in graph.layers:
        inputs: list = [None] * len(layer.inputs)
        for e in graph.in_edges(layer.name):
            inputs[e.dst_input] = e.src if e.src_output == 0 else [e.src, e.src_output]
        while inputs and inputs[-1] is None:
            inputs.pop()
        layers.append({"name": layer.name, "op": layer.op, "params": layer.param_dict, "inputs": inputs})
    return {"format": FORMAT, "version": VERSION, "name": graph.name, "layers": layers}


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
        raise FormatError(f"field 'format' must be {FORMAT!r}, got {data.get('format')!r}")
    if data.get("version") != VERSION:
        raise FormatError(f"field 'version' must be {VERSION}, got {data.get('version')!r}")
    name = data.get("name", "graph")
    if not isinstance(name, str):
        raise FormatError(f"field 'name' must be a string, got {name!r}")
    specs = data.get("layers")
    if not isinstance(specs, list) or not specs:
        raise FormatError("field 'layers' must be a non-empty list")
    if len(specs) > MAX_LAYERS:
        raise FormatError(f"the graph has {len(specs)} layers; at most {MAX_LAYERS} are accepted")
    graph = Graph(name)
    for i, spec in enumerate(specs):
        where = _where(i, spec)
        if not isinstance(spec, dict):
            raise FormatError(f"{where}: must be an object")
        for field, kind in (("name", str), ("op", str), ("params", dict), ("inputs", list)):
            if not isinstance(spec.get(field, [] if field == "inputs" else None), kind):
                raise FormatError(f"{where}: field {field!r} must be a {kind.__name__}, got {spec.get(field)!r}")
        inputs = []
        for j, src in enumerate(spec.get("inputs", [])):
            if src is None or isinstance(src, str):
                inputs.append(src)
            elif (isinstance(src, list) and len(src) == 2 and isinstance(src[0], str)
                  and isinstance(src[1], int) and not isinstance(src[1], bool)):
                inputs.append((src[0], src[1]))
            else:
                raise FormatError(f"{where}: inputs[{j}] must be null, a layer name or [name, output], got {src!r}")
        try:
            layer = build_layer(spec["op"], spec["name"], **spec["params"])
        except (ValueError, OverflowError, ZeroDivisionError) as exc:
            raise FormatError(f"{where}: bad params: {exc}") from None
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
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise FormatError("not valid JSON: nested too deeply") from None
    return graph_from_dict(data)


def save_graph(graph: Graph, path: str | Path) -> None:
    """Write ``graph`` to ``path`` as JSON."""
    Path(path).write_text(dumps_graph(graph) + "\n")


def load_graph(path: str | Path) -> Graph:
    """Read a graph file; errors as :func:`loads_graph`, plus ``FormatError`` if unreadable."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise FormatError(f"{path.name} is {size / 2**20:.1f} MiB; at most {MAX_FILE_BYTES / 2**20:.0f} MiB is accepted")
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return loads_graph(data)
    except (FormatError, GraphError) as exc:
        raise type(exc)(f"{path.name}: {exc}") from None
