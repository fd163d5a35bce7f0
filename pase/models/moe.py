"""Mixture-of-experts decoders, built by code, and two published models as samples.

:func:`moe_decoder` builds a Llama-style decoder (RMSNorm, grouped-query
attention, no biases, no dropout, an output projection untied by default;
RoPE left out as in :mod:`pase.models.llama`, whose block builders it
shares) whose feed-forward blocks are mixtures of SwiGLU
experts (:mod:`pase.ops.moe`): a top-k router, the experts as one vertex with
an expert dimension ``x``, the gate-weighted combine, and optionally shared
experts (a dense SwiGLU network every token passes through) and leading dense
blocks. Dimension letters: those of :mod:`pase.models.llama` for attention
and the dense networks, ``b c x d f`` in the experts (``c`` slots per expert
and sequence, ``f`` the expert's width).

The samples, sizes from their papers:

* ``mixtral-8x7b``: Mixtral of Experts (Jiang et al. 2024, arXiv:2401.04088,
  Table 1): 32 layers, hidden 4096, 32 heads, 8 key/value heads, 8 experts
  of FFN 14336 per layer, top-2, vocabulary 32,000, untied. Published: 46.7B
  parameters, 12.9B active per token; here 46,702,792,704 and
  12,879,925,248 (:func:`moe_parameters`, :func:`active_parameters`).
* ``deepseek-moe-16b``: DeepSeekMoE 16B (Dai et al. 2024, arXiv:2401.06066,
  section 5 and its released configuration): 28 layers, hidden 2048, 16 heads
  (multi-head: 16 key/value heads), 64 routed experts of FFN 1408 per layer
  (a quarter of a standard FFN's width), top-6, plus 2 shared experts (one
  dense SwiGLU network of FFN 2 x 1408); the first layer dense with FFN
  10944; vocabulary 102,400, untied. Published: 16.4B parameters, 2.8B
  active; here 16,375,728,128 and 2,828,650,496.

Both default to sequences of 4,096 tokens (DeepSeekMoE's training length;
Mixtral's paper states a 32k context but no training batch) and a batch of
16 sequences, what the per-layer search's memory model (every activation of
the batch live at once, no microbatches, attention scores materialised)
fits on 64 80-GB devices: these samples are for that search, so they are not
in :data:`pase.models.LANGUAGE_MODELS`. The 3-D search
(:mod:`pase.search.stages`) lays Megatron's rule on each stage
(:func:`pase.strategies.baselines.tensor_parallel_strategy`), which splits
vocabulary, heads and FFN width but never the expert dimension: by default
it would plan Mixtral without expert parallelism, while the per-layer search
finds it. ``pase solve mixtral-8x7b --search 3d`` remains available.

The capacity factor (``capacity_factor``, default 1: every expert its even
share, the FLOPs of dropless routing with a balanced load) sets the slots
per expert and sequence, :func:`pase.ops.expert_capacity`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from pase import ops as L
from pase.errors import GraphError
from pase.ir.graph import Graph
from pase.models._common import check_positive
from pase.models.llama import (BSD, TIED_TABLE, add_vertex, check_attention, check_flags, gqa_attention,
                               swiglu_ffn)

__all__ = ["moe_decoder", "moe_parameters", "active_parameters", "graph_active_parameters", "MLA", "mla_attention",
           "MOE_SAMPLES", "FRONTIER_MOE"]


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention's sizes (DeepSeek-V2/V3): low-rank q and kv, decoupled RoPE dimensions.

    ``q_rank`` and ``kv_rank``: the compressed widths (``q_lora_rank``, ``kv_lora_rank``); ``nope`` and
    ``rope``: each query and key head's width without and with rotary positions (``qk_nope_head_dim``,
    ``qk_rope_head_dim``; the rotary key is one for all heads); ``v_dim``: each value head's width.
    """

    q_rank: int
    kv_rank: int
    nope: int
    rope: int
    v_dim: int


