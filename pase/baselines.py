"""Baseline strategies, partial user plans and sweeps, all under the search's cost model.

A baseline is a rule that picks a configuration for every layer: data
parallelism, parameter parallelism, OWT for CNNs, the Mesh-TensorFlow hybrid
and Megatron-style tensor parallelism for Transformers, GNMT-style layer
pipelining for LSTMs. Every rule only uses split factors the
:class:`~pase.configs.ConfigOptions` allow, so its strategy lies in the
search space and the search's optimum can never cost more.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Sequence

from pase.cluster import Cluster
from pase.configs import ConfigOptions, split_factors
from pase.graph import Graph, Layer
from pase.memory import InsufficientMemoryError
from pase.planner import Plan, evaluate, plan

__all__ = [
    "Baseline",
    "BASELINES",
    "data_parallel_config",
    "data_parallel",
    "evaluate_strategy",
    "applicable_baselines",
    "baseline_plan",
    "sweep",
]

BATCH = "b"
# Dimensions the Transformer baselines split n ways: vocabulary, attention heads,
# feed-forward hidden units (the paper's Table II letters).
MODEL_DIMS = ("v", "h", "e")


def _largest(layer: Layer, dim: str, at_most: int, options: ConfigOptions) -> int:
    """The largest allowed split of ``dim`` not above ``at_most`` (1 if ``dim`` is absent)."""
    if dim not in layer.dims or at_most < 1:
        return 1
    return max(f for f in split_factors(layer, dim, at_most, options))


def _config(layer: Layer, splits: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(splits.get(d, 1) for d in layer.dims)


def data_parallel_config(layer: Layer, devices: int, options: ConfigOptions = ConfigOptions()) -> tuple[int, ...]:
    """Split the batch dimension ``devices`` ways, or the largest allowed split below that.

    Layers without a batch dimension are replicated.
    """
    return _config(layer, {BATCH: _largest(layer, BATCH, devices, options)})


def _parameter_parallel_config(layer: Layer, devices: int, options: ConfigOptions) -> tuple[int, ...]:
    model = [d for d in layer.dims if d != BATCH and len(split_factors(layer, d, devices, options)) > 1]
    if not model:
        return _config(layer, {})
    largest = max(model, key=lambda d: layer.size_of[d])
    return _config(layer, {largest: _largest(layer, largest, devices, options)})


def _hybrid_config(layer: Layer, m: int, n: int, options: ConfigOptions, also: Sequence[str] = ()) -> tuple[int, ...]:
    """Batch ``m`` ways and the first model dimension present ``n`` ways."""
    model = next((d for d in (*MODEL_DIMS, *also) if d in layer.dims and _largest(layer, d, n, options) == n), None)
    splits = {BATCH: _largest(layer, BATCH, m, options)}
    if model is not None:
        splits[model] = n
    return _config(layer, splits)


def _pairs(p: int) -> list[tuple[int, int]]:
    return [(p // n, n) for n in range(1, p + 1) if p % n == 0]


def _ops(graph: Graph) -> set[str]:
    return {layer.op for layer in graph}


def _is_attention(graph: Graph) -> bool:
    return any(layer.op == "Einsum" and "h" in layer.dims for layer in graph)


@dataclass(frozen=True)
class Baseline:
    """A named rule: ``candidates(graph, devices, options)`` yields (label, strategy) pairs; the cheapest is reported."""

    name: str
    description: str
    applies: Callable[[Graph], bool]
    candidates: Callable[[Graph, int, ConfigOptions], Iterable[tuple[str, dict]]]


def _dp(graph, p, options):
    yield "data parallel", {l.name: data_parallel_config(l, p, options) for l in graph}


def _pp(graph, p, options):
    yield "parameter parallel", {l.name: _parameter_parallel_config(l, p, options) for l in graph}


def _owt(graph, p, options):
    # Krizhevsky's "one weird trick": data-parallel convolutions, model-parallel
    # fully connected layers (out-channels split) and everything after them.
    strategy, model_part = {}, False
    for layer in graph:
        model_part = model_part or layer.op == "FullyConnected"
        if model_part:
            strategy[layer.name] = _config(layer, {"n": _largest(layer, "n", p, options)})
        else:
            strategy[layer.name] = data_parallel_config(layer, p, options)
    yield "OWT", strategy


def _mesh_tf(graph, p, options):
    for m, n in _pairs(p):
        yield f"Mesh-TF {m}x{n}", {l.name: _hybrid_config(l, m, n, options) for l in graph}


def _megatron(graph, p, options):
    # Tensor parallelism of degree t (heads, feed-forward hidden and vocabulary
    # split t ways: column- then row-parallel pairs) times data parallelism p / t,
    # with Megatron's sequence parallelism in the norms and residual adds.
    for dp, t in _pairs(p):
        strategy = {}
        for l in graph:
            if any(d in l.dims for d in MODEL_DIMS):
                strategy[l.name] = _hybrid_config(l, dp, t, options)
            else:
                strategy[l.name] = _config(l, {BATCH: _largest(l, BATCH, dp, options), "s": _largest(l, "s", t, options)})
        yield f"Megatron dp{dp} x tp{t}", strategy


def _gnmt(graph, p, options):
    # GNMT-style: each LSTM layer on its own devices (pipelined), batch split over the rest.
    k = next(_largest(l, "l", p, options) for l in graph if l.op == "LSTM")
    dp = p // k
    yield f"GNMT {k} stages x dp{dp}", {
        l.name: _config(l, {BATCH: _largest(l, BATCH, dp, options), "l": k if l.op == "LSTM" else 1}) for l in graph
    }


BASELINES: dict[str, Baseline] = {
    b.name: b
    for b in (
        Baseline("data parallel", "batch split across all devices; weights replicated", lambda g: True, _dp),
        Baseline("parameter parallel", "each layer splits its largest model dimension", lambda g: True, _pp),
        Baseline("OWT", "data-parallel convolutions, parameter-parallel fully connected layers (CNNs)",
                 lambda g: {"Conv2D", "FullyConnected"} <= _ops(g), _owt),
        Baseline("Mesh-TF", "batch m-way x vocabulary/heads/feed-forward n-way, best m x n = p (Transformers)",
                 _is_attention, _mesh_tf),
        Baseline("Megatron", "tensor parallel (column/row pairs, heads) x data parallel, best degree (Transformers)",
                 _is_attention, _megatron),
        Baseline("GNMT", "LSTM layers pipelined over devices, batch split over the rest (RNNs)",
                 lambda g: "LSTM" in _ops(g), _gnmt),
    )
}


def evaluate_strategy(
    graph: Graph, cluster: Cluster, strategy: Mapping[str, Sequence[int]], *,
    options: ConfigOptions = ConfigOptions(), label: str = "user",
) -> Plan:
    """Cost a complete or partial strategy; layers it leaves out are data parallel.

    Raises
    ------
    GraphError
        The strategy names a layer the graph does not have.
    ConfigurationError
        A configuration is invalid (wrong length, a factor that does not
        divide its dimension, more devices than the cluster has).
    """
    full = {l.name: data_parallel_config(l, cluster.devices, options) for l in graph}
    full.update({name: tuple(cfg) for name, cfg in strategy.items()})
    return evaluate(graph, cluster, full, label=label)


def baseline_plan(name: str, graph: Graph, cluster: Cluster, options: ConfigOptions = ConfigOptions()) -> Plan:
    """The cheapest strategy of baseline ``name`` (all its variants tried), as a Plan labelled with the variant.

    Raises
    ------
    KeyError
        No baseline has that name.
    ValueError
        The baseline does not apply to this graph.
    """
    baseline = BASELINES[name]
    if not baseline.applies(graph):
        raise ValueError(f"baseline {name!r} does not apply to {graph.name!r}")
    plans = [evaluate(graph, cluster, s, label=label) for label, s in baseline.candidates(graph, cluster.devices, options)]
    return min(plans, key=lambda p: p.cost)


def data_parallel(graph: Graph, cluster: Cluster, options: ConfigOptions = ConfigOptions()) -> Plan:
    """Data parallelism (:func:`data_parallel_config` for every layer) as a Plan."""
    return baseline_plan("data parallel", graph, cluster, options)


def applicable_baselines(graph: Graph, cluster: Cluster, options: ConfigOptions = ConfigOptions()) -> dict[str, Plan]:
    """Every baseline that applies to ``graph``, name -> its best Plan."""
    return {name: baseline_plan(name, graph, cluster, options) for name, b in BASELINES.items() if b.applies(graph)}


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
            best = plan(graph, point, options=options)
        except InsufficientMemoryError:
            # Nothing fits at this point: report the unconstrained optimum, flagged by fits_memory.
            best = plan(graph, point, options=options, memory_limit_bytes=None)
        others = applicable_baselines(graph, point, options)
        dp_time = others["data parallel"].step_time_s
        for name, p in [("PaSE", best), *others.items()]:
            record = {
                "devices": point.devices, "bandwidth_Bps": point.bandwidth_Bps, "peak_flops": point.peak_flops,
                "strategy": name, "label": p.label, "cost": p.cost, "step_time_s": p.step_time_s,
                "speedup_over_dp": dp_time / p.step_time_s,
                "memory_per_device_bytes": p.memory_per_device_bytes, "fits_memory": p.fits_memory,
            }
            if name == "PaSE":
                record["configs"] = {k: list(v) for k, v in p.strategy.items()}
            records.append(record)
        if progress is not None:
            progress(i + 1, len(grid))
    return records
