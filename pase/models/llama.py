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

__all__ = ["llama", "llama_parameters", "block_matmul_forward_flops", "gqa_attention", "swiglu_ffn", "output_head",
           "add_vertex", "check_attention", "check_flags", "LLAMA_SAMPLES", "VOCAB"]

VOCAB = 128256
BSD = ("b", "s", "d")
# A tied projection shares the embedding's table under the embedding's name.
TIED_TABLE = {"weight": "embedding"}
# The vertices of one block ``layers.{i}``, in order, with their ops.
BLOCK = (
    ("attn_norm", "RMSNorm"), ("attn.q", "Einsum"), ("attn.k", "Einsum"), ("attn.v", "Einsum"),
    ("attn.scores", "Einsum"), ("attn.softmax", "Softmax"), ("attn.context", "Einsum"), ("attn.out", "Einsum"),
    ("add1", "Elementwise"), ("ffn_norm", "RMSNorm"), ("ffn.gate", "Einsum"), ("ffn.up", "Einsum"),
    ("ffn.swiglu", "Elementwise"), ("ffn.down", "Einsum"), ("add2", "Elementwise"),
)


def llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, *,
          batch: int, seq: int, rope: bool = True, head_dim: int | None = None, qkv_bias: bool = False,
          out_bias: bool = False, mlp_bias: bool = False, tied: bool = False) -> Graph:
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

    The other keyword options cover the Llama family's variants (Hugging
    Face's Llama, Mistral and Qwen2 configurations,
    :mod:`pase.io.hf_config`); their defaults are Llama 3. ``head_dim``:
    the head width ``c`` when it is not ``hidden / heads`` (Mistral NeMo's
    128 at hidden 5120 and 32 heads): q and out are then ``d x (heads c)``.
    ``qkv_bias`` (Qwen2; Llama's ``attention_bias``), ``out_bias``
    (``attention_bias``) and ``mlp_bias``: biases on q, k and v (``heads
    c`` and ``2 kv_heads c``), on out (``d``), on the three FFN products
    (``2 F + d``). ``tied``: the projection shares the embedding's table
    (``TensorSpec.tied``, counted once: ``V d`` fewer parameters).

    Raises
    ------
    GraphError
        A size is not a positive integer, ``hidden`` is not a multiple of
        ``heads`` (without ``head_dim``), ``heads`` not a multiple of
        ``kv_heads``, or ``rope`` or a bias or ``tied`` option not a bool.

    Examples
    --------
    >>> g = llama("tiny", layers=2, hidden=64, heads=8, kv_heads=2, ffn=160, vocab=100, batch=2, seq=16)
    >>> len(g), g.parameter_count == llama_parameters(2, 64, 8, 2, 160, 100)
    (34, True)
    """
    check_positive(name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, vocab=vocab,
                   batch=batch, seq=seq)
    c = check_attention(name, hidden, heads, kv_heads, head_dim)
    check_flags(name, rope=rope, qkv_bias=qkv_bias, out_bias=out_bias, mlp_bias=mlp_bias, tied=tied)
    b, s, d = batch, seq, hidden
    g = Graph(name)
    x = add_vertex(g, L.embedding("embedding", b, s, d, vocab).with_tied(TIED_TABLE if tied else {}))
    for i in range(layers):
        p = f"layers.{i}"
        x = gqa_attention(g, p, x, batch=b, seq=s, hidden=d, kv_heads=kv_heads, group=heads // kv_heads,
                          head_dim=c, qkv_bias=qkv_bias, out_bias=out_bias)
        y = add_vertex(g, L.rms_norm(f"{p}.ffn_norm", (b, s, d), BSD), x)
        y = swiglu_ffn(g, f"{p}.ffn", y, batch=b, seq=s, hidden=d, width=ffn, bias=mlp_bias)
        x = add_vertex(g, L.elementwise(f"{p}.add2", (b, s, d), BSD), x, y)
    output_head(g, x, batch=b, seq=s, hidden=d, vocab=vocab, tied=tied)
    g.validate()
    return g


def check_attention(name: str, hidden: int, heads: int, kv_heads: int, head_dim: int | None) -> int:
    """The head width ``c`` of :func:`gqa_attention` (``head_dim``, else ``hidden / heads``); ``GraphError``
    when ``hidden`` is not a multiple of ``heads`` (without ``head_dim``), ``head_dim`` is not a positive
    integer or ``heads`` is not a multiple of ``kv_heads`` (the caller has checked the three positive)."""
    if head_dim is None and hidden % heads:
        raise GraphError(f"{name}: hidden {hidden} is not a multiple of heads {heads}")
    if head_dim is not None:
        check_positive(name, head_dim=head_dim)
    if heads % kv_heads:
        raise GraphError(f"{name}: heads {heads} is not a multiple of kv_heads {kv_heads}")
    return hidden // heads if head_dim is None else head_dim


def check_flags(name: str, **flags: object) -> None:
    """``GraphError`` naming the first of ``flags`` that is not a bool."""
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise GraphError(f"{name}: {key} must be true or false, got {value!r}")


def add_vertex(g: Graph, layer: Layer, *inputs: str | tuple[str, int]) -> str:
    """Add ``layer`` to ``g`` fed by ``inputs`` (vertex names, or ``(name, output)``); its name."""
    g.add_layer(layer, list(inputs))
    return layer.name


def gqa_attention(g: Graph, prefix: str, x: str, *, batch: int, seq: int, hidden: int, kv_heads: int, group: int,
                  head_dim: int, qkv_bias: bool = False, out_bias: bool = False, window: int = 0) -> str:
    """Add the attention half of a pre-norm block at ``prefix`` to ``g``, fed by ``x``; the residual sum's name.

    Nine vertices, those of :func:`llama`'s blocks: ``{prefix}.attn_norm``
    (RMSNorm over ``d``); ``attn.q`` (``bsd,hrcd->bshrc``: ``h =
    kv_heads``, ``r = group`` query heads per key/value head, ``c =
    head_dim``); ``attn.k`` and ``attn.v`` (``bsd,hcd->bshc``);
    ``attn.scores`` (``bshrc,bkhc->bhrsk``); ``attn.softmax`` over ``k``;
    ``attn.context`` (``bhrsk,bkhc->bshrc``); ``attn.out``
    (``bshrc,hrcd->bsd``); ``add1`` (``x`` plus the attention). Biases on
    q, k and v with ``qkv_bias``, on out with ``out_bias``. The attention is
    causal (a decoder), over a sliding ``window`` of positions when it is not
    0 (Mistral's). The sizes are the caller's to check (:func:`llama`, :func:`pase.models.moe.moe_decoder`).
    """
    b, s, d, h, r, c = batch, seq, hidden, kv_heads, group, head_dim
    q_sizes = dict(b=b, s=s, d=d, h=h, r=r, c=c)
    kv_sizes = dict(b=b, s=s, d=d, h=h, c=c)
    y = add_vertex(g, L.rms_norm(f"{prefix}.attn_norm", (b, s, d), BSD), x)
    q = add_vertex(g, L.einsum(f"{prefix}.attn.q", "bsd,hrcd->bshrc", q_sizes, weights=(1,), bias=qkv_bias), y)
    k = add_vertex(g, L.einsum(f"{prefix}.attn.k", "bsd,hcd->bshc", kv_sizes, weights=(1,), bias=qkv_bias), y)
    v = add_vertex(g, L.einsum(f"{prefix}.attn.v", "bsd,hcd->bshc", kv_sizes, weights=(1,), bias=qkv_bias), y)
    scores = add_vertex(g, L.einsum(f"{prefix}.attn.scores", "bshrc,bkhc->bhrsk", dict(b=b, s=s, h=h, r=r, c=c, k=s)),
                  q, k)
    probs = add_vertex(g, L.softmax(f"{prefix}.attn.softmax", (b, h, r, s, s), ("b", "h", "r", "s", "k"), axis="k",
                                    mask="causal", window=window), scores)
    context = add_vertex(g, L.einsum(f"{prefix}.attn.context", "bhrsk,bkhc->bshrc", dict(b=b, h=h, r=r, s=s, k=s, c=c)),
                   probs, v)
    y = add_vertex(g, L.einsum(f"{prefix}.attn.out", "bshrc,hrcd->bsd", q_sizes, weights=(1,), bias=out_bias), context)
    return add_vertex(g, L.elementwise(f"{prefix}.add1", (b, s, d), BSD), x, y)


def swiglu_ffn(g: Graph, prefix: str, y: str, *, batch: int, seq: int, hidden: int, width: int,
               bias: bool = False) -> str:
    """Add a SwiGLU network of width ``width`` at ``prefix`` to ``g``, fed by ``y``; its output's name.

    ``{prefix}.gate`` and ``.up`` (``bsd,ed->bse``), ``.swiglu`` (``silu(gate)
    * up``, one gated Elementwise over ``b s e``), ``.down`` (``bse,de->bsd``);
    biases on the three products with ``bias``.
    """
    ff = dict(b=batch, s=seq, d=hidden, e=width)
    gate = add_vertex(g, L.einsum(f"{prefix}.gate", "bsd,ed->bse", ff, weights=(1,), bias=bias), y)
    up = add_vertex(g, L.einsum(f"{prefix}.up", "bsd,ed->bse", ff, weights=(1,), bias=bias), y)
    y = add_vertex(g, L.elementwise(f"{prefix}.swiglu", (batch, seq, width), ("b", "s", "e"), pointwise=1, gated=True),
             gate, up)
    return add_vertex(g, L.einsum(f"{prefix}.down", "bse,de->bsd", ff, weights=(1,), bias=bias), y)


def output_head(g: Graph, x: str, *, batch: int, seq: int, hidden: int, vocab: int, tied: bool = False) -> str:
    """Add ``norm`` (RMSNorm), ``projection`` (``bsd,vd->bsv``), ``softmax`` (cross-entropy) to ``g``, fed by ``x``.

    ``tied``: the projection's table is the embedding's (an ``embedding``
    vertex made with ``.with_tied(TIED_TABLE)``). The loss vertex's name.
    """
    b, s, d = batch, seq, hidden
    x = add_vertex(g, L.rms_norm("norm", (b, s, d), BSD), x)
    logits = add_vertex(g, L.einsum("projection", "bsd,vd->bsv", dict(b=b, s=s, d=d, v=vocab), weights=(1,))
                  .with_tied({"w1": "embedding"} if tied else {}), x)
    return add_vertex(g, L.softmax_cross_entropy("softmax", (b, s, vocab), ("b", "s", "v")), logits)


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