def mla_attention(g: Graph, prefix: str, x: str, *, batch: int, seq: int, hidden: int, heads: int, mla: MLA) -> str:
    """Add multi-head latent attention's half of a pre-norm block at ``prefix`` to ``g``, fed by ``x``; the residual
    sum's name.

    As it trains (DeepSeek-V3's and Megatron-Core's ``MLASelfAttention``, nothing absorbed): ``attn_norm``;
    ``attn.q_a`` (``bsd,qd->bsq``, the q compression), ``attn.q_norm`` (RMSNorm over ``q``), ``attn.q_b``
    (``bsq,hcq->bshc``, ``c = nope + rope``: each head's query, its rotary part included); ``attn.kv_a``
    (``bsd,ld->bsl``, the kv compression), ``attn.kv_norm``, ``attn.k_b`` and ``attn.v_b`` (``bsl,hcl->bshc``,
    ``c = nope`` and ``v_dim``); ``attn.k_rope`` (``bsd,cd->bsc``, ``c = rope``: the rotary key shared by every
    head) and ``attn.k_rope_heads`` (its :func:`~pase.ops.broadcast` to every head); ``attn.k`` (the
    :func:`~pase.ops.concat` of the two keys along ``c``); ``attn.scores`` (``bshc,bkhc->bhsk`` over ``nope +
    rope``), ``attn.softmax`` (causal), ``attn.context`` (``bhsk,bkhc->bshc`` over ``v_dim``), ``attn.out``
    (``bshc,hcd->bsd``), ``add1``. A fused kernel runs the core with query/key heads of ``nope + rope`` and
    value heads of ``v_dim``, as FlashAttention 3 and cuDNN do for MLA. Tensor parallelism splits the heads
    ``h``; the compressions are replicated (Megatron-Core's duplicated down projections). Sizes are the
    caller's to check.
    """
    b, s, d, h = batch, seq, hidden, heads
    qk = mla.nope + mla.rope
    y = add_vertex(g, L.rms_norm(f"{prefix}.attn_norm", (b, s, d), BSD), x)
    q = add_vertex(g, L.einsum(f"{prefix}.attn.q_a", "bsd,qd->bsq", dict(b=b, s=s, d=d, q=mla.q_rank), weights=(1,)), y)
    q = add_vertex(g, L.rms_norm(f"{prefix}.attn.q_norm", (b, s, mla.q_rank), ("b", "s", "q")), q)
    q = add_vertex(g, L.einsum(f"{prefix}.attn.q_b", "bsq,hcq->bshc", dict(b=b, s=s, q=mla.q_rank, h=h, c=qk),
                               weights=(1,)), q)
    kv = add_vertex(g, L.einsum(f"{prefix}.attn.kv_a", "bsd,ld->bsl", dict(b=b, s=s, d=d, l=mla.kv_rank),
                                weights=(1,)), y)
    kv = add_vertex(g, L.rms_norm(f"{prefix}.attn.kv_norm", (b, s, mla.kv_rank), ("b", "s", "l")), kv)
    k_nope = add_vertex(g, L.einsum(f"{prefix}.attn.k_b", "bsl,hcl->bshc", dict(b=b, s=s, l=mla.kv_rank, h=h, c=mla.nope),
                                    weights=(1,)), kv)
    v = add_vertex(g, L.einsum(f"{prefix}.attn.v_b", "bsl,hcl->bshc", dict(b=b, s=s, l=mla.kv_rank, h=h, c=mla.v_dim),
                               weights=(1,)), kv)
    k_rope = add_vertex(g, L.einsum(f"{prefix}.attn.k_rope", "bsd,cd->bsc", dict(b=b, s=s, d=d, c=mla.rope),
                                    weights=(1,)), y)
    k_rope = add_vertex(g, L.broadcast(f"{prefix}.attn.k_rope_heads", (b, s, h, mla.rope), ("b", "s", "h", "c"),
                                       ("h",)), k_rope)
    k = add_vertex(g, L.concat(f"{prefix}.attn.k", [(b, s, h, mla.nope), (b, s, h, mla.rope)], ("b", "s", "h", "c"),
                               "c"), k_nope, k_rope)
    scores = add_vertex(g, L.einsum(f"{prefix}.attn.scores", "bshc,bkhc->bhsk", dict(b=b, s=s, h=h, c=qk, k=s)), q, k)
    probs = add_vertex(g, L.softmax(f"{prefix}.attn.softmax", (b, h, s, s), ("b", "h", "s", "k"), axis="k",
                                    mask="causal"), scores)
    context = add_vertex(g, L.einsum(f"{prefix}.attn.context", "bhsk,bkhc->bshc", dict(b=b, h=h, s=s, k=s, c=mla.v_dim)),
                         probs, v)
    y = add_vertex(g, L.einsum(f"{prefix}.attn.out", "bshc,hcd->bsd", dict(b=b, s=s, h=h, c=mla.v_dim, d=d),
                               weights=(1,)), context)
    return add_vertex(g, L.elementwise(f"{prefix}.add1", (b, s, d), BSD), x, y)


