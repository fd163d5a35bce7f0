"""Assembling the graph: the importer's layer specs, cleaned up, as a validated Graph."""

from __future__ import annotations

from pase.errors import FormatError, PaseError
from pase.io.onnx.values import Act
from pase.ir.graph import Graph
from pase.ops import build_layer

_DATA_MOVEMENT = ("Reshape", "Transpose", "Split", "Concat")


def build_graph(name: str, specs: list, outputs: set) -> Graph:
    """The graph of ``specs`` (edited in place): unread data movement dropped and chains of
    LSTMs merged. ``outputs`` holds the keys (:meth:`Act.key`) of the model's outputs."""
    _drop_dead(specs, outputs)
    # Merge chains of single-layer LSTMs into one multi-layer vertex (the paper's form).
    changed = True
    while changed:
        changed = False
        readers = _users(specs)
        for spec in specs:
            x = spec.inputs[0] if spec.op == "LSTM" else None
            if not isinstance(x, Act) or x.src is None or x.src.op != "LSTM":
                continue
            prev = x.src
            p, q = prev.params, spec.params
            if (readers.get((id(prev), 0)) == [spec] and (id(prev), 0) not in outputs
                    and p["b"] == q["b"] and p["s"] == q["s"] and p["e"] == q["d"]):
                q["l"] += p["l"]
                q["d"] = p["d"]
                spec.inputs = list(prev.inputs)
                specs.remove(prev)
                changed = True
                break
    _drop_dead(specs, outputs)
    graph = Graph(name)
    for spec in specs:
        try:
            layer = build_layer(spec.op, spec.name, **spec.params)
        except PaseError as exc:
            raise FormatError(f"{spec.node}: {exc}") from None
        inputs = [(a.src.name, a.index) if isinstance(a, Act) and a.src is not None else None for a in spec.inputs]
        graph.add_layer(layer, inputs)
    graph.validate()
    return graph


def _drop_dead(specs: list, outputs: set) -> None:
    """Remove data movement nobody reads (left behind when reshapes and transposes cancelled)."""
    changed = True
    while changed:
        readers = _users(specs)
        dead = [s for s in specs if s.op in _DATA_MOVEMENT
                and not any(readers.get((id(s), i)) or (id(s), i) in outputs for i in range(len(s.out_shapes)))]
        changed = bool(dead)
        for s in dead:
            specs.remove(s)


def _users(specs: list) -> dict:
    """``(id(spec), output index) -> [specs reading it]``."""
    readers: dict = {}
    for s in specs:
        for a in s.inputs:
            if isinstance(a, Act) and a.src is not None:
                readers.setdefault((id(a.src), a.index), []).append(s)
    return readers
