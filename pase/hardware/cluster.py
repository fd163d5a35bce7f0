"""The cluster a strategy runs on: device count, speed, links, memory, topology.

The paper's cost model needs only the ratio ``r = peak FLOP/s / link bytes/s``
(FLOPs one device could do in the time one byte crosses a link) to turn bytes
into FLOP-equivalents, and the peak FLOP/s to turn FLOP-equivalents into
seconds.

Beyond the paper, a cluster may be *two-level*: ``nodes`` nodes of
``devices_per_node`` devices each, devices inside a node joined by fast links
(``bandwidth_Bps``: NVLink, PCIe) and nodes joined by a slower network
(``inter_bandwidth_Bps``: InfiniBand). Both bandwidths are what **one device**
can send at once; a node's network adapters are shared by its devices, so
``inter_bandwidth_Bps`` is the node's injection bandwidth divided by its
devices. Deeper hierarchies (racks, pods) are given as explicit mesh axes
(``mesh_axes``). Every cluster is a device mesh (:attr:`Cluster.mesh`,
:mod:`pase.hardware.mesh`), on which every collective is priced.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from math import ceil, gcd, prod
from numbers import Real

from pase.errors import ClusterError, did_you_mean
from pase.hardware.attention_kernels import SOURCES as ATTENTION_SHAPES_SOURCES, published_rates
from pase.hardware.calibration import Calibration, load_calibration
from pase.hardware.efficiency import (
    A100_FITTED, A100_HBM_BPS, GTX1080TI_FP32, RTX2080TI_FP32, Efficiency, derated,
)
from pase.hardware.mesh import DeviceMesh, MeshAxis
from pase.limits import (
    MAX_BANDWIDTH_BPS, MAX_MEMORY_BYTES, MAX_PEAK_FLOPS, MIN_BANDWIDTH_BPS, MIN_MEMORY_BYTES,
    MIN_PEAK_FLOPS,
)

__all__ = ["Cluster", "PRESETS", "CALIBRATIONS", "preset", "calibrated_by_default"]


def _check_count(field: str, value: object) -> None:
    """``ClusterError`` unless ``value`` is a whole number >= 1 (what the search accepts is its own bound)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ClusterError(f"{field} must be a whole number >= 1, got {value!r}")


def _check_range(field: str, value: object, low: float, high: float, unit: str, hint: str = "") -> None:
    """``ClusterError`` unless ``value`` is a real number in ``[low, high]`` (``unit`` names its unit)."""
    ok = isinstance(value, Real) and not isinstance(value, bool) and low <= value <= high  # False for NaN
    if not ok:
        raise ClusterError(f"{field} must be from {low:g} to {high:g} {unit}, got {value!r}{hint}")


