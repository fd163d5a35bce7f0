"""The front door: :func:`plan` finds the best strategy, :func:`evaluate` costs a given one.

Both return a :class:`Plan`: the configuration of every layer with its
compute, intra-layer and edge communication time under the paper's cost model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from pase.cluster import Cluster
from pase.configs import ConfigOptions, check_config
from pase.cost import CostModel, LayerCost, build_cost_model
from pase.errors import ConfigurationError, GraphError
from pase.graph import Graph
from pase.search import SearchResult, solve

__all__ = ["Plan", "plan", "evaluate", "parallelism_kind"]


def parallelism_kind(layer_dims: tuple[str, ...], config: tuple[int, ...], batch_dim: str = "b") -> str:
    """Name the kind of parallelism of a configuration.

    ``"replicated"``: nothing split; ``"data"``: only the batch dimension;
    ``"parameter"``: only other dimensions; ``"hybrid"``: both.

    >>> parallelism_kind(("b", "n", "c"), (4, 1, 2))
    'hybrid'
    """
    batch = any(f > 1 for d, f in zip(layer_dims, config) if d == batch_dim)
    other = any(f > 1 for d, f in zip(layer_dims, config) if d != batch_dim)
    return {(False, False): "replicated", (True, False): "data", (False, True): "parameter"}.get(
        (batch, other), "hybrid"
    )


@dataclass(frozen=True, eq=False)
class Plan:
    """A strategy for a graph on a cluster, with its modelled cost.

    Attributes
    ----------
    graph, cluster
        What was planned.
    label : str
        Who chose the strategy ("PaSE", "data parallel", "user"...).
    layers : tuple of LayerCost
        Per layer, in topological order: configuration and cost breakdown.
    cost : float
        Total in FLOP-equivalents (the paper's F(G, phi)).
    search : SearchResult or None
        Statistics of the search, when the strategy came from one.
    """

    graph: Graph
    cluster: Cluster
    label: str
    layers: tuple[LayerCost, ...]
    cost: float
    search: SearchResult | None = None

    @property
    def step_time_s(self) -> float:
        """Estimated training step time in seconds (cost / peak FLOP/s)."""
        return self.cost / self.cluster.peak_flops

    @property
    def strategy(self) -> dict[str, tuple[int, ...]]:
        """Layer name -> configuration."""
        return {row.name: row.config for row in self.layers}

    def totals_s(self) -> dict[str, float]:
        """Step time split into compute, intra-layer and edge communication, in seconds."""
        return {
            "compute_s": sum(r.compute_s for r in self.layers),
            "intra_comm_s": sum(r.intra_comm_s for r in self.layers),
            "edge_comm_s": sum(r.edge_comm_s for r in self.layers),
        }

    def speedup_over(self, other: "Plan") -> float:
        """How many times faster this plan's step is than ``other``'s."""
        return other.step_time_s / self.step_time_s

    def to_dict(self) -> dict:
        """JSON-ready summary: totals and one record per layer (the CLI's ``--json``)."""
        out = {
            "model": self.graph.name,
            "label": self.label,
            "devices": self.cluster.devices,
            "cluster": {
                "name": self.cluster.name,
                "peak_flops": self.cluster.peak_flops,
                "bandwidth_Bps": self.cluster.bandwidth_Bps,
                "bytes_per_element": self.cluster.bytes_per_element,
            },
            "cost": self.cost,
            "step_time_s": self.step_time_s,
            **self.totals_s(),
            "layers": [
                {
                    "name": r.name, "op": r.op, "dims": "".join(r.dims) if all(len(d) == 1 for d in r.dims) else list(r.dims),
                    "sizes": list(r.sizes), "config": list(r.config),
                    "parallelism": parallelism_kind(r.dims, r.config),
                    "flops": r.flops, "compute_s": r.compute_s,
                    "intra_comm_s": r.intra_comm_s, "edge_comm_s": r.edge_comm_s,
                }
                for r in self.layers
            ],
        }
        if self.search is not None:
            out["search_time_s"] = self.search.search_time_s
            out["max_dependent_set"] = self.search.max_dependent_set
            out["max_table_entries"] = self.search.max_table_entries
        return out


def plan(
    graph: Graph,
    cluster: Cluster,
    *,
    options: ConfigOptions = ConfigOptions(),
    ordering: str | None = None,
    memory_budget_bytes: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    model: CostModel | None = None,
) -> Plan:
    """Find the strategy of minimum modelled step time for ``graph`` on ``cluster``.

    Parameters
    ----------
    graph : Graph
    cluster : Cluster
    options : ConfigOptions
        Which split factors to consider.
    ordering : str, optional
        Vertex ordering of the search (default: the search's best).
    memory_budget_bytes : int, optional
        Refuse searches whose tables would exceed this.
    progress : callable(done, total), optional
        Called as the search advances.
    model : CostModel, optional
        Tables already built for this graph, cluster and options.

    Raises
    ------
    GraphError
        The graph is invalid.
    SearchTooLargeError
        The search would exceed its memory budget; nothing was allocated.

    Examples
    --------
    >>> from pase import layers, Graph, Cluster
    >>> g = Graph("mlp")
    >>> g.add_layer(layers.fully_connected("fc1", b=64, n=256, c=256))
    >>> g.add_layer(layers.fully_connected("fc2", b=64, n=256, c=256), inputs=["fc1"])
    >>> p = plan(g, Cluster(devices=4, peak_flops=10e12, bandwidth_Bps=16e9))
    >>> sorted(p.strategy)
    ['fc1', 'fc2']
    """
    model = model or build_cost_model(graph, cluster, options)
    kwargs = {"memory_budget_bytes": memory_budget_bytes, "progress": progress}
    if ordering is not None:
        kwargs["ordering"] = ordering
    result = solve(model.cost_graph(), **kwargs)
    assignment = {layer.name: int(result.assignment[i]) for i, layer in enumerate(model.layers)}
    return Plan(graph, cluster, "PaSE", tuple(model.breakdown(assignment)), float(result.cost), result)


def evaluate(graph: Graph, cluster: Cluster, strategy: Mapping[str, tuple[int, ...]], *, label: str = "user") -> Plan:
    """Cost a complete strategy (layer name -> configuration) under the same model as :func:`plan`.

    Raises
    ------
    GraphError
        The graph is invalid or the strategy names a layer it does not have.
    ConfigurationError
        A layer is missing from ``strategy`` or its configuration is invalid
        (wrong length, a factor that does not divide, more devices than the
        cluster has).
    """
    unknown = sorted(set(strategy) - {layer.name for layer in graph})
    if unknown:
        raise GraphError(f"strategy names layers graph {graph.name!r} does not have: {unknown[:5]}")
    configs = {}
    for layer in graph:
        if layer.name not in strategy:
            raise ConfigurationError(f"strategy gives no configuration for layer {layer.name!r}")
        configs[layer.name] = np.array([check_config(layer, strategy[layer.name], cluster.devices)])
    model = build_cost_model(graph, cluster, configs=configs)
    rows = model.breakdown({name: 0 for name in configs})
    r = cluster.flops_per_byte
    cost = sum(row.compute_flops + r * (row.intra_comm_bytes + row.edge_comm_bytes) for row in rows)
    return Plan(graph, cluster, label, tuple(rows), float(cost))
