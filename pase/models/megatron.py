"""Megatron-LM's GPT models, vertex for vertex as Megatron runs them, and the published sizes as samples.

:func:`megatron_gpt` builds the network of Megatron-LM's GPT runs (Narayanan
et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", Table 1; Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models"): the dropouts are vertices, GeLU
is not fused into the first feed-forward product (it keeps its input, the
product after it keeps its output), and the vocabulary projection shares the
token embedding's table (``tied="wte"`` on both weights). With these vertices
the memory model's activation bytes of one block are Korthikanti et al.'s
``s b h (34 + 5 a s / h)`` at 2 bytes per element.

Dimension letters are those of :mod:`pase.models.sequence`: ``b s d v`` for
the embeddings, ``b s h c k`` in attention (``h`` heads, ``c`` head width,
``k`` key positions), ``b s d e`` in the feed-forward block.

:data:`MEGATRON_SAMPLES` maps each sample name to its builder (``batch=``,
default the published global batch; ``seq=``, default 2,048, the learned
position table as long as the sequence); :mod:`pase.models` registers them in
:data:`~pase.models.SAMPLES`. Besides Megatron-LM's own runs they hold NeMo's
GPT-3 configurations, ``gpt3-5b`` and ``gpt3-20b`` (NVIDIA
NeMo-Framework-Launcher ``launcher_scripts/conf/training/gpt3/5b.yaml`` and
``20b.yaml``, the runs of NeMo 24.07's performance summary): Megatron-core's
GPT, learned absolute positions, LayerNorm, GeLU, biases, dropout 0.1, the
output projection tied to the token embedding, GPT-2's 50,257-token
vocabulary padded to a multiple of 128 times the config's tensor-parallel
size (``make_vocab_size_divisible_by`` 128).
"""

from __future__ import annotations

from typing import Callable

from pase import ops as L
from pase.errors import GraphError
from pase.ir.graph import Graph
from pase.models._common import check_positive
from pase.models.sequence import _Stack

__all__ = ["megatron_gpt", "megatron_parameters", "MEGATRON_SAMPLES", "TIED"]

# The name of the parameter the token embedding and the vocabulary projection share.
TIED = "wte"


