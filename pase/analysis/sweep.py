"""Sweeps: PaSE's plan and every applicable baseline at each point of a grid of clusters.

:func:`sweep` varies the cluster (GPU type, devices, bandwidth, FLOP rate) for
one graph; :func:`batch_sweep` also varies the batch size, building the graph
once per batch: a fixed global batch (strong scaling: the same graph at every
device count) or a fixed per-device batch (weak scaling: at ``p`` devices the
global batch is ``B * p``). :func:`training_sweep` does the same for a
language model with the 3-D search (tensor, pipeline, data and context
parallelism, microbatches, recomputation, ZeRO) and its baselines, as
``pase solve`` plans one. :func:`with_training_estimates` adds the time,
GPU-hours and cost to train on ``N`` tokens or samples to each record.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, replace
from numbers import Integral
from typing import Callable, Sequence

from pase.analysis.baselines import applicable_baselines
from pase.analysis.throughput import ThroughputError, estimate_from_rate, throughput
from pase.errors import ClusterError, GraphError
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.model.memory import InsufficientMemoryError
from pase.planner import PlanOptions, plan

__all__ = ["sweep", "batch_sweep", "training_sweep", "BATCH_MODES", "DeviceUse", "device_use", "with_training_estimates", "records_csv",
           "records_from_csv"]

# A record's ``batch_mode``: what stays fixed as the device count grows.
BATCH_MODES = ("global", "per device")


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


def _clusters(cluster: Cluster | Sequence[Cluster]) -> list[Cluster]:
    """``cluster`` as a list of GPU types; ``ClusterError`` for an empty list, a non-cluster or a repeated name."""
    clusters = [cluster] if isinstance(cluster, Cluster) else list(cluster)
    if not clusters:
        raise ClusterError("a sweep needs at least one cluster")
    bad = [c for c in clusters if not isinstance(c, Cluster)]
    if bad:
        raise ClusterError(f"a sweep's clusters must be Cluster values, got {bad[0]!r}")
    names = [c.name for c in clusters]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if len(clusters) > 1 and repeated:
        # Records tell GPU types apart by name only.
        raise ClusterError(f"the clusters compared must have distinct names; {repeated[0]!r} is given twice")
    return clusters


def sweep(
    graph: Graph,
    devices: Sequence[int],
    cluster: Cluster | Sequence[Cluster],
    *,
    bandwidths_Bps: Sequence[float] | None = None,
    peak_flops: Sequence[float] | None = None,
    options: ConfigOptions = ConfigOptions(),
    progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """Solve ``graph`` and cost every applicable baseline at each point of a grid.

    ``cluster`` is one cluster or several (GPU types side by side, such as
    ``[preset("dgx-a100"), preset("dgx-h100")]``; their names must differ).
    The grid is every combination of those clusters (outermost), ``devices``
    and, when given, ``bandwidths_Bps`` and ``peak_flops`` (which then override
    every cluster's own figure; otherwise each cluster's). The global batch is
    the graph's at every point (strong scaling). Returns plain records, one per
    point and strategy: ``cluster`` (its name), ``devices``,
    ``bandwidth_Bps``, ``peak_flops``, ``memory_capacity_bytes`` (one device's,
    None when the cluster has no limit), ``strategy`` (``"PaSE"`` or a
    baseline name), ``label``, ``cost``, ``step_time_s``, ``speedup_over_dp``,
    ``memory_per_device_bytes``, ``fits_memory`` (None when the cluster has no
    capacity), ``devices_used`` (the most devices any layer splits over, see
    :func:`device_use`) and ``idle_devices`` (``devices - devices_used``),
    ``batch_mode`` (``"global"``), ``global_batch`` (samples per step, None
    without a batch dimension) and ``batch_per_device`` (``global_batch /
    devices``, samples), the rates of :func:`pase.analysis.throughput.throughput`
    (``samples_per_s``, ``tokens_per_s`` (None without a sequence),
    ``model_flops_per_step``, ``model_flops_per_device_per_s``, ``mfu``; None at a
    0 s step) and, for PaSE, ``configs`` (layer name -> configuration). Where
    no strategy fits the cluster's memory, PaSE's record is the unconstrained
    optimum with ``fits_memory`` False. ``progress(done, total)`` is called
    after each point.

    Raises
    ------
    ClusterError
        No cluster, a repeated cluster name, or a device count, bandwidth or
        FLOP rate that is not positive.
    SearchTooLargeError
        A point's search would exceed memory (nothing is allocated for it).
    """
    grid = _grid(cluster, devices, bandwidths_Bps, peak_flops)
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
            rates = throughput(p)
            used = device_use(p).used
            record = {
                "cluster": point.name, "devices": point.devices, "bandwidth_Bps": point.bandwidth_Bps,
                "peak_flops": point.peak_flops, "memory_capacity_bytes": point.memory_bytes,
                "strategy": name, "label": p.label, "cost": p.cost, "step_time_s": p.step_time_s,
                "speedup_over_dp": p.speedup_over(dp),
                "memory_per_device_bytes": p.memory_per_device_bytes, "fits_memory": p.fits_memory,
                "devices_used": used, "idle_devices": point.devices - used,
                "batch_mode": "global", "global_batch": rates.batch,
                "batch_per_device": None if rates.batch is None else rates.batch / point.devices,
                **rates.rates(),
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
    cluster: Cluster | Sequence[Cluster],
    *,
    per_device: bool = False,
    bandwidths_Bps: Sequence[float] | None = None,
    peak_flops: Sequence[float] | None = None,
    options: ConfigOptions = ConfigOptions(),
    progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """:func:`sweep` at every batch size: the graph ``build_graph(batch)`` over the same cluster grid.

    With ``per_device`` False (strong scaling), each of ``batches`` is the
    global batch, the same at every device count. With ``per_device`` True
    (weak scaling), each is a per-device batch ``B``: at ``p`` devices the
    graph is ``build_graph(B * p)``, so the global batch doubles when the
    devices do.

    Returns the records of :func:`sweep`, batch by batch in the order of
    ``batches`` (and, per device, device count by device count), each with
    ``batch`` (the global batch the graph was built at), ``batch_mode``
    (``"global"`` or ``"per device"``) and, per device, ``per_device_batch``
    (``B``). ``progress(done, total)`` counts points over all batches
    (``total`` = batches x grid points).

    Raises
    ------
    GraphError
        ``batches`` is empty or holds a value that is not a positive integer
        (checked before anything is built or solved), or ``build_graph``
        refuses a batch (one too large, for instance).
    ClusterError, SearchTooLargeError
        As :func:`sweep`.

    Examples
    --------
    >>> from pase.models import sample
    >>> from pase.hardware.cluster import preset
    >>> build = lambda b: sample("rnnlm", batch=b, vocab=1000, hidden=64, seq=8)
    >>> records = batch_sweep(build, [16, 32], [2], preset("paper-model", devices=2))
    >>> sorted({(r["batch"], r["devices"]) for r in records})
    [(16, 2), (32, 2)]
    >>> records = batch_sweep(build, [4], [2, 4], preset("paper-model"), per_device=True)
    >>> sorted({(r["devices"], r["batch"], r["per_device_batch"]) for r in records})
    [(2, 8, 4), (4, 16, 4)]
    """
    if not batches:
        raise GraphError("a batch sweep needs at least one batch size")
    bad = [b for b in batches if isinstance(b, bool) or not isinstance(b, Integral) or b <= 0]
    if bad:
        raise GraphError(f"batch sizes must be positive integers, got {bad[0]!r}")
    batches = [int(b) for b in batches]
    # One sub-sweep per global batch: every batch over all devices, or (per device) one per batch and device.
    parts = ([(b * int(p), b, [p]) for b in batches for p in devices] if per_device
             else [(b, None, list(devices)) for b in batches])
    points_per_device = len(_clusters(cluster)) * len(bandwidths_Bps or [None]) * len(peak_flops or [None])
    total = points_per_device * len(devices) * len(batches)
    records, before = [], 0
    for batch, per_device_batch, part_devices in parts:
        # Each sub-sweep reports its own (done, total); offset it into the count over all batches.
        point_progress = None if progress is None else (
            lambda done, _total, before=before: progress(before + done, total))
        part = sweep(build_graph(batch), part_devices, cluster, bandwidths_Bps=bandwidths_Bps,
                     peak_flops=peak_flops, options=options, progress=point_progress)
        before += points_per_device * len(part_devices)
        extra = ({"batch": batch} if per_device_batch is None
                 else {"batch": batch, "batch_mode": "per device", "per_device_batch": per_device_batch})
        records += [{**r, **extra} for r in part]
    return records


def _grid(cluster, devices: Sequence[int], bandwidths_Bps: Sequence[float] | None,
          peak_flops: Sequence[float] | None) -> list[Cluster]:
    """Every point of a sweep: each cluster (``_clusters``) at each device count, link bandwidth and peak FLOP/s
    (a cluster's own where a sequence is not given)."""
    return [replace(c, devices=int(p), bandwidth_Bps=float(bw), peak_flops=float(fl))
            for c in _clusters(cluster)
            for p in devices
            for bw in (bandwidths_Bps or [c.bandwidth_Bps])
            for fl in (peak_flops or [c.peak_flops])]


def training_sweep(
    build: Callable[[int], Graph],
    devices: Sequence[int],
    cluster: Cluster | Sequence[Cluster],
    global_batch: int,
    *,
    per_device_batch: int | None = None,
    bandwidths_Bps: Sequence[float] | None = None,
    peak_flops: Sequence[float] | None = None,
    options: ConfigOptions = ConfigOptions(),
    progress: Callable[[int, int], None] | None = None,
    framework: str | None = None,
) -> list[dict]:
    """The 3-D search (:func:`pase.search.stages.search_training`, restricted to what ``framework`` runs when
    given, :mod:`pase.frameworks`) and its baselines
    (:func:`~pase.search.stages.training_baselines`) at each point of the grid of :func:`sweep`.

    ``build(batch)`` builds the language model (``pase.models.batch_builder``,
    ``pase.io.hf_config.hf_batch_builder``); the global batch is
    ``global_batch`` samples at every point (strong scaling), or with
    ``per_device_batch`` ``B``, ``B * p`` at ``p`` devices (weak scaling).
    Returns records with :func:`sweep`'s fields (``strategy`` ``"PaSE"`` for the
    search's best, then ``"data parallel"``, ``"ZeRO-3 / FSDP"``,
    ``"Megatron"``; ``devices_used`` every device, no ``configs``) and
    ``search`` (``"3d"``), ``batch`` (the global batch); ``speedup_over_dp``
    is data parallelism's modelled step over the plan's, for plans that fit
    (None for the others). Where nothing fits,
    PaSE's record has ``fits_memory`` False, ``label`` ``"nothing fits
    memory"``, ``memory_per_device_bytes`` the least any configuration needs
    and no step time, speedup or rates (None): only plans that fit are priced.
    A baseline that fits nowhere keeps its smallest-memory variant's figures,
    with ``fits_memory`` False. ``progress(done, total)`` after each point.

    Raises
    ------
    ClusterError
        As :func:`sweep`.
    ConfigurationError
        The global batch is not a positive integer.
    """
    from pase.analysis.throughput import sequence_length
    from pase.errors import ConfigurationError
    from pase.search.stages import search_training, training_baselines

    if isinstance(global_batch, bool) or not isinstance(global_batch, Integral) or global_batch < 1:
        raise ConfigurationError(f"the global batch must be a positive integer, not {global_batch!r}")
    grid = _grid(cluster, devices, bandwidths_Bps, peak_flops)
    tokens_per_sample = sequence_length(build(1))
    records = []
    for i, point in enumerate(grid):
        batch = int(global_batch) if per_device_batch is None else int(per_device_batch) * point.devices
        base = {"cluster": point.name, "devices": point.devices, "bandwidth_Bps": point.bandwidth_Bps,
                "peak_flops": point.peak_flops, "memory_capacity_bytes": point.memory_bytes,
                "devices_used": point.devices, "idle_devices": 0, "search": "3d",
                "batch_mode": "global" if per_device_batch is None else "per device", "global_batch": batch,
                "batch": batch, "batch_per_device": batch / point.devices,
                **({} if per_device_batch is None else {"per_device_batch": int(per_device_batch)})}
        cache: dict = {}
        try:
            best = search_training(build, point, batch, options=options, cache=cache, framework=framework).best
        except (InsufficientMemoryError, ConfigurationError) as exc:
            least = getattr(exc, "least_bytes", None)
            best = None
            records.append({**base, "strategy": "PaSE", "label": "nothing fits memory" if least is not None
                            else f"no configuration: {exc}", "cost": None, "step_time_s": None,
                            "speedup_over_dp": None, "memory_per_device_bytes": least or None, "fits_memory": False,
                            "samples_per_s": None, "tokens_per_s": None, "model_flops_per_step": None,
                            "model_flops_per_device_per_s": None, "mfu": None})
        plans = {} if best is None else {"PaSE": best}
        plans.update(training_baselines(build, point, batch, options=options, cache=cache))
        dp = plans.get("data parallel")
        for name, p in plans.items():
            d = p.to_dict()
            runs = p.fits_memory is not False
            records.append({
                **base, "strategy": name, "label": p.label, "cost": p.step_time_s,
                "step_time_s": p.step_time_s,
                # Against data parallelism's modelled step, which may not fit itself (as in sweep()).
                "speedup_over_dp": dp.step_time_s / p.step_time_s if dp is not None and runs and p.step_time_s
                else None,
                "memory_per_device_bytes": p.memory_per_device_bytes, "fits_memory": p.fits_memory,
                "samples_per_s": batch / p.step_time_s if p.step_time_s else None,
                "tokens_per_s": d["tokens_per_s"] if tokens_per_sample is not None else None,
                "model_flops_per_step": d.get("model_flops_per_step"),
                "model_flops_per_device_per_s": d.get("model_flops_per_device_per_s"), "mfu": p.mfu,
            })
        if progress is not None:
            progress(i + 1, len(grid))
    return records


def with_training_estimates(records: Sequence[dict], amount: float, *, unit: str = "tokens",
                            price_per_gpu_hour: float | None = None) -> list[dict]:
    """``records`` (of :func:`sweep`), each with what training on ``amount`` ``unit`` would take at its rate.

    Adds ``train_amount``, ``train_unit``, ``time_to_train_s`` (``amount /
    rate``, the rate ``tokens_per_s`` or ``samples_per_s``), ``gpu_hours``
    (``time_to_train_s * devices / 3600``: every device is paid for, idle or
    not) and ``train_cost`` (``gpu_hours * price_per_gpu_hour``, in the
    price's currency, None without a price; ``cost`` stays the plan's
    modelled cost), as :func:`pase.analysis.throughput.estimate_from_rate`; all three
    None at a 0 s step. The records given are not changed.

    Raises
    ------
    ThroughputError
        ``unit`` is not ``"tokens"`` or ``"samples"``; ``amount`` is not
        positive or the price is negative; ``"tokens"`` for a record without a
        sequence (``tokens_per_s`` None while ``samples_per_s`` is not).

    >>> r = {"devices": 2, "tokens_per_s": 1.0, "samples_per_s": 1.0}
    >>> e = with_training_estimates([r], 3600.0, price_per_gpu_hour=1.5)[0]
    >>> (e["time_to_train_s"], e["gpu_hours"], e["train_cost"])
    (3600.0, 2.0, 3.0)
    """
    if unit not in ("tokens", "samples"):
        raise ThroughputError(f"train on 'tokens' or 'samples', not {unit!r}")
    out = []
    for r in records:
        rate = r.get(f"{unit}_per_s")
        if rate is None and r.get("samples_per_s") is not None:
            raise ThroughputError(f"{r.get('label', 'a record')!r} has no {unit} per second (no sequence "
                                  "dimension): train on samples instead")
        e = estimate_from_rate(amount, rate, r["devices"], price_per_gpu_hour, unit=unit)
        out.append({**r, "train_amount": e.amount, "train_unit": unit, "time_to_train_s": e.time_s,
                    "gpu_hours": e.gpu_hours, "train_cost": e.cost})
    return out
