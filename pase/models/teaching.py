"""Small graphs that explain the ideas (the app's Learn page): one GEMM, and a branchy 8-layer graph.

They are not benchmark samples (:data:`pase.models.SAMPLES`): each is small
enough to draw and to search by hand.
"""

from __future__ import annotations

from pase import ops as L
from pase.ir.graph import Graph, Layer
from pase.models._common import check_positive

__all__ = ["GEMM_DIMS", "gemm_layer", "gemm_graph", "small_graph"]

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
