"""FP8 training recipes: what casting a product's operands to FP8 costs, recipe by recipe.

Transformer Engine trains a product with weights in FP8 (the layers of
:func:`pase.model.roofline.fp8_products`) by casting its operands to FP8
before each product, with a per-tensor scale. How the scale is found is the
recipe, and it decides what the casts cost (``--precision``, the names of
:data:`pase.ir.configs.PRECISIONS`):

* ``"fp8"``, delayed scaling (TE's ``DelayedScaling``, Megatron-Core's
  ``--fp8-recipe delayed``, its default and NeMo 24.07's): the scale comes
  from the amax history of earlier steps, so a cast is one pass, its amax
  recorded on the way. An activation input, forward: a cast-transpose
  (read BF16, write the FP8 tensor and its transpose for the weight
  gradient; :data:`CAST_TRANSPOSE_BYTES` an element). An input a
  normalisation writes is written in FP8 by the normalisation itself (TE's
  fully fused ``LayerNormLinear``), whose backward only transposes it
  (:data:`TRANSPOSE_BYTES`). An output gradient, backward: a cast-transpose.
* ``"fp8-cs"``, current per-tensor scaling (TE's ``Float8CurrentScaling``,
  Megatron-Core's ``--fp8-recipe tensorwise``; the FP8-CS of NVIDIA's
  Megatron-Bridge performance recipes, whose mixtures of experts run no
  other per-tensor recipe): the scale comes from the tensor's own amax, so a
  cast is three kernels (``Float8CurrentScalingQuantizer::quantize_impl``):
  the amax pass (read BF16, :data:`AMAX_BYTES` an element), the scale from
  the amax, and the cast-transpose as above. A normalisation takes its
  output's amax while writing it in BF16 (``FUSED_NORM_AMAX_FP8``), then the
  scale kernel and a cast-transpose run forward, and the backward needs no
  transpose. Under sequence parallelism the amax of a column-parallel
  product's input and of a row-parallel product's output gradient is also
  all-reduced over the tensor-parallel group, one 4-byte all-reduce each:
  not priced (a few a block and microbatch, each a collective's latency,
  about 0.5% of the Llama 3.1 405B row's step at 15 us each).

Either recipe casts a weight and its transpose once a step, at its first
microbatch, and keeps them for the rest (Megatron-Core's
``is_first_microbatch``, its grouped expert products' too):
:func:`weight_cast_s`. The experts' grouped products cast their input
forward and their output gradient backward without a transpose kernel of
their own (:data:`CAST_BYTES`; :mod:`pase.model.experts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pase.hardware.efficiency import Efficiency
from pase.ir.graph import Graph, Layer

__all__ = ["AMAX_BYTES", "CAST_BYTES", "CAST_TRANSPOSE_BYTES", "DELAYED", "NORMALISATION_OPS", "RECIPES",
           "TENSORWISE", "TRANSPOSE_BYTES", "Cast", "Fp8Recipe", "fp8_recipe", "input_casts", "weight_cast_s"]

# A cast without a transpose reads a BF16 element and writes an FP8 one.
CAST_BYTES = 3
# A cast-transpose (TE's fp8_cast_transpose_fused) reads a BF16 element and writes it in FP8 twice, as is and
# transposed (Hopper's FP8 products take both operands K-major, so the weight gradient needs the transpose).
CAST_TRANSPOSE_BYTES = 4
# The transpose alone of a tensor already in FP8: read one byte, write one.
TRANSPOSE_BYTES = 2
# Current scaling's amax pass reads the BF16 tensor once before its cast.
AMAX_BYTES = 2
# Normalisations that write an FP8 product's input themselves (TE's LayerNormLinear).
NORMALISATION_OPS = frozenset({"LayerNorm", "RMSNorm"})


class Cast(NamedTuple):
    """One tensor's FP8 cast for a product: bytes an element forward and backward, the FP8 products that share
    the kernels (one fused product reads its input once), and the kernels it launches."""

    forward: float
    backward: float
    readers: int = 1
    kernels: int = 1


@dataclass(frozen=True)
class Fp8Recipe:
    """An FP8 scaling recipe (the module docstring): ``precision`` its name in :data:`pase.ir.configs.PRECISIONS`,
    ``title`` its name in words, ``megatron`` Megatron-Core's ``--fp8-recipe``, ``amax_bytes`` what a separate amax pass reads an element
    before each cast (0: taken in the cast), ``extra_kernels`` the kernels a cast adds to its own (the amax pass
    and the scale), and ``norm_writes_fp8`` whether a normalisation writes its product's input in FP8."""

    precision: str
    title: str
    megatron: str
    amax_bytes: int
    extra_kernels: int
    norm_writes_fp8: bool

    def cast(self, nbytes: float, readers: int = 1) -> Cast:
        """The forward cast of an activation of ``nbytes`` bytes an element as the cast kernel moves them."""
        return Cast(nbytes + self.amax_bytes, 0.0, readers, 1 + self.extra_kernels)

    def gradient_cast(self) -> Cast:
        """An output gradient's cast-transpose, backward."""
        return Cast(0.0, CAST_TRANSPOSE_BYTES + self.amax_bytes, 1, 1 + self.extra_kernels)

    def normalised(self, readers: int) -> Cast:
        """The cast of a product's input that a normalisation writes."""
        if self.norm_writes_fp8:
            return Cast(0.0, TRANSPOSE_BYTES, readers, 1)
        # The norm took the amax: the scale kernel and the cast-transpose remain.
        return Cast(CAST_TRANSPOSE_BYTES, 0.0, readers, 2)


