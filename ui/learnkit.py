"""Material for the Learn page: a GEMM's costs and words, and orderings walked step by step.

Plain functions over :mod:`pase` (no Streamlit): the graphs come from
:mod:`pase.models.teaching` (re-exported here for the page), the numbers from
the cost model and :mod:`pase.search.ordering`; this module only names and
arranges them.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions, config_counts
from pase.ir.graph import Graph, Layer
from pase.model.cost import LayerCost, build_cost_model
from pase.models.teaching import GEMM_DIMS, gemm_graph
from pase.search.ordering import adjacency, breadth_first, connected_sets, elimination_steps, generate_seq

__all__ = [
    "gemm_options",
    "gemm_costs",
    "gemm_cost",
    "gemm_communication",
    "Step",
    "ORDERING_FUNCS",
    "walk",
    "small_layout",
]


def gemm_options() -> ConfigOptions:
    """Every divisor allowed (the picture is about the idea, not shard sizes)."""
    return ConfigOptions(min_shard=1)


def _config(layer: Layer, splits: dict[str, int]) -> tuple[int, ...]:
    return tuple(int(splits.get(d, 1)) for d in layer.dims)


def gemm_costs(sizes: tuple[int, int, int], cluster: Cluster) -> list[LayerCost]:
    """The cost breakdown of every configuration of the GEMM on ``cluster`` (pase's cost model)."""
    graph = gemm_graph(*sizes)
    model = build_cost_model(graph, cluster, gemm_options())
    k = len(model.configs["gemm"])
    return [model.breakdown({"gemm": a})[0] for a in range(k)]


def gemm_cost(sizes: tuple[int, int, int], splits: tuple[int, int, int], cluster: Cluster) -> LayerCost:
    """The cost breakdown of one configuration (split factors of i, j, k)."""
    graph = gemm_graph(*sizes)
    layer = graph.layer("gemm")
    cfg = np.array([_config(layer, dict(zip(GEMM_DIMS, splits)))], dtype=np.int64)
    model = build_cost_model(graph, cluster, configs={"gemm": cfg})
    return model.breakdown({"gemm": 0})[0]


def gemm_communication(splits: tuple[int, int, int]) -> list[str]:
    """What each split causes, in words (the contraction rule of :mod:`pase.ops`)."""
    si, sj, sk = splits
    out = []
    if sk > 1:
        out.append(f"**k split {sk} ways** (the reduction): each device sums only part of k, so every block of C "
                   f"is a partial sum over {sk} devices. An all-reduce among them completes C in the forward pass.")
    if sj > 1:
        out.append(f"**j split {sj} ways**: every block of A is needed by {sj} devices (replicated). In the backward "
                   f"pass dA = dC·Bᵀ sums over j, so the {sj} partial dA blocks are all-reduced.")
    if si > 1:
        out.append(f"**i split {si} ways** (rows, the batch for a layer): every block of the weight B is replicated "
                   f"on {si} devices. The weight gradient dB = Aᵀ·dC sums over i, so it is all-reduced among them: "
                   "the gradient all-reduce of data parallelism.")
    if not out:
        out.append("**Nothing split**: one device does the whole product; nothing to communicate, nothing to share.")
    return out


@dataclass(frozen=True)
class Step:
    """One step of an ordering, with names instead of vertex ids."""

    index: int
    vertex: str
    connected: tuple[str, ...]
    dependent: tuple[str, ...]
    table_entries: int
    work: int


def _adjacency(graph: Graph) -> tuple[list[str], list[set[int]]]:
    names = [layer.name for layer in graph.layers]
    index = {n: i for i, n in enumerate(names)}
    return names, adjacency(len(names), [(index[e.src], index[e.dst]) for e in graph.edges])


ORDERING_FUNCS = {"GenerateSeq": generate_seq, "breadth-first": breadth_first}


def walk(graph: Graph, devices: int, options: ConfigOptions, ordering: str, *, connected: bool = True) -> list[Step]:
    """Every step of ``ordering`` ("GenerateSeq" or "breadth-first") on ``graph``: X(i), D(i), table size.

    Vertex ids are positions in ``graph.layers`` (as in the search); table
    sizes use the configuration counts on ``devices`` devices. ``connected``:
    also compute each step's connected set X(i) (skip it on large graphs).
    """
    names, adj = _adjacency(graph)
    counts = config_counts(graph, devices, options)
    k = [counts[n] for n in names]
    order = ORDERING_FUNCS[ordering](adj)
    steps = elimination_steps(adj, k, order)
    xs = connected_sets(adj, order) if connected else [()] * len(order)
    return [Step(i, names[s.vertex], tuple(names[u] for u in x), tuple(names[u] for u in s.dependent_set),
                 int(s.table_entries), int(s.work)) for i, (s, x) in enumerate(zip(steps, xs))]


def small_layout(graph: Graph) -> dict[str, tuple[float, float]]:
    """Layered positions for a small graph (top to bottom)."""
    from ui.graphview import layered_layout

    g = nx.DiGraph()
    g.add_nodes_from(layer.name for layer in graph.layers)
    g.add_edges_from((e.src, e.dst) for e in graph.edges)
    return layered_layout(g)
