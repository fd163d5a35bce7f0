"""The cluster a strategy runs on: device count, speed, links, memory.

The paper's cost model needs only the ratio ``r = peak FLOP/s / link bytes/s``
(FLOPs one device could do in the time one byte crosses a link) to turn bytes
into FLOP-equivalents, and the peak FLOP/s to turn FLOP-equivalents into
seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pase.errors import ClusterError

__all__ = ["Cluster", "PRESETS", "preset"]


@dataclass(frozen=True)
class Cluster:
    """A homogeneous cluster with one flat link bandwidth.

    Parameters
    ----------
    devices : int
        Number of devices ``p`` the strategy may use.
    peak_flops : float
        Peak FLOP/s of one device.
    bandwidth_Bps : float
        Bytes per second one device sends over its link.
    bytes_per_element : int
        Size of one tensor element (4 for fp32, 2 for fp16/bf16).
    memory_bytes : float or None
        Memory capacity of one device, if known.
    name : str
        Label for charts and tables.

    Raises
    ------
    ClusterError
        A value is not positive.

    Examples
    --------
    >>> c = Cluster(devices=8, peak_flops=10e12, bandwidth_Bps=16e9)
    >>> c.flops_per_byte
    625.0
    >>> print(c)
    8 x 10 TFLOP/s, 16 GB/s links
    """

    devices: int
    peak_flops: float
    bandwidth_Bps: float
    bytes_per_element: int = 4
    memory_bytes: float | None = None
    name: str = "custom"

    def __post_init__(self):
        if isinstance(self.devices, bool) or not isinstance(self.devices, int) or self.devices < 1:
            raise ClusterError(f"devices must be a whole number >= 1, got {self.devices!r}")
        for field in ("peak_flops", "bandwidth_Bps"):
            value = getattr(self, field)
            if not value > 0 or value == float("inf"):
                raise ClusterError(f"{field} must be a positive finite number, got {value!r}")
        if self.bytes_per_element not in (1, 2, 4, 8):
            raise ClusterError(f"bytes_per_element must be 1, 2, 4 or 8, got {self.bytes_per_element!r}")
        if self.memory_bytes is not None and not self.memory_bytes > 0:
            raise ClusterError(f"memory_bytes must be positive, got {self.memory_bytes!r}")

    @property
    def flops_per_byte(self) -> float:
        """The paper's ``r``: FLOPs a device could do while one byte crosses a link."""
        return self.peak_flops / self.bandwidth_Bps

    def with_devices(self, devices: int) -> "Cluster":
        """The same hardware with ``devices`` devices."""
        return replace(self, devices=devices)

    def __str__(self) -> str:
        return f"{self.devices} x {self.peak_flops / 1e12:g} TFLOP/s, {self.bandwidth_Bps / 1e9:g} GB/s links"


# Published peak figures. The paper's nodes run fp32; the DGX presets use the
# bf16/fp16 tensor-core peak (dense) with 2-byte elements, as mixed-precision
# training does. Bandwidth is one GPU's unidirectional link bandwidth.
PRESETS: dict[str, Cluster] = {
    c.name: c
    for c in (
        # GTX 1080 Ti: 11.3 TFLOP/s fp32, 11 GB; peer-to-peer over PCIe 3.0 x16 (~12 GB/s achieved).
        Cluster(8, 11.3e12, 12e9, 4, 11e9, "paper-1080ti"),
        # RTX 2080 Ti: 13.4 TFLOP/s fp32, 11 GB; no peer-to-peer, so transfers stage through host memory.
        Cluster(8, 13.4e12, 6e9, 4, 11e9, "paper-2080ti"),
        # DGX-1: 8 x V100 SXM2 32 GB, 125 TFLOP/s fp16 tensor cores, NVLink 2 (150 GB/s per direction).
        Cluster(8, 125e12, 150e9, 2, 32e9, "dgx1-v100"),
        # DGX A100: 8 x A100 SXM4 80 GB, 312 TFLOP/s bf16, NVLink 3 (300 GB/s per direction).
        Cluster(8, 312e12, 300e9, 2, 80e9, "dgx-a100"),
        # DGX H100: 8 x H100 SXM5 80 GB, 989 TFLOP/s bf16 dense, NVLink 4 (450 GB/s per direction).
        Cluster(8, 989e12, 450e9, 2, 80e9, "dgx-h100"),
        # The paper's cost-model setting for its search-time experiments.
        Cluster(8, 10e12, 16e9, 4, None, "paper-model"),
    )
}


def preset(name: str, devices: int | None = None) -> Cluster:
    """The preset cluster ``name``, optionally with another device count.

    Raises
    ------
    ClusterError
        No preset has that name.
    """
    try:
        cluster = PRESETS[name]
    except KeyError:
        raise ClusterError(f"unknown cluster preset {name!r}; choose one of {', '.join(PRESETS)}") from None
    return cluster if devices is None else cluster.with_devices(devices)
