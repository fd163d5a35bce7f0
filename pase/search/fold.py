"""Repeated blocks solved once: chains of identical blocks folded by min-plus products, exactly.

A network made of identical blocks (the layers of a Transformer, the units of a
ResNet stage) gives the exact search (:mod:`pase.search.exact`) the same
elimination steps once per block. :func:`solve` finds such chains in the
:class:`~pase.ir.costgraph.CostGraph` itself, so whatever built the graph,
eliminates one block's interior once into a table over its boundary, chains the
blocks with min-plus matrix products by repeated squaring, and runs the exact
search on what is left. The optimum is the same as the unfolded search's
(the terms are the same; only the order of the additions differs).

What is folded
--------------
Vertex ids are taken in order (the cost model numbers layers in graph order,
so a block's layers are consecutive). A *chain* of period ``P`` starting at
vertex ``c0`` is ``k >= 2`` blocks, block ``i`` (1..k) being the vertices
``c0 + (i-1)P + 1 .. c0 + iP``, whose last vertex ``c_i = c0 + iP`` is its
*port*, such that

* every block is the translate of the first: equal cost vectors, and an edge
  between relative positions ``x`` and ``y`` of block 1 (relative 0 being the
  previous port) for every such edge of block ``i``, with an equal matrix in
  the same orientation, and nothing else (compared bit for bit, never by name);
* a block's other vertices (its *interior*) touch only the block, the previous
  port and *shared* vertices outside the chain, the same ones with equal
  matrices in every block (the encoder output every decoder block reads);
* a port other than the last touches nothing outside its block and the next.

Then the cost of the chain given the configurations ``a`` of ``c0``, ``b`` of
``c_k`` and ``s`` of the shared vertices is ``(T_s)^k[a, b]`` in the min-plus
semiring, ``T_s[a, b]`` being the least cost of one block's interior, edges and
port given ``s`` and its ports in ``a`` and ``b``. The chain is replaced by one
edge ``c0 -- c_k`` carrying that matrix, ``c_k``'s own cost moving into it;
with shared vertices, ``c_k`` and the shared vertices become one vertex whose
configurations are their combinations, so the graph stays pairwise. Chains are
folded one after another (a folded graph is searched for more) while they pay:
a fold is skipped when its table and products would cost more sums than the
steps it saves, or more memory than the budget leaves.

Recovery is exact too: the powers ``T^(2^j)`` are kept, so the ports between
two fixed ends are found by halving (an argmin over one port per split), and
each block's interior by back-substitution through its own elimination with
its ports fixed.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Callable, Sequence

import numpy as np

from pase.errors import SearchTooLargeError
from pase.ir.costgraph import CostGraph
from pase.limits import default_memory_budget_bytes
from pase.search.exact import (
    _THREADED_WORK,
    DEFAULT_ORDERING,
    SearchResult,
    _threads,
    prune_dominated,
    solve as solve_unfolded,
)

__all__ = ["FoldedSearchResult", "Fold", "find_chain", "fold_chain", "solve"]

_BYTES = 8  # float64 tables
# Candidate periods tried per pass: the distances at which most cost vectors recur.
_PERIODS = 8
# A fold must save at least this many sums (about 30 ms): below, the pruning, detection and
# rebuilding of the graph cost more than they save (resnet101's short stages at p=64).
_MIN_SAVED_WORK = 1 << 24
# Elements per temporary of a min-plus product (4 MiB): cache-sized, as exact.py's tiles.
_TILE = 1 << 19
# Entries of a slab of an elimination step's table (512 KiB): it and its scratch stay in a 2 MiB L2 cache
# while every configuration of the eliminated vertex is added in.
_STEP_SLAB = 1 << 16


@dataclass(frozen=True, eq=False)
class FoldedSearchResult(SearchResult):
    """A :class:`~pase.search.exact.SearchResult` of a search that folded repeated blocks.

    ``cost`` and ``assignment`` are those of the original graph (the cost is
    :meth:`CostGraph.cost_of` of the assignment). ``ordering`` and ``steps``
    describe the exact search of the folded graph, whose vertices are renumbered;
    ``max_table_entries``, ``max_dependent_set`` and ``total_work`` cover it and
    the block tables; ``peak_table_bytes`` adds the fold's tables, which are held
    until the assignment is recovered.

    Attributes
    ----------
    blocks_folded : int
        Blocks solved by the min-plus chains instead of step by step.
    block_tables : int
        Block tables built (one per chain).
    block_table_entries : int
        Entries of those tables, together.
    """

    blocks_folded: int = 0
    block_tables: int = 0
    block_table_entries: int = 0


@dataclass(frozen=True)
class Chain:
    """A chain of ``blocks`` identical blocks of ``period`` vertices after port ``start`` (see the module notes).

    ``shared`` lists the vertices outside the chain that every block's interior reads.
    """

    start: int
    period: int
    blocks: int
    shared: tuple[int, ...]

    @property
    def end(self) -> int:
        """The last port, ``c_k``."""
        return self.start + self.period * self.blocks


@dataclass(frozen=True, eq=False)
class Fold:
    """One folded chain: the smaller graph and how to map its assignments back.

    Attributes
    ----------
    graph : CostGraph
        The graph with the chain replaced (see the module notes); its optimum
        equals the original's.
    chain : Chain
    table_entries : int
        Entries of the block table ``T`` (all shared configurations).
    work : int
        Sums the block table and the min-plus products examined.
    held_bytes : int
        Memory the fold keeps for recovery (block factors, powers of ``T``).
    """

    graph: CostGraph
    chain: Chain
    table_entries: int
    work: int
    held_bytes: int
    _origin: tuple[int, ...]  # original vertex of each new one (the merged vertex: c_k)
    _merged: tuple[int, ...]  # shared vertices then c_k, merged into the vertex at c_k's place
    _block: _BlockTable
    _powers: list[np.ndarray]  # T^(2^j), each (shared configurations, K, K)
    _partials: list[np.ndarray]  # products of the powers of k's binary digits, highest first

    def expand(self, assignment: Sequence[int]) -> np.ndarray:
        """An assignment of the original graph from one of :attr:`graph`, of the same cost if optimal.

        Configurations of the vertices kept are copied; those of the folded
        ones are the least-cost completion given the chain's ends and shared
        vertices, so an optimal assignment maps to an optimal one.
        """
        chain, n_orig = self.chain, len(self._origin) + chain_removed(self.chain)
        out = np.zeros(n_orig, dtype=np.int64)
        for new, old in enumerate(self._origin):
            out[old] = assignment[new]
        merged_at = self._origin.index(chain.end)
        if len(self._merged) > 1:
            shape = [self._block.counts[v] for v in self._merged]
            for v, x in zip(self._merged, np.unravel_index(int(assignment[merged_at]), shape), strict=True):
                out[v] = int(x)
        s = int(np.ravel_multi_index([out[v] for v in chain.shared], self._block.shared_shape)) if chain.shared else 0
        ports = self._ports(s, int(out[chain.start]), int(out[chain.end]))
        for i in range(1, chain.blocks):
            out[chain.start + i * chain.period] = ports[i]
        for i in range(chain.blocks):
            offset = i * chain.period
            fixed = {chain.start: ports[i], chain.start + chain.period: ports[i + 1]}
            fixed.update((v, int(out[v])) for v in chain.shared)
            for v, x in self._block.complete(fixed).items():
                out[v + offset] = x
        return out

    def _ports(self, s: int, first: int, last: int) -> list[int]:
        """Configurations of ``c_0 .. c_k`` minimising the chain given its ends and shared configuration ``s``."""
        digits = _binary_digits(self.chain.blocks)
        tail: list[int] = [last]  # ports from the end backwards
        z = last
        for i in range(len(digits) - 1, 0, -1):
            j = digits[i]
            y = int(np.argmin(self._partials[i - 1][s, first, :] + self._powers[j][s, :, z]))
            tail.extend(reversed(self._between(j, s, y, z)))
            tail.append(y)
            z = y
        tail.extend(reversed(self._between(digits[0], s, first, z)))
        tail.append(first)
        return tail[::-1]

    def _between(self, j: int, s: int, x: int, z: int) -> list[int]:
        """Ports strictly inside a run of ``2**j`` blocks from port configuration ``x`` to ``z``, in order."""
        if j == 0:
            return []
        half = self._powers[j - 1][s]
        y = int(np.argmin(half[x, :] + half[:, z]))
        return self._between(j - 1, s, x, y) + [y] + self._between(j - 1, s, y, z)


def chain_removed(chain: Chain) -> int:
    """Vertices a fold of ``chain`` removes: its interior vertices and ports but the last, and the shared ones."""
    return chain.period * chain.blocks - 1 + len(chain.shared)


def solve(
    cost_graph: CostGraph,
    *,
    ordering: str = DEFAULT_ORDERING,
    memory_budget_bytes: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SearchResult:
    """Minimise ``cost_graph``'s objective exactly, folding chains of identical blocks first.

    Parameters
    ----------
    cost_graph : CostGraph
    ordering : str
        The ordering heuristic of the exact search of the folded graph (a name
        from :data:`~pase.search.exact.ORDERINGS`; an explicit permutation
        names vertices the fold removes, so it goes to
        :func:`pase.search.exact.solve` directly).
    memory_budget_bytes : int, optional
        Bound on the memory of the fold's tables and the search together.
        Default: :func:`~pase.limits.default_memory_budget_bytes`.
    progress : callable(done, total), optional
        As :func:`pase.search.exact.solve`, ``total`` being the vertices of
        ``cost_graph``; the folded ones count as done at once.

    Returns
    -------
    SearchResult
        A :class:`FoldedSearchResult` when a chain was folded, else the plain
        search's result. The optimum is the plain search's either way.

    Raises
    ------
    SearchTooLargeError
        As :func:`pase.search.exact.solve` (a fold that does not fit the budget
        is not made; if the folded graph's search does not fit, the plain one
        is tried).
    ValueError
        Unknown ordering name.
    """
    start = time.perf_counter()
    budget = default_memory_budget_bytes() if memory_budget_bytes is None else int(memory_budget_bytes)
    memo: dict = {}
    first = find_chain(cost_graph, memo=memo)
    # Pruning only shrinks the blocks, so a first chain that saves too little unpruned is not worth it.
    if first is None or _plan(cost_graph, _Wiring(cost_graph, memo), first).saved < _MIN_SAVED_WORK:
        return solve_unfolded(cost_graph, ordering=ordering, memory_budget_bytes=budget, progress=progress)
    # Dominated configurations go first: the blocks' tables shrink with them (the search
    # would prune them anyway), and an optimum survives.
    pruned, kept = prune_dominated(cost_graph)
    folds: list[Fold] = []
    graph, held = pruned, 0
    while (chain := find_chain(graph, memo=memo)) is not None:
        fold = fold_chain(graph, chain, memory_budget_bytes=budget - held, memo=memo)
        if fold is None:
            break
        folds.append(fold)
        graph, held = fold.graph, held + fold.held_bytes
    if not folds:
        return solve_unfolded(cost_graph, ordering=ordering, memory_budget_bytes=budget, progress=progress)
    n, removed = cost_graph.num_nodes, cost_graph.num_nodes - graph.num_nodes
    if progress is not None:
        progress(removed, n)
    try:
        inner = solve_unfolded(graph, ordering=ordering, memory_budget_bytes=budget - held,
                               progress=None if progress is None else lambda done, _: progress(removed + done, n))
    except SearchTooLargeError:
        # The fold's tables take part of the budget: the plain search may still fit.
        folds.clear()
        return solve_unfolded(cost_graph, ordering=ordering, memory_budget_bytes=budget, progress=progress)
    assignment = inner.assignment
    for fold in reversed(folds):
        assignment = fold.expand(assignment)
    assignment = np.array([kept[v][a] for v, a in enumerate(assignment)], dtype=np.int64)
    values = {f.name: getattr(inner, f.name) for f in fields(SearchResult)}
    values.update(
        cost=cost_graph.cost_of(assignment),
        assignment=assignment,
        max_table_entries=max(inner.max_table_entries, max(f.table_entries for f in folds)),
        total_work=inner.total_work + sum(f.work for f in folds),
        max_dependent_set=max(inner.max_dependent_set, max(len(f.chain.shared) + 2 for f in folds)),
        pruned_configs=sum(cost_graph.config_counts) - sum(pruned.config_counts) + inner.pruned_configs,
        peak_table_bytes=inner.peak_table_bytes + held,
        search_time_s=time.perf_counter() - start,
    )
    return FoldedSearchResult(**values, blocks_folded=sum(f.chain.blocks for f in folds), block_tables=len(folds),
                              block_table_entries=sum(f.table_entries for f in folds))


# -- detection ---------------------------------------------------------------------------------


class _Wiring:
    """Neighbours of every vertex with keys of their edges, to compare blocks quickly and then exactly.

    ``nbrs[v][w] = (v_is_source, matrix)``. :meth:`key` hashes an array's
    shape and bytes (once per distinct array object, and once for all graphs
    given the same ``memo``; an edge's only when it is compared), so unequal
    matrices are told apart at once; equal keys are confirmed by comparing the
    arrays, each pair once (:meth:`equal`).
    """

    def __init__(self, graph: CostGraph, memo: dict[int, tuple[np.ndarray, int]] | None = None):
        self._memo = {} if memo is None else memo
        self.graph = graph
        self._compared: dict[tuple[int, int], bool] = {}  # (id, id) of two arrays of ``graph`` -> equal
        self.node_keys = [self.key(c) for c in graph.node_costs]
        self.nbrs: list[dict[int, tuple[bool, np.ndarray]]] = [{} for _ in range(graph.num_nodes)]
        for u, v, m in graph.edges:
            self.nbrs[u][v] = (True, m)
            self.nbrs[v][u] = (False, m)

    def key(self, a: np.ndarray) -> int:
        """A hash of ``a``'s shape and bytes: equal arrays have equal keys."""
        if id(a) not in self._memo:  # the entry holds the array, so its id cannot be reused
            self._memo[id(a)] = (a, hash((a.shape, a.tobytes())))
        return self._memo[id(a)][1]

    def equal(self, a: np.ndarray, b: np.ndarray) -> bool:
        """``np.array_equal(a, b)`` of two of the graph's arrays, remembered (the blocks compare the same pairs)."""
        if a is b:
            return True
        pair = (id(a), id(b))
        if pair not in self._compared:
            self._compared[pair] = np.array_equal(a, b)
        return self._compared[pair]

    def same_node(self, v: int, w: int) -> bool:
        """Whether vertices ``v`` and ``w`` have equal cost vectors."""
        costs = self.graph.node_costs
        return self.node_keys[v] == self.node_keys[w] and self.equal(costs[v], costs[w])

    def same_edge(self, x: tuple[bool, np.ndarray], y: tuple[bool, np.ndarray]) -> bool:
        """Whether two entries of :attr:`nbrs` are equal matrices in the same orientation."""
        return x[0] == y[0] and (x[1] is y[1] or self.key(x[1]) == self.key(y[1]) and self.equal(x[1], y[1]))


def _relative_wiring(wiring: _Wiring, v: int, prev_port: int, period: int, interior: bool) -> dict | None:
    """Neighbours of ``v`` in the block after ``prev_port``: relative positions, or ("s", id) outside.

    For a port (``interior`` False), neighbours outside the block are left out.
    """
    out = {}
    for w, edge in wiring.nbrs[v].items():
        r = w - prev_port
        if 0 <= r <= period:
            out[r] = edge
        elif interior:
            out[("s", w)] = edge
    return out


def _same_wiring(wiring: _Wiring, a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(wiring.same_edge(a[x], b[x]) for x in a)


def _chain_from(wiring: _Wiring, start: int, period: int) -> Chain | None:
    """The longest chain of at least two blocks of ``period`` vertices after port ``start``, or None."""
    n = wiring.graph.num_nodes
    if start + 2 * period >= n:
        return None
    pattern = [_relative_wiring(wiring, start + j, start, period, j < period) for j in range(1, period + 1)]
    if not any(0 in p for p in pattern):
        return None  # the block does not read the previous port: nothing to chain
    shared = sorted({x[1] for p in pattern for x in p if isinstance(x, tuple)})
    blocks = 1
    while True:
        port = start + blocks * period
        if port + period >= n or any(not port < w <= port + period for w in wiring.nbrs[port] if w < port - period
                                     or w > port):
            break
        if not all(wiring.same_node(start + j, port + j)
                   and _same_wiring(wiring, pattern[j - 1],
                                    _relative_wiring(wiring, port + j, port, period, j < period))
                   for j in range(1, period + 1)):
            break
        blocks += 1
    # A shared vertex lies outside the chain: stop before the block holding one.
    for s in shared:
        if s > start:
            blocks = min(blocks, (s - start - 1) // period)
    return Chain(start, period, blocks, tuple(shared)) if blocks >= 2 else None


def find_chain(cost_graph: CostGraph, *, memo: dict | None = None) -> Chain | None:
    """The chain of identical blocks (see the module notes) covering the most vertices, or None.

    ``memo`` caches the arrays' hashes between calls on graphs that share
    arrays (a graph and its folds); any dict, initially empty.

    Candidate periods are the distances between consecutive vertices of
    equal cost vectors at which the most cost vectors recur; for each, chains are tried from every port in
    increasing order (and, once one is found, from the next ``period - 1``
    vertices, keeping the longest), the next attempt starting at its end.
    """
    wiring = _Wiring(cost_graph, memo)
    keys = np.array(wiring.node_keys, dtype=np.int64)
    last: dict[int, int] = {}
    gaps = set()
    for v, k in enumerate(wiring.node_keys):
        if k in last:
            gaps.add(v - last[k])
        last[k] = v
    # A period's score: vertices whose cost vector recurs that far on (a block's worth at least).
    scores = {d: int(np.count_nonzero(keys[d:] == keys[:-d])) for d in gaps}
    candidates = sorted((d for d in scores if scores[d] >= d), key=lambda d: (-scores[d], d))[:_PERIODS]
    best: Chain | None = None
    n = cost_graph.num_nodes
    for period in candidates:
        # A chain after port ``start`` has a second block whose cost vectors are the first's, so
        # ``possible[start]``: keys[start + j] == keys[start + period + j] for j = 1..period; where
        # that fails, _chain_from would find no chain, so it is not asked.
        same = np.concatenate([[0], np.cumsum(keys[period:] == keys[:-period])])
        possible = np.zeros(n, dtype=bool)
        ends = max(0, n - 2 * period)  # the starts with start + 2 * period < n
        possible[:ends] = same[period + 1:period + 1 + ends] - same[1:1 + ends] == period
        start = 0
        while start + 2 * period < n:
            chain = _chain_from(wiring, start, period) if possible[start] else None
            if chain is None:
                start += 1
                continue
            # The blocks may equally well start at another of their vertices: keep the longest.
            for phase in range(start + 1, start + period):
                other = _chain_from(wiring, phase, period) if possible[phase] else None
                if other is not None and other.blocks > chain.blocks:
                    chain = other
            if best is None or chain.blocks * period > best.blocks * best.period:
                best = chain
            start = chain.end
    return best


# -- folding ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _BlockTable:
    """One block's interior eliminated: the table over its boundary and what back-substitution needs.

    ``steps`` lists, per interior vertex in elimination order, the factors
    (scope, array) of its bucket; ``counts`` maps every vertex involved to
    its configuration count.
    """

    table: np.ndarray  # (shared configurations, K(c0), K(c1))
    shared_shape: tuple[int, ...]
    counts: dict[int, int]
    steps: list[tuple[int, list[tuple[tuple[int, ...], np.ndarray]]]]
    work: int
    held_bytes: int

    def complete(self, fixed: dict[int, int]) -> dict[int, int]:
        """Least-cost configurations of the interior (block-1 ids) given the boundary's in ``fixed``."""
        values = dict(fixed)
        for v, bucket in reversed(self.steps):
            total = np.zeros(self.counts[v])
            for scope, array in bucket:
                total += array[tuple(slice(None) if x == v else values[x] for x in scope)]
            values[v] = int(np.argmin(total))
        return {v: x for v, x in values.items() if v not in fixed}


def _block_factors(graph: CostGraph, wiring: _Wiring, chain: Chain) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """Cost terms of the first block: its vertices' costs, its edges and the edges to the previous port and shared."""
    first, port = chain.start + 1, chain.start + chain.period
    factors: list[tuple[tuple[int, ...], np.ndarray]] = [((v,), graph.node_costs[v]) for v in range(first, port + 1)]
    for v in range(first, port + 1):
        for w, (v_is_source, m) in wiring.nbrs[v].items():
            inside = first <= w <= port
            if (inside and w < v) or (not inside and (v < port or w == chain.start)):
                factors.append(((v, w) if v_is_source else (w, v), m))
    return factors


def _plan_elimination(factors: list[tuple[tuple[int, ...], np.ndarray]], interior: list[int],
                      counts: dict[int, int]) -> tuple[list[int], int, int, int]:
    """Greedy order of the interior (smallest bucket first); its sums, tables' entries and largest table."""
    scopes = [frozenset(s) for s, _ in factors]
    left, order, work, tables, largest = set(interior), [], 0, 0, 0
    while left:
        def size(v):
            return math.prod(counts[x] for x in frozenset().union(*(s for s in scopes if v in s)))
        v = min(sorted(left), key=size)
        union = frozenset().union(*(s for s in scopes if v in s))
        entries = size(v)
        work, largest = work + entries, max(largest, entries // counts[v])
        tables += entries // counts[v]
        scopes = [s for s in scopes if v not in s] + [union - {v}]
        left.remove(v)
        order.append(v)
    return order, work, tables, largest


def _eliminate(factors: list[tuple[tuple[int, ...], np.ndarray]], order: list[int], counts: dict[int, int],
               boundary: tuple[int, ...]) -> tuple[np.ndarray, list]:
    """Min-sum elimination of ``order``; the sum of what is left, with axes ``boundary``, and the buckets.

    A step adds its bucket's terms one configuration of the vertex at a time
    and folds each sum into the running minimum, so its scratch is two arrays
    of its table's size, never one of the table's size times the vertex's
    configurations (:func:`_step`).
    """
    factors = list(factors)
    steps = []
    for v in order:
        bucket = [f for f in factors if v in f[0]]
        factors = [f for f in factors if v not in f[0]]
        axes = (v,) + tuple(sorted(set().union(*(s for s, _ in bucket)) - {v}))
        aligned = [_aligned(scope, array, axes, counts) for scope, array in bucket]
        factors.append((axes[1:], _step(aligned, [counts[x] for x in axes[1:]])))
        steps.append((v, bucket))
    table = np.zeros([counts[x] for x in boundary])
    for scope, array in factors:
        table += _aligned(scope, array, boundary, counts)
    return table, steps


def _step(aligned: list[np.ndarray], shape: list[int]) -> np.ndarray:
    """``min over x of aligned[0][x] + aligned[1][x] + ...``, a new array of ``shape``.

    Each term is ``(K, ...)``, broadcasting to ``(K, *shape)``. The terms are
    added in their order, each sum in the smallest shape its terms broadcast
    to: only the additions that reach the table's shape and the minimum pass
    over a whole table, and every entry is the very sequence of additions of
    the plain loop, so the table is the same bit for bit. A step of at most
    ``_TILE`` sums is done at once, a larger one a configuration ``x`` at a
    time, slab by slab of ``_STEP_SLAB`` entries (scratch: one slab per
    thread; a large step shares its slabs among threads, :func:`_shared_out`).
    """
    k, size = len(aligned[0]), math.prod(shape)
    if k * size <= _TILE or not shape:
        total = aligned[0]
        for a in aligned[1:]:
            total = total + a
        return np.asarray(np.broadcast_to(total, [k, *shape]).min(axis=0))
    # The first term whose sum with those before it spans the whole table.
    spans, full = aligned[0].shape[1:], len(aligned) - 1
    for i, a in enumerate(aligned):
        spans = np.broadcast_shapes(spans, a.shape[1:])
        if math.prod(spans) == size:
            full = i
            break
    table = np.full(shape, np.inf)
    # The table in slabs along its first axis, each with its scratch within the L2 cache.
    rows = max(1, _STEP_SLAB // (size // shape[0]))

    def fill(starts: Sequence[int]) -> None:
        for r0 in starts:
            r1 = min(r0 + rows, shape[0])
            part = [a if a.shape[1] == 1 else a[:, r0:r1] for a in aligned]
            small, large = part[:full], part[full:]
            slab = table[r0:r1]
            total = np.empty_like(slab)
            for x in range(k):
                if small:
                    head = small[0][x]
                    for a in small[1:]:
                        head = head + a[x]
                    np.add(head, large[0][x], out=total)
                else:
                    np.copyto(total, large[0][x])
                for a in large[1:]:
                    total += a[x]
                np.minimum(slab, total, out=slab)

    _shared_out(fill, range(0, shape[0], rows), k * size)
    return table


def _shared_out(fill: Callable[[Sequence], None], items: Sequence, work: int) -> None:
    """Call ``fill`` on ``items``, split into runs among threads when the job takes ``work`` sums or more.

    At least ``_THREADED_WORK`` sums get as many threads as the exact
    search's large steps (:func:`~pase.search.exact._threads`), each filling
    a run of the items. numpy releases the GIL while it adds, and the items
    fill disjoint parts of one table, so the table is the same however many
    threads fill it.
    """
    threads = min(_threads(), len(items)) if work >= _THREADED_WORK else 1
    if threads <= 1:
        fill(items)
        return
    runs = [items[len(items) * t // threads:len(items) * (t + 1) // threads] for t in range(threads)]
    with ThreadPoolExecutor(threads - 1) as pool:
        jobs = [pool.submit(fill, run) for run in runs[1:]]
        fill(runs[0])
        for job in jobs:
            job.result()


def _aligned(scope: tuple[int, ...], array: np.ndarray, axes: tuple[int, ...], counts: dict[int, int]) -> np.ndarray:
    """``array`` (axes ``scope``) transposed and reshaped to broadcast against axes ``axes``."""
    present = [x for x in axes if x in scope]
    moved = array.transpose([scope.index(x) for x in present])
    return moved.reshape([counts[x] if x in scope else 1 for x in axes])


def _min_plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``out[s, i, j] = min over m of a[s, i, m] + b[s, m, j]``, in row chunks of about ``_TILE`` sums
    (in threads when large, :func:`_shared_out`)."""
    shared, rows, inner = a.shape
    cols = b.shape[2]
    out = np.empty((shared, rows, cols))
    chunk = max(1, _TILE // (inner * cols))

    def fill(tiles: Sequence[tuple[int, int]]) -> None:
        for s, r0 in tiles:
            r1 = min(rows, r0 + chunk)
            out[s, r0:r1] = (a[s, r0:r1, :, None] + b[s, None, :, :]).min(axis=1)

    _shared_out(fill, [(s, r0) for s in range(shared) for r0 in range(0, rows, chunk)], shared * rows * inner * cols)
    return out


def _binary_digits(k: int) -> list[int]:
    """Exponents of the powers of two that sum to ``k``, highest first."""
    return [j for j in range(k.bit_length() - 1, -1, -1) if k >> j & 1]


@dataclass(frozen=True, eq=False)
class _FoldPlan:
    """What folding a chain would build and save, known before any table exists (see :func:`_plan`)."""

    factors: list
    order: list[int]
    counts: dict[int, int]
    block_work: int
    largest: int
    shared_shape: tuple[int, ...]
    ks: int
    digits: list[int]
    product_work: int
    table_entries: int
    edge_entries: int
    held: int
    saved: int


def _plan(graph: CostGraph, wiring: _Wiring, chain: Chain) -> _FoldPlan:
    """The block's factors and elimination order, the fold's memory (entries) and the sums it saves.

    The saving compares ``k`` eliminations of a block with one, the min-plus
    products and, with shared vertices, an estimate of what the merged
    vertex adds to the search: each step next to it takes its configurations
    times a neighbour's and one more vertex's.
    """
    counts_all = graph.config_counts
    c0, c1, ck = chain.start, chain.start + chain.period, chain.end
    factors = _block_factors(graph, wiring, chain)
    counts = {v: counts_all[v] for scope, _ in factors for v in scope}
    counts.setdefault(c0, counts_all[c0])
    order, block_work, block_entries, largest = _plan_elimination(factors, list(range(c0 + 1, c1)), counts)
    shared_shape = tuple(counts_all[s] for s in chain.shared)
    ks, kc = math.prod(shared_shape), counts_all[c1]
    digits = _binary_digits(chain.blocks)
    product_work = (digits[0] + len(digits) - 1) * ks * kc ** 3
    table_entries = ks * kc * kc
    merged = chain.shared + (ck,)
    kz = ks * counts_all[ck]
    removed = set(range(c0 + 1, ck)) | set(chain.shared)
    outside = {w for v in merged for w in wiring.nbrs[v] if w not in removed and w not in merged}
    edge_entries = sum(kz * counts_all[w] for w in outside) if chain.shared else counts_all[c0] * counts_all[ck]
    held = _BYTES * (sum(a.size for _, a in factors) + block_entries + (digits[0] + len(digits)) * table_entries)
    merge_work = kz * sum(counts_all[w] for w in outside) * max(counts_all) if chain.shared else 0
    saved = chain.blocks * block_work - (block_work + product_work + merge_work)
    return _FoldPlan(factors, order, counts, block_work, largest, shared_shape, ks, digits, product_work,
                     table_entries, edge_entries, held, saved)


def fold_chain(graph: CostGraph, chain: Chain, *, memory_budget_bytes: int, always: bool = False,
               memo: dict | None = None) -> Fold | None:
    """Fold ``chain`` of ``graph`` (found by :func:`find_chain`), or None where that does not pay or fit.

    Parameters
    ----------
    graph : CostGraph
    chain : Chain
    memory_budget_bytes : int
        The fold's tables (block factors, powers of the block table, the new
        edges) must fit in this many bytes, estimated before any is built.
    always : bool
        Fold even if the sums saved do not outweigh the fold's own (a fold
        within the budget is exact either way).
    memo : dict, optional
        As :func:`find_chain`.

    Returns
    -------
    Fold or None
        None where the fold would exceed the budget, or (unless ``always``)
        where the block table, its products and what merging the shared
        vertices adds to the search would examine more sums than the ``k``
        blocks they replace, less ``_MIN_SAVED_WORK``.
    """
    wiring = _Wiring(graph, memo)
    plan = _plan(graph, wiring, chain)
    if plan.held + _BYTES * (2 * plan.largest + plan.edge_entries) > memory_budget_bytes:
        return None
    if not always and plan.saved < _MIN_SAVED_WORK:
        return None
    factors, order, counts, block_work = plan.factors, plan.order, plan.counts, plan.block_work
    c0, c1 = chain.start, chain.start + chain.period
    counts_all, digits, ks, kc = graph.config_counts, plan.digits, plan.ks, counts[c1]
    merged, ck, shared_shape, held = chain.shared + (chain.end,), chain.end, plan.shared_shape, plan.held
    boundary = chain.shared + (c0, c1)
    table, steps = _eliminate(factors, order, counts, boundary)
    powers = [table.reshape(ks, counts[c0], kc)]
    for _ in range(digits[0]):
        powers.append(_min_plus(powers[-1], powers[-1]))
    partials = [powers[digits[0]]]
    for j in digits[1:]:
        partials.append(_min_plus(partials[-1], powers[j]))
    chained = partials[-1]  # (shared configurations, K(c0), K(ck))
    block = _BlockTable(table, shared_shape, {**counts, ck: counts_all[ck]}, steps, block_work, held)
    new_graph, origin = _spliced(graph, wiring, chain, chained)
    return Fold(new_graph, chain, plan.table_entries, block_work + plan.product_work, held, origin, merged, block,
                powers, partials)


def _spliced(graph: CostGraph, wiring: _Wiring, chain: Chain, chained: np.ndarray) -> tuple[CostGraph, tuple]:
    """``graph`` with the chain's blocks replaced by the edge ``c0 -- c_k`` carrying ``chained``.

    ``c_k``'s cost vector is zero (``chained`` holds it). With shared
    vertices, they and ``c_k`` become one vertex (at ``c_k``'s place) whose
    configurations are their combinations in C order (shared vertices
    first); its cost vector holds the shared vertices' costs and the edges
    among the merged vertices, and its edge to each neighbour the sum of
    theirs. Returns the graph and the original vertex of each new one.
    """
    c0, ck = chain.start, chain.end
    counts = graph.config_counts
    merged = chain.shared + (ck,)
    folded = range(c0 + 1, ck)
    origin = tuple(v for v in range(graph.num_nodes) if v not in folded and v not in chain.shared)
    new_id = {v: i for i, v in enumerate(origin)}
    other = -1  # axis label of a merged vertex's neighbour
    axes = merged + (other,)
    shape = [counts[v] for v in merged]
    kz = math.prod(shape)

    def spread(array: np.ndarray, scope: tuple[int, ...], width: int) -> np.ndarray:
        """``array`` (axes ``scope``: members of the merged vertex and maybe ``other``) as (merged, width)."""
        sizes = dict(zip(axes, shape + [width], strict=True))
        full = _aligned(scope, array, axes, sizes)
        return np.broadcast_to(full, shape + [width]).reshape(kz, width)

    z_cost = np.zeros(kz)
    for v in chain.shared:
        z_cost = z_cost + spread(graph.node_costs[v], (v,), 1)[:, 0]
    # c0's edge carries the chain, laid out (merged configurations, c0's).
    z_edges: dict[int, np.ndarray] = {c0: np.moveaxis(chained, 0, 1).reshape(counts[c0], kz).T}
    edges = []
    for u, v, m in graph.edges:
        if u in folded or v in folded:
            continue  # in the block table (the shared vertices' edges into the blocks too)
        if u in merged and v in merged:
            z_cost = z_cost + spread(m, (u, v), 1)[:, 0]
        elif u in merged or v in merged:
            member, far, matrix = (u, v, m) if u in merged else (v, u, m.T)
            if not chain.shared and far != c0:
                edges.append((new_id[u], new_id[v], m))  # c_k alone keeps its edges as they are
            else:
                z_edges[far] = z_edges[far] + spread(matrix, (member, other), counts[far]) if far in z_edges \
                    else spread(matrix, (member, other), counts[far])
        else:
            edges.append((new_id[u], new_id[v], m))
    z = new_id[ck]
    edges += [(z, new_id[w], m) for w, m in z_edges.items()]
    node_costs = [graph.node_costs[v] for v in origin]
    node_costs[z] = z_cost
    names = None
    if graph.names:
        names = [graph.names[v] for v in origin]
        names[z] = "+".join(graph.names[v] for v in merged) + f" (after {chain.blocks} folded blocks)"
    return CostGraph(tuple(node_costs), tuple(edges), names), origin
