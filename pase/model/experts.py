"""Expert parallelism in the 3-D model: where experts live, how tokens reach them, and what that costs.

Mesh roles, as Megatron-Core's process groups name them (``parallel_state``: tp, cp, dp, pp, ep, etp,
edp). *MoE parallel folding* (Liu et al. 2025, arXiv:2504.14960; Megatron-Core's
``expert_tensor_parallel_size``): the attention and dense layers of a pipeline stage run on its
``t x c x d`` devices as tensor, context and data parallelism (:mod:`pase.model.training`); its
experts run on the *same* devices laid out again, innermost first, as expert tensor parallelism
``etp`` (each expert's feed-forward width split), expert parallelism ``ep`` (the experts dealt out)
and expert data parallelism ``edp = t c d / (etp ep)`` (replicas of one expert layout). The expert
groups therefore fill a node before they leave it: EP inside a node first, ETP innermost.

A mixture-of-experts block of the graph is three layers (:mod:`pase.ops.moe`): the router, the
experts (one ``MoEExperts`` layer with an expert dimension) and the combine. Under Megatron's rule
(:func:`pase.strategies.baselines.tensor_parallel_strategy`) the router and the combine run on the
tokens each device holds, and the experts layer follows their token split, so that the group's cost
model prices the router, its top-k and the permutation copies (the dispatched slots) on those tokens
and nothing on the edges between the three layers. :func:`apply_experts` then replaces what the
experts layer costs and holds by this module's model, per device and microbatch (Megatron-Core's
``alltoall`` token dispatcher with grouped GEMM):

* tokens: a device enters the block with ``T = b s / (t c)`` tokens of its microbatch (its
  sequence-parallel share; without sequence parallelism the tensor-parallel ranks hold the same
  tokens, so the block takes each rank's ``1/t`` of them and all-gathers its output over the
  tensor-parallel group at the end, as Megatron-LM's older MoE layer did) and routes ``T k`` token
  copies (top-``k``);
* load: the busiest device's experts get ``L`` times the mean: ``L`` is the expert imbalance
  ``F`` (the busiest expert's tokens over the mean; 1 = forced balance, as NVIDIA's benchmarks run)
  when every token is kept (dropless), and the capacity factor when tokens past an expert's
  capacity are dropped and the rest padded up to it (Megatron-Core's
  ``--moe-expert-capacity-factor`` with ``--moe-pad-expert-input-to-capacity``);
* dispatch: an all-to-all over the EP group of the ``L T k`` token copies (``d`` elements each, at
  ``bytes_per_element``, or one byte each plus a 4-byte scale per 128 under FP8 dispatch, as
  DeepEP sends them), then an all-gather over the ETP group (each ETP rank computes its width of
  every token its experts got); the combine: a reduce-scatter over ETP and the all-to-all back, in
  the working precision. The backward runs both in reverse, the same bytes
  (:meth:`~pase.hardware.mesh.DeviceMesh.all_to_all_s` over the mesh axes the group spans). Under DeepEP
  (``par.dispatcher == "deepep"``, Megatron-Core's flex dispatcher; DeepEP's README and the DeepSeek-V3
  Technical Report, section 3.2.2) a token crosses the network once for each other node that holds some of
  its experts, to the GPU of its own local index there, which forwards it over NVLink to each of that node's
  GPUs its experts are on (a GPU gets a token once however many of its experts chose it); the network and
  NVLink shares run at once, the longer one timing the exchange. How many nodes and GPUs a token reaches
  (:func:`deepep_fanout`) comes from the routing NVIDIA's benchmarks force, random router logits, limited to
  the router's groups where it has them (DeepSeek-V3's node-limited routing);
* compute: ``E / ep`` local experts, each on ``n = L T k etp ep / E`` tokens (its real size), as
  grouped products ``fc1`` (gate and up fused, ``n x d x 2 f / etp``) and ``fc2`` (``n x f / etp x
  d``): forward both, backward an input-gradient and a weight-gradient product of each, one kernel
  per local expert and product (Transformer Engine's ``GroupedLinear``), each at the measured efficiency
  of its own size (:meth:`~pase.hardware.efficiency.Efficiency.matmul_fraction`; small products run far
  below peak) and none overlapped with another (``GROUPED_GEMM_EVIDENCE``: published timings of TE's
  multi-stream loop show no concurrency); the SwiGLU activation memory-bound; in FP8, the products on
  the FP8 curve plus their activations' casts, each grouped input forward and output gradient backward as
  one cast of every local expert's rows, as its recipe casts them (:mod:`pase.model.precision`), the
  weights once a step with the dense products'; with more than one local expert and more than one source
  rank, the sort of the received rows by local expert after the dispatch and back before the combine
  (Megatron-Core's "permutation 2"), a read and a write of the rows each, forward and backward;
* overlap: the dispatch and combine are exposed unless ``expert_overlap`` is asked for (off by
  default): then Megatron-Core's 1F1B all-to-all overlap hides each exchange of one microbatch behind a
  part of another's transformer layer, as :mod:`pase.model.expert_overlap` schedules it (DeepEP's
  kernels holding some of the SMs meanwhile); the layer's exposed time is the experts layer's. With
  ``shared_expert_overlap`` instead, the block's shared experts run beside its exchanges, each way;
* memory: each device holds ``E / ep`` experts at ``1 / etp`` of their width (weights, and
  gradients and optimizer state sharded over the expert-data-parallel group by ZeRO / the
  distributed optimizer, :func:`pase.model.training.assemble`); it keeps, per microbatch, the
  dispatched tokens its experts got (``n_dev = L T k etp`` rows of ``d``; FP8 copies in FP8), the
  ``fc1`` output (``2 f / etp`` a row, for SwiGLU's backward), the activation (``f / etp`` a row,
  for ``fc2``'s weight gradient; not kept under the ``moe_act`` recompute module, whose forward is
  then rerun, :mod:`pase.model.recompute`) and each row's FP32 gate: Megatron-Core weighs the rows
  by their gates inside the activation, so the combine (the un-permutation and sum) keeps nothing;
  the dispatch buffers (the permuted send buffer and the gathered receive buffer) are transient.

Shared experts are dense SwiGLU layers of the graph, split by tensor parallelism as any other.
The router's weights are replicated and reduced with the dense layers'.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster
from pase.hardware.mesh import DeviceMesh
from pase.ir.graph import Graph
from pase.model.expert_overlap import LayerParts, comm_sm_share, merged_layer_s
from pase.model.recompute import shared_expert_layers
from pase.model.precision import fp8_recipe
from pase.model.roofline import blocks as transformer_blocks, matrix_kernel_s, vector_kernel_s
from pase.ops.norm import SOFTMAX_FLOPS_PER_ELEMENT, SOFTMAX_FORWARD_FLOPS
from pase.model.groups import group_extents

__all__ = ["ROLES", "ExpertLayout", "ExpertBlock", "expert_layout", "moe_blocks", "deepep_fanout",
           "block_costs", "apply_experts", "FP8_DISPATCH_BYTES", "SWIGLU_VECTOR_FLOPS", "GROUPED_GEMM_EVIDENCE",
           "experts_summary"]

# Mesh roles of Megatron-Core's process groups, innermost first within each layout.
ROLES = {"tp": "tensor", "cp": "context", "dp": "data", "pp": "pipeline", "ep": "expert",
         "etp": "expert tensor", "edp": "expert data"}
# Tokens of the routing simulation behind deepep_fanout (its fractions then vary by about 1% between seeds).
FANOUT_TOKENS = 4096
# FP8 dispatch (DeepEP): one byte an element plus a 4-byte FP32 scale per 128 elements.
FP8_DISPATCH_BYTES = 1 + 4 / 128
# SwiGLU per hidden element: forward silu and product (2 FLOPs), backward 4 (:mod:`pase.ops.moe`).
SWIGLU_VECTOR_FLOPS = (2, 4)
# Why the experts' products are priced one kernel at a time. Transformer Engine's GroupedLinear loops over the local
# experts, one cuBLASLt product each, dealt over 4 compute streams (NVIDIA/TransformerEngine#853; multi_stream.cpp).
# Published timings of such loops show no concurrency to credit: TE's multi-stream path on SM100 took 0.267 ms for 8
# experts of 128 tokens (N = K = 2,048, kernels alone, NVIDIA/TransformerEngine#3134's table), more than 8 kernels
# priced alone here (0.08 ms) and 5x the 4-way concurrency the model had credited (0.05 ms); a cuBLAS loop over
# Qwen3-30B-A3B's 128 up projections of 512 tokens on one H100 reached 129.5 TFLOP/s in BF16 (tgale96/grouped_gemm#37),
# 25 us an expert, against 38 us priced alone here and 9 us with the 4-way concurrency.
GROUPED_GEMM_EVIDENCE = ("NVIDIA/TransformerEngine#3134 (multi-stream cuBLASLt, SM100: 8 x 128 tokens, N = K = 2048, "
                         "0.267 ms); tgale96/grouped_gemm#37 (cuBLAS loop, H100 BF16, 128 x 512 tokens, K 2048, "
                         "N 1536: 129.5 TFLOP/s)")
# A routed row's gate probability, kept in FP32 for the weighted activation's backward.
PROB_BYTES = 4


@dataclass(frozen=True)
class ExpertLayout:
    """The expert groups of a configuration on the mesh (the module docstring).

    ``etp``, ``ep``, ``edp``: sizes; ``etp_k``, ``ep_k``, ``edp_k``, ``tp_k``: each group's extent on
    every mesh axis (outermost first), ``tp_k`` the tensor-parallel group's.
    """

    etp: int
    ep: int
    edp: int
    etp_k: tuple[int, ...]
    ep_k: tuple[int, ...]
    edp_k: tuple[int, ...]
    tp_k: tuple[int, ...]

    def axes(self, mesh: DeviceMesh, role: str) -> dict[str, int]:
        """Mesh axis name -> extent of group ``role`` (``"etp"``, ``"ep"``, ``"edp"``, ``"tp"``), spanned axes only."""
        extents = getattr(self, f"{role}_k")
        return {a.name: k for a, k in zip(mesh.axes, extents) if k > 1}


def expert_layout(par: "Parallelism", mesh: DeviceMesh) -> ExpertLayout:
    """Place ``par``'s expert groups on ``mesh``: ETP innermost, then EP, then expert-DP, then the pipeline.

    Raises
    ------
    ConfigurationError
        ETP x EP is larger than a stage's ``t c d`` devices or does not divide them, or a group does not
        tile the mesh.
    """
    stage = par.tensor * par.context * par.data
    etp, ep = par.expert_tensor, par.ep
    if etp * ep > stage or stage % (etp * ep):
        raise ConfigurationError(
            f"expert tensor {etp} x expert {ep} = {etp * ep} devices must divide the {stage} devices of a pipeline "
            f"stage (tensor {par.tensor} x context {par.context} x data {par.data}); choose an --ep and --etp whose "
            "product divides them")
    etp_k, ep_k, edp_k, _ = group_extents(mesh, (etp, ep, stage // (etp * ep), par.pipeline),
                                          ("expert-tensor", "expert-parallel", "expert-data", "pipeline"))
    tp_k = group_extents(mesh, (par.tensor, mesh.devices // par.tensor), ("tensor", "rest"))[0]
    return ExpertLayout(etp, ep, stage // (etp * ep), etp_k, ep_k, edp_k, tp_k)


@dataclass(frozen=True)
class ExpertBlock:
    """One mixture-of-experts block of a graph: its layers' names and sizes (``b`` the microbatch)."""

    experts_layer: str
    router: str
    combine: str
    b: int
    s: int
    d: int
    f: int
    experts: int
    top_k: int
    groups: int = 1
    group_topk: int = 1


