"""What the explorer's Solve runs in one worker process (:func:`ui.jobs.run`): a module free of Streamlit, so
that the worker imports nothing of the app."""

from __future__ import annotations

from pase.errors import PaseError
from pase.hardware.cluster import Cluster
from pase.ir.graph import Graph
from pase.planner import Plan, PlanOptions

__all__ = ["plan_and_data_parallel"]


def plan_and_data_parallel(graph: Graph, cluster: Cluster, options: PlanOptions, progress=None
                           ) -> tuple[Plan, Plan | PaseError]:
    """The best plan of ``graph`` on ``cluster`` (:func:`pase.planner.plan`, ``progress(done, total)`` following
    it) and data parallelism under the same model (:func:`pase.analysis.baselines.data_parallel`), in one call:
    the explorer shows both after one Solve, and one worker process costs one start and one transfer of the
    graph, not two.

    Returns ``(plan, dp)``; ``dp`` is the PaseError data parallelism raised when it cannot be costed (the
    page says so). Raises what :func:`pase.planner.plan` raises.
    """
    from pase.analysis.baselines import data_parallel
    from pase.planner import plan

    best = plan(graph, cluster, options, progress=progress)
    try:
        dp = data_parallel(graph, cluster, options.configs)
    except PaseError as exc:
        dp = exc
    return best, dp