def megatron_gpt(name: str, layers: int, hidden: int, heads: int, *, batch: int = 512, seq: int = 2048,
                 vocab: int = 51200, ffn: int | None = None, positions: int | None = None, tied: bool = True) -> Graph:
    """Megatron-LM's GPT: ``layers`` pre-LN blocks of width ``hidden`` with ``heads`` heads, as Megatron runs it.

    Vertices: token embedding ``wte`` (``b s d v``, ``vocab x hidden``) and
    learned position embedding ``wpe`` (``seq x hidden``), their sum
    ``embed``, dropout ``embed.dropout``; per block ``h.{i}`` (17 vertices):
    ``ln1``; ``attn.q``, ``attn.k``, ``attn.v`` (``bsd,hcd->bshc`` with bias);
    ``attn.scores`` (``bshc,bkhc->bhsk``); ``attn.softmax`` over ``k``;
    ``attn.dropout`` (over ``b h s k``); ``attn.context``
    (``bhsk,bkhc->bshc``); ``attn.out`` (``bshc,hcd->bsd`` with bias);
    ``attn.out_dropout``; ``add1``; ``ln2``; ``ff1`` (``bsd,ed->bse`` with
    bias, nothing fused); ``gelu`` (keeps its input); ``ff2``
    (``bse,de->bsd`` with bias); ``ff_dropout``; ``add2``. Then ``ln_f``,
    ``projection`` (``bsd,vd->bsv``, no bias, its weight tied to ``wte``'s
    table) and ``softmax`` (cross-entropy). ``17 layers + 7`` vertices.

    Parameters, with ``l = layers``, ``h = hidden``, ``F = ffn`` (default
    ``4 h``), ``V = vocab``, ``s = seq``: ``l (4 h^2 + 2 h F + F + 9 h) +
    (V + s) h + 2 h`` (:func:`megatron_parameters`), the tied table counted
    once; with ``F = 4 h`` this is Megatron's ``12 l h^2 (1 + 13/(12 h) +
    (V + s)/(12 l h))`` plus the final LayerNorm's ``2 h``.

    ``positions``: rows of the position table when it is longer than the
    sequence (GPT-2's 1024 ``n_positions`` trained at any shorter ``seq``;
    :mod:`pase.io.hf_config`): ``positions`` replaces ``s`` in the count.
    ``tied`` False gives the projection its own ``V h`` table.

    Raises
    ------
    GraphError
        A size is not a positive integer, ``hidden`` is not a multiple of
        ``heads``, or ``positions`` is shorter than ``seq``.

    Examples
    --------
    >>> g = megatron_gpt("tiny", layers=2, hidden=64, heads=4, batch=2, seq=16, vocab=100)
    >>> len(g), g.parameter_count == megatron_parameters(2, 64, 16, 100)
    (41, True)
    """
    ffn = 4 * hidden if ffn is None else ffn
    positions = seq if positions is None else positions
    check_positive(name, layers=layers, hidden=hidden, heads=heads, batch=batch, seq=seq, vocab=vocab, ffn=ffn,
                   positions=positions)
    if positions < seq:
        raise GraphError(f"{name}: the position table has {positions} rows, fewer than the sequence's {seq} tokens; "
                         f"use a sequence of at most {positions}")
    if not isinstance(tied, bool):
        raise GraphError(f"{name}: tied must be true or false, got {tied!r}")
    table = {"weight": TIED} if tied else {}
    net = _Stack(name, batch, seq, hidden, heads, ffn)
    b, s, d, h, c = net.b, net.s, net.d, net.h, net.c
    proj = dict(b=b, s=s, d=d, h=h, c=c)
    ff = dict(b=b, s=s, d=d, e=ffn)
    tokens = net.add(L.embedding("wte", b, s, d, vocab).with_tied(table))
    x = net.residual("embed", tokens, net.embedding("wpe", positions))
    x = net.add(L.dropout("embed.dropout", (b, s, d), ("b", "s", "d")), x)
    for i in range(layers):
        p = f"h.{i}"
        y = net.norm(f"{p}.ln1", x)
        q, k, v = (net.add(L.einsum(f"{p}.attn.{t}", "bsd,hcd->bshc", proj, weights=(1,), bias=True), y) for t in "qkv")
        scores = net.add(L.einsum(f"{p}.attn.scores", "bshc,bkhc->bhsk", dict(b=b, s=s, h=h, c=c, k=s)), q, k)
        attn_dims = ("b", "h", "s", "k")
        probs = net.add(L.softmax(f"{p}.attn.softmax", (b, h, s, s), attn_dims, axis="k", mask="causal"), scores)
        probs = net.add(L.dropout(f"{p}.attn.dropout", (b, h, s, s), attn_dims), probs)
        context = net.add(L.einsum(f"{p}.attn.context", "bhsk,bkhc->bshc", dict(b=b, h=h, s=s, k=s, c=c)), probs, v)
        y = net.add(L.einsum(f"{p}.attn.out", "bshc,hcd->bsd", proj, weights=(1,), bias=True), context)
        y = net.add(L.dropout(f"{p}.attn.out_dropout", (b, s, d), ("b", "s", "d")), y)
        x = net.residual(f"{p}.add1", x, y)
        y = net.add(L.einsum(f"{p}.ff1", "bsd,ed->bse", ff, weights=(1,), bias=True), net.norm(f"{p}.ln2", x))
        y = net.add(L.gelu(f"{p}.gelu", (b, s, ffn), ("b", "s", "e")), y)
        y = net.add(L.einsum(f"{p}.ff2", "bse,de->bsd", ff, weights=(1,), bias=True), y)
        y = net.add(L.dropout(f"{p}.ff_dropout", (b, s, d), ("b", "s", "d")), y)
        x = net.residual(f"{p}.add2", x, y)
    x = net.norm("ln_f", x)
    logits = net.add(L.einsum("projection", "bsd,vd->bsv", dict(b=b, s=s, d=d, v=vocab), weights=(1,))
                     .with_tied({"w1": TIED} if tied else {}), x)
    net.add(L.softmax_cross_entropy("softmax", (b, s, vocab), ("b", "s", "v")), logits)
    net.graph.validate()
    return net.graph


