"""Configurations: the ways one layer can be split across the devices.

A configuration gives every dimension of a layer's iteration space a split
factor; the factors divide the dimension (so blocks are equal) and their
product, the number of devices the layer uses, is at most ``p``. Under the
corrected cost model that product also divides ``p``: a layer runs on a
sub-mesh that tiles the device mesh and is replicated over the rest
(:mod:`pase.model.layout`); the paper's model lets the other devices idle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pase.errors import ConfigurationError
from pase.ir.graph import Graph, Layer
from pase.ops import OPS

__all__ = ["COST_MODELS", "ConfigOptions", "split_factors", "layer_configs", "config_counts", "check_config"]

# "corrected": layouts on the device mesh with pending sums, computed backward volumes and the
# audit's fixes (pase.model.cost); "paper": the paper's equation 1 and its prototype's edge rule.
COST_MODELS = ("corrected", "paper")


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
    sync_batchnorm : bool or None
        Whether BatchNorm synchronises its statistics over a split batch
        (:class:`pase.ops.CollectiveOptions`); ``None``: the cost model's
        default (the paper's model does, the corrected one follows PyTorch's
        DDP, which does not).
    """

    powers_of_two: bool = False
    min_shard: int = 1
    spatial_split: bool = False
    cost_model: str = "corrected"
    sync_batchnorm: bool | None = None

    def __post_init__(self):
        if isinstance(self.min_shard, bool) or not isinstance(self.min_shard, int) or self.min_shard < 1:
            raise ConfigurationError(f"min_shard must be a whole number >= 1, got {self.min_shard!r}")
        if self.cost_model not in COST_MODELS:
            raise ConfigurationError(f"unknown cost model {self.cost_model!r}; choose one of {', '.join(COST_MODELS)}")

    @property
    def tiles_mesh(self) -> bool:
        """Whether a configuration's device count must divide the devices (the corrected model)."""
        return self.cost_model == "corrected"

    @property
    def batchnorm_synchronised(self) -> bool:
        """Whether BatchNorm statistics are all-reduced over a split batch under these options."""
        return self.cost_model == "paper" if self.sync_batchnorm is None else self.sync_batchnorm


def split_factors(layer: Layer, dim: str, devices: int, options: ConfigOptions = ConfigOptions()) -> list[int]:
    """Split factors the options allow for dimension ``dim`` of ``layer`` on ``devices`` devices, ascending.

    A factor divides the dimension's split base, leaves blocks of at least
    ``options.min_shard`` and is at most ``devices``; 1 is always allowed.
    """
    i = layer.dims.index(dim)
    size, base = layer.sizes[i], layer.split_base[i]
    if not options.spatial_split and dim in OPS[layer.op].spatial_dims:
        return [1]
    return [
        f for f in range(1, min(base, devices) + 1)
        if base % f == 0 and (f == 1 or size // f >= options.min_shard)
        and (not options.powers_of_two or f & (f - 1) == 0)
        and (not options.tiles_mesh or devices % f == 0)
    ]


def layer_configs(layer: Layer, devices: int, options: ConfigOptions = ConfigOptions()) -> np.ndarray:
    """Every configuration of ``layer`` on ``devices`` devices, as an int array ``(K, ndims)``.

    Row 0 is the unsplit configuration (all ones); rows are in lexicographic
    order of the factors.

    Examples
    --------
    >>> from pase import ops as layers
    >>> fc = layers.fully_connected("fc", b=8, n=8, c=8)
    >>> layer_configs(fc, 2, ConfigOptions(min_shard=1)).tolist()
    [[1, 1, 1], [1, 1, 2], [1, 2, 1], [2, 1, 1]]
    """
    # Extend prefixes one dimension at a time, dropping any whose product already
    # exceeds the devices; ascending factors keep the rows in lexicographic order.
    rows: list[tuple[tuple[int, ...], int]] = [((), 1)]
    for d in layer.dims:
        factors = split_factors(layer, d, devices, options)
        rows = [(row + (f,), used * f) for row, used in rows for f in factors
                if used * f <= devices and (not options.tiles_mesh or devices % (used * f) == 0)]
    return np.array([row for row, _ in rows], dtype=np.int64).reshape(len(rows), len(layer.dims))


def config_counts(graph: Graph, devices: int, options: ConfigOptions = ConfigOptions()) -> dict[str, int]:
    """Number of configurations of every layer (what drives search time)."""
    return {layer.name: len(layer_configs(layer, devices, options)) for layer in graph}


def check_config(layer: Layer, config, devices: int, options: ConfigOptions = ConfigOptions()) -> tuple[int, ...]:
    """Validate a user-given configuration for ``layer``; return it as a tuple.

    Raises
    ------
    ConfigurationError
        Wrong length, a factor that is not a positive divisor of its
        dimension (or of a dimension that may not be split), a product
        above ``devices``, or, under the corrected model, a product that does
        not divide ``devices``.
    """
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
