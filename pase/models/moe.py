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

from typing import Callable

from pase import ops as L
from pase.errors import GraphError
from pase.ir.graph import Graph
from pase.models._common import check_positive
from pase.models.llama import (BSD, TIED_TABLE, add_vertex, check_attention, check_flags, gqa_attention, output_head,
                               swiglu_ffn)

__all__ = ["moe_decoder", "moe_parameters", "active_parameters", "MOE_SAMPLES"]


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
                tied: bool = False) -> Graph:
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

    Parameters: :func:`moe_parameters`; per token, :func:`active_parameters`.

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
    check_flags(name, tied=tied)
    _check(name, experts, top_k, shared_ffn, dense_layers, dense_ffn, layers)
    b, s, d = batch, seq, hidden
    slots = L.expert_capacity(seq, experts, top_k, capacity_factor)  # refuses a bad capacity factor
    g = Graph(name)
    x = add_vertex(g, L.embedding("embedding", b, s, d, vocab).with_tied(TIED_TABLE if tied else {}))
    for i in range(layers):
        p = f"layers.{i}"
        x = gqa_attention(g, p, x, batch=b, seq=s, hidden=d, kv_heads=kv_heads, group=heads // kv_heads, head_dim=c)
        y = add_vertex(g, L.rms_norm(f"{p}.ffn_norm", (b, s, d), BSD), x)
        if i < dense_layers:
            x = add_vertex(g, L.elementwise(f"{p}.add2", (b, s, d), BSD), x,
                     swiglu_ffn(g, f"{p}.ffn", y, batch=b, seq=s, hidden=d, width=dense_ffn))
            continue
        router = add_vertex(g, L.moe_router(f"{p}.moe.router", b, s, d, experts, top_k, slots), y)
        out = add_vertex(g, L.moe_experts(f"{p}.moe.experts", b, slots, experts, d, expert_ffn), (router, 0))
        branches = [add_vertex(g, L.moe_combine(f"{p}.moe.combine", b, s, d, experts, top_k, slots), out, (router, 1))]
        if shared_ffn:
            branches.append(swiglu_ffn(g, f"{p}.shared", y, batch=b, seq=s, hidden=d, width=shared_ffn))
        x = add_vertex(g, L.elementwise(f"{p}.add2", (b, s, d), BSD, inputs=1 + len(branches)), x, *branches)
    output_head(g, x, batch=b, seq=s, hidden=d, vocab=vocab, tied=tied)
    g.validate()
    return g


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
