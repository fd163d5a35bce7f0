"""Layouts on the device mesh: where each configuration puts its blocks, and what edges move.

Placement
---------
A configuration's split factors are laid on the mesh explicitly. The mesh is
a sequence of prime-radix digits (:attr:`DeviceMesh.digits`, outermost first);
:func:`place` gives every dimension a set of digits whose radices multiply to
its split factor, filling from the innermost digit with the layer's last
dimension first, so model dimensions (listed after the batch by every builder)
sit on the fast inner axes and the batch across nodes, as Megatron-LM places
them. A dimension's block index is the mixed-radix number of a device's
coordinates on its digits, outer digits more significant. Digits no dimension
takes *replicate* the layer: those devices compute the same block. A
configuration can be placed exactly when its device count divides the mesh's
(:func:`placeable`).

Layouts
-------
A tensor's layout follows (:func:`tensor_layout`): along each mesh digit it is
``Shard(axis)`` (the digit belongs to the dimension the tensor axis follows),
``Partial`` (the digit belongs to a dimension the tensor lacks and the op sums
over it: a split reduction dimension, or an input gradient under the
contraction rule) or ``Replicate``. As in DTensor, ``S(0)``, ``P`` and ``R``.

Redistribution
--------------
:func:`redistribute_s` prices moving a tensor from a source layout to the
layout a destination needs, for every pair of configurations:

1. pending sums are finished first: a reduce-scatter over the partial digits
   (the destination's shards where it shards them, so ``Partial -> Shard`` is
   one reduce-scatter) and an all-gather over those it wants replicated
   (together an all-reduce);
2. then, digit by digit, what the source holds is sliced, exchanged or
   gathered into what the destination needs, so ``Replicate -> Shard`` costs
   nothing, ``Shard -> Replicate`` is an all-gather and a shard moved from one
   dimension to another an all-to-all, each priced hierarchically per mesh
   axis (so an all-gather across nodes moves only a node's share over the
   network).

The forward tensor goes from the producer's output layout to the consumer's
input layout; its gradient from the consumer's input-gradient layout (partial
over the dimensions the input lacks, for a contraction) to the producer's
output layout with its pending sums read as replicated (each partial block
needs the whole gradient).

A producer read by several consumers is redistributed once per consumer, even
when they want the same layout: sharing one transfer couples three layers'
choices, which the pairwise search cannot express, so such edges are
over-counted.

The paper's edge rule (:func:`paper_held`) is kept for ``cost_model="paper"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pase.hardware.mesh import DeviceMesh
from pase.ir.graph import Layer, TensorSpec
from pase.ops import OPS, tensor_splits

__all__ = ["Placement", "place", "placeable", "paper_placement", "axis_factors", "TensorLayout", "tensor_layout",
           "redistribute_s", "paper_held", "describe"]

MAX_DIGITS = 24


@dataclass(frozen=True, eq=False)
class Placement:
    """Where each configuration of a layer puts its split factors on the mesh.

    Attributes
    ----------
    mesh : DeviceMesh
    masks : ndarray or None
        ``(K, ndims)`` int64: per configuration and dimension, the bit mask of
        mesh digits the dimension takes (digit ``i`` of ``mesh.digits`` is bit
        ``n - 1 - i``, so outer digits are higher bits). ``None`` for the
        paper's placement, which is not digit-exact.
    factors : ndarray
        ``(K, ndims, J)`` float: the split factor of each dimension along each
        mesh axis.
    """

    mesh: DeviceMesh
    masks: np.ndarray | None
    factors: np.ndarray


def _digit_tables(mesh: DeviceMesh):
    digits = mesh.digits
    n = len(digits)
    if n > MAX_DIGITS:
        raise ValueError(f"a mesh of {mesh.devices} devices has {n} prime digits; at most {MAX_DIGITS} are supported")
    bits = np.array([1 << (n - 1 - i) for i in range(n)], dtype=np.int64)
    return digits, bits


def placeable(configs: np.ndarray, devices: int) -> np.ndarray:
    """Which configurations (rows) the mesh holds exactly: their device count divides ``devices``."""
    used = np.prod(np.asarray(configs, dtype=np.int64), axis=1)
    return devices % used == 0


def place(configs: np.ndarray, mesh: DeviceMesh) -> Placement:
    """Digit-exact placement of every configuration (module docstring).

    Raises
    ------
    ValueError
        A configuration's device count does not divide the mesh's (check with
        :func:`placeable` first).
    """
    cfg = np.asarray(configs, dtype=np.int64)
    K, m = cfg.shape
    digits, bits = _digit_tables(mesh)
    if not placeable(cfg, mesh.devices).all():
        bad = cfg[~placeable(cfg, mesh.devices)][0].tolist()
        raise ValueError(f"configuration {bad} uses {int(np.prod(bad))} devices, which do not tile a mesh of {mesh.devices}")
    masks = np.zeros((K, m), dtype=np.int64)
    factors = np.ones((K, m, len(mesh.axes)))
    taken = np.zeros((K, len(digits)), dtype=bool)
    for d in reversed(range(m)):
        left = cfg[:, d].copy()
        for i in reversed(range(len(digits))):
            axis, radix = digits[i]
            take = (left % radix == 0) & (left > 1) & ~taken[:, i]
            masks[take, d] |= bits[i]
            factors[take, d, axis] *= radix
            left[take] //= radix
            taken[:, i] |= take
    return Placement(mesh, masks, factors)


def paper_placement(configs: np.ndarray, mesh: DeviceMesh) -> Placement:
    """Row-major placement, the last dimension innermost, filling each axis before the next (the paper's model).

    A factor that does not fit what is left of an axis spans
    ``ceil(f / room)`` groups of the next axis out, ``f / ceil(f / room)``
    devices of each; exact when factors and axis sizes are powers of two.
    """
    cfg = np.asarray(configs, dtype=np.int64)
    K, m = cfg.shape
    J = len(mesh.axes)
    factors = np.ones((K, m, J))
    left = cfg.astype(float).copy()
    for j in reversed(range(J)):
        if j == 0:
            factors[:, :, 0] = left
            break
        inner = np.ones(K)
        for d in reversed(range(m)):
            room = np.floor(mesh.axes[j].size / inner)
            f = left[:, d].copy()
            fits = f <= room
            spans = np.where(fits, 1.0, np.ceil(f / np.maximum(room, 1.0)))
            factors[:, d, j] = f / spans
            left[:, d] = spans
            inner = np.where(fits, inner * f, mesh.axes[j].size)
    return Placement(mesh, None, factors)


def axis_factors(layer: Layer, placement: Placement, dims) -> np.ndarray:
    """``(K, J)`` extents along each mesh axis of the group of devices that differ only in ``dims``."""
    idx = [layer.dims.index(d) for d in dims]
    if not idx:
        return np.ones((placement.factors.shape[0], placement.factors.shape[2]))
    return np.prod(placement.factors[:, idx, :], axis=1)


@dataclass(frozen=True, eq=False)
class TensorLayout:
    """A tensor's layout for every configuration of its layer, as digit masks.

    ``shard[k, a]``: the digits sharding tensor axis ``a``; ``partial[k]``: the
    digits over which it is a pending sum; the rest replicate.
    """

    shape: tuple[int, ...]
    shard: np.ndarray
    partial: np.ndarray


def tensor_layout(layer: Layer, tensor: TensorSpec, placement: Placement, *, partial: bool) -> TensorLayout:
    """The layout of ``tensor`` of ``layer``; ``partial``: the dimensions it lacks leave pending sums.

    ``partial`` applies to contractions only (:attr:`OpSpec.contraction`);
    elsewhere a dimension the tensor lacks replicates it.
    """
    masks = placement.masks
    K = masks.shape[0]
    shard = np.stack([masks[:, layer.dims.index(a)] if a is not None else np.zeros(K, dtype=np.int64)
                      for a in tensor.axes], axis=1) if tensor.axes else np.zeros((K, 0), dtype=np.int64)
    pending = np.zeros(K, dtype=np.int64)
    if partial and OPS[layer.op].contraction:
        for d in layer.dims:
            if d not in tensor.axes:
                pending |= masks[:, layer.dims.index(d)]
    return TensorLayout(tensor.shape, shard, pending)


def _radix_table(mesh: DeviceMesh) -> np.ndarray:
    """``table[mask]``: product of the radices of the digits in ``mask``."""
    digits, bits = _digit_tables(mesh)
    table = np.ones(1 << len(digits))
    # Masks in [b, 2b) are bit b plus a mask below it: fill bits in ascending order.
    for i in reversed(range(len(digits))):
        b = int(bits[i])
        table[b:2 * b] = table[:b] * digits[i][1]
    return table


_TABLES: dict = {}


def _tables(mesh: DeviceMesh):
    key = tuple(r for _, r in mesh.digits), tuple(j for j, _ in mesh.digits)
    if key not in _TABLES:
        digits, bits = _digit_tables(mesh)
        axis_bits = [int(sum(int(bits[i]) for i, (j, _) in enumerate(digits) if j == axis)) for axis in range(len(mesh.axes))]
        _TABLES[key] = (_radix_table(mesh), axis_bits)
    return _TABLES[key]


def _highest_bit(x: np.ndarray) -> np.ndarray:
    """Highest set bit of each non-negative int (0 for 0); exact below 2**52."""
    safe = np.maximum(x, 1).astype(float)
    return np.where(x > 0, (2.0 ** np.floor(np.log2(safe))).astype(np.int64), 0)


# Meshes of at most this many digits look highest bits up in a table of 2**digits entries, and of at
# most half as many the common prefix of two masks in a table of every pair (512 KiB at most).
_LOOKUP_DIGITS = 16
# Combinations of masks of at most this many bits are told apart by a table over all of them (1 MiB of
# flags), more by sorting.
_LOOKUP_KEYS = 1 << 20
_HIGHEST: dict[int, np.ndarray] = {}
_PREFIXES: dict[int, np.ndarray] = {}


def _aligned(a: np.ndarray, b: np.ndarray, digits: int) -> np.ndarray:
    """Digits of the longest common prefix of two digit sequences.

    ``a`` and ``b`` are masks below ``2**digits``, outer digits high bits.
    """
    if 2 * digits <= _LOOKUP_DIGITS:
        if digits not in _PREFIXES:
            every = np.arange(1 << digits, dtype=np.int64)
            x, y = every[:, None], every[None, :]
            _PREFIXES[digits] = _prefix(x, y, _highest_bit(x ^ y)).ravel()
        return _PREFIXES[digits][(a << digits) | b]
    if digits <= _LOOKUP_DIGITS:
        if digits not in _HIGHEST:
            _HIGHEST[digits] = _highest_bit(np.arange(1 << digits, dtype=np.int64))
        return _prefix(a, b, _HIGHEST[digits][a ^ b])
    return _prefix(a, b, _highest_bit(a ^ b))


def _prefix(a: np.ndarray, b: np.ndarray, top: np.ndarray) -> np.ndarray:
    """The digits of ``a`` and ``b`` above ``top``, their highest differing digit (all of ``a`` where none differs)."""
    return np.where(top == 0, a, a & b & ~(2 * top - 1))


def _or_axes(masks: np.ndarray) -> np.ndarray:
    """The union of the masks along the last axis (0 where it is empty)."""
    if not masks.shape[-1]:
        return np.zeros(masks.shape[:-1], dtype=np.int64)
    out = masks[..., 0]
    for a in range(1, masks.shape[-1]):  # a few tensor axes: cheaper than a reduction along a short axis
        out = out | masks[..., a]
    return out


def _per_distinct(fn, masks: tuple[np.ndarray, ...], digits: int) -> np.ndarray:
    """``fn(*masks)`` for an element-wise ``fn`` of arrays of digit masks (below ``2**digits``, broadcasting).

    ``fn`` runs once per distinct combination of masks and its results are
    spread back over the broadcast shape: the very numbers of ``fn`` on every
    entry, for the price of finding the combinations (a table's entries take
    few). Combinations too wide for one int64 key are not looked for.
    """
    masks = np.broadcast_arrays(*masks)
    if digits * len(masks) > 62:  # the combination would not fit one int64 key
        return fn(*masks)
    key = masks[0]
    for m in masks[1:]:
        key = (key << digits) | m
    space = 1 << (digits * len(masks))
    if space <= _LOOKUP_KEYS:  # a table over every key finds the distinct ones without sorting
        present = np.zeros(space, dtype=bool)
        present[key] = True
        distinct = np.flatnonzero(present)
        position = np.empty(space, dtype=np.int64)
        position[distinct] = np.arange(len(distinct))
        inverse = position[key]
    else:
        distinct, inverse = np.unique(key, return_inverse=True)
        inverse = inverse.reshape(key.shape)
    low = (1 << digits) - 1
    parts = [(distinct >> (digits * (len(masks) - 1 - i))) & low for i in range(len(masks))]
    return fn(*parts)[inverse]


def redistribute_s(src: TensorLayout, dst: TensorLayout, mesh: DeviceMesh, bytes_per_element: int) -> np.ndarray:
    """Seconds to move a tensor from layout ``src`` (``K_s`` configurations) to ``dst`` (``K_d``), ``(K_s, K_d)``.

    Digit by digit (``dst`` has no pending sums):

    1. pending sums: reduce-scatter over the partial digits, then all-gather
       over those the destination does not shard (an all-reduce for them);
    2. along each tensor axis, the digits of the longest common prefix of the
       two digit sequences stay put;
    3. of the rest, a digit only the destination shards is a local slice
       (free); one the source shards and the destination shards elsewhere is
       an all-to-all; one only the source shards is an all-gather. Slices are
       taken first, then the all-to-all, then the all-gather, each priced
       hierarchically on the mesh (:class:`DeviceMesh`).

    Each collective's time depends on a few digit masks of the pair only, so
    it is computed once per distinct combination of them (:func:`_per_distinct`).
    """
    if len(src.shard) == 1 and len(dst.shard) == 1 and not src.partial[0] and np.array_equal(src.shard, dst.shard):
        return np.zeros((1, 1))  # one layout each, the same, no pending sums: nothing moves (the steps above give 0)
    radix, axis_bits = _tables(mesh)
    J, n = len(mesh.axes), len(mesh.digits)
    total = float(np.prod(src.shape))
    sp = src.shard[:, None, :]  # (Ks, 1, A)
    dp = dst.shard[None, :, :]  # (1, Kd, A)
    dst_sh = _or_axes(dp)  # (1, Kd)
    pending = src.partial[:, None]  # (Ks, 1)
    to_shard = pending & dst_sh
    to_replicate = pending & ~dst_sh
    per_axis = lambda mask: np.stack([radix[mask & axis_bits[j]] for j in range(J)], axis=-1)
    shape = (len(src.shard), len(dst.shard))
    seconds = np.zeros(shape)
    held = _or_axes(sp)  # (Ks, 1): digits sharding the source block

    def reduce_scatter(held, pending):
        nbytes = total / radix[held] * bytes_per_element  # elements per device before the sums, in bytes
        return np.where(pending > 0, mesh.reduce_scatter_s(nbytes, per_axis(pending)), 0.0)

    def gather_sums(held, to_shard, to_replicate):
        nbytes = total / radix[held] * bytes_per_element
        return np.where(to_replicate > 0, mesh.allgather_s(nbytes / radix[to_shard], per_axis(to_replicate)), 0.0)

    if pending.any():
        seconds += _per_distinct(reduce_scatter, (held, pending), n)
        seconds += _per_distinct(gather_sums, (held, to_shard, to_replicate), n)
    # The reduce-scatter left the destination's shards on the digits it reduced.
    sp = sp | (to_shard[:, :, None] & dp)
    aligned = _aligned(sp, dp, n)
    src_rest = _or_axes(sp & ~aligned)
    dst_rest = _or_axes(dp & ~aligned) & ~pending
    exchange = src_rest & dst_sh
    gather = src_rest & ~dst_sh
    sliced = dst_rest & ~src_rest

    def moved_bytes(held, sliced):
        return total / radix[held] / radix[sliced] * bytes_per_element

    def all_to_all(held, sliced, exchange):
        return np.where(exchange > 0, mesh.all_to_all_s(moved_bytes(held, sliced), per_axis(exchange)), 0.0)

    def all_gather(held, sliced, gather):
        return np.where(gather > 0, mesh.allgather_s(moved_bytes(held, sliced) * radix[gather], per_axis(gather)), 0.0)

    held = _or_axes(sp)
    seconds += _per_distinct(all_to_all, (held, sliced, exchange), n)
    seconds += _per_distinct(all_gather, (held, sliced, gather), n)
    return seconds


def paper_held(src: Layer, src_output: int, src_placement: Placement,
               dst: Layer, dst_input: int, dst_placement: Placement, src_configs: np.ndarray,
               dst_configs: np.ndarray) -> np.ndarray:
    """The paper's edge rule: elements held within each level, ``(K_s, K_d, J + 1)`` (the last: all needed).

    Level 0 is the device: aligned blocks overlap by the smaller extent along
    every axis, but nothing is held when the consumer uses more devices than
    the producer, nor, as in the paper's prototype, when it cuts the tensor
    into more pieces. Level ``l`` is the group of the ``l`` innermost axes,
    holding the producer's block at that level, nothing when the consumer
    spans more such groups. The forward volume stands for the backward one.
    """
    tensor = dst.inputs[dst_input]
    shape = np.asarray(tensor.shape, dtype=float)
    src_split = tensor_splits(src, src.outputs[src_output], src_configs)
    dst_split = tensor_splits(dst, tensor, dst_configs)
    need = shape / dst_split  # (Kd, A)
    held0 = np.prod(np.minimum((shape / src_split)[:, None, :], need[None, :, :]), axis=2)
    k_src, k_dst = np.prod(src_configs, axis=1), np.prod(dst_configs, axis=1)
    more_devices = k_dst[None, :] > k_src[:, None]
    more_pieces = np.prod(dst_split, axis=1)[None, :] > np.prod(src_split, axis=1)[:, None]
    levels = [np.where(more_devices | more_pieces, 0.0, held0)]
    sizes = src_placement.mesh.shape
    J = len(sizes)
    for level in range(1, J):
        outer = np.prod(src_placement.factors[:, :, :J - level], axis=2)  # (Ks, m): factor outside the group
        held_split = tensor_splits(src, src.outputs[src_output], outer)
        held = np.prod(np.minimum((shape / held_split)[:, None, :], need[None, :, :]), axis=2)
        group = float(np.prod(sizes[J - level:]))
        n_src, n_dst = np.ceil(k_src / group), np.ceil(k_dst / group)
        levels.append(np.where(n_dst[None, :] > n_src[:, None], 0.0, held))
    levels.append(np.broadcast_to(np.prod(need, axis=1)[None, :], levels[0].shape))
    return np.stack(levels, axis=-1)


def describe(layer: Layer, placement: Placement, k: int) -> str:
    """Where configuration ``k`` of ``layer`` sits on the mesh, e.g. ``"b: node 4 x gpu 2, n: gpu 4"``."""
    parts = []
    for i, d in enumerate(layer.dims):
        on = [f"{a.name} {placement.factors[k, i, j]:g}" for j, a in enumerate(placement.mesh.axes)
              if placement.factors[k, i, j] > 1]
        if on:
            parts.append(f"{d}: {' x '.join(on)}")
    return ", ".join(parts) or "replicated"
