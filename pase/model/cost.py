"""The cost model: per-layer vectors and per-edge matrices of a graph on a cluster.

For a strategy ``phi`` the cost, in FLOP-equivalents (seconds at the device's
peak rate, the paper's unit), is::

    sum over layers v of  compute_flops(v, phi(v)) + F * comm_s(v, phi(v))
  + sum over edges (u, v) of F * edge_s(u, v, phi(u), phi(v))

with ``F`` the peak FLOP/s; dividing by ``F`` gives seconds. On a calibrated
cluster (``Cluster.efficiency``) a layer's compute is its roofline time
(:mod:`pase.model.roofline`) times ``F`` rather than its FLOPs, and the mesh's
links run at their collective efficiency with a latency per step, except
under the paper's model, which keeps peak rates and nominal bandwidths. Communication is
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
hands them to the search as plain arrays. Before it allocates any, it adds up
what the tables, their copy in FLOP-equivalents and the scratch of computing
them will take, and refuses a model over its budget; each table is computed
in blocks of source configurations, so the scratch stays under
``_EDGE_SCRATCH_BYTES`` however large the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from pase.errors import ConfigurationError, SearchTooLargeError
from pase.hardware.accuracy import accuracy
from pase.hardware.cluster import PRESETS, Cluster
from pase.hardware.mesh import DeviceMesh
from pase.ir.configs import ConfigOptions, check_config, layer_configs
from pase.ir.graph import Edge, Graph, Layer
from pase.model.layout import (
    Placement, axis_factors, describe, paper_held, paper_placement, place, redistribute_s, tensor_layout,
)
from pase.ops import OPS, Collective, CollectiveOptions, collectives, partial_collectives, training_flops
from pase.model.attention import attention_units, flash_flops, flash_times_s, flash_units, rotary_times_s
from pase.model.precision import fp8_recipe, input_casts
from pase.model.roofline import fp8_products, fused_chains, fused_times_s, layer_times_s
from pase.ir.costgraph import CostGraph
from pase.limits import default_memory_budget_bytes

__all__ = ["CostModel", "LayerCost", "build_cost_model", "collective_s", "layer_compute_flops", "attention_kind",
           "check_precision", "describe_model"]

# Refuse to build cost tables above this many bytes (or above the default search budget,
# a share of the free memory, when that is less): they are the search's input.
DEFAULT_TABLE_BUDGET_BYTES = 4 * 2**30
# Scratch of computing one edge table: the blocks of source configurations are sized to
# stay within it.
_EDGE_SCRATCH_BYTES = 64 * 2**20


def _edge_entry_bytes(axes: int, mesh_axes: int) -> int:
    """Bytes of temporaries per table entry while an edge table is computed, the result included.

    Both models build a few ``(K_src, K_dst)`` arrays per tensor axis and per
    mesh axis; measured peaks (tracemalloc) stay below this bound on tables
    of 1 to 6 tensor axes on meshes of 1 to 3 axes.
    """
    return 8 * (6 * axes + 4 * mesh_axes + 16)


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
    compute_flops, forward_flops : dict
        Layer name -> training FLOPs per device, and those of the forward
        pass alone, per configuration.
    compute_s, forward_compute_s : dict
        Layer name -> seconds of its training compute (forward and backward)
        and of its forward alone, per configuration: the FLOPs at peak, or
        on a calibrated cluster the roofline (:mod:`pase.model.roofline`).
    comm_s : dict
        Layer name -> seconds of communication inside the layer, per configuration.
    gradient_comm_s : dict
        Layer name -> the part of ``comm_s`` that reduces weight gradients
        (once per step however many microbatches a pipeline runs).
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
    forward_flops: dict
    compute_s: dict
    forward_compute_s: dict
    comm_s: dict
    gradient_comm_s: dict
    edge_tables: list
    # What :meth:`breakdown` derives from a layer alone, kept for the next strategy: layer name -> its
    # training FLOPs, and (layer name, configuration row) -> its placement described.
    _flops: dict = field(default_factory=dict, init=False, repr=False)
    _described: dict = field(default_factory=dict, init=False, repr=False)

    @property
    def index(self) -> dict[str, int]:
        """Layer name -> node index in :meth:`cost_graph`."""
        return {layer.name: i for i, layer in enumerate(self.layers)}

    def layer_cost_vector(self, name: str, gradient_share: float = 1.0) -> np.ndarray:
        """FLOP-equivalent cost of layer ``name`` per configuration (the search's node vector).

        ``gradient_share`` scales the weight-gradient reductions: ``1/m`` when
        the graph is one of ``m`` microbatches that reduce their gradients once.
        """
        comm = self.comm_s[name] - (1.0 - gradient_share) * self.gradient_comm_s[name]
        return self.cluster.peak_flops * (self.compute_s[name] + comm)

    def cost_graph(self, gradient_share: float = 1.0) -> CostGraph:
        """The search's input: node cost vectors and edge cost matrices in FLOP-equivalents.

        ``gradient_share`` as :meth:`layer_cost_vector`. Several tensors
        between the same two layers add into one matrix. A
        table that repeated blocks share is scaled once and shared (the arrays
        are read-only), so the copy takes no more than the model's own tables.
        """
        index = self.index
        scaled: dict[int, np.ndarray] = {}
        merged: dict[tuple[int, int], np.ndarray] = {}
        for edge, table in self.edge_tables:
            if id(table) not in scaled:
                scaled[id(table)] = self.cluster.peak_flops * table
            key = (index[edge.src], index[edge.dst])
            merged[key] = scaled[id(table)] if key not in merged else merged[key] + scaled[id(table)]
        return CostGraph(
            node_costs=tuple(self.layer_cost_vector(layer.name, gradient_share) for layer in self.layers),
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
        edge = {layer.name: 0.0 for layer in self.layers}
        for e, table in self.edge_tables:
            edge[e.dst] += float(table[assignment[e.src], assignment[e.dst]])
        rows = []
        for layer in self.layers:
            k = assignment[layer.name]
            if layer.name not in self._flops:
                self._flops[layer.name] = training_flops(layer)
            if (layer.name, k) not in self._described:
                self._described[layer.name, k] = describe(layer, self.placements[layer.name], k)
            rows.append(LayerCost(
                name=layer.name, op=layer.op, dims=layer.dims, sizes=layer.sizes,
                config=tuple(int(f) for f in self.configs[layer.name][k]),
                flops=self._flops[layer.name], compute_flops=float(self.compute_flops[layer.name][k]),
                compute_s=float(self.compute_s[layer.name][k]),
                intra_comm_s=float(self.comm_s[layer.name][k]), edge_comm_s=edge[layer.name],
                placement=self._described[layer.name, k],
            ))
        return rows

    def strategy_cost(self, rows: list[LayerCost]) -> float:
        """Total FLOP-equivalent cost (the paper's F) of a :meth:`breakdown`."""
        peak = self.cluster.peak_flops
        return float(sum(peak * (row.compute_s + row.intra_comm_s + row.edge_comm_s) for row in rows))


def _layer_comm_s(graph: Graph, layer: Layer, configs: np.ndarray, placement: Placement, cluster: Cluster,
                  options: ConfigOptions) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of communication inside ``layer`` per configuration under ``options.cost_model``: all, and weight gradients'."""
    cfg = np.asarray(configs, dtype=float)
    found = collectives(layer, cfg, CollectiveOptions(sync_batchnorm=options.batchnorm_synchronised))
    if options.cost_model == "paper":
        found += partial_collectives(layer, cfg)
    elif OPS[layer.op].contraction:
        # Pending sums of an output nobody reads (the graph's result) are finished here.
        read = {e.src_output for e in graph.out_edges(layer.name)}
        found += [c for i, c in enumerate(partial_collectives(layer, cfg, [False] * len(layer.inputs)))
                  if i not in read]
    total, gradients = np.zeros(len(cfg)), np.zeros(len(cfg))
    for c in found:
        seconds = collective_s(c, axis_factors(layer, placement, c.dims), placement.mesh, cluster.bytes_per_element)
        total += seconds
        if c.weight_gradient:
            gradients += seconds
    return total, gradients


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


def options_on(options: ConfigOptions, cluster: Cluster) -> ConfigOptions:
    """``options`` with their split space set for ``cluster``'s mesh (:meth:`ConfigOptions.on_mesh`).

    ``"auto"`` is the mesh space on today's presets (the DGX clusters of
    :data:`~pase.hardware.cluster.PRESETS`, as a framework places layers on
    their node x GPU mesh) and the paper's divisors on the paper's presets
    (``paper-*``, whose results the paper reports) and on clusters built by
    hand or with a preset's figures overridden (named otherwise).
    """
    modern = cluster.name in PRESETS and not cluster.name.startswith("paper")
    return options.on_mesh(cluster.mesh.shape, modern)


def attention_kind(options: ConfigOptions, cluster: Cluster) -> str:
    """``"flash"`` or ``"unfused"``: how ``options.attention`` runs on ``cluster`` (``"auto"``: flash on a
    calibrated cluster under the corrected model, unfused at the paper's peak rates)."""
    if options.attention != "auto":
        return options.attention
    return "flash" if cluster.efficiency is not None and options.cost_model != "paper" else "unfused"


def describe_model(cluster: Cluster, attention: str, precision: str, experts: bool | None = None) -> dict:
    """Which step-time model prices ``cluster``, in words, for outputs to name: ``model`` (calibrated, or the
    paper's peak rates), ``calibration`` (where its figures come from), ``attention`` (``"flash"`` or
    ``"unfused"``, as :func:`attention_kind` resolved it), ``precision`` (and in FP8 ``fp8_scaling``, its
    recipe in words, :mod:`pase.model.precision`) and how model FLOPs and MFU count;
    for a training plan (``experts``: whether its model has them) also ``accuracy``, how far the model was
    from the published runs of its kind on its preset (:func:`pase.hardware.accuracy.accuracy`), where any."""
    e = cluster.efficiency
    found = None if experts is None else accuracy(cluster, experts)
    recipe = fp8_recipe(precision)
    flops = ("model FLOPs count a causal attention kernel's half of the square (as NVIDIA's model TFLOP/s)"
             if attention == "flash" else "model FLOPs count every attention score pair (Megatron-LM's formula)")
    return {
        "model": "peak rates (the paper's)" if e is None else "calibrated",
        "calibration": "none: every FLOP at the peak, every byte at the nominal bandwidth" if e is None
        else e.sources.get("matmul_curve", "a calibration without sources"),
        "attention": attention, "precision": precision, **({} if recipe is None else {"fp8_scaling": recipe.title}),
        "mfu_counting": f"{flops}; MFU against the BF16 dense peak of {cluster.peak_flops / 1e12:,.0f} TFLOP/s "
                        "whatever the precision",
        **({} if found is None else {"accuracy": found}),
    }


def check_precision(options: ConfigOptions, cluster: Cluster) -> None:
    """``ConfigurationError`` naming the fix when ``options.precision`` cannot be priced on ``cluster``: FP8 on
    a GPU without FP8, MXFP8 on one without Blackwell's tensor cores, or at the paper's peak rates (FP8's rates
    are a calibration's)."""
    if not options.fp8:
        return
    if cluster.fp8_peak_flops is None:
        raise ConfigurationError(f"cluster {cluster.name!r} has no FP8 tensor cores (no FP8 peak is known for it); "
                                 "train in bf16 (--precision bf16), or choose an H100, H200 or B200 preset")
    if fp8_recipe(options.precision).blackwell and not cluster.mxfp8:
        raise ConfigurationError(f"cluster {cluster.name!r} does not run MXFP8 (block-scaled FP8 needs Blackwell's "
                                 "tensor cores, a B200); use --precision fp8 or fp8-cs, or a B200 preset")
    if cluster.efficiency is None or options.cost_model == "paper":
        raise ConfigurationError("FP8 is priced by the calibrated step-time model; use the preset's calibration "
                                 "(not --peak-rates or --cost-model paper)")


def build_cost_model(
    graph: Graph,
    cluster: Cluster,
    options: ConfigOptions = ConfigOptions(),
    *,
    configs: Mapping[str, np.ndarray] | None = None,
    table_budget_bytes: int | None = None,
    shared_reads: bool = False,
    fuse_elementwise: bool = False,
    context_ring: bool = False,
) -> CostModel:
    """Enumerate configurations and compute every cost table of ``graph`` on ``cluster``.

    ``configs`` replaces the enumeration (layer name -> int array of rows), to
    cost given strategies whatever the options allow. ``table_budget_bytes``
    bounds the memory of the edge tables: the model's own (one per distinct
    table: repeated blocks share theirs), the copy :meth:`CostModel.cost_graph`
    makes in FLOP-equivalents, and the scratch of computing them. Default:
    ``DEFAULT_TABLE_BUDGET_BYTES`` (4 GiB) or, if less,
    :func:`~pase.limits.default_memory_budget_bytes`.

    ``shared_reads`` (for a costed strategy, one configuration per layer):
    a producer's output read by several consumers in the same layout (the
    same op, dimensions, input tensor and configuration: Megatron's q, k and
    v reading the norm's output) is redistributed once, not once per reader,
    as a fused product does: the first such edge keeps its table, the others
    cost nothing. Forward, one gather serves every reader; backward, the
    readers' gradients have the same layout and are summed locally before one
    reduction. The search (several configurations per layer) keeps one
    redistribution per reader, since which readers agree depends on their
    choices.

    Under flash attention (:func:`attention_kind`) each attention core is
    one kernel (:mod:`pase.model.attention`): its time on the score product,
    none on its other layers, and, for a costed strategy, nothing on the
    edges inside it; with ``context_ring`` (a costed strategy whose query
    splits are a context-parallel group) one kernel a ring step, as
    Transformer Engine's context parallelism runs it. On a calibrated
    cluster an attention with rotary position embeddings also pays the
    kernels that rotate its q and k, on its score product, fused or not
    (:func:`~pase.model.attention.rotary_times_s`).

    ``fuse_elementwise`` (likewise for a costed strategy; on a calibrated
    cluster, not under the paper's model): each chain of element-wise layers
    of one configuration each, the same, runs as one kernel
    (:func:`~pase.model.roofline.fused_chains`), charged to its last layer,
    the others' compute taking no time; FLOPs are counted as ever. The search
    prices every layer as a kernel of its own, since which chains fuse
    depends on the configurations it chooses.

    Raises
    ------
    GraphError
        The graph is invalid (see :meth:`Graph.validate`).
    ConfigurationError
        A given configuration does not tile the mesh under the corrected
        model, or a layer has too many configurations to list
        (:func:`~pase.ir.configs.layer_configs`).
    SearchTooLargeError
        The edge tables would exceed ``table_budget_bytes``; checked before any
        table is allocated, the message gives the bytes and what to change.
    """
    graph.validate()
    options = options_on(options, cluster)
    check_precision(options, cluster)
    if options.cost_model == "paper" and cluster.efficiency is not None:
        cluster = replace(cluster, efficiency=None)  # the paper's model: peak rates, nominal bandwidths
    layers = graph.layers
    kind = {layer.name: graph.kind(layer.name) for layer in layers}  # looked up for every edge's two ends
    if configs is None:
        listed: dict[int, np.ndarray] = {}  # by kind of layer: repeated blocks have the same configurations
        configs = {layer.name: listed[kind[layer.name]] if kind[layer.name] in listed
                   else listed.setdefault(kind[layer.name], layer_configs(layer, cluster.devices, options))
                   for layer in layers}
    else:
        configs = {name: np.asarray(rows, dtype=np.int64).reshape(len(rows), -1) for name, rows in configs.items()}
        checked = set()
        for layer in layers:
            rows = configs[layer.name]
            if (kind[layer.name], rows.shape, rows.tobytes()) not in checked:  # repeated blocks: once
                checked.add((kind[layer.name], rows.shape, rows.tobytes()))
                for row in rows:
                    check_config(layer, row, cluster.devices, options)
    edges = graph.edges
    if table_budget_bytes is None:
        table_budget_bytes = min(DEFAULT_TABLE_BUDGET_BYTES, default_memory_budget_bytes())
    mesh, bpe = cluster.mesh, cluster.bytes_per_element

    # Repeated blocks (Transformer layers, ResNet stages) repeat their edges: a table
    # depends only on the two tensors' layouts and configurations, so compute it once.
    interned: dict = {}
    ends: dict = {}

    def end(name: str, role: str, slot: int) -> int:
        # (op, dims, tensor) of one end as a number, hashed once per kind of layer.
        if (kind[name], role, slot) not in ends:
            layer = graph.layer(name)
            tensor = layer.outputs[slot] if role == "out" else layer.inputs[slot]
            ends[kind[name], role, slot] = interned.setdefault((layer.op, layer.dims, tensor), len(interned))
        return ends[kind[name], role, slot]

    def table_key(e: Edge) -> tuple:
        cs, cd = configs[e.src], configs[e.dst]
        return (end(e.src, "out", e.src_output), cs.shape, cs.tobytes(),
                end(e.dst, "in", e.dst_input), cd.shape, cd.tobytes())

    keys = [table_key(e) for e in edges]
    _check_table_memory(graph, cluster, configs, edges, keys, table_budget_bytes)
    paper = options.cost_model == "paper"
    placer = paper_placement if paper else place
    fed = {l.name: frozenset(e.dst_input for e in graph.in_edges(l.name)) for l in layers}
    read = {l.name: frozenset(e.src_output for e in graph.out_edges(l.name)) for l in layers}

    def needs_gradient(layer: Layer):
        # Under the corrected model a graph input (no edge feeds it) takes no gradient.
        return None if paper else [t.differentiable and i in fed[layer.name] for i, t in enumerate(layer.inputs)]

    # A layer's own costs depend on what it is, its configurations and which of its inputs are
    # fed and outputs read: repeated blocks share them, so each distinct layer is costed once.
    recipe = fp8_recipe(options.precision)
    fp8 = fp8_products(graph) if recipe else frozenset()
    placed: dict = {}
    own: dict = {}
    placements, mine = {}, {}
    for l in layers:
        rows = configs[l.name]
        split = rows.shape, rows.tobytes()
        if split not in placed:
            placed[split] = placer(rows, mesh)
        casts = input_casts(graph, l, fp8, recipe) if l.name in fp8 else None
        key = kind[l.name], split, fed[l.name], read[l.name], casts
        if key not in own:
            counted = OPS[l.op].flops(l, np.asarray(l.sizes, dtype=float) / rows)
            timed = None
            if cluster.efficiency is not None and not paper:
                timed = layer_times_s(l, rows, cluster.peak_flops, cluster.efficiency, bpe, needs_gradient(l),
                                      fp8_peak_flops=cluster.fp8_peak_flops if l.name in fp8 else None,
                                      casts=casts, recipe=recipe)
            own[key] = (_layer_comm_s(graph, l, rows, placed[split], cluster, options),
                        counted.total(needs_gradient(l)), counted.forward, timed)
        placements[l.name], mine[l.name] = placed[split], own[key]
    cache: dict = {}

    def edge_table(e: Edge, key: tuple) -> np.ndarray:
        if key not in cache:
            src, dst = graph.layer(e.src), graph.layer(e.dst)
            cache[key] = _edge_table(src, e, placements[e.src], configs[e.src], dst, placements[e.dst],
                                     configs[e.dst], mesh, bpe, paper)
        return cache[key]

    comm = {name: m[0] for name, m in mine.items()}
    flops = {name: m[1] for name, m in mine.items()}
    forward_flops = {name: m[2] for name, m in mine.items()}
    if cluster.efficiency is None or paper:
        peak = cluster.peak_flops
        forward = {name: f / peak for name, f in forward_flops.items()}
        seconds = {name: f / peak for name, f in flops.items()}
    else:
        forward = {name: m[3][0] for name, m in mine.items()}
        seconds = {name: m[3][0] + m[3][1] for name, m in mine.items()}
        if fuse_elementwise:
            _fuse_chains(graph, cluster, configs, needs_gradient, forward, seconds)
    tables = (_shared_reads(edges, keys, configs, edge_table) if shared_reads else
              [(e, edge_table(e, key)) for e, key in zip(edges, keys, strict=True)])
    if attention_kind(options, cluster) == "flash":
        units = flash_units(graph, explicit=options.attention == "flash")
        _fuse_attention(graph, units, cluster, configs, forward, seconds, paper, context_ring)
        if shared_reads:
            tables = _inside_attention_free(units, configs, tables)
    if cluster.efficiency is not None and not paper:
        for unit in attention_units(graph):
            if unit.rotary:
                f, b = rotary_times_s(graph, unit, configs[unit.scores], cluster.efficiency, bpe)
                forward[unit.scores] = forward[unit.scores] + f
                seconds[unit.scores] = seconds[unit.scores] + f + b
    return CostModel(
        graph=graph, cluster=cluster, options=options, layers=layers, configs=configs, placements=placements,
        compute_flops=flops, forward_flops=forward_flops, compute_s=seconds, forward_compute_s=forward,
        comm_s={name: both[0] for name, both in comm.items()},
        gradient_comm_s={name: both[1] for name, both in comm.items()},
        edge_tables=tables,
    )


def _fuse_chains(graph: Graph, cluster: Cluster, configs: Mapping[str, np.ndarray], needs_gradient,
                 forward: dict, seconds: dict) -> None:
    """Set the compute seconds of every fused chain's layers in ``forward`` and ``seconds`` (layer name ->
    ``(1,)``): the chain's kernels on its last layer, nothing on the others
    (``build_cost_model(fuse_elementwise=True)``)."""
    timed: dict = {}  # repeated blocks repeat their chains: price each kind of chain once
    for chain in fused_chains(graph, configs):
        at = {name: i for i, name in enumerate(chain)}
        key = (tuple((graph.kind(n), configs[n].tobytes(), tuple(needs_gradient(graph.layer(n)) or ())) for n in chain),
               tuple((at[e.src], e.src_output, at[e.dst], e.dst_input) for n in chain for e in graph.in_edges(n)
                     if e.src in at))
        if key not in timed:
            timed[key] = fused_times_s(graph, chain, configs, cluster.peak_flops, cluster.efficiency,
                                       cluster.bytes_per_element, needs_gradient)
        for name in chain[:-1]:
            forward[name], seconds[name] = np.zeros(1), np.zeros(1)
        f, b = timed[key]
        forward[chain[-1]], seconds[chain[-1]] = f, f + b


def _fuse_attention(graph: Graph, units, cluster: Cluster, configs: Mapping[str, np.ndarray], forward: dict,
                    seconds: dict, paper: bool, ring: bool = False) -> None:
    """Set the compute seconds of the layers of ``units`` (the attention cores that run fused) in ``forward``
    and ``seconds`` (layer name -> ``(K,)``) as one fused (flash) kernel each (:mod:`pase.model.attention`):
    the kernel's time on the score product, under each of its configurations, nothing on the core's other
    layers (``ring``: :func:`~pase.model.attention.flash_times_s`'s). At peak rates (no calibration, or the
    paper's model) the kernel's FLOPs at the peak."""
    timed: dict = {}  # repeated blocks repeat their units: price each kind once
    for unit in units:
        rows = configs[unit.scores]
        key = (graph.kind(unit.scores), rows.shape, rows.tobytes(), unit.mask, unit.window)
        if key not in timed:
            if cluster.efficiency is None or paper:
                f, b = (x / cluster.peak_flops for x in flash_flops(graph, unit, rows))
            else:
                f, b = flash_times_s(graph, unit, rows, cluster.peak_flops, cluster.efficiency,
                                     cluster.bytes_per_element, ring)
            timed[key] = (f, f + b)
        for name in unit.members:
            zeros = np.zeros(len(configs[name]))
            forward[name], seconds[name] = zeros, zeros
        forward[unit.scores], seconds[unit.scores] = timed[key]


def _inside_attention_free(units, configs: Mapping[str, np.ndarray], tables: list) -> list:
    """Edge tables with the edges inside each fused attention kernel (between two layers of one
    :class:`~pase.model.attention.AttentionUnit`, one configuration each) costing nothing: the kernel keeps
    its blocks on chip, whatever layouts its layers' splits name for them. The search (several configurations
    per layer) keeps their redistributions, so that its score and context products agree."""
    unit_of = {name: i for i, unit in enumerate(units) for name in unit.members}
    return [(e, np.zeros_like(table) if e.src in unit_of and unit_of[e.src] == unit_of.get(e.dst)
             and len(configs[e.src]) == 1 and len(configs[e.dst]) == 1 else table) for e, table in tables]


def _shared_reads(edges: list[Edge], keys: list[tuple], configs: Mapping[str, np.ndarray], edge_table) -> list:
    """Edge tables with each identical redistribution of one producer output to one-configuration readers
    counted once (``build_cost_model(shared_reads=True)``)."""
    out, seen = [], set()
    for e, key in zip(edges, keys, strict=True):
        table = edge_table(e, key)
        if len(configs[e.src]) == 1 and len(configs[e.dst]) == 1:
            if (e.src, e.src_output, key) in seen:
                table = np.zeros_like(table)
            seen.add((e.src, e.src_output, key))
        out.append((e, table))
    return out


def _edge_table(src: Layer, e: Edge, src_place: Placement, src_cfg: np.ndarray, dst: Layer, dst_place: Placement,
                dst_cfg: np.ndarray, mesh: DeviceMesh, bpe: int, paper: bool) -> np.ndarray:
    """Forward plus backward seconds of one edge, ``(K_src, K_dst)``, in blocks of source configurations.

    A block's temporaries stay within ``_EDGE_SCRATCH_BYTES`` (every row of
    the table depends on its source configuration alone, so the blocks give
    the very numbers one pass would).
    """
    rows = _block_rows(len(dst_cfg), len(dst.inputs[e.dst_input].axes), len(mesh.axes))

    def block(r0: int, r1: int) -> np.ndarray:
        masks = None if src_place.masks is None else src_place.masks[r0:r1]
        part = Placement(src_place.mesh, masks, src_place.factors[r0:r1])
        if paper:
            return _paper_edge_s(src, e, part, src_cfg[r0:r1], dst, dst_place, dst_cfg, mesh, bpe)
        return _corrected_edge_s(src, e, part, dst, dst_place, mesh, bpe)

    if rows >= len(src_cfg):
        return block(0, len(src_cfg))
    out = np.empty((len(src_cfg), len(dst_cfg)))
    for r0 in range(0, len(src_cfg), rows):
        out[r0:r0 + rows] = block(r0, min(r0 + rows, len(src_cfg)))
    return out


def _block_rows(k_dst: int, axes: int, mesh_axes: int) -> int:
    """Source configurations per block of an edge table with ``k_dst`` columns."""
    return max(1, _EDGE_SCRATCH_BYTES // (k_dst * _edge_entry_bytes(axes, mesh_axes)))


def _check_table_memory(graph: Graph, cluster: Cluster, configs: Mapping[str, np.ndarray], edges: list[Edge],
                        keys: list[tuple], budget: int) -> None:
    """``SearchTooLargeError`` if the edge tables, their FLOP-equivalent copy and their scratch exceed ``budget`` bytes.

    Counts one table per distinct ``keys`` entry twice (the model's and the
    cost graph's copy), once more each pair of layers joined by several
    tensors (their sum), and the largest block's scratch.
    """
    distinct: dict[tuple, Edge] = {}
    pairs: dict[tuple[str, str], int] = {}
    for e, key in zip(edges, keys, strict=True):
        distinct.setdefault(key, e)
        pairs[(e.src, e.dst)] = pairs.get((e.src, e.dst), 0) + 1
    entries = {key: len(configs[e.src]) * len(configs[e.dst]) for key, e in distinct.items()}
    tables = 8 * sum(entries.values())
    sums = 8 * sum(len(configs[s]) * len(configs[d]) for (s, d), n in pairs.items() if n > 1)
    mesh_axes = len(cluster.mesh.axes)
    scratch = 0
    for e in distinct.values():
        k_src, k_dst = len(configs[e.src]), len(configs[e.dst])
        axes = len(graph.layer(e.dst).inputs[e.dst_input].axes)
        rows = min(k_src, _block_rows(k_dst, axes, mesh_axes))
        scratch = max(scratch, rows * k_dst * _edge_entry_bytes(axes, mesh_axes))
    total = 2 * tables + sums + scratch
    if total <= budget:
        return
    big = max(distinct.values(), key=lambda e: len(configs[e.src]) * len(configs[e.dst]))
    raise SearchTooLargeError(
        f"the edge cost tables of {graph.name!r} on {cluster.devices:,} devices would take {total / 2**30:.2f} GiB "
        f"({len(distinct):,} distinct tables of {tables / 2**30:.2f} GiB, held twice: in seconds and in "
        f"FLOP-equivalents), over the budget of {budget / 2**30:.2f} GiB; the largest, between {big.src!r} "
        f"({len(configs[big.src]):,} configurations) and {big.dst!r} ({len(configs[big.dst]):,}), alone takes "
        f"{8 * len(configs[big.src]) * len(configs[big.dst]) / 2**30:.2f} GiB. Use fewer devices, only powers of two "
        "(ConfigOptions(powers_of_two=True), --powers-of-two) or a larger minimum shard size (min_shard, "
        "--min-shard), or pass a larger table_budget_bytes")
