"""Per-device memory of a strategy: weights, gradients, optimizer state, activations, buffers.

The paper has no memory model; a strategy that does not fit in device memory
is useless, so this module counts, for every layer and configuration, the
bytes one device holds during a training step, and :func:`pase.plan` only
returns strategies that fit (:mod:`pase.search.memory`).

What one device holds for a layer under a configuration
-------------------------------------------------------
Blocks follow the configuration exactly as the cost model's do
(:func:`pase.ops.block_elements`): a tensor is divided by the split factors
of the dimensions its axes follow and replicated over the others.

* **weights**: the layer's weight blocks at the cluster's ``bytes_per_element``.
  A tied weight (:attr:`~pase.ir.graph.TensorSpec.tied`: the vocabulary
  projection sharing the token embedding's table) is one parameter: each of
  the ``n`` weights of the graph tied to it counts ``1/n`` of its own block
  (exact when their layouts agree), here and in its gradient and optimizer
  state.
* **gradients**: one gradient per weight element, at ``bytes_per_element``.
* **optimizer state**, per weight element, in fp32 (``state_bytes = 4``): SGD
  none, momentum one tensor, Adam two (first and second moments); plus a fp32
  master copy of the weights when training in mixed precision
  (``bytes_per_element < 4``; ``MemoryOptions.master_weights``). Bytes per
  parameter, weights + gradients + optimizer state:

  ==========  ==================  ===================================
  optimizer   fp32 (4-byte)       mixed precision (2-byte)
  ==========  ==================  ===================================
  sgd         4 + 4 + 0  = 8      2 + 2 + 4 (master)      = 8
  momentum    4 + 4 + 4  = 12     2 + 2 + 4 + 4 (master)  = 12
  adam        4 + 4 + 8  = 16     2 + 2 + 8 + 4 (master)  = 16
  ==========  ==================  ===================================

* **activations** kept from the forward pass for the backward pass, as each
  op's backward needs them (:func:`pase.ops.saved_tensors`, each op's ``saved`` rule):

  - FullyConnected, Conv2D, Einsum: their activation inputs (``dW = dy^T x``;
    an Einsum of two activations needs each for the other's gradient; a
    one-operand Einsum without weights keeps nothing); with a fused pointwise
    nonlinearity (``pointwise > 0``) also their output.
  - BatchNorm, LayerNorm: the input. Max pooling: the input; average pooling:
    nothing.
  - Softmax: its output. SoftmaxCrossEntropy: the probabilities (one
    logits-sized block) and the labels.
  - Embedding: the token ids. LSTM: the input and, per layer and step, the
    four gates, the cell state and the hidden state (``6 e`` per row).
  - Elementwise: its output when it fuses a pointwise op, else nothing.
  - Dropout: its mask, one byte per element (``saved_extra_bytes``),
    whatever ``bytes_per_element``. Gelu: its input.
  - Concat, Broadcast, Split, Reshape, Transpose, ReduceMean: nothing. An op not listed
    keeps all its inputs.

  A tensor is counted once: when several consumers keep it, each counts an
  equal share of its own block of it (exact when their layouts agree; when
  they differ, the copies are undercounted); a producer that needs its own
  output counts it only if no consumer keeps it. Integer inputs (ids,
  labels; ``differentiable=False``) take ``index_bytes`` (4) per element.
* **communication buffers**: the result of the largest collective the layer
  runs (an out-of-place all-reduce, all-gather or halo exchange; see
  :func:`pase.ops.collectives`), at ``bytes_per_element``. They are
  transient: layers run one at a time, so a strategy needs only the largest
  buffer of any layer at once. Redistributions along edges write into the
  consumer's input block and need no buffer of their own.

Per-device total of a strategy (:attr:`MemoryReport.per_device_bytes`)::

    sum over layers (weights + gradients + optimizer + activations)
      + max over layers (buffer) + reserved_bytes

This is the peak at the start of the backward pass, when every activation is
live; gradients are counted in full (a framework that frees them progressively
needs a little less).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions, layer_configs
from pase.model.attention import flash_units, lse_bytes
from pase.model.cost import attention_kind, options_on
from pase.model.precision import fp8_recipe
from pase.model.roofline import fp8_products
from pase.errors import ConfigurationError, PaseError
from pase.ir.graph import Graph, Layer
from pase.ops import OPS, block_elements, collectives, partial_collectives, saved_tensors, split_over

__all__ = [
    "OPTIMIZER_STATES",
    "MemoryOptions",
    "Reserve",
    "DEFAULT_RESERVE",
    "RESERVE_SOURCES",
    "LayerMemory",
    "MemoryReport",
    "MemoryModel",
    "InsufficientMemoryError",
    "build_memory_model",
    "activation_bytes",
    "buffer_elements",
]

# fp32 state tensors per parameter, besides the master copy.
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2}


class InsufficientMemoryError(PaseError):
    """No strategy fits in the devices' memory.

    Attributes
    ----------
    capacity_bytes : float
        Memory available per device.
    least_bytes : float
        The least per-device memory any strategy needs.
    """

    def __init__(self, message: str, capacity_bytes: float, least_bytes: float):
        super().__init__(message)
        self.capacity_bytes = capacity_bytes
        self.least_bytes = least_bytes

    def __reduce__(self):
        # Rebuilt with all three arguments (the app's worker processes pickle errors).
        return type(self), (str(self), self.capacity_bytes, self.least_bytes)


MiB, GiB = float(1 << 20), float(1 << 30)


@dataclass(frozen=True)
class Reserve:
    """Memory per GPU that no strategy can use, in bytes, by where it goes (:data:`RESERVE_SOURCES` says
    where each default comes from). A training process holds it besides what the model counts: weights,
    gradients, optimizer state, activations and the transient buffers of the collectives.

    Examples
    --------
    >>> round(DEFAULT_RESERVE.total_bytes / 1e9, 2)
    3.93
    >>> Reserve(nccl_bytes=0.0).total_bytes < DEFAULT_RESERVE.total_bytes
    True
    """

    cuda_context_bytes: float = 0.5 * GiB
    # PyTorch's cuBLAS and cuBLASLt workspaces (32 MiB each on Hopper) on the compute and the communication
    # streams, and Transformer Engine's one cuBLAS workspace (32 MiB on Hopper).
    workspace_bytes: float = (2 * 2 + 1) * 32 * MiB
    # 4 communicators (tensor, data, pipeline, context) x 32 channels x 2 peers x NCCL_BUFFSIZE (4 MiB).
    nccl_bytes: float = 4 * 32 * 2 * 4 * MiB
    fragmentation_bytes: float = 2 * GiB

    def __post_init__(self):
        for name in ("cuda_context_bytes", "workspace_bytes", "nccl_bytes", "fragmentation_bytes"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value < float("inf")):
                raise ConfigurationError(f"the reserve's {name} must be a number of bytes >= 0, got {value!r}")

    @property
    def total_bytes(self) -> float:
        """The whole reserve per GPU, bytes."""
        return self.cuda_context_bytes + self.workspace_bytes + self.nccl_bytes + self.fragmentation_bytes

    def parts(self) -> dict[str, float]:
        """Each part's bytes by its name in words (``"CUDA context"``...), in :data:`RESERVE_SOURCES`' order."""
        return {"CUDA context": self.cuda_context_bytes, "cuBLAS and Transformer Engine workspaces":
                self.workspace_bytes, "NCCL buffers": self.nccl_bytes,
                "allocator fragmentation": self.fragmentation_bytes}


# Where each default of Reserve comes from, by Reserve.parts' names. None of these figures was measured by pase.
RESERVE_SOURCES = {
    "CUDA context": "0.5 GiB: the CUDA 12 context of a PyTorch 2 process with its kernels loaded lazily "
                    "(CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2; NVIDIA's CUDA C++ Programming Guide, "
                    "'Lazy Loading'), as nvidia-smi commonly shows it on A100 and H100 before any tensor is "
                    "allocated; not measured by pase",
    "cuBLAS and Transformer Engine workspaces": "160 MiB: PyTorch's cuBLAS and cuBLASLt workspaces, 32 MiB each per "
                    "stream on Hopper (PyTorch's CUDA semantics notes, 'cuBLAS workspaces', CUBLAS_WORKSPACE_CONFIG "
                    ":4096:8), on the compute and the communication streams, and Transformer Engine's 32 MiB "
                    "cuBLAS workspace on Hopper (its get_cublas_workspace_size_bytes)",
    "NCCL buffers": "1 GiB: NCCL_BUFFSIZE, 4 MiB per channel per peer (NCCL's environment variables, "
                    "NCCL_BUFFSIZE), x 32 channels (NCCL_MAX_NCHANNELS' ceiling, reached on NVLink) x 2 peers (a "
                    "ring's previous and next device) x 4 communicators (the tensor, data, pipeline and context "
                    "groups of Megatron-Core; NCCL connects a group's buffers on its first collective)",
    "allocator fragmentation": "2 GiB: an allowance (not a measurement) for PyTorch's caching allocator, which "
                    "rounds blocks up and keeps freed ones per stream, so that a peak can fail with memory free; "
                    "NeMo's and Megatron-Bridge's recipes set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, "
                    "which keeps this small; without it, raise it (ZeRO, Rajbhandari et al. 2020, section 3.2, "
                    "ran out of memory with over 30% of it free on the largest models)",
}

DEFAULT_RESERVE = Reserve()


@dataclass(frozen=True)
class MemoryOptions:
    """How training uses memory.

    Parameters
    ----------
    optimizer : str
        ``"adam"`` (default), ``"momentum"`` or ``"sgd"``.
    master_weights : bool or None
        Keep a fp32 master copy of the weights; ``None``: exactly when the
        cluster's ``bytes_per_element`` is below 4 (mixed precision).
    state_bytes : int
        Bytes per element of optimizer state and master weights (4: fp32).
    index_bytes : int
        Bytes per element of integer inputs kept for backward (ids, labels).
    reserved_bytes : float or None
        Memory per device no strategy can use (CUDA context, library
        workspaces, NCCL buffers, allocator fragmentation), added to every
        strategy's total; ``None`` (default): the cluster's
        (:attr:`pase.hardware.cluster.Cluster.reserved_bytes`), see
        :meth:`reserve_on`.

    Examples
    --------
    >>> MemoryOptions().bytes_per_parameter(2)
    {'weights': 2, 'gradients': 2, 'optimizer': 12}
    >>> sum(MemoryOptions(optimizer="sgd").bytes_per_parameter(4).values())
    8
    """

    optimizer: str = "adam"
    master_weights: bool | None = None
    state_bytes: int = 4
    index_bytes: int = 4
    reserved_bytes: float | None = None

    def __post_init__(self):
        if self.optimizer not in OPTIMIZER_STATES:
            raise ConfigurationError(
                f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZER_STATES)}")
        for field in ("state_bytes", "index_bytes"):
            if getattr(self, field) not in (1, 2, 4, 8):
                raise ConfigurationError(f"{field} must be 1, 2, 4 or 8, got {getattr(self, field)!r}")
        if self.reserved_bytes is not None and not 0 <= self.reserved_bytes < float("inf"):
            raise ConfigurationError(f"reserved_bytes must be >= 0, got {self.reserved_bytes!r}")

    def reserve_on(self, cluster: Cluster) -> float:
        """The bytes per device reserved on ``cluster``: ``reserved_bytes`` when given, else the cluster's
        ``reserved_bytes``, else :data:`DEFAULT_RESERVE`'s total where the cluster's memory is known and 0
        where it is not (no capacity to fit, as in the paper's cost model).

        >>> from pase.hardware.cluster import preset
        >>> MemoryOptions().reserve_on(preset("dgx-h100")) == DEFAULT_RESERVE.total_bytes
        True
        >>> MemoryOptions().reserve_on(preset("paper-model")), MemoryOptions(reserved_bytes=1e9).reserve_on(preset("dgx-h100"))
        (0.0, 1000000000.0)
        """
        for given in (self.reserved_bytes, cluster.reserved_bytes):
            if given is not None:
                return float(given)
        return DEFAULT_RESERVE.total_bytes if cluster.memory_bytes is not None else 0.0

    def bytes_per_parameter(self, bytes_per_element: int) -> dict[str, int]:
        """Bytes per trainable parameter: ``weights``, ``gradients``, ``optimizer`` (state and master copy)."""
        master = self.keeps_master_copy(bytes_per_element)
        states = OPTIMIZER_STATES[self.optimizer] + int(master)
        return {"weights": bytes_per_element, "gradients": bytes_per_element, "optimizer": states * self.state_bytes}

    def keeps_master_copy(self, bytes_per_element: int) -> bool:
        """Whether a fp32 master copy of the weights is kept at this element size."""
        if self.master_weights is None:
            return bytes_per_element < self.state_bytes
        return bool(self.master_weights)


@dataclass(frozen=True)
class LayerMemory:
    """One layer's memory on one device under its configuration, in bytes.

    ``resident_bytes`` is what the layer holds at the peak (weights,
    gradients, optimizer state, kept activations); ``buffer_bytes`` is
    transient (only the largest of all layers counts toward the total).
    """

    name: str
    config: tuple[int, ...]
    weights_bytes: float
    gradient_bytes: float
    optimizer_bytes: float
    activation_bytes: float
    buffer_bytes: float

    @property
    def resident_bytes(self) -> float:
        """Weights + gradients + optimizer state + activations."""
        return self.weights_bytes + self.gradient_bytes + self.optimizer_bytes + self.activation_bytes

    def to_dict(self) -> dict:
        """JSON-ready record."""
        return {
            "name": self.name, "config": list(self.config),
            "weights_bytes": self.weights_bytes, "gradient_bytes": self.gradient_bytes,
            "optimizer_bytes": self.optimizer_bytes, "activation_bytes": self.activation_bytes,
            "buffer_bytes": self.buffer_bytes, "resident_bytes": self.resident_bytes,
        }


@dataclass(frozen=True, eq=False)
class MemoryReport:
    """Memory per device of one strategy.

    Attributes
    ----------
    layers : tuple of LayerMemory
        Per layer, in the graph's topological order.
    capacity_bytes : float or None
        Memory of one device, if known.
    reserved_bytes : float
        Added to every strategy (:class:`MemoryOptions`).
    """

    layers: tuple[LayerMemory, ...]
    capacity_bytes: float | None = None
    reserved_bytes: float = 0.0

    @property
    def peak_buffer_bytes(self) -> float:
        """The largest communication buffer of any layer."""
        return max((r.buffer_bytes for r in self.layers), default=0.0)

    @property
    def per_device_bytes(self) -> float:
        """Peak bytes per device: resident memory of every layer + the largest buffer + the reserve."""
        return sum(r.resident_bytes for r in self.layers) + self.peak_buffer_bytes + self.reserved_bytes

    @property
    def fits(self) -> bool | None:
        """Whether the total fits the capacity (``None`` when the capacity is unknown)."""
        return None if self.capacity_bytes is None else self.per_device_bytes <= self.capacity_bytes

    def totals(self) -> dict[str, float]:
        """The total split by kind, in bytes: the parts add up to ``per_device_bytes``."""
        return {
            "weights_bytes": sum(r.weights_bytes for r in self.layers),
            "gradient_bytes": sum(r.gradient_bytes for r in self.layers),
            "optimizer_bytes": sum(r.optimizer_bytes for r in self.layers),
            "activation_bytes": sum(r.activation_bytes for r in self.layers),
            "buffer_bytes": self.peak_buffer_bytes,
            "reserved_bytes": self.reserved_bytes,
        }


# -- what each op keeps for the backward pass ---------------------------------------------------


def _activation_bytes(graph: Graph, layer: Layer, cfg: np.ndarray, keeps: dict, bpe: int, index_bytes: int,
                      producer_cfg: Mapping[str, np.ndarray] | None = None, dropped: frozenset = frozenset(),
                      fused: frozenset = frozenset(), narrow: frozenset = frozenset()):
    """Kept activation bytes of ``layer`` per configuration, sharing tensors as the module describes.

    ``producer_cfg`` (layer name -> one configuration) keeps each input at the
    smaller of its own and its producer's block; ``dropped`` layers' products
    are not kept, nor what ``fused`` layers pass among themselves, and
    ``narrow`` layers keep their activation inputs at one byte an element
    (see :func:`activation_bytes`).
    """
    kept_inputs, kept_outputs = keeps[layer.name]
    spec = OPS[layer.op]
    extra_bytes = bpe if spec.saved_extra_bytes is None else spec.saved_extra_bytes
    total = np.zeros(len(cfg))
    inside = layer.name in fused
    if layer.name not in dropped and not inside:
        total = total + spec.saved_extra(layer, cfg, np.asarray(layer.sizes, dtype=float) / cfg) * extra_bytes
    feeds = {e.dst_input: e for e in graph.in_edges(layer.name)}
    for slot in kept_inputs:
        t = layer.inputs[slot]
        share = 1.0
        e = feeds.get(slot)
        block = block_elements(layer, t, cfg)
        if e is not None:
            if e.src in dropped or (inside and e.src in fused):
                continue
            keepers = sum(1 for c in _consumers(graph, e.src, e.src_output) if c.dst_input in keeps[c.dst][0])
            share = 1.0 / keepers
            if producer_cfg is not None:
                src = graph.layer(e.src)
                block = np.minimum(block, block_elements(src, src.outputs[e.src_output], producer_cfg[e.src])[0])
        size = (1 if layer.name in narrow else bpe) if t.differentiable else index_bytes
        total = total + share * block * size
    for out in kept_outputs:
        if layer.name in dropped or any(c.dst_input in keeps[c.dst][0] for c in _consumers(graph, layer.name, out)):
            continue  # a consumer keeps it, or it is recomputed
        if inside and all(c.dst in fused for c in _consumers(graph, layer.name, out)):
            continue  # passed inside a fused kernel
        total = total + block_elements(layer, layer.outputs[out], cfg) * bpe
    return total


def _structure(graph: Graph) -> tuple[dict, dict]:
    """What each layer keeps (layer name -> kept input slots, kept outputs) and, per layer, the part of its
    :func:`_surroundings` that depends on the graph alone: its kind, per kept input (by slot) its producer,
    the producer's output, how many consumers keep that tensor and the producer's kind (None for a graph
    input), and per kept output whether a consumer keeps it."""
    saved: dict = {}  # by kind of layer: repeated blocks save alike
    keeps = {layer.name: saved[graph.kind(layer.name)] if graph.kind(layer.name) in saved
             else saved.setdefault(graph.kind(layer.name), saved_tensors(layer)) for layer in graph.layers}
    structure = {}
    for layer in graph.layers:
        kept_inputs, kept_outputs = keeps[layer.name]
        feeds = {e.dst_input: e for e in graph.in_edges(layer.name)}
        inputs = []
        for slot in sorted(kept_inputs):
            e = feeds.get(slot)
            inputs.append(None if e is None else (
                e.src, e.src_output, sum(1 for c in _consumers(graph, e.src, e.src_output)
                                         if c.dst_input in keeps[c.dst][0]), graph.kind(e.src)))
        outputs = tuple(any(c.dst_input in keeps[c.dst][0] for c in _consumers(graph, layer.name, out))
                        for out in sorted(kept_outputs))
        structure[layer.name] = (graph.kind(layer.name), tuple(inputs), outputs)
    return keeps, structure


def _surroundings(structure: tuple, layer: Layer, cfg: np.ndarray, producer_cfg: Mapping[str, np.ndarray] | None,
                  dropped: frozenset, fused: frozenset, narrow: frozenset) -> tuple:
    """Everything :func:`_activation_bytes` reads of ``layer`` and its neighbours, as a key (``structure``:
    the layer's entry of :func:`_structure`)."""
    kind, inputs, outputs = structure
    key = tuple(None if i is None else (
        i[0] in dropped, i[0] in fused, i[2],
        None if producer_cfg is None else (i[3], i[1], producer_cfg[i[0]].tobytes()))
        for i in inputs)
    return (kind, cfg.shape, cfg.tobytes(), layer.name in dropped, layer.name in fused, layer.name in narrow, key,
            outputs)


def activation_bytes(graph: Graph, configs: Mapping[str, np.ndarray], bytes_per_element: int, index_bytes: int = 4,
                     *, producer_blocks: bool = False, dropped: frozenset = frozenset(),
                     checkpoints: Mapping[str, str] | None = None, fused: frozenset = frozenset(),
                     narrow: frozenset = frozenset()) -> dict[str, np.ndarray]:
    """Bytes each layer keeps for its backward pass, per configuration (layer name -> ``(K,)``).

    With no options this is :class:`MemoryModel`'s count. The options are
    the ways training trades memory for work; the first needs one
    configuration per layer:

    * ``producer_blocks``: an input is kept at the smaller of the consumer's
      and its producer's block (Megatron's sequence parallelism stores the
      sequence shard of what it all-gathered and gathers it again in the backward);
    * ``dropped``: layers whose products are recomputed, not kept (selective
      recomputation of the attention core): their extras, their outputs and
      their consumers' copies of them;
    * ``fused``: layers that run as fused kernels (flash attention's cores,
      :mod:`pase.model.attention`): what they pass among themselves is not
      kept, nor their extras (the probabilities, a dropout's mask); what
      enters and leaves them is;
    * ``narrow``: layers that keep their activation inputs at one byte an
      element (FP8 products keep the FP8 copy they multiplied);
    * ``checkpoints`` (layer name -> block name): full recomputation of the
      blocks. Of a block's layers, only the tensors entering the block are
      kept, once each, by their first consumer in it (graph inputs stay kept
      as usual); layers in no block (absent or ``None``) keep what they
      always keep.
    """
    keeps, structure = graph.derived("activation structure", lambda: _structure(graph))
    producer_cfg = None
    if producer_blocks:
        producer_cfg = {name: np.asarray(c).reshape(1, -1) for name, c in configs.items()}
        if any(len(c) != 1 for c in configs.values()):
            raise ValueError("producer_blocks needs one configuration per layer")
    out = {}
    first: set[tuple[str, int, str]] = set()
    alike: dict = {}
    for layer in graph.layers:
        cfg = np.asarray(configs[layer.name])
        block_name = None if checkpoints is None else checkpoints.get(layer.name)
        if block_name is None:
            # Layers of repeated blocks in the same surroundings keep the same bytes: count each once.
            key = _surroundings(structure[layer.name], layer, cfg, producer_cfg, dropped, fused, narrow)
            if key not in alike:
                alike[key] = _activation_bytes(graph, layer, cfg, keeps, bytes_per_element, index_bytes,
                                               producer_cfg, dropped, fused, narrow)
            out[layer.name] = alike[key]
            continue
        total = np.zeros(len(cfg))
        fed = set()
        for e in graph.in_edges(layer.name):
            fed.add(e.dst_input)
            key = (e.src, e.src_output, block_name)
            if checkpoints.get(e.src) == block_name or key in first:
                continue
            first.add(key)
            block = block_elements(layer, layer.inputs[e.dst_input], cfg)
            if producer_cfg is not None:
                src = graph.layer(e.src)
                block = np.minimum(block, block_elements(src, src.outputs[e.src_output], producer_cfg[e.src])[0])
            total = total + block * bytes_per_element
        for slot in keeps[layer.name][0] - fed:
            t = layer.inputs[slot]
            total = total + block_elements(layer, t, cfg) * (bytes_per_element if t.differentiable else index_bytes)
        out[layer.name] = total
    return out


def _consumers(graph: Graph, name: str, output: int):
    return [e for e in graph.out_edges(name) if e.src_output == output]


def buffer_elements(layer: Layer, cfg: np.ndarray) -> np.ndarray:
    """Elements of the largest collective result ``layer`` holds at once, per configuration (rows of ``cfg``)."""
    out = np.zeros(len(cfg))
    for c in collectives(layer, cfg) + partial_collectives(layer, cfg):
        k = split_over(layer, cfg, c.dims)
        out = np.maximum(out, np.where(k > 1, c.elements, 0.0))
    return out


# -- the model ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MemoryModel:
    """Per-device memory of every layer under every configuration, in bytes.

    Attributes
    ----------
    graph, cluster, options
        What the tables were built for.
    layers : list of Layer
        Topological order (the cost model's node order).
    configs : dict
        Layer name -> int array ``(K, ndims)``.
    weights_bytes, gradient_bytes, optimizer_bytes, activation_bytes, buffer_bytes : dict
        Layer name -> ``(K,)`` vector per configuration.
    """

    graph: Graph
    cluster: Cluster
    options: MemoryOptions
    layers: list
    configs: dict
    weights_bytes: dict
    gradient_bytes: dict
    optimizer_bytes: dict
    activation_bytes: dict
    buffer_bytes: dict

    def resident_bytes(self, name: str) -> np.ndarray:
        """Weights + gradients + optimizer state + activations of layer ``name``, per configuration."""
        return (self.weights_bytes[name] + self.gradient_bytes[name] + self.optimizer_bytes[name]
                + self.activation_bytes[name])

    def resident_vectors(self) -> tuple[np.ndarray, ...]:
        """Resident bytes per configuration of every layer, in node order (the search's additive memory)."""
        return tuple(self.resident_bytes(layer.name) for layer in self.layers)

    def buffer_vectors(self) -> tuple[np.ndarray, ...]:
        """Transient buffer bytes per configuration of every layer, in node order."""
        return tuple(self.buffer_bytes[layer.name] for layer in self.layers)

    def report(self, assignment: Mapping[str, int], capacity_bytes: float | None = None) -> MemoryReport:
        """Memory of a strategy given as layer name -> configuration row.

        ``capacity_bytes`` defaults to the cluster's ``memory_bytes``.
        """
        rows = []
        for layer in self.layers:
            k, name = assignment[layer.name], layer.name
            rows.append(LayerMemory(
                name=name, config=tuple(int(f) for f in self.configs[name][k]),
                weights_bytes=float(self.weights_bytes[name][k]),
                gradient_bytes=float(self.gradient_bytes[name][k]),
                optimizer_bytes=float(self.optimizer_bytes[name][k]),
                activation_bytes=float(self.activation_bytes[name][k]),
                buffer_bytes=float(self.buffer_bytes[name][k]),
            ))
        capacity = self.cluster.memory_bytes if capacity_bytes is None else capacity_bytes
        return MemoryReport(tuple(rows), capacity, self.options.reserve_on(self.cluster))


def build_memory_model(
    graph: Graph,
    cluster: Cluster,
    options: MemoryOptions = MemoryOptions(),
    *,
    configs: Mapping[str, np.ndarray] | None = None,
    config_options: ConfigOptions = ConfigOptions(),
) -> MemoryModel:
    """Count the memory of every layer of ``graph`` under every configuration on ``cluster``.

    ``configs`` (layer name -> int array of rows) replaces the enumeration
    with ``config_options``; pass the cost model's ``configs`` so rows match.
    ``config_options`` also says how attention runs (a fused kernel keeps
    no ``s x k`` tensor, :mod:`pase.model.attention`) and the precision (an
    FP8 product keeps its inputs in FP8 and the FP8 copies of its weights, its
    recipe's ``copy_bytes`` an element (:mod:`pase.model.precision`), counted
    with its weights).

    Examples
    --------
    >>> from pase import ops as layers
    >>> from pase.ir.graph import Graph
    >>> g = Graph("one")
    >>> g.add_layer(layers.fully_connected("fc", b=8, n=4, c=4, bias=False))
    >>> m = build_memory_model(g, Cluster(2, 1e12, 1e9), configs={"fc": np.array([[1, 1, 1], [1, 2, 1]])})
    >>> m.weights_bytes["fc"].tolist(), m.optimizer_bytes["fc"].tolist()
    ([64.0, 32.0], [128.0, 64.0])
    """
    graph.validate()
    layers = graph.layers
    if configs is None:
        mine = options_on(config_options, cluster)
        configs = {layer.name: layer_configs(layer, cluster.devices, mine) for layer in layers}
    bpe = cluster.bytes_per_element
    per_param = options.bytes_per_parameter(bpe)
    flash = attention_kind(config_options, cluster) == "flash"
    units = {u.scores: u for u in flash_units(graph, explicit=config_options.attention == "flash")} if flash else {}
    fused = frozenset().union(*(u.members for u in units.values()))
    recipe = fp8_recipe(config_options.precision)
    narrow = fp8_products(graph) if recipe else frozenset()
    keeps = {layer.name: saved_tensors(layer) for layer in layers}
    ties = Counter(w.tied for layer in layers for w in layer.weights if w.tied)
    weights, grads, optim, acts, bufs = {}, {}, {}, {}, {}
    for layer in layers:
        cfg = np.asarray(configs[layer.name])
        params = np.zeros(len(cfg))
        for w in layer.weights:
            params = params + block_elements(layer, w, cfg) / (ties[w.tied] if w.tied else 1)
        weights[layer.name] = params * (per_param["weights"] + (recipe.copy_bytes if layer.name in narrow else 0))
        grads[layer.name] = params * per_param["gradients"]
        optim[layer.name] = params * per_param["optimizer"]
        acts[layer.name] = _activation_bytes(graph, layer, cfg, keeps, bpe, options.index_bytes, fused=fused,
                                             narrow=narrow)
        if layer.name in units:
            acts[layer.name] = acts[layer.name] + lse_bytes(graph, units[layer.name], cfg)
        bufs[layer.name] = buffer_elements(layer, cfg) * bpe
    return MemoryModel(graph, cluster, options, layers, dict(configs), weights, grads, optim, acts, bufs)
