"""The front door: :func:`plan` finds the best strategy, :func:`evaluate` costs a given one.

Both return a :class:`Plan`: the configuration of every layer with its
compute, intra-layer and edge communication time under the paper's cost model,
and its memory per device (:mod:`pase.model.memory`).

Memory limit
------------
When the device memory is known (``cluster.memory_bytes``, or
``PlanOptions.memory_limit_bytes`` given), :func:`plan` returns the cheapest
strategy that fits (:func:`pase.search.memory.solve_within_memory`); if the
unconstrained optimum fits, it is that optimum, found by one search exactly as
without a limit. ``PlanOptions(memory_limit_bytes=None)`` turns the limit off. With no
capacity known (``memory_bytes=None``, the ``paper-model`` preset) nothing
changes from the paper's search. When no strategy fits,
:class:`~pase.model.memory.InsufficientMemoryError` gives the least memory any
strategy needs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Mapping, Sequence

import numpy as np

from pase.search.approx import ApproxResult
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions, check_config
from pase.model.cost import CostModel, LayerCost, build_cost_model
from pase.errors import ConfigurationError, GraphError
from pase.ir.graph import Graph
from pase.model.memory import InsufficientMemoryError, MemoryOptions, MemoryReport, build_memory_model
from pase.search.memory import MemorySearchResult, solve_within_memory
from pase.search.exact import DEFAULT_ORDERING, SearchResult
from pase.search.solver import Progress, Solver, exact, exact_or_approximate
from pase.strategies.baselines import BASELINES

__all__ = ["Plan", "PlanOptions", "plan", "evaluate", "evaluate_all", "parallelism_kind"]


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
    search : SearchResult, ApproxResult or None
        Statistics of the search, when the strategy came from one
        (``ApproxResult`` when the exact search was too large).
    memory : MemoryReport or None
        Memory per device of the strategy: ``memory.layers`` per layer (same
        order as ``layers``), ``memory.per_device_bytes`` in total,
        ``memory.capacity_bytes`` the capacity it is held against.
    memory_search : MemorySearchResult or None
        When a memory limit applied: the bound, gap and effort of the
        memory-feasible search.
    edge_costs_s : mapping (producer, consumer) -> float
        Seconds to redistribute each edge (see :meth:`CostModel.edge_costs_s`).
    cost_model : str
        The cost model that priced it (``"corrected"`` or ``"paper"``).
    """

    graph: Graph
    cluster: Cluster
    label: str
    layers: tuple[LayerCost, ...]
    cost: float
    search: SearchResult | ApproxResult | None = None
    memory: MemoryReport | None = None
    memory_search: MemorySearchResult | None = None
    edge_costs_s: Mapping[tuple[str, str], float] | None = None
    cost_model: str = "corrected"

    @property
    def exact(self) -> bool:
        """False when the strategy came from the approximate search (no optimality guarantee)."""
        return not isinstance(self.search, ApproxResult)

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

    @property
    def memory_per_device_bytes(self) -> float | None:
        """Peak memory one device needs for this strategy, in bytes (see :mod:`pase.model.memory`)."""
        return None if self.memory is None else self.memory.per_device_bytes

    @property
    def memory_capacity_bytes(self) -> float | None:
        """Memory of one device the plan is held against: the limit searched under, else the cluster's."""
        return None if self.memory is None else self.memory.capacity_bytes

    @property
    def fits_memory(self) -> bool | None:
        """Whether the strategy fits in device memory; ``None`` when the capacity is unknown."""
        return None if self.memory is None else self.memory.fits

    def speedup_over(self, other: "Plan") -> float:
        """How many times faster this plan's step is than ``other``'s: ``other.step_time_s / self.step_time_s``.

        A graph whose layers do no work (data movement only) can take 0 s a
        step: two zero step times are equally fast, a speedup of 1.0, and a
        zero step time against a positive one is infinite (``float("inf")``).
        """
        if self.step_time_s == 0:
            return 1.0 if other.step_time_s == 0 else float("inf")
        return other.step_time_s / self.step_time_s

    def to_dict(self) -> dict:
        """JSON-ready summary: totals and one record per layer (the CLI's ``--json``).

        Includes the rates of :func:`pase.analysis.throughput.throughput`
        (``samples_per_s``, ``tokens_per_s``, ``model_flops_per_step``,
        ``model_flops_per_device_per_s``, ``mfu``), None where undefined.
        """
        from pase.analysis.throughput import throughput  # late: keeps pase.planner's imports light

        from pase.io.strategy_json import FORMAT, VERSION  # late: pase.io imports the planner

        out = {
            "format": FORMAT, "version": VERSION,  # docs/plan-format.md
            "model": self.graph.name,
            "label": self.label,
            "devices": self.cluster.devices,
            "cluster": {
                "name": self.cluster.name,
                "peak_flops": self.cluster.peak_flops,
                "bandwidth_Bps": self.cluster.bandwidth_Bps,
                "bytes_per_element": self.cluster.bytes_per_element,
                "memory_bytes": self.cluster.memory_bytes,
                "nodes": self.cluster.nodes,
                "devices_per_node": self.cluster.node_size,
                "inter_bandwidth_Bps": self.cluster.network_bandwidth_Bps,
            },
            "cost_model": self.cost_model,
            "mesh": str(self.cluster.mesh),
            "cost": self.cost,
            "step_time_s": self.step_time_s,
            **self.totals_s(),
            "memory_per_device_bytes": self.memory_per_device_bytes,
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "fits_memory": self.fits_memory,
            # Today's units (pase.analysis.throughput); None where undefined (no sequence, a 0 s step).
            **throughput(self).rates(),
            "layers": [
                {
                    "name": r.name, "op": r.op, "dims": "".join(r.dims) if all(len(d) == 1 for d in r.dims) else list(r.dims),
                    "sizes": list(r.sizes), "config": list(r.config),
                    "parallelism": parallelism_kind(r.dims, r.config), "placement": r.placement,
                    "flops": r.flops, "compute_s": r.compute_s,
                    "intra_comm_s": r.intra_comm_s, "edge_comm_s": r.edge_comm_s,
                    # The paper's FLOP-equivalent units: seconds at the device's peak rate.
                    "cost_flop_eq": r.total_s * self.cluster.peak_flops,
                }
                for r in self.layers
            ],
        }
        if self.memory is not None:
            out["memory"] = self.memory.totals()
            for record, m in zip(out["layers"], self.memory.layers):
                record["memory_bytes"] = m.resident_bytes
                record["buffer_bytes"] = m.buffer_bytes
        if self.memory_search is not None:
            ms = self.memory_search
            out["memory_search"] = {
                "capacity_bytes": ms.capacity_bytes, "lower_bound": ms.lower_bound, "gap": ms.gap,
                "optimal": ms.optimal, "multiplier": ms.multiplier, "solves": ms.solves,
                "subproblems": ms.subproblems, "excluded_configs": ms.excluded_configs,
                "unconstrained_cost": ms.unconstrained_cost,
            }
        if self.search is not None:
            out["search_time_s"] = self.search.search_time_s
            out["exact"] = self.exact
            out["max_dependent_set"] = self.search.max_dependent_set
            out["max_table_entries"] = self.search.max_table_entries
        return out


