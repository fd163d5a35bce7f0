"""Solver-level instance files: a :class:`~pase.ir.costgraph.CostGraph` and its metadata, read from the
format of ``../shared/instances`` (gzip-compressed or plain JSON)."""

from __future__ import annotations

import io
import json
import math
import re
import secrets
import warnings
from os import PathLike
from typing import Any

import numpy as np

from pase.errors import FormatError
from pase.io.files import read_limited
from pase.ir.costgraph import CostGraph
from pase.limits import MAX_INSTANCE_BYTES

__all__ = ["load_instance"]


# A "cost" array of numbers only: parsed by numpy instead of json, which would
# build one Python float per entry (tens of millions for transformer p=64).
_COST_ARRAY = re.compile(rb'"cost"\s*:\s*(\[[-+0-9.eE,\s\[\]]*\])')
_ROW_BREAK = re.compile(rb"\]\s*,\s*\[")
_WHITESPACE_TO_SPACE = bytes.maketrans(b"\n\r\t", b"   ")


def load_instance(path: str | PathLike) -> tuple[CostGraph, dict]:
    """Read a solver-level instance (the format of ``../shared/instances``).

    The file is JSON, gzip-compressed or not (detected from its content)::

        {"name": ..., "devices": p,
         "nodes": [{"id": 0, "op": ..., "dims": [...], "configs": [[...], ...], "cost": [...]}, ...],
         "edges": [{"src": 0, "dst": 1, "cost": [[...], ...]}, ...]}

    Node ids must be 0..n-1 (in any order of the list).

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    cost_graph : CostGraph
    metadata : dict
        ``name``, ``devices`` and ``nodes``: per node (in id order) a dict with
        ``op``, ``dims`` and ``configs`` as found in the file (None where absent).

    Raises
    ------
    FormatError
        The file is missing, a directory, unreadable or damaged; it or its
        uncompressed contents exceed ``MAX_INSTANCE_BYTES`` (read in bounded
        chunks, devices and pipes included); it is not JSON or nests too
        deeply; or a field is missing or of the wrong type: ``nodes`` and
        ``edges`` lists of objects, node ids ``0..n-1`` once each, a node's
        ``cost`` a non-empty list of finite non-negative numbers, its optional
        ``configs`` one list of whole numbers per cost (as many as ``dims``),
        an edge's ``src`` and ``dst`` node ids and its ``cost`` a matrix of
        such numbers with a row per ``src`` configuration and a column per
        ``dst`` configuration, ``name`` a string, ``devices`` a whole number.
        The message names the node or edge and the field.
    """
    raw = read_limited(path, MAX_INSTANCE_BYTES, what="instance", gunzip=True)
    arrays: list[np.ndarray] = []
    # Parsed arrays stand in the text as {key: index}; the key is new for every file, so a
    # file cannot forge a placeholder to point at another entry's array.
    key = f"__array_{secrets.token_hex(8)}__"

    # Repeated layers repeat their tables word for word (31 distinct of the 460 of transformer p=64): each
    # distinct text is parsed once, its array shared (the cost graph keeps read-only views).
    parsed: dict[bytes, int] = {}

    def parse_numbers(m: re.Match) -> bytes:
        text = m.group(1)
        if text not in parsed:
            a = _parse_cost_array(text)
            if a is None:  # leave anything unusual to json, which reports it precisely
                return m.group(0)
            arrays.append(a)
            parsed[text] = len(arrays) - 1
        return b'"cost": {"%s": %d}' % (key.encode(), parsed[text])

    try:
        doc = json.loads(_COST_ARRAY.sub(parse_numbers, raw))
    except RecursionError:
        raise FormatError(f"{str(path)!r} is not valid JSON: nested too deeply (an instance nests at most 4 "
                          "levels)") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, or an integer with too many digits
        raise FormatError(f"{str(path)!r} is not valid JSON: {' '.join(str(exc).split())[:200]}") from None
    return _instance_from_document(doc, arrays, key, str(path))


def _parse_cost_array(text: bytes) -> np.ndarray | None:
    """A 1-D or 2-D JSON array of numbers as float64, or None if it is not exactly that."""
    body = text.translate(_WHITESPACE_TO_SPACE).strip()[1:-1].strip()
    two_d = body.startswith(b"[")
    if two_d:
        if not body.endswith(b"]"):
            return None
        body = b"\n".join(_ROW_BREAK.split(body[1:-1]))
    if not body or b"[" in body or b"]" in body:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            a = np.loadtxt(io.BytesIO(body), delimiter=",", dtype=np.float64, ndmin=2)
        except (ValueError, UserWarning):
            return None
    # loadtxt skips blank lines, so an empty row would go unnoticed: count rows too.
    if a.shape[0] != body.count(b"\n") + 1:
        return None
    return a if two_d else a[0]


