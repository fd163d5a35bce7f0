"""Meta's Llama 3 models, built by code, and the published sizes as samples.

:func:`llama` builds the decoder of "The Llama 3 Herd of Models" (Llama Team,
Meta, 2024; Table 3 gives the sizes): pre-norm blocks with RMSNorm (a scale,
no shift), grouped-query attention, a SwiGLU feed-forward block, no biases,
no dropout (Llama 3 trains without), and an output projection that is *not*
tied to the token embedding. The vocabulary has 128,256 tokens.

Dimension letters are those of :mod:`pase.models.sequence` with grouped-query
attention's extra one: ``b s d v`` for the embedding and the output, and in
attention ``h`` the **key/value heads**, ``r`` the query heads per key/value
head, ``c`` the head width and ``k`` the key positions. Naming the key/value
head dimension ``h`` makes Megatron's rule
(:func:`pase.strategies.baselines.tensor_parallel_strategy`, which splits the
first of ``v h e`` a layer has) split the key/value heads ``t`` ways, each
device keeping its query heads' groups whole, as Megatron-LM does: ``t`` must
divide the 8 key/value heads. The feed-forward width is ``e``.

Rotary position embeddings (RoPE) are left out: an elementwise rotation of q
and k, no parameters, a few FLOPs per element of q and k (negligible next to
the products). So are the 1/sqrt(c) scaling and the causal mask, as in the
other samples: the scores and context products count every (s, k) pair.

:data:`LLAMA_SAMPLES` maps each sample name to its builder (``batch=``,
default 2048 sequences of 8,192 tokens: the paper's final 16M-token batch;
the 405B run ramps up from 4M tokens at sequence 4,096, and the paper does
not state the 8B and 70B batches separately); :mod:`pase.models` registers
them in :data:`~pase.models.SAMPLES` and :data:`~pase.models.LANGUAGE_MODELS`.
"""

from __future__ import annotations

from typing import Callable

from pase import ops as L
from pase.errors import GraphError
from pase.ir.graph import Graph, Layer
from pase.models._common import check_positive

__all__ = ["llama", "llama_parameters", "block_matmul_forward_flops", "LLAMA_SAMPLES", "VOCAB"]

VOCAB = 128256
BSD = ("b", "s", "d")
# The vertices of one block ``layers.{i}``, in order, with their ops.
BLOCK = (
    ("attn_norm", "RMSNorm"), ("attn.q", "Einsum"), ("attn.k", "Einsum"), ("attn.v", "Einsum"),
    ("attn.scores", "Einsum"), ("attn.softmax", "Softmax"), ("attn.context", "Einsum"), ("attn.out", "Einsum"),
    ("add1", "Elementwise"), ("ffn_norm", "RMSNorm"), ("ffn.gate", "Einsum"), ("ffn.up", "Einsum"),
    ("ffn.swiglu", "Elementwise"), ("ffn.down", "Einsum"), ("add2", "Elementwise"),
)


def llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, *,
          batch: int, seq: int, rope: bool = True) -> Graph:
    """A Llama 3 decoder: ``layers`` pre-norm blocks of width ``hidden``, grouped-query attention, SwiGLU.

    Vertices: token embedding ``embedding`` (``b s d v``); per block
    ``layers.{i}`` (15 vertices): ``attn_norm`` (RMSNorm over ``d``);
    ``attn.q`` (``bsd,hrcd->bshrc``: ``h = kv_heads``, ``r = heads /
    kv_heads``, ``c = hidden / heads``); ``attn.k`` and ``attn.v``
    (``bsd,hcd->bshc``); ``attn.scores`` (``bshrc,bkhc->bhrsk``);
    ``attn.softmax`` over ``k``; ``attn.context`` (``bhrsk,bkhc->bshrc``);
    ``attn.out`` (``bshrc,hrcd->bsd``); ``add1``; ``ffn_norm``; ``ffn.gate``
    and ``ffn.up`` (``bsd,ed->bse``); ``ffn.swiglu``, ``silu(gate) * up`` as
    one gated Elementwise over ``b s e`` with one fused op (it keeps gate's
    and up's outputs for the backward); ``ffn.down`` (``bse,de->bsd``);
    ``add2``. Then ``norm`` (RMSNorm), ``projection`` (``bsd,vd->bsv``, its
    own table) and ``softmax`` (cross-entropy). ``15 layers + 4`` vertices.
    No biases, no dropout.

    Parameters, with ``l = layers``, ``d = hidden``, ``g = kv_heads``, ``c =
    hidden / heads``, ``F = ffn``, ``V = vocab``: ``l (2 d^2 + 2 g c d + 3 d F
    + 2 d) + 2 V d + d`` (:func:`llama_parameters`): q and out ``d^2`` each,
    k and v ``g c d`` each, three FFN matrices, two norm scales per block;
    embedding and projection; the final norm.

    ``rope``: whether positions are rotary (Llama's RoPE, True) or absent;
    the graph is the same either way, RoPE having no parameters and
    negligible FLOPs (the module docstring).

    Raises
    ------
    GraphError
        A size is not a positive integer, ``hidden`` is not a multiple of
        ``heads``, ``heads`` not a multiple of ``kv_heads``, or ``rope`` not
        a bool.

    Examples
    --------
    >>> g = llama("tiny", layers=2, hidden=64, heads=8, kv_heads=2, ffn=160, vocab=100, batch=2, seq=16)
    >>> len(g), g.parameter_count == llama_parameters(2, 64, 8, 2, 160, 100)
    (34, True)
    """
    check_positive(name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, vocab=vocab,
                   batch=batch, seq=seq)
    if hidden % heads:
        raise GraphError(f"{name}: hidden {hidden} is not a multiple of heads {heads}")
    if heads % kv_heads:
        raise GraphError(f"{name}: heads {heads} is not a multiple of kv_heads {kv_heads}")
    if not isinstance(rope, bool):
        raise GraphError(f"{name}: rope must be true or false, got {rope!r}")
    b, s, d, h, r, c, e = batch, seq, hidden, kv_heads, heads // kv_heads, hidden // heads, ffn
    g = Graph(name)

    def add(layer: Layer, *inputs: str) -> str:
        g.add_layer(layer, list(inputs))
        return layer.name

    def norm(vertex: str, x: str) -> str:
        return add(L.rms_norm(vertex, (b, s, d), BSD), x)

    q_sizes = dict(b=b, s=s, d=d, h=h, r=r, c=c)
    kv_sizes = dict(b=b, s=s, d=d, h=h, c=c)
    ff = dict(b=b, s=s, d=d, e=e)
    x = add(L.embedding("embedding", b, s, d, vocab))
    for i in range(layers):
        p = f"layers.{i}"
        y = norm(f"{p}.attn_norm", x)
        q = add(L.einsum(f"{p}.attn.q", "bsd,hrcd->bshrc", q_sizes, weights=(1,)), y)
        k = add(L.einsum(f"{p}.attn.k", "bsd,hcd->bshc", kv_sizes, weights=(1,)), y)
        v = add(L.einsum(f"{p}.attn.v", "bsd,hcd->bshc", kv_sizes, weights=(1,)), y)
        scores = add(L.einsum(f"{p}.attn.scores", "bshrc,bkhc->bhrsk", dict(b=b, s=s, h=h, r=r, c=c, k=s)), q, k)
        probs = add(L.softmax(f"{p}.attn.softmax", (b, h, r, s, s), ("b", "h", "r", "s", "k"), axis="k"), scores)
        context = add(L.einsum(f"{p}.attn.context", "bhrsk,bkhc->bshrc", dict(b=b, h=h, r=r, s=s, k=s, c=c)),
                      probs, v)
        y = add(L.einsum(f"{p}.attn.out", "bshrc,hrcd->bsd", q_sizes, weights=(1,)), context)
        x = add(L.elementwise(f"{p}.add1", (b, s, d), BSD), x, y)
        y = norm(f"{p}.ffn_norm", x)
        gate = add(L.einsum(f"{p}.ffn.gate", "bsd,ed->bse", ff, weights=(1,)), y)
        up = add(L.einsum(f"{p}.ffn.up", "bsd,ed->bse", ff, weights=(1,)), y)
        y = add(L.elementwise(f"{p}.ffn.swiglu", (b, s, e), ("b", "s", "e"), pointwise=1, gated=True), gate, up)
        y = add(L.einsum(f"{p}.ffn.down", "bse,de->bsd", ff, weights=(1,)), y)
        x = add(L.elementwise(f"{p}.add2", (b, s, d), BSD), x, y)
    x = norm("norm", x)
    logits = add(L.einsum("projection", "bsd,vd->bsv", dict(b=b, s=s, d=d, v=vocab), weights=(1,)), x)
    add(L.softmax_cross_entropy("softmax", (b, s, vocab), ("b", "s", "v")), logits)
    g.validate()
    return g