def _check(name: str, experts: int, top_k: int, shared_ffn: int, dense_layers: int, dense_ffn: int,
           layers: int) -> None:
    """``GraphError`` for expert sizes :func:`moe_decoder` cannot build (its docstring)."""
    if top_k > experts:
        raise GraphError(f"{name}: top_k {top_k} is more than the {experts} experts")
    for key, value in dict(shared_ffn=shared_ffn, dense_layers=dense_layers, dense_ffn=dense_ffn).items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise GraphError(f"{name}: {key} must be an integer >= 0, got {value!r}")
    if dense_layers > layers:
        raise GraphError(f"{name}: dense_layers {dense_layers} is more than the {layers} layers")
    if dense_layers and not dense_ffn:
        raise GraphError(f"{name}: {dense_layers} dense layers need a dense_ffn width")


def moe_decoder(name: str, layers: int, hidden: int, heads: int, kv_heads: int, experts: int, top_k: int,
                expert_ffn: int, vocab: int, *, batch: int, seq: int, shared_ffn: int = 0, dense_layers: int = 0,
                dense_ffn: int = 0, capacity_factor: float = 1.0, head_dim: int | None = None,
                tied: bool = False, qk_norm: bool = False, attention_bias: bool = False,
                windows: Sequence[int] = (0,), mla: MLA | None = None, mtp: int = 0, router_groups: int = 1,
                router_group_topk: int = 1) -> Graph:
    """A decoder of ``layers`` pre-norm blocks whose feed-forward networks are mixtures of ``experts`` experts.

    Vertices: ``embedding`` (``b s d v``); per block ``layers.{i}``: the
    attention of :func:`pase.models.llama.llama`
    (:func:`~pase.models.llama.gqa_attention`: ``attn_norm`` ... ``add1``,
    9 vertices), ``ffn_norm``, then for the first ``dense_layers`` blocks the
    dense SwiGLU network (:func:`~pase.models.llama.swiglu_ffn`) ``ffn.gate``, ``ffn.up``, ``ffn.swiglu``,
    ``ffn.down`` of width ``dense_ffn``, and for the others ``moe.router``
    (:func:`pase.ops.moe_router`), ``moe.experts`` (``b c x d f``, ``x`` the
    ``experts``, ``f = expert_ffn``), ``moe.combine`` and, when ``shared_ffn``
    is positive, a dense network ``shared.gate`` ... ``shared.down`` of that
    width on the same normalised tokens; then ``add2`` (the residual, plus
    the shared network's output). Then ``norm``, ``projection`` (its own
    table unless ``tied``) and ``softmax`` (cross-entropy).

    ``capacity_factor``: slots per expert and sequence are
    ``ceil(capacity_factor * seq * top_k / experts)``. ``head_dim`` and
    ``tied`` are :func:`pase.models.llama.llama`'s: a head width other than
    ``hidden / heads``, and a projection sharing the embedding's table.

    ``qk_norm`` (Qwen3): RMSNorm over each head of q and k. ``attention_bias`` (GPT-OSS): biases on q, k, v
    and out. ``windows``: the sliding window of layer ``i`` is ``windows[i % len(windows)]`` (0: full causal
    attention; GPT-OSS alternates ``(128, 0)``). ``mla``: multi-head latent attention of these sizes instead of
    grouped-query attention (:func:`mla_attention`; DeepSeek-V3), ``kv_heads`` and ``head_dim`` then unused.
    ``mtp``: multi-token-prediction modules chained after the last block (:func:`_prediction_module`, named as
    blocks ``layers.{layers}`` ...), sharing the embedding and the output table (DeepSeek-V3's, off by default);
    the main head comes after them in the layer order. ``router_groups`` and ``router_group_topk``: group-limited
    routing (:func:`pase.ops.moe_router`'s ``groups`` and ``group_topk``; DeepSeek-V3's node-limited routing,
    its config's ``n_group`` and ``topk_group``).

    Parameters: :func:`moe_parameters` (grouped-query attention without norms or biases); per token,
    :func:`active_parameters`; of any graph, :func:`graph_active_parameters`.

    Raises
    ------
    GraphError
        A size is not a positive integer (``shared_ffn``, ``dense_layers``,
        ``dense_ffn``: integers >= 0), ``hidden`` is not a multiple of
        ``heads`` (without ``head_dim``) or ``heads`` of ``kv_heads``,
        ``tied`` is not a bool, ``top_k`` exceeds
        ``experts``, there are more dense layers than layers or dense layers
        without a width, the capacity factor is not a positive finite number,
        or the capacity exceeds the sequence.

    Examples
    --------
    >>> g = moe_decoder("tiny", layers=2, hidden=64, heads=8, kv_heads=2, experts=4, top_k=2, expert_ffn=96,
    ...                 vocab=100, batch=2, seq=16)
    >>> g.layer("layers.0.moe.experts").size_of["x"], g.parameter_count == moe_parameters(2, 64, 8, 2, 4, 96, 100)
    (4, True)
    """
    check_positive(name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, experts=experts,
                   top_k=top_k, expert_ffn=expert_ffn, vocab=vocab, batch=batch, seq=seq)
    c = check_attention(name, hidden, heads, kv_heads, head_dim)
    check_flags(name, tied=tied, qk_norm=qk_norm, attention_bias=attention_bias)
    _check(name, experts, top_k, shared_ffn, dense_layers, dense_ffn, layers)
    windows = tuple(windows)
    if not windows or any(isinstance(w, bool) or not isinstance(w, int) or w < 0 for w in windows):
        raise GraphError(f"{name}: windows must be integers >= 0 (0: full attention), got {list(windows)!r}")
    if mla is not None:
        check_positive(name, q_rank=mla.q_rank, kv_rank=mla.kv_rank, nope=mla.nope, rope=mla.rope, v_dim=mla.v_dim)
    if isinstance(mtp, bool) or not isinstance(mtp, int) or mtp < 0:
        raise GraphError(f"{name}: mtp (multi-token-prediction depth) must be an integer >= 0, got {mtp!r}")
    b, s, d = batch, seq, hidden
    slots = L.expert_capacity(seq, experts, top_k, capacity_factor)  # refuses a bad capacity factor
    g = Graph(name)
    # With prediction modules, the embedding and the output table are shared with them (DeepSeek-V3, section 2.2).
    table = TIED_TABLE if tied or mtp else {}
    x = add_vertex(g, L.embedding("embedding", b, s, d, vocab).with_tied(table))

    def block(i: int, x: str) -> str:
        p = f"layers.{i}"
        if mla is None:
            x = gqa_attention(g, p, x, batch=b, seq=s, hidden=d, kv_heads=kv_heads, group=heads // kv_heads,
                              head_dim=c, qkv_bias=attention_bias, out_bias=attention_bias, qk_norm=qk_norm,
                              window=windows[i % len(windows)])
        else:
            x = mla_attention(g, p, x, batch=b, seq=s, hidden=d, heads=heads, mla=mla)
        y = add_vertex(g, L.rms_norm(f"{p}.ffn_norm", (b, s, d), BSD), x)
        if i < dense_layers:
            return add_vertex(g, L.elementwise(f"{p}.add2", (b, s, d), BSD), x,
                              swiglu_ffn(g, f"{p}.ffn", y, batch=b, seq=s, hidden=d, width=dense_ffn))
        router = add_vertex(g, L.moe_router(f"{p}.moe.router", b, s, d, experts, top_k, slots, router_groups,
                                            router_group_topk), y)
        out = add_vertex(g, L.moe_experts(f"{p}.moe.experts", b, slots, experts, d, expert_ffn), (router, 0))
        branches = [add_vertex(g, L.moe_combine(f"{p}.moe.combine", b, s, d, experts, top_k, slots), out, (router, 1))]
        if shared_ffn:
            branches.append(swiglu_ffn(g, f"{p}.shared", y, batch=b, seq=s, hidden=d, width=shared_ffn))
        return add_vertex(g, L.elementwise(f"{p}.add2", (b, s, d), BSD, inputs=1 + len(branches)), x, *branches)

    for i in range(layers):
        x = block(i, x)
    output = {"w1": "output"} if mtp and not tied else {"w1": "embedding"} if tied else {}
    h = x
    for j in range(mtp):
        h = _prediction_module(g, f"layers.{layers + j}", h, block, layers + j, batch=b, seq=s, hidden=d,
                               vocab=vocab, output=output)
    x = add_vertex(g, L.rms_norm("norm", (b, s, d), BSD), x)
    logits = add_vertex(g, L.einsum("projection", "bsd,vd->bsv", dict(b=b, s=s, d=d, v=vocab), weights=(1,))
                        .with_tied(output), x)
    add_vertex(g, L.softmax_cross_entropy("softmax", (b, s, vocab), ("b", "s", "v")), logits)
    g.validate()
    return g


