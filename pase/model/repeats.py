"""Repeated blocks costed once: a graph's run of identical blocks shortened to three.

A language model is an embedding, ``k`` identical transformer layers and a
head. Everything the 3-D model derives per layer (its times, weights, kept
activations, buffers) depends only on the layer, its split and its
neighbours', so the layers of block ``j`` for ``1 <= j <= k - 2`` all get the
values of block 1: fed by an identical block, feeding an identical block.
:func:`periodic_core` finds such a run and builds the *core*: the graph with
the run shortened to blocks ``0``, ``1`` and ``k - 1`` (block 1 feeding
block ``k - 1`` as block ``k - 2`` did), and, for every layer of the whole
graph, the layer of the core that stands for it. Costing the core instead of
the whole is then exact and ``k / 3`` times cheaper.

The candidate blocks are the runs of consecutive layers that share a block
name (:func:`pase.model.training.blocks`: what full recomputation
checkpoints), but nothing rests on names: a run is used only if its blocks
are equal layer for layer in :meth:`~pase.ir.graph.Graph.kind` and in every
edge (offsets, output and input slots), if every edge entering block ``j > 0``
comes from block ``j - 1``, and every edge leaving block ``j < k - 1`` goes to
block ``j + 1``: no input shared by several blocks, no block read from
outside its neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from pase.ir.graph import Graph

__all__ = ["PeriodicCore", "periodic_core"]

MIN_BLOCKS = 4  # below this the core is the graph itself


@dataclass(frozen=True)
class PeriodicCore:
    """A graph's core (:func:`periodic_core`).

    Attributes
    ----------
    graph : Graph
        The core: the blocks before and after the run, and blocks 0, 1 and ``k - 1`` of the run.
    representative : np.ndarray
        Per layer of the whole graph (its topological order), the index in the core's order of the layer
        standing for it.
    blocks : int
        ``k``, the blocks of the run.
    """

    graph: Graph
    representative: np.ndarray
    blocks: int


def _segments(names: list[str], block_of: Mapping[str, str]) -> list[tuple[str | None, int, int]]:
    """Maximal runs of consecutive layers with the same block name: (name or None, start, end)."""
    out: list[tuple[str | None, int, int]] = []
    for i, name in enumerate(names):
        b = block_of.get(name)
        if out and out[-1][0] == b and b is not None:
            out[-1] = (b, out[-1][1], i + 1)
        else:
            out.append((b, i, i + 1))
    return out


def periodic_core(graph: Graph, block_of: Mapping[str, str]) -> PeriodicCore | None:
    """The core of ``graph``'s longest run of identical blocks (see the module docstring), or None when no run
    of at least :data:`MIN_BLOCKS` blocks passes the checks.

    ``block_of`` maps layer names to candidate block names (layers in none are left out).
    """
    layers = graph.layers
    names = [l.name for l in layers]
    at = {n: i for i, n in enumerate(names)}
    kinds = [graph.kind(n) for n in names]
    segments = [s for s in _segments(names, block_of) if s[0] is not None]

    def shape(seg: tuple[str | None, int, int]) -> tuple:
        # Kinds in order and every edge entering the block, relative to its start.
        _, lo, hi = seg
        entering = sorted((at[e.src] - lo, e.src_output, at[e.dst] - lo, e.dst_input)
                          for i in range(lo, hi) for e in graph.in_edges(names[i]))
        return hi - lo, tuple(kinds[lo:hi]), tuple(entering)

    # The longest run of adjacent segments of one shape (a first block fed from before the run differs in its
    # entering edges, and stays outside).
    shapes = [shape(s) for s in segments]
    best: tuple[int, int] | None = None
    i = 0
    while i < len(segments):
        j = i
        while j + 1 < len(segments) and shapes[j + 1] == shapes[i] and segments[j + 1][1] == segments[j][2]:
            j += 1
        if j - i + 1 >= MIN_BLOCKS and (best is None or j - i + 1 > best[1]):
            best = (i, j - i + 1)
        i = j + 1
    if best is None:
        return None
    first, k = best
    size, start = shapes[first][0], segments[first][1]
    end = start + k * size

    def block(i: int) -> int | None:
        return (i - start) // size if start <= i < end else None

    for e in graph.edges:
        src, dst = block(at[e.src]), block(at[e.dst])
        if dst is not None and dst > 0 and (src is None or dst - src > 1):
            return None  # an input shared from outside the run, or one skipping a block
        if src is not None and src < k - 1 and (dst is None or dst - src > 1):
            return None  # a block read from outside its neighbours

    # The core: blocks 0, 1 and k - 1, with block k - 1 fed by block 1 as it was by block k - 2.
    dropped = range(start + 2 * size, start + size * (k - 1))
    core = Graph(graph.name)
    for i, layer in enumerate(layers):
        if i in dropped:
            continue
        feeds: list = [None] * len(layer.inputs)
        for e in graph.in_edges(layer.name):
            src = at[e.src]
            if src in dropped:
                src -= size * (k - 3)
            feeds[e.dst_input] = (names[src], e.src_output)
        core.add_layer(layer, feeds)
    order = {l.name: i for i, l in enumerate(core.layers)}
    representative = np.empty(len(layers), dtype=np.int64)
    for i, name in enumerate(names):
        if i in dropped:
            name = names[start + size + (i - start) % size]
        representative[i] = order[name]
    return PeriodicCore(core, representative, k)
