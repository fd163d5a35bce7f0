"""The search's problem statement: cost vectors on vertices, cost matrices on edges.

A :class:`CostGraph` is what the strategy searches (:mod:`pase.search`) see and
nothing more: vertex ``v`` has ``len(node_costs[v])`` configurations, choosing
configuration ``a`` costs ``node_costs[v][a]``, and an edge ``(u, v, M)`` adds
``M[a_u, a_v]``. The objective of an assignment ``a`` (one configuration index
per vertex) is

    sum(node_costs[v][a[v]]) + sum(M[a[u], a[v]] for (u, v, M) in edges)

in whatever unit the producer chose (the cost model uses FLOP-equivalents).
It sits in the IR, below both the cost model that builds it (:mod:`pase.model.cost`)
and the searches that solve it, so neither imports the other for it.
:func:`pase.io.instance.load_instance` reads it from the solver-level instance files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pase.errors import FormatError

__all__ = ["CostGraph"]


@dataclass(frozen=True, eq=False)
class CostGraph:
    """Minimise ``sum(node_costs[v][a[v]]) + sum(M[a[u], a[v]] for (u, v, M) in edges)``.

    Parameters
    ----------
    node_costs : sequence of 1-D arrays
        ``node_costs[v][a]`` is the cost of vertex ``v`` in configuration ``a``;
        at least one configuration per vertex. Converted to float64.
    edges : sequence of (src, dst, matrix)
        ``matrix[a, b]`` is the cost of the edge when ``src`` is in configuration
        ``a`` and ``dst`` in ``b``, so its shape is
        ``(len(node_costs[src]), len(node_costs[dst]))``. At most one edge per
        pair of vertices (in either direction) and no self loops; the graph
        need not be connected.
    names : sequence of str, optional
        A label per vertex, for messages and displays.

    Raises
    ------
    FormatError
        A cost is negative, NaN or infinite, a shape does not match, a vertex
        id is out of range, a pair of vertices has two edges, or the costs are
        so large that the objective could overflow float64. The message names
        the vertex or edge at fault.

    Notes
    -----
    Costs may be 0 and may be very large (up to about 1e300 in total). The
    arrays are kept as read-only views: the object never copies or changes the
    caller's data, but the caller should not change it either.

    Examples
    --------
    >>> import numpy as np
    >>> g = CostGraph((np.array([1.0, 2.0]), np.array([0.0, 5.0])),
    ...               ((0, 1, np.array([[9.0, 0.0], [0.0, 9.0]])),))
    >>> g.num_nodes, g.config_counts
    (2, (2, 2))
    >>> g.cost_of([0, 1])
    6.0
    """

    node_costs: tuple[np.ndarray, ...]
    edges: tuple[tuple[int, int, np.ndarray], ...]
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        costs = tuple(_readonly_costs(c, f"node {v}", ndim=1) for v, c in enumerate(self.node_costs))
        for v, c in enumerate(costs):
            if c.size == 0:
                raise FormatError(f"node {v} has no configuration (empty cost vector)")
        n = len(costs)
        edges = []
        seen: set[tuple[int, int]] = set()
        for j, edge in enumerate(self.edges):
            try:
                src, dst, matrix = edge
            except (TypeError, ValueError):
                raise FormatError(f"edge {j} is not a (src, dst, matrix) triple") from None
            src, dst = _vertex_id(src, n, f"edge {j} source"), _vertex_id(dst, n, f"edge {j} target")
            if src == dst:
                raise FormatError(f"edge {j} is a self loop on node {src}")
            pair = (min(src, dst), max(src, dst))
            if pair in seen:
                raise FormatError(f"edge {j} ({src}, {dst}) duplicates an earlier edge between the same "
                                  "nodes; add the matrices into one edge")
            seen.add(pair)
            where = f"edge {j} ({src} -> {dst})"
            matrix = _readonly_costs(matrix, where, ndim=2)
            expected = (costs[src].size, costs[dst].size)
            if matrix.shape != expected:
                raise FormatError(f"{where}: cost matrix has shape {matrix.shape}, expected {expected} "
                                  "(source configurations, target configurations)")
            edges.append((src, dst, matrix))
        # The search adds up to one term per vertex and edge; make sure no sum can overflow.
        worst = math.fsum(float(c.max()) for c in costs) + math.fsum(float(m.max()) for _, _, m in edges)
        if not math.isfinite(worst) or worst > 1e300:
            raise FormatError("costs are too large: the objective could overflow float64 (rescale them)")
        names = self.names
        if names is not None:
            names = tuple(str(x) for x in names)
            if len(names) != n:
                raise FormatError(f"{len(names)} names for {n} nodes")
        object.__setattr__(self, "node_costs", costs)
        object.__setattr__(self, "edges", tuple(edges))
        object.__setattr__(self, "names", names)

    @property
    def num_nodes(self) -> int:
        """Number of vertices."""
        return len(self.node_costs)

    @property
    def config_counts(self) -> tuple[int, ...]:
        """Number of configurations of each vertex, in vertex-id order."""
        return tuple(c.size for c in self.node_costs)

    def label(self, v: int) -> str:
        """Name of vertex ``v`` for messages: its name if given, else ``"node v"``."""
        return f"node {v} ({self.names[v]})" if self.names else f"node {v}"

    def cost_of(self, assignment: Sequence[int]) -> float:
        """Objective of a full assignment (one configuration index per vertex).

        The terms are added with :func:`math.fsum`, so the result is the
        correctly rounded sum whatever the order of vertices and edges.

        Raises
        ------
        ValueError
            ``assignment`` has the wrong length or an index out of range.
        """
        a = np.asarray(assignment)
        if a.shape != (self.num_nodes,) or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"an assignment needs one integer per node ({self.num_nodes}), got shape {a.shape}")
        counts = np.asarray(self.config_counts)
        bad = np.flatnonzero((a < 0) | (a >= counts))
        if bad.size:
            v = int(bad[0])
            raise ValueError(f"{self.label(v)} has {counts[v]} configurations, not index {int(a[v])}")
        terms = [float(c[a[v]]) for v, c in enumerate(self.node_costs)]
        terms += [float(m[a[u], a[v]]) for u, v, m in self.edges]
        return math.fsum(terms)


def _vertex_id(x: Any, n: int, where: str) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise FormatError(f"{where} is {x!r}, not a node id")
    if not 0 <= x < n:
        raise FormatError(f"{where} is {x}, but node ids are 0..{n - 1}")
    return int(x)


def _readonly_costs(values: Any, where: str, *, ndim: int) -> np.ndarray:
    """Float64 read-only view of ``values``; ``FormatError`` unless finite, non-negative, ``ndim``-D."""
    try:
        a = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise FormatError(f"{where}: costs are not a {ndim}-D array of numbers") from None
    if a.ndim != ndim:
        raise FormatError(f"{where}: costs must be a {ndim}-D array, got {a.ndim}-D")
    if not np.isfinite(a).all():
        raise FormatError(f"{where}: a cost is NaN or infinite")
    if a.size and a.min() < 0:
        raise FormatError(f"{where}: a cost is negative ({a.min():g})")
    view = a.view()
    view.flags.writeable = False
    return view
