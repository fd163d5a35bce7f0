"""Computation-graph IR: layers with iteration spaces, and the tensors between them.

A :class:`Layer` is one vertex of the paper's graph. It owns an *iteration
space*: named dimensions (the paper's letters, ``b n c`` for a fully connected
layer) with sizes. Each tensor it reads, writes or owns as a weight is a
:class:`TensorSpec` whose axes name the iteration dimension they are split
along (``None``: never split). A configuration of the layer splits the
dimensions; every tensor's per-device block follows from its axes.

A :class:`Graph` holds layers and the tensors between them (two tensors may
join the same pair of layers); a layer reads only layers added before it, so
the order they were added in is a topological order and no cycle can form.
An input slot of a layer that no edge feeds is a graph input (training data),
assumed to arrive already in whatever layout the layer wants.

Layers are built by the functions of :mod:`pase.ops`; this module knows
nothing about particular ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from math import prod
from typing import Any, Callable, Hashable, Iterator, Mapping, Sequence

from pase.errors import GraphError
from pase.limits import MAX_LAYERS

__all__ = ["TensorSpec", "Layer", "Edge", "Graph"]


@dataclass(frozen=True)
class TensorSpec:
    """A tensor of a layer: its shape and the iteration dimension of each axis.

    Parameters
    ----------
    shape : tuple of int
        Size of every axis, in elements.
    axes : tuple of str or None
        For every axis, the layer dimension it is split along, or ``None`` when
        no configuration splits it.
    name : str
        Short role name (``"x"``, ``"weight"``...), for messages and charts.
    differentiable : bool
        False for inputs that get no gradient (token ids, labels), so nothing
        flows back along their edge.
    tied : str
        For a weight, the name of the parameter it shares (``""``: its own).
        Weights of a graph with the same non-empty ``tied`` are one parameter
        (a vocabulary projection tied to the token embedding's table):
        :attr:`Graph.parameter_count` counts it once, and they must hold the
        same number of elements (:meth:`Graph.validate`).
    """

    shape: tuple[int, ...]
    axes: tuple[str | None, ...]
    name: str = ""
    differentiable: bool = True
    tied: str = ""

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "axes", tuple(self.axes))
        if len(self.shape) != len(self.axes):
            raise GraphError(
                f"tensor {self.name!r}: shape {self.shape} has {len(self.shape)} axes "
                f"but {len(self.axes)} axis names {self.axes}"
            )

    @property
    def size(self) -> int:
        """Number of elements."""
        return prod(self.shape)

    def __str__(self) -> str:
        return f"{self.name}[{'x'.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Layer:
    """One layer: an op applied over an iteration space.

    Parameters
    ----------
    name : str
        Unique within its graph.
    op : str
        Op kind, a key of :data:`pase.ops.OPS` (``"Conv2D"``, ``"Einsum"``...).
    dims : tuple of str
        Names of the iteration-space dimensions, e.g. ``("b", "n", "c")``.
    sizes : tuple of int
        Size of each dimension.
    inputs, outputs, weights : tuple of TensorSpec
        Activation inputs (one per input slot), outputs, and weight tensors.
    split_base : tuple of int
        Per dimension, the number every split factor must divide: the size
        itself, or 1 for a dimension that may never be split (a concat axis, a
        kernel dimension), or a common divisor where a reshape needs one.
    params : tuple of (str, value) pairs
        The builder's arguments, enough to rebuild the layer (file format).
    """

    name: str
    op: str
    dims: tuple[str, ...]
    sizes: tuple[int, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    weights: tuple[TensorSpec, ...] = ()
    split_base: tuple[int, ...] = ()
    params: tuple[tuple[str, object], ...] = field(default=(), repr=False)

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(self.dims))
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))
        if not self.split_base:
            object.__setattr__(self, "split_base", self.sizes)
        if not isinstance(self.name, str) or not self.name:
            raise GraphError(f"a layer of op {self.op!r} has no name")
        if len(self.dims) != len(self.sizes) or len(self.dims) != len(self.split_base):
            raise GraphError(f"layer {self.name!r}: dims {self.dims} and sizes {self.sizes} differ in length")
        if len(set(self.dims)) != len(self.dims):
            raise GraphError(f"layer {self.name!r}: repeated dimension name in {self.dims}")
        for d, s in zip(self.dims, self.sizes):
            if s <= 0:
                raise GraphError(f"layer {self.name!r}: dimension {d} has size {s}; sizes must be positive")
        for t in self.inputs + self.outputs + self.weights:
            for n in t.shape:
                if n <= 0:
                    raise GraphError(f"layer {self.name!r}: tensor {t.name!r} has shape {t.shape}; sizes must be positive")
            for a in t.axes:
                if a is not None and a not in self.dims:
                    raise GraphError(f"layer {self.name!r}: tensor {t.name!r} axis {a!r} is not one of {self.dims}")
        if not self.outputs:
            raise GraphError(f"layer {self.name!r} has no output tensor")

    @property
    def size_of(self) -> dict[str, int]:
        """Mapping dimension name -> size."""
        return dict(zip(self.dims, self.sizes))

    @property
    def param_dict(self) -> dict[str, object]:
        """The builder's arguments as a dict."""
        return dict(self.params)

    @property
    def weight_count(self) -> int:
        """Number of trainable parameters (elements of all weight tensors, tied ones included)."""
        return sum(w.size for w in self.weights)

    @cached_property
    def signature(self) -> tuple:
        """Everything the layer is but its name: layers with equal signatures have equal costs in equal contexts.

        Repeated blocks (the layers of a Transformer, the units of a ResNet
        stage) are detected by it, structurally, whatever their names.
        """
        return (self.op, self.dims, self.sizes, self.inputs, self.outputs, self.weights, self.split_base,
                _frozen(self.params))

    def with_tied(self, tied: Mapping[str, str]) -> Layer:
        """This layer with weight ``name`` tied to parameter ``tied[name]`` (:attr:`TensorSpec.tied`).

        Raises
        ------
        GraphError
            A key is not the name of one of the layer's weights, or a value
            is not a non-empty string.
        """
        names = [w.name for w in self.weights]
        for key, value in tied.items():
            if key not in names:
                raise GraphError(f"layer {self.name!r}: no weight named {key!r} to tie (weights: {names})")
            if not isinstance(value, str) or not value:
                raise GraphError(f"layer {self.name!r}: weight {key!r} must be tied to a non-empty name, got {value!r}")
        weights = tuple(replace(w, tied=tied.get(w.name, w.tied)) for w in self.weights)
        return replace(self, weights=weights)

    def renamed(self, name: str) -> Layer:
        """This layer called ``name``, everything else (a computed :attr:`signature` too) shared, unchecked again:
        equal to the layer its builder gives under that name, at the cost of a copy.

        Raises ``GraphError`` if ``name`` is not a non-empty string.
        """
        if not isinstance(name, str) or not name:
            raise GraphError(f"a layer of op {self.op!r} has no name")
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy.__dict__["name"] = name  # frozen: the dataclass's __setattr__ refuses
        return copy

    def __str__(self) -> str:
        dims = " ".join(f"{d}={s}" for d, s in zip(self.dims, self.sizes))
        return f"{self.name}: {self.op}({dims})"


_ATOMS = frozenset({int, float, str, bool, type(None)})


def _frozen(value):
    """``value`` with every list and dict turned into hashable tuples."""
    if isinstance(value, (list, tuple)):
        # Numbers and strings (most of a layer's parameters) are their own frozen form: no call each.
        return tuple([v if type(v) in _ATOMS else _frozen(v) for v in value])
    if isinstance(value, dict):
        return tuple([(k, v if type(v) in _ATOMS else _frozen(v)) for k, v in value.items()])
    return value


@dataclass(frozen=True)
class Edge:
    """A tensor from output ``src_output`` of ``src`` to input slot ``dst_input`` of ``dst``."""

    src: str
    src_output: int
    dst: str
    dst_input: int

    def __str__(self) -> str:
        return f"{self.src}[{self.src_output}] -> {self.dst}[{self.dst_input}]"


class Graph:
    """A DNN computation graph: layers joined by tensors (:attr:`nx` gives it as a networkx MultiDiGraph).

    Build it by adding layers in an order where every producer comes before its
    consumers; :meth:`validate` checks the whole graph.

    Examples
    --------
    >>> from pase import ops as layers
    >>> g = Graph("mlp")
    >>> g.add_layer(layers.fully_connected("fc1", b=32, n=64, c=128))
    >>> g.add_layer(layers.fully_connected("fc2", b=32, n=10, c=64), inputs=["fc1"])
    >>> g.validate()
    >>> [layer.name for layer in g]
    ['fc1', 'fc2']
    """

    def __init__(self, name: str = "graph"):
        self.name = name
        self._layers: dict[str, Layer] = {}  # in the order added: a topological order
        # Per producer, per consumer (in the order first connected), its edges: networkx's edge order.
        self._out: dict[str, dict[str, list[Edge]]] = {}
        self._index: dict | None = None  # order and adjacency, built on first read (see _indexed)

    # -- building ---------------------------------------------------------------

    def add_layer(self, layer: Layer, inputs: Sequence[str | tuple[str, int] | None] = ()) -> None:
        """Add ``layer``, feeding its input slots from the named producers.

        ``inputs[i]`` feeds input slot ``i``: a layer name (its output 0), a
        ``(name, output_index)`` pair, or ``None`` for a graph input. Slots
        beyond ``len(inputs)`` are graph inputs.

        Raises
        ------
        GraphError
            The name is taken, a producer is unknown, more inputs are given
            than the layer has slots, or the graph already holds
            :data:`~pase.limits.MAX_LAYERS` layers.
        """
        if len(self._layers) >= MAX_LAYERS:
            # Refused while building, before a sample asked for millions of layers has allocated them.
            raise GraphError(f"graph {self.name!r} would have more than {MAX_LAYERS:,} layers, more than pase plans for "
                             "(and than a graph file may hold); use fewer layers or blocks")
        if layer.name in self._layers:
            raise GraphError(f"layer name {layer.name!r} is used twice")
        if len(inputs) > len(layer.inputs):
            raise GraphError(
                f"layer {layer.name!r} ({layer.op}) has {len(layer.inputs)} input(s) but {len(inputs)} were connected"
            )
        sources = []
        for slot, src in enumerate(inputs):
            if src is None:
                continue
            src_name, out_idx = (src, 0) if isinstance(src, str) else (src[0], int(src[1]))
            if src_name not in self._layers:
                raise GraphError(f"layer {layer.name!r} input {slot}: no earlier layer named {src_name!r}")
            producer = self._layers[src_name]
            if not 0 <= out_idx < len(producer.outputs):
                raise GraphError(
                    f"layer {layer.name!r} input {slot}: {src_name!r} has no output {out_idx} "
                    f"(it has {len(producer.outputs)})"
                )
            sources.append(Edge(src_name, out_idx, layer.name, slot))
        self._layers[layer.name] = layer
        self._out[layer.name] = {}
        for e in sources:
            self._out[e.src].setdefault(e.dst, []).append(e)
        self._index = None

    # -- reading ----------------------------------------------------------------

    @property
    def nx(self):
        """The graph as a new networkx ``MultiDiGraph`` (nodes: layer names, attribute ``layer``; edges: attribute
        ``edge``), for drawing and graph algorithms; changing it leaves this graph as it is."""
        import networkx as nx  # late: only drawings need it

        g = nx.MultiDiGraph()
        for name, layer in self._layers.items():
            g.add_node(name, layer=layer)
        for e in self._indexed()["edges"]:
            g.add_edge(e.src, e.dst, edge=e)
        return g

    def layer(self, name: str) -> Layer:
        """The layer called ``name``; ``GraphError`` if there is none."""
        try:
            return self._layers[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no layer named {name!r}") from None

    def _indexed(self) -> dict:
        """Layer order, edges and adjacency, computed once per shape of the graph.

        The costs and the searches read them millions of times, so they are
        kept here until the next :meth:`add_layer`.
        """
        if self._index is None:
            edges = tuple(e for to in self._out.values() for es in to.values() for e in es)
            ins: dict[str, list[Edge]] = {n: [] for n in self._layers}
            outs: dict[str, list[Edge]] = {n: [] for n in self._layers}
            for e in edges:
                ins[e.dst].append(e)
                outs[e.src].append(e)
            layers = tuple(self._layers.values())
            kinds: dict[tuple, int] = {}
            self._index = {
                "layers": layers,
                "kind": {l.name: kinds.setdefault(l.signature, len(kinds)) for l in layers},
                "edges": edges,
                "in": {n: tuple(sorted(v, key=lambda e: e.dst_input)) for n, v in ins.items()},
                "out": {n: tuple(sorted(v, key=lambda e: e.src_output)) for n, v in outs.items()},
                "derived": {},
            }
        return self._index

    def derived(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per shape of the graph (until the next :meth:`add_layer`), kept under ``key``:
        for what cost functions derive from the structure alone and read on every call."""
        derived = self._indexed()["derived"]
        if key not in derived:
            derived[key] = compute()
        return derived[key]

    @property
    def layers(self) -> list[Layer]:
        """Layers in a topological order (stable: insertion order among ties)."""
        return list(self._indexed()["layers"])

    @property
    def edges(self) -> list[Edge]:
        """Every tensor edge, in insertion order."""
        return list(self._indexed()["edges"])

    def kind(self, name: str) -> int:
        """A number shared by the layers of this graph with equal :attr:`Layer.signature` (repeated blocks)."""
        return self._indexed()["kind"][name]

    def in_edges(self, name: str) -> list[Edge]:
        """Edges feeding layer ``name``, by input slot."""
        return list(self._indexed()["in"][name])

    def out_edges(self, name: str) -> list[Edge]:
        """Edges reading layer ``name``'s outputs, by output index."""
        return list(self._indexed()["out"][name])

    def __len__(self) -> int:
        return len(self._layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def __contains__(self, name: object) -> bool:
        return name in self._layers

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self)} layers, {len(self._indexed()['edges'])} edges)"

    @property
    def parameter_count(self) -> int:
        """Trainable parameters of all layers; the weights tied to one name (:attr:`TensorSpec.tied`) count once."""
        own, tied = 0, {}
        for layer in self._layers.values():
            for w in layer.weights:
                if w.tied:
                    tied[w.tied] = w.size
                else:
                    own += w.size
        return own + sum(tied.values())

    # -- checking ---------------------------------------------------------------

    def validate(self) -> None:
        """Check the graph is usable by the search.

        Raises
        ------
        GraphError
            Naming the layer and problem: the graph is empty, is not weakly
            connected, the shapes at the two ends of an edge differ, or
            weights tied to one name hold different numbers of elements.
            (:meth:`add_layer` connects a layer to earlier ones only, one
            producer per input slot, so there is no cycle and no slot fed
            twice to look for.)
        """
        if self._index is not None and self._index.get("valid"):
            return
        if len(self) == 0:
            raise GraphError(f"graph {self.name!r} has no layers")
        parts = self._components()
        if len(parts) > 1:
            parts.sort(key=len)
            raise GraphError(
                f"graph {self.name!r} is not connected: {len(parts)} parts; e.g. "
                f"{sorted(parts[0])[:5]} is cut off from the rest"
            )
        for layer in self._layers.values():
            for e in self.in_edges(layer.name):
                src_t = self.layer(e.src).outputs[e.src_output]
                dst_t = layer.inputs[e.dst_input]
                if src_t.shape != dst_t.shape:
                    raise GraphError(
                        f"edge {e}: {e.src!r} produces shape {src_t.shape} but {layer.name!r} "
                        f"input {e.dst_input} ({dst_t.name}) expects {dst_t.shape}"
                    )
        tied: dict[str, tuple[str, int]] = {}
        for layer in self._layers.values():
            for w in layer.weights:
                if not w.tied:
                    continue
                first = tied.setdefault(w.tied, (f"{layer.name}.{w.name}", w.size))
                if first[1] != w.size:
                    raise GraphError(f"weight {layer.name}.{w.name} ({w.size:,} elements) is tied to {w.tied!r} "
                                     f"with {first[0]} ({first[1]:,} elements); tied weights must be the same size")
        self._indexed()["valid"] = True  # until the next add_layer

    def _components(self) -> list[set[str]]:
        """The layer names of each weakly connected part (union-find over the edges)."""
        root = {n: n for n in self._layers}

        def find(n: str) -> str:
            while root[n] != n:
                root[n] = root[root[n]]
                n = root[n]
            return n

        for e in self._indexed()["edges"]:
            root[find(e.src)] = find(e.dst)
        parts: dict[str, set[str]] = {}
        for n in self._layers:
            parts.setdefault(find(n), set()).add(n)
        return list(parts.values())
