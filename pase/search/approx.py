"""Large-neighbourhood search for cost graphs too large for the exact search.

When every elimination ordering leaves a dependent set too large to tabulate
(DenseNet's dense concatenations put ~25 layers in one), :func:`improve`
starts from given assignments (the baselines' strategies) and repeatedly
re-optimises a window of consecutive vertices *exactly* with
:func:`pase.search.exact.solve`, every vertex outside the window held fixed. A
window's optimum is never worse than its current assignment, so the cost
never rises: the result is at least as good as the best seed, though not
guaranteed optimal.

Like the search, this module sees only arrays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from pase.ir.costgraph import CostGraph
from pase.errors import SearchTooLargeError
from pase.search.exact import estimate, solve

__all__ = ["ApproxResult", "improve"]

# Largest table one window's exact search may build (float64 entries).
DEFAULT_WINDOW_TABLE_ENTRIES = 2_000_000


@dataclass(frozen=True, eq=False)
class ApproxResult:
    """A strategy found by :func:`improve`, with no optimality guarantee.

    Attributes
    ----------
    cost : float
        Objective of ``assignment``; at most the cheapest seed's.
    assignment : numpy.ndarray
        Configuration index per vertex, vertex-id order.
    seed_costs : tuple of float
        Objective of every seed, in the order given.
    rounds : int
        Passes over all windows (the last one improved nothing, unless
        ``max_rounds`` stopped it).
    windows_solved : int
        Exact window searches run.
    max_dependent_set, max_table_entries : int
        Largest dependent set and table over all window searches.
    search_time_s : float
        Wall time, seconds.
    """

    cost: float
    assignment: np.ndarray
    seed_costs: tuple[float, ...]
    rounds: int
    windows_solved: int
    max_dependent_set: int
    max_table_entries: int
    search_time_s: float
    exact: bool = False


def _incident(cost_graph: CostGraph) -> list[list[int]]:
    inc: list[list[int]] = [[] for _ in range(cost_graph.num_nodes)]
    for k, (u, v, _) in enumerate(cost_graph.edges):
        inc[u].append(k)
        inc[v].append(k)
    return inc


def _window_problem(cost_graph: CostGraph, window: Sequence[int], a: np.ndarray, inc) -> CostGraph:
    """The subproblem over ``window`` with every other vertex fixed at ``a``."""
    pos = {v: i for i, v in enumerate(window)}
    nodes = [np.array(cost_graph.node_costs[v], dtype=float) for v in window]
    edges, seen = [], set()
    for v in window:
        for k in inc[v]:
            if k in seen:
                continue
            seen.add(k)
            u, w, m = cost_graph.edges[k]
            if u in pos and w in pos:
                edges.append((pos[u], pos[w], m))
            elif u in pos:
                nodes[pos[u]] += m[:, a[w]]
            else:
                nodes[pos[w]] += m[a[u], :]
    return CostGraph(tuple(nodes), tuple(edges))


def improve(
    cost_graph: CostGraph,
    seeds: Sequence[Sequence[int]],
    *,
    window_table_entries: int = DEFAULT_WINDOW_TABLE_ENTRIES,
    max_rounds: int = 20,
    progress: Callable[[int, int], None] | None = None,
) -> ApproxResult:
    """Improve the best of ``seeds`` by exact re-optimisation of vertex windows.

    Windows are runs of consecutive vertex ids (the cost model numbers layers
    in topological order, so a run is a stretch of the network), as long as
    the exact search over the run stays within ``window_table_entries``;
    consecutive windows overlap by half. Passes repeat until one improves
    nothing or ``max_rounds`` is reached.

    Parameters
    ----------
    cost_graph : CostGraph
    seeds : sequence of assignments
        Starting points (configuration index per vertex); at least one.
    window_table_entries : int
        Largest table a window's search may build.
    max_rounds : int
        Most passes over all windows.
    progress : callable(done, total), optional
        Called after each window, ``total`` being the windows of a pass.

    Raises
    ------
    ValueError
        No seed, or a seed of the wrong length or with an index out of range.
    SearchTooLargeError
        A single vertex's configurations exceed ``window_table_entries``.

    Examples
    --------
    >>> import numpy as np
    >>> g = CostGraph((np.array([0.0, 1.0]), np.array([1.0, 0.0])),
    ...               ((0, 1, np.array([[5.0, 5.0], [0.0, 5.0]])),))
    >>> r = improve(g, [[0, 1]])
    >>> r.cost, r.assignment.tolist()
    (2.0, [1, 0])
    """
    start = time.perf_counter()
    n = cost_graph.num_nodes
    counts = np.asarray(cost_graph.config_counts)
    if not seeds:
        raise ValueError("improve() needs at least one seed assignment")
    checked = []
    for i, seed in enumerate(seeds):
        a = np.asarray(seed, dtype=np.int64)
        if a.shape != (n,) or np.any(a < 0) or np.any(a >= counts):
            raise ValueError(f"seed {i} is not an assignment of {n} vertices within their configuration counts")
        checked.append(a)
    seed_costs = tuple(cost_graph.cost_of(a) for a in checked)
    a = checked[int(np.argmin(seed_costs))].copy()
    cost = min(seed_costs)
    if counts.max() > window_table_entries:
        raise SearchTooLargeError(
            f"a vertex has {counts.max()} configurations, more than a window's budget of {window_table_entries} entries"
        )
    inc = _incident(cost_graph)
    windows = _windows(cost_graph, a, inc, window_table_entries)
    solved = max_dep = max_entries = rounds = 0
    for rounds in range(1, max_rounds + 1):
        before = cost
        for i, window in enumerate(windows):
            sub = _window_problem(cost_graph, window, a, inc)
            result = solve(sub)
            solved += 1
            max_dep = max(max_dep, result.max_dependent_set)
            max_entries = max(max_entries, result.max_table_entries)
            a[list(window)] = result.assignment
            cost = cost_graph.cost_of(a)
            if progress is not None:
                progress(i + 1, len(windows))
        if cost >= before * (1 - 1e-12):
            break
    return ApproxResult(
        cost=float(cost), assignment=a, seed_costs=seed_costs, rounds=rounds, windows_solved=solved,
        max_dependent_set=max_dep, max_table_entries=max_entries, search_time_s=time.perf_counter() - start,
    )


def _windows(cost_graph: CostGraph, a: np.ndarray, inc, limit: int) -> list[tuple[int, ...]]:
    """Runs of consecutive vertices, each as long as its exact search fits ``limit``, overlapping by half.

    A run fits when its largest table has at most ``limit`` entries and no
    dependent set exceeds ``pase.limits.MAX_DEPENDENT_SET``; one vertex always fits.
    """
    n = cost_graph.num_nodes
    windows, start = [], 0
    while start < n:
        length = 1
        while start + length < n:
            trial = tuple(range(start, start + 2 * length if start + 2 * length <= n else n))
            try:
                entries = estimate(_window_problem(cost_graph, trial, a, inc)).max_table_entries
            except SearchTooLargeError:  # a dependent set too large to tabulate at all
                break
            if entries > limit:
                break
            length = len(trial)
        windows.append(tuple(range(start, start + length)))
        if start + length >= n:
            break
        start += max(1, length // 2)
    return windows
