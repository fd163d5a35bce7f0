"""Baseline strategies as pure rules: a configuration for every layer, nothing costed.

A baseline is a rule that picks a configuration for every layer: data
parallelism, parameter parallelism, OWT for CNNs, the Mesh-TensorFlow hybrid
and Megatron-style tensor parallelism for Transformers, GNMT-style layer
pipelining for LSTMs. Every rule only uses split factors the
:class:`~pase.ir.configs.ConfigOptions` allow, so its strategy lies in the
search space and the search's optimum can never cost more. Costing them is
:mod:`pase.analysis.baselines`' job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from pase.errors import ConfigurationError
from pase.ir.configs import ConfigOptions, split_factors
from pase.ir.graph import Graph, Layer

__all__ = [
    "Baseline",
    "BASELINES",
    "data_parallel_config",
    "tensor_parallel_strategy",
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


def tensor_parallel_strategy(graph: Graph, tensor: int, context: int = 1,
                             sequence_parallel: bool = False) -> dict[str, tuple[int, ...]]:
    """Megatron-LM's layer splits on one group of ``tensor x context`` devices (one pipeline stage's replica).

    Tensor parallelism splits the first model dimension a layer has
    (vocabulary ``v``, heads ``h``, feed-forward ``e``) ``tensor`` ways:
    column- then row-parallel products, heads split, a vocabulary-parallel
    embedding and loss. Context parallelism splits the sequence ``s`` of
    every layer ``context`` ways (a key dimension ``k`` stays whole, so keys
    and values are all-gathered). Sequence parallelism also splits ``s``
    ``tensor`` ways in the layers without a model dimension (norms, dropouts,
    residual adds); otherwise they are replicated over the tensor group. A
    mixture-of-experts layer (``MoEExperts``) follows its router's tokens:
    its slots split as the router's sequence; how its experts are laid out
    over devices (expert and expert-tensor parallelism, ETP = ``tensor`` by
    default as in Megatron-Core) is :mod:`pase.model.experts`'. A
    vocabulary ``tensor`` does not divide stays whole (Megatron pads it to a
    multiple instead; GPT-2's 50,257).

    Raises
    ------
    ConfigurationError
        A split does not divide the dimension it splits (heads not a multiple
        of ``tensor``, a sequence not a multiple of ``context``); the message
        names the layer and the fix.
    """
    def split(layer: Layer, dim: str, ways: int, role: str) -> int:
        base = layer.split_base[layer.dims.index(dim)]
        if base % ways:
            raise ConfigurationError(
                f"{role} size {ways} does not divide dimension {dim!r} (size {layer.size_of[dim]}) of layer "
                f"{layer.name!r}; choose a {role} size that divides it")
        return ways

    strategy = {}
    for layer in graph:
        splits = {}
        model = next((d for d in MODEL_DIMS if d in layer.dims), None)
        if model is not None and tensor > 1 and not (model == "v" and layer.split_base[layer.dims.index("v")] % tensor):
            splits[model] = split(layer, model, tensor, "tensor-parallel")
        sequence = context * (tensor if sequence_parallel and model is None else 1)
        role = "context-parallel" if sequence == context else "sequence-parallel (tensor x context)"
        if "s" in layer.dims and sequence > 1:
            splits["s"] = split(layer, "s", sequence, role)
        if layer.op == "MoEExperts" and sequence > 1:
            # The experts follow their router's tokens (its capacity slots); expert and expert-tensor
            # parallelism across devices are pase.model.experts' to lay out.
            splits["c"] = split(layer, "c", sequence, role)
        strategy[layer.name] = _config(layer, splits)
    return strategy


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