@dataclass(frozen=True)
class PlanOptions:
    """What :func:`plan` searches over, and under which limits.

    Parameters
    ----------
    configs : ConfigOptions
        The split space (which factors each layer may take) and the cost model
        (``configs.cost_model``: ``"corrected"`` or the paper's).
    memory : MemoryOptions
        Optimizer and precision for the memory count.
    memory_limit_bytes : float, None or "cluster"
        Memory per device the strategy must fit in: ``"cluster"`` (default)
        takes ``cluster.memory_bytes`` (no limit when that is ``None``);
        ``None``: no limit.
    ordering : str, optional
        Vertex ordering of the exact search (default: the search's best of
        several heuristics; any ordering gives the same optimum).
    search_budget_bytes : int, optional
        Memory the exact search may allocate for its tables (default: a share
        of this machine's free memory); a larger search is handed to the
        approximate one or refused.
    max_memory_solves : int
        Searches the memory-feasible search may run before it stops and
        reports its gap (``Plan.memory_search``).
    memory_gap_tolerance : float
        The memory-feasible search stops once its strategy is proved within
        this fraction of the best that fits (default 0.5%; 0: prove optimality).
    approximate : bool
        Fall back to the approximate search when the exact one is too large
        (default); False raises ``SearchTooLargeError`` instead.
    """

    configs: ConfigOptions = ConfigOptions()
    memory: MemoryOptions = MemoryOptions()
    memory_limit_bytes: float | None | Literal["cluster"] = "cluster"
    ordering: str | None = None
    search_budget_bytes: int | None = None
    max_memory_solves: int = 100
    memory_gap_tolerance: float = 0.005
    approximate: bool = True

    def capacity(self, cluster: Cluster) -> float | None:
        """The memory limit per device, in bytes, that applies on ``cluster`` (None: no limit)."""
        return cluster.memory_bytes if self.memory_limit_bytes == "cluster" else self.memory_limit_bytes