DELAYED = Fp8Recipe("fp8", "delayed scaling", "delayed", amax_bytes=0, extra_kernels=0, norm_writes_fp8=True)
TENSORWISE = Fp8Recipe("fp8-cs", "current per-tensor scaling", "tensorwise", amax_bytes=AMAX_BYTES, extra_kernels=2,
                       norm_writes_fp8=False)
RECIPES = {r.precision: r for r in (DELAYED, TENSORWISE)}


def fp8_recipe(precision: str) -> Fp8Recipe | None:
    """The recipe of ``precision`` (a name of :data:`pase.ir.configs.PRECISIONS`), ``None`` for ``"bf16"``."""
    return RECIPES.get(precision)


def input_casts(graph: Graph, layer: Layer, fp8: frozenset[str], recipe: Fp8Recipe) -> tuple[Cast, ...]:
    """Per input of the FP8 product ``layer`` of ``graph`` (``fp8``: the FP8 products,
    :func:`pase.model.roofline.fp8_products`), its cast under ``recipe`` (the module docstring): a tensor a
    normalisation writes, :meth:`Fp8Recipe.normalised`; any other a forward cast-transpose; ``readers`` the FP8
    products reading the same tensor, which share its kernels."""
    out = []
    for i in range(len(layer.inputs)):
        feeds = [e for e in graph.in_edges(layer.name) if e.dst_input == i]
        if not feeds:
            out.append(recipe.cast(CAST_TRANSPOSE_BYTES))
            continue
        e = feeds[0]
        readers = max(len({r.dst for r in graph.out_edges(e.src) if r.src_output == e.src_output and r.dst in fp8}), 1)
        if graph.layer(e.src).op in NORMALISATION_OPS:
            out.append(recipe.normalised(readers))
        else:
            out.append(recipe.cast(CAST_TRANSPOSE_BYTES, readers))
    return tuple(out)


def weight_cast_s(fp8_params, eff: Efficiency, recipe: Fp8Recipe | None) -> np.ndarray:
    """Seconds, once a step, of casting ``fp8_params`` weight elements (per device, an array) of FP8 products to
    FP8 and its transpose under ``recipe`` (a cast-transpose, after an amax pass under current scaling; none
    without a recipe)."""
    if recipe is None:
        return np.zeros(np.shape(fp8_params))
    return np.asarray(fp8_params, dtype=float) * (CAST_TRANSPOSE_BYTES + recipe.amax_bytes) / eff.memory_Bps
