"""The searches: cost graphs in (:mod:`.costgraph`), an optimal or good assignment out.

:mod:`.ordering` (vertex orderings), :mod:`.exact` (the paper's dynamic program),
:mod:`.approx` (local search where the exact one is too large), :mod:`.memory`
(the memory-feasible search)."""
