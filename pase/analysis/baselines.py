"""The named baselines and partial user plans, costed: each a :class:`~pase.planner.Plan`.

The rules themselves (which configuration each baseline gives a layer) are
:mod:`pase.strategies.baselines`; this module evaluates them under the same
cost model as the search, so PaSE's plan can be compared with them.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.planner import Plan, PlanOptions, evaluate, evaluate_all
from pase.strategies.baselines import BASELINES, data_parallel_config

__all__ = ["evaluate_strategy", "baseline_plan", "data_parallel", "applicable_baselines"]

def evaluate_strategy(
    graph: Graph, cluster: Cluster, strategy: Mapping[str, Sequence[int]], *,
    options: ConfigOptions = ConfigOptions(), label: str = "user",
) -> Plan:
    """Cost a complete or partial strategy; layers it leaves out are data parallel.

    Raises
    ------
    GraphError
        The strategy names a layer the graph does not have.
    ConfigurationError
        A configuration is invalid (wrong length, a factor that does not
        divide its dimension, more devices than the cluster has).
    """
    full = {l.name: data_parallel_config(l, cluster.devices, options) for l in graph}
    full.update({name: tuple(cfg) for name, cfg in strategy.items()})
    return evaluate(graph, cluster, full, PlanOptions(configs=options), label=label)


def baseline_plan(name: str, graph: Graph, cluster: Cluster, options: ConfigOptions = ConfigOptions()) -> Plan:
    """The cheapest strategy of baseline ``name`` (all its variants tried), as a Plan labelled with the variant.

    Raises
    ------
    KeyError
        No baseline has that name.
    ValueError
        The baseline does not apply to this graph.
    """
    baseline = BASELINES[name]
    if not baseline.applies(graph):
        raise ValueError(f"baseline {name!r} does not apply to {graph.name!r}")
    plans = evaluate_all(graph, cluster, list(baseline.candidates(graph, cluster.devices, options)),
                         PlanOptions(configs=options))
    return min(plans, key=lambda p: p.cost)


def data_parallel(graph: Graph, cluster: Cluster, options: ConfigOptions = ConfigOptions()) -> Plan:
    """Data parallelism (:func:`data_parallel_config` for every layer) as a Plan."""
    return baseline_plan("data parallel", graph, cluster, options)


def applicable_baselines(graph: Graph, cluster: Cluster, options: ConfigOptions = ConfigOptions()) -> dict[str, Plan]:
    """Every baseline that applies to ``graph``, name -> its best Plan (all variants costed in one model)."""
    variants = [(name, label, strategy) for name, b in BASELINES.items() if b.applies(graph)
                for label, strategy in b.candidates(graph, cluster.devices, options)]
    plans = evaluate_all(graph, cluster, [(label, s) for _, label, s in variants], PlanOptions(configs=options))
    best: dict[str, Plan] = {}
    for (name, _, _), candidate in zip(variants, plans, strict=True):
        if name not in best or candidate.cost < best[name].cost:  # the first of equals, as min() keeps
            best[name] = candidate
    return best
