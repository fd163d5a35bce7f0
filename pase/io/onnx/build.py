"""Assembling the graph: the importer's layer specs, cleaned up, as a validated Graph."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from pase.errors import FormatError, PaseError
from pase.io.onnx.values import Act
from pase.ir.graph import Graph, Layer, TensorSpec
from pase.ops import build_layer

_DATA_MOVEMENT = ("Reshape", "Transpose", "Split", "Concat")

# Ops whose communication includes the all-reduce of every weight's gradient: an extra
# weight (Spec.extras) read by another layer (an Elementwise add, a Concat) is held by the
# nearest of these upstream, so that its gradient is all-reduced as the parameter's is.
_WEIGHT_GRADIENTS = frozenset({"FullyConnected", "Einsum", "Conv2D", "GroupedConv2D", "Embedding", "LayerNorm",
                               "BatchNorm", "RMSNorm"})


def build_graph(name: str, specs: list, outputs: set, parameters: dict | None = None) -> Graph:
    """The graph of ``specs`` (edited in place): unread data movement dropped, chains of
    LSTMs merged, shared initializers tied. ``outputs`` holds the keys (:meth:`Act.key`)
    of the model's outputs, ``parameters`` the elements of each trainable initializer
    that :attr:`Spec.sources` and :attr:`Spec.extras` name."""
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
    layers = []
    for spec in specs:
        try:
            layers.append(build_layer(spec.op, spec.name, **spec.params))
        except PaseError as exc:
            raise FormatError(f"{spec.node}: {exc}") from None
    layers = _shared_parameters(specs, layers, parameters or {})
    graph = Graph(name)
    for spec, layer in zip(specs, layers):
        inputs = [(a.src.name, a.index) if isinstance(a, Act) and a.src is not None else None for a in spec.inputs]
        graph.add_layer(layer, inputs)
    graph.validate()
    return graph


def _shared_parameters(specs: list, layers: list, parameters: dict) -> list:
    """``layers`` with the initializers several of them read tied (one parameter, one
    gradient all-reduce: a vocabulary projection sharing the token embedding's table) and
    the trainable initializers read outside a weight slot (:attr:`Spec.extras`) added as
    extra weights of full size, tied too when read elsewhere. A weight holding only part
    of its initializer (the query rows of a packed projection) is its own parameter."""
    for spec in specs:
        if spec.extras and spec.op not in _WEIGHT_GRADIENTS:
            host = _weighted_producer(spec)
            if host is not None:
                host.extras.extend(spec.extras)
                spec.extras = []
    uses: Counter = Counter()
    for spec, layer in zip(specs, layers):
        sizes = {w.name: w.size for w in layer.weights}
        spec.sources = {w: src for w, src in spec.sources.items() if sizes.get(w) == parameters.get(src)}
        uses.update(spec.sources.values())
        spec.extras = list({src: (src, full, read) for src, full, read in spec.extras}.values())
        uses.update(src for src, _, _ in spec.extras)
    out = []
    for spec, layer in zip(specs, layers):
        if spec.extras:
            extra = tuple(TensorSpec(full, _extra_axes(layer, full, read), src, tied=src if uses[src] > 1 else "")
                          for src, full, read in spec.extras)
            layer = replace(layer, weights=layer.weights + extra)
        tied = {w: src for w, src in spec.sources.items() if uses[src] > 1}
        out.append(layer.with_tied(tied) if tied else layer)
    return out


def _weighted_producer(spec):
    """The nearest layer upstream of ``spec`` (breadth first over its inputs) whose op
    all-reduces weight gradients; None when there is none."""
    frontier, seen = [spec], {id(spec)}
    while frontier:
        following = []
        for s in frontier:
            for a in s.inputs:
                src = a.src if isinstance(a, Act) else None
                if src is None or id(src) in seen:
                    continue
                if src.op in _WEIGHT_GRADIENTS:
                    return src
                seen.add(id(src))
                following.append(src)
        frontier = following
    return None


def _extra_axes(layer: Layer, full: tuple, read: tuple) -> tuple:
    """The layer dimension of each axis of an extra weight of shape ``full``, read at shape
    ``read`` against the layer's output (both aligned on the right): the output's
    dimension where all three agree in size, else None (an axis no split may cut, such as
    the positions of a table of which only the first rows are read)."""
    y = layer.outputs[0]
    axes = []
    for i, size in enumerate(full):
        j, k = i + len(y.shape) - len(full), i + len(read) - len(full)
        agree = j >= 0 and k >= 0 and size > 1 and size == y.shape[j] == read[k]
        axes.append(y.axes[j] if agree else None)
    return tuple(axes)


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
