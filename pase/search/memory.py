"""The cheapest strategy that fits in device memory, over plain cost arrays.

Problem: given a :class:`~pase.ir.costgraph.CostGraph` and, per vertex and
configuration, *resident* bytes ``m[v][a]`` (added over vertices) and
*transient* bytes ``t[v][a]`` (only the largest counts), find::

    min  cost(a)   subject to   sum_v m[v][a_v] + max_v t[v][a_v] <= capacity

The strategy search (:func:`pase.search.exact.solve`) minimises cost alone; memory
is added without changing it.

Method
------
1. **Reduction.** ``T_lo = max_v min_a t[v][a]`` is a floor on any strategy's
   largest buffer. A configuration is dropped when it cannot fit even with
   every other vertex at its smallest: ``m[v][a] + sum_{u != v} min m[u] +
   max(T_lo, t[v][a]) > capacity``. If the smallest total over all strategies
   exceeds the capacity, :class:`~pase.model.memory.InsufficientMemoryError` says
   so with that least total (computed exactly, see :func:`least_memory`).
2. **Lagrangian relaxation.** For a multiplier ``lambda >= 0`` the search on
   vertex costs ``cost + lambda * m`` gives ``L(lambda) = min_a [cost(a) +
   lambda (m(a) - budget)]``, a lower bound on the constrained optimum. The
   best ``lambda`` is found exactly by the one-dimensional cutting-plane
   method: keep the cheapest over-budget strategy ``a`` and a within-budget
   strategy ``b`` (initially the least-memory one), evaluate ``L`` where their
   lines cross, and replace one of them, until ``L`` meets the crossing
   (finitely many steps: every step adds a strategy's line below the others).
   Every within-budget strategy met is a candidate solution.
3. **Branch and bound** closes the gap between the bound and the best
   strategy found: a subproblem that cannot beat the incumbent is dropped;
   otherwise it is split, either on the largest-buffer interval (strategies
   whose largest buffer is at most / above the candidate's, each with its
   own budget ``capacity - T_lo``), or on one vertex where ``a`` and ``b``
   differ (that vertex fixed to ``a``'s configuration / that configuration
   removed). Subproblems are solved cheapest bound first.

Between the bound and branching, a cheap repair (:func:`mix`) builds good
strategies from the two Lagrangian ones; on models of repeated blocks (a
Transformer's layers) it leaves a gap of a fraction of a percent, which
branching on single vertices closes only slowly.

When the tree is exhausted the answer is optimal (``gap == 0``). Otherwise
(``max_solves`` reached, or the gap is within ``gap_tolerance``) the result is
the best strategy found, which always fits, with ``lower_bound``: no fitting
strategy costs less, and ``gap = (cost - lower_bound) / cost``. If the unconstrained optimum fits, it
is returned after one search, unchanged.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from itertools import count
from typing import Any, Sequence

import numpy as np

from pase.ir.costgraph import CostGraph
from pase.search.solver import Solver, exact
from pase.model.memory import InsufficientMemoryError

__all__ = ["MemorySearchResult", "solve_within_memory", "least_memory", "peak_memory", "mix"]

# Relative tolerance for comparing costs (bounds against incumbents).
REL_TOL = 1e-9
# Cutting-plane steps per subproblem, at most.
MAX_DUAL_STEPS = 60


@dataclass(frozen=True)
class MemorySearchResult:
    """Outcome of :func:`solve_within_memory`.

    Attributes
    ----------
    assignment : ndarray
        One configuration index per vertex; always fits the capacity.
    cost : float
        Its cost (the cost graph's unit).
    memory_bytes : float
        Its resident total plus its largest buffer.
    capacity_bytes : float
        The capacity searched under.
    lower_bound : float
        No strategy that fits costs less.
    gap : float
        ``(cost - lower_bound) / cost``; 0 when proved optimal.
    optimal : bool
        The search finished: ``cost`` is the constrained optimum.
    multiplier : float
        The best Lagrange multiplier of the whole problem (cost per byte);
        0 when the unconstrained optimum fits.
    solves : int
        Strategy searches run.
    subproblems : int
        Branch-and-bound subproblems solved.
    excluded_configs : int
        Configurations dropped at the root because they cannot fit.
    unconstrained_cost : float
        Cost of the unconstrained optimum (a lower bound too).
    search_time_s : float
        Wall time of the whole procedure.
    first_search : object
        The search's own result for the unconstrained problem (statistics).
    """

    assignment: np.ndarray
    cost: float
    memory_bytes: float
    capacity_bytes: float
    lower_bound: float
    gap: float
    optimal: bool
    multiplier: float
    solves: int
    subproblems: int
    excluded_configs: int
    unconstrained_cost: float
    search_time_s: float
    first_search: Any = field(default=None, repr=False, compare=False)


def peak_memory(resident: Sequence[np.ndarray], transient: Sequence[np.ndarray], assignment) -> float:
    """Resident total plus largest transient of ``assignment``."""
    a = np.asarray(assignment)
    return float(sum(resident[v][a[v]] for v in range(len(a))) + max(
        (transient[v][a[v]] for v in range(len(a))), default=0.0))


def least_memory(resident: Sequence[np.ndarray], transient: Sequence[np.ndarray]) -> tuple[float, np.ndarray]:
    """The least ``peak_memory`` of any assignment, and one assignment that attains it.

    For each candidate largest buffer ``T`` (every transient value at least
    ``max_v min t[v]``), every vertex takes its least resident configuration
    among those with ``t <= T``; the best ``T`` wins.
    """
    values = np.unique(np.concatenate([np.asarray(t, float) for t in transient]))
    floor = max(float(np.min(t)) for t in transient)
    best, best_assign = np.inf, None
    for T in values[values >= floor]:
        assign = []
        total = float(T)
        for m, t in zip(resident, transient):
            ok = np.flatnonzero(t <= T)
            a = int(ok[np.argmin(m[ok])])
            assign.append(a)
            total += float(m[a])
        if total < best:
            best, best_assign = total, np.array(assign)
    return best, best_assign


def mix(cost_graph: CostGraph, a, b, resident, transient, capacity_bytes: float) -> np.ndarray | None:
    """A strategy between ``a`` (cheap, too big) and ``b``: some groups of vertices switched to ``b``'s configurations.

    The vertices where ``a`` and ``b`` differ fall into groups connected by
    edges; switching one group changes the cost by its own terms only, so the
    groups are switched cheapest cost per byte saved first until the
    strategy fits, then any group not needed is switched back. When ``a`` and
    ``b`` are both optimal for the same multiplier, every group costs the
    multiplier per byte, so the result is within ``multiplier x slack`` of the
    bound. ``None`` when even ``b`` does not fit.
    """
    a, b = np.asarray(a), np.asarray(b)
    diff = [int(v) for v in np.flatnonzero(a != b)]
    if not diff:
        return None
    parent = {v: v for v in diff}

    def root(v):
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for u, v, _ in cost_graph.edges:
        if u in parent and v in parent:
            parent[root(u)] = root(v)
    groups: dict[int, list[int]] = {}
    for v in diff:
        groups.setdefault(root(v), []).append(v)
    base = cost_graph.cost_of(a)
    items = []
    for group in groups.values():
        y = a.copy()
        y[group] = b[group]
        saved = float(sum(resident[v][a[v]] - resident[v][b[v]] for v in group))
        items.append((cost_graph.cost_of(y) - base, saved, group))
    x, chosen = a.copy(), []
    for extra, saved, group in sorted((i for i in items if i[1] > 0), key=lambda i: i[0] / i[1]):
        x[group] = b[group]
        chosen.append((extra, group))
        if peak_memory(resident, transient, x) <= capacity_bytes:
            break
    else:
        return None
    for extra, group in sorted(chosen, key=lambda i: -i[0]):
        if extra > 0:
            y = x.copy()
            y[group] = a[group]
            if peak_memory(resident, transient, y) <= capacity_bytes:
                x = y
    return x


@dataclass
class _Node:
    allowed: list  # per vertex, sorted array of allowed configuration indices
    lo: int  # index into the sorted transient values: largest buffer >= values[lo]
    hi: int  # ... and <= values[hi]
    bound: float


def _sub_graph(cg: CostGraph, allowed: list) -> CostGraph:
    """``cg`` restricted to the configurations ``allowed[v]`` of every vertex."""
    costs = tuple(cg.node_costs[v][idx] for v, idx in enumerate(allowed))
    edges = tuple((u, v, m[np.ix_(allowed[u], allowed[v])]) for u, v, m in cg.edges)
    return CostGraph(costs, edges, cg.names)


def _penalised(cg: CostGraph, extra: Sequence[np.ndarray], lam: float) -> CostGraph:
    """``cg`` with ``lam * extra[v]`` added to every vertex's costs."""
    return CostGraph(tuple(c + lam * e for c, e in zip(cg.node_costs, extra)), cg.edges, cg.names)


def solve_within_memory(
    cost_graph: CostGraph,
    resident: Sequence[np.ndarray],
    capacity_bytes: float,
    *,
    transient: Sequence[np.ndarray] | None = None,
    solver: Solver | None = None,
    max_solves: int = 200,
    gap_tolerance: float = 0.0,
    **solve_kwargs,
) -> MemorySearchResult:
    """The cheapest assignment whose memory fits ``capacity_bytes`` (module docstring).

    Parameters
    ----------
    cost_graph : CostGraph
    resident : sequence of 1-D arrays
        Per vertex, bytes per configuration that add up over vertices.
    capacity_bytes : float
    transient : sequence of 1-D arrays, optional
        Per vertex, bytes per configuration of which only the largest counts
        (default: none).
    solver : Solver, optional
        The search run on every subproblem (:class:`~pase.search.solver.Solver`;
        default the exact search).
    max_solves : int
        Stop branching after this many searches and report the gap.
    gap_tolerance : float
        Stop as soon as ``(cost - lower_bound) / cost`` is at most this
        (0: prove optimality).
    **solve_kwargs
        Passed to every search (``progress``, ``memory_budget_bytes``).

    Raises
    ------
    InsufficientMemoryError
        No assignment fits; the message and ``least_bytes`` give the least
        memory any assignment needs.
    """
    start = time.perf_counter()
    solver = solver or exact()
    n = cost_graph.num_nodes
    res = [np.asarray(m, dtype=float) for m in resident]
    tra = [np.zeros_like(m) for m in res] if transient is None else [np.asarray(t, dtype=float) for t in transient]
    if len(res) != n or len(tra) != n or any(len(r) != len(c) or len(t) != len(c)
                                            for r, t, c in zip(res, tra, cost_graph.node_costs)):
        raise ValueError("resident and transient memory need one vector per vertex, one entry per configuration")
    def refuse_unless_some_fits() -> np.ndarray:
        least, least_assign = least_memory(res, tra)
        if least > capacity_bytes:
            raise InsufficientMemoryError(
                f"no strategy fits in {capacity_bytes / 1e9:.3g} GB per device: the least any strategy needs "
                f"is {least / 1e9:.3g} GB", capacity_bytes, least)
        return least_assign

    # Every vertex at its least resident bytes and the largest of their least buffers bounds any assignment's
    # peak from below: past the capacity, refuse before searching (the exact least, for the message, only then).
    if sum(float(r.min()) for r in res) + max((float(t.min()) for t in tra), default=0.0) > capacity_bytes:
        refuse_unless_some_fits()

    solves = 0

    def search(cg):
        nonlocal solves
        solves += 1
        r = solver(cg, **solve_kwargs)
        return r, np.asarray(r.assignment, dtype=np.int64)

    first, x0 = search(cost_graph)
    unconstrained = float(first.cost)
    if peak_memory(res, tra, x0) <= capacity_bytes:
        return MemorySearchResult(
            x0, unconstrained, peak_memory(res, tra, x0), capacity_bytes, unconstrained, 0.0, True, 0.0,
            solves, 0, 0, unconstrained, time.perf_counter() - start, first)

    least_assign = refuse_unless_some_fits()
    values = np.unique(np.concatenate(tra))
    floor = max(float(np.min(t)) for t in tra)
    inc_assign = least_assign
    inc_cost = cost_graph.cost_of(inc_assign)

    def consider(assign):
        nonlocal inc_assign, inc_cost
        if peak_memory(res, tra, assign) <= capacity_bytes:
            c = cost_graph.cost_of(assign)
            if c < inc_cost:
                inc_assign, inc_cost = np.array(assign), c

    def reduce(node: _Node):
        """Drop configurations that cannot fit in the node; None if nothing fits."""
        budget = capacity_bytes - values[node.lo]
        allowed = [idx[tra[v][idx] <= values[node.hi]] for v, idx in enumerate(node.allowed)]
        if any(len(idx) == 0 for idx in allowed):
            return None, budget
        mins = np.array([res[v][idx].min() for v, idx in enumerate(allowed)])
        rest = mins.sum()
        if rest > budget:
            return None, budget
        allowed = [idx[res[v][idx] + (rest - mins[v]) <= budget] for v, idx in enumerate(allowed)]
        return allowed, budget

    def dual(allowed, budget):
        """Cutting-plane maximisation of L over lambda: (bound, over-budget a, within-budget b, lambda)."""
        sub = _sub_graph(cost_graph, allowed)
        mem = [res[v][idx] for v, idx in enumerate(allowed)]

        def memory_of(x):
            return float(sum(mem[v][x[v]] for v in range(n)))

        r, x = search(sub)
        if memory_of(x) <= budget:
            return float(r.cost), None, x, 0.0, sub
        a, cost_a, mem_a = x, float(r.cost), memory_of(x)
        b = np.array([int(np.argmin(m)) for m in mem])
        cost_b, mem_b = sub.cost_of(b), memory_of(b)
        bound, lam = cost_a, 0.0
        for _ in range(MAX_DUAL_STEPS):
            if solves >= max_solves:
                break
            lam = max((cost_b - cost_a) / (mem_a - mem_b), 0.0)
            envelope = cost_a + lam * (mem_a - budget)
            r, x = search(_penalised(sub, mem, lam))
            value = float(r.cost) - lam * budget
            bound = max(bound, value)
            if value >= envelope - REL_TOL * max(abs(envelope), abs(cost_a), 1.0):
                break
            cx, mx = sub.cost_of(x), memory_of(x)
            if mx > budget:
                a, cost_a, mem_a = x, cx, mx
            else:
                b, cost_b, mem_b = x, cx, mx
        bound = min(bound, cost_b)  # b fits this subproblem's relaxation
        return bound, a, b, lam, sub

    def full(allowed, x):
        return np.array([allowed[v][x[v]] for v in range(n)], dtype=np.int64)

    tie = count()
    root = _Node([np.arange(len(c)) for c in cost_graph.node_costs], int(np.searchsorted(values, floor)),
                 len(values) - 1, unconstrained)
    heap = [(root.bound, next(tie), root)]
    subproblems, excluded, multiplier = 0, 0, 0.0
    while heap:
        bound, _, node = heap[0]
        if bound >= inc_cost - REL_TOL * abs(inc_cost):
            heap = []
            break
        if inc_cost - bound <= gap_tolerance * inc_cost:
            break
        if solves >= max_solves:
            break
        heapq.heappop(heap)
        allowed, budget = reduce(node)
        if allowed is None:
            continue
        if subproblems == 0:
            excluded = sum(len(c) for c in cost_graph.node_costs) - sum(len(idx) for idx in allowed)
        subproblems += 1
        bound, a, b, lam, sub = dual(allowed, budget)
        if subproblems == 1:
            multiplier = lam
        bound = max(bound, node.bound)
        xb = full(allowed, b)
        consider(xb)
        if a is not None:
            mixed = mix(cost_graph, full(allowed, a), xb, res, tra, capacity_bytes)
            if mixed is not None:
                consider(mixed)
        if bound >= inc_cost - REL_TOL * abs(inc_cost):
            continue
        top = max(tra[v][xb[v]] for v in range(n))
        if peak_memory(res, tra, xb) > capacity_bytes and top > values[node.lo]:
            # b fits only under the relaxed buffer floor: split the largest-buffer interval at b's.
            m = int(np.searchsorted(values, top))
            children = [_Node(allowed, node.lo, m - 1, bound), _Node(allowed, m, node.hi, bound)]
        elif a is not None:
            xa = full(allowed, a)
            diff = [v for v in range(n) if xa[v] != xb[v]]
            v = max(diff, key=lambda u: res[u][xa[u]] - res[u][xb[u]])
            fixed = list(allowed)
            fixed[v] = np.array([xa[v]])
            dropped = list(allowed)
            dropped[v] = allowed[v][allowed[v] != xa[v]]
            children = [_Node(fixed, node.lo, node.hi, bound), _Node(dropped, node.lo, node.hi, bound)]
        else:
            continue  # b is this subproblem's optimum and it fits
        for child in children:
            if child.lo <= child.hi:
                heapq.heappush(heap, (child.bound, next(tie), child))
    # Open subproblems carry valid bounds; with none left the incumbent is optimal.
    lower = min([entry[0] for entry in heap] + [inc_cost])
    lower = min(max(lower, unconstrained), inc_cost)
    gap = 0.0 if inc_cost <= 0 else max(inc_cost - lower, 0.0) / inc_cost
    return MemorySearchResult(
        inc_assign, float(inc_cost), peak_memory(res, tra, inc_assign), capacity_bytes, float(lower), gap,
        not heap, multiplier, solves, subproblems, excluded, unconstrained, time.perf_counter() - start, first)
