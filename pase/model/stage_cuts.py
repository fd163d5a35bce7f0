"""Where the pipeline is cut: a layer order into ``p v`` contiguous virtual stages.

Unless a plan gives its cuts, pase balances them (:func:`balanced_cuts`): the
slowest virtual stage's forward and backward is as short as any cut makes it.
Many cuts often achieve that (one heavy layer, the output layer, can set it):
the runs that each go as far as the limit allows leave the slack to the last
stages, a layer each, which the interleaved schedule pays for in its bubble,
so pase spreads it evenly. And a cut sends every tensor made before it and
read after it (:func:`crossing_elements`): inside attention the queries, keys,
values and residual all cross, between blocks only the residual. So in a model
of transformer blocks pase also balances the cuts made only where no more
crosses than between blocks, and keeps whichever of the two has the faster
slowest stage with what its cut sends beyond that counted in
(:func:`default_cuts`). A framework cuts only between whole blocks (the same
balance over blocks, :func:`pase.frameworks.base.balanced_block_cuts`), and
Megatron-Core's MoE layer is one module, never cut inside
(:func:`allowed_cuts`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster
from pase.model.experts import moe_blocks
from pase.model.roofline import block_of

if TYPE_CHECKING:
    from pase.model.layer_times import LayerTimes

__all__ = ["balanced_cuts", "crossing_elements", "crossings", "allowed_cuts", "default_cuts", "BlockLayout",
           "block_index", "block_layout"]


def balanced_cuts(times: Sequence[float], pieces: int) -> tuple[int, ...]:
    """Cut ``times`` (per layer, in order) into ``pieces`` non-empty runs minimising the largest run's sum.

    Returns the start index of runs 1 .. pieces - 1. Optimal to a relative
    1e-12. A limit (at least the largest time) is feasible exactly when runs
    that each go as far as the limit allows reach the end in ``pieces`` runs
    or fewer. The search keeps the interval [lo, hi] holding the optimum,
    between the lower bound max(largest time, mean run) and the upper bound
    mean run + largest time, and tries its middle: if feasible, hi becomes
    the largest run found (a sum the optimum cannot exceed); if not, lo
    becomes the least sum by which any run could grow (below it the runs,
    and the failure, stay the same).

    The cuts, of all within hi: from the last, each the nearest where an
    even split of the time before it into the runs left would put it
    (:func:`_even`), not those of the furthest-end runs, which leave the
    slack to the last runs.

    Raises ``ConfigurationError`` when there are fewer layers than pieces.
    """
    n = len(times)
    if pieces > n:
        raise ConfigurationError(f"{pieces} pipeline stages need at least {pieces} layers; the graph has {n}")
    times = np.asarray(times, dtype=float)
    prefix = np.concatenate(([0.0], np.cumsum(times)))
    total, largest = float(prefix[n]), float(times.max(initial=0.0))
    after = np.arange(1, n + 2)

    def furthest(slack: float) -> np.ndarray:
        # Per start, the end of the furthest run from it within slack, at least one layer on (bisect_right
        # from start + 1, for every start at once); the end n is its own.
        return np.maximum(np.searchsorted(prefix, prefix + slack, side="right"), after) - 1

    def starts(end: np.ndarray) -> np.ndarray:
        # The starts of runs 0 .. pieces (at least), by doubling: the ends 2^j runs on from each start, applied
        # to every start found so far.
        chain, jump = np.zeros(1, dtype=np.int64), end
        while len(chain) <= pieces:
            chain = np.concatenate((chain, jump[chain]))
            jump = jump[jump]
        return chain

    def runs(limit: float) -> tuple[bool, float, float]:
        # Furthest-end runs within limit: whether they reach the end in `pieces`, their largest sum,
        # and the least sum one of them would have with the next layer added.
        chain = starts(furthest(limit * (1 + 1e-12)))
        done = np.flatnonzero(chain[:pieces + 1] == n)
        k = min(pieces, int(done[0])) if done.size else pieces  # runs until the end is reached, at most pieces
        first, start = chain[:k], int(chain[k])
        last = chain[1:k + 1]  # each run ends where the next starts
        biggest = float((prefix[last] - prefix[first]).max())
        short = last < n
        grow = float((prefix[last[short] + 1] - prefix[first[short]]).min()) if short.any() else np.inf
        return start == n, biggest, grow

    lo, hi = max(largest, total / pieces), min(total, total / pieces + largest)
    while hi - lo > 1e-12 * max(hi, 1e-30):
        mid = lo if lo > (lo + hi) / 2 * (1 - 1e-3) else (lo + hi) / 2
        ok, biggest, grow = runs(mid)
        if ok:
            hi = min(hi, biggest)
        else:
            lo = max(mid, min(grow, hi))
    if pieces == 1:
        return ()
    chain = np.minimum(starts(furthest(hi * (1 + 1e-12)))[:pieces], np.arange(n - pieces, n))
    return _even(prefix.tolist(), chain.tolist(), hi * (1 + 1e-12))


def _even(prefix: list[float], furthest: list[int], limit: float) -> tuple[int, ...]:
    """The cuts within ``limit`` that spread the slack: from the last, cut ``k`` nearest ``k / (k + 1)`` of
    the time before cut ``k + 1`` (an even split of it into the runs left), among the starts from which the
    run to cut ``k + 1`` stays within the limit and that ``k`` runs reach from 0 (between ``k`` and
    ``furthest[k]``, the furthest-end runs' ``k``-th start held back a layer for each later run: runs can
    always be shortened)."""
    # Plain Python over lists: a pipeline of 641 stages runs this 640 times a cut, hundreds of cuts a search.
    find = bisect.bisect_left
    pieces, end = len(furthest), len(prefix) - 1
    cuts = [0] * pieces
    for k in range(pieces - 1, 0, -1):
        at = prefix[end]
        hi = end - 1 if furthest[k] >= end else furthest[k]
        lo = find(prefix, at - limit, 0, hi)
        if lo < k:
            lo = k
        target = at * k / (k + 1)
        j = find(prefix, target, lo, hi)
        if j > lo and target - prefix[j - 1] < prefix[j] - target:
            j -= 1
        cuts[k] = end = j
    return tuple(cuts[1:])


def crossing_elements(layers: int, edges: np.ndarray, tensor_elements: np.ndarray) -> np.ndarray:
    """Per position ``j`` (0 .. ``layers``), the elements of the tensors a cut before layer ``j`` sends: those
    made before it and read at or after it (``edges``: producer, consumer and tensor index rows, in the layer
    order; ``tensor_elements`` per tensor)."""
    last = np.full(len(tensor_elements), -1, dtype=np.int64)
    np.maximum.at(last, edges[:, 2], edges[:, 1])
    made = np.zeros(len(tensor_elements), dtype=np.int64)
    made[edges[:, 2]] = edges[:, 0]
    change = np.zeros(layers + 2)
    read = last >= 0
    np.add.at(change, made[read] + 1, tensor_elements[read])
    np.add.at(change, last[read] + 1, -tensor_elements[read])
    return np.cumsum(change)[:layers + 1]


def allowed_cuts(allowed: np.ndarray, weight: np.ndarray, pieces: int) -> tuple[int, ...]:
    """:func:`balanced_cuts` of ``weight`` at the positions ``allowed`` only (increasing, inside ``1 .. n -
    1``): each run between two allowed positions an atom. Raises ``ConfigurationError`` when fewer than
    ``pieces - 1`` positions are allowed."""
    if len(allowed) < pieces - 1:
        raise ConfigurationError(f"{pieces} pipeline stages need {pieces - 1} cuts; {len(allowed)} places allow one")
    atoms = balanced_cuts(np.add.reduceat(weight, np.concatenate(([0], allowed))), pieces)
    return tuple(allowed[np.array(atoms, dtype=int) - 1].tolist())


@dataclass(frozen=True)
class BlockLayout:
    """Where a graph's transformer blocks begin in its layer order.

    ``starts`` are the positions of the first layers of blocks 1 .. L-1 (the
    cuts a framework can run), ``blocks`` is L, ``layers`` the graph's layer
    count; the layers before block 0 (the embedding) go with it, those after
    the last block (final norm, output layer, loss) with that one.
    """

    starts: tuple[int, ...]
    blocks: int
    layers: int

    def units(self, weights: Sequence[float]) -> np.ndarray:
        """Per block, the sum of ``weights`` over its layers (the embedding's in block 0, the head's in the last)."""
        weights = np.asarray(weights, dtype=float)
        return np.add.reduceat(weights, [0, *self.starts]) if len(weights) else weights

    def cuts_of(self, counts: Sequence[int]) -> tuple[int, ...]:
        """The layer positions of the cuts between virtual stages holding ``counts`` blocks each.

        Raises ``ConfigurationError`` when the counts do not add up to the
        blocks or leave a stage empty.
        """
        if sum(counts) != self.blocks or any(c < 1 for c in counts):
            raise ConfigurationError(f"stages of {list(counts)} transformer blocks do not cover the model's "
                                     f"{self.blocks} blocks with at least one per stage")
        ends = np.cumsum(counts)[:-1]
        return tuple(self.starts[e - 1] for e in ends)

    def counts_of(self, cuts: Sequence[int]) -> tuple[int, ...]:
        """Blocks per virtual stage of ``cuts`` (each one of :attr:`starts`)."""
        where = {s: k + 1 for k, s in enumerate(self.starts)}
        bounds = [0] + [where[c] for c in cuts] + [self.blocks]
        return tuple(int(b - a) for a, b in zip(bounds, bounds[1:]))


def block_index(name: str) -> int | None:
    """The block number of a layer name (``h.12.ln2`` -> 12), None for a layer outside the blocks
    (:func:`pase.model.roofline.block_of`)."""
    found = block_of(name)
    return None if found is None else found[1]


def block_layout(names: Sequence[str]) -> BlockLayout:
    """The :class:`BlockLayout` of a layer order (the graph's layer names, in order).

    Raises
    ------
    ConfigurationError
        The graph has no transformer blocks, or a block's layers are not one
        contiguous run in the order (a framework stacks whole blocks).
    """
    index = [block_index(n) for n in names]
    seen: list[int] = []
    starts = []
    for i, k in enumerate(index):
        if k is None:
            if seen and any(j is not None for j in index[i:]):
                raise ConfigurationError(f"layer {names[i]!r} sits between transformer blocks; frameworks stack "
                                         "whole blocks with only the embedding before and the head after them")
            continue
        if not seen or k != seen[-1]:
            if k in seen:
                raise ConfigurationError(f"the layers of block {k} are not contiguous in the layer order (at "
                                         f"{names[i]!r}); frameworks run each block whole")
            if seen:
                starts.append(i)
            seen.append(k)
    if not seen:
        raise ConfigurationError("the model has no transformer blocks (layers named like 'h.3.attn.q'), which the "
                                 "frameworks' pipelines cut between; plan it without --framework")
    return BlockLayout(starts=tuple(starts), blocks=len(seen), layers=len(names))


def crossings(lt: "LayerTimes") -> np.ndarray:
    """Per position of ``lt``'s layer order, the elements a cut there sends (:func:`crossing_elements`;
    memoised on ``lt``)."""
    if "crossing" not in lt.memo:
        lt.memo["crossing"] = crossing_elements(len(lt.layers), lt.edges, lt.tensor_elements)
    return lt.memo["crossing"]


def default_cuts(lt: "LayerTimes", cluster: Cluster, weight: np.ndarray, pieces: int, pipe_axis: int,
                 group: int) -> tuple[int, ...]:
    """The cuts of ``pieces`` virtual stages a plan without its own gets: the balanced cuts
    (:func:`balanced_cuts`) of ``weight`` (seconds per layer of ``lt``), never inside an expert block; of those
    made anywhere allowed and, in a model of transformer blocks, those made only where no more crosses than
    between two blocks (the residual stream: there and after a residual add), the ones whose slowest stage is
    faster, a stage's time counting what its cut's sends forward and back across mesh axis ``pipe_axis`` of
    ``cluster`` (``1/group`` of each tensor a device) take beyond a cut between blocks."""
    n = len(weight)

    def inside() -> np.ndarray:
        index = {l.name: i for i, l in enumerate(lt.graph.layers)}
        out = np.zeros(len(index) + 1, dtype=bool)
        for block in moe_blocks(lt.graph):
            out[index[block.router] + 1:index[block.combine] + 1] = True
        return out

    def layout() -> BlockLayout | None:
        try:
            return block_layout([l.name for l in lt.graph.layers])
        except ConfigurationError:  # no transformer blocks, or not stacked whole
            return None
    allowed = np.arange(1, n) if lt.experts is None else (
        np.flatnonzero(~lt.graph.derived("expert-block positions", inside)[1:n]) + 1)
    if len(allowed) < pieces - 1:
        return balanced_cuts(weight, pieces)
    crossing = crossings(lt)
    found = lt.graph.derived("block layout", layout)
    between = crossing[list(found.starts)] if found is not None else np.zeros(0)
    if not between.size:
        return allowed_cuts(allowed, weight, pieces)
    floor = np.median(between)
    cheap = allowed[crossing[allowed] <= floor]
    if len(cheap) < pieces - 1:
        return allowed_cuts(allowed, weight, pieces)
    # What a cut's sends, forward and back, take beyond a cut between blocks: its excess bytes' time.
    excess = np.maximum(crossing - floor, 0.0) * cluster.bytes_per_element / group
    extra = 2 * (cluster.mesh.send_recv_s(excess, pipe_axis) - cluster.mesh.send_recv_s(0.0, pipe_axis))
    prefix = np.concatenate(([0.0], np.cumsum(weight)))

    def slowest(cuts: tuple[int, ...]) -> float:
        ends = np.array([*cuts, n])
        return float((prefix[ends] - prefix[np.array([0, *cuts])] + extra[ends] * (ends < n)).max())
    return min(allowed_cuts(cheap, weight, pieces), allowed_cuts(allowed, weight, pieces),
               key=slowest)
