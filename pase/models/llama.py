"""Meta's Llama 3 models, built by code, and the published sizes of Llama-style decoders as samples.

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

Rotary position embeddings (RoPE) are no layer of their own: an elementwise
rotation of q and k, no parameters, a few FLOPs per element of q and k
(negligible next to the products, and not counted). The attention's softmax
says the model has them (``rotary``), and the calibrated model prices the
kernel that applies them, a read and a write of q and k each way
(:mod:`pase.model.attention`). The 1/sqrt(c) scaling is left out and the
causal mask is the softmax's, as in the other samples: the scores and
context products count every (s, k) pair.

:func:`llama`'s ``norm`` and ``mlp`` options build the decoders of the same
shape that differ in those two parts: NVIDIA's Nemotron-4 (LayerNorm, a
squared-ReLU feed-forward network that is not gated).

:data:`LLAMA_SAMPLES` maps each sample name to its builder (``batch=``,
``seq=``), each with the sizes and vocabulary of its published config:

* Llama 3 (``llama3-8b``, ``-70b``, ``-405b``): default 2048 sequences of
  8,192 tokens, the paper's final 16M-token batch (the 405B run ramps up
  from 4M tokens at sequence 4,096, and the paper does not state the 8B and
  70B batches separately);
* Llama 2 (``llama2-7b``, ``-13b``, ``-70b``; Touvron et al. 2023, "Llama 2:
  Open Foundation and Fine-Tuned Chat Models", Table 1 and section 2.2;
  Hugging Face ``meta-llama/Llama-2-*-hf`` ``config.json``): vocabulary
  32,000, grouped-query attention in 70B only, default 1024 sequences of
  4,096 tokens (the paper's 4M-token batch);
* Nemotron-4 340B (``nemotron4-340b``; NVIDIA, "Nemotron-4 340B Technical
  Report", 2024, Table 1; NeMo-Framework-Launcher
  ``conf/training/nemotron/nemotron_340b.yaml``): vocabulary 256,000,
  default 2304 sequences of 4,096 tokens (the published global batch).

:mod:`pase.models` registers them in :data:`~pase.models.SAMPLES` and
:data:`~pase.models.LANGUAGE_MODELS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pase import ops as L
from pase.errors import GraphError
from pase.ir.graph import Graph, Layer
from pase.models._common import check_positive

__all__ = ["llama", "llama_parameters", "block_matmul_forward_flops", "gqa_attention", "swiglu_ffn",
           "squared_relu_ffn", "output_head", "add_vertex", "check_attention", "check_flags", "LLAMA_SAMPLES", "VOCAB",
           "NORMS", "MLPS"]

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
# ``norm=``: the normalisation of every block and of the output head. RMSNorm (Llama) has a scale, LayerNorm
# (Nemotron-4's, GPT's) a scale and a shift.
NORMS = {"rms": L.rms_norm, "layer": L.layer_norm}
# ``mlp=``: the feed-forward network. SwiGLU (Llama) has three matrices; squared ReLU (Nemotron-4, So et al. 2021's
# Primer) is not gated: two.
MLPS = ("swiglu", "squared_relu")


def llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, *,
          batch: int, seq: int, rope: bool = True, head_dim: int | None = None, qkv_bias: bool = False,
          out_bias: bool = False, mlp_bias: bool = False, tied: bool = False, norm: str = "rms",
          mlp: str = "swiglu", window: int = 0) -> Graph:
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

    ``norm``: ``"rms"`` (RMSNorm, the default) or ``"layer"`` (LayerNorm: a
    shift besides each scale, ``2 l d + d`` more parameters; the vertices
    keep their names). ``mlp``: ``"swiglu"`` (the default) or
    ``"squared_relu"``, Nemotron-4's network that is not gated: ``ffn.up``
    (``bsd,ed->bse``), ``ffn.squared_relu`` (``relu(x)^2`` as one Elementwise
    with one fused op, keeping its output), ``ffn.down``; 14 vertices a
    block, two FFN matrices (``l d F`` fewer parameters).

    ``rope``: whether positions are rotary (Llama's RoPE, True) or absent;
    the layers are the same either way (RoPE has no parameters and
    negligible FLOPs), the attention's softmax saying which (the module
    docstring).

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
    ``window``: each query sees at most that many positions (Mistral's
    sliding window; 0, none), which a fused attention kernel computes within.

    Raises
    ------
    GraphError
        A size is not a positive integer, ``hidden`` is not a multiple of
        ``heads`` (without ``head_dim``), ``heads`` not a multiple of
        ``kv_heads``, ``rope`` or a bias or ``tied`` option not a bool, or
        ``norm`` or ``mlp`` not one of :data:`NORMS` or :data:`MLPS`.

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
    check_choices(name, norm=norm, mlp=mlp)
    b, s, d = batch, seq, hidden
    feed_forward = swiglu_ffn if mlp == "swiglu" else squared_relu_ffn
    g = Graph(name)
    x = add_vertex(g, L.embedding("embedding", b, s, d, vocab).with_tied(TIED_TABLE if tied else {}))
    for i in range(layers):
        p = f"layers.{i}"
        x = gqa_attention(g, p, x, batch=b, seq=s, hidden=d, kv_heads=kv_heads, group=heads // kv_heads, window=window,
                          rope=rope,
                          head_dim=c, qkv_bias=qkv_bias, out_bias=out_bias, norm=norm)
        y = add_vertex(g, NORMS[norm](f"{p}.ffn_norm", (b, s, d), BSD), x)
        y = feed_forward(g, f"{p}.ffn", y, batch=b, seq=s, hidden=d, width=ffn, bias=mlp_bias)
        x = add_vertex(g, L.elementwise(f"{p}.add2", (b, s, d), BSD), x, y)
    output_head(g, x, batch=b, seq=s, hidden=d, vocab=vocab, tied=tied, norm=norm)
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


def check_choices(name: str, *, norm: str, mlp: str) -> None:
    """``GraphError`` unless ``norm`` is a key of :data:`NORMS` and ``mlp`` one of :data:`MLPS`."""
    if not isinstance(norm, str) or norm not in NORMS:
        raise GraphError(f"{name}: norm must be one of {', '.join(NORMS)}, got {norm!r}")
    if not isinstance(mlp, str) or mlp not in MLPS:
        raise GraphError(f"{name}: mlp must be one of {', '.join(MLPS)}, got {mlp!r}")


def add_vertex(g: Graph, layer: Layer, *inputs: str | tuple[str, int]) -> str:
    """Add ``layer`` to ``g`` fed by ``inputs`` (vertex names, or ``(name, output)``); its name."""
    g.add_layer(layer, list(inputs))
    return layer.name


def gqa_attention(g: Graph, prefix: str, x: str, *, batch: int, seq: int, hidden: int, kv_heads: int, group: int,
                  head_dim: int, qkv_bias: bool = False, out_bias: bool = False, window: int = 0,
                  norm: str = "rms", qk_norm: bool = False, rope: bool = False) -> str:
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
    ``norm``: the op of ``attn_norm``, a key of :data:`NORMS` (RMSNorm by default). ``qk_norm``: RMSNorm
    over each head's ``c`` of q and of k (``attn.q_norm``, ``attn.k_norm``, Qwen3's), a scale of ``c`` each.
    ``rope``: q and k carry rotary position embeddings (the softmax's ``rotary``).
    """
    b, s, d, h, r, c = batch, seq, hidden, kv_heads, group, head_dim
    q_sizes = dict(b=b, s=s, d=d, h=h, r=r, c=c)
    kv_sizes = dict(b=b, s=s, d=d, h=h, c=c)
    y = add_vertex(g, NORMS[norm](f"{prefix}.attn_norm", (b, s, d), BSD), x)
    q = add_vertex(g, L.einsum(f"{prefix}.attn.q", "bsd,hrcd->bshrc", q_sizes, weights=(1,), bias=qkv_bias), y)
    k = add_vertex(g, L.einsum(f"{prefix}.attn.k", "bsd,hcd->bshc", kv_sizes, weights=(1,), bias=qkv_bias), y)
    v = add_vertex(g, L.einsum(f"{prefix}.attn.v", "bsd,hcd->bshc", kv_sizes, weights=(1,), bias=qkv_bias), y)
    if qk_norm:
        q = add_vertex(g, L.rms_norm(f"{prefix}.attn.q_norm", (b, s, h, r, c), ("b", "s", "h", "r", "c")), q)
        k = add_vertex(g, L.rms_norm(f"{prefix}.attn.k_norm", (b, s, h, c), ("b", "s", "h", "c")), k)
    scores = add_vertex(g, L.einsum(f"{prefix}.attn.scores", "bshrc,bkhc->bhrsk", dict(b=b, s=s, h=h, r=r, c=c, k=s)),
                  q, k)
    probs = add_vertex(g, L.softmax(f"{prefix}.attn.softmax", (b, h, r, s, s), ("b", "h", "r", "s", "k"), axis="k",
                                    mask="causal", window=window, rotary=rope), scores)
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


