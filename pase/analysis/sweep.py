"""Sweeps: PaSE's plan and every applicable baseline at each point of a grid of clusters.

:func:`sweep` varies the cluster (devices, bandwidth, FLOP rate) for one
graph; :func:`batch_sweep` also varies the batch size, building the graph once
per batch.
"""

from __future__ import annotations

from dataclasses import replace
from numbers import Integral
from typing import Callable, Sequence

from pase.analysis.baselines import applicable_baselines
from pase.errors import GraphError
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.model.memory import InsufficientMemoryError
from pase.planner import PlanOptions, plan

__all__ = ["sweep", "batch_sweep"]


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
    capacity) and, for PaSE, ``configs`` (layer name -> configuration). Where
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