def megatron_parameters(layers: int, hidden: int, seq: int, vocab: int, ffn: int | None = None) -> int:
    """Trainable parameters of :func:`megatron_gpt` (the formula of its docstring), tied table counted once."""
    ffn = 4 * hidden if ffn is None else ffn
    return layers * (4 * hidden**2 + 2 * hidden * ffn + ffn + 9 * hidden) + (vocab + seq) * hidden + 2 * hidden


def _sample(name: str, source: str, layers: int, hidden: int, heads: int, batch: int, ffn: int | None = None,
            seq: int = 2048, vocab: int = 51200, published: str = "") -> Callable[..., Graph]:
    """A sample builder ``build(batch=..., seq=...)`` of :func:`megatron_gpt` at these sizes, with its own
    docstring; ``published``: the published parameter count, where the source gives one apart from the name."""
    def build(batch: int = batch, seq: int = seq) -> Graph:
        return megatron_gpt(name, layers, hidden, heads, batch=batch, seq=seq, vocab=vocab, ffn=ffn)

    width = 4 * hidden if ffn is None else ffn
    build.__name__ = build.__qualname__ = name.replace("-", "_")
    build.__doc__ = (
        f"{source}: :func:`megatron_gpt` with {layers} layers, hidden {hidden}, {heads} heads, FFN {width}, "
        f"vocabulary {vocab}; default sequence {seq} and batch {batch} (the published global batch).\n\n"
        f"{17 * layers + 7} vertices; parameters {megatron_parameters(layers, hidden, seq, vocab, ffn):,} "
        f"({published}the vocabulary projection tied to the token embedding; the position table grows with "
        "the sequence)."
    )
    return build


_TABLE1 = "Megatron-LM (Narayanan et al. 2021, Table 1)"
_NEMO = ("NeMo's GPT-3 {} (NeMo-Framework-Launcher conf/training/gpt3/{}.yaml, as NeMo 24.07's performance "
         "summary ran it)")

MEGATRON_SAMPLES: dict[str, Callable[..., Graph]] = {
    name: _sample(name, source, *sizes, **extra) for name, source, sizes, extra in (
        ("megatron-1.7b", _TABLE1, (24, 2304, 24, 512), {}),
        ("megatron-3.6b", _TABLE1, (30, 3072, 32, 512), {}),
        ("megatron-7.5b", _TABLE1, (36, 4096, 32, 512), {}),
        ("megatron-18b", _TABLE1, (40, 6144, 48, 1024), {}),
        ("megatron-39b", _TABLE1, (48, 8192, 64, 1536), {}),
        ("megatron-76b", _TABLE1, (60, 10240, 80, 1792), {}),
        ("megatron-146b", _TABLE1, (80, 12288, 96, 2304), {}),
        ("megatron-310b", _TABLE1, (96, 16384, 128, 2160), {}),
        ("megatron-530b", _TABLE1, (105, 20480, 128, 2520), {}),
        ("megatron-1t", _TABLE1, (128, 25600, 160, 3072), {}),
        ("megatron-22b", "Korthikanti et al. 2022's 22B model", (48, 6144, 64, 4), {"ffn": 24576}),
        ("gpt3-175b", "GPT-3 175B (Brown et al. 2020) as Megatron-LM trains it", (96, 12288, 96, 1536), {}),
        # FFN 4 x hidden; the configs' global batch 2048. Vocabulary 50,257 padded at tensor-parallel size 1
        # (5B: a multiple of 128) and 2 (20B: of 256), the configs' and the performance summary's.
        ("gpt3-5b", _NEMO.format("5B", "5b"), (24, 4096, 32, 2048), {"vocab": 50304, "published": "published 5B; "}),
        ("gpt3-20b", _NEMO.format("20B", "20b"), (44, 6144, 48, 2048),
         {"vocab": 50432, "published": "published 20B; "}),
    )
}
