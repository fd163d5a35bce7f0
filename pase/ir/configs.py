"""Configurations: the ways one layer can be split across the devices.

A configuration gives every dimension of a layer's iteration space a split
factor; the factors divide the dimension (so blocks are equal) and their
product, the number of devices the layer uses, is at most ``p``. Under the
corrected cost model that product also divides ``p``: a layer runs on a
sub-mesh that tiles the device mesh and is replicated over the rest
(:mod:`pase.model.layout`); the paper's model lets the other devices idle.

That is the paper's split space (``ConfigOptions(split_space="divisors")``,
the default). The mesh space (``split_space="mesh"``) keeps the
configurations that placements of whole mesh axes give, as DTensor and GSPMD
express a layout: each axis shards one dimension or replicates (a pending
sum, too, lies along an axis), on the mesh shapes derived from the cluster's
hierarchy (``ConfigOptions.mesh_shape``, e.g. 8 nodes x 8 GPUs): the
hierarchy itself and, for each way of splitting the innermost axis (the GPUs
of a node) in two, that shape too, so that a node can hold 2 x 4 as well as
8. Its size grows with the number of mesh axes, not with ``p``.

A layer's configurations are counted (:func:`count_configs`, a product over
its dimensions, never a list) before they are listed, so a layer of many
dimensions on many devices is refused (``pase.limits.MAX_LAYER_CONFIGS``)
before it takes memory, and so is a cluster above
``pase.limits.MAX_SEARCH_DEVICES``.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, replace
from functools import lru_cache
from math import gcd

import numpy as np

from pase.errors import ConfigurationError
from pase.ir.graph import Graph, Layer
from pase.limits import MAX_LAYER_CONFIGS, MAX_SEARCH_DEVICES
from pase.ops import OPS

__all__ = ["COST_MODELS", "SPLIT_SPACES", "ATTENTION_KINDS", "FP8_PRECISIONS", "PRECISIONS", "ConfigOptions", "is_fp8",
           "split_factors", "count_configs", "layer_configs", "config_counts", "check_config", "mesh_shapes"]

# "corrected": layouts on the device mesh with pending sums, computed backward volumes and the
# audit's fixes (pase.model.cost); "paper": the paper's equation 1 and its prototype's edge rule.
COST_MODELS = ("corrected", "paper")
# "divisors": every tuple of divisors using at most p devices (the paper's); "mesh": the tuples that
# placements of whole mesh axes give (module docstring); "auto": the mesh on today's presets (DGX), the
# divisors on the paper's and on clusters built by hand (pase.model.cost.options_on).
SPLIT_SPACES = ("divisors", "mesh", "auto")
# How attention runs (pase.model.attention) and the precision of the products with weights (pase.model.roofline).
ATTENTION_KINDS = ("auto", "flash", "unfused")
# FP8 recipes (pase.model.precision): "fp8" delayed scaling, "fp8-cs" current per-tensor scaling, "mxfp8" MXFP8
# block scaling (Blackwell).
FP8_PRECISIONS = ("fp8", "fp8-cs", "mxfp8")
PRECISIONS = ("bf16", *FP8_PRECISIONS)


def is_fp8(precision: str) -> bool:
    """Whether ``precision`` (a name of :data:`PRECISIONS`) trains the products with weights in FP8."""
    return precision in FP8_PRECISIONS


@dataclass(frozen=True)
class ConfigOptions:
    """Which configurations the search may use, and the cost model that prices them.

    Parameters
    ----------
    powers_of_two : bool
        Only split factors 1, 2, 4, 8...
    min_shard : int
        Smallest block a split may leave along a dimension. The default 1
        searches every divisor; the paper's prototype used 4, which makes the
        search smaller but can miss the best strategy (one attention head or
        LSTM layer per device is a block of 1).
    spatial_split : bool
        Let convolutions and pooling split image rows and columns (``h w``),
        paying halo exchange.
    cost_model : str
        ``"corrected"`` (default) or ``"paper"`` (:data:`COST_MODELS`,
        :mod:`pase.model.cost`).
    split_space : str
        ``"divisors"`` (the paper's), ``"mesh"`` (the module docstring) or
        ``"auto"`` (:data:`SPLIT_SPACES`): the cost model resolves it for
        its cluster (:meth:`on_mesh`); listing configurations without a
        cluster, ``"auto"`` means the divisors.
    mesh_shape : tuple of int
        For the mesh space, the extents of the cluster's mesh, outermost
        first (``Cluster.mesh.shape``); empty means one axis of all the
        devices. The cost model fills it in from the cluster it is given.
    sync_batchnorm : bool or None
        Whether BatchNorm synchronises its statistics over a split batch
        (:class:`pase.ops.CollectiveOptions`); ``None``: the cost model's
        default (the paper's model does, the corrected one follows PyTorch's
        DDP, which does not).
    attention : str
        How attention runs (:data:`ATTENTION_KINDS`, :mod:`pase.model.attention`):
        ``"flash"`` (a fused kernel: no ``s x k`` tensor kept or moved
        through memory), ``"unfused"`` (its products, softmax and dropout as
        kernels of their own, as 2021-22 Megatron-LM and eager PyTorch run
        them) or ``"auto"``: flash on a calibrated cluster under the
        corrected model, unfused at the paper's peak rates
        (:func:`pase.model.cost.attention_kind` resolves it for a cluster).
    precision : str
        ``"bf16"``, ``"fp8"``, ``"fp8-cs"`` or ``"mxfp8"``
        (:data:`PRECISIONS`): FP8 runs the matrix products of layers with
        weights at the FP8 rate, as Transformer Engine runs them, with delayed
        (``"fp8"``) or current per-tensor scaling (``"fp8-cs"``) or MXFP8
        block scaling (``"mxfp8"``, Blackwell), each recipe's casts priced
        (:mod:`pase.model.precision`); FP8 needs a calibrated cluster whose
        GPU has FP8.
    """

    powers_of_two: bool = False
    min_shard: int = 1
    spatial_split: bool = False
    cost_model: str = "corrected"
    sync_batchnorm: bool | None = None
    split_space: str = "auto"
    mesh_shape: tuple[int, ...] = ()
    attention: str = "auto"
    precision: str = "bf16"

    def __post_init__(self):
        if self.attention not in ATTENTION_KINDS:
            raise ConfigurationError(f"unknown attention {self.attention!r}; choose one of "
                                     f"{', '.join(ATTENTION_KINDS)}")
        if self.precision not in PRECISIONS:
            raise ConfigurationError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if isinstance(self.min_shard, bool) or not isinstance(self.min_shard, int) or self.min_shard < 1:
            raise ConfigurationError(f"min_shard must be a whole number >= 1, got {self.min_shard!r}")
        if self.cost_model not in COST_MODELS:
            raise ConfigurationError(f"unknown cost model {self.cost_model!r}; choose one of {', '.join(COST_MODELS)}")
        if self.split_space not in SPLIT_SPACES:
            raise ConfigurationError(f"unknown split space {self.split_space!r}; choose one of "
                                     f"{', '.join(SPLIT_SPACES)}")
        object.__setattr__(self, "mesh_shape", tuple(int(a) for a in self.mesh_shape))
        if any(a < 1 for a in self.mesh_shape):
            raise ConfigurationError(f"mesh_shape must be positive extents, got {self.mesh_shape!r}")

    def on_mesh(self, shape: tuple[int, ...], mesh_by_default: bool = True) -> ConfigOptions:
        """These options for a cluster whose mesh has extents ``shape``: the mesh space's ``mesh_shape`` set,
        and ``"auto"`` resolved to the mesh space if ``mesh_by_default``, else to the divisors
        (:func:`pase.model.cost.options_on` decides it for a cluster)."""
        space = self.split_space
        if space == "auto":
            space = "mesh" if mesh_by_default else "divisors"
        shape = tuple(shape) if space == "mesh" else ()
        if (space, shape) == (self.split_space, self.mesh_shape):
            return self
        return replace(self, split_space=space, mesh_shape=shape)

    @property
    def fp8(self) -> bool:
        """Whether the products with weights train in FP8 (:func:`is_fp8`)."""
        return is_fp8(self.precision)

    @property
    def tiles_mesh(self) -> bool:
        """Whether a configuration's device count must divide the devices (the corrected model)."""
        return self.cost_model == "corrected"

    @property
    def batchnorm_synchronised(self) -> bool:
        """Whether BatchNorm statistics are all-reduced over a split batch under these options."""
        return self.cost_model == "paper" if self.sync_batchnorm is None else self.sync_batchnorm


def _check_devices(devices: int) -> None:
    """``ConfigurationError`` unless ``devices`` is a whole number from 1 to ``MAX_SEARCH_DEVICES``."""
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices < 1:
        raise ConfigurationError(f"the device count must be a whole number >= 1, got {devices!r}")
    if devices > MAX_SEARCH_DEVICES:
        raise ConfigurationError(
            f"a cluster of {devices:,} devices is more than pase plans for (at most {MAX_SEARCH_DEVICES:,} = 2**20 "
            "devices); plan for a group of the cluster, such as the devices of one data-parallel replica")


@lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple[int, ...]:
    """Divisors of ``n >= 1``, ascending, by trial division (at most ``sqrt(n)`` steps: 46,341 for ``MAX_DIM``)."""
    primes: dict[int, int] = {}
    f = 2
    while f * f <= n:
        while n % f == 0:
            primes[f] = primes.get(f, 0) + 1
            n //= f
        f += 1 if f == 2 else 2
    if n > 1:
        primes[n] = primes.get(n, 0) + 1
    divisors = [1]
    for prime, power in primes.items():
        divisors = [d * prime**e for d in divisors for e in range(power + 1)]
    return tuple(sorted(divisors))


def split_factors(layer: Layer, dim: str, devices: int, options: ConfigOptions = ConfigOptions()) -> list[int]:
    """Split factors the options allow for dimension ``dim`` of ``layer`` on ``devices`` devices, ascending.

    A factor divides the dimension's split base (and, under the corrected
    model, ``devices``), leaves blocks of at least ``options.min_shard`` and
    is at most ``devices``; 1 is always allowed. Only divisors are tried, so
    this is fast whatever the sizes.

    Raises
    ------
    ConfigurationError
        ``devices`` is not a whole number from 1 to ``MAX_SEARCH_DEVICES``.
    """
    _check_devices(devices)
    i = layer.dims.index(dim)
    size, base = layer.sizes[i], layer.split_base[i]
    if not options.spatial_split and dim in OPS[layer.op].spatial_dims:
        return [1]
    candidates = _divisors(gcd(base, int(devices)) if options.tiles_mesh else base)
    return [
        f for f in candidates
        if f <= devices and (f == 1 or size // f >= options.min_shard)
        and (not options.powers_of_two or f & (f - 1) == 0)
    ]


def count_configs(layer: Layer, devices: int, options: ConfigOptions = ConfigOptions()) -> int:
    """How many configurations :func:`layer_configs` would list, counted without listing them.

    Counts, dimension by dimension, the prefixes of factors by the devices
    they use: a few hundred numbers at most under the corrected model (the
    divisors of ``devices``), however many configurations there are.

    Raises
    ------
    ConfigurationError
        ``devices`` is not a whole number from 1 to ``MAX_SEARCH_DEVICES``.

    Examples
    --------
    >>> from pase import ops as layers
    >>> count_configs(layers.elementwise("e", [2] * 20, "abcdefghijklmnopqrst"), 1024)
    616666
    """
    _check_devices(devices)
    if options.split_space == "mesh":
        return len(_mesh_configs(layer, devices, options))
    ways = {1: 1}  # devices a prefix uses -> prefixes that use that many
    for d in layer.dims:
        factors = split_factors(layer, d, devices, options)
        extended: dict[int, int] = defaultdict(int)
        for used, n in ways.items():
            for f in factors:
                if used * f > devices:
                    break  # factors ascend
                if not options.tiles_mesh or devices % (used * f) == 0:
                    extended[used * f] += n
        ways = extended
    return sum(ways.values())


def _too_many_configs(layer: Layer, count: int, devices: int, options: ConfigOptions) -> str:
    """The refusal of a layer with ``count`` configurations, with what would bring it under the limit."""
    message = (f"layer {layer.name!r} ({layer.op} over {len(layer.dims)} dimensions {' '.join(layer.dims)}) has "
               f"{count:,} configurations on {devices:,} devices, more than the {MAX_LAYER_CONFIGS:,} pase lists "
               "for one layer; use fewer devices, only powers of two (ConfigOptions(powers_of_two=True), "
               "--powers-of-two), a larger minimum shard size (min_shard, --min-shard) or a layer with fewer "
               "dimensions")
    if not options.powers_of_two:
        fewer = count_configs(layer, devices, replace(options, powers_of_two=True))
        if fewer <= MAX_LAYER_CONFIGS:
            message += f" (with powers of two only it has {fewer:,})"
    return message


def layer_configs(layer: Layer, devices: int, options: ConfigOptions = ConfigOptions()) -> np.ndarray:
    """Every configuration of ``layer`` on ``devices`` devices, as an int array ``(K, ndims)``.

    Row 0 is the unsplit configuration (all ones); rows are in lexicographic
    order of the factors.

    Raises
    ------
    ConfigurationError
        The layer has more than ``MAX_LAYER_CONFIGS`` configurations (counted
        before any is listed; the message gives the count and what to
        change), or ``devices`` is not a whole number from 1 to
        ``MAX_SEARCH_DEVICES``.

    Examples
    --------
    >>> from pase import ops as layers
    >>> fc = layers.fully_connected("fc", b=8, n=8, c=8)
    >>> layer_configs(fc, 2, ConfigOptions(min_shard=1)).tolist()
    [[1, 1, 1], [1, 1, 2], [1, 2, 1], [2, 1, 1]]
    """
    if options.split_space == "mesh":  # a few hundred at most: listed, then checked
        rows = sorted(_mesh_configs(layer, devices, options))
        if len(rows) > MAX_LAYER_CONFIGS:
            raise ConfigurationError(_too_many_configs(layer, len(rows), devices, options))
        return np.array(rows, dtype=np.int64).reshape(len(rows), len(layer.dims))
    count = count_configs(layer, devices, options)
    if count > MAX_LAYER_CONFIGS:
        raise ConfigurationError(_too_many_configs(layer, count, devices, options))
    # Extend prefixes one dimension at a time, dropping any whose product already
    # exceeds the devices; ascending factors keep the rows in lexicographic order.
    rows: list[tuple[tuple[int, ...], int]] = [((), 1)]
    for d in layer.dims:
        factors = split_factors(layer, d, devices, options)
        rows = [(row + (f,), used * f) for row, used in rows for f in factors
                if used * f <= devices and (not options.tiles_mesh or devices % (used * f) == 0)]
    return np.array([row for row, _ in rows], dtype=np.int64).reshape(len(rows), len(layer.dims))


def mesh_shapes(shape: tuple[int, ...], devices: int) -> list[tuple[int, ...]]:
    """The mesh shapes the mesh space places layers on: ``shape`` (one axis of ``devices`` if empty) and it
    with its innermost axis split into two factors, each way (8 x 8 also as 8 x 2 x 4 and 8 x 4 x 2).

    Raises ``ConfigurationError`` when the extents do not multiply to ``devices``.
    """
    shape = tuple(shape) or (int(devices),)
    if np.prod(shape, dtype=object) != devices:
        raise ConfigurationError(f"mesh shape {' x '.join(map(str, shape))} does not hold {devices:,} devices")
    inner = shape[-1]
    return [shape] + [shape[:-1] + (f, inner // f) for f in _divisors(inner) if 1 < f < inner]


def _mesh_configs(layer: Layer, devices: int, options: ConfigOptions) -> set[tuple[int, ...]]:
    """The mesh space of ``layer``: per mesh shape, every assignment of each axis to a dimension or to none,
    kept where each factor is one :func:`split_factors` allows."""
    allowed = [set(split_factors(layer, d, devices, options)) for d in layer.dims]
    out: set[tuple[int, ...]] = set()
    for shape in mesh_shapes(options.mesh_shape, devices):
        axes = [a for a in shape if a > 1]
        for owners in itertools.product(range(len(layer.dims) + 1), repeat=len(axes)):
            factors = [1] * len(layer.dims)
            for a, d in zip(axes, owners):
                if d < len(factors):
                    factors[d] *= a
            if all(f in ok for f, ok in zip(factors, allowed)):
                out.add(tuple(factors))
    return out


def config_counts(graph: Graph, devices: int, options: ConfigOptions = ConfigOptions()) -> dict[str, int]:
    """Number of configurations of every layer (what drives search time), counted without listing them.

    A count may exceed ``MAX_LAYER_CONFIGS``: such a layer is refused when
    its configurations are listed (:func:`layer_configs`).
    """
    return {layer.name: count_configs(layer, devices, options) for layer in graph}


def check_config(layer: Layer, config, devices: int, options: ConfigOptions = ConfigOptions()) -> tuple[int, ...]:
    """Validate a user-given configuration for ``layer``; return it as a tuple.

    Raises
    ------
    ConfigurationError
        Wrong length, a factor that is not a positive divisor of its
        dimension (or of a dimension that may not be split), a product
        above ``devices``, or, under the corrected model, a product that does
        not divide ``devices``; or ``devices`` is not from 1 to
        ``MAX_SEARCH_DEVICES``.
    """
    _check_devices(devices)
    config = tuple(int(f) for f in config)
    if len(config) != len(layer.dims):
        raise ConfigurationError(
            f"layer {layer.name!r}: configuration {config} has {len(config)} factors; "
            f"it needs one per dimension {' '.join(layer.dims)}"
        )
    for d, f, size, base in zip(layer.dims, config, layer.sizes, layer.split_base):
        if f < 1 or base % f:
            what = "may not be split" if base == 1 else f"cannot be split {f} ways"
            raise ConfigurationError(f"layer {layer.name!r}: {d} = {size} {what}")
    used = int(np.prod(config))
    if used > devices:
        raise ConfigurationError(f"layer {layer.name!r}: configuration {config} uses {used} devices but only {devices} exist")
    if options.tiles_mesh and devices % used:
        raise ConfigurationError(
            f"layer {layer.name!r}: configuration {config} uses {used} devices, which do not tile a mesh of {devices}; "
            f"the corrected cost model runs a layer on a sub-mesh whose size divides {devices} "
            "(choose factors whose product divides it, or use the paper's cost model)")
    return config
