"""The cost model: per-layer vectors and per-edge matrices of a graph on a cluster.

For a strategy ``phi`` the cost, in FLOP-equivalents (seconds at the device's
peak rate, the paper's unit), is::

    sum over layers v of  compute_flops(v, phi(v)) + F * comm_s(v, phi(v))
  + sum over edges (u, v) of F * edge_s(u, v, phi(u), phi(v))

with ``F`` the peak FLOP/s; dividing by ``F`` gives seconds. Communication is
priced in one place, on the cluster's device mesh (:mod:`pase.hardware.mesh`):
a flat cluster is a 1-D mesh, a DGX pod ``node x gpu``. Two cost models share
that pricing (``ConfigOptions.cost_model``):

``"corrected"`` (default)
    Layers are placed digit-exactly on the mesh and tensors have layouts with
    pending sums (:mod:`pase.model.layout`): a contraction that splits its
    reduction dimension leaves its output ``Partial`` and the edge finishes the
    sum (an all-reduce into a replicated consumer, a reduce-scatter into a
    sharded one); input gradients likewise. A replicated producer feeding a
    split consumer moves nothing; the backward volume of an edge is computed
    from the gradient's own layouts. A layer whose input is a graph input
    (data, token ids) computes no gradient for it. Configurations must tile
    the mesh. BatchNorm does not synchronise statistics over the batch unless
    ``sync_batchnorm`` says so.
``"paper"``
    The paper's equation 1: every partial sum all-reduced inside its layer,
    every input gradient computed, the prototype's edge rule
    (:func:`pase.model.layout.paper_held`) with the backward volume taken equal
    to the forward one, row-major placement. On a flat cluster this is the
    paper's model exactly; on a two-level one it prices the same bytes per
    mesh axis.

Both count max pooling's backward as one FLOP per output.

:func:`build_cost_model` computes every table; :meth:`CostModel.cost_graph`
hands them to the search as plain arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from pase.errors import ConfigurationError, SearchTooLargeError
from pase.hardware.cluster import Cluster
from pase.hardware.mesh import DeviceMesh
from pase.ir.configs import ConfigOptions, check_config, layer_configs
from pase.ir.graph import Edge, Graph, Layer
from pase.model.layout import (
    Placement, axis_factors, describe, paper_held, paper_placement, place, redistribute_s, tensor_layout,
)
from pase.ops import OPS, Collective, CollectiveOptions, block_elements, collectives, partial_collectives, training_flops
from pase.search.costgraph import CostGraph

__all__ = ["CostModel", "LayerCost", "build_cost_model", "collective_s", "layer_compute_flops"]

# Refuse to build cost tables above this many bytes: they are the search's input.
DEFAULT_TABLE_BUDGET_BYTES = 4 * 2**30


def collective_s(c: Collective, k: np.ndarray, mesh: DeviceMesh, bytes_per_element: int) -> np.ndarray:
    """Seconds of collective ``c`` over groups of mesh extents ``k`` (``(K, J)``)."""
    nbytes = c.elements * bytes_per_element
    if c.kind == "allreduce":
        return mesh.allreduce_s(nbytes, k)
    if c.kind == "allgather":
        return mesh.allgather_s(nbytes, k)
    return mesh.exchange_s(nbytes, k)


def layer_compute_flops(layer: Layer, configs: np.ndarray, needs_gradient=None) -> np.ndarray:
    """Training FLOPs one device performs for ``layer`` under each configuration (rows of ``configs``).

    ``needs_gradient[i]`` False leaves out activation input ``i``'s gradient.
    """
    block = np.asarray(layer.sizes, dtype=float) / configs
    return OPS[layer.op].flops(layer, block).total(needs_gradient)


@dataclass(frozen=True)
class LayerCost:
    """One layer's share of a strategy's cost; times in seconds, FLOPs per device.

    ``placement`` says where the split factors sit on the device mesh
    (:func:`pase.model.layout.describe`, e.g. ``"b: node 4 x gpu 2, n: gpu 4"``).
    """

    name: str
    op: str
    dims: tuple[str, ...]
    sizes: tuple[int, ...]
    config: tuple[int, ...]
    flops: float
    compute_flops: float
    compute_s: float
    intra_comm_s: float
    edge_comm_s: float
    placement: str = ""

    @property
    def total_s(self) -> float:
        """Compute plus intra-layer plus edge communication time, in seconds."""
        return self.compute_s + self.intra_comm_s + self.edge_comm_s

    @property
    def devices(self) -> int:
        """Devices the configuration splits over (the rest of the mesh replicates it)."""
        return int(np.prod(self.config))


@dataclass(frozen=True, eq=False)
class CostModel:
    """Every cost table of a graph on a cluster.

    Attributes
    ----------
    graph, cluster, options
        What the tables were built for (``options.cost_model`` names the model).
    layers : list of Layer
        Topological order; index ``i`` is node ``i`` of :meth:`cost_graph`.
    configs : dict
        Layer name -> int array ``(K, ndims)`` of its configurations.
    placements : dict
        Layer name -> :class:`~pase.model.layout.Placement` of its configurations on the mesh.
    compute_flops : dict
        Layer name -> training FLOPs per device, per configuration.
    comm_s : dict
        Layer name -> seconds of communication inside the layer, per configuration.
    edge_tables : list of (Edge, ndarray)
        Per edge, seconds to redistribute its tensor forward and its gradient
        backward, for every (source configuration, target configuration).
    """

    graph: Graph
    cluster: Cluster
    options: ConfigOptions
    layers: list
    configs: dict
    placements: dict
    compute_flops: dict
    comm_s: dict
    edge_tables: list

    @property
    def index(self) -> dict[str, int]:
        """Layer name -> node index in :meth:`cost_graph`."""
        return {layer.name: i for i, layer in enumerate(self.layers)}

    def layer_cost_vector(self, name: str) -> np.ndarray:
        """FLOP-equivalent cost of layer ``name`` per configuration (the search's node vector)."""
        return self.compute_flops[name] + self.cluster.peak_flops * self.comm_s[name]

    def cost_graph(self) -> CostGraph:
        """The search's input: node cost vectors and edge cost matrices in FLOP-equivalents.

        Several tensors between the same two layers add into one matrix.
        """
        index = self.index
        merged: dict[tuple[int, int], np.ndarray] = {}
        for edge, table in self.edge_tables:
            key = (index[edge.src], index[edge.dst])
            merged[key] = merged.get(key, 0.0) + self.cluster.peak_flops * table
        return CostGraph(
            node_costs=tuple(self.layer_cost_vector(layer.name) for layer in self.layers),
            edges=tuple((u, v, m) for (u, v), m in merged.items()),
            names=tuple(layer.name for layer in self.layers),
        )

    def config_index(self, name: str, config) -> int:
        """Row of ``config`` among layer ``name``'s configurations.

        Raises
        ------
        ConfigurationError
            The configuration is invalid, or valid but excluded by the options
            (powers of two, minimum shard, spatial splits, mesh tiling).
        """
        layer = self.graph.layer(name)
        config = check_config(layer, config, self.cluster.devices, self.options)
        rows = np.flatnonzero((self.configs[name] == config).all(axis=1))
        if not len(rows):
            raise ConfigurationError(
                f"layer {name!r}: configuration {config} is excluded by the search options {self.options}"
            )
        return int(rows[0])

    def edge_costs_s(self, assignment: Mapping[str, int]) -> dict[tuple[str, str], float]:
        """Seconds to redistribute each edge under a strategy (layer name -> configuration row).

        Keyed by (producer, consumer); several tensors between the same two
        layers add up. A layer's incoming entries sum to its ``edge_comm_s``.
        """
        out: dict[tuple[str, str], float] = {}
        for e, table in self.edge_tables:
            key = (e.src, e.dst)
            out[key] = out.get(key, 0.0) + float(table[assignment[e.src], assignment[e.dst]])
        return out

    def breakdown(self, assignment: Mapping[str, int]) -> list[LayerCost]:
        """Per-layer costs of a strategy given as layer name -> configuration row.

        Edge communication is charged to the consuming layer.
        """
        peak = self.cluster.peak_flops
        edge = {layer.name: 0.0 for layer in self.layers}
        for e, table in self.edge_tables:
            edge[e.dst] += float(table[assignment[e.src], assignment[e.dst]])
        rows = []
        for layer in self.layers:
            k = assignment[layer.name]
            compute = float(self.compute_flops[layer.name][k])
            rows.append(LayerCost(
                name=layer.name, op=layer.op, dims=layer.dims, sizes=layer.sizes,
                config=tuple(int(f) for f in self.configs[layer.name][k]),
                flops=training_flops(layer), compute_flops=compute, compute_s=compute / peak,
                intra_comm_s=float(self.comm_s[layer.name][k]), edge_comm_s=edge[layer.name],
                placement=describe(layer, self.placements[layer.name], k),
            ))
        return rows

    def strategy_cost(self, rows: list[LayerCost]) -> float:
        """Total FLOP-equivalent cost (the paper's F) of a :meth:`breakdown`."""
        peak = self.cluster.peak_flops
        return float(sum(row.compute_flops + peak * (row.intra_comm_s + row.edge_comm_s) for row in rows))


def _layer_comm_s(graph: Graph, layer: Layer, configs: np.ndarray, placement: Placement, cluster: Cluster,
                  options: ConfigOptions) -> np.ndarray:
    """Seconds of communication inside ``layer`` per configuration, under ``options.cost_model``."""
    cfg = np.asarray(configs, dtype=float)
    found = collectives(layer, cfg, CollectiveOptions(sync_batchnorm=options.batchnorm_synchronised))
    if options.cost_model == "paper":
        found += partial_collectives(layer, cfg)
    elif OPS[layer.op].contraction:
        # Pending sums of an output nobody reads (the graph's result) are finished here.
        read = {e.src_output for e in graph.out_edges(layer.name)}
        found += [c for i, c in enumerate(partial_collectives(layer, cfg, [False] * len(layer.inputs)))
                  if i not in read]
    total = np.zeros(len(cfg))
    for c in found:
        total += collective_s(c, axis_factors(layer, placement, c.dims), placement.mesh, cluster.bytes_per_element)
    return total


def _corrected_edge_s(src: Layer, e: Edge, src_place: Placement, dst: Layer, dst_place: Placement,
                      mesh: DeviceMesh, bpe: int) -> np.ndarray:
    """Forward plus backward seconds of one edge under the corrected model, ``(K_src, K_dst)``."""
    tensor = dst.inputs[e.dst_input]
    produced = tensor_layout(src, src.outputs[e.src_output], src_place, partial=True)
    wanted = tensor_layout(dst, tensor, dst_place, partial=False)
    seconds = redistribute_s(produced, wanted, mesh, bpe)
    if tensor.differentiable:
        gradient = tensor_layout(dst, tensor, dst_place, partial=True)
        # The producer needs its output's gradient wherever it holds the output (its pending sums included).
        target = tensor_layout(src, src.outputs[e.src_output], src_place, partial=False)
        seconds = seconds + redistribute_s(gradient, target, mesh, bpe).T
    return seconds


def _paper_edge_s(src: Layer, e: Edge, src_place: Placement, src_cfg, dst: Layer, dst_place: Placement, dst_cfg,
                  mesh: DeviceMesh, bpe: int) -> np.ndarray:
    """Forward plus backward seconds of one edge under the paper's model, ``(K_src, K_dst)``."""
    held = paper_held(src, e.src_output, src_place, dst, e.dst_input, dst_place, src_cfg, dst_cfg)
    directions = 2.0 if dst.inputs[e.dst_input].differentiable else 1.0
    return directions * mesh.redistribute_s(held * bpe)


def build_cost_model(
    graph: Graph,
    cluster: Cluster,
    options: ConfigOptions = ConfigOptions(),
    *,
    configs: Mapping[str, np.ndarray] | None = None,
    table_budget_bytes: int = DEFAULT_TABLE_BUDGET_BYTES,
) -> CostModel:
    """Enumerate configurations and compute every cost table of ``graph`` on ``cluster``.

    ``configs`` replaces the enumeration (layer name -> int array of rows), to
    cost given strategies whatever the options allow.

    Raises
    ------
    GraphError
        The graph is invalid (see :meth:`Graph.validate`).
    ConfigurationError
        A given configuration does not tile the mesh under the corrected model.
    SearchTooLargeError
        The edge tables would exceed ``table_budget_bytes``; checked before any
        table is allocated.
    """
    graph.validate()
    layers = graph.layers
    if configs is None:
        configs = {layer.name: layer_configs(layer, cluster.devices, options) for layer in layers}
    else:
        configs = {name: np.asarray(rows, dtype=np.int64).reshape(len(rows), -1) for name, rows in configs.items()}
        for layer in layers:
            for row in configs[layer.name]:
                check_config(layer, row, cluster.devices, options)
    edges = graph.edges
    table_bytes = 8 * sum(len(configs[e.src]) * len(configs[e.dst]) for e in edges)
    if table_bytes > table_budget_bytes:
        raise SearchTooLargeError(
            f"the edge cost tables of {graph.name!r} on {cluster.devices} devices would take "
            f"{table_bytes / 2**30:.1f} GiB (budget {table_budget_bytes / 2**30:.1f} GiB); "
            "use fewer devices, powers of two only, or a larger minimum shard size"
        )
    mesh, bpe = cluster.mesh, cluster.bytes_per_element
    paper = options.cost_model == "paper"
    placer = paper_placement if paper else place
    placements = {l.name: placer(configs[l.name], mesh) for l in layers}
    fed = {l.name: {e.dst_input for e in graph.in_edges(l.name)} for l in layers}

    def needs_gradient(layer: Layer):
        # Under the corrected model a graph input (no edge feeds it) takes no gradient.
        return None if paper else [t.differentiable and i in fed[layer.name] for i, t in enumerate(layer.inputs)]

    # Repeated blocks (Transformer layers, ResNet stages) repeat their edges: a table
    # depends only on the two tensors' layouts and configurations, so compute it once.
    cache: dict = {}

    def edge_table(e: Edge) -> np.ndarray:
        src, dst = graph.layer(e.src), graph.layer(e.dst)
        cs, cd = configs[e.src], configs[e.dst]
        key = (src.op, src.dims, src.outputs[e.src_output], cs.shape, cs.tobytes(),
               dst.op, dst.dims, dst.inputs[e.dst_input], cd.shape, cd.tobytes())
        if key not in cache:
            if paper:
                cache[key] = _paper_edge_s(src, e, placements[e.src], cs, dst, placements[e.dst], cd, mesh, bpe)
            else:
                cache[key] = _corrected_edge_s(src, e, placements[e.src], dst, placements[e.dst], mesh, bpe)
        return cache[key]

    return CostModel(
        graph=graph, cluster=cluster, options=options, layers=layers, configs=configs, placements=placements,
        compute_flops={l.name: layer_compute_flops(l, configs[l.name], needs_gradient(l)) for l in layers},
        comm_s={l.name: _layer_comm_s(graph, l, configs[l.name], placements[l.name], cluster, options) for l in layers},
        edge_tables=[(e, edge_table(e)) for e in edges],
    )
