"""FP8 training recipes: what casting a product's operands to FP8 costs, recipe by recipe.

Transformer Engine trains a product with weights in FP8 (the layers of
:func:`pase.model.roofline.fp8_products`) by casting its operands to FP8
before each product, with a scale. How the scale is found is the recipe, and
it decides what the casts cost (``--precision``, the names of
:data:`pase.ir.configs.PRECISIONS`; each recipe's casts are its
:class:`Fp8Recipe` below):

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
* ``"mxfp8"``, MXFP8 block scaling (TE's ``MXFP8BlockScaling``,
  Megatron-Core's ``--fp8-recipe mxfp8``, Blackwell only: an E8M0 scale a
  block of 32 elements, applied by the tensor cores inside the product, at
  the FP8 rate). The blocks run along the contraction, so the weight
  gradient needs a copy quantised column-wise: each cast is one kernel that
  reads BF16 once and writes both copies and their scales
  (``cast_mxfp8_2D_kernel``; :data:`MX_CAST_BYTES` an element), no amax pass
  and no scale kernel. A normalisation writes BF16 and the quantisation
  follows (TE's norm runs MXFP8 unfused unless ``NVTE_NORM_FWD_USE_CUDNN``,
  which Megatron-Bridge's performance scripts unset for such runs); an output
  gradient is quantised both ways too.

Every recipe casts a weight (and its second copy) once a step, at its first
microbatch, and keeps them for the rest (Megatron-Core's
``is_first_microbatch``, its grouped expert products' too):
:func:`weight_cast_s`. The copies stay in memory over the step
(``copy_bytes`` an element: TE's cached weight workspace, quantised
row-wise and, for the input gradient, column-wise while training, its
``Linear``'s ``quantize_weight``). The experts' grouped products cast their
input forward and their output gradient backward as an activation is cast,
both copies each (TE's ``GroupedLinear`` quantises them row-wise and
column-wise for the weight gradient; no normalisation writes them):
:mod:`pase.model.experts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pase.hardware.efficiency import Efficiency
from pase.ir.graph import Graph, Layer

__all__ = ["AMAX_BYTES", "CAST_TRANSPOSE_BYTES", "DELAYED", "MX_CAST_BYTES", "MXFP8",
           "NORMALISATION_OPS", "RECIPES", "TENSORWISE", "TRANSPOSE_BYTES", "Cast", "Fp8Recipe", "fp8_recipe",
           "input_casts", "weight_cast_s"]

# A cast-transpose (TE's fp8_cast_transpose_fused) reads a BF16 element and writes it in FP8 twice, as is and
# transposed (Hopper's FP8 products take both operands K-major, so the weight gradient needs the transpose).
CAST_TRANSPOSE_BYTES = 4
# The transpose alone of a tensor already in FP8: read one byte, write one.
TRANSPOSE_BYTES = 2
# A cast reads its BF16 tensor (2 bytes an element) and writes the rest of its bytes: the FP8 copies it makes.
BF16_BYTES = 2
# Current scaling's amax pass reads the BF16 tensor once before its cast.
AMAX_BYTES = 2
# MXFP8: read a BF16 element, write it row-wise and column-wise in FP8 with a 1-byte scale a block of 32 each way.
MX_CAST_BYTES = 2 + 1 + 1 + 2 / 32
# Normalisations that write an FP8 product's input themselves (TE's LayerNormLinear).
NORMALISATION_OPS = frozenset({"LayerNorm", "RMSNorm"})


class Cast(NamedTuple):
    """One tensor's FP8 cast for a product: bytes an element forward and backward, the FP8 products that share
    the kernels (one fused product reads its input once), and the kernels it launches."""

    forward: float
    backward: float
    readers: int = 1
    kernels: int = 1

    def shared(self, readers: int) -> "Cast":
        """The same cast shared by ``readers`` products."""
        return self._replace(readers=readers)


@dataclass(frozen=True)
class Fp8Recipe:
    """An FP8 scaling recipe (the module docstring): ``precision`` its name in :data:`pase.ir.configs.PRECISIONS`,
    ``title`` its name in words, ``megatron`` Megatron-Core's ``--fp8-recipe``; the casts of an activation input
    (``activation``; a grouped expert product's input too), of an input a normalisation writes (``normalised``)
    and of an output gradient (``gradient``); ``weight_bytes`` what casting a weight moves an element, once a
    step, and ``copy_bytes`` what its FP8 copies hold an element over the step; ``blackwell`` whether it needs Blackwell's tensor
    cores (:attr:`pase.hardware.cluster.Cluster.mxfp8`)."""

    precision: str
    title: str
    megatron: str
    activation: Cast
    normalised: Cast
    gradient: Cast
    weight_bytes: float
    copy_bytes: float
    blackwell: bool = False


DELAYED = Fp8Recipe("fp8", "delayed scaling", "delayed", activation=Cast(CAST_TRANSPOSE_BYTES, 0),
                    normalised=Cast(0, TRANSPOSE_BYTES), gradient=Cast(0, CAST_TRANSPOSE_BYTES),
                    weight_bytes=CAST_TRANSPOSE_BYTES, copy_bytes=CAST_TRANSPOSE_BYTES - BF16_BYTES)
# The amax pass before each cast, and its two kernels (the amax, the scale); a norm takes its output's amax itself.
TENSORWISE = Fp8Recipe("fp8-cs", "current per-tensor scaling", "tensorwise",
                       activation=Cast(AMAX_BYTES + CAST_TRANSPOSE_BYTES, 0, kernels=3),
                       normalised=Cast(CAST_TRANSPOSE_BYTES, 0, kernels=2),
                       gradient=Cast(0, AMAX_BYTES + CAST_TRANSPOSE_BYTES, kernels=3),
                       weight_bytes=AMAX_BYTES + CAST_TRANSPOSE_BYTES, copy_bytes=CAST_TRANSPOSE_BYTES - BF16_BYTES)
MXFP8 = Fp8Recipe("mxfp8", "MXFP8 block scaling", "mxfp8", activation=Cast(MX_CAST_BYTES, 0),
                  normalised=Cast(MX_CAST_BYTES, 0), gradient=Cast(0, MX_CAST_BYTES), weight_bytes=MX_CAST_BYTES,
                  copy_bytes=MX_CAST_BYTES - BF16_BYTES, blackwell=True)
RECIPES = {r.precision: r for r in (DELAYED, TENSORWISE, MXFP8)}


def fp8_recipe(precision: str) -> Fp8Recipe | None:
    """The recipe of ``precision`` (a name of :data:`pase.ir.configs.PRECISIONS`), ``None`` for ``"bf16"``."""
    return RECIPES.get(precision)


def input_casts(graph: Graph, layer: Layer, fp8: frozenset[str], recipe: Fp8Recipe) -> tuple[Cast, ...]:
    """Per input of the FP8 product ``layer`` of ``graph`` (``fp8``: the FP8 products,
    :func:`pase.model.roofline.fp8_products`), its cast under ``recipe`` (the module docstring): a tensor a
    normalisation writes, ``recipe.normalised``; any other ``recipe.activation``; shared by the FP8 products
    reading the same tensor (one fused product reads it once)."""
    out = []
    for i in range(len(layer.inputs)):
        feeds = [e for e in graph.in_edges(layer.name) if e.dst_input == i]
        if not feeds:
            out.append(recipe.activation)
            continue
        e = feeds[0]
        readers = max(len({r.dst for r in graph.out_edges(e.src) if r.src_output == e.src_output and r.dst in fp8}), 1)
        cast = recipe.normalised if graph.layer(e.src).op in NORMALISATION_OPS else recipe.activation
        out.append(cast.shared(readers))
    return tuple(out)


def weight_cast_s(fp8_params, eff: Efficiency, recipe: Fp8Recipe | None) -> np.ndarray:
    """Seconds, once a step, of casting ``fp8_params`` weight elements (per device, an array) of FP8 products
    under ``recipe`` (``recipe.weight_bytes`` each; none without a recipe)."""
    if recipe is None:
        return np.zeros(np.shape(fp8_params))
    return np.asarray(fp8_params, dtype=float) * recipe.weight_bytes / eff.memory_Bps
