"""The paper's cost model (its equation 1): per-layer vectors and per-edge matrices.

For a strategy ``phi`` the cost, in FLOP-equivalents, is::

    sum over layers v of  compute_flops(v, phi(v)) + r * intra_bytes(v, phi(v))
  + sum over edges (u, v) of r * edge_bytes(u, v, phi(u), phi(v))

with ``r = peak_flops / bandwidth_Bps``; dividing by ``peak_flops`` gives
seconds. ``compute_flops`` is one device's share of the layer's training
FLOPs, ``intra_bytes`` what one device sends inside the layer (see
:mod:`pase.layers`), ``edge_bytes`` the largest volume any device needs of the
tensor (and sends back of its gradient) that it does not already hold.

:func:`build_cost_model` computes every table for a graph and cluster;
:meth:`CostModel.cost_graph` hands them to the search as plain arrays.

On a two-level cluster (nodes of devices, a slower network between them; see
:mod:`pase.topology`) a byte no longer has one price: the model then also
keeps the communication *time* of every layer and edge, in seconds
(``intra_comm_s``, ``edge_time_tables``), and the search sees
``peak_flops * seconds`` instead of ``r * bytes``. On a flat cluster
(:attr:`Cluster.is_flat`: one node, or equal bandwidths) those tables are
``None`` and every number is computed exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from pase.cluster import Cluster
from pase.configs import ConfigOptions, check_config, layer_configs
from pase.costgraph import CostGraph
from pase.errors import ConfigurationError, SearchTooLargeError
from pase.graph import Edge, Graph, Layer
from pase.layers import OPS, comm_elements, edge_blocks, training_flops
from pase.topology import edge_time_s, layer_comm_time_s

__all__ = ["CostModel", "LayerCost", "build_cost_model", "edge_bytes", "layer_compute_flops", "layer_comm_bytes"]

# Refuse to build cost tables above this many bytes: they are the search's input.
DEFAULT_TABLE_BUDGET_BYTES = 4 * 2**30


def layer_compute_flops(layer: Layer, configs: np.ndarray) -> np.ndarray:
    """Training FLOPs one device performs for ``layer`` under each configuration (rows of ``configs``)."""
    block = np.asarray(layer.sizes, dtype=float) / configs
    return OPS[layer.op].flops(layer, block)


def layer_comm_bytes(layer: Layer, configs: np.ndarray, bytes_per_element: int) -> np.ndarray:
    """Bytes one device sends inside ``layer`` under each configuration (its collectives on flat rings)."""
    return comm_elements(layer, configs) * bytes_per_element


def edge_bytes(
    src: Layer, src_output: int, src_configs: np.ndarray,
    dst: Layer, dst_input: int, dst_configs: np.ndarray,
    bytes_per_element: int,
) -> np.ndarray:
    """Bytes moved along one edge for every pair of configurations, ``(K_src, K_dst)``.

    A consumer device needs a block of the tensor and already holds part of it
    (:func:`pase.layers.edge_blocks`); the rest moves forward, and as much
    gradient moves back unless the input takes no gradient. Identical layouts
    cost 0.
    """
    needed, held = edge_blocks(src, src_output, src_configs, dst, dst_input, dst_configs)
    directions = 2.0 if dst.inputs[dst_input].differentiable else 1.0
    return np.clip(needed[None, :] - held, 0.0, None) * directions * bytes_per_element


@dataclass(frozen=True)
class LayerCost:
    """One layer's share of a strategy's cost; times in seconds, costs in FLOP-equivalents."""

    name: str
    op: str
    dims: tuple[str, ...]
    sizes: tuple[int, ...]
    config: tuple[int, ...]
    flops: float
    compute_flops: float
    intra_comm_bytes: float
    edge_comm_bytes: float
    compute_s: float
    intra_comm_s: float
    edge_comm_s: float

    @property
    def total_s(self) -> float:
        """Compute plus intra-layer plus edge communication time, in seconds."""
        return self.compute_s + self.intra_comm_s + self.edge_comm_s

    @property
    def devices(self) -> int:
        """Devices the configuration uses."""
        return int(np.prod(self.config))


@dataclass(frozen=True, eq=False)
class CostModel:
    """Every cost table of a graph on a cluster.

    Attributes
    ----------
    graph, cluster, options
        What the tables were built for.
    layers : list of Layer
        Topological order; index ``i`` is node ``i`` of :meth:`cost_graph`.
    configs : dict
        Layer name -> int array ``(K, ndims)`` of its configurations.
    compute_flops, intra_bytes : dict
        Layer name -> per-configuration vectors.
    edge_tables : list of (Edge, ndarray)
        Per edge, bytes for every (source configuration, target configuration).
    intra_comm_s : dict or None
        Two-level clusters only: layer name -> seconds of communication inside
        the layer per configuration (:func:`pase.topology.layer_comm_time_s`).
    edge_time_tables : list of (Edge, ndarray) or None
        Two-level clusters only: per edge, seconds for every pair of
        configurations (:func:`pase.topology.edge_time_s`), in the order of
        ``edge_tables``.
    """

    graph: Graph
    cluster: Cluster
    options: ConfigOptions
    layers: list
    configs: dict
    compute_flops: dict
    intra_bytes: dict
    edge_tables: list
    intra_comm_s: dict | None = None
    edge_time_tables: list | None = None

    @property
    def index(self) -> dict[str, int]:
        """Layer name -> node index in :meth:`cost_graph`."""
        return {layer.name: i for i, layer in enumerate(self.layers)}

    def layer_cost_vector(self, name: str) -> np.ndarray:
        """FLOP-equivalent cost of layer ``name`` per configuration (the search's node vector)."""
        if self.intra_comm_s is not None:
            return self.compute_flops[name] + self.cluster.peak_flops * self.intra_comm_s[name]
        return self.compute_flops[name] + self.cluster.flops_per_byte * self.intra_bytes[name]

    def cost_graph(self) -> CostGraph:
        """The search's input: node cost vectors and edge cost matrices in FLOP-equivalents.

        Several tensors between the same two layers add into one matrix.
        """
        index = self.index
        if self.edge_time_tables is not None:
            scale, tables = self.cluster.peak_flops, self.edge_time_tables
        else:
            scale, tables = self.cluster.flops_per_byte, self.edge_tables
        merged: dict[tuple[int, int], np.ndarray] = {}
        for edge, table in tables:
            key = (index[edge.src], index[edge.dst])
            merged[key] = merged.get(key, 0.0) + scale * table
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
            (powers of two, minimum shard, spatial splits).
        """
        layer = self.graph.layer(name)
        config = check_config(layer, config, self.cluster.devices)
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
        if self.edge_time_tables is None:
            tables, scale = self.edge_tables, 1.0 / self.cluster.bandwidth_Bps
        else:
            tables, scale = self.edge_time_tables, 1.0
        for e, table in tables:
            key = (e.src, e.dst)
            out[key] = out.get(key, 0.0) + float(table[assignment[e.src], assignment[e.dst]]) * scale
        return out

    def breakdown(self, assignment: Mapping[str, int]) -> list[LayerCost]:
        """Per-layer costs of a strategy given as layer name -> configuration row.

        Edge communication is charged to the consuming layer.
        """
        c = self.cluster
        edge = {layer.name: 0.0 for layer in self.layers}
        for e, table in self.edge_tables:
            edge[e.dst] += float(table[assignment[e.src], assignment[e.dst]])
        edge_s = None
        if self.edge_time_tables is not None:
            edge_s = {layer.name: 0.0 for layer in self.layers}
            for e, table in self.edge_time_tables:
                edge_s[e.dst] += float(table[assignment[e.src], assignment[e.dst]])
        rows = []
        for layer in self.layers:
            k = assignment[layer.name]
            compute = float(self.compute_flops[layer.name][k])
            intra = float(self.intra_bytes[layer.name][k])
            if edge_s is None:
                intra_s, e_s = intra / c.bandwidth_Bps, edge[layer.name] / c.bandwidth_Bps
            else:
                intra_s, e_s = float(self.intra_comm_s[layer.name][k]), edge_s[layer.name]
            rows.append(LayerCost(
                name=layer.name, op=layer.op, dims=layer.dims, sizes=layer.sizes,
                config=tuple(int(f) for f in self.configs[layer.name][k]),
                flops=training_flops(layer),
                compute_flops=compute, intra_comm_bytes=intra, edge_comm_bytes=edge[layer.name],
                compute_s=compute / c.peak_flops,
                intra_comm_s=intra_s,
                edge_comm_s=e_s,
            ))
        return rows

    def strategy_cost(self, rows: list[LayerCost]) -> float:
        """Total FLOP-equivalent cost (the paper's F) of a :meth:`breakdown`."""
        if self.intra_comm_s is None:
            r = self.cluster.flops_per_byte
            return float(sum(row.compute_flops + r * (row.intra_comm_bytes + row.edge_comm_bytes) for row in rows))
        f = self.cluster.peak_flops
        return float(sum(row.compute_flops + f * (row.intra_comm_s + row.edge_comm_s) for row in rows))


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
        A layer has no configuration (cannot happen: all ones always fits).
    SearchTooLargeError
        The edge tables alone would exceed ``table_budget_bytes``; checked
        before any table is allocated (on a two-level cluster the time tables
        count too).
    """
    graph.validate()
    layers = graph.layers
    if configs is None:
        configs = {layer.name: layer_configs(layer, cluster.devices, options) for layer in layers}
    edges = graph.edges
    table_bytes = 8 * sum(len(configs[e.src]) * len(configs[e.dst]) for e in edges)
    if not cluster.is_flat:
        table_bytes *= 2
    if table_bytes > table_budget_bytes:
        raise SearchTooLargeError(
            f"the edge cost tables of {graph.name!r} on {cluster.devices} devices would take "
            f"{table_bytes / 2**30:.1f} GiB (budget {table_budget_bytes / 2**30:.1f} GiB); "
            "use fewer devices, powers of two only, or a larger minimum shard size"
        )
    bpe = cluster.bytes_per_element
    # Repeated blocks (Transformer layers, ResNet stages) repeat their edges: a table
    # depends only on the two tensors' layouts and configurations, so compute it once.
    cache: dict = {}

    def edge_table(e: Edge, cost_fn, last_arg):
        src, dst = graph.layer(e.src), graph.layer(e.dst)
        cs, cd = configs[e.src], configs[e.dst]
        key = (cost_fn, src.dims, src.outputs[e.src_output], cs.shape, cs.tobytes(),
               dst.dims, dst.inputs[e.dst_input], cd.shape, cd.tobytes())
        if key not in cache:
            cache[key] = cost_fn(src, e.src_output, cs, dst, e.dst_input, cd, last_arg)
        return cache[key]

    intra_s = edge_s = None
    if not cluster.is_flat:
        intra_s = {l.name: layer_comm_time_s(l, configs[l.name], cluster) for l in layers}
        edge_s = [(e, edge_table(e, edge_time_s, cluster)) for e in edges]
    return CostModel(
        graph=graph, cluster=cluster, options=options, layers=layers, configs=configs,
        compute_flops={l.name: layer_compute_flops(l, configs[l.name]) for l in layers},
        intra_bytes={l.name: layer_comm_bytes(l, configs[l.name], bpe) for l in layers},
        edge_tables=[(e, edge_table(e, edge_bytes, bpe)) for e in edges],
        intra_comm_s=intra_s,
        edge_time_tables=edge_s,
    )
