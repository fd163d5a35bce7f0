"""Why each layer has its split: the runner-up configuration and how much slower the step would be with it.

For a strategy ``phi`` and a layer ``v``, every other configuration ``k`` of
``v`` is priced with all the other layers kept as ``phi`` has them::

    node(v, k) + sum over edges (v, w) of edge(k, phi(w)) + sum over edges (u, v) of edge(phi(u), k)

which is exactly the change of the whole step's cost when only ``v`` moves
to ``k`` (the cost is a sum of node and edge terms). The runner-up is the
cheapest ``k`` other than ``phi(v)``; its extra time is in seconds. Under a
memory limit the chosen configuration may not be the locally cheapest: a
runner-up can then be faster (a negative extra time) but need more memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.model.cost import CostModel, build_cost_model

__all__ = ["LayerWhy", "explain", "explain_strategy"]


@dataclass(frozen=True)
class LayerWhy:
    """One layer's choice against its runner-up: configurations as split factors, ``slower_s`` in seconds.

    ``runner_up`` and ``slower_s`` are None for a layer with one configuration.
    """

    name: str
    config: tuple[int, ...]
    runner_up: tuple[int, ...] | None
    slower_s: float | None


def explain(model: CostModel, assignment: Mapping[str, int]) -> dict[str, LayerWhy]:
    """Layer name -> its :class:`LayerWhy` under the strategy ``assignment`` (layer name -> configuration row)."""
    graph = model.cost_graph()
    rows = [assignment[name] for name in graph.names]
    local = [np.array(c, dtype=float) for c in graph.node_costs]
    for u, v, table in graph.edges:
        local[u] = local[u] + table[:, rows[v]]
        local[v] = local[v] + table[rows[u], :]
    peak = model.cluster.peak_flops
    out = {}
    for i, name in enumerate(graph.names):
        config = tuple(int(f) for f in model.configs[name][rows[i]])
        if len(local[i]) == 1:
            out[name] = LayerWhy(name, config, None, None)
            continue
        k = int(np.argmin(np.where(np.arange(len(local[i])) == rows[i], np.inf, local[i])))
        out[name] = LayerWhy(name, config, tuple(int(f) for f in model.configs[name][k]),
                             float(local[i][k] - local[i][rows[i]]) / peak)
    return out


def explain_strategy(graph: Graph, cluster: Cluster, strategy: Mapping[str, tuple[int, ...]],
                     options: ConfigOptions = ConfigOptions()) -> dict[str, LayerWhy]:
    """:func:`explain` of a strategy given as layer name -> configuration, over the split space of ``options``.

    Raises
    ------
    ConfigurationError
        A configuration of ``strategy`` is outside that space.
    SearchTooLargeError
        The cost tables would exceed their memory budget (as :func:`~pase.model.cost.build_cost_model`).
    """
    model = build_cost_model(graph, cluster, options)
    return explain(model, {name: model.config_index(name, cfg) for name, cfg in strategy.items()})