def _prediction_module(g: Graph, p: str, h: str, block, i: int, *, batch: int, seq: int, hidden: int, vocab: int,
                       output: dict) -> str:
    """Add one multi-token-prediction module at ``p`` (DeepSeek-V3 Technical Report, section 2.2; Megatron-Core's
    ``MultiTokenPredictionLayer``) fed by the previous depth's hidden states ``h``; its transformer block's output.

    ``{p}.embedding`` looks up the next tokens in the shared table; ``{p}.enorm`` and ``{p}.hnorm`` normalise them
    and ``h``; ``{p}.concat`` joins them along the hidden dimension and ``{p}.eh_proj`` (``bsc,dc->bsd``, ``c = 2
    d``) projects them back; ``block(i, ...)`` is a transformer block as the main model's (named ``{p}.attn...``,
    ``{p}.moe...``); ``{p}.head.norm``, ``{p}.head.projection`` (the shared output table, ``output``'s tie) and
    ``{p}.head.loss`` (cross-entropy) predict the token after next.
    """
    b, s, d = batch, seq, hidden
    e = add_vertex(g, L.embedding(f"{p}.embedding", b, s, d, vocab).with_tied(TIED_TABLE))
    e = add_vertex(g, L.rms_norm(f"{p}.enorm", (b, s, d), BSD), e)
    hn = add_vertex(g, L.rms_norm(f"{p}.hnorm", (b, s, d), BSD), h)
    # The joined width is "c", not a tensor-parallel dimension: under Megatron's rule each rank projects its
    # sequence share whole (the FLOPs of Megatron-Core's column-parallel eh_proj on every token, less its gather).
    cat = add_vertex(g, L.concat(f"{p}.concat", [(b, s, d), (b, s, d)], ("b", "s", "c"), "c"), e, hn)
    x = add_vertex(g, L.einsum(f"{p}.eh_proj", "bsc,dc->bsd", dict(b=b, s=s, c=2 * d, d=d), weights=(1,)), cat)
    x = block(i, x)
    y = add_vertex(g, L.rms_norm(f"{p}.head.norm", (b, s, d), BSD), x)
    logits = add_vertex(g, L.einsum(f"{p}.head.projection", "bsd,vd->bsv", dict(b=b, s=s, d=d, v=vocab),
                                    weights=(1,)).with_tied(output), y)
    add_vertex(g, L.softmax_cross_entropy(f"{p}.head.loss", (b, s, vocab), ("b", "s", "v")), logits)
    return x


