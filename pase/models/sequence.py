"""Sequence-model sample graphs: an LSTM language model, the Transformer, GPT.

Dimension letters follow the paper: embedding ``b s d v`` (batch, sequence,
model width, vocabulary), LSTM ``l b s d e``, attention ``b s h c k`` (heads
``h``, head width ``c``, key sequence ``k``), feed-forward ``b s d e``
(``e``: inner width). Attention is four kinds of ``Einsum`` vertices:

* projections ``bsd,hcd->bshc`` (query, key, value; weight ``h c d`` and bias ``h c``),
* scores ``bshc,bkhc->bhsk``, then a ``Softmax`` over ``k``,
* context ``bhsk,bkhc->bshc``,
* output projection ``bshc,hcd->bsd`` (weight and bias ``d``).

The 1/sqrt(c) scaling, masks and dropout are left out (no parameters,
negligible FLOPs); position encodings are sinusoidal (no vertex) in the
Transformer and a learned table in GPT. These samples keep the embeddings and
the vocabulary projection as separate tables; :mod:`pase.models.megatron`
ties them (``TensorSpec.tied``). :func:`gpt`'s keyword options and
:func:`bert` (BERT's masked-LM pretraining network) build Hugging Face's
GPT-NeoX and BERT configurations (:mod:`pase.io.hf_config`).
"""

from __future__ import annotations

from pase import ops as L
from pase.errors import GraphError
from pase.ir.graph import Graph, Layer
from pase.models._common import check_positive

__all__ = ["rnnlm", "transformer", "transformer_large", "gpt", "bert"]

BSD = ("b", "s", "d")


def rnnlm(batch: int = 64, seq: int = 256, vocab: int = 100000, hidden: int = 2048, layers: int = 2) -> Graph:
    """The paper's RNN language model: embedding, a multi-layer LSTM, vocabulary projection, loss.

    Four vertices: ``Embedding`` (``b s d v``, ``vocab x hidden`` table),
    one ``LSTM`` vertex for all ``layers`` layers (``l b s d e``, ``d = e =
    hidden``), the projection ``Einsum`` ``bsd,vd->bsv`` with a bias, and a
    ``SoftmaxCrossEntropy`` over the vocabulary.

    Parameters: ``2 V H + V + L (8 H^2 + 4 H)`` (the LSTM has one bias per
    gate), 476,825,248 for the defaults (V = 100000, H = 2048, L = 2).

    Examples
    --------
    >>> g = rnnlm()
    >>> [layer.op for layer in g]
    ['Embedding', 'LSTM', 'Einsum', 'SoftmaxCrossEntropy']
    >>> g.parameter_count
    476825248
    """
    check_positive("rnnlm", batch=batch, seq=seq, vocab=vocab, hidden=hidden, layers=layers)
    b, s, h, v = batch, seq, hidden, vocab
    g = Graph("rnnlm")
    g.add_layer(L.embedding("embedding", b, s, h, v))
    g.add_layer(L.lstm("lstm", layers, b, s, h, h), ["embedding"])
    g.add_layer(L.einsum("projection", "bsd,vd->bsv", dict(b=b, s=s, d=h, v=v), weights=(1,), bias=True), ["lstm"])
    g.add_layer(L.softmax_cross_entropy("softmax", (b, s, v), ("b", "s", "v")), ["projection"])
    g.validate()
    return g


