"""Two-level clusters: collectives and redistributions over nodes of devices.

The paper prices every byte at one link bandwidth. Real clusters have fast
links inside a node (NVLink, PCIe) and a slower network between nodes
(InfiniBand). This module prices communication on a
:class:`~pase.cluster.Cluster` with ``devices_per_node`` and
``inter_bandwidth_Bps``, in seconds.

Device-assignment rule
----------------------
A configuration with split factors ``f_1 .. f_m`` (the layer's dimensions in
their listed order) puts the device with coordinates ``(i_1 .. i_m)`` on
device number ``i_m + f_m (i_{m-1} + f_{m-1} (...))``: row-major, the **last
dimension innermost**. Node ``n`` holds devices ``n D .. n D + D - 1`` (``D``
devices per node), so a node holds every coordinate of the innermost
dimensions, a range of one boundary dimension and a single coordinate of the
outer ones. Every layer builder lists the batch dimension first, so data
parallelism is placed across nodes and model splits (heads, hidden units,
channels) inside them, as Megatron-LM does. :func:`node_factors` gives, per
dimension, how many nodes its split spans.

Collectives
-----------
Every op lists the communication inside a layer as
:class:`~pase.layers.Collective` values (:func:`pase.layers.collectives`),
each among the devices that differ only in the dimensions ``dims``: ``k``
devices, ``k_in`` of them per node, over ``k_out = k / k_in`` nodes. With
``M`` bytes of block and bandwidths ``B_in`` (inside a node) and ``B_out``
(between nodes, per device):

* all-reduce, hierarchical (reduce-scatter in the node, all-reduce of the
  ``M / k_in`` shard across nodes, all-gather in the node)::

      2 (k_in - 1) / k_in * M / B_in  +  2 (k_out - 1) / k_out * (M / k_in) / B_out

* all-gather of an ``M``-byte result: half of that;
* exchange (halo rows, pipeline stages): the bytes at ``B_in`` when the group
  lies in one node, at ``B_out`` otherwise (the slowest device sets the pace).

With ``k_out = 1`` these are the flat ring formulas of
:meth:`Collective.ring_elements <pase.layers.Collective.ring_elements>`, and
with ``B_in = B_out`` they add up to them exactly (``2 (k - 1) / k M / B``).

Redistribution along an edge
----------------------------
A consumer device needs a block of the tensor and already holds part of it
(``held_on_device``, :func:`pase.layers.edge_blocks`, as in the flat model). Of the rest,
what the producer's devices *in the same node* hold crosses the node's links;
the remainder crosses the network; the two transfers are not overlapped::

    seconds = (held_in_node - held_on_device) / B_in + (needed - held_in_node) / B_out

for the forward tensor and again for its gradient. ``held_in_node`` uses the
producer's node-level block (:func:`node_factors`) and is 0 when the consumer
spans more nodes than the producer.

The placement is exact when split factors and ``D`` are powers of two (the
usual case); otherwise node blocks are rounded up and costs are approximate.
On a flat cluster (:attr:`Cluster.is_flat`) the cost model does not use this
module at all, so one node, or equal bandwidths, give the paper's costs
bit for bit.
"""

from __future__ import annotations

import numpy as np

from pase import layers as L
from pase.cluster import Cluster
from pase.graph import Layer
from pase.layers import collectives, edge_blocks, tensor_splits

__all__ = [
    "group_sizes",
    "node_factors",
    "allreduce_time_s",
    "allgather_time_s",
    "exchange_time_s",
    "layer_comm_time_s",
    "edge_time_s",
]


# -- placement -----------------------------------------------------------------------------