def moe_parameters(layers: int, hidden: int, heads: int, kv_heads: int, experts: int, expert_ffn: int, vocab: int,
                   *, shared_ffn: int = 0, dense_layers: int = 0, dense_ffn: int = 0, head_dim: int | None = None,
                   tied: bool = False) -> int:
    """Trainable parameters of :func:`moe_decoder`, every expert's included.

    With ``d = hidden``, ``c = head_dim`` (default ``hidden / heads``),
    ``a = heads``, ``g = kv_heads``: per block attention ``2 a c d + 2 g c
    d`` (``2 d^2 + 2 g c d`` at the default width) and two norm scales ``2
    d``; per expert block the router ``E d``, the experts ``3 E d f`` and
    the shared network ``3 d F_s``; per dense block ``3 d F_d``; embedding
    and projection ``2 V d`` (``V d`` when ``tied``); the final norm ``d``.
    """
    c = hidden // heads if head_dim is None else head_dim
    moe_layers = layers - dense_layers
    return (layers * (2 * heads * c * hidden + 2 * kv_heads * c * hidden + 2 * hidden)
            + moe_layers * (experts * hidden + 3 * experts * hidden * expert_ffn + 3 * hidden * shared_ffn)
            + dense_layers * 3 * hidden * dense_ffn + (1 if tied else 2) * vocab * hidden + hidden)


