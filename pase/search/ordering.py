"""Vertex orderings for the search, and what each one would cost.

The search eliminates vertices one at a time (:mod:`pase.search.exact`). When vertex
``v`` goes, its *dependent set* ``D`` is the set of not-yet-eliminated vertices
it is tied to, directly or through vertices eliminated before it (the paper's
D(i)). The step builds a table over the configurations of ``D`` and examines
``K(v) * prod(K(D))`` sums, ``K`` being configuration counts, so the ordering
decides both time and memory.

Orderings
---------
``"generateseq"``
    The paper's Fig. 3: repeatedly take the vertex with the smallest dependent
    set (min-degree elimination). Ties go to the lowest vertex id.
``"bfs"``
    Breadth-first from vertex 0 (then from the lowest unvisited id of each
    other component): the paper's baseline, which blows up on branchy graphs.
``"min-table"``
    Like GenerateSeq, but counts configurations: take the vertex whose step
    examines the fewest sums, ``K(v) * prod(K(D))``.
``"min-fill"``
    Take the vertex whose elimination adds the least weight of new ties
    between its neighbours (each new tie weighted by the product of the two
    configuration counts); ties by the step's size.
``"auto"`` (default)
    Compute all of the above except breadth-first and keep the one whose steps
    examine the fewest sums in total. Orderings take milliseconds, the search
    takes up to seconds, so trying several always pays; GenerateSeq is among
    them, so ``"auto"`` never costs more than the paper's choice.

Functions take the graph as an adjacency (one collection of neighbour ids per
vertex) and, where they weigh steps, the configuration count of every vertex.

Dense graphs
------------
The exact search cannot tabulate a dependent set above
``pase.limits.MAX_DEPENDENT_SET``. Given ``max_dependent_set``, the greedy
heuristics never score a vertex with more live neighbours than that (such a
vertex sorts last, whatever its score) and stop, returning ``None``, when only
such vertices are left, so on a densely connected graph they give up after a
few steps instead of scoring quadratic neighbourhoods for minutes;
:func:`degeneracy` proves in linear time when no ordering can stay within it.
Where every step stays within the bound they return exactly what they would
without it.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import Callable, Collection, Sequence

__all__ = [
    "ORDERINGS",
    "DEFAULT_ORDERING",
    "StepStats",
    "adjacency",
    "breadth_first",
    "compute_ordering",
    "connected_sets",
    "degeneracy",
    "elimination_steps",
    "elimination_work",
    "generate_seq",
    "min_fill",
    "min_table",
]

ORDERINGS = ("auto", "generateseq", "min-table", "min-fill", "bfs")
DEFAULT_ORDERING = "auto"

Adjacency = Sequence[Collection[int]]


@dataclass(frozen=True)
class StepStats:
    """One step of an elimination ordering.

    Attributes
    ----------
    vertex : int
        The vertex eliminated (v(i) in the paper).
    dependent_set : tuple of int
        Not-yet-eliminated vertices tied to it (D(i)), sorted by the position
        at which they will be eliminated.
    table_entries : int
        Entries of the table built at this step: the product of the
        configuration counts of the dependent set (1 if it is empty).
    work : int
        Sums examined: ``table_entries`` times the vertex's configuration count.
    """

    vertex: int
    dependent_set: tuple[int, ...]
    table_entries: int
    work: int


def adjacency(num_nodes: int, edges: Collection[tuple[int, int]] | Collection[tuple]) -> list[set[int]]:
    """Neighbour sets of an undirected view of ``edges`` (pairs, or triples whose first two items are ids).

    >>> adjacency(3, [(0, 1), (2, 1)])
    [{1}, {0, 2}, {1}]
    """
    adj: list[set[int]] = [set() for _ in range(num_nodes)]
    for u, v, *_ in edges:
        adj[u].add(v)
        adj[v].add(u)
    return adj


def _eliminate(live: list[set[int]], v: int) -> set[int]:
    """Remove ``v`` from the live graph, tying its live neighbours together (the fill-in); return them."""
    neighbours = live[v]
    for u in neighbours:
        live[u] |= neighbours
        live[u].discard(u)
        live[u].discard(v)
    live[v] = set()
    return neighbours


def elimination_steps(adj: Adjacency, config_counts: Sequence[int], order: Sequence[int], *,
                      max_dependent_set: int | None = None) -> list[StepStats]:
    """The steps of eliminating the vertices of ``adj`` in ``order``.

    Parameters
    ----------
    adj : sequence of collections of int
        Neighbours of each vertex.
    config_counts : sequence of int
        Configurations of each vertex.
    order : sequence of int
        A permutation of the vertex ids.
    max_dependent_set : int, optional
        Stop after the first step whose dependent set is larger (it is the
        last of the list), so an ordering too wide to search costs no more
        than the steps up to it.

    Raises
    ------
    ValueError
        ``order`` is not a permutation of ``range(len(adj))``.

    Examples
    --------
    A path 0 - 1 - 2 eliminated from one end: vertex 0 depends on 1, then 1 on 2.

    >>> [(s.vertex, s.dependent_set, s.table_entries) for s in
    ...  elimination_steps([{1}, {0, 2}, {1}], [2, 3, 4], [0, 1, 2])]
    [(0, (1,), 3), (1, (2,), 4), (2, (), 1)]
    """
    n = len(adj)
    order = [int(v) for v in order]
    if sorted(order) != list(range(n)):
        raise ValueError(f"an ordering must list every vertex 0..{n - 1} exactly once")
    position = [0] * n
    for i, v in enumerate(order):
        position[v] = i
    live = [set(a) for a in adj]
    steps = []
    for v in order:
        dependent = _eliminate(live, v)
        dep = tuple(sorted(dependent, key=position.__getitem__))
        entries = math.prod(config_counts[u] for u in dep)
        steps.append(StepStats(v, dep, entries, entries * config_counts[v]))
        if max_dependent_set is not None and len(dep) > max_dependent_set:
            break
    return steps


def connected_sets(adj: Adjacency, order: Sequence[int]) -> list[tuple[int, ...]]:
    """The paper's connected set X(i) of every step of ``order``.

    X(i): the vertices eliminated before ``order[i]`` that reach it through
    eliminated vertices only, sorted by their position in ``order``. The
    components of eliminated vertices are kept in a union-find, so the walk is
    near-linear in the graph's size plus the sets' total size.

    Raises
    ------
    ValueError
        ``order`` is not a permutation of the vertices.

    >>> connected_sets([{1}, {0, 2}, {1}], [0, 1, 2])
    [(), (0,), (0, 1)]
    """
    if sorted(order) != list(range(len(adj))):
        raise ValueError(f"the ordering must list each of the {len(adj)} vertices once")
    parent = list(range(len(adj)))
    members = {v: [v] for v in range(len(adj))}
    done = [False] * len(adj)
    position = {v: i for i, v in enumerate(order)}

    def root(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    out = []
    for v in order:
        roots = {root(u) for u in adj[v] if done[u]}
        out.append(tuple(sorted((u for r in roots for u in members[r]), key=position.__getitem__)))
        done[v] = True
        for r in roots:  # distinct components: each r is still its component's root here
            big, small = root(v), r
            if len(members[big]) < len(members[small]):
                big, small = small, big
            parent[small] = big
            members[big].extend(members.pop(small))
    return out


def elimination_work(adj: Adjacency, config_counts: Sequence[int], order: Sequence[int]) -> int:
    """Total sums examined by the search under ``order`` (the sum of the steps' ``work``)."""
    return sum(s.work for s in elimination_steps(adj, config_counts, order))


def _greedy(adj: Adjacency, score: Callable[[int, list[set[int]]], tuple], affected_depth: int,
            max_degree: int | None = None) -> list[int] | None:
    """Repeatedly eliminate the vertex of smallest ``score(v, live)``; ties by vertex id.

    Scores are kept in a heap and recomputed only for the vertices whose score
    an elimination can change: its neighbours (``affected_depth`` 1) or also
    their neighbours (2, for fill-in based scores). With ``max_degree``, a
    vertex of more live neighbours is not scored and sorts after every other
    (its degree can only change when a neighbour goes, which rescores it), and
    the ordering stops, returning None, when only such vertices are left.
    """
    n = len(adj)
    live = [set(a) for a in adj]
    if max_degree is not None:
        inner = score

        def score(v: int, live: list[set[int]]) -> tuple:
            return (0, *inner(v, live)) if len(live[v]) <= max_degree else (1, v)

    current = [score(v, live) for v in range(n)]
    heap = [(s, v) for v, s in enumerate(current)]
    heapq.heapify(heap)
    done = [False] * n
    order = []
    while heap:
        s, v = heapq.heappop(heap)
        if done[v] or s != current[v]:
            continue  # a stale entry, superseded by a later push
        if max_degree is not None and s[0]:
            return None
        done[v] = True
        order.append(v)
        neighbours = _eliminate(live, v)
        affected = set(neighbours)
        if affected_depth > 1:
            for u in neighbours:
                affected |= live[u]
        for u in affected:
            if not done[u]:
                s = score(u, live)
                if s != current[u]:
                    current[u] = s
                    heapq.heappush(heap, (s, u))
    return order


def generate_seq(adj: Adjacency, *, max_dependent_set: int | None = None) -> list[int] | None:
    """The paper's GenerateSeq (Fig. 3): smallest dependent set first, ties by vertex id.

    With ``max_dependent_set``: None as soon as every vertex left has a larger
    dependent set (module docstring).

    A star: leaves go first; the hub goes as soon as it has no more neighbours than a leaf.

    >>> generate_seq([{1, 2, 3}, {0}, {0}, {0}])
    [1, 2, 0, 3]
    >>> generate_seq([{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}], max_dependent_set=2) is None
    True
    """
    return _greedy(adj, lambda v, live: (len(live[v]), v), 1, max_dependent_set)


def min_table(adj: Adjacency, config_counts: Sequence[int], *,
              max_dependent_set: int | None = None) -> list[int] | None:
    """Smallest step first: the vertex minimising ``K(v) * prod(K(D))``; ties by vertex id.

    With ``max_dependent_set``: None when the ordering reaches a step with a
    larger dependent set (module docstring).
    """
    k = config_counts
    return _greedy(adj, lambda v, live: (k[v] * math.prod(k[u] for u in live[v]), v), 1, max_dependent_set)


def min_fill(adj: Adjacency, config_counts: Sequence[int], *,
             max_dependent_set: int | None = None) -> list[int] | None:
    """Least weighted fill-in first, then the smallest step, then the lowest id.

    With ``max_dependent_set``: None when the ordering reaches a step with a
    larger dependent set (module docstring).
    """
    k = config_counts

    def score(v: int, live: list[set[int]]) -> tuple:
        nb = sorted(live[v])
        fill = sum(k[a] * k[b] for i, a in enumerate(nb) for b in nb[i + 1:] if b not in live[a])
        return fill, k[v] * math.prod(k[u] for u in nb), v

    return _greedy(adj, score, 2, max_dependent_set)


def breadth_first(adj: Adjacency) -> list[int]:
    """Breadth-first order from vertex 0, neighbours by increasing id; each further component from its lowest id.

    >>> breadth_first([{1, 2}, {0, 3}, {0}, {1}])
    [0, 1, 2, 3]
    """
    n = len(adj)
    seen = [False] * n
    order = []
    for root in range(n):
        if seen[root]:
            continue
        seen[root] = True
        queue = deque([root])
        while queue:
            v = queue.popleft()
            order.append(v)
            for u in sorted(adj[v]):
                if not seen[u]:
                    seen[u] = True
                    queue.append(u)
    return order


def degeneracy(adj: Adjacency) -> int:
    """The largest, over the graph's subgraphs, of the least degree in it: a lower bound on every ordering.

    Every elimination ordering has a step whose dependent set is at least
    this large (the degeneracy is at most the treewidth), so a graph whose
    degeneracy exceeds what the search can tabulate needs no ordering tried.
    Repeatedly removes a vertex of least degree: ``O(E log V)``.

    >>> degeneracy([{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}]), degeneracy([{1}, {0, 2}, {1}])
    (3, 1)
    """
    degree = [len(a) for a in adj]
    heap = [(d, v) for v, d in enumerate(degree)]
    heapq.heapify(heap)
    removed = [False] * len(adj)
    best = 0
    while heap:
        d, v = heapq.heappop(heap)
        if removed[v] or d != degree[v]:
            continue  # a stale entry, superseded by a later push
        removed[v] = True
        best = max(best, d)
        for u in adj[v]:
            if not removed[u]:
                degree[u] -= 1
                heapq.heappush(heap, (degree[u], u))
    return best


def compute_ordering(adj: Adjacency, config_counts: Sequence[int], name: str = DEFAULT_ORDERING, *,
                     max_dependent_set: int | None = None) -> list[int] | None:
    """The ordering called ``name`` (one of :data:`ORDERINGS`).

    With ``max_dependent_set``, a greedy heuristic that reaches a larger
    dependent set gives None (module docstring); ``"auto"`` keeps the best of
    those that stay within it, None if none does. ``"bfs"`` is returned whole
    (it eliminates nothing, so it cannot tell).

    Raises
    ------
    ValueError
        ``name`` is not in :data:`ORDERINGS`.

    Examples
    --------
    >>> compute_ordering([{1}, {0, 2}, {1}], [5, 1, 5], "min-table")
    [0, 1, 2]
    """
    bound = max_dependent_set
    if name == "generateseq":
        return generate_seq(adj, max_dependent_set=bound)
    if name == "bfs":
        return breadth_first(adj)
    if name == "min-table":
        return min_table(adj, config_counts, max_dependent_set=bound)
    if name == "min-fill":
        return min_fill(adj, config_counts, max_dependent_set=bound)
    if name == "auto":
        candidates = [generate_seq(adj, max_dependent_set=bound),
                      min_table(adj, config_counts, max_dependent_set=bound),
                      min_fill(adj, config_counts, max_dependent_set=bound)]
        candidates = [order for order in candidates if order is not None]
        # min() keeps the first of equals, so GenerateSeq wins ties.
        return min(candidates, key=lambda order: elimination_work(adj, config_counts, order), default=None)
    raise ValueError(f"unknown ordering {name!r}; choose one of {', '.join(ORDERINGS)}")