def squared_relu_ffn(g: Graph, prefix: str, y: str, *, batch: int, seq: int, hidden: int, width: int,
                     bias: bool = False) -> str:
    """Add a squared-ReLU network of width ``width`` at ``prefix`` to ``g``, fed by ``y``; its output's name.

    ``{prefix}.up`` (``bsd,ed->bse``), ``.squared_relu`` (``relu(x)^2``, one
    Elementwise over ``b s e`` with one fused op, as the ONNX importer counts
    an activation), ``.down`` (``bse,de->bsd``); biases on the two products
    with ``bias``. Nemotron-4's feed-forward network: not gated.
    """
    ff = dict(b=batch, s=seq, d=hidden, e=width)
    y = add_vertex(g, L.einsum(f"{prefix}.up", "bsd,ed->bse", ff, weights=(1,), bias=bias), y)
    y = add_vertex(g, L.elementwise(f"{prefix}.squared_relu", (batch, seq, width), ("b", "s", "e"), inputs=1,
                                    pointwise=1), y)
    return add_vertex(g, L.einsum(f"{prefix}.down", "bse,de->bsd", ff, weights=(1,), bias=bias), y)


def output_head(g: Graph, x: str, *, batch: int, seq: int, hidden: int, vocab: int, tied: bool = False,
                norm: str = "rms") -> str:
    """Add ``norm``, ``projection`` (``bsd,vd->bsv``), ``softmax`` (cross-entropy) to ``g``, fed by ``x``.

    ``tied``: the projection's table is the embedding's (an ``embedding``
    vertex made with ``.with_tied(TIED_TABLE)``). ``norm``: the op of the
    ``norm`` vertex, a key of :data:`NORMS` (RMSNorm by default). The loss vertex's name.
    """
    b, s, d = batch, seq, hidden
    x = add_vertex(g, NORMS[norm]("norm", (b, s, d), BSD), x)
    logits = add_vertex(g, L.einsum("projection", "bsd,vd->bsv", dict(b=b, s=s, d=d, v=vocab), weights=(1,))
                  .with_tied({"w1": "embedding"} if tied else {}), x)
    return add_vertex(g, L.softmax_cross_entropy("softmax", (b, s, vocab), ("b", "s", "v")), logits)