def plan(
    graph: Graph,
    cluster: Cluster,
    options: PlanOptions = PlanOptions(),
    *,
    progress: Progress | None = None,
    model: CostModel | None = None,
) -> Plan:
    """Find the strategy of minimum modelled step time for ``graph`` on ``cluster``.

    The search is exact (the paper's dynamic program). Where no ordering keeps
    its tables within the memory budget (DenseNet's dense concatenations),
    ``options.approximate`` falls back to :func:`pase.search.approx.improve`,
    seeded with every baseline strategy: never worse than the best baseline,
    optimality not guaranteed (``Plan.exact`` is then False).

    Parameters
    ----------
    graph : Graph
    cluster : Cluster
    options : PlanOptions
        Split space, cost model, memory limit and search settings.
    progress : callable(done, total), optional
        Called as the search advances.
    model : CostModel, optional
        Tables already built for this graph, cluster and ``options.configs``.

    Raises
    ------
    GraphError
        The graph is invalid.
    SearchTooLargeError
        The exact search would exceed its memory budget and
        ``options.approximate`` is False; nothing was allocated.
    InsufficientMemoryError
        A memory limit applies and no strategy fits; ``least_bytes`` is the
        least memory any strategy needs.

    Examples
    --------
    >>> from pase import ops as layers
    >>> from pase.hardware.cluster import Cluster
    >>> from pase.ir.graph import Graph
    >>> g = Graph("mlp")
    >>> g.add_layer(layers.fully_connected("fc1", b=64, n=256, c=256))
    >>> g.add_layer(layers.fully_connected("fc2", b=64, n=256, c=256), inputs=["fc1"])
    >>> p = plan(g, Cluster(devices=4, peak_flops=10e12, bandwidth_Bps=16e9))
    >>> sorted(p.strategy)
    ['fc1', 'fc2']
    """
    model = model or build_cost_model(graph, cluster, options.configs)
    solver = _solver(model, options)
    kwargs = {"memory_budget_bytes": options.search_budget_bytes, "progress": progress}
    limit = options.capacity(cluster)
    if limit is None:
        result = solver(model.cost_graph(), **kwargs)
        assignment = {layer.name: int(result.assignment[i]) for i, layer in enumerate(model.layers)}
        chosen = {name: model.configs[name][k:k + 1] for name, k in assignment.items()}
        memory = build_memory_model(graph, cluster, options.memory, configs=chosen, config_options=options.configs)
        report = memory.report({name: 0 for name in chosen}, cluster.memory_bytes)
        return Plan(graph, cluster, "PaSE", tuple(model.breakdown(assignment)), float(result.cost), result, report,
                    edge_costs_s=model.edge_costs_s(assignment), cost_model=model.options.cost_model)
    memory = build_memory_model(graph, cluster, options.memory, configs=model.configs,
                                config_options=options.configs)
    fit = _fit(model, memory, limit, options, solver, kwargs)
    assignment = {layer.name: int(fit.assignment[i]) for i, layer in enumerate(model.layers)}
    search = replace(fit.first_search, cost=fit.cost, assignment=fit.assignment, search_time_s=fit.search_time_s)
    return Plan(graph, cluster, "PaSE", tuple(model.breakdown(assignment)), float(fit.cost), search,
                memory.report(assignment, limit), fit, model.edge_costs_s(assignment), model.options.cost_model)


def _solver(model: CostModel, options: PlanOptions) -> Solver:
    """The exact search, falling back (when allowed) to local search seeded with every applicable baseline."""
    ordering = options.ordering or DEFAULT_ORDERING
    if not options.approximate:
        return exact(ordering)

    def seeds():
        return [[model.config_index(layer.name, strategy[layer.name]) for layer in model.layers]
                for baseline in BASELINES.values() if baseline.applies(model.graph)
                for _, strategy in baseline.candidates(model.graph, model.cluster.devices, options.configs)]

    return exact_or_approximate(seeds, ordering)


