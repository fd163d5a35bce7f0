"""Small graphs that explain the ideas (the app's Learn page): one GEMM, a branchy 8-layer graph, and a tiny
language model for the walk-through of data, tensor, sequence and pipeline parallelism and ZeRO.

They are not benchmark samples (:data:`pase.models.SAMPLES`): each is small
enough to draw and to search by hand.
"""

from __future__ import annotations

from pase import ops as L
from pase.ir.graph import Graph, Layer
from pase.models._common import check_positive

__all__ = ["GEMM_DIMS", "gemm_layer", "gemm_graph", "small_graph", "tiny_lm", "tiny_lm_parameters"]

# The paper's Fig. 1 letters: C[i, j] = sum_k A[i, k] B[k, j]; B is the weight.
GEMM_DIMS = ("i", "j", "k")


def gemm_layer(i: int, j: int, k: int, name: str = "gemm") -> Layer:
    """``C[i, j] = sum_k A[i, k] B[k, j]`` as pase's Einsum with B a weight; dimensions ``i k j``.

    Raises
    ------
    GraphError
        A size is not a positive integer.

    Examples
    --------
    >>> gemm_layer(64, 32, 16).size_of == {"i": 64, "j": 32, "k": 16}
    True
    """
    check_positive("gemm", i=i, j=j, k=k)
    return L.einsum(name, "ik,kj->ij", {"i": i, "j": j, "k": k}, weights=(1,))


def gemm_graph(i: int, j: int, k: int) -> Graph:
    """A graph of one layer, :func:`gemm_layer` named ``gemm``; errors as :func:`gemm_layer`."""
    g = Graph("gemm")
    g.add_layer(gemm_layer(i, j, k))
    return g


def small_graph(batch: int = 64, width: int = 64) -> Graph:
    """A branchy 8-layer graph in the spirit of the paper's Fig. 2.

    One input layer feeds three fully connected branches (one of them two
    layers deep) that meet in a concatenation, then a classifier to 16
    classes and the loss. Every layer has ``batch`` rows; the branches are
    ``width`` features wide.

    Raises
    ------
    GraphError
        ``batch`` or ``width`` is not a positive integer.

    Examples
    --------
    >>> [layer.name for layer in small_graph()]
    ['in', 'a', 'b', 'c', 'a2', 'cat', 'fc', 'loss']
    """
    check_positive("small_graph", batch=batch, width=width)
    g = Graph("small")
    g.add_layer(L.fully_connected("in", b=batch, n=width, c=width))
    for name in ("a", "b", "c"):
        g.add_layer(L.fully_connected(name, b=batch, n=width, c=width), ["in"])
    g.add_layer(L.fully_connected("a2", b=batch, n=width, c=width), ["a"])
    g.add_layer(L.concat("cat", [(batch, width)] * 3, ("b", "n"), "n"), ["a2", "b", "c"])
    g.add_layer(L.fully_connected("fc", b=batch, n=16, c=3 * width), ["cat"])
    g.add_layer(L.softmax_cross_entropy("loss", (batch, 16), ("b", "n")), ["fc"])
    g.validate()
    return g


def tiny_lm(batch: int = 1, seq: int = 256, hidden: int = 512, ffn: int = 2048, vocab: int = 4096,
            blocks: int = 2) -> Graph:
    """A tiny language model: token embedding, ``blocks`` pre-LN feed-forward blocks, output head and loss.

    Megatron's GPT (:func:`pase.models.megatron.megatron_gpt`) without attention and without biases, so
    that every shard can be counted by hand. Vertices: ``embed`` (``b s d v``, a ``vocab x hidden``
    table), ``embed.dropout``; per block ``h.{i}``: ``ln`` (LayerNorm, ``2 hidden`` parameters), ``ff1`` (``bsd,ed->bse``),
    ``gelu``, ``ff2`` (``bse,de->bsd``), ``add`` (the residual); then ``ln_f``, ``head``
    (``bsd,vd->bsv``, its own ``vocab x hidden`` table) and ``loss`` (softmax cross-entropy over ``v``).
    Megatron's tensor parallelism splits ``v`` and ``e``: every weight but the LayerNorms'.
    Parameters: :func:`tiny_lm_parameters`.

    Raises
    ------
    GraphError
        A size is not a positive integer.

    Examples
    --------
    >>> g = tiny_lm()
    >>> len(g), g.parameter_count == sum(tiny_lm_parameters().values())
    (15, True)
    """
    check_positive("tiny_lm", batch=batch, seq=seq, hidden=hidden, ffn=ffn, vocab=vocab, blocks=blocks)
    bsd = ("b", "s", "d")
    g = Graph("tiny-lm")
    g.add_layer(L.embedding("embed", batch, seq, hidden, vocab))
    # Megatron's dropout after the embedding: one reader of the embedding's pending sums under tensor
    # parallelism, which the cost model finishes once per reader.
    g.add_layer(L.dropout("embed.dropout", (batch, seq, hidden), bsd), ["embed"])
    x = "embed.dropout"
    for i in range(blocks):
        p = f"h.{i}"
        ff = dict(b=batch, s=seq, d=hidden, e=ffn)
        g.add_layer(L.layer_norm(f"{p}.ln", (batch, seq, hidden), bsd), [x])
        g.add_layer(L.einsum(f"{p}.ff1", "bsd,ed->bse", ff, weights=(1,)), [f"{p}.ln"])
        g.add_layer(L.gelu(f"{p}.gelu", (batch, seq, ffn), ("b", "s", "e")), [f"{p}.ff1"])
        g.add_layer(L.einsum(f"{p}.ff2", "bse,de->bsd", ff, weights=(1,)), [f"{p}.gelu"])
        g.add_layer(L.elementwise(f"{p}.add", (batch, seq, hidden), bsd), [x, f"{p}.ff2"])
        x = f"{p}.add"
    g.add_layer(L.layer_norm("ln_f", (batch, seq, hidden), bsd), [x])
    g.add_layer(L.einsum("head", "bsd,vd->bsv", dict(b=batch, s=seq, d=hidden, v=vocab), weights=(1,)), ["ln_f"])
    g.add_layer(L.softmax_cross_entropy("loss", (batch, seq, vocab), ("b", "s", "v")), ["head"])
    g.validate()
    return g


def tiny_lm_parameters(hidden: int = 512, ffn: int = 2048, vocab: int = 4096, blocks: int = 2) -> dict[str, int]:
    """Parameters of :func:`tiny_lm` by hand: ``{"split": ..., "replicated": ...}`` under Megatron's rule.

    ``split``: the two vocabulary tables and the feed-forward products (``2 v h + 2 blocks h F``), which
    tensor parallelism divides; ``replicated``: the LayerNorms' scale and shift (``2 h (blocks + 1)``).

    >>> tiny_lm_parameters(hidden=4, ffn=8, vocab=10, blocks=1)
    {'split': 144, 'replicated': 16}
    """
    return {"split": 2 * vocab * hidden + 2 * blocks * hidden * ffn, "replicated": 2 * hidden * (blocks + 1)}