def active_parameters(layers: int, hidden: int, heads: int, kv_heads: int, experts: int, top_k: int,
                      expert_ffn: int, vocab: int, *, shared_ffn: int = 0, dense_layers: int = 0,
                      dense_ffn: int = 0, head_dim: int | None = None, tied: bool = False) -> int:
    """Parameters one token passes through: :func:`moe_parameters` with ``top_k`` of the ``experts`` experts.

    The papers' "active parameters": the embedding and projection tables
    included, the unselected experts not.
    """
    every = moe_parameters(layers, hidden, heads, kv_heads, experts, expert_ffn, vocab, shared_ffn=shared_ffn,
                           dense_layers=dense_layers, dense_ffn=dense_ffn, head_dim=head_dim, tied=tied)
    return every - (layers - dense_layers) * 3 * (experts - top_k) * hidden * expert_ffn


SEQ = 4096
BATCH = 16

# name: (layers, hidden, heads, kv_heads, experts, top_k, expert FFN, vocabulary, options,
#        published total and active parameters)
SIZES = {
    "mixtral-8x7b": (32, 4096, 32, 8, 8, 2, 14336, 32000, {}, 46.7e9, 12.9e9),
    "deepseek-moe-16b": (28, 2048, 16, 16, 64, 6, 1408, 102400,
                         dict(shared_ffn=2 * 1408, dense_layers=1, dense_ffn=10944), 16.4e9, 2.8e9),
}


def _sample(name: str, layers: int, hidden: int, heads: int, kv_heads: int, experts: int, top_k: int, ffn: int,
            vocab: int, options: dict, total: float, active: float) -> Callable[..., Graph]:
    """A sample builder ``build(batch=..., seq=..., capacity_factor=...)`` of :func:`moe_decoder` at these sizes."""
    def build(batch: int = BATCH, seq: int = SEQ, capacity_factor: float = 1.0) -> Graph:
        return moe_decoder(name, layers, hidden, heads, kv_heads, experts, top_k, ffn, vocab, batch=batch, seq=seq,
                           capacity_factor=capacity_factor, **options)

    counted = moe_parameters(layers, hidden, heads, kv_heads, experts, ffn, vocab, **options)
    used = active_parameters(layers, hidden, heads, kv_heads, experts, top_k, ffn, vocab, **options)
    build.__name__ = build.__qualname__ = name.replace("-", "_")
    build.__doc__ = (
        f"{name} (the sizes of :mod:`pase.models.moe`): :func:`moe_decoder` with {layers} layers, hidden {hidden}, "
        f"{heads} heads, {kv_heads} key/value heads, {experts} experts of FFN {ffn}, top-{top_k}, vocabulary "
        f"{vocab}; default sequence {SEQ}, batch {BATCH}, capacity factor 1.\n\n"
        f"Parameters {counted:,} (published {total / 1e9:g}B), {used:,} active per token (published "
        f"{active / 1e9:g}B)."
    )
    return build


MOE_SAMPLES: dict[str, Callable[..., Graph]] = {name: _sample(name, *sizes) for name, sizes in SIZES.items()}


def graph_active_parameters(graph: Graph) -> int:
    """Parameters one token passes through in ``graph``: every parameter but the unselected experts' share of each
    ``MoEExperts`` layer (``(E - k) / E`` of its weights, ``k`` its router's top-k)."""
    unused = 0
    for layer in graph.layers:
        if layer.op == "MoEExperts":
            router = graph.layer(next(e.src for e in graph.in_edges(layer.name)))
            E, k = layer.param_dict["experts"], router.param_dict["top_k"]
            weights = sum(w.size for w in layer.weights)
            unused += weights // E * (E - k)
    return graph.parameter_count - unused


@dataclass(frozen=True)
class _Frontier:
    """A published mixture-of-experts model: its sizes (:func:`moe_decoder`'s arguments), default batch and
    sequence, published total and active parameters and where they are from."""

    sizes: dict
    batch: int
    seq: int
    total: float
    active: float
    source: str


