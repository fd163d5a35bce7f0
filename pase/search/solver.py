"""The solver interface every search meets, and the searches composed through it.

A :class:`Solver` takes a :class:`~pase.ir.costgraph.CostGraph` and returns a
:class:`Solution`: an assignment (one configuration index per vertex) and its
cost. The exact search (:func:`pase.search.exact.solve`, after folding chains of
identical blocks with :func:`pase.search.fold.solve`), the approximate one
(:func:`pase.search.approx.improve`) and their composition
(:func:`exact_or_approximate`) are solvers; the memory-feasible search
(:func:`pase.search.memory.solve_within_memory`) and the planner take any
solver, so a stage search can call the per-layer search through the same
interface.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np

from pase.errors import SearchTooLargeError
from pase.search.approx import improve
from pase.ir.costgraph import CostGraph
from pase.search import fold
from pase.search.exact import DEFAULT_ORDERING, solve

__all__ = ["Progress", "Solution", "Solver", "exact", "exact_or_approximate"]

Progress = Callable[[int, int], None]
"""``progress(done, total)``, called as a search advances."""


class Solution(Protocol):
    """What a solver returns (:class:`~pase.search.exact.SearchResult`, :class:`~pase.search.approx.ApproxResult`)."""

    cost: float
    assignment: np.ndarray
    max_dependent_set: int
    max_table_entries: int
    search_time_s: float


class Solver(Protocol):
    """``solver(cost_graph, progress=..., memory_budget_bytes=...)`` -> :class:`Solution`.

    ``memory_budget_bytes`` bounds the memory a search may allocate for its
    tables; a solver that cannot stay within it raises
    :class:`~pase.errors.SearchTooLargeError` before allocating.
    """

    def __call__(self, cost_graph: CostGraph, *, progress: Progress | None = None,
                 memory_budget_bytes: int | None = None) -> Solution: ...


def exact(ordering: str | Sequence[int] = DEFAULT_ORDERING) -> Solver:
    """The paper's exact dynamic program with vertex ordering ``ordering`` (see :func:`~pase.search.exact.solve`).

    With an ordering heuristic (a name), chains of identical blocks are folded
    first (:func:`pase.search.fold.solve`): the same optimum, found faster. An
    explicit ordering names every vertex, so that search runs unfolded.
    """
    def solver(cost_graph, *, progress=None, memory_budget_bytes=None):
        return _exact(cost_graph, ordering, progress, memory_budget_bytes)

    return solver


def _exact(cost_graph: CostGraph, ordering: str | Sequence[int], progress: Progress | None,
           memory_budget_bytes: int | None) -> Solution:
    """The exact search of :func:`exact`."""
    search = fold.solve if isinstance(ordering, str) else solve
    return search(cost_graph, ordering=ordering, progress=progress, memory_budget_bytes=memory_budget_bytes)


def exact_or_approximate(seeds: Callable[[], Sequence[Sequence[int]]],
                         ordering: str | Sequence[int] = DEFAULT_ORDERING) -> Solver:
    """The exact search, or, where its tables would exceed the budget, local search from ``seeds()``.

    ``seeds`` is called once, the first time the exact search is refused; it
    returns assignments to start from (the planner passes every applicable
    baseline), so the result is never worse than the best seed. The fallback's
    result is an :class:`~pase.search.approx.ApproxResult` (no optimality
    guarantee).
    """
    cached: list = []

    def solver(cost_graph, *, progress=None, memory_budget_bytes=None):
        try:
            return _exact(cost_graph, ordering, progress, memory_budget_bytes)
        except SearchTooLargeError:
            if not cached:
                cached.append([list(s) for s in seeds()])
            return improve(cost_graph, cached[0], progress=progress)

    return solver
