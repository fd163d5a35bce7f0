"""The searches: cost graphs in (:mod:`pase.ir.costgraph`), an optimal or good assignment out.

:mod:`.ordering` (vertex orderings), :mod:`.exact` (the paper's dynamic program),
:mod:`.approx` (local search where the exact one is too large), :mod:`.memory`
(the memory-feasible search); :mod:`.solver` (the :class:`~pase.search.solver.Solver`
protocol they meet, and the exact search with its approximate fallback)."""
