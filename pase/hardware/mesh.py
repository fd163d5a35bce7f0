"""The device mesh, and the one place every collective is priced.

A cluster is a mesh of devices: named axes, outermost first, each with a
size, the bandwidth one device sends at across it, a latency per collective
step and an efficiency (the fraction of nominal bandwidth a collective
reaches; 1 until calibrated). A flat cluster is a 1-D mesh; a DGX pod is
``node x gpu`` (the network outer, NVLink inner); racks and pods add axes.

Every collective runs among a *group* of devices given by its extent ``k_j``
along each axis ``j`` (an array ``(..., J)``; 1 where the group does not span
the axis). With ``B_j`` the effective bandwidth and ``a_j`` the latency of axis
``j``, and axes taken innermost first so that each stage works on what the
inner ones left (``M_j = M / prod_{i inner to j} k_i``):

* reduce-scatter of an ``M``-byte block, and all-gather whose result is ``M``
  bytes: ``sum_j (k_j - 1) / k_j * M_j / B_j + (k_j - 1) a_j``;
* all-reduce: reduce-scatter then all-gather (twice the above): the ring
  all-reduce on one axis, the hierarchical one (NCCL's tree-of-rings
  idealised) on several;
* all-to-all of an ``M``-byte block: a device sends ``M / k`` to each peer; the
  share whose outermost differing axis is ``j`` crosses that axis:
  ``sum_j M (k_j - 1) / (k_j prod_{i outer to j} k_i) / B_j + (k_j - 1) a_j``;
* a flat ring (one ring through every device of the group, as DeepSpeed's
  ZeRO-3 gathers): ``(k - 1) / k * M / B_outer + sum_j (k_j - 1) prod_(i
  outer to j) k_i a_j`` with ``k = prod k_j``: every share crosses the
  slowest link spanned, and each ring step pays the latency of the axis it
  crosses, the ring visiting inner axes first (NCCL's ring model);
* exchange with neighbours (halo rows, pipeline stages): the bytes at the
  bandwidth of the outermost axis the group spans, one latency;
* send/receive across one axis: bytes / bandwidth + latency.

A redistribution that needs ``H_L`` bytes of which ``H_l`` are already held
within the group of the ``l`` innermost axes (``H_0``: on the device itself)
moves ``H_l - H_(l-1)`` bytes across axis ``J - l`` (:func:`redistribute_s`).
With one axis and no latency these are the paper's flat-ring formulas exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from pase.errors import ClusterError
from pase.limits import MAX_LATENCY_S

__all__ = ["MeshAxis", "DeviceMesh"]


@dataclass(frozen=True)
class MeshAxis:
    """One axis of a device mesh.

    Parameters
    ----------
    name : str
        ``"node"``, ``"gpu"``, ``"rack"``...
    size : int
        Devices along the axis.
    bandwidth_Bps : float
        Bytes per second one device sends across this axis when every device
        does so at once (a node's network bandwidth divided by its devices).
    latency_s : float
        Seconds per step of a collective across this axis, from 0 to
        :data:`pase.limits.MAX_LATENCY_S`.
    efficiency : float
        Fraction of ``bandwidth_Bps`` a collective reaches, in (0, 1].

    Raises
    ------
    ClusterError
        A size below 1, a bandwidth that is not a positive finite number, a
        latency outside ``0 .. MAX_LATENCY_S`` seconds, or an efficiency
        outside (0, 1]; NaN is refused everywhere. The axis alone is a
        formula's input and may have any positive bandwidth (1 byte/s in
        tests); a :class:`~pase.hardware.cluster.Cluster` holds its axes to
        physically plausible bandwidths.
    """

    name: str
    size: int
    bandwidth_Bps: float
    latency_s: float = 0.0
    efficiency: float = 1.0

    def __post_init__(self):
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ClusterError(f"mesh axis {self.name!r}: size must be a whole number >= 1, got {self.size!r}")
        if not 0 < self.bandwidth_Bps < float("inf"):
            raise ClusterError(f"mesh axis {self.name!r}: bandwidth must be a positive finite number of bytes/s, "
                               f"got {self.bandwidth_Bps!r}")
        if not 0 <= self.latency_s <= MAX_LATENCY_S:
            raise ClusterError(f"mesh axis {self.name!r}: latency must be from 0 to {MAX_LATENCY_S:g} seconds, "
                               f"got {self.latency_s!r}")
        if not 0 < self.efficiency <= 1:
            raise ClusterError(f"mesh axis {self.name!r}: efficiency must be in (0, 1], got {self.efficiency!r}")

    @property
    def effective_Bps(self) -> float:
        """The bandwidth a collective reaches across this axis."""
        return self.bandwidth_Bps * self.efficiency


def _primes(n: int) -> list[int]:
    out, f = [], 2
    while f * f <= n:
        while n % f == 0:
            out.append(f)
            n //= f
        f += 1
    return out + ([n] if n > 1 else [])


@dataclass(frozen=True)
class DeviceMesh:
    """Devices as a grid of named axes, outermost first.

    >>> m = DeviceMesh((MeshAxis("node", 2, 25e9), MeshAxis("gpu", 8, 300e9)))
    >>> m.devices, m.shape
    (16, (2, 8))
    >>> float(m.allreduce_s(8e6, np.array([1, 8]))) == 2 * 7 / 8 * 8e6 / 300e9
    True
    >>> print(m)
    node 2 x gpu 8
    """

    axes: tuple[MeshAxis, ...]

    def __post_init__(self):
        object.__setattr__(self, "axes", tuple(self.axes))
        if not self.axes:
            raise ClusterError("a device mesh needs at least one axis")
        names = [a.name for a in self.axes]
        if len(set(names)) != len(names):
            raise ClusterError(f"mesh axis names must differ, got {names}")

    @property
    def shape(self) -> tuple[int, ...]:
        """Sizes of the axes, outermost first."""
        return tuple(a.size for a in self.axes)

    @property
    def devices(self) -> int:
        """Number of devices."""
        return prod(self.shape)

    @property
    def digits(self) -> tuple[tuple[int, int], ...]:
        """The mesh as prime-radix digits ``(axis, radix)``, outermost first.

        A configuration places each split factor on a set of digits
        (:func:`pase.model.layout.place`); the larger primes of an axis come first.
        """
        return tuple((j, r) for j, a in enumerate(self.axes) for r in sorted(_primes(a.size), reverse=True))

    def _bw(self) -> np.ndarray:
        return np.array([a.effective_Bps for a in self.axes])

    def _lat(self) -> np.ndarray:
        return np.array([a.latency_s for a in self.axes])

    def _stages(self, nbytes, k):
        """Per axis, the bytes a reduce-scatter stage works on (inner axes first) and the group extents."""
        k = np.asarray(k, dtype=float)
        inner = np.cumprod(k[..., ::-1], axis=-1)[..., ::-1]  # prod of k over axes j..J-1
        inner_excl = inner / k  # prod over axes strictly inner to j
        return np.asarray(nbytes, dtype=float)[..., None] / inner_excl, k

    def reduce_scatter_s(self, nbytes, k) -> np.ndarray:
        """Seconds to reduce-scatter an ``nbytes`` block over a group of extents ``k`` (``(..., J)``)."""
        m, k = self._stages(nbytes, k)
        return np.sum((k - 1) / k * m / self._bw() + (k - 1) * self._lat(), axis=-1)

    def allgather_s(self, nbytes, k) -> np.ndarray:
        """Seconds to all-gather a result of ``nbytes`` over a group of extents ``k``."""
        return self.reduce_scatter_s(nbytes, k)

    def allreduce_s(self, nbytes, k) -> np.ndarray:
        """Seconds to all-reduce an ``nbytes`` block over a group of extents ``k`` (reduce-scatter + all-gather)."""
        return 2.0 * self.reduce_scatter_s(nbytes, k)

    def all_to_all_s(self, nbytes, k) -> np.ndarray:
        """Seconds for an all-to-all of an ``nbytes`` block per device over a group of extents ``k``."""
        k = np.asarray(k, dtype=float)
        outer = np.cumprod(k, axis=-1) / k  # prod over axes strictly outer to j
        share = np.asarray(nbytes, dtype=float)[..., None] * (k - 1) / (k * outer)
        return np.sum(share / self._bw() + (k - 1) * self._lat(), axis=-1)

    def flat_ring_s(self, nbytes, k) -> np.ndarray:
        """Seconds of a flat-ring all-gather whose result is ``nbytes`` (or reduce-scatter of an ``nbytes`` block)
        over one group of extents ``k`` (``(J,)``): the module docstring's flat ring."""
        k = np.asarray(k, dtype=float)
        spanned = np.flatnonzero(k > 1)
        outermost = spanned[0] if len(spanned) else len(k) - 1
        outer = np.cumprod(k) / k  # prod over axes strictly outer to j
        latency = float(np.sum((k - 1) * outer * self._lat()))
        d = float(np.prod(k))
        return (d - 1) / d * np.asarray(nbytes, dtype=float) / self._bw()[outermost] + latency

    def exchange_s(self, nbytes, k) -> np.ndarray:
        """Seconds to send ``nbytes`` to neighbours, at the outermost axis the group spans (0 for one device)."""
        k = np.asarray(k, dtype=float)
        spans = k > 1
        outermost = np.argmax(spans, axis=-1)
        any_span = spans.any(axis=-1)
        return np.where(any_span, np.asarray(nbytes, dtype=float) / self._bw()[outermost] + self._lat()[outermost], 0.0)

    def send_recv_s(self, nbytes, axis: int) -> np.ndarray:
        """Seconds to send ``nbytes`` point to point across mesh axis ``axis``."""
        a = self.axes[axis]
        return np.asarray(nbytes, dtype=float) / a.effective_Bps + a.latency_s

    def redistribute_s(self, held) -> np.ndarray:
        """Seconds to redistribute given ``held[..., l]``: bytes held within the ``l`` innermost axes.

        ``held`` has ``J + 1`` entries on its last axis, ``held[..., 0]`` on the
        device and ``held[..., J]`` everything needed; what is missing at level
        ``l - 1`` but present at level ``l`` crosses axis ``J - l``, one latency
        per axis crossed.
        """
        held = np.asarray(held, dtype=float)
        moved = np.clip(np.diff(held, axis=-1), 0.0, None)  # (..., J), level 1 first = innermost axis
        bw, lat = self._bw()[::-1], self._lat()[::-1]
        return np.sum(moved / bw + np.where(moved > 0, lat, 0.0), axis=-1)

    def __str__(self) -> str:
        return " x ".join(f"{a.name} {a.size}" for a in self.axes)