def llama_parameters(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int = VOCAB, *,
                     norm: str = "rms", mlp: str = "swiglu") -> int:
    """Trainable parameters of :func:`llama` without biases, untied (the formula of its docstring)."""
    kv_width = kv_heads * (hidden // heads)
    norm_vectors = 1 if norm == "rms" else 2  # a scale, or a scale and a shift
    matrices = 3 if mlp == "swiglu" else 2
    return (layers * (2 * hidden**2 + 2 * kv_width * hidden + matrices * hidden * ffn + 2 * norm_vectors * hidden)
            + 2 * vocab * hidden + norm_vectors * hidden)


def block_matmul_forward_flops(batch: int, seq: int, hidden: int, heads: int, kv_heads: int, ffn: int) -> int:
    """Forward FLOPs of one block's matrix products: ``2 b s (d^2 (2 + 2 g / a) + 3 d F) + 4 b s^2 d``.

    q and out ``2 b s d^2`` each, k and v ``2 b s d (g c)`` each (``g c = d g / a``
    with ``a`` heads, ``g`` key/value heads), gate, up and down ``2 b s d F``
    each, scores and context ``2 b s^2 d`` each (every (s, k) pair, no causal mask).
    """
    b, s, d = batch, seq, hidden
    return 2 * b * s * (d * d * (2 * heads + 2 * kv_heads) // heads + 3 * d * ffn) + 4 * b * s * s * d


@dataclass(frozen=True)
class _Family:
    """What the samples of one published model family share: its source, vocabulary, default sequence and batch,
    and the :func:`llama` options that set it apart from Llama 3."""

    title: str
    source: str
    vocab: int
    seq: int
    batch: int
    batch_source: str
    options: tuple[tuple[str, str], ...] = ()


LLAMA3 = _Family("Llama 3", "Meta 2024, Table 3", VOCAB, 8192, 2048, "the published 16M-token batch")
LLAMA2 = _Family("Llama 2", "Touvron et al. 2023, Table 1; Hugging Face meta-llama/Llama-2-*-hf config.json",
                 32000, 4096, 1024, "the paper's 4M-token batch")
NEMOTRON4 = _Family("Nemotron-4", "NVIDIA 2024, Nemotron-4 340B Technical Report, Table 1; NeMo-Framework-Launcher "
                    "conf/training/nemotron/nemotron_340b.yaml", 256000, 4096, 2304, "the published global batch",
                    (("norm", "layer"), ("mlp", "squared_relu")))

# How a sample's docstring names the options of its family.
_OPTION_WORDS = {("norm", "layer"): "LayerNorm (scale and shift)",
                 ("mlp", "squared_relu"): "a squared-ReLU feed-forward network (not gated)"}

# name: (family, layers, hidden, heads, kv_heads, ffn, published parameters, where that figure is published).
SIZES = {
    "llama3-8b": (LLAMA3, 32, 4096, 32, 8, 14336, 8.03e9, "Meta 2024"),
    "llama3-70b": (LLAMA3, 80, 8192, 64, 8, 28672, 70.6e9, "Meta 2024"),
    "llama3-405b": (LLAMA3, 126, 16384, 128, 8, 53248, 405.9e9, "Meta 2024"),
    # The paper names the sizes 7B, 13B and 70B; the exact counts are those of Meta's Hugging Face checkpoints
    # (model.safetensors.index.json: total_size / 2 bytes per bf16 weight).
    "llama2-7b": (LLAMA2, 32, 4096, 32, 32, 11008, 6.74e9, "meta-llama/Llama-2-7b-hf: 6,738,415,616"),
    "llama2-13b": (LLAMA2, 40, 5120, 40, 40, 13824, 13.0e9, "meta-llama/Llama-2-13b-hf: 13,015,864,320"),
    "llama2-70b": (LLAMA2, 80, 8192, 64, 8, 28672, 69.0e9, "meta-llama/Llama-2-70b-hf: 68,976,648,192"),
    # FFN 4 x hidden; 8 key/value heads; RoPE on half of each head (no parameters); no biases; untied. NeMo's
    # "layernorm1p" stores LayerNorm's scale as an offset from 1: the same parameters as LayerNorm.
    "nemotron4-340b": (NEMOTRON4, 96, 18432, 96, 8, 73728, 341e9,
                       "the technical report: 9.4B embedding and 331.6B non-embedding parameters"),
}


def _sample(name: str, family: _Family, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int,
            published: float, where: str) -> Callable[..., Graph]:
    """A sample builder ``build(batch=..., seq=...)`` of :func:`llama` at these sizes, with its own docstring."""
    options = dict(family.options)

    def build(batch: int = family.batch, seq: int = family.seq) -> Graph:
        return llama(name, layers, hidden, heads, kv_heads, ffn, family.vocab, batch=batch, seq=seq, **options)

    gated = options.get("mlp", "swiglu") == "swiglu"
    parts = "".join(f"; {_OPTION_WORDS[option]}" for option in family.options)
    build.__name__ = build.__qualname__ = name.replace("-", "_").replace(".", "_")
    build.__doc__ = (
        f"{family.title} {name.split('-')[-1].upper()} ({family.source}): :func:`llama` with {layers} layers, "
        f"hidden {hidden}, {heads} heads, {kv_heads} key/value heads, FFN {ffn}, vocabulary {family.vocab}{parts}; "
        f"default sequence {family.seq} and batch {family.batch} ({family.batch_source}).\n\n"
        f"{(15 if gated else 14) * layers + 4} vertices; parameters "
        f"{llama_parameters(layers, hidden, heads, kv_heads, ffn, family.vocab, **options):,} "
        f"(published {published / 1e9:g}B, {where}; untied embedding and output projection)."
    )
    return build


LLAMA_SAMPLES: dict[str, Callable[..., Graph]] = {name: _sample(name, *sizes) for name, sizes in SIZES.items()}
