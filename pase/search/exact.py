"""PaSE's strategy search: an exact dynamic program over an elimination ordering.

Given a :class:`~pase.ir.costgraph.CostGraph` (a cost vector per layer, a cost
matrix per edge), :func:`solve` returns the assignment of one configuration
per layer that minimises the total cost, as in the paper's section III.

How it works
------------
The paper's recurrence is min-sum variable elimination ("bucket elimination").
Vertices are taken in an ordering (:mod:`pase.search.ordering`). Each vertex ``v``
owns a *bucket*: the cost terms (``v``'s cost vector, its edge matrices, tables
made by earlier steps) whose earliest-eliminated vertex is ``v``. The step adds
them up and minimises over ``v``'s configurations, which leaves a table over
the configurations of ``v``'s dependent set ``D`` (the paper's R(i, .)); the
table joins the bucket of the first vertex of ``D`` to go. A step with an
empty ``D`` yields the optimum of one connected component. The buckets are
kept, so going back through the ordering and taking, for each vertex, the
configuration of least bucket total given the vertices already fixed recovers
an optimal assignment (back-substitution) without argmin tables.

What makes it fast, all exact:

* the ordering: ``"auto"`` tries several heuristics and keeps the one whose
  steps examine the fewest sums;
* dominated configurations are dropped first (:func:`_prune`): configuration
  ``a`` of ``v`` goes if another configuration ``b`` is at least as cheap
  whatever the neighbours do, i.e. ``c[b] - c[a] + sum over v's edges of
  max_x (M[b, x] - M[a, x]) <= 0``. An optimal assignment survives. It runs
  when the search is big enough for it to pay;
* a large step tests its vertex's configurations the same way against the
  step's own operands, which already hold the minima over the vertices
  eliminated before, so it finds more to drop;
* each step sums the bucket's terms into two operands (cheap, since each
  lacks some of the dependent set's axes), then adds the two and minimises
  tile by tile, each tile small enough to stay in cache, so no array of the
  step's full size ``K(v) * |table|`` ever exists; large steps split their
  tiles across CPU threads (numpy releases the GIL inside these loops).

Everything is float64: the sums stay exact to about 1e-15 relative, far below
the 1e-9 the instances are checked to. The reported cost is
:meth:`CostGraph.cost_of` of the returned assignment.

Memory is estimated before any table exists (:func:`estimate`), and
:func:`solve` refuses with :class:`~pase.errors.SearchTooLargeError` a search
over its budget. The estimate bounds everything the search allocates: the
tables, each step's operands and tiles, the pruned copies of the edge matrices
and the pruning's own scratch, and the address space of its worker threads.
A graph so densely connected that a dependent set would exceed
``pase.limits.MAX_DEPENDENT_SET`` (a table of that many axes) is refused the
same way before any table: at once when the graph's degeneracy
(:func:`~pase.search.ordering.degeneracy`) proves that no ordering can do,
else as soon as the orderings, which stop at the first step that wide, show it.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from typing import Callable, Sequence

import numpy as np

from pase.ir.costgraph import CostGraph
from pase.errors import SearchTooLargeError
from pase.limits import MAX_DEPENDENT_SET, default_memory_budget_bytes
from pase.search.ordering import (
    DEFAULT_ORDERING,
    ORDERINGS,
    StepStats,
    adjacency,
    compute_ordering,
    degeneracy,
    elimination_steps,
    generate_seq,
)

__all__ = [
    "DEFAULT_ORDERING",
    "ORDERINGS",
    "SearchEstimate",
    "SearchResult",
    "StepStats",
    "estimate",
    "prune_dominated",
    "solve",
]

_BYTES = 8  # float64 tables
# Elements per tile of the add-and-minimise pass (4 MiB): the fastest of 2**14
# to 2**24 on the transformer instances on a 2-core EPYC (1 MiB L2, 32 MiB L3).
# Smaller tiles pay more Python overhead per sum, bigger ones leave the cache.
_TILE = 1 << 19
# Steps examining fewer sums than this run on one thread (thread hand-off costs more).
_THREADED_WORK = 1 << 22
# Prune dominated configurations only when the search would examine this many
# sums per edge-matrix entry (under GenerateSeq): pruning reads every matrix
# about ten times and saves half the sums or more, yet the shared instances
# below this ratio (inception3, transformer p<=16: 5 to 38) come out no faster.
_PRUNE_WORK_PER_EDGE_ENTRY = 40
_WEIGHTED_ORDERINGS = ("auto", "min-table", "min-fill")
# Steps examining at least this many sums first drop the configurations of their
# vertex that the step's operands show to be dominated: the test reads the
# operands a few times, far less than the step's own work.
_STEP_PRUNE_WORK = 1 << 20
# Address space a worker thread takes besides its tiles: its stack (8 MiB by default on
# Linux) and the malloc arena glibc reserves for it (64 MiB), rounded up. Reserved, not
# touched, but it counts against an address-space limit (RLIMIT_AS).
_WORKER_BYTES = 80 * 2**20


@dataclass(frozen=True)
class SearchEstimate:
    """Size of a search, computed before any table is allocated.

    Attributes
    ----------
    ordering : tuple of int
        The elimination ordering (vertex ids).
    steps : tuple of StepStats
        Per step: vertex, dependent set, table entries, sums examined.
    config_counts : tuple of int
        Configurations per vertex that the search considers, after dropping
        dominated ones.
    pruned_configs : int
        Configurations dropped as dominated (never needed for an optimum).
    max_table_entries : int
        Entries of the largest table.
    total_table_entries : int
        Entries of all tables (all are kept until the end).
    max_dependent_set : int
        Size of the largest dependent set (the paper's M).
    total_work : int
        Sums the steps examine (one add and one compare each), at most: large
        steps skip the configurations their operands show dominated.
    peak_bytes : int
        Upper bound of the memory the search allocates at once, in bytes:
        while pruning, the pruned copies of the edge matrices and its
        scratch; then all tables, the largest step's operands and tiles, the
        pruned copies and the worker threads' address space.
    """

    ordering: tuple[int, ...]
    steps: tuple[StepStats, ...]
    config_counts: tuple[int, ...]
    pruned_configs: int
    max_table_entries: int
    total_table_entries: int
    max_dependent_set: int
    total_work: int
    peak_bytes: int


@dataclass(frozen=True, eq=False)
class SearchResult:
    """An optimal strategy and how the search found it.

    Attributes
    ----------
    cost : float
        Minimum of the objective; equals ``cost_graph.cost_of(assignment)``.
    assignment : numpy.ndarray
        Configuration index of every vertex, in vertex-id order (int64).
    ordering, steps, max_table_entries, total_table_entries, max_dependent_set, total_work, pruned_configs
        As in :class:`SearchEstimate`.
    peak_table_bytes : int
        The estimate's ``peak_bytes``: memory held by tables and scratch.
    search_time_s : float
        Wall time of the whole search (pruning, ordering, tables,
        back-substitution), in seconds.
    """

    cost: float
    assignment: np.ndarray
    ordering: tuple[int, ...]
    steps: tuple[StepStats, ...]
    max_table_entries: int
    total_table_entries: int
    max_dependent_set: int
    total_work: int
    pruned_configs: int
    peak_table_bytes: int
    search_time_s: float


def estimate(
    cost_graph: CostGraph,
    *,
    ordering: str | Sequence[int] = DEFAULT_ORDERING,
    prune: bool | None = None,
) -> SearchEstimate:
    """How big the search of ``cost_graph`` would be, without building any table.

    Parameters
    ----------
    cost_graph : CostGraph
    ordering : str or sequence of int
        A name from :data:`ORDERINGS` or an explicit permutation of the vertices.
    prune : bool, optional
        Drop dominated configurations first (True), never (False), or when
        the search is big enough for it to pay (None, the default). Pruning
        needs only small scratch arrays.

    Returns
    -------
    SearchEstimate

    Raises
    ------
    SearchTooLargeError
        ``ordering`` names a heuristic and none of its orderings keeps every
        dependent set within ``pase.limits.MAX_DEPENDENT_SET`` (an explicit
        ordering or ``"bfs"`` is estimated however wide; :func:`solve`
        refuses it). No table is built.
    ValueError
        Unknown ordering name, or a sequence that is not a permutation.

    Examples
    --------
    >>> import numpy as np
    >>> g = CostGraph((np.zeros(3), np.zeros(4), np.zeros(5)),
    ...               ((0, 1, np.zeros((3, 4))), (1, 2, np.zeros((4, 5)))))
    >>> e = estimate(g, ordering=[0, 1, 2], prune=False)
    >>> [s.table_entries for s in e.steps], e.total_work
    ([4, 5, 1], 37)
    """
    return _prepare(cost_graph, ordering, prune).estimate


def solve(
    cost_graph: CostGraph,
    *,
    ordering: str | Sequence[int] = DEFAULT_ORDERING,
    memory_budget_bytes: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    prune: bool | None = None,
) -> SearchResult:
    """Minimise ``cost_graph``'s objective exactly.

    Parameters
    ----------
    cost_graph : CostGraph
        Need not be connected: components are solved side by side.
    ordering : str or sequence of int
        A name from :data:`ORDERINGS` (default ``"auto"``, the cheapest of
        several heuristics) or an explicit permutation of the vertices. Any
        ordering gives the same optimum; they differ in time and memory.
    memory_budget_bytes : int, optional
        Refuse searches whose estimated peak memory exceeds this many bytes.
        Default: :func:`pase.limits.default_memory_budget_bytes`.
    progress : callable(done, total), optional
        Called after each elimination step with the steps done and the total
        (the number of vertices), from the calling thread.
    prune : bool, optional
        See :func:`estimate`. The result is the same either way.

    Returns
    -------
    SearchResult

    Raises
    ------
    SearchTooLargeError
        The estimate exceeds the budget, or a dependent set would exceed
        ``pase.limits.MAX_DEPENDENT_SET``. Raised before any table is
        allocated; the message gives the size and what to change.
    ValueError
        Unknown ordering name, or a sequence that is not a permutation.

    Examples
    --------
    Two layers that each prefer configuration 0, but an edge that makes
    disagreeing expensive:

    >>> import numpy as np
    >>> g = CostGraph((np.array([1.0, 3.0]), np.array([1.0, 0.0])),
    ...               ((0, 1, np.array([[0.0, 9.0], [9.0, 0.0]])),))
    >>> r = solve(g)
    >>> r.cost, r.assignment.tolist()
    (2.0, [0, 0])
    """
    start = time.perf_counter()
    prepared = _prepare(cost_graph, ordering, prune)
    est = prepared.estimate
    budget = default_memory_budget_bytes() if memory_budget_bytes is None else int(memory_budget_bytes)
    if est.peak_bytes > budget:
        raise SearchTooLargeError(_too_large_message(cost_graph, est, budget))
    if est.max_dependent_set > MAX_DEPENDENT_SET:
        widest = next(s for s in est.steps if len(s.dependent_set) > MAX_DEPENDENT_SET)
        what = f"ordering {ordering!r}" if isinstance(ordering, str) else "the given ordering"
        raise SearchTooLargeError(_too_dense_message(cost_graph, adjacency(cost_graph.num_nodes, cost_graph.edges),
                                                     what, widest))
    reduced_assignment = _eliminate(prepared, progress)
    assignment = np.array([prepared.kept[v][a] for v, a in enumerate(reduced_assignment)], dtype=np.int64)
    return SearchResult(
        cost=cost_graph.cost_of(assignment),
        assignment=assignment,
        ordering=est.ordering,
        steps=est.steps,
        max_table_entries=est.max_table_entries,
        total_table_entries=est.total_table_entries,
        max_dependent_set=est.max_dependent_set,
        total_work=est.total_work,
        pruned_configs=est.pruned_configs,
        peak_table_bytes=est.peak_bytes,
        search_time_s=time.perf_counter() - start,
    )


# -- preparation: pruning, ordering, the plan of every step -------------------------------


@dataclass(frozen=True, eq=False)
class _Prepared:
    """Everything decided before the first table: the reduced problem and the plan of each step.

    Factors (the cost terms) are numbered: vertex ``v``'s cost vector is factor
    ``v``, edge ``j`` is factor ``n + j``, then come the tables in the order
    the steps make them (a step with an empty dependent set makes none).
    ``scopes[f]`` lists the vertices factor ``f`` depends on, in the order of
    its array's axes.
    """

    estimate: SearchEstimate
    kept: list[np.ndarray]  # original configuration index of each kept configuration, per vertex
    arrays: list[np.ndarray]  # node cost vectors then edge matrices of the reduced problem
    scopes: list[tuple[int, ...]]  # of every factor, tables included
    buckets: list[list[int]]  # factor ids per vertex, consumed when the vertex is eliminated
    groups: list[tuple[tuple[int, ...], ...]]  # per step: the bucket split into one or two operands


def _prepare(cost_graph: CostGraph, ordering: str | Sequence[int], prune: bool | None) -> _Prepared:
    if isinstance(ordering, str) and ordering not in ORDERINGS:
        raise ValueError(f"unknown ordering {ordering!r}; choose one of {', '.join(ORDERINGS)}")
    n = cost_graph.num_nodes
    adj = adjacency(n, cost_graph.edges)
    counts = cost_graph.config_counts
    # The heuristics stop at the first dependent set too large to tabulate, and a graph
    # whose degeneracy exceeds it needs none tried: either way nothing is pruned or
    # tabulated. An ordering given (or breadth-first) is estimated whole; solve() refuses it.
    limit = MAX_DEPENDENT_SET
    heuristic = isinstance(ordering, str) and ordering != "bfs"
    # Orderings weighted by configuration counts must wait for the pruning;
    # until then GenerateSeq (a few milliseconds) tells whether to prune.
    weighted = isinstance(ordering, str) and ordering in _WEIGHTED_ORDERINGS
    if heuristic:
        if degeneracy(adj) > limit:
            raise SearchTooLargeError(_too_dense_message(cost_graph, adj, "every ordering"))
        order = (generate_seq(adj, max_dependent_set=limit) if weighted
                 else compute_ordering(adj, counts, ordering, max_dependent_set=limit))
        if order is None and not weighted:
            raise SearchTooLargeError(_too_dense_message(cost_graph, adj, f"ordering {ordering!r}"))
    else:
        order = compute_ordering(adj, counts, ordering) if isinstance(ordering, str) else list(ordering)
    if prune is None:
        if order is None:  # GenerateSeq too wide: a search big enough to prune for
            prune = True
        else:
            early = elimination_steps(adj, counts, order)  # validates an explicit ordering
            entries = sum(m.size for _, _, m in cost_graph.edges)
            # A search too wide to run is not worth pruning.
            prune = (max((len(s.dependent_set) for s in early), default=0) <= limit
                     and sum(s.work for s in early) > _PRUNE_WORK_PER_EDGE_ENTRY * entries)
    if prune:
        kept = _prune(cost_graph)
        node_costs = [c[k] for c, k in zip(cost_graph.node_costs, kept, strict=True)]
        edges = [_submatrix(m, kept[u], kept[v]) for u, v, m in cost_graph.edges]
        counts = tuple(len(k) for k in kept)
    else:
        kept = [np.arange(k) for k in counts]
        node_costs = list(cost_graph.node_costs)
        edges = [m for _, _, m in cost_graph.edges]
    if weighted:
        order = compute_ordering(adj, counts, ordering, max_dependent_set=limit)
        if order is None:
            raise SearchTooLargeError(_too_dense_message(cost_graph, adj, f"ordering {ordering!r}"))
    steps = elimination_steps(adj, counts, order)
    copied = [(e, m) for e, (_, _, m) in zip(edges, cost_graph.edges, strict=True) if e is not m]
    extra_bytes = sum(e.nbytes for e, _ in copied)
    # _prune holds a copy of each edge it shrinks (at most the original's size), a second
    # one of an edge while shrinking it again, and a difference matrix of one edge.
    largest_edge = max((m.nbytes for _, _, m in cost_graph.edges), default=0)
    prune_bytes = sum(m.nbytes for _, m in copied) + 2 * largest_edge if prune else 0

    position = [0] * n
    for i, v in enumerate(order):
        position[v] = i
    scopes: list[tuple[int, ...]] = [(v,) for v in range(n)] + [(u, v) for u, v, _ in cost_graph.edges]
    buckets: list[list[int]] = [[] for _ in range(n)]
    for f, scope in enumerate(scopes):
        buckets[min(scope, key=position.__getitem__)].append(f)
    groups = []
    scratch = 0
    for step in steps:
        dep = step.dependent_set
        if len(dep) > limit:
            # Never run (solve() refuses it), so not planned: each of its two operands,
            # held twice, spans at most the step's sums.
            groups.append(())
            scratch = max(scratch, 4 * step.work + _step_scratch((), scopes, dep, counts))
        else:
            split = _split_bucket(buckets[step.vertex], scopes, counts)
            groups.append(split)
            scratch = max(scratch, _step_scratch(split, scopes, dep, counts))
        if dep:
            scopes.append(dep)
            buckets[dep[0]].append(len(scopes) - 1)
    total_entries = sum(s.table_entries for s in steps)
    workers = _threads() - 1 if any(s.work >= _THREADED_WORK for s in steps) else 0
    est = SearchEstimate(
        ordering=tuple(order),
        steps=tuple(steps),
        config_counts=tuple(counts),
        pruned_configs=sum(cost_graph.config_counts) - sum(counts),
        max_table_entries=max((s.table_entries for s in steps), default=0),
        total_table_entries=total_entries,
        max_dependent_set=max((len(s.dependent_set) for s in steps), default=0),
        total_work=sum(s.work for s in steps),
        peak_bytes=max(prune_bytes, _BYTES * (total_entries + scratch) + extra_bytes + workers * _WORKER_BYTES),
    )
    return _Prepared(est, kept, node_costs + edges, scopes, buckets, groups)


def _submatrix(m: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    if len(rows) == m.shape[0] and len(cols) == m.shape[1]:
        return m
    return m[np.ix_(rows, cols)]


def _operand_size(group: Sequence[int], scopes: Sequence[tuple[int, ...]], counts: Sequence[int]) -> int:
    """Entries of the sum of the factors in ``group`` (their axes' union, the vertex's included)."""
    return math.prod(counts[x] for x in set().union(*(scopes[f] for f in group)))


def _split_bucket(bucket: list[int], scopes: Sequence[tuple[int, ...]],
                  counts: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Split a bucket into at most two groups whose sums are small.

    The step then costs one add-and-minimise pass over ``K(v) * |table|``;
    summing a group costs only its own size, which lacks the axes of the other
    group. Greedy: merge the two groups whose merged sum is smallest until two
    remain (a cost vector has no axis besides ``v``, so it merges for free);
    of equal merges, the pair of earliest groups, a merged group counting as
    the latest.

    Groups over the same vertices are interchangeable, so the candidates are
    the two earliest groups of each vertex set and the earliest of every two
    sets: a merge costs ``O(S**2)`` for ``S`` distinct vertex sets instead of
    ``O(groups**2)`` (a hub receiving a table from each of thousands of leaves
    has one set).
    """
    order = sorted(bucket, key=lambda f: -math.prod(counts[x] for x in scopes[f]))
    groups = {gid: (f,) for gid, f in enumerate(order)}  # id (creation order) -> factors
    members: dict[frozenset, deque[int]] = {}  # vertex set -> ids of its groups, ascending
    for gid, f in enumerate(order):
        members.setdefault(frozenset(scopes[f]), deque()).append(gid)
    sizes: dict[tuple[frozenset, frozenset], int] = {}  # entries of the union of two vertex sets

    def size(keys: tuple[frozenset, frozenset]) -> int:
        if keys not in sizes:
            sizes[keys] = math.prod(counts[x] for x in keys[0] | keys[1])
        return sizes[keys]

    next_id = len(order)
    while len(groups) > 2:
        sets = list(members.items())
        best = None  # (entries, earlier id, later id, vertex sets whose earliest groups merge)
        for a, (key_a, ids_a) in enumerate(sets):
            first = ids_a[0]
            if len(ids_a) > 1:
                candidate = (size((key_a, key_a)), first, ids_a[1], (key_a, key_a))
                if best is None or candidate[:3] < best[:3]:
                    best = candidate
            for key_b, ids_b in sets[a + 1:]:
                i, j = (first, ids_b[0]) if first < ids_b[0] else (ids_b[0], first)
                entries = size((key_a, key_b))
                if best is None or (entries, i, j) < best[:3]:
                    best = (entries, i, j, (key_a, key_b))
        _, i, j, keys = best
        for key in keys:
            members[key].popleft()
        for key in set(keys):
            if not members[key]:
                del members[key]
        groups[next_id] = groups.pop(i) + groups.pop(j)
        members.setdefault(keys[0] | keys[1], deque()).append(next_id)  # the latest id: order kept
        next_id += 1
    return tuple(groups[gid] for gid in sorted(groups))


def _step_scratch(groups: Sequence[tuple[int, ...]], scopes: Sequence[tuple[int, ...]], dep: tuple[int, ...],
                  counts: Sequence[int]) -> int:
    """Entries of temporary arrays a step needs beyond its table: operands and tile buffers.

    Operands count twice: dropping dominated configurations copies them.
    """
    operands = 2 * sum(_operand_size(g, scopes, counts) for g in groups)
    rest = math.prod(counts[x] for x in dep[1:])
    tile = max(_TILE, rest) * 2  # the tile and the partial minimum, per thread
    return operands + tile * _threads()


def _threads() -> int:
    try:
        return max(1, min(4, len(os.sched_getaffinity(0))))
    except AttributeError:  # not Linux
        return max(1, min(4, os.cpu_count() or 1))


def _too_large_message(cost_graph: CostGraph, est: SearchEstimate, budget: int) -> str:
    message = (f"the search would hold {_count(est.total_table_entries)} table entries, about "
               f"{_gib(est.peak_bytes)} at its peak, over the memory budget of {_gib(budget)}")
    if est.steps:
        big = max(est.steps, key=lambda s: s.table_entries)
        message += (f"; its largest table ({_count(big.table_entries)} entries) is over the configurations of "
                    f"{len(big.dependent_set)} layers when {cost_graph.label(big.vertex)} is eliminated")
    return (message + ". Use fewer configurations (fewer devices, powers of two only, a larger minimum "
            "shard size) or a larger memory budget")


def _too_dense_message(cost_graph: CostGraph, adj: list[set[int]], what: str, step: StepStats | None = None) -> str:
    """The refusal of a search with a dependent set too large to tabulate.

    ``what`` names the ordering(s) tried and ``step`` the first step over the
    limit, if known; the graph's degeneracy (``adj``) tells whether any
    ordering could do.
    """
    limit = MAX_DEPENDENT_SET
    bound = degeneracy(adj)
    if step is not None:
        size = f", {_gib(_BYTES * step.table_entries)}" if _BYTES * step.table_entries >= 2**30 else ""
        found = (f"{what} leaves a dependent set of {len(step.dependent_set)} layers when "
                 f"{cost_graph.label(step.vertex)} is eliminated (a table of {_count(step.table_entries)} "
                 f"entries{size})")
    elif bound > limit:
        found = (f"its layers are so densely connected that {what} leaves a dependent set of at least "
                 f"{bound} layers")
    else:
        found = f"{what} reaches a dependent set of more than {limit} layers"
    message = (f"the exact search cannot tabulate this graph: {found}, above the limit of {limit} layers "
               "(pase.limits.MAX_DEPENDENT_SET: a table has one axis per layer of its dependent set)")
    if step is not None and bound <= limit:
        message += "; ordering='auto' may find a narrower ordering"
    return (message + ". Use the approximate search (pase.plan falls back to it unless "
            "PlanOptions(approximate=False)), or fewer layers that read the outputs of many others (dense "
            "concatenations)")


def _gib(nbytes: int) -> str:
    """Bytes as GiB for messages; exact integers too large for a float are shown by their digits."""
    return f"{nbytes / 2**30:.3g} GiB" if nbytes < 2**1000 else f"{_count(nbytes // 2**30)} GiB"


def _count(n: int) -> str:
    """A count for messages: thousands separators, or scientific notation past 15 digits."""
    digits = str(n)
    return f"{n:,}" if len(digits) <= 15 else f"{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


# -- pruning of dominated configurations ----------------------------------------------------


def prune_dominated(cost_graph: CostGraph) -> tuple[CostGraph, list[np.ndarray]]:
    """``cost_graph`` restricted to the configurations that no other dominates (see :func:`_prune`).

    Returns the reduced graph (same vertices, edges and names) and, per
    vertex, the original index of each configuration kept (increasing). Its
    optimum equals ``cost_graph``'s, and mapping an optimal assignment of it
    through the kept indices gives an optimal assignment of ``cost_graph``.
    The arrays of vertices and edges that lose nothing are shared, not copied.
    """
    kept = _prune(cost_graph)
    node_costs = tuple(c[k] if len(k) < c.size else c for c, k in zip(cost_graph.node_costs, kept, strict=True))
    # Repeated blocks share their matrices; cut each shared one once per pair of kept sets, so
    # the blocks still share theirs (and :mod:`pase.search.fold` can tell them equal at once).
    cut: dict[tuple, np.ndarray] = {}
    edges = []
    for u, v, m in cost_graph.edges:
        key = (id(m), kept[u].tobytes(), kept[v].tobytes())
        if key not in cut:
            cut[key] = _submatrix(m, kept[u], kept[v])
        edges.append((u, v, cut[key]))
    return CostGraph(node_costs, tuple(edges), cost_graph.names), kept


def _prune(cost_graph: CostGraph) -> list[np.ndarray]:
    """Configurations worth keeping, per vertex (original indices, increasing).

    Configuration ``a`` of ``v`` is dominated by ``b`` when, whatever the
    neighbours' configurations ``x``, ``b`` costs no more:
    ``c[b] - c[a] + sum over edges e of max_x (M_e[b, x] - M_e[a, x]) <= 0``.
    Dropping ``a`` then keeps an optimal assignment. Testing every pair costs
    ``K(v)**2`` times the neighbours' configurations, so each vertex tests
    every ``a`` against two likely dominators only (:func:`_undominated`).

    One sweep in vertex order; each vertex sees the removals already made at
    its neighbours, which shrink the maxima. On the transformer instances a
    second sweep finds 5% fewer sums for twice the time, so one sweep it is;
    the steps later drop what their own operands show dominated (see
    :func:`_eliminate`).
    """
    kept = [np.arange(k) for k in cost_graph.config_counts]
    # sub[j]: edge j's matrix restricted to the kept configurations of both ends.
    sub = [m for _, _, m in cost_graph.edges]
    incident: list[list[tuple[int, int]]] = [[] for _ in range(cost_graph.num_nodes)]
    for j, (u, v, _) in enumerate(cost_graph.edges):
        incident[u].append((j, 0))  # (edge id, axis of the vertex in the matrix)
        incident[v].append((j, 1))
    for v, c in enumerate(cost_graph.node_costs):
        if c.size == 1:
            continue
        keep = _undominated([(c[:, None], 0)] + [(sub[j], axis) for j, axis in incident[v]])
        if keep.all():
            continue
        kept[v] = kept[v][keep]
        for j, axis in incident[v]:
            sub[j] = sub[j][keep] if axis == 0 else sub[j][:, keep]
    return kept


def _undominated(mats: list[tuple[np.ndarray, int]]) -> np.ndarray:
    """Mask of the configurations of a vertex that no candidate dominates.

    Each of ``mats`` is a cost term with the vertex's configurations along
    ``axis`` (a cost vector is a one-column matrix). ``b`` dominates ``a`` when
    ``sum over terms of max over the other axis of (M[b] - M[a]) <= 0``: then
    ``b`` costs no more than ``a`` whatever the other vertices do. The
    candidates ``b`` are the configurations cheapest when everything else is
    at its cheapest and when it is at its dearest (a third candidate, cheapest
    on average, removed a few more but cost more time than it saved).
    """
    best = sum(m.min(axis=1 - axis) for m, axis in mats)
    worst = sum(m.max(axis=1 - axis) for m, axis in mats)
    dominated = np.zeros(best.size, dtype=bool)
    for b in dict.fromkeys((int(np.argmin(best)), int(np.argmin(worst)))):
        if dominated[b]:
            continue  # what b dominates, its dominator (tested already) dominates too
        slack = np.zeros(best.size)  # slack[a] <= 0: b dominates a
        for m, axis in mats:
            if axis == 0:
                slack += (m[b][None, :] - m).max(axis=1)
            else:
                slack += (m[:, b][:, None] - m).max(axis=0)
        slack[b] = np.inf
        dominated |= slack <= 0
    return ~dominated


# -- the elimination itself --------------------------------------------------------------------


def _eliminate(prepared: _Prepared, progress: Callable[[int, int], None] | None) -> list[int]:
    """Run every step, then back-substitute; return the configuration index of each vertex (reduced problem)."""
    est = prepared.estimate
    counts = est.config_counts
    scopes = prepared.scopes
    arrays: list[np.ndarray] = list(prepared.arrays)
    n = len(counts)
    threads = _threads()
    big_steps = any(s.work >= _THREADED_WORK for s in est.steps)
    # The calling thread takes a share of each threaded step, so one thread fewer is started.
    pool = ThreadPoolExecutor(threads - 1) if threads > 1 and big_steps else None
    try:
        for i, (step, groups) in enumerate(zip(est.steps, prepared.groups, strict=True)):
            v, dep = step.vertex, step.dependent_set
            operands = [_operand(g, arrays, scopes, v, dep, counts) for g in groups]
            if len(operands) == 2 and step.work >= _STEP_PRUNE_WORK:
                # The operands have absorbed what earlier steps learnt about v's
                # neighbourhood, so more of v's configurations are dominated now.
                keep = _undominated([(x.reshape(x.shape[0], -1), 0) for x in operands])
                if not keep.all():
                    operands = [x[keep] for x in operands]
            shape = tuple(counts[x] for x in dep)
            table = _minimise(operands, shape, pool if step.work >= _THREADED_WORK else None, threads)
            if dep:
                arrays.append(table)
            if progress is not None:
                progress(i + 1, n)
    finally:
        if pool is not None:
            pool.shutdown()
    # Back-substitution: in reverse order every vertex of a bucket's factors
    # except the eliminated one is already fixed.
    assignment = [0] * n
    for v in reversed(est.ordering):
        total = np.zeros(counts[v])
        for f in prepared.buckets[v]:
            index = tuple(slice(None) if x == v else assignment[x] for x in scopes[f])
            total += arrays[f][index]
        assignment[v] = int(np.argmin(total))
    return assignment


def _operand(group: tuple[int, ...], arrays: list[np.ndarray], scopes: list[tuple[int, ...]], v: int,
             dep: tuple[int, ...], counts: Sequence[int]) -> np.ndarray:
    """Sum of a group's factors, laid out with axes (v, *dep), size 1 along axes a factor lacks."""
    shape = [counts[v]] + [1] * len(dep)
    aligned = []
    for f in group:
        scope = scopes[f]
        axes = [v] + [x for x in dep if x in scope]
        a = arrays[f].transpose([scope.index(x) for x in axes])
        aligned.append(a.reshape([counts[v]] + [counts[x] if x in scope else 1 for x in dep]))
        for k, x in enumerate(dep):
            if x in scope:
                shape[k + 1] = counts[x]
    if len(aligned) == 1:
        return np.ascontiguousarray(aligned[0])  # copies only a transposed edge matrix
    out = np.empty(shape)
    np.add(aligned[0], aligned[1], out=out)
    for a in aligned[2:]:
        np.add(out, a, out=out)
    return out


def _minimise(operands: list[np.ndarray], shape: tuple[int, ...], pool: ThreadPoolExecutor | None,
              threads: int) -> np.ndarray:
    """``min over axis 0 of (operands[0] + operands[1])``, broadcast to ``(K(v), *shape)``."""
    if len(operands) == 1:  # one operand already spans every axis
        return operands[0].min(axis=0)
    a, b = operands
    if not shape:  # the last vertex of a component
        return np.asarray((a + b).min())
    out = np.empty(shape)
    kv, rows, rest = a.shape[0], shape[0], math.prod(shape[1:])
    # Tile (configurations of v) x (rows of the table's first axis) to about _TILE elements.
    chunk = min(kv, max(1, _TILE // rest))
    row_chunk = min(rows, max(1, _TILE // (chunk * rest)))
    if pool is None:
        _minimise_rows(out, a, b, 0, rows, chunk, row_chunk)
        return out
    shares = list(pairwise(sorted({rows * t // threads for t in range(threads + 1)})))  # rows per thread
    jobs = [pool.submit(_minimise_rows, out, a, b, lo, hi, chunk, min(row_chunk, hi - lo)) for lo, hi in shares[1:]]
    lo, hi = shares[0]
    _minimise_rows(out, a, b, lo, hi, chunk, min(row_chunk, hi - lo))
    for job in jobs:
        job.result()
    return out


def _minimise_rows(out: np.ndarray, a: np.ndarray, b: np.ndarray, lo: int, hi: int, chunk: int,
                   row_chunk: int) -> None:
    """Fill ``out[lo:hi]``: add the operands tile by tile and fold each tile's minimum into ``out``."""
    kv = a.shape[0]
    tile = np.empty((chunk, row_chunk) + out.shape[1:])
    partial = np.empty((row_chunk,) + out.shape[1:]) if chunk < kv else None
    for r0 in range(lo, hi, row_chunk):
        r1 = min(r0 + row_chunk, hi)
        o = out[r0:r1]
        # An operand without the first table axis has size 1 there and broadcasts.
        ar = a[:, r0:r1] if a.shape[1] > 1 else a
        br = b[:, r0:r1] if b.shape[1] > 1 else b
        for c0 in range(0, kv, chunk):
            c1 = min(c0 + chunk, kv)
            t = tile[: c1 - c0, : r1 - r0]
            np.add(ar[c0:c1], br[c0:c1], out=t)
            if c0 == 0:
                np.minimum.reduce(t, axis=0, out=o)
            else:
                p = partial[: r1 - r0]
                np.minimum.reduce(t, axis=0, out=p)
                np.minimum(o, p, out=o)