def llama_parameters(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int = VOCAB) -> int:
    """Trainable parameters of :func:`llama` (the formula of its docstring)."""
    kv_width = kv_heads * (hidden // heads)
    return layers * (2 * hidden**2 + 2 * kv_width * hidden + 3 * hidden * ffn + 2 * hidden) + 2 * vocab * hidden + hidden


def block_matmul_forward_flops(batch: int, seq: int, hidden: int, heads: int, kv_heads: int, ffn: int) -> int:
    """Forward FLOPs of one block's matrix products: ``2 b s (d^2 (2 + 2 g / a) + 3 d F) + 4 b s^2 d``.

    q and out ``2 b s d^2`` each, k and v ``2 b s d (g c)`` each (``g c = d g / a``
    with ``a`` heads, ``g`` key/value heads), gate, up and down ``2 b s d F``
    each, scores and context ``2 b s^2 d`` each (every (s, k) pair, no causal mask).
    """
    b, s, d = batch, seq, hidden
    return 2 * b * s * (d * d * (2 * heads + 2 * kv_heads) // heads + 3 * d * ffn) + 4 * b * s * s * d


# Published sizes: (layers, hidden, heads, kv_heads, ffn, published parameters) from the paper's Table 3.
SIZES = {
    "llama3-8b": (32, 4096, 32, 8, 14336, 8.03e9),
    "llama3-70b": (80, 8192, 64, 8, 28672, 70.6e9),
    "llama3-405b": (126, 16384, 128, 8, 53248, 405.9e9),
}
SEQ = 8192
BATCH = 2048  # 16M tokens / 8,192


def _sample(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, published: float
            ) -> Callable[..., Graph]:
    """A sample builder ``build(batch=..., seq=...)`` of :func:`llama` at these sizes, with its own docstring."""
    def build(batch: int = BATCH, seq: int = SEQ) -> Graph:
        return llama(name, layers, hidden, heads, kv_heads, ffn, VOCAB, batch=batch, seq=seq)

    build.__name__ = build.__qualname__ = name.replace("-", "_").replace(".", "_")
    build.__doc__ = (
        f"Llama 3 {name[len('llama3-'):].upper()} (Meta 2024, Table 3): :func:`llama` with {layers} layers, "
        f"hidden {hidden}, {heads} heads, {kv_heads} key/value heads, FFN {ffn}, vocabulary {VOCAB}; default "
        f"sequence {SEQ} and batch {BATCH} (the published 16M-token batch).\n\n"
        f"{15 * layers + 4} vertices; parameters {llama_parameters(layers, hidden, heads, kv_heads, ffn):,} "
        f"(published {published / 1e9:g}B; untied embedding and output projection)."
    )
    return build


LLAMA_SAMPLES: dict[str, Callable[..., Graph]] = {name: _sample(name, *sizes) for name, sizes in SIZES.items()}