def moe_blocks(graph: Graph) -> tuple[ExpertBlock, ...]:
    """The graph's mixture-of-experts blocks: every ``MoEExperts`` layer with the router feeding it."""
    def compute():
        out = []
        for layer in graph.layers:
            if layer.op != "MoEExperts":
                continue
            router = graph.layer(next(e.src for e in graph.in_edges(layer.name)))
            combine = next(e.dst for e in graph.out_edges(layer.name))
            p, q = layer.param_dict, router.param_dict
            out.append(ExpertBlock(layer.name, router.name, combine, p["b"], q["s"], p["d"], p["f"], p["experts"],
                                   q["top_k"], q.get("groups", 1), q.get("group_topk", 1)))
        return tuple(out)
    return graph.derived("moe blocks", compute)


@lru_cache(maxsize=64)
def deepep_fanout(experts: int, top_k: int, groups: int, group_topk: int, nodes: int,
                  ranks_per_node: int) -> tuple[float, float]:
    """Per token, the copies DeepEP sends: ``(across the network, over NVLink)``, on average.

    The experts are dealt in order to an expert-parallel group of ``nodes`` nodes of ``ranks_per_node`` GPUs
    each (``experts / (nodes ranks_per_node)`` a GPU). A token goes once to each other node holding some of
    its ``top_k`` experts, and from the GPU it lands on (its sender's local index) or from the sender, on its
    own node, once to each other GPU holding some of them (the module docstring). The routing is what NVIDIA's
    benchmarks force (Megatron-Core's ``moe_router_force_load_balancing``: normal random logits), limited to
    ``group_topk`` of ``groups`` expert groups where ``groups > 1`` (``group_limited_topk``: a group's score
    the sum of its best ``top_k / group_topk`` sigmoid scores), simulated on :data:`FANOUT_TOKENS` tokens of a
    fixed seed. By symmetry a node the token reaches is its sender's with probability ``1 / nodes``, and a GPU
    it reaches is the one it lands on with probability ``1 / ranks_per_node``.

    Raises ``ConfigurationError`` when the GPUs do not divide the experts.
    """
    ranks = nodes * ranks_per_node
    if experts % ranks:
        raise ConfigurationError(f"an expert-parallel group of {ranks} GPUs does not divide the {experts} experts")
    logits = np.random.default_rng(0).standard_normal((FANOUT_TOKENS, experts))
    if groups > 1:
        scores = 1.0 / (1.0 + np.exp(-logits))
        per_group = scores.reshape(FANOUT_TOKENS, groups, experts // groups)
        best = -np.sort(-per_group, axis=-1)[..., :max(top_k // group_topk, 1)].sum(axis=-1)
        chosen = np.argsort(-best, axis=-1, kind="stable")[:, :group_topk]
        allowed = np.zeros((FANOUT_TOKENS, groups), dtype=bool)
        np.put_along_axis(allowed, chosen, True, axis=-1)
        logits = np.where(np.repeat(allowed, experts // groups, axis=-1), scores, -np.inf)
    picked = np.argsort(-logits, axis=-1, kind="stable")[:, :top_k]
    rank = picked // (experts // ranks)

    def reached(unit: np.ndarray, count: int) -> float:
        hit = np.zeros((FANOUT_TOKENS, count), dtype=bool)
        np.put_along_axis(hit, unit, True, axis=-1)
        return float(hit.sum(axis=-1).mean())
    remote = reached(rank // ranks_per_node, nodes) * (nodes - 1) / nodes
    return remote, reached(rank, ranks) * (ranks_per_node - 1) / ranks_per_node


def _deepep_s(block: ExpertBlock, mesh: DeviceMesh, layout: ExpertLayout, tokens: float,
              bytes_per_element: float) -> tuple[float, float, float]:
    """One DeepEP exchange of ``tokens`` tokens of ``block.d`` elements: ``(seconds, tokens across the network,
    tokens over NVLink)``; the network share at the outermost axis the expert group spans beyond the innermost
    (a node's GPUs), the NVLink share on the innermost, at once (the module docstring)."""
    ep_k = layout.ep_k
    nodes, inner = int(np.prod(ep_k[:-1])), int(ep_k[-1])
    remote, local = deepep_fanout(block.experts, block.top_k, block.groups, block.group_topk, nodes, inner)
    row = block.d * bytes_per_element
    network = mesh.exchange_s(tokens * remote * row, tuple(ep_k[:-1]) + (1,))
    nvlink = mesh.exchange_s(tokens * local * row, (1,) * (len(ep_k) - 1) + (inner,))
    return max(float(network), float(nvlink)), tokens * remote, tokens * local


def block_costs(block: ExpertBlock, par: "Parallelism", cluster: Cluster, layout: ExpertLayout,
                precision: str = "bf16") -> dict[str, float]:
    """Per device and microbatch, what one expert block costs and holds under ``par`` (the module docstring).

    Returns seconds ``forward_s``, ``backward_s`` (each with its communication, none overlapped), ``dispatch_s``
    (every all-to-all and ETP collective of the step's forward and backward for this block, before any
    overlap), ``exchanges`` (of those: dispatch and combine forward, then backward) and ``tp_gather_s`` (the rest:
    the tokens' gather without sequence parallelism), ``compute_s`` (the experts' products and activation,
    forward and backward: ``forward_compute_s`` plus ``backward_compute_s``, of which ``wgrad_s`` the weight
    gradients'); elements
    ``params`` (the device's expert weights); bytes ``activations`` (kept for the backward) and
    ``buffers`` (transient dispatch buffers); ``tokens`` (token copies the device sends in one
    all-to-all) and ``expert_tokens`` (tokens per local expert, its products' rows); ``sort_s`` and ``act_s`` (of
    ``compute_s``, the received rows' sort by local expert and back, and the SwiGLU activation, each forward and
    backward).

    Raises ``ConfigurationError`` when EP does not divide the experts, ETP the expert width, or the tensor x
    context split the microbatch's tokens.
    """
    E, k, d, f = block.experts, block.top_k, block.d, block.f
    etp, ep = layout.etp, layout.ep
    if E % ep:
        raise ConfigurationError(f"expert parallelism {ep} does not divide the {E} experts of "
                                 f"{block.experts_layer!r}; choose an --ep that divides {E}")
    if f % etp:
        raise ConfigurationError(f"expert tensor parallelism {etp} does not divide the experts' width {f} of "
                                 f"{block.experts_layer!r}; choose an --etp that divides it")
    q = par.tensor * par.context
    if (block.b * block.s) % q:
        raise ConfigurationError(f"the {block.b * block.s} tokens of a microbatch do not split over tensor "
                                 f"{par.tensor} x context {par.context} devices")
    T = block.b * block.s / q
    load = par.capacity_factor if par.capacity_factor is not None else par.expert_imbalance
    copies = load * T * k  # token copies the busiest device sends and receives
    rows = copies * etp  # tokens its experts compute, every ETP rank's gathered
    local = E // ep
    n = rows / local  # rows of one local expert's products
    width = f // etp
    bpe = cluster.bytes_per_element
    mesh = cluster.mesh
    recipe = fp8_recipe(precision)
    fp8 = recipe is not None
    dispatch_bytes = FP8_DISPATCH_BYTES if par.fp8_dispatch else bpe
    if par.dispatcher == "deepep":
        # DeepEP sends each token once per node and GPU it reaches, the busiest device load times the mean.
        dispatch, across, nvlink = _deepep_s(block, mesh, layout, load * T, dispatch_bytes)
        combine = _deepep_s(block, mesh, layout, load * T, bpe)[0]
        sent = across + nvlink
    else:
        dispatch = float(mesh.all_to_all_s(copies * d * dispatch_bytes, layout.ep_k))
        combine = float(mesh.all_to_all_s(copies * d * bpe, layout.ep_k))
        sent = copies * (layout.ep - 1) / layout.ep
        across = copies * (1 - layout.ep_k[-1] / layout.ep) if len(layout.ep_k) > 1 else 0.0
    # Expert tensor parallelism gathers the rows with the dispatch and reduce-scatters them with the combine.
    etp_half = float(mesh.allgather_s(rows * d * bpe, layout.etp_k))
    tp_gather = 0.0
    if par.tensor > 1 and not par.sequence_parallel:
        tp_gather = float(mesh.allgather_s(T * par.tensor * d * bpe, layout.tp_k))
    # Dispatch and combine forward, and their gradients' ways back (the same bytes; the tensor-parallel slice is
    # free).
    exchanges = (dispatch + etp_half, combine + etp_half, dispatch + etp_half, combine + etp_half)

    products = ((2 * width, "fc1"), (width, "fc2"))
    eff = cluster.efficiency
    peak = cluster.peak_flops
    fp8_peak = cluster.fp8_peak_flops if fp8 else None
    elements_in = {"fc1": (n * d, 2 * width * d, n * 2 * width), "fc2": (n * width, width * d, n * d)}
    fwd = bwd = wgrad = 0.0
    for out_width, name in products:
        flops = 2.0 * n * d * out_width  # one expert's product
        x, w, y = elements_in[name]
        nbytes = (x + w + y) * bpe
        if eff is None:
            fwd += local * flops / peak
            wgrad += local * flops / peak
            bwd += 2 * local * flops / peak
            continue
        # Transformer Engine's grouped products run each local expert's product as its own cuBLAS kernel (a loop
        # over the experts dealt over its compute streams): each priced alone on the measured curve. No
        # concurrency is credited: the published timings of that path show none (GROUPED_GEMM_EVIDENCE).
        group = lambda kind: local * float(matrix_kernel_s(np.array([flops]), np.array([nbytes]), peak, eff, kind,
                                                           fp8_peak)[0])
        fwd += group("forward")
        wgrad += group("wgrad")
        bwd += group("dgrad") + group("wgrad")
        if fp8:
            # Casts: forward the product's input, backward its output gradient; the weights are the step's.
            cast, gradient = recipe.activation, recipe.gradient
            fwd += local * x * cast.forward / eff.memory_Bps + cast.kernels * eff.kernel_overhead_s
            bwd += local * y * gradient.backward / eff.memory_Bps + gradient.kernels * eff.kernel_overhead_s
    hidden = rows * width
    if eff is None:
        act_f = SWIGLU_VECTOR_FLOPS[0] * hidden / peak
        act_b = SWIGLU_VECTOR_FLOPS[1] * hidden / peak
    else:
        # SwiGLU reads the fc1 output (2 per hidden element) and writes the activation (1).
        act_f = float(vector_kernel_s(np.array([SWIGLU_VECTOR_FLOPS[0] * hidden]), np.array([3 * hidden * bpe]),
                                      eff)[0])
        act_b = float(vector_kernel_s(np.array([SWIGLU_VECTOR_FLOPS[1] * hidden]), np.array([4.5 * hidden * bpe]),
                                      eff)[0])
    fwd += act_f
    bwd += act_b
    if local > 1 and ep * etp > 1 and eff is not None:  # moves bytes only: free under the peak-rate model
        # Megatron-Core's "permutation 2": the received rows (and their gates) sorted from source-rank-major to
        # local-expert-major after the dispatch, and back before the combine (MoEAlltoAllTokenDispatcher's
        # dispatch_postprocess and combine_preprocess: a transpose made contiguous under token-drop with padding,
        # sort_chunks_by_idxs without; the flex dispatcher permutes DeepEP's output likewise), each a read and a
        # write of the rows; the backward moves the gradients the same ways. From one source alone (EP x ETP 1) the
        # rows arrive expert-major already: no copy.
        sort = float(vector_kernel_s(np.zeros(3), np.array([2 * rows * d * bpe, 2 * rows * PROB_BYTES,
                                                            2 * rows * d * bpe]), eff).sum())
        fwd += sort
        bwd += sort
    else:
        sort = 0.0
    forward_s = fwd + exchanges[0] + exchanges[1] + tp_gather
    backward_s = bwd + exchanges[2] + exchanges[3]
    kept_input = 1 if fp8 else bpe
    router_f, router_b, combine_f, combine_b = _router_combine_s(block, par, cluster)
    return {
        "router_forward_s": router_f, "router_backward_s": router_b,
        "combine_forward_s": combine_f, "combine_backward_s": combine_b,
        "forward_s": forward_s, "backward_s": backward_s, "dispatch_s": sum(exchanges) + tp_gather,
        "exchanges": exchanges, "tp_gather_s": tp_gather, "forward_compute_s": fwd, "backward_compute_s": bwd,
        "wgrad_s": wgrad, "compute_s": fwd + bwd, "params": float(local * 3 * d * width),
        # The dispatched tokens (fc1's input), fc1's output (SwiGLU's input), the activation (fc2's input) and
        # each row's gate, FP32: Megatron-Core weighs the rows in the activation (activation_func_with_probs).
        "activations": rows * d * kept_input + rows * 2 * width * bpe + rows * width * kept_input + rows * PROB_BYTES,
        "act_forward_s": act_f, "act_s": act_f + act_b, "act_flops": SWIGLU_VECTOR_FLOPS[0] * hidden,
        "act_bytes": rows * width * kept_input,
        "buffers": copies * d * bpe * (1 + etp), "tokens": copies, "expert_tokens": n, "sort_s": 2 * sort,
        "tokens_sent": sent, "tokens_across_nodes": across,
    }


def _router_combine_s(block: ExpertBlock, par: "Parallelism", cluster: Cluster) -> tuple[float, float, float, float]:
    """Forward and backward seconds of one device's router (logits product, softmax or sigmoid and top-k, the
    permutation of its token copies) and combine (the un-permutation and gate-weighted sum), on the tokens it
    routes (``b s / (t c)`` under sequence parallelism, ``b s / c`` without: every tensor-parallel rank routes
    its copy). The logits are a matrix product (on the tensor cores, as frameworks run them); the rest are
    memory-bound vector kernels: the permutation reads and writes ``T k d`` elements, the combine reads ``T k d``
    and writes ``T d``, a backward one and a half times its forward's bytes."""
    E, k, d = block.experts, block.top_k, block.d
    T = block.b * block.s / (par.context * (par.tensor if par.sequence_parallel else 1))
    bpe, eff, peak = cluster.bytes_per_element, cluster.efficiency, cluster.peak_flops
    logits = 2.0 * T * d * E
    scores = T * E  # logits, probabilities
    if eff is None:
        return ((logits + (SOFTMAX_FORWARD_FLOPS + k) * scores) / peak,
                (2 * logits + (SOFTMAX_FLOPS_PER_ELEMENT - SOFTMAX_FORWARD_FLOPS) * scores + T * k * d) / peak,
                2 * T * k * d / peak, 3 * T * k * d / peak)
    product_bytes = (T * d + E * d + scores) * bpe

    def matrix(kind: str) -> float:
        return float(matrix_kernel_s(np.array([logits]), np.array([product_bytes]), peak, eff, kind)[0])

    def vector(flops: float, nbytes: float) -> float:
        return float(vector_kernel_s(np.array([flops]), np.array([nbytes]), eff)[0])

    route_f = vector((SOFTMAX_FORWARD_FLOPS + k) * scores, 2 * scores * bpe)
    route_b = vector((SOFTMAX_FLOPS_PER_ELEMENT - SOFTMAX_FORWARD_FLOPS) * scores, 3 * scores * bpe)
    permute = 2 * T * k * d * bpe
    router_f = matrix("forward") + route_f + vector(0.0, permute)
    router_b = matrix("dgrad") + matrix("wgrad") + route_b + vector(T * k * d, 1.5 * permute)
    combine = (T * k * d + T * d) * bpe
    return router_f, router_b, vector(2 * T * k * d, combine), vector(3 * T * k * d, 1.5 * combine)


def apply_experts(lt: "LayerTimes", cluster: Cluster, par: "Parallelism", strategy: Mapping[str, Sequence[int]],
                  precision: str = "bf16", memo: dict | None = None) -> "LayerTimes":
    """``lt`` with every expert block's layer costed and held by :func:`block_costs` (the module docstring).

    ``strategy`` is the layer splits ``lt`` was costed under. An experts layer split along anything but its
    tokens (a per-layer search's expert split inside the group) keeps the group's costs, and then expert
    parallelism across the group is refused. ``memo`` keeps :func:`block_costs` of each block shape for calls
    that share ``cluster``, ``par`` and ``precision`` (the recomputation modes of one configuration).

    Raises ``ConfigurationError`` as :func:`expert_layout` and :func:`block_costs`, or when ``par`` asks for
    expert parallelism of a model without experts or with experts split inside the group.
    """
    blocks = moe_blocks(lt.graph)
    asked = par.ep > 1 or par.etp is not None
    if not blocks:
        if asked:
            raise ConfigurationError(f"{lt.graph.name!r} has no mixture-of-experts layers: expert parallelism "
                                     "(--ep, --etp) applies only to models with experts")
        return lt
    graph = lt.graph
    where = _block_indices(graph)
    if not where.token_following(strategy):
        if asked:
            raise ConfigurationError("expert parallelism across the group goes with Megatron's layer splits; these "
                                     "layer splits already split the experts inside the tensor-parallel group")
        return lt
    layout = expert_layout(par, cluster.mesh)
    arrays = {name: getattr(lt, name).copy() for name in (
        "forward_s", "backward_s", "recompute_s", "gradient_s", "params", "fp8_params", "activations", "buffers",
        "expert_params", "dispatch_s", "expert_compute_s", "plain_activations", "recompute_flops")}
    moe_act = par.recompute == "selective" and "moe_act" in par.modules
    transient = dict(lt.block_transient)
    memo = {} if memo is None else memo
    for key, alike in where.alike.items():  # the blocks of one shape at once
        if key not in memo:
            memo[key] = block_costs(blocks[alike[0]], par, cluster, layout, precision)
        c = memo[key]
        i, router, combine = where.experts[alike], where.routers[alike], where.combines[alike]
        # Full recomputation re-runs the block's forward, communication included.
        arrays["recompute_s"][i[lt.recompute_s[i] > 0]] = c["forward_s"]
        arrays["forward_s"][i], arrays["backward_s"][i] = c["forward_s"], c["backward_s"]
        # The router and the combine: their kernels as frameworks run them, in place of the group's generic op
        # costs (their edges and collectives, none under Megatron's splits but a replicated router's logits, stay).
        for j, prefix in ((router, "router"), (combine, "combine")):
            arrays["recompute_s"][j[lt.recompute_s[j] > 0]] = c[f"{prefix}_forward_s"]
            arrays["forward_s"][j], arrays["backward_s"][j] = c[f"{prefix}_forward_s"], c[f"{prefix}_backward_s"]
        arrays["gradient_s"][i] = 0.0  # no expert is replicated inside the group: its replicas are the expert-DP
        arrays["params"][i] = 0.0
        arrays["expert_params"][i] = c["params"]
        arrays["fp8_params"][i] = c["params"] if fp8_recipe(precision) else 0.0
        # A checkpointed unit keeps its input; its activations are transient.
        units = [lt.block_of.get(blocks[k].experts_layer) for k in alike] if lt.block_of else [None] * len(alike)
        for unit, k in zip(units, i):
            if unit is not None:
                transient[unit] = transient.get(unit, 0.0) + c["activations"] - float(lt.plain_activations[k])
        free = i[[unit is None for unit in units]]
        if moe_act:  # the activation's output is freed after fc2's forward and recomputed for its backward
            arrays["activations"][free] = c["activations"] - c["act_bytes"]
            arrays["recompute_s"][free] += c["act_forward_s"]
            arrays["recompute_flops"][free] += c["act_flops"]
        else:
            arrays["activations"][free] = c["activations"]
        arrays["plain_activations"][i] = c["activations"]
        # The combine un-permutes and sums its rows, already weighed by their gates in the experts' activation:
        # its backward needs none of its inputs (Megatron-Core's unpermute without probs).
        for k in alike:
            unit = lt.block_of.get(blocks[k].combine) if lt.block_of else None
            if unit is not None:
                transient[unit] = transient.get(unit, 0.0) - float(lt.plain_activations[where.combines[k]])
        arrays["activations"][combine] = arrays["plain_activations"][combine] = 0.0
        arrays["buffers"][i] = c["buffers"]
        arrays["dispatch_s"][i], arrays["expert_compute_s"][i] = c["dispatch_s"], c["compute_s"]
    costs = [memo[key] for key in where.keys]
    exchanges = np.array([c["exchanges"] for c in costs])  # per block: dispatch, combine; their backwards
    exposed, hidden = None, None
    if par.expert_overlap:
        exposed = _overlap(where, arrays, lt.weight_grad_s, costs, exchanges, comm_sm_share(par.dispatcher, cluster))
        hidden = np.zeros(len(lt.layers))
        hidden[where.experts] = np.maximum(exchanges.sum(axis=1) - exposed, 0.0)
    elif par.shared_expert_overlap:
        exposed = _beside_shared_experts(where, arrays, exchanges)
    summary = experts_summary(blocks[0], costs[0], layout, cluster.mesh, par,
                              None if exposed is None else float(exposed[0]))
    return replace(lt, **arrays, block_transient=transient, experts=summary, overlap_hidden_s=hidden, memo={})


@dataclass(frozen=True)
class _BlockIndices:
    """Where a graph's expert blocks (:func:`moe_blocks` order) are: the layer indices of their experts layers,
    routers and combines; each block's shape (what :func:`block_costs` depends on beside the configuration) and
    the blocks of each shape (``alike``); the experts layers' dimensions; and which layers of each block's
    transformer block (:func:`pase.model.roofline.blocks`) come before its experts layer and which after (layer
    indices, each with its block's position)."""

    names: tuple[str, ...]  # the experts layers'
    experts: np.ndarray
    routers: np.ndarray
    combines: np.ndarray
    keys: tuple[tuple, ...]
    alike: dict[tuple, np.ndarray]
    dims: tuple[str, ...]
    before: tuple[np.ndarray, np.ndarray]  # (layer indices, block positions)
    after: tuple[np.ndarray, np.ndarray]
    shared: tuple[np.ndarray, np.ndarray]  # its shared experts' layers (recompute.shared_expert_layers)

    def sums(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per block, the sums of ``values`` (one per layer) over its layers before its experts layer, after it,
        and over its shared experts' layers."""
        return tuple(np.bincount(label, weights=values[layer], minlength=len(self.names))
                     for layer, label in (self.before, self.after, self.shared))

    def token_following(self, strategy: Mapping[str, Sequence[int]]) -> bool:
        """Whether every experts layer's split only follows the tokens (``b`` and ``c``), as Megatron's rule splits
        it."""
        split = np.array([strategy[n] for n in self.names], dtype=float).reshape(len(self.names), -1)
        others = [k for k, dim in enumerate(self.dims) if dim not in ("b", "c")]
        return bool(np.all(split[:, others] == 1))


def _block_indices(graph: Graph) -> _BlockIndices:
    """The graph's :class:`_BlockIndices`, derived once per graph."""
    def compute():
        names = [l.name for l in graph.layers]
        index = {n: i for i, n in enumerate(names)}
        unit_of = transformer_blocks(graph)
        blocks = moe_blocks(graph)
        experts = np.array([index[b.experts_layer] for b in blocks])
        keys = tuple((b.b, b.s, b.d, b.f, b.experts, b.top_k, b.groups, b.group_topk) for b in blocks)
        alike: dict[tuple, list[int]] = {}
        for k, key in enumerate(keys):
            alike.setdefault(key, []).append(k)
        members: dict[str, list[int]] = {}
        for j, name in enumerate(names):
            if name in unit_of:
                members.setdefault(unit_of[name], []).append(j)
        before, after = ([], []), ([], [])
        for k, (block, i) in enumerate(zip(blocks, experts)):
            for j in members.get(unit_of.get(block.experts_layer), ()):
                if j != i:
                    side = before if j < i else after
                    side[0].append(j)
                    side[1].append(k)
        shared_of = shared_expert_layers(graph)
        shared = ([index[n] for b in blocks for n in shared_of.get(unit_of.get(b.experts_layer), ())],
                  [k for k, b in enumerate(blocks) for _ in shared_of.get(unit_of.get(b.experts_layer), ())])
        dims = tuple(graph.layer(blocks[0].experts_layer).dims)
        if any(tuple(graph.layer(b.experts_layer).dims) != dims for b in blocks):
            raise ConfigurationError("the graph's experts layers do not share their dimensions")
        return _BlockIndices(tuple(b.experts_layer for b in blocks), experts,
                             np.array([index[b.router] for b in blocks]),
                             np.array([index[b.combine] for b in blocks]),
                             keys, {key: np.array(v) for key, v in alike.items()}, dims,
                             *(tuple(np.array(v, dtype=int) for v in side) for side in (before, after, shared)))
    return graph.derived("expert block indices", compute)


def _overlap(where: _BlockIndices, arrays: dict, weight_grad_s: np.ndarray, costs: Sequence[Mapping[str, float]],
             exchanges: np.ndarray, held: float) -> np.ndarray:
    """Price the expert blocks' exchanges under Megatron-Core's 1F1B all-to-all overlap
    (:mod:`pase.model.expert_overlap`): each transformer layer's parts before its experts layer (norms, attention,
    router) are the attention part, the experts layer and those after it (combine, shared experts) the MLP part;
    the merged layer's time less its computation is what stays exposed, set on the experts layer (half forward,
    half backward) in ``arrays``. ``costs``: :func:`block_costs` of each block (:func:`moe_blocks` order),
    ``exchanges`` their ``exchanges`` as rows. Returns the exposed seconds per block."""
    experts = where.experts
    f, b, r = arrays["forward_s"], arrays["backward_s"], arrays["recompute_s"]
    column = lambda key: np.array([c[key] for c in costs])
    fwd, bwd, wgrad = column("forward_compute_s"), column("backward_compute_s"), column("wgrad_s")
    (f_before, f_after, _), (b_before, b_after, _) = where.sums(f), where.sums(b + r)
    grads = where.sums(weight_grad_s)[1] + wgrad
    parts = np.column_stack([f_before, fwd + f_after, np.maximum(bwd + r[experts] + b_after - grads, 0.0), grads,
                             b_before, exchanges])
    # The blocks of a model are mostly alike: schedule each distinct layer once.
    seen: dict[tuple, float] = {}
    merged = np.array([seen[row] if row in seen else seen.setdefault(row, merged_layer_s(LayerParts(*row), held))
                       for row in map(tuple, parts.tolist())])
    exposed = np.maximum(merged - parts[:, :5].sum(axis=1), 0.0)
    f[experts] = fwd + column("tp_gather_s") + exposed / 2
    b[experts] = bwd + exposed / 2
    return exposed


def _beside_shared_experts(where: _BlockIndices, arrays: dict, exchanges: np.ndarray) -> np.ndarray:
    """Price the expert blocks' exchanges under Megatron-Core's shared-expert overlap: each block's shared experts
    run beside its dispatch and combine, forward and backward, so the experts layer keeps, each way, only what of the
    exchanges outlasts the shared experts (set in ``arrays``). ``exchanges``: per block, :func:`block_costs`'
    ``exchanges``. Returns the exchanges' exposed seconds per block."""
    f, b, r = arrays["forward_s"], arrays["backward_s"], arrays["recompute_s"]
    hidden_f = np.minimum(where.sums(f)[2], exchanges[:, 0] + exchanges[:, 1])
    hidden_b = np.minimum(where.sums(b + r)[2], exchanges[:, 2] + exchanges[:, 3])
    f[where.experts] -= hidden_f
    b[where.experts] -= hidden_b
    return exchanges.sum(axis=1) - hidden_f - hidden_b


def experts_summary(block: ExpertBlock, costs: Mapping[str, float], layout: ExpertLayout, mesh: DeviceMesh,
                    par: "Parallelism", exposed_s: float | None = None) -> dict:
    """An MoE plan as its user reads it: group sizes and the axes they span, experts and their parameters per
    device (one block), tokens per all-to-all and over which link, dispatch against expert compute (per
    block and microbatch, forward and backward) and what the dispatch adds to the step: all of it, or under an
    overlap ``exposed_s`` (the exchanges' exposed part, and under the 1F1B all-to-all overlap the computation's
    slowdown beside DeepEP) and the tokens' gather, which no overlap hides."""
    ep_axes = layout.axes(mesh, "ep")
    link = next(iter(ep_axes), None)  # the outermost axis the all-to-all crosses: its slowest link
    return {
        "ep": layout.ep, "etp": layout.etp, "edp": layout.edp,
        "mesh": {"expert tensor": layout.axes(mesh, "etp"), "expert": ep_axes, "expert data": layout.axes(mesh, "edp")},
        "experts": block.experts, "top_k": block.top_k, "experts_per_device": block.experts // layout.ep,
        "expert_parameters_per_device_per_block": costs["params"],
        "dispatcher": par.dispatcher, "tokens_per_all_to_all": costs["tokens"],
        "tokens_sent_per_all_to_all": costs["tokens_sent"],
        "tokens_across_nodes_per_all_to_all": costs["tokens_across_nodes"], "all_to_all_link": link,
        "tokens_per_local_expert": costs["expert_tokens"],
        "dispatch_s_per_block": costs["dispatch_s"], "expert_compute_s_per_block": costs["compute_s"],
        "imbalance": par.expert_imbalance, "capacity_factor": par.capacity_factor,
        "dispatch_overlap": par.expert_overlap, "fp8_dispatch": par.fp8_dispatch,
        "shared_expert_overlap": par.shared_expert_overlap,
        "dispatch_exposed_s_per_block": (costs["dispatch_s"] if exposed_s is None
                                         else exposed_s + costs["tp_gather_s"]),
    }
