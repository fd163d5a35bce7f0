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
ties them (``TensorSpec.tied``).
"""

from __future__ import annotations

from pase import ops as L
from pase.errors import GraphError
from pase.ir.graph import Graph, Layer
from pase.models._common import check_positive

__all__ = ["rnnlm", "transformer", "transformer_large", "gpt"]

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

    def attention(self, name: str, x: str, memory: str | None = None) -> str:
        """Multi-head attention of queries from ``x`` over keys and values from ``memory`` (default ``x``)."""
        memory = x if memory is None else memory
        b, s, d, h, c = self.b, self.s, self.d, self.h, self.c
        proj = dict(b=b, s=s, d=d, h=h, c=c)
        q, k, v = (self.add(L.einsum(f"{name}.{t}", "bsd,hcd->bshc", proj, weights=(1,), bias=True), src)
                   for t, src in (("q", x), ("k", memory), ("v", memory)))
        scores = self.add(L.einsum(f"{name}.scores", "bshc,bkhc->bhsk", dict(b=b, s=s, h=h, c=c, k=s)), q, k)
        probs = self.add(L.softmax(f"{name}.softmax", (b, h, s, s), ("b", "h", "s", "k"), axis="k"), scores)
        context = self.add(L.einsum(f"{name}.context", "bhsk,bkhc->bshc", dict(b=b, h=h, s=s, k=s, c=c)), probs, v)
        return self.add(L.einsum(f"{name}.out", "bshc,hcd->bsd", proj, weights=(1,), bias=True), context)

    def feed_forward(self, name: str, x: str) -> str:
        """Two-layer feed-forward block ``b s d e`` with the activation fused into the first."""
        sizes = dict(b=self.b, s=self.s, d=self.d, e=self.ff)
        y = self.add(L.einsum(f"{name}.ff1", "bsd,ed->bse", sizes, weights=(1,), bias=True, pointwise=1), x)
        return self.add(L.einsum(f"{name}.ff2", "bse,de->bsd", sizes, weights=(1,), bias=True), y)

    def residual(self, name: str, x: str, y: str) -> str:
        return self.add(L.elementwise(name, (self.b, self.s, self.d), BSD), x, y)

    def norm(self, name: str, x: str) -> str:
        return self.add(L.layer_norm(name, (self.b, self.s, self.d), BSD), x)

    def embedding(self, name: str, vocab: int) -> str:
        return self.add(L.embedding(name, self.b, self.s, self.d, vocab))

    def loss(self, x: str, vocab: int) -> Graph:
        """Vocabulary projection (no bias) and softmax cross-entropy; validates and returns the graph."""
        sizes = dict(b=self.b, s=self.s, d=self.d, v=vocab)
        logits = self.add(L.einsum("projection", "bsd,vd->bsv", sizes, weights=(1,)), x)
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
        y = net.norm(f"{p}.norm1", net.residual(f"{p}.add1", y, net.attention(f"{p}.self_attn", y)))
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
        vocab: int = 50257, d_ff: int | None = None) -> Graph:
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
    """
    d_ff = 4 * d_model if d_ff is None else d_ff
    check_positive("gpt", batch=batch, seq=seq, d_model=d_model, layers=layers, heads=heads, vocab=vocab, d_ff=d_ff)
    net = _Stack("gpt", batch, seq, d_model, heads, d_ff)
    tokens = net.embedding("wte", vocab)
    positions = net.embedding("wpe", seq)
    x = net.residual("embed", tokens, positions)
    for i in range(layers):
        p = f"h.{i}"
        x = net.residual(f"{p}.add1", x, net.attention(f"{p}.attn", net.norm(f"{p}.ln1", x)))
        x = net.residual(f"{p}.add2", x, net.feed_forward(p, net.norm(f"{p}.ln2", x)))
    return net.loss(net.norm("ln_f", x), vocab)