def _brief(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about a file's contents."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_numbers(values: list, where: str, at: str) -> None:
    """``FormatError`` unless every item of ``values`` is a finite number >= 0 (``at``: its index prefix)."""
    for k, x in enumerate(values):
        if isinstance(x, list):
            raise FormatError(f"{where}: costs must be a {2 if at else 1}-D array: field 'cost' holds a list at "
                              f"{at}[{k}] where a number belongs")
        if not _is_number(x):
            raise FormatError(f"{where}: costs are not numbers: field 'cost' holds {_brief(x)} at {at}[{k}]")
        try:
            finite = math.isfinite(x)
        except OverflowError:  # an integer beyond float range
            finite = False
        if not finite:
            raise FormatError(f"{where}: a cost is NaN or infinite (field 'cost' at {at}[{k}])")
        if x < 0:
            raise FormatError(f"{where}: a cost is negative ({x:g}, field 'cost' at {at}[{k}]); costs are >= 0")


def _node_cost(c: Any, where: str) -> Any:
    """A node's ``cost`` field as found (a parsed array, or a list checked to be numbers)."""
    if isinstance(c, np.ndarray):
        return c
    if not isinstance(c, list) or not c:
        raise FormatError(f"{where}: costs must be a 1-D array: field 'cost' must be a non-empty list of numbers "
                          f"(one per configuration), got {_brief(c)}")
    _check_numbers(c, where, "")
    return c


def _edge_cost(c: Any, where: str) -> Any:
    """An edge's ``cost`` field as found (a parsed array, or rows checked to be numbers and of one length)."""
    if isinstance(c, np.ndarray):
        return c
    if not isinstance(c, list) or not c or not all(isinstance(row, list) for row in c):
        raise FormatError(f"{where}: costs must be a 2-D array: field 'cost' must be a list of rows (one per "
                          f"source configuration) of numbers (one per target configuration), got {_brief(c)}")
    for r, row in enumerate(c):
        if len(row) != len(c[0]):
            raise FormatError(f"{where}: costs are not a rectangular 2-D array: field 'cost' row {r} has "
                              f"{len(row)} entries, row 0 has {len(c[0])}")
        _check_numbers(row, where, f"[{r}]")
    return c


def _node_id(x: Any, n: int, where: str, field: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < n:
        raise FormatError(f"{where} is {_brief(x)}, not a node id 0..{n - 1} (field {field!r})")
    return x


def _check_node_metadata(node: dict, i: int, count: int) -> None:
    """``FormatError`` unless node ``i``'s optional ``op``, ``dims`` and ``configs`` (``count`` costs) are well typed."""
    op, dims, configs = node.get("op"), node.get("dims"), node.get("configs")
    if op is not None and not isinstance(op, str):
        raise FormatError(f"node {i}: field 'op' must be a string, got {_brief(op)}")
    if dims is not None and (not isinstance(dims, list)
                             or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims)):
        raise FormatError(f"node {i}: field 'dims' must be a list of dimension sizes (whole numbers >= 1), "
                          f"got {_brief(dims)}")
    if configs is None:
        return
    if not isinstance(configs, list) or len(configs) != count:
        raise FormatError(f"node {i} lists {len(configs) if isinstance(configs, list) else _brief(configs)} "
                          f"configurations but {count} costs; field 'configs' needs one per cost")
    for a, config in enumerate(configs):
        if (not isinstance(config, list)
                or not all(isinstance(f, int) and not isinstance(f, bool) and f >= 1 for f in config)):
            raise FormatError(f"node {i}: configs[{a}] must be a list of split factors (whole numbers >= 1), "
                              f"got {_brief(config)}")
        if dims is not None and len(config) != len(dims):
            raise FormatError(f"node {i}: configs[{a}] has {len(config)} split factors for {len(dims)} dims; "
                              "give one per dimension")


def _instance_from_document(doc: Any, arrays: list[np.ndarray], key: str, where: str) -> tuple[CostGraph, dict]:
    """The cost graph and metadata of a parsed instance whose number arrays stand as ``{key: index}`` in ``arrays``."""
    if not isinstance(doc, dict):
        raise FormatError(f"{where}: top level is not a JSON object")
    for field in ("nodes", "edges"):
        if not isinstance(doc.get(field), list):
            raise FormatError(f"{where}: missing or invalid {field!r} list")
    name, devices = doc.get("name"), doc.get("devices")
    if name is not None and not isinstance(name, str):
        raise FormatError(f"{where}: field 'name' must be a string, got {_brief(name)}")
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int) or devices < 1):
        raise FormatError(f"{where}: field 'devices' must be a whole number >= 1, got {_brief(devices)}")

    def cost(entry: dict, what: str) -> Any:
        if "cost" not in entry:
            raise FormatError(f"{what} has no 'cost'")
        c = entry["cost"]
        if isinstance(c, dict) and set(c) == {key}:
            return arrays[c[key]]
        return c

    n = len(doc["nodes"])
    nodes: dict[int, dict] = {}
    try:
        for k, node in enumerate(doc["nodes"]):
            if not isinstance(node, dict) or "id" not in node:
                raise FormatError(f"nodes[{k}] is not an object with an 'id'")
            i = node["id"]
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
                raise FormatError(f"nodes[{k}] has id {_brief(i)}; ids must be 0..{n - 1}")
            if i in nodes:
                raise FormatError(f"node id {i} appears twice")
            nodes[i] = node
        node_costs = [_node_cost(cost(nodes[i], f"node {i}"), f"node {i}") for i in range(n)]
        for i in range(n):
            _check_node_metadata(nodes[i], i, len(node_costs[i]))
        edges = []
        for j, e in enumerate(doc["edges"]):
            if not isinstance(e, dict) or "src" not in e or "dst" not in e:
                raise FormatError(f"edges[{j}] is not an object with 'src' and 'dst'")
            src = _node_id(e["src"], n, f"edge {j} source", "src")
            dst = _node_id(e["dst"], n, f"edge {j} target", "dst")
            label = f"edge {j} ({src} -> {dst})"
            edges.append((src, dst, _edge_cost(cost(e, label), label)))
        graph = CostGraph(tuple(node_costs), tuple(edges))
    except FormatError as exc:
        raise FormatError(f"{where}: {exc}") from None
    metadata = {
        "name": name,
        "devices": devices,
        "nodes": [{field: nodes[i].get(field) for field in ("op", "dims", "configs")} for i in range(n)],
    }
    return graph, metadata