class _Stack:
    """Adds Transformer vertices to a graph; activations are ``(b, s, d)`` tensors named by their producer."""

    def __init__(self, name: str, batch: int, seq: int, d_model: int, heads: int, d_ff: int):
        if d_model % heads:
            raise GraphError(f"{name}: d_model {d_model} is not a multiple of heads {heads}")
        self.graph = Graph(name)
        self.b, self.s, self.d, self.h, self.c, self.ff = batch, seq, d_model, heads, d_model // heads, d_ff

    def add(self, layer: Layer, *inputs: str) -> str:
        self.graph.add_layer(layer, list(inputs))
        return layer.name

    def attention(self, name: str, x: str, memory: str | None = None, *, bias: bool = True,
                  dropout: bool = False, causal: bool = False) -> str:
        """Multi-head attention of queries from ``x`` over keys and values from ``memory`` (default ``x``).

        ``bias``: the four projections have biases; ``dropout``: a Dropout
        vertex ``{name}.dropout`` on the attention probabilities (BERT's);
        ``causal``: each query sees its own and earlier positions (a
        decoder's self-attention; the softmax's ``mask``).
        """
        memory = x if memory is None else memory
        b, s, d, h, c = self.b, self.s, self.d, self.h, self.c
        proj = dict(b=b, s=s, d=d, h=h, c=c)
        q, k, v = (self.add(L.einsum(f"{name}.{t}", "bsd,hcd->bshc", proj, weights=(1,), bias=bias), src)
                   for t, src in (("q", x), ("k", memory), ("v", memory)))
        scores = self.add(L.einsum(f"{name}.scores", "bshc,bkhc->bhsk", dict(b=b, s=s, h=h, c=c, k=s)), q, k)
        probs = self.add(L.softmax(f"{name}.softmax", (b, h, s, s), ("b", "h", "s", "k"), axis="k",
                                   mask="causal" if causal else "none"), scores)
        if dropout:
            probs = self.add(L.dropout(f"{name}.dropout", (b, h, s, s), ("b", "h", "s", "k")), probs)
        context = self.add(L.einsum(f"{name}.context", "bhsk,bkhc->bshc", dict(b=b, h=h, s=s, k=s, c=c)), probs, v)
        return self.add(L.einsum(f"{name}.out", "bshc,hcd->bsd", proj, weights=(1,), bias=bias), context)

    def feed_forward(self, name: str, x: str) -> str:
        """Two-layer feed-forward block ``b s d e`` with the activation fused into the first."""
        sizes = dict(b=self.b, s=self.s, d=self.d, e=self.ff)
        y = self.add(L.einsum(f"{name}.ff1", "bsd,ed->bse", sizes, weights=(1,), bias=True, pointwise=1), x)
        return self.add(L.einsum(f"{name}.ff2", "bse,de->bsd", sizes, weights=(1,), bias=True), y)

    def residual(self, name: str, x: str, *ys: str) -> str:
        """The sum of ``x`` and the branches ``ys`` (two for GPT-NeoX's parallel attention and feed-forward)."""
        return self.add(L.elementwise(name, (self.b, self.s, self.d), BSD, inputs=1 + len(ys)), x, *ys)

    def norm(self, name: str, x: str) -> str:
        return self.add(L.layer_norm(name, (self.b, self.s, self.d), BSD), x)

    def dropout(self, name: str, x: str) -> str:
        return self.add(L.dropout(name, (self.b, self.s, self.d), BSD), x)

    def embedding(self, name: str, vocab: int, tied: str = "") -> str:
        """A lookup in a ``vocab x d`` table; ``tied``: the name of the parameter it shares with the projection."""
        return self.add(L.embedding(name, self.b, self.s, self.d, vocab).with_tied({"weight": tied} if tied else {}))

    def loss(self, x: str, vocab: int, tied: str = "", bias: bool = False) -> Graph:
        """Vocabulary projection and softmax cross-entropy; validates and returns the graph.

        ``tied``: the parameter the projection's weight shares (the token
        embedding's, :meth:`embedding`); ``bias``: a bias over the vocabulary (BERT's).
        """
        sizes = dict(b=self.b, s=self.s, d=self.d, v=vocab)
        layer = L.einsum("projection", "bsd,vd->bsv", sizes, weights=(1,), bias=bias)
        logits = self.add(layer.with_tied({"w1": tied} if tied else {}), x)
        self.add(L.softmax_cross_entropy("softmax", (self.b, self.s, vocab), ("b", "s", "v")), logits)
        self.graph.validate()
        return self.graph


def transformer(batch: int = 64, seq: int = 256, d_model: int = 512, heads: int = 8, d_ff: int = 2048,
                vocab: int = 50000, encoder_layers: int = 6, decoder_layers: int = 6) -> Graph:
    """The Transformer (Vaswani et al. 2017), post-LN encoder-decoder; defaults are the base model.

    Source and target embeddings (``b s d v``); each encoder layer:
    self-attention, residual add, LayerNorm, feed-forward (ReLU fused),
    residual add, LayerNorm (13 vertices); each decoder layer: self-attention,
    add, LayerNorm, cross-attention with keys and values projected from the
    encoder output, add, LayerNorm, feed-forward, add, LayerNorm (22
    vertices); vocabulary projection ``bsd,vd->bsv`` without bias and softmax
    cross-entropy. Source and target sequences both have ``seq`` tokens.
    214 vertices with the defaults.

    Parameters, with ``D = d_model``, ``F = d_ff``, ``V = vocab`` and
    ``A = 4 (D^2 + D)`` per attention block: ``3 V D + N_enc (A + 2 D F + F +
    D + 4 D) + N_dec (2 A + 2 D F + F + D + 6 D)`` (untied embeddings and
    projection): 120,938,496 for the defaults.

    Examples
    --------
    >>> g = transformer()
    >>> len(g), g.parameter_count
    (214, 120938496)
    """
    check_positive("transformer", batch=batch, seq=seq, d_model=d_model, heads=heads, d_ff=d_ff, vocab=vocab,
                   encoder_layers=encoder_layers, decoder_layers=decoder_layers)
    net = _Stack("transformer", batch, seq, d_model, heads, d_ff)
    x = net.embedding("encoder.embedding", vocab)
    for i in range(encoder_layers):
        p = f"encoder.{i}"
        x = net.norm(f"{p}.norm1", net.residual(f"{p}.add1", x, net.attention(f"{p}.self_attn", x)))
        x = net.norm(f"{p}.norm2", net.residual(f"{p}.add2", x, net.feed_forward(p, x)))
    memory = x
    y = net.embedding("decoder.embedding", vocab)
    for i in range(decoder_layers):
        p = f"decoder.{i}"
        y = net.norm(f"{p}.norm1", net.residual(f"{p}.add1", y, net.attention(f"{p}.self_attn", y, causal=True)))
        y = net.norm(f"{p}.norm2", net.residual(f"{p}.add2", y, net.attention(f"{p}.cross_attn", y, memory)))
        y = net.norm(f"{p}.norm3", net.residual(f"{p}.add3", y, net.feed_forward(p, y)))
    return net.loss(y, vocab)


