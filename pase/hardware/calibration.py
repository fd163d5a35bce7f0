"""Calibration files: what one GPU's kernels and links were measured to achieve, as data with its sources.

``pase calibrate`` (:mod:`pase.calibrate`) writes one; ``--calibration FILE``
on the CLI, ``preset(..., calibration=...)`` and the app's sidebar read it.
A file is JSON::

    {"schema": "pase-calibration", "schema_version": 1,
     "device": "NVIDIA H200", "date": "2026-12-04",
     "environment": {"driver": "580.159.04", "torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.27.7"},
     "peak_flops": 989e12, "fp8_peak_flops": 1979e12, "memory_bytes": 141e9,
     "efficiency": {... Efficiency.to_dict(), its sources "measured ..." ...},
     "links": {"intra": {"bus_Bps": 3.6e11, "latency_s": 6e-6, "ranks": [8]}},
     "measurements": {"gemm_bf16": {"rows": [...]}, ...},
     "fit": {"gemm_fwd": {"median_abs_error": 0.02, "max_abs_error": 0.28, "rows": 199}, ...}}

The efficiency's fractions of peak are of the file's ``peak_flops`` (and
``fp8_peak_flops``), so applying a calibration to a cluster
(:meth:`Calibration.apply`) takes the device from the file (its peaks,
memory and kernel figures) and the topology from the cluster (device count,
nodes, link bandwidths); measured links become the fraction of the cluster's
nominal link bandwidth their bus bandwidth reaches.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pase.errors import ClusterError
from pase.hardware.efficiency import Efficiency
from pase.limits import MAX_BANDWIDTH_BPS, MAX_LATENCY_S, MAX_MEMORY_BYTES, MAX_PEAK_FLOPS, MIN_MEMORY_BYTES, MIN_PEAK_FLOPS

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Calibration", "load_calibration", "loads_calibration", "save_calibration"]

SCHEMA = "pase-calibration"
SCHEMA_VERSION = 1
# Files beyond this are not calibrations (the H200's, with every raw timing, is about 60 kB).
MAX_FILE_BYTES = 16_000_000
_SCOPES = {"intra": ("intra_efficiency", "intra_latency_s"), "inter": ("inter_efficiency", "inter_latency_s")}


@dataclass(frozen=True)
class Calibration:
    """One GPU's measured calibration (the module docstring), as a calibration file holds it.

    Parameters
    ----------
    efficiency : Efficiency
        The fitted kernel figures (fractions of ``peak_flops`` and ``fp8_peak_flops``); its link figures are
        not used (``links`` are).
    peak_flops, fp8_peak_flops : float, float or None
        The device's dense BF16 and FP8 peaks (FLOP/s) the fractions are of; ``None``: no FP8.
    device, date : str
        The GPU's name and the measurement's date (ISO).
    links : dict
        Scope (``"intra"``, ``"inter"``) -> ``{"bus_Bps": bytes/s, "latency_s": s per collective step,
        "ranks": [...]}``, for the scopes measured.
    environment : dict
        Driver and library versions (words).
    memory_bytes : float or None
        The device's memory, if recorded.
    measurements : dict
        The raw timings (sections of :data:`pase.calibrate.fit.SECTIONS`).
    fit : dict
        How well the figures reproduce the timings, per section.
    origin : str
        Where this calibration was read from (a path), for messages; not saved.
    """

    efficiency: Efficiency
    peak_flops: float
    fp8_peak_flops: float | None
    device: str
    date: str
    links: dict = field(default_factory=dict, compare=False)
    environment: dict = field(default_factory=dict, compare=False)
    memory_bytes: float | None = None
    measurements: dict = field(default_factory=dict, compare=False, repr=False)
    fit: dict = field(default_factory=dict, compare=False, repr=False)
    origin: str = field(default="", compare=False)

    @property
    def source(self) -> str:
        """In words: where the figures come from (``measured on NVIDIA H200, 2026-12-04 (driver ..., torch ...)``)."""
        env = ", ".join(f"{k} {v}" for k, v in self.environment.items() if v)
        where = f", {self.origin}" if self.origin else ""
        return f"measured on {self.device}, {self.date}{f' ({env})' if env else ''}{where}"

    def apply(self, cluster):
        """``cluster`` (a :class:`~pase.hardware.cluster.Cluster`, which imports this module) with this device:
        its peaks, memory (when recorded) and kernel figures from the file, its topology kept; measured links
        set its link efficiencies and latencies (a bus bandwidth above the cluster's nominal one counts as 1),
        unmeasured ones keep the cluster's calibration's (or 1 and 0), as does an SM count the file lacks."""
        base = cluster.efficiency
        changes: dict[str, Any] = {}
        sources = dict(self.efficiency.sources)
        nominal = {"intra": cluster.bandwidth_Bps, "inter": cluster.network_bandwidth_Bps}
        for scope, (eff_name, lat_name) in _SCOPES.items():
            link = self.links.get(scope)
            if link is not None:
                changes[eff_name] = min(1.0, link["bus_Bps"] / nominal[scope])
                changes[lat_name] = link["latency_s"]
                sources[eff_name] = (f"{self.source}: NCCL collectives' bus bandwidth {link['bus_Bps'] / 1e9:.0f} GB/s "
                                     f"of the cluster's {nominal[scope] / 1e9:g} GB/s")
                sources[lat_name] = f"{self.source}: fitted with the bus bandwidth"
            elif base is not None:
                changes[eff_name], changes[lat_name] = getattr(base, eff_name), getattr(base, lat_name)
                for name in (eff_name, lat_name):
                    sources[name] = base.sources.get(name, "the cluster's calibration")
            else:
                changes[eff_name], changes[lat_name] = 1.0, 0.0
                for name in (eff_name, lat_name):
                    sources[name] = "not measured: nominal bandwidth, no latency"
        if self.efficiency.sms is None and base is not None and base.sms is not None:  # a file that did not record it
            changes["sms"] = base.sms
            sources["sms"] = base.sources.get("sms", "the cluster's calibration")
        efficiency = replace(self.efficiency, sources=sources, **changes)
        device = {"peak_flops": self.peak_flops, "fp8_peak_flops": self.fp8_peak_flops, "efficiency": efficiency}
        if self.memory_bytes is not None:
            device["memory_bytes"] = self.memory_bytes
        return replace(cluster, **device)

    def to_dict(self) -> dict:
        """The file's JSON object (the module docstring)."""
        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "device": self.device, "date": self.date,
                "environment": dict(self.environment), "peak_flops": self.peak_flops,
                "fp8_peak_flops": self.fp8_peak_flops, "memory_bytes": self.memory_bytes,
                "efficiency": self.efficiency.to_dict(), "links": self.links, "measurements": self.measurements,
                "fit": self.fit}

    @classmethod
    def from_dict(cls, data: Any, origin: str = "") -> "Calibration":
        """The calibration a file's JSON object holds.

        Raises
        ------
        ClusterError
            Not a pase calibration, another schema version, or a missing or
            implausible field (a fraction above 1, a negative bandwidth...),
            each naming the field.
        """
        where = f"{origin}: " if origin else ""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ClusterError(f"{where}not a pase calibration file (no \"schema\": \"{SCHEMA}\")")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ClusterError(f"{where}schema_version {version!r} is not the one this pase reads ({SCHEMA_VERSION}); "
                               "run pase calibrate again with this version")
        peak = _number(data, "peak_flops", MIN_PEAK_FLOPS, MAX_PEAK_FLOPS, where)
        fp8 = None if data.get("fp8_peak_flops") is None else _number(data, "fp8_peak_flops", MIN_PEAK_FLOPS,
                                                                       MAX_PEAK_FLOPS, where)
        memory = None if data.get("memory_bytes") is None else _number(data, "memory_bytes", MIN_MEMORY_BYTES,
                                                                        MAX_MEMORY_BYTES, where)
        for name in ("device", "date"):
            if not isinstance(data.get(name), str) or not data[name].strip():
                raise ClusterError(f"{where}field {name!r} must be a non-empty string")
        try:
            efficiency = Efficiency.from_dict(data.get("efficiency"))
        except ClusterError as exc:
            raise ClusterError(f"{where}efficiency: {exc}") from None
        links = data.get("links", {})
        if not isinstance(links, dict) or set(links) - set(_SCOPES):
            raise ClusterError(f"{where}field 'links' must map 'intra' and/or 'inter' to measured links")
        for scope, link in links.items():
            if not isinstance(link, dict):
                raise ClusterError(f"{where}links.{scope} must be an object")
            _number(link, "bus_Bps", 1.0, MAX_BANDWIDTH_BPS, f"{where}links.{scope}.")
            _number(link, "latency_s", 0.0, MAX_LATENCY_S, f"{where}links.{scope}.")
        for name in ("environment", "measurements", "fit"):
            if not isinstance(data.get(name, {}), dict):
                raise ClusterError(f"{where}field {name!r} must be an object")
        return cls(efficiency, peak, fp8, data["device"], data["date"], links, dict(data.get("environment", {})),
                   memory, dict(data.get("measurements", {})), dict(data.get("fit", {})), origin)