# Sizes from each model's released Hugging Face config.json; totals and actives as published.
FRONTIER_MOE: dict[str, _Frontier] = {
    # deepseek-ai/DeepSeek-V3 config.json; "671B total parameters with 37B activated for each token" (DeepSeek-V3
    # Technical Report, arXiv:2412.19437, abstract), the multi-token-prediction module's 14B not included (off
    # here). Default batch: the paper's final 15,360 sequences of 4,096 tokens (section 4.2).
    "deepseek-v3": _Frontier(dict(layers=61, hidden=7168, heads=128, kv_heads=128, experts=256, top_k=8,
                                  expert_ffn=2048, vocab=129280, shared_ffn=2048, dense_layers=3, dense_ffn=18432,
                                  mla=MLA(q_rank=1536, kv_rank=512, nope=128, rope=64, v_dim=128), router_groups=8,
                                  router_group_topk=4),
                             15360, 4096, 671e9, 37e9, "DeepSeek-V3 Technical Report (arXiv:2412.19437), abstract"),
    # Qwen/Qwen3-30B-A3B config.json; "30.5B in total and 3.3B activated" (its model card; Qwen3 Technical
    # Report, arXiv:2505.09388, Table 2). Default batch: Megatron-Bridge 25.09's benchmark (512 of 4,096).
    "qwen3-30b-a3b": _Frontier(dict(layers=48, hidden=2048, heads=32, kv_heads=4, experts=128, top_k=8,
                                    expert_ffn=768, vocab=151936, head_dim=128, qk_norm=True),
                               512, 4096, 30.5e9, 3.3e9, "Qwen3-30B-A3B model card; Qwen3 Technical Report Table 2"),
    # Qwen/Qwen3-235B-A22B config.json; "235B in total and 22B activated" (its model card; the report's
    # Table 2). Default batch: Megatron-Bridge 25.09's benchmark (2,048 of 4,096).
    "qwen3-235b-a22b": _Frontier(dict(layers=94, hidden=4096, heads=64, kv_heads=4, experts=128, top_k=8,
                                      expert_ffn=1536, vocab=151936, head_dim=128, qk_norm=True),
                                 2048, 4096, 235e9, 22e9, "Qwen3-235B-A22B model card; Qwen3 Technical Report Table 2"),
    # openai/gpt-oss-120b config.json: sliding windows of 128 on every other layer (the first sliding), attention
    # biases; "117B parameters with 5.1B active" (gpt-oss-120b & gpt-oss-20b model card, OpenAI 2025, Table 1:
    # 116.83B total, 5.13B active). Its attention sinks (64 logits a layer) and expert biases (128 x 8,640 a
    # layer, 0.03% of the total) are left out. No training batch is published: 1,024 sequences of 4,096.
    "gpt-oss-120b": _Frontier(dict(layers=36, hidden=2880, heads=64, kv_heads=8, experts=128, top_k=4,
                                   expert_ffn=2880, vocab=201088, head_dim=64, attention_bias=True, windows=(128, 0)),
                              1024, 4096, 116.83e9, 5.13e9, "gpt-oss-120b model card (OpenAI 2025), Table 1"),
}


def _frontier_sample(name: str, spec: _Frontier) -> Callable[..., Graph]:
    """A sample builder ``build(batch=..., seq=..., capacity_factor=...)`` of :func:`moe_decoder` at ``spec``'s sizes."""
    def build(batch: int = spec.batch, seq: int = spec.seq, capacity_factor: float = 1.0, mtp: int = 0) -> Graph:
        return moe_decoder(name, batch=batch, seq=seq, capacity_factor=capacity_factor, mtp=mtp, **spec.sizes)

    z = spec.sizes
    attention = "multi-head latent attention" if "mla" in z else (
        f"grouped-query attention ({z['heads']} heads, {z['kv_heads']} key/value heads)")
    build.__name__ = build.__qualname__ = name.replace("-", "_")
    build.__doc__ = (
        f"{name} (:data:`FRONTIER_MOE`): :func:`moe_decoder` with {z['layers']} layers, hidden {z['hidden']}, "
        f"{attention}, {z['experts']} experts of FFN {z['expert_ffn']}, top-{z['top_k']}; default {spec.batch} "
        f"sequences of {spec.seq} tokens, capacity factor 1 (the FLOPs of dropless balanced routing), ``mtp`` "
        f"multi-token-prediction modules (0 by default).\n\n"
        f"Published: {spec.total / 1e9:g}B parameters, {spec.active / 1e9:g}B active ({spec.source})."
    )
    return build


MOE_SAMPLES.update({name: _frontier_sample(name, spec) for name, spec in FRONTIER_MOE.items()})
