"""Per-layer times of a 3-D configuration: each layer's forward, backward, recomputation and gradient seconds
and memory on one ``t x c`` group (:class:`LayerTimes`), built once per repeated block's shape and cached.
The model they feed: :mod:`pase.model.training` (its docstring says what each time holds)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph, Layer
from pase.model.attention import flash_units, lse_bytes, masked_model_flops
from pase.model.cost import attention_kind, build_cost_model
from pase.model.experts import apply_experts
from pase.model.memory import MemoryOptions, activation_bytes, buffer_elements
from pase.model.parallelism import RECOMPUTE, Parallelism, group_cluster
from pase.model.recompute import module_plan
from pase.model.repeats import PeriodicCore, periodic_core
from pase.model.roofline import MATRIX_OPS, blocks, fp8_products
from pase.ops import block_elements

GraphSource = Callable[[int], Graph] | Graph


def graph_at(source: GraphSource, batch: int) -> Graph:
    if isinstance(source, Graph):
        from pase.analysis.throughput import batch_size  # late: pase.analysis imports the planner

        have = batch_size(source)
        if have != batch:
            raise ConfigurationError(
                f"graph {source.name!r} is built for a batch of {have}, but a microbatch of {batch} samples per "
                "replica is asked for; use a sample model (it is rebuilt at any batch) or give the graph at the "
                "microbatch size")
        return source
    return source(batch)


@dataclass(frozen=True)
class LayerTimes:
    """Per layer (graph order), seconds per microbatch on the group, and what stage memory needs."""

    graph: Graph
    layers: tuple[Layer, ...]
    edges: np.ndarray  # (E, 3): producer index, consumer index, tensor index
    tensor_elements: np.ndarray  # per tensor an edge carries, its elements
    tied: tuple  # per parameter several layers share: their indices and their blocks' elements
    forward_s: np.ndarray
    backward_s: np.ndarray
    recompute_s: np.ndarray  # extra backward seconds under the configuration's recomputation
    gradient_s: np.ndarray  # weight-gradient reductions inside the group, once a step
    params: np.ndarray  # weight elements per device
    fp8_params: np.ndarray  # of those, the weights of FP8 products (each also held as FP8 copies)
    activations: np.ndarray  # bytes kept per microbatch
    buffers: np.ndarray
    recompute_flops: np.ndarray
    block_transient: Mapping[str, float]
    block_of: Mapping[str, str]
    model_flops: float
    expert_params: np.ndarray  # expert weight elements per device (pase.model.experts), not in params
    dispatch_s: np.ndarray  # an expert block's dispatch and combine seconds, forward and backward, before overlap
    expert_compute_s: np.ndarray  # an expert block's products and activation seconds, forward and backward
    plain_activations: np.ndarray  # bytes kept per microbatch without recomputation
    weight_grad_s: np.ndarray  # of backward_s, the weight-gradient products' (a zero-bubble schedule defers them)
    attention: str = "unfused"  # how the attention cores ran ("flash" or "unfused")
    precision: str = "bf16"
    experts: dict | None = None  # pase.model.experts.experts_summary of a model with experts
    # Under the 1F1B all-to-all overlap, what of an expert block's exchanges the merged schedule hides (forward and
    # backward): the microbatches the pipeline runs unmerged pay it (pase.model.expert_overlap.unmerged_share).
    overlap_hidden_s: np.ndarray | None = None
    memo: dict = field(default_factory=dict, compare=False)  # what assemble derived, by what it depends on


def _tied(layers: Iterable[tuple[int, Layer]], configs: Mapping[str, np.ndarray]) -> tuple:
    """Per weight several layers share (``TensorSpec.tied``): their indices and their blocks' elements under
    ``configs`` (one configuration per layer); ``layers``: (index, layer) pairs, every layer holding one among
    them."""
    shared: dict[str, list[tuple[int, float]]] = {}
    for i, l in layers:
        for w in l.weights:
            if w.tied:
                shared.setdefault(w.tied, []).append((i, float(block_elements(l, w, configs[l.name])[0])))
    return tuple((np.array([i for i, _ in v]), np.array([e for _, e in v])) for v in shared.values() if len(v) > 1)


def _edge_arrays(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """The graph's edges as (producer index, consumer index, tensor index) rows in its layer order, and per tensor
    an edge carries (a producer's output, however many read it) its elements; derived once per graph."""
    def compute():
        index = {l.name: i for i, l in enumerate(graph.layers)}
        tensors = {key: t for t, key in enumerate(dict.fromkeys((e.src, e.src_output) for e in graph.edges))}
        sizes = np.array([graph.layer(src).outputs[out].size for src, out in tensors], dtype=float)
        edges = np.array([(index[e.src], index[e.dst], tensors[(e.src, e.src_output)]) for e in graph.edges],
                         dtype=np.int64).reshape(-1, 3)
        return edges, sizes
    return graph.derived("training edges", compute)


def layer_times(graph: Graph, cluster: Cluster, strategy: Mapping[str, tuple[int, ...]], par: Parallelism,
                options: ConfigOptions = ConfigOptions(), memory: MemoryOptions = MemoryOptions(),
                recompute: Sequence[str] | None = None) -> LayerTimes | dict[str, LayerTimes]:
    """Per-layer seconds and bytes of one microbatch ``graph`` under ``strategy`` on ``par``'s group, its expert
    blocks costed under ``par``'s expert parallelism (:func:`pase.model.experts.apply_experts`).

    As :func:`group_times` otherwise; raises ``ConfigurationError`` as it and as ``apply_experts``.
    """
    times = group_times(graph, cluster, strategy, par, options, memory,
                        recompute=(par.recompute,) if recompute is None else recompute)
    memo: dict = {}
    out = {mode: apply_experts(lt, cluster, par, strategy, options.precision, memo) for mode, lt in times.items()}
    return out[par.recompute] if recompute is None else out


def group_times(graph: Graph, cluster: Cluster, strategy: Mapping[str, tuple[int, ...]], par: Parallelism,
                options: ConfigOptions = ConfigOptions(), memory: MemoryOptions = MemoryOptions(),
                recompute: Sequence[str] | None = None) -> LayerTimes | dict[str, LayerTimes]:
    """Per-layer seconds and bytes of one microbatch ``graph`` under ``strategy`` on ``par``'s ``t x c`` group.

    Depends on ``par`` only through its group, sequence parallelism,
    tensor-parallel overlap and recomputation; :func:`assemble` turns it into
    a step. With ``recompute`` (a sequence of modes), returns mode -> times,
    costing the graph once.

    On a calibrated cluster (not under the paper's model, whose times stay
    as the paper prices them) two things Megatron does are priced: each chain
    of element-wise layers runs as one kernel
    (``build_cost_model(fuse_elementwise=True)``: its fused bias + dropout +
    residual add); and under sequence parallelism a layer keeps the
    producer's smaller block of an input it gathered (as the memory model
    counts it) and gathers it again in its backward, for its weight gradient:
    the backward pays the forward's gather once more, once per tensor and
    layout however many layers read it (the fused QKV product). Tensor-
    parallel collectives are exposed unless ``par.tp_overlap`` says otherwise
    (:func:`_backward_collectives`).

    Raises ``ConfigurationError`` when the sizes do not tile the cluster or a
    layer's split is invalid on the group.
    """
    group = group_cluster(cluster, par)
    configs = {name: np.array([cfg]) for name, cfg in strategy.items()}
    cost = build_cost_model(graph, group, options, configs=configs, shared_reads=True, fuse_elementwise=True,
                            context_ring=par.context > 1)
    layers = cost.layers
    index = {l.name: i for i, l in enumerate(layers)}

    def alike(value: Callable[[Layer], float]) -> np.ndarray:
        # Layers alike in what they are and how they split (repeated blocks) give alike values.
        memo: dict = {}
        return np.array([memo[k] if (k := (graph.kind(l.name), strategy[l.name])) in memo
                         else memo.setdefault(k, value(l)) for l in layers])

    edge_s = np.zeros(len(layers))
    for e, table in cost.edge_tables:  # an edge's seconds are the consumer's, as in CostModel.breakdown
        edge_s[index[e.dst]] += float(table[0, 0])
    fwd_flops = np.array([float(cost.forward_flops[l.name][0]) for l in layers])
    fwd_s = np.array([float(cost.forward_compute_s[l.name][0]) for l in layers])
    total_s = np.array([float(cost.compute_s[l.name][0]) for l in layers])
    grad = np.array([float(cost.gradient_comm_s[l.name][0]) for l in layers])
    comm = np.array([float(cost.comm_s[l.name][0]) for l in layers]) + edge_s - grad
    forward = fwd_s + comm / 2
    backward = total_s - fwd_s + comm / 2
    products = np.array([bool(l.weights) for l in layers])
    # A product's backward is its input-gradient and its weight-gradient products, of equal FLOPs.
    half = np.where(products, (total_s - fwd_s) / 2, 0.0)
    if cost.cluster.efficiency is not None and (par.sequence_parallel or par.tp_overlap):
        backward = backward + _backward_collectives(graph, cost, configs, group, par, half)
    if cost.cluster.efficiency is not None and par.tp_comm_overlap:
        forward = forward - _forward_overlap(graph, cost, fwd_s)
    params = alike(lambda l: float(sum(block_elements(l, w, configs[l.name])[0] for w in l.weights)))
    tied = _tied(enumerate(layers), configs)
    edges, sizes = _edge_arrays(graph)
    bpe = group.bytes_per_element
    buffers = alike(lambda l: float(buffer_elements(l, configs[l.name])[0]) * bpe)
    flash = attention_kind(options, group) == "flash"
    units = flash_units(graph, explicit=options.attention == "flash") if flash else ()
    fused = frozenset().union(*(u.members for u in units))
    narrow = fp8_products(graph) if options.fp8 else frozenset()
    lse = {u.scores: float(lse_bytes(graph, u, configs[u.scores])[0]) for u in units}
    fp8_params = np.where([l.name in narrow for l in layers], params, 0.0)

    def kept(dropped: frozenset = frozenset(), checkpoints: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
        # A fused kernel keeps its log-sum-exp for its backward, unless recomputation reruns its forward.
        acts = activation_bytes(graph, configs, bpe, memory.index_bytes, producer_blocks=par.sequence_parallel,
                                fused=fused, narrow=narrow, dropped=dropped, checkpoints=checkpoints)
        rerun = dropped | frozenset(checkpoints or ())
        return {name: a + (0.0 if name in rerun else lse.get(name, 0.0)) for name, a in acts.items()}

    plain = kept()
    plain_array = np.array([float(plain[l.name][0]) for l in layers])
    zeros = np.zeros(len(layers))
    flops = _model_flops(graph, options, cluster)
    out = {}
    for mode in ((par.recompute,) if recompute is None else recompute):
        # Selective recomputation: Megatron-Core's modules (pase.model.recompute), checkpointed units and
        # discarded outputs; full: every block a unit.
        chosen = module_plan(graph, par.modules) if mode == "selective" else None
        block_of = (dict(graph.derived("blocks", lambda: blocks(graph))) if mode == "full"
                    else dict(chosen.units) if chosen is not None else {})
        transient: dict[str, float] = {}
        for l in layers:
            if l.name in block_of:
                transient[block_of[l.name]] = transient.get(block_of[l.name], 0.0) + float(plain[l.name][0])
        if mode == "full":
            recompute_flops, recompute_s = fwd_flops.copy(), forward.copy()
            acts = kept(checkpoints=block_of)
        elif chosen is not None:
            rerun = np.array([l.name in chosen.recomputed for l in layers], dtype=bool)
            # A checkpointed unit reruns its forward, its collectives included; a discarded output only its kernel.
            in_unit = np.array([l.name in chosen.units for l in layers], dtype=bool)
            recompute_flops = np.where(rerun, fwd_flops, 0.0)
            recompute_s = np.where(in_unit, forward, np.where(rerun, fwd_s, 0.0))
            acts = kept(dropped=chosen.discarded, checkpoints=chosen.units or None)
        else:
            recompute_flops, recompute_s = zeros, zeros
            acts = plain
        out[mode] = LayerTimes(
            graph=graph, layers=tuple(layers), edges=edges, tensor_elements=sizes, tied=tied,
            forward_s=forward, backward_s=backward, recompute_s=recompute_s, gradient_s=grad,
            params=params, fp8_params=fp8_params, activations=np.array([float(acts[l.name][0]) for l in layers]),
            buffers=buffers,
            recompute_flops=recompute_flops, block_transient=transient, block_of=block_of,
            model_flops=flops, expert_params=zeros, dispatch_s=zeros, expert_compute_s=zeros,
            plain_activations=plain_array, weight_grad_s=half, attention="flash" if units else "unfused",
            precision=options.precision)
    return out[par.recompute] if recompute is None else out


def _forward_overlap(graph: Graph, cost, compute_s: np.ndarray) -> np.ndarray:
    """Per layer, the forward seconds of tensor-parallel collectives hidden behind the products they feed or
    come from, as Transformer Engine's userbuffers overlap runs them (``Parallelism.tp_comm_overlap``).

    An edge's forward seconds are half its table (forward and backward move the same volumes), charged to its
    consumer. A redistribution of one producer output into products (the all-gather before a column-parallel
    product; several products reading it in one layout, as the fused QKV product does, share it) hides up to
    those products' forward compute (``compute_s``); a product's output redistributed into another layer (the
    reduce-scatter of a row-parallel product's partial sums) hides up to the product's own forward compute.
    """
    index = {l.name: i for i, l in enumerate(cost.layers)}
    product = {l.name: bool(l.weights) and l.op in MATRIX_OPS for l in cost.layers}
    gathers: dict = {}  # producer output -> [forward seconds, compute of the products reading it]
    hidden = np.zeros(len(cost.layers))
    for e, table in cost.edge_tables:
        seconds = float(table[0, 0]) / 2
        if product[e.dst]:
            entry = gathers.setdefault((e.src, e.src_output), [0.0, 0.0, index[e.dst]])
            entry[0] += seconds
            entry[1] += float(compute_s[index[e.dst]])
        elif product[e.src] and seconds > 0:
            hidden[index[e.dst]] += min(seconds, float(compute_s[index[e.src]]))
    for seconds, compute, first in gathers.values():
        hidden[first] += min(seconds, compute)
    return hidden


def _backward_collectives(graph: Graph, cost, configs: Mapping[str, np.ndarray], group: Cluster, par: Parallelism,
                          half: np.ndarray) -> np.ndarray:
    """Per layer, the seconds its backward adds to the cost model's collectives on a calibrated cluster
    (negative where it hides some of them); ``half`` is each layer's input-gradient (and weight-gradient)
    product's seconds, 0 for a layer without weights.

    Under sequence parallelism a layer keeps the producer's smaller block of
    an input it gathered and gathers it again in its backward, for its weight
    gradient: once per tensor and layout however many layers read it (the
    fused QKV product), charged to the first reader.

    Under ``par.tp_overlap``, Megatron-LM's asynchronous tensor-parallel
    backward (``LinearWithGradAccumulationAndAsyncCommunication``, on by
    default from February 2022, NVIDIA/Megatron-LM 83b1e42): a product
    computes its input gradient while the re-gather runs, then reduces the
    input gradient (an all-reduce, or a reduce-scatter under sequence
    parallelism) while it computes its weight gradient. Each collective hides
    up to that product's seconds, summed over the readers sharing it; the rest
    stays exposed. Without it every tensor-parallel collective is exposed.
    """
    from pase.model.layout import redistribute_s, tensor_layout
    from pase.ops import saved_tensors

    index = {l.name: i for i, l in enumerate(cost.layers)}
    mesh, bpe = group.mesh, group.bytes_per_element
    regathers: dict = {}  # (producer output, layout) -> [seconds, readers]
    reductions: dict = {}
    for e in graph.edges:
        src, dst = graph.layer(e.src), graph.layer(e.dst)
        tensor = dst.inputs[e.dst_input]
        if not tensor.differentiable:
            continue
        def held():
            return tensor_layout(src, src.outputs[e.src_output], cost.placements[e.src], partial=False)

        if (par.sequence_parallel and e.dst_input in saved_tensors(dst)[0]
                and block_elements(src, src.outputs[e.src_output], configs[e.src])[0]
                < block_elements(dst, tensor, configs[e.dst])[0]):
            wanted = tensor_layout(dst, tensor, cost.placements[e.dst], partial=False)
            key = (e.src, e.src_output, wanted.shard.tobytes())
            if key not in regathers:
                regathers[key] = [float(redistribute_s(held(), wanted, mesh, bpe)[0, 0]), []]
            regathers[key][1].append(index[e.dst])
        if par.tp_overlap and dst.weights:
            gradient = tensor_layout(dst, tensor, cost.placements[e.dst], partial=True)
            key = (e.src, e.src_output, gradient.shard.tobytes(), gradient.partial.tobytes())
            if key not in reductions:  # the readers' gradients are summed locally before one reduction
                reductions[key] = [float(redistribute_s(gradient, held(), mesh, bpe)[0, 0]), []]
            reductions[key][1].append(index[e.dst])
    added = np.zeros(len(cost.layers))
    for seconds, readers in regathers.values():
        added[readers[0]] += seconds - (min(seconds, float(half[readers].sum())) if par.tp_overlap else 0.0)
    for seconds, readers in reductions.values():
        added[readers[0]] -= min(seconds, float(half[readers].sum()))
    return added


def cached_graph(source: GraphSource, batch: int, cache: dict) -> Graph:
    """``source`` at ``batch`` samples, built once per ``cache`` (see :func:`cached_times`).

    Raises ``ConfigurationError`` when ``source`` is a graph at another batch.
    """
    if ("graph", batch) not in cache:
        cache["graph", batch] = graph_at(source, batch)
    return cache["graph", batch]


def cached_times(source: GraphSource, cluster: Cluster, par: Parallelism, options: ConfigOptions,
                 memory: MemoryOptions, cache: dict) -> dict[str, LayerTimes]:
    """Layer times of Megatron's splits for ``par``'s microbatch and group, per recomputation mode, memoised.

    ``cache`` keeps the graph of each microbatch size and the times of each
    (microbatch, tensor, context, sequence parallelism): everything else of
    ``par`` (pipeline and data sizes, schedule, ZeRO) is left to
    :func:`assemble`. One cache serves one source, cluster and options: the
    search, the baselines and the evaluation of a plan share it.

    Raises ``ConfigurationError`` as :func:`layer_times`.
    """
    b = par.microbatch_size
    base = ("times", b, par.tensor, par.context, par.sequence_parallel, par.tp_overlap, par.tp_comm_overlap,
            par.modules)
    # The expert blocks' costs depend on these too; the rest of the layers' times are shared by every expert layout.
    key = base + (par.ep, par.expert_tensor, par.etp is not None, par.expert_imbalance, par.capacity_factor,
                  par.expert_overlap, par.fp8_dispatch, par.dispatcher, par.shared_expert_overlap)
    if key not in cache:
        if base not in cache:
            _group_cache(source, cluster, par, options, memory, cache, base)
        if isinstance(cache[base], str):
            raise ConfigurationError(cache[base])
        strategy, times = cache[base]
        memo: dict = {}  # the blocks' costs, alike in every recomputation mode
        try:
            cache[key] = {mode: apply_experts(lt, cluster, par, strategy, options.precision, memo)
                          for mode, lt in times.items()}
        except ConfigurationError as exc:
            cache[key] = str(exc)
    if isinstance(cache[key], str):
        raise ConfigurationError(cache[key])
    return cache[key]


def _group_cache(source: GraphSource, cluster: Cluster, par: Parallelism, options: ConfigOptions,
                 memory: MemoryOptions, cache: dict, key: tuple) -> None:
    """Fill ``cache[key]`` with Megatron's whole-graph splits and the group's layer times per recomputation mode
    (:func:`group_times`), or the message of the ``ConfigurationError`` they raise (and raise it)."""
    from pase.strategies.baselines import tensor_parallel_strategy

    b = par.microbatch_size
    if key not in cache:
        graph = cached_graph(source, b, cache)
        whole_blocks = graph.derived("blocks", lambda: blocks(graph))
        core = graph.derived("periodic core", lambda: periodic_core(graph, whole_blocks))
        try:
            # Megatron's rule splits each layer by its own dimensions, alike in alike layers: the core's splits
            # are the whole run's.
            strategy = tensor_parallel_strategy(graph if core is None else core.graph, par.tensor, par.context,
                                                par.sequence_parallel)
        except ConfigurationError as exc:
            cache[key] = str(exc)  # the same sizes fail the same way for every pipeline and data size
            raise
        # Named modules go with selective recomputation alone (Parallelism refuses them with the other modes).
        modes = ("selective",) if par.recompute_modules is not None else RECOMPUTE
        if core is None:
            cache[key] = (strategy, group_times(graph, cluster, strategy, par, options, memory, recompute=modes))
        else:
            # Cost the graph with its run of identical blocks shortened to three, then spread the values over
            # the whole run: exact (pase.model.repeats) and as many times cheaper as the run is long.
            small = group_times(core.graph, cluster, strategy, par, options, memory, recompute=modes)
            splits = [strategy[l.name] for l in core.graph.layers]
            whole = dict(zip(_names(graph), map(splits.__getitem__, _representatives(graph, core))))
            # The tied weights' blocks depend on the splits alone: one list for every recomputation mode.
            tied = _tied(_tying(graph), {l.name: np.array([whole[l.name]]) for _, l in _tying(graph)})
            cache[key] = (whole, {mode: _spread(lt, graph, core, tied, options, cluster) for mode, lt in small.items()})


def _spread_units(small: LayerTimes, graph: Graph, core: PeriodicCore) -> tuple[dict[str, str], dict[str, str]]:
    """Per layer of ``graph``, its checkpointed unit (:attr:`LayerTimes.block_of`) from its representative's in
    ``small``, and per such unit the core's unit it repeats; depends on ``small.block_of`` alone, which the
    tables of one core share (derived once per graph and ``block_of``)."""
    # A checkpointed unit (a block, or a module of one) is named after its block: take the representative's unit
    # and put this layer's block in its name.
    whole, part = graph.derived("blocks", lambda: blocks(graph)), core.graph.derived("blocks", lambda: blocks(core.graph))
    block_of, units = {}, {}
    for l, r in zip(graph.layers, core.representative):
        unit = small.block_of.get(small.layers[r].name)
        if unit is not None:
            block_of[l.name] = whole[l.name] + unit[len(part[small.layers[r].name]):]
            units[block_of[l.name]] = unit
    return block_of, units


# What LayerTimes holds of the whole graph; every other field holds one value per layer (or None).
_GRAPH_FIELDS = frozenset({"graph", "layers", "edges", "tensor_elements", "tied", "block_transient", "block_of",
                           "model_flops", "attention", "precision", "experts", "memo"})


def _model_flops(graph: Graph, options: ConfigOptions, cluster: Cluster) -> float:
    """The graph's model FLOPs (:func:`pase.analysis.throughput.model_flops`), with a fused attention kernel's
    products counted as it computes them (a causal kernel half the square, as NVIDIA's "model TFLOP/s" counts
    them; :func:`pase.model.attention.masked_model_flops`); derived once per graph and attention kind."""
    from pase.analysis.throughput import model_flops  # late: pase.analysis imports the planner

    kind = attention_kind(options, cluster)

    def compute() -> float:
        flops = model_flops(graph, options.cost_model)
        if kind != "flash":
            return flops
        return flops - masked_model_flops(graph, flash_units(graph, explicit=options.attention == "flash"))
    return graph.derived(("model flops", options.cost_model, kind), compute)


def _names(graph: Graph) -> list[str]:
    """The names of ``graph``'s layers in its order; derived once per graph."""
    return graph.derived("layer names", lambda: [l.name for l in graph.layers])


def _representatives(graph: Graph, core: PeriodicCore) -> list[int]:
    """:attr:`PeriodicCore.representative` of ``graph``'s core as a list; derived once per graph."""
    return graph.derived("core representatives", lambda: core.representative.tolist())


def _tying(graph: Graph) -> tuple[tuple[int, Layer], ...]:
    """The layers of ``graph`` holding a tied weight (``TensorSpec.tied``), with their indices in its order;
    derived once per graph."""
    return graph.derived("tying layers", lambda: tuple((i, l) for i, l in enumerate(graph.layers)
                                                       if any(w.tied for w in l.weights)))


def _spread(small: LayerTimes, graph: Graph, core: PeriodicCore, tied: tuple, options: ConfigOptions,
            cluster: Cluster) -> LayerTimes:
    """The layer times of ``graph`` from those of its core (``small``, :func:`layer_times` of ``core.graph``):
    each layer takes its representative's values; what concerns the whole graph is derived from it (``tied``:
    :func:`_tied` of the whole graph's splits)."""
    rep = core.representative
    layers = tuple(graph.layers)
    per_layer = {f.name: None if getattr(small, f.name) is None else getattr(small, f.name)[rep]
                 for f in fields(LayerTimes) if f.name not in _GRAPH_FIELDS}
    block_of, units = graph.derived(("spread units", tuple(sorted(small.block_of.items()))),
                                    lambda: _spread_units(small, graph, core))
    transient = {unit: small.block_transient[of] for unit, of in units.items()}
    edges, sizes = _edge_arrays(graph)
    return LayerTimes(
        graph=graph, layers=layers, edges=edges, tensor_elements=sizes,
        tied=tied, block_transient=transient, block_of=block_of,
        model_flops=_model_flops(graph, options, cluster), attention=small.attention, precision=small.precision,
        **per_layer)