def transformer_large(batch: int = 64, seq: int = 256, d_model: int = 1024, heads: int = 16, d_ff: int = 4096,
                      vocab: int = 50000, encoder_layers: int = 6, decoder_layers: int = 6) -> Graph:
    """The Transformer's "big" model: :func:`transformer` with ``d_model`` 1024, 16 heads, ``d_ff`` 4096.

    Same structure and parameter formula as :func:`transformer`: 214
    vertices and 329,957,376 parameters with the defaults.

    Examples
    --------
    >>> transformer_large().parameter_count
    329957376
    """
    g = transformer(batch, seq, d_model, heads, d_ff, vocab, encoder_layers, decoder_layers)
    g.name = "transformer_large"
    return g


def gpt(batch: int = 32, seq: int = 1024, d_model: int = 1024, layers: int = 24, heads: int = 16,
        vocab: int = 50257, d_ff: int | None = None, *, name: str = "gpt", rotary: bool = False,
        parallel_residual: bool = False, attention_bias: bool = True, tied: bool = False) -> Graph:
    """A GPT-2-style decoder-only Transformer with pre-LN blocks; defaults are GPT-2 medium.

    Token embedding (``b s d v``) and learned position embedding (an
    ``Embedding`` over ``seq`` positions), their sum; each block: LayerNorm,
    causal self-attention, residual add, LayerNorm, feed-forward (``d_ff``,
    default ``4 d_model``, GELU fused), residual add (13 vertices); final
    LayerNorm, vocabulary projection ``bsd,vd->bsv`` without bias (untied
    from the embedding) and softmax cross-entropy. 318 vertices with the
    defaults.

    Parameters, with ``D = d_model``, ``F = d_ff``, ``S = seq``, ``V = vocab``:
    ``2 V D + S D + layers (4 D^2 + 2 D F + F + 9 D) + 2 D``; with
    ``F = 4 D`` the per-block term is GPT-2's ``12 D^2 + 13 D``. For the
    defaults 406,286,336 (GPT-2 medium's 354,823,168 plus the untied
    projection ``V D``).

    Examples
    --------
    >>> gpt(batch=8).parameter_count
    406286336

    The keyword options build GPT-NeoX (Black et al. 2022; Pythia) from a
    Hugging Face configuration (:mod:`pase.io.hf_config`). ``name``: the
    graph's name. ``rotary``: rotary position embeddings instead of the
    learned table (no ``wpe`` vertex, no ``S D`` parameters; the rotation,
    partial or not, has no parameters and negligible FLOPs). With
    ``parallel_residual`` each block is ``x + attn(ln1(x)) + ff(ln2(x))``,
    one three-input ``{p}.add`` (12 vertices). ``attention_bias`` False
    drops the four attention biases (``4 D`` per block); ``tied`` shares the
    embedding's table with the projection (``V D`` fewer).

    Raises
    ------
    GraphError
        A size is not a positive integer, ``d_model`` is not a multiple of
        ``heads``, or a flag is not a bool.
    """
    d_ff = 4 * d_model if d_ff is None else d_ff
    check_positive(name, batch=batch, seq=seq, d_model=d_model, layers=layers, heads=heads, vocab=vocab, d_ff=d_ff)
    flags = dict(rotary=rotary, parallel_residual=parallel_residual, attention_bias=attention_bias, tied=tied)
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise GraphError(f"{name}: {key} must be true or false, got {value!r}")
    table = "wte" if tied else ""
    net = _Stack(name, batch, seq, d_model, heads, d_ff)
    x = net.embedding("wte", vocab, tied=table)
    if not rotary:
        x = net.residual("embed", x, net.embedding("wpe", seq))
    for i in range(layers):
        p = f"h.{i}"
        if parallel_residual:
            attn = net.attention(f"{p}.attn", net.norm(f"{p}.ln1", x), bias=attention_bias, causal=True)
            x = net.residual(f"{p}.add", x, attn, net.feed_forward(p, net.norm(f"{p}.ln2", x)))
            continue
        x = net.residual(f"{p}.add1", x, net.attention(f"{p}.attn", net.norm(f"{p}.ln1", x), bias=attention_bias,
                                                       causal=True))
        x = net.residual(f"{p}.add2", x, net.feed_forward(p, net.norm(f"{p}.ln2", x)))
    return net.loss(net.norm("ln_f", x), vocab, tied=table)