@dataclass(frozen=True)
class Cluster:
    """A homogeneous cluster: flat, or nodes of devices joined by a network.

    Parameters
    ----------
    devices : int
        Number of devices ``p`` the strategy may use.
    peak_flops : float
        Peak FLOP/s of one device.
    bandwidth_Bps : float
        Bytes per second one device sends over its link; on a two-level
        cluster, over the links inside its node.
    bytes_per_element : int
        Size of one tensor element (4 for fp32, 2 for fp16/bf16).
    memory_bytes : float or None
        Memory capacity of one device, if known. When set, :func:`pase.plan`
        only returns strategies that fit (see :mod:`pase.model.memory`).
    name : str
        Label for charts and tables.
    devices_per_node : int or None
        Devices in one node; ``None``: all devices share one node (the
        paper's flat model). Devices ``0 .. devices_per_node - 1`` form node
        0 and so on; the last node may be partly used.
    inter_bandwidth_Bps : float or None
        Bytes per second one device sends to other nodes when every device
        of its node does so at once (node network bandwidth / devices per
        node); ``None``: the same as ``bandwidth_Bps``.
    mesh_axes : tuple of MeshAxis or None
        The device mesh, outermost axis first, for hierarchies deeper than
        nodes of devices (racks, pods) or axes with latencies and
        efficiencies; their sizes multiply to ``devices``. ``None``: the mesh
        follows from ``devices_per_node`` (:attr:`mesh`).
    efficiency : Efficiency or None
        What kernels and links achieve (:mod:`pase.hardware.efficiency`): with
        it, compute is priced by the roofline (:mod:`pase.model.roofline`) and
        the mesh's links at their collective efficiency and latency, unless the
        cost model is the paper's. ``None``: peak rates, nominal bandwidths
        (the paper's assumption).
    fp8_peak_flops : float or None
        Dense FP8 tensor-core peak FLOP/s of one device (a published
        specification); ``None``: the device has no FP8 (training in FP8 is
        refused).
    reserved_bytes : float or None
        Memory per device no strategy can use (CUDA context, library
        workspaces, NCCL buffers, allocator fragmentation), counted in every
        plan's memory, so that "fits" means fits with it; ``None``:
        :data:`pase.model.memory.DEFAULT_RESERVE` where ``memory_bytes`` is
        known, nothing where it is not (see
        :meth:`pase.model.memory.MemoryOptions.reserve_on`).
    mxfp8 : bool
        Whether the device's tensor cores run MXFP8 (block-scaled FP8,
        Blackwell: B200, at its FP8 peak; NVIDIA's Blackwell datasheet), which
        ``--precision mxfp8`` needs (:mod:`pase.model.precision`).

    Raises
    ------
    ClusterError
        A figure is not physically plausible: devices (or devices per node)
        not a whole number >= 1, peak FLOP/s outside ``MIN_PEAK_FLOPS ..
        MAX_PEAK_FLOPS``, a bandwidth (an explicit mesh axis's too) outside
        ``MIN_BANDWIDTH_BPS .. MAX_BANDWIDTH_BPS`` bytes/s, memory outside
        ``MIN_MEMORY_BYTES .. MAX_MEMORY_BYTES`` bytes (see
        :mod:`pase.limits`), NaN or infinity anywhere, or an element size
        other than 1, 2, 4 or 8 bytes. The message names the field, the
        value, the accepted range and its unit.

    Examples
    --------
    >>> c = Cluster(devices=8, peak_flops=10e12, bandwidth_Bps=16e9)
    >>> c.flops_per_byte
    625.0
    >>> print(c)
    8 x 10 TFLOP/s, 16 GB/s links
    >>> two = Cluster(16, 10e12, 150e9, devices_per_node=8, inter_bandwidth_Bps=6.25e9)
    >>> two.nodes, two.is_flat
    (2, False)
    >>> print(two)
    16 x 10 TFLOP/s, 2 nodes x 8, 150 GB/s in a node, 6.25 GB/s between nodes
    """

    devices: int
    peak_flops: float
    bandwidth_Bps: float
    bytes_per_element: int = 4
    memory_bytes: float | None = None
    name: str = "custom"
    devices_per_node: int | None = None
    inter_bandwidth_Bps: float | None = None
    mesh_axes: tuple[MeshAxis, ...] | None = None
    efficiency: Efficiency | None = None
    fp8_peak_flops: float | None = None
    reserved_bytes: float | None = None
    mxfp8: bool = False

    def __post_init__(self):
        _check_count("devices", self.devices)
        _check_range("peak_flops", self.peak_flops, MIN_PEAK_FLOPS, MAX_PEAK_FLOPS, "FLOP/s")
        if self.fp8_peak_flops is not None:
            _check_range("fp8_peak_flops", self.fp8_peak_flops, MIN_PEAK_FLOPS, MAX_PEAK_FLOPS, "FLOP/s",
                         "; leave it unset (None) for a device without FP8")
        _check_range("bandwidth_Bps", self.bandwidth_Bps, MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS, "bytes/s")
        if isinstance(self.bytes_per_element, bool) or self.bytes_per_element not in (1, 2, 4, 8):
            raise ClusterError(f"bytes_per_element must be 1, 2, 4 or 8, got {self.bytes_per_element!r}")
        if self.memory_bytes is not None:
            _check_range("memory_bytes", self.memory_bytes, MIN_MEMORY_BYTES, MAX_MEMORY_BYTES, "bytes",
                         "; leave it unset (None) when unknown")
        if self.reserved_bytes is not None:
            _check_range("reserved_bytes", self.reserved_bytes, 0.0, MAX_MEMORY_BYTES, "bytes",
                         "; leave it unset (None) for the default reserve")
        if self.devices_per_node is not None:
            _check_count("devices_per_node", self.devices_per_node)
        if self.inter_bandwidth_Bps is not None:
            _check_range("inter_bandwidth_Bps", self.inter_bandwidth_Bps, MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS,
                         "bytes/s")
        if self.mesh_axes is not None:
            object.__setattr__(self, "mesh_axes", tuple(self.mesh_axes))
            for a in self.mesh_axes:
                # A MeshAxis alone may carry unit bandwidths (formulas are checked with them); a
                # cluster's axes are hardware.
                _check_range(f"mesh axis {a.name!r} bandwidth_Bps", a.bandwidth_Bps, MIN_BANDWIDTH_BPS,
                             MAX_BANDWIDTH_BPS, "bytes/s")
            sizes = [a.size for a in self.mesh_axes]
            if prod(sizes) != self.devices:
                raise ClusterError(f"mesh axes {sizes} hold {prod(sizes)} devices, not the cluster's {self.devices}; "
                                   "give axes whose sizes multiply to the device count")

    @cached_property  # a frozen cluster forms one mesh; searches ask for it hundreds of thousands of times
    def mesh(self) -> DeviceMesh:
        """The device mesh the cluster forms.

        Explicit ``mesh_axes`` if given; a flat cluster (:attr:`is_flat`) is
        one axis ``devices``; otherwise ``node x gpu`` with the network
        bandwidth outside and the node's links inside. When ``devices`` is not
        a multiple of ``devices_per_node`` the mesh uses ``g = gcd(devices,
        devices_per_node)`` devices of each of ``devices / g`` nodes (12 devices
        on 8-GPU nodes: 3 nodes of 4), so that every node holds the same part
        of the mesh.
        """
        if self.mesh_axes is not None:
            return DeviceMesh(self.mesh_axes)
        e = self.efficiency
        inner = {} if e is None else {"latency_s": e.intra_latency_s, "efficiency": e.intra_efficiency}
        outer = {} if e is None else {"latency_s": e.inter_latency_s, "efficiency": e.inter_efficiency}
        if self.is_flat:
            return DeviceMesh((MeshAxis("devices", self.devices, self.bandwidth_Bps, **(outer if self.nodes > 1 else inner)),))
        per_node = gcd(self.devices, self.node_size)
        return DeviceMesh((MeshAxis("node", self.devices // per_node, self.network_bandwidth_Bps, **outer),
                           MeshAxis("gpu", per_node, self.bandwidth_Bps, **inner)))

    @property
    def flops_per_byte(self) -> float:
        """The paper's ``r``: FLOPs a device could do while one byte crosses a link (inside a node)."""
        return self.peak_flops / self.bandwidth_Bps

    @property
    def intra_bandwidth_Bps(self) -> float:
        """Bytes per second one device sends to a device of its own node (``bandwidth_Bps``)."""
        return self.bandwidth_Bps

    @property
    def network_bandwidth_Bps(self) -> float:
        """Bytes per second one device sends to another node (``inter_bandwidth_Bps`` or ``bandwidth_Bps``)."""
        return self.bandwidth_Bps if self.inter_bandwidth_Bps is None else self.inter_bandwidth_Bps

    @property
    def node_size(self) -> int:
        """Devices per node, with ``None`` read as all devices (at least 1)."""
        return self.devices if self.devices_per_node is None else self.devices_per_node

    @property
    def nodes(self) -> int:
        """Nodes the ``devices`` occupy (the last may be partly used)."""
        return ceil(self.devices / self.node_size)

    @property
    def is_flat(self) -> bool:
        """True when one bandwidth prices every byte: one node, equal bandwidths, or a 1-D mesh."""
        if self.mesh_axes is not None:
            return len(self.mesh_axes) == 1
        return self.nodes == 1 or self.network_bandwidth_Bps == self.bandwidth_Bps

    def with_devices(self, devices: int) -> "Cluster":
        """The same hardware with ``devices`` devices (same node size: more devices, more nodes).

        Explicit mesh axes are dropped unless they still multiply to ``devices``.
        """
        axes = self.mesh_axes if self.mesh_axes is not None and prod(a.size for a in self.mesh_axes) == devices else None
        return replace(self, devices=devices, mesh_axes=axes)

    def __str__(self) -> str:
        head = f"{self.devices} x {self.peak_flops / 1e12:g} TFLOP/s"
        if self.mesh_axes is not None:
            return f"{head}, mesh " + ", ".join(f"{a.name} {a.size} at {a.bandwidth_Bps / 1e9:g} GB/s" for a in self.mesh_axes)
        if self.nodes == 1:
            return f"{head}, {self.bandwidth_Bps / 1e9:g} GB/s links"
        return (f"{head}, {self.nodes} nodes x {self.node_size}, {self.bandwidth_Bps / 1e9:g} GB/s in a node, "
                f"{self.network_bandwidth_Bps / 1e9:g} GB/s between nodes")


# What NVML reports as each GPU's memory (nvidia-smi's total), in bytes: an "80 GB" H100 holds 81,559 MiB
# (85.52e9 bytes), an "80 GB" A100 81,920 MiB, a 40 GB A100 40,960 MiB, a 141 GB H200 143,771 MiB (Modal's
# published table, "Why does an NVIDIA H100 80GB card offer 85.52 GB?", thundergolfer.com, 2024). The datasheets'
# round figures are GiB, or less; the memory the CUDA context and libraries take is the reserve's
# (pase.model.memory.DEFAULT_RESERVE). The B200's 180 GB and the older GPUs' stay their datasheets' figures (no
# published NVML total).
_MIB = 2**20
NVML_TOTAL_BYTES = {"h100": 81_559 * _MIB, "a100-80gb": 81_920 * _MIB, "a100-40gb": 40_960 * _MIB,
                    "h200": 143_771 * _MIB}

# Published peak figures. The paper's nodes run fp32; the DGX presets use the
# bf16/fp16 tensor-core peak (dense) with 2-byte elements, as mixed-precision
# training does. Bandwidth is one GPU's unidirectional link bandwidth inside
# its node; the network figure is the node's InfiniBand bandwidth divided by
# its 8 GPUs. Every preset has 8 devices, one node: ask for more devices
# (``preset("dgx-a100", 32)``) to get several nodes.
PRESETS: dict[str, Cluster] = {
    c.name: c
    for c in (
        # GTX 1080 Ti: 11.3 TFLOP/s fp32, 11 GB; peer-to-peer over PCIe 3.0 x16 (~12 GB/s achieved);
        # nodes on one 100 Gb/s EDR InfiniBand adapter each (12.5 GB/s / 8 GPUs).
        Cluster(8, 11.3e12, 12e9, 4, 11e9, "paper-1080ti", 8, 12.5e9 / 8),
        # RTX 2080 Ti: 13.4 TFLOP/s fp32, 11 GB; no peer-to-peer, so transfers stage through host memory;
        # the same 100 Gb/s EDR network.
        Cluster(8, 13.4e12, 6e9, 4, 11e9, "paper-2080ti", 8, 12.5e9 / 8),
        # DGX-1: 8 x V100 SXM2 32 GB, 125 TFLOP/s fp16 tensor cores, NVLink 2 (150 GB/s per direction);
        # 4 x 100 Gb/s EDR InfiniBand per node (50 GB/s / 8 GPUs).
        Cluster(8, 125e12, 150e9, 2, 32e9, "dgx1-v100", 8, 50e9 / 8),
        # DGX A100: 8 x A100 SXM4 80 GB, 312 TFLOP/s bf16, NVLink 3 (300 GB/s per direction);
        # 8 x 200 Gb/s HDR InfiniBand per node, one per GPU (25 GB/s).
        Cluster(8, 312e12, 300e9, 2, NVML_TOTAL_BYTES["a100-80gb"], "dgx-a100", 8, 25e9),
        # DGX A100 40 GB (the first Selene): the same A100 SXM4 with 40 GB of HBM2 (1,555 GB/s).
        Cluster(8, 312e12, 300e9, 2, NVML_TOTAL_BYTES["a100-40gb"], "dgx-a100-40gb", 8, 25e9),
        # DGX H100: 8 x H100 SXM5 80 GB, 989 TFLOP/s bf16 dense, NVLink 4 (450 GB/s per direction);
        # 8 x 400 Gb/s NDR InfiniBand per node, one per GPU (50 GB/s).
        # FP8: 1,979 TFLOP/s dense (H100, H200; NVIDIA's datasheets), 4,500 on B200.
        Cluster(8, 989e12, 450e9, 2, NVML_TOTAL_BYTES["h100"], "dgx-h100", 8, 50e9, fp8_peak_flops=1979e12),
        # DGX H200: 8 x H200 SXM 141 GB (HBM3e, 4.8 TB/s), 989 TFLOP/s bf16 dense, NVLink 4 (450 GB/s
        # per direction); 8 x 400 Gb/s NDR InfiniBand (50 GB/s per GPU).
        Cluster(8, 989e12, 450e9, 2, NVML_TOTAL_BYTES["h200"], "dgx-h200", 8, 50e9, fp8_peak_flops=1979e12),
        # DGX B200: 8 x B200 180 GB (HBM3e, 8 TB/s), 2,250 TFLOP/s bf16 dense, NVLink 5 (900 GB/s per
        # direction); 8 x 400 Gb/s ConnectX-7 (50 GB/s per GPU).
        # Blackwell's tensor cores also run MXFP8 (block-scaled FP8) at the FP8 rate.
        Cluster(8, 2250e12, 900e9, 2, 180e9, "dgx-b200", 8, 50e9, fp8_peak_flops=4500e12, mxfp8=True),
        # The paper's cost-model setting for its search-time experiments: flat, no memory limit.
        Cluster(8, 10e12, 16e9, 4, None, "paper-model"),
    )
}


# What the presets' kernels and links achieve (pase.hardware.efficiency; every figure's source in its
# Efficiency.sources). The A100's is A100_FITTED: Calculon's published figures, its matrix curve from published
# kernel figures, three figures fitted to Korthikanti Table 5 and Megatron Table 1 (benchmarks/fit_calibration.py);
# the 40 GB A100 the same chip with its own HBM. The H200's kernels are fitted to kernel timings measured on one H200
# (data/dgx-h200.json, written by benchmarks/fit_h200.py from data/h200-kernels.json); the H100 is the same
# GH100 chip at the same clocks with its own HBM; the B200's are published figures and stated assumptions.
# Links from published NCCL figures (below). The paper's fp32 nodes have their own: GTX1080TI_FP32's matrix
# curve and PCIe ring are DeepBench's published 1080 Ti measurements, RTX2080TI_FP32 carries them to the
# 2080 Ti with its own peak, memory and a host-staged link latency.
_DATA = Path(__file__).with_name("data")
H200_MEASURED = load_calibration(_DATA / "dgx-h200.json")
_H200 = H200_MEASURED.efficiency
_H200_HBM_BPS = 4800e9  # H200 SXM datasheet: 4.8 TB/s HBM3e
_HBM_FRACTION = _H200.memory_Bps / _H200_HBM_BPS

# Link efficiencies: the bus bandwidth NCCL reaches as a fraction of a GPU's nominal per-direction bandwidth.
# NVLink 4 (H100, H200: 18 links, 450 GB/s a direction) and NVLink 5 (B200: 18 links, 900 GB/s): NCCL models
# 20.6 and 40.1 GB/s a link (src/graph/topo.h, SM90_NVLINK_BW and SM100_NVLINK_BW), 370.8 and 721.8 GB/s.
_NCCL_TOPO = "NCCL's link model (NVIDIA/nccl src/graph/topo.h"
_NVLINK4 = {
    "intra_efficiency": (18 * 20.6e9 / 450e9,
                         f"published: {_NCCL_TOPO}, SM90_NVLINK_BW 20.6 GB/s x 18 links = 370.8 GB/s of NVLink 4's "
                         "450); NCCL's maintainers give ~370 GB/s as the busBw of ring and non-all-reduce "
                         "collectives on 8 H100 (NVIDIA/nccl-tests#212; all-reduce over NVLink SHARP reaches ~480 "
                         "GB/s busBw, 475 measured on 8 H200 in NVIDIA/nccl-tests#272: not modelled)"),
}
_NVLINK5 = {
    "intra_efficiency": (18 * 40.1e9 / 900e9,
                         f"published: {_NCCL_TOPO}, SM100_NVLINK_BW 40.1 GB/s x 18 links = 721.8 GB/s of NVLink "
                         "5's 900; all-reduce over NVLink SHARP measures 830+ GB/s busBw on 8 B200 "
                         "(NVIDIA/nccl#1807: not modelled)"),
}
_NDR = {
    "inter_efficiency": (47e9 / 50e9,
                         "published: 46-48 GB/s of nccl-tests busBw per NDR 400 Gb/s (50 GB/s) adapter, NCCL's "
                         "maintainers in NVIDIA/nccl-tests#290 (47 taken)"),
}
_LATENCY = {
    "intra_latency_s": (5e-6, "assumed: 5 us per collective step inside a node, as on the A100 (not measured)"),
    "inter_latency_s": (10e-6, "assumed: 10 us per collective step between nodes, as on the A100 (not measured)"),
}


def _with(efficiency: Efficiency, *figures: dict) -> Efficiency:
    """``efficiency`` with the (value, source) ``figures`` set."""
    merged = {k: v for f in figures for k, v in f.items()}
    return replace(efficiency, sources={**efficiency.sources, **{k: s for k, (_, s) in merged.items()}},
                   **{k: v for k, (v, _) in merged.items()})


# The tensor-core clock of a training step. NVIDIA states the H100 and H200 SXM's tensor-core peaks at a 1,830 MHz
# boost (989.4 TFLOP/s dense BF16 = 132 SMs x 4,096 FLOP a clock x 1.83 GHz; the H100 whitepaper's Table 3 gives
# 1,830 MHz as the boost clock of tensor-core work, 1,980 MHz of the rest), while h200-kernels.json timed each
# kernel alone at an SM clock of 1,980 MHz. A step runs its tensor-core kernels back to back at the clock their
# peaks are stated at: the measured tensor-core kernels (products, FP8 products, flash attention) run 1830/1980 as
# fast. The vector rate keeps the measured clock: NVIDIA states the CUDA cores' peaks (66.9 TFLOP/s FP32 = 132 x
# 256 x 1.98 GHz) at 1,980 MHz. Memory and launch figures do not scale with the SM clock.
H100_TENSOR_CLOCK_HZ, H200_MEASURED_CLOCK_HZ = 1830e6, 1980e6
TENSOR_CORE_CURVES = ("matmul_curve", "matmul_dgrad_curve", "matmul_wgrad_curve", "fp8_matmul_curve", "attention_curve",
                      "attention_backward_curve")
_CLOCK = H100_TENSOR_CLOCK_HZ / H200_MEASURED_CLOCK_HZ
_AT_CLOCK = ("published: at NVIDIA's stated 1,830 MHz tensor-core boost (H100 whitepaper, Table 3; 989.4 TFLOP/s = "
             "132 SMs x 4,096 FLOP/clock x 1.83 GHz), the fractions measured at 1,980 MHz times 1830/1980 "
             f"({_CLOCK:.3f}): {{}}")
_H200 = _with(_H200, {name: (tuple((f, e * _CLOCK) for f, e in getattr(_H200, name)),
                             _AT_CLOCK.format(_H200.sources[name])) for name in TENSOR_CORE_CURVES})

_SAME_CHIP = ("the H200's (same GH100 chip, 132 SMs, the same clocks as the H100 SXM; H200 and H100 datasheets): "
              "{}")
# Streaming multiprocessors, published (what DeepEP's 20 leave the computation, pase.model.expert_overlap).
_GH100_SMS = {"sms": (132, "published: 132 SMs on the H100 SXM (H100 whitepaper, Table 3), the H200 SXM the same "
                           "GH100 configuration")}
_B200_SMS = {"sms": (148, "published: 148 SMs on the B200 (NVIDIA's B200 specifications; CUDA's multiprocessor "
                          "count)")}
# Head shapes other than 128 wide at their GPU family's own rates (pase.hardware.attention_kernels).
_HOPPER_ATTENTION, _BLACKWELL_ATTENTION = ({"attention_shapes": (published_rates(f), ATTENTION_SHAPES_SOURCES[f])}
                                           for f in ("hopper", "blackwell"))
H200_CALIBRATION = _with(_H200, _NVLINK4, _NDR, _LATENCY, _GH100_SMS, _HOPPER_ATTENTION)
H100_CALIBRATION = _with(
    _H200, _NVLINK4, _NDR, _LATENCY, _GH100_SMS, _HOPPER_ATTENTION,
    {name: (getattr(_H200, name), _SAME_CHIP.format(_H200.sources[name]))
     for name in (*TENSOR_CORE_CURVES, "vector_flops", "kernel_overhead_s", "memory_overlap")},
    {"memory_Bps": (3350e9 * _HBM_FRACTION,
                    f"the H100 SXM's published 3.35 TB/s HBM3 at the fraction the H200's copies reach of its "
                    f"4.8 TB/s ({_HBM_FRACTION:.3f}; {_H200.sources['memory_Bps']})")},
)

# B200: no measurements. Its curves are the H200's with the FLOP anchors scaled by the peak ratio: a kernel
# reaches the fraction of its peak that an H200 kernel of the same duration reaches (launch-bound small kernels
# stay launch-bound; large ones at the H200's fraction); not measured on a B200.
_B200_BF16, _B200_FP8, _B200_FP32, _HOPPER_FP32 = 2250e12, 4500e12, 80e12, 66.9e12


def _scaled(curve, ratio: float):
    return tuple((f * ratio, e) for f, e in curve)


_B200_ASSUMED = ("assumed: the H200's fitted curve at its stated tensor-core clock (1830/1980 of the fractions "
                 "measured at 1,980 MHz) with its FLOP anchors scaled by the B200's peak over the H200's "
                 "({:.2f}x; a kernel reaches the fraction of its stated peak an H200 kernel of the same duration "
                 "reaches), not measured on a B200")
B200_CALIBRATION = _with(
    _H200, _NVLINK5, _NDR, _LATENCY, _B200_SMS, _BLACKWELL_ATTENTION,
    {name: (_scaled(getattr(_H200, name), (_B200_FP8 / 1979e12) if name.startswith("fp8") else _B200_BF16 / 989e12),
            _B200_ASSUMED.format((_B200_FP8 / 1979e12) if name.startswith("fp8") else _B200_BF16 / 989e12))
     for name in ("matmul_curve", "matmul_dgrad_curve", "matmul_wgrad_curve", "fp8_matmul_curve", "attention_curve",
                  "attention_backward_curve")},
    {"vector_flops": (_H200.vector_flops * _B200_FP32 / _HOPPER_FP32,
                      "assumed: the H200's fitted normalisation rate scaled by the CUDA cores' published FP32 peaks, "
                      "80 TFLOP/s on the HGX B200 against 66.9 on the H100/H200 SXM (NVIDIA datasheets, as "
                      "tabulated at glennklockwood.com/garden/processors/B200 and /h100)"),
     "memory_Bps": (8000e9 * _HBM_FRACTION,
                    f"the B200's published 8 TB/s HBM3e at the fraction the H200's copies reach of its 4.8 TB/s "
                    f"({_HBM_FRACTION:.3f}); assumed, not measured on a B200"),
     "kernel_overhead_s": (_H200.kernel_overhead_s,
                           f"assumed: the H200's ({_H200.sources['kernel_overhead_s']})"),
     "memory_overlap": (_H200.memory_overlap, _H200.sources["memory_overlap"])},
)

_A100_HBM = A100_FITTED.memory_Bps / A100_HBM_BPS
_A100_SMS = {"sms": (108, "published: 108 SMs on the A100 (A100 whitepaper, Table 1)")}
CALIBRATIONS: dict[str, Efficiency] = {
    "dgx-a100": _with(A100_FITTED, _A100_SMS),
    "dgx-a100-40gb": _with(derated(A100_FITTED, 1555e9 * _A100_HBM, "A100 40 GB HBM2, 1,555 GB/s"), _A100_SMS),
    "dgx-h100": H100_CALIBRATION,
    "dgx-h200": H200_CALIBRATION,
    "dgx-b200": B200_CALIBRATION,
    "paper-1080ti": GTX1080TI_FP32,
    "paper-2080ti": RTX2080TI_FP32,
}


def calibrated_by_default(name: str | None) -> bool:
    """Whether preset ``name`` is priced by its calibration unless asked otherwise: today's presets that have
    one (the DGX A100, H100, H200 and B200); the paper's presets (``paper-*``) keep the paper's peak-rate model
    for the paper's results, as does hardware without a calibration."""
    return name in CALIBRATIONS and not str(name).startswith("paper")


def preset(name: str, devices: int | None = None, *, calibrated: bool | None = None, calibration=None) -> Cluster:
    """The preset cluster ``name``, optionally with another device count.

    ``calibrated`` attaches what its kernels and links achieve
    (:data:`CALIBRATIONS`); ``paper-model`` and ``dgx1-v100`` have none.
    ``None`` (the default): :func:`calibrated_by_default`; ``False``: the
    paper's peak rates and nominal bandwidths.
    ``calibration`` (a :class:`~pase.hardware.calibration.Calibration` or the
    path of a calibration file, ``pase calibrate``'s) replaces the device: its
    peaks, memory and kernel figures from the file, the topology from the
    preset, links as measured in the file or else as the preset's calibration
    has them (:meth:`~pase.hardware.calibration.Calibration.apply`); it
    implies ``calibrated``.

    Raises
    ------
    ClusterError
        No preset has that name, ``calibrated`` is asked of one without a
        calibration, or the calibration file is refused (named field).
    """
    try:
        cluster = PRESETS[name]
    except KeyError:
        hint = did_you_mean(name, PRESETS)
        raise ClusterError(f"unknown cluster preset {name!r}" + (f" ({hint})" if hint else "")
                           + f"; choose one of {', '.join(PRESETS)}") from None
    if calibrated is None:
        calibrated = calibrated_by_default(name)
    if calibrated:
        if name not in CALIBRATIONS:
            raise ClusterError(f"preset {name!r} has no calibration; calibrated presets: {', '.join(CALIBRATIONS)}")
        cluster = replace(cluster, efficiency=CALIBRATIONS[name])
    if calibration is not None:
        if cluster.efficiency is None and name in CALIBRATIONS:
            cluster = replace(cluster, efficiency=CALIBRATIONS[name])
        if not isinstance(calibration, Calibration):
            calibration = load_calibration(calibration)
        cluster = calibration.apply(cluster)
    return cluster if devices is None else cluster.with_devices(devices)