def _fit(model: CostModel, memory, limit: float, options: PlanOptions, solver: Solver, kwargs) -> MemorySearchResult:
    """The memory-feasible search, with the reserve taken off the capacity and errors in whole-strategy terms."""
    reserved = options.memory.reserve_on(model.cluster)
    try:
        fit = solve_within_memory(model.cost_graph(), memory.resident_vectors(), limit - reserved,
                                  transient=memory.buffer_vectors(), max_solves=options.max_memory_solves,
                                  gap_tolerance=options.memory_gap_tolerance, solver=solver, **kwargs)
    except InsufficientMemoryError as exc:
        least = exc.least_bytes + reserved
        raise InsufficientMemoryError(
            f"no strategy for {model.graph.name!r} fits in {limit / 1e9:.3g} GB per device on "
            f"{model.cluster.devices} devices: the least any strategy needs is {least / 1e9:.3g} GB "
            "(more devices, a smaller batch or a larger memory would help)", limit, least) from None
    return replace(fit, capacity_bytes=limit, memory_bytes=fit.memory_bytes + reserved)


def evaluate(
    graph: Graph,
    cluster: Cluster,
    strategy: Mapping[str, tuple[int, ...]],
    options: PlanOptions = PlanOptions(),
    *,
    label: str = "user",
) -> Plan:
    """Cost a complete strategy (layer name -> configuration) under the same model as :func:`plan`.

    ``options.configs.cost_model`` names the cost model and ``options.memory``
    the memory count; the split-space options do not restrict a given
    strategy. The plan's memory is held against the limit ``options`` names
    (``Plan.fits_memory``); a strategy that does not fit is still costed.

    Raises
    ------
    GraphError
        The graph is invalid or the strategy names a layer it does not have.
    ConfigurationError
        A layer is missing from ``strategy`` or its configuration is invalid
        (wrong length, a factor that does not divide, more devices than the
        cluster has, or, under the corrected model, a device count that does
        not divide the cluster's).
    """
    return evaluate_all(graph, cluster, [(label, strategy)], options)[0]


def evaluate_all(
    graph: Graph,
    cluster: Cluster,
    strategies: Sequence[tuple[str, Mapping[str, tuple[int, ...]]]],
    options: PlanOptions = PlanOptions(),
) -> list[Plan]:
    """:func:`evaluate` of several ``(label, strategy)`` pairs, in order, with one cost and one memory model.

    Each layer's tables hold the distinct configurations the strategies give
    it, so what the strategies share is costed once (the baselines' variants
    mostly differ in a few layers). Raises as :func:`evaluate`.
    """
    rows_of: dict[str, dict[tuple[int, ...], int]] = {layer.name: {} for layer in graph}
    assignments = []
    for _, strategy in strategies:
        unknown = sorted(set(strategy) - set(rows_of))
        if unknown:
            raise GraphError(f"strategy names layers graph {graph.name!r} does not have: {unknown[:5]}")
        assignment = {}
        for layer in graph:
            if layer.name not in strategy:
                raise ConfigurationError(f"strategy gives no configuration for layer {layer.name!r}")
            cfg = check_config(layer, strategy[layer.name], cluster.devices, options.configs)
            assignment[layer.name] = rows_of[layer.name].setdefault(cfg, len(rows_of[layer.name]))
        assignments.append(assignment)
    configs = {name: np.array(list(rows), dtype=np.int64) for name, rows in rows_of.items()}
    model = build_cost_model(graph, cluster, options.configs, configs=configs)
    memory_model = build_memory_model(graph, cluster, options.memory, configs=configs,
                                      config_options=options.configs)
    plans = []
    for (label, _), assignment in zip(strategies, assignments, strict=True):
        rows = model.breakdown(assignment)
        memory = memory_model.report(assignment, options.capacity(cluster))
        plans.append(Plan(graph, cluster, label, tuple(rows), model.strategy_cost(rows), memory=memory,
                          edge_costs_s=model.edge_costs_s(assignment), cost_model=options.configs.cost_model))
    return plans
