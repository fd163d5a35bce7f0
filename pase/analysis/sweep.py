"""Sweeps: PaSE's plan and every applicable baseline at each point of a grid of clusters.

:func:`sweep` varies the cluster (devices, bandwidth, FLOP rate) for one
graph; :func:`batch_sweep` also varies the batch size, building the graph once
per batch.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, replace
from numbers import Integral
from typing import Callable, Sequence

from pase.analysis.baselines import applicable_baselines
from pase.analysis.throughput import throughput
from pase.errors import GraphError
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.model.memory import InsufficientMemoryError
from pase.planner import PlanOptions, plan

__all__ = ["sweep", "batch_sweep", "DeviceUse", "device_use", "records_csv", "records_from_csv"]


@dataclass(frozen=True)
class DeviceUse:
    """How many of a cluster's devices a plan's layers split over.

    ``devices``: the cluster's; ``used``: the most any layer splits over (the
    product of its configuration); ``full_fraction``: the fraction of layers
    that split over all ``devices``. A layer over fewer devices leaves the rest
    idle (they replicate its work, e.g. data parallelism with more devices than
    the batch).
    """

    devices: int
    used: int
    full_fraction: float

    @property
    def idle(self) -> int:
        """Devices no layer splits over (0 when some layer uses them all)."""
        return self.devices - self.used


def device_use(plan) -> DeviceUse:
    """The :class:`DeviceUse` of a :class:`pase.planner.Plan` (its layers' ``devices`` against the cluster's).

    Examples
    --------
    >>> from pase import ops as L
    >>> from pase.hardware.cluster import Cluster
    >>> from pase.planner import evaluate
    >>> g = Graph("one")
    >>> g.add_layer(L.fully_connected("fc", b=4, n=8, c=8))
    >>> use = device_use(evaluate(g, Cluster(devices=8, peak_flops=1e12, bandwidth_Bps=1e9), {"fc": (4, 1, 1)}))
    >>> (use.used, use.idle, use.full_fraction)
    (4, 4, 0.0)
    """
    p = int(plan.cluster.devices)
    used = [min(int(layer.devices), p) for layer in plan.layers]
    if not used:
        return DeviceUse(p, p, 1.0)
    return DeviceUse(p, max(used), sum(u == p for u in used) / len(used))


def records_csv(records: Sequence[dict]) -> str:
    """Sweep records as CSV text: one row per record, every field a column (``configs`` as JSON)."""
    fields = list(dict.fromkeys(k for r in records for k in r))
    out = io.StringIO()
    writer = csv.DictWriter(out, fields, lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else ("" if v is None else v)
                         for k, v in r.items()})
    return out.getvalue()


def records_from_csv(text: str) -> list[dict]:
    """:func:`records_csv` read back: numbers as numbers, ``configs`` as a dict, empty cells as None."""
    def value(key: str, cell: str):
        if cell == "":
            return None
        if key == "configs":
            return json.loads(cell)
        if cell in ("True", "False"):
            return cell == "True"
        for kind in (int, float):
            try:
                return kind(cell)
            except ValueError:
                pass
        return cell

    # Only PaSE's records have configs: an empty configs cell is a record without them.
    return [{k: value(k, v) for k, v in row.items() if not (k == "configs" and v == "")}
            for row in csv.DictReader(io.StringIO(text))]


def sweep(
    graph: Graph,
    devices: Sequence[int],
    cluster: Cluster,
    *,
    bandwidths_Bps: Sequence[float] | None = None,
    peak_flops: Sequence[float] | None = None,
    options: ConfigOptions = ConfigOptions(),
    progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """Solve ``graph`` and cost every applicable baseline at each point of a grid.

    The grid is every combination of ``devices`` and, when given,
    ``bandwidths_Bps`` and ``peak_flops`` (otherwise the cluster's). Returns
    plain records, one per point and strategy: ``devices``,
    ``bandwidth_Bps``, ``peak_flops``, ``strategy`` (``"PaSE"`` or a baseline
    name), ``label``, ``cost``, ``step_time_s``, ``speedup_over_dp``,
    ``memory_per_device_bytes``, ``fits_memory`` (None when the cluster has no
    capacity), ``devices_used`` (the most devices any layer splits over, see
    :func:`device_use`), the rates of :func:`pase.analysis.throughput.throughput`
    (``samples_per_s``, ``tokens_per_s`` (None without a sequence),
    ``model_flops_per_step``, ``model_flops_per_device_per_s``, ``mfu``; None at a
    0 s step) and, for PaSE, ``configs`` (layer name -> configuration). Where
    no strategy fits the cluster's memory, PaSE's record is the unconstrained
    optimum with ``fits_memory`` False. ``progress(done, total)`` is called
    after each point.

    Raises
    ------
    ClusterError
        A device count, bandwidth or FLOP rate is not positive.
    SearchTooLargeError
        A point's search would exceed memory (nothing is allocated for it).
    """
    grid = [
        replace(cluster, devices=int(p), bandwidth_Bps=float(bw), peak_flops=float(fl))
        for p in devices
        for bw in (bandwidths_Bps or [cluster.bandwidth_Bps])
        for fl in (peak_flops or [cluster.peak_flops])
    ]
    records = []
    for i, point in enumerate(grid):
        try:
            best = plan(graph, point, PlanOptions(configs=options))
        except InsufficientMemoryError:
            # Nothing fits at this point: report the unconstrained optimum, flagged by fits_memory.
            best = plan(graph, point, PlanOptions(configs=options, memory_limit_bytes=None))
        others = applicable_baselines(graph, point, options)
        dp = others["data parallel"]
        for name, p in [("PaSE", best), *others.items()]:
            record = {
                "devices": point.devices, "bandwidth_Bps": point.bandwidth_Bps, "peak_flops": point.peak_flops,
                "strategy": name, "label": p.label, "cost": p.cost, "step_time_s": p.step_time_s,
                "speedup_over_dp": p.speedup_over(dp),
                "memory_per_device_bytes": p.memory_per_device_bytes, "fits_memory": p.fits_memory,
                "devices_used": device_use(p).used,
                **throughput(p).rates(),
            }
            if name == "PaSE":
                record["configs"] = {k: list(v) for k, v in p.strategy.items()}
            records.append(record)
        if progress is not None:
            progress(i + 1, len(grid))
    return records


def batch_sweep(
    build_graph: Callable[[int], Graph],
    batches: Sequence[int],
    devices: Sequence[int],
    cluster: Cluster,
    *,
    bandwidths_Bps: Sequence[float] | None = None,
    peak_flops: Sequence[float] | None = None,
    options: ConfigOptions = ConfigOptions(),
    progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """:func:`sweep` at every batch size: the graph ``build_graph(batch)`` over the same cluster grid.

    Returns the records of :func:`sweep`, batch by batch in the order of
    ``batches``, each with a ``batch`` field. ``progress(done, total)`` counts
    points over all batches (``total`` = batches x grid points).

    Raises
    ------
    GraphError
        ``batches`` is empty or holds a value that is not a positive integer
        (checked before anything is built or solved), or ``build_graph``
        refuses a batch.
    ClusterError, SearchTooLargeError
        As :func:`sweep`.

    Examples
    --------
    >>> from pase.models import sample
    >>> from pase.hardware.cluster import preset
    >>> records = batch_sweep(lambda b: sample("rnnlm", batch=b, vocab=1000, hidden=64, seq=8), [16, 32], [2],
    ...                       preset("paper-model", devices=2))
    >>> sorted({(r["batch"], r["devices"]) for r in records})
    [(16, 2), (32, 2)]
    """
    if not batches:
        raise GraphError("a batch sweep needs at least one batch size")
    bad = [b for b in batches if isinstance(b, bool) or not isinstance(b, Integral) or b <= 0]
    if bad:
        raise GraphError(f"batch sizes must be positive integers, got {bad[0]!r}")
    batches = [int(b) for b in batches]
    records = []
    for i, batch in enumerate(batches):
        # Each batch's sweep reports its own (done, total); offset it into the count over all batches.
        point_progress = None if progress is None else (
            lambda done, total, i=i: progress(i * total + done, total * len(batches)))
        part = sweep(build_graph(batch), devices, cluster, bandwidths_Bps=bandwidths_Bps, peak_flops=peak_flops,
                     options=options, progress=point_progress)
        records += [{**r, "batch": batch} for r in part]
    return records