def node_factors(configs: np.ndarray, devices_per_node: int) -> np.ndarray:
    """Per configuration and dimension, how many nodes the dimension's split spans, ``(K, m)``.

    Under the module's row-major rule (last dimension innermost) a node holds
    ``f / node_factor`` coordinates of every dimension; the product of a row
    is the number of nodes the configuration uses.

    >>> node_factors(np.array([[4, 2, 1], [2, 8, 2]]), 8).tolist()
    [[1, 1, 1], [2, 2, 1]]
    """
    configs = np.asarray(configs, dtype=np.int64)
    nf = np.ones_like(configs)
    inner = np.ones(len(configs), dtype=np.int64)  # devices a node already spans, innermost first
    for j in reversed(range(configs.shape[1])):
        f = configs[:, j]
        room = devices_per_node // inner  # coordinates of dimension j that fit in a node
        fits = f <= room
        nf[:, j] = np.where(fits, 1, -(-f // np.maximum(room, 1)))
        inner = np.where(fits, inner * f, devices_per_node)
    return nf


def group_sizes(layer: Layer, configs: np.ndarray, dims, devices_per_node: int | None):
    """``(k, k_in, k_out)`` float arrays of the group over ``dims``: devices, per node, nodes.

    ``devices_per_node=None`` reads as one node.
    """
    configs = np.asarray(configs)
    k = L.split_over(layer, configs, dims).astype(float)
    if devices_per_node is None:
        return k, k, np.ones(len(configs))
    k_out = L.split_over(layer, node_factors(configs, devices_per_node), dims).astype(float)
    return k, k / k_out, k_out


# -- times ---------------------------------------------------------------------------------


def allreduce_time_s(nbytes, k_in, k_out, intra_Bps: float, inter_Bps: float) -> np.ndarray:
    """Seconds of a hierarchical all-reduce of ``nbytes`` among ``k_in`` devices per node on ``k_out`` nodes."""
    nbytes, k_in, k_out = (np.asarray(x, dtype=float) for x in (nbytes, k_in, k_out))
    return 2.0 * (k_in - 1) / k_in * nbytes / intra_Bps + 2.0 * (k_out - 1) / k_out * (nbytes / k_in) / inter_Bps


def allgather_time_s(nbytes, k_in, k_out, intra_Bps: float, inter_Bps: float) -> np.ndarray:
    """Seconds of a hierarchical all-gather whose result is ``nbytes``."""
    nbytes, k_in, k_out = (np.asarray(x, dtype=float) for x in (nbytes, k_in, k_out))
    return (k_in - 1) / k_in * nbytes / intra_Bps + (k_out - 1) / k_out * (nbytes / k_in) / inter_Bps


def exchange_time_s(nbytes, k_out, intra_Bps: float, inter_Bps: float) -> np.ndarray:
    """Seconds to send ``nbytes`` to neighbours: over the network when the group spans nodes."""
    nbytes, k_out = np.asarray(nbytes, dtype=float), np.asarray(k_out, dtype=float)
    return nbytes / np.where(k_out > 1, inter_Bps, intra_Bps)


def layer_comm_time_s(layer: Layer, configs: np.ndarray, cluster: Cluster) -> np.ndarray:
    """Seconds of communication inside ``layer`` under each configuration on a two-level ``cluster``."""
    bpe, b_in, b_out = cluster.bytes_per_element, cluster.intra_bandwidth_Bps, cluster.network_bandwidth_Bps
    total = np.zeros(len(configs))
    for c in collectives(layer, configs):
        _, k_in, k_out = group_sizes(layer, configs, c.dims, cluster.node_size)
        nbytes = c.elements * bpe
        if c.kind == "allreduce":
            total += allreduce_time_s(nbytes, k_in, k_out, b_in, b_out)
        elif c.kind == "allgather":
            total += allgather_time_s(nbytes, k_in, k_out, b_in, b_out)
        else:
            total += exchange_time_s(nbytes, k_out, b_in, b_out)
    return total


def edge_time_s(
    src: Layer, src_output: int, src_configs: np.ndarray,
    dst: Layer, dst_input: int, dst_configs: np.ndarray,
    cluster: Cluster,
) -> np.ndarray:
    """Seconds to redistribute one edge's tensor (and its gradient), ``(K_src, K_dst)``.

    See the module docstring; with equal bandwidths this is
    :func:`pase.cost.edge_bytes` divided by the bandwidth.
    """
    D = cluster.node_size
    tensor = dst.inputs[dst_input]
    shape = np.asarray(tensor.shape, dtype=float)
    needed, ov_dev = edge_blocks(src, src_output, src_configs, dst, dst_input, dst_configs)
    needed = needed[None, :]
    held_node = shape / tensor_splits(src, src.outputs[src_output], node_factors(src_configs, D))
    need = shape / tensor_splits(dst, tensor, dst_configs)  # (Kd, A)
    ov_node = np.prod(np.minimum(held_node[:, None, :], need[None, :, :]), axis=2)
    k_src, k_dst = np.prod(src_configs, axis=1), np.prod(dst_configs, axis=1)
    n_src, n_dst = -(-k_src // D), -(-k_dst // D)
    ov_node = np.where(n_dst[None, :] > n_src[:, None], 0.0, ov_node)
    inside = np.clip(ov_node - ov_dev, 0.0, None)
    across = np.clip(needed - ov_node, 0.0, None)
    directions = 2.0 if tensor.differentiable else 1.0
    bpe = cluster.bytes_per_element
    return directions * bpe * (inside / cluster.intra_bandwidth_Bps + across / cluster.network_bandwidth_Bps)