def bert(name: str = "bert", layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
         vocab: int = 30522, *, batch: int = 256, seq: int = 512, positions: int = 512,
         token_types: int = 2, tied: bool = True) -> Graph:
    """BERT (Devlin et al. 2019) with its masked-LM head, as Hugging Face's ``BertForMaskedLM``; defaults BERT-base.

    Embeddings: word (``vocab`` rows, tied to the output projection),
    position (``positions`` rows, learned) and token type (``token_types``
    rows) lookups ``embeddings.word``, ``embeddings.position``,
    ``embeddings.token_type``, their three-input sum ``embeddings.sum``,
    ``embeddings.norm`` (LayerNorm) and ``embeddings.dropout``. Each of the
    ``layers`` post-LN blocks ``layers.{i}`` (16 vertices): self-attention
    ``attn`` (biases; Dropout ``attn.dropout`` on the probabilities),
    ``attn.out_dropout``, ``add1``, ``norm1``, feed-forward ``ff1`` (GeLU
    fused) and ``ff2``, ``ff_dropout``, ``add2``, ``norm2``: LayerNorm after
    each residual add. The masked-LM head: ``head.transform`` (``d x d``
    with bias, GeLU fused), ``head.norm``, ``projection`` (``bsd,vd->bsv``,
    the word table, with a bias over the vocabulary) and ``softmax``
    (cross-entropy over every position, as the head scores them all).
    ``16 layers + 10`` vertices. No pooler: the masked-LM model has none.

    Parameters, with ``l = layers``, ``d = hidden``, ``F = ffn``, ``V =
    vocab``, ``P = positions``, ``T = token_types``: ``(V + P + T) d + 2 d
    + l (4 d^2 + 2 d F + F + 9 d) + d^2 + 3 d + V``: tables and embedding
    LayerNorm; per block four projections with biases, FFN, two LayerNorms;
    the head's transform, LayerNorm and vocabulary bias. BERT-base:
    109,514,298. ``tied`` False gives the projection its own table (``V d`` more).

    Raises
    ------
    GraphError
        A size is not a positive integer, ``hidden`` is not a multiple of
        ``heads``, ``positions`` is shorter than ``seq``, or ``tied`` is not a bool.

    Examples
    --------
    >>> g = bert(layers=2, hidden=64, heads=4, ffn=128, vocab=100, batch=2, seq=16)
    >>> by_hand = (100 + 512 + 2) * 64 + 128 + 2 * (4 * 64**2 + 2 * 64 * 128 + 128 + 9 * 64) + 64**2 + 192 + 100
    >>> len(g), g.parameter_count == by_hand
    (42, True)
    """
    check_positive(name, layers=layers, hidden=hidden, heads=heads, ffn=ffn, vocab=vocab, batch=batch, seq=seq,
                   positions=positions, token_types=token_types)
    if not isinstance(tied, bool):
        raise GraphError(f"{name}: tied must be true or false, got {tied!r}")
    if positions < seq:
        raise GraphError(f"{name}: the position table has {positions} rows, fewer than the sequence's {seq} tokens; "
                         f"use a sequence of at most {positions}")
    net = _Stack(name, batch, seq, hidden, heads, ffn)
    b, s, d = net.b, net.s, net.d
    table = "embeddings.word" if tied else ""
    lookups = (net.embedding("embeddings.word", vocab, tied=table), net.embedding("embeddings.position", positions),
               net.embedding("embeddings.token_type", token_types))
    x = net.residual("embeddings.sum", *lookups)
    x = net.dropout("embeddings.dropout", net.norm("embeddings.norm", x))
    for i in range(layers):
        p = f"layers.{i}"
        y = net.dropout(f"{p}.attn.out_dropout", net.attention(f"{p}.attn", x, dropout=True))
        x = net.norm(f"{p}.norm1", net.residual(f"{p}.add1", x, y))
        y = net.dropout(f"{p}.ff_dropout", net.feed_forward(p, x))
        x = net.norm(f"{p}.norm2", net.residual(f"{p}.add2", x, y))
    transform = L.einsum("head.transform", "bsd,ed->bse", dict(b=b, s=s, d=d, e=d), weights=(1,), bias=True,
                         pointwise=1)
    y = net.norm("head.norm", net.add(transform, x))
    return net.loss(y, vocab, tied=table, bias=True)