def _number(data: dict, name: str, low: float, high: float, where: str) -> float:
    """``data[name]`` as a float in ``[low, high]``; ``ClusterError`` naming ``where + name`` otherwise."""
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high) or math.isnan(value):
        raise ClusterError(f"{where}field {name!r} must be a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


def loads_calibration(text: str, origin: str = "") -> Calibration:
    """The calibration in JSON ``text`` (``ClusterError``, one line, if it is not one)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ClusterError(f"{origin + ': ' if origin else ''}not a JSON calibration file ({exc})") from None
    return Calibration.from_dict(data, origin)


def load_calibration(path: str | os.PathLike) -> Calibration:
    """The calibration file at ``path``.

    Raises
    ------
    ClusterError
        The file cannot be read, is too large, is not JSON, or is refused by
        :meth:`Calibration.from_dict` (named field).
    """
    p = Path(path)
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise ClusterError(f"{p}: {p.stat().st_size} bytes is too large for a calibration file")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterError(f"cannot read calibration file {str(p)!r}: {getattr(exc, 'strerror', None) or exc}") from None
    return loads_calibration(text, str(p))


def save_calibration(calibration: Calibration, path: str | os.PathLike) -> None:
    """Write ``calibration`` to ``path`` whole or not at all: to a temporary file beside it, then renamed.

    Raises ``ClusterError`` (one line) when the folder cannot be written.
    """
    p = Path(path)
    text = json.dumps(calibration.to_dict(), indent=1, allow_nan=False) + "\n"
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        umask = os.umask(0)  # mkstemp makes the file private; a calibration file is ordinary data
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise ClusterError(f"cannot write calibration file {str(p)!r}: {exc.strerror or exc}") from None
