"""Megatron-Core's selective module recomputation (``--recompute-granularity selective --recompute-modules``).

Megatron-Core 0.16's ``TransformerConfig.recompute_modules`` names the parts of a transformer layer that
are recomputed in the backward instead of kept from the forward (its default ``["core_attn"]``). Two
kinds of checkpoint:

* *normal checkpointing* (``core_attn``, ``mlp``, ``moe``, ``shared_experts``): the module keeps only
  what enters it (once, in the working precision) and reruns its forward before its backward, so every
  activation inside it is held again, briefly, while its backward runs;
* *output-discarding checkpointing* (``moe_act``, ``layernorm``, ``mla_up_proj``): the module keeps its
  inputs as it always does, but its output, which the next layer would keep, is freed once that layer's
  forward has read it, and recomputed before that layer's backward.

On pase's graphs (:func:`module_plan`), per transformer block (:func:`pase.model.roofline.blocks`):

* ``core_attn``: the attention core (:func:`pase.model.attention.attention_core`), as pase's
  ``selective`` mode always priced it (a fused flash kernel has little to recompute: Megatron-Core
  warns so);
* ``layernorm``: the block's layer norms that run as kernels of their own (a norm whose input is the
  residual stream, not a latent's or a head's norm). Transformer Engine fuses a norm into the product
  after it (``TELayerNormColumnParallelLinear``) where that is one dense product: the attention norm
  before a fused QKV product, the MLP norm before a dense MLP; there the norm is an identity module and
  Megatron-Core does not recompute it. Separate are the attention norm of multi-latent attention
  (Megatron-Core's MLA spec uses ``TENorm``) and the norm before a mixture of experts;
* ``mla_up_proj``: multi-latent attention's up projections and the rotary parts between them and the
  attention core (the layers on a path from a norm into the core, past the last norm): the core's
  ``q``, ``k`` and ``v`` are not kept; refused for a model without multi-latent attention, as
  Megatron-Core refuses it;
* ``mlp``: a dense block's MLP, its norm included where Transformer Engine fuses it (the layers after the
  block's second layer norm, before the residual add that closes the block); MoE blocks' experts are
  not an ``mlp`` (Megatron-Core: ``not self.is_moe_layer``);
* ``moe``: the whole mixture-of-experts layer (router, dispatch, experts, combine, shared experts): its
  dispatch and combine all-to-alls run again in the backward (:func:`pase.model.experts.apply_experts`);
* ``shared_experts``: the MoE block's shared experts;
* ``moe_act``: the experts' SwiGLU activation (:func:`pase.model.experts.apply_experts`: its output is not
  kept for ``fc2``'s weight gradient; the ``fc1`` output it is recomputed from is kept anyway).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from pase.errors import ConfigurationError
from pase.ir.graph import Graph
from pase.model.attention import attention_core
from pase.model.roofline import blocks

__all__ = ["MODULES", "DEFAULT_MODULES", "ModulePlan", "module_plan", "check_modules", "search_sets",
           "shared_expert_layers"]

# Megatron-Core 0.16's choices (TransformerConfig.recompute_modules), in its order.
MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
DEFAULT_MODULES = ("core_attn",)
NORM_OPS = frozenset({"RMSNorm", "LayerNorm"})
MOE_OPS = frozenset({"MoERouter", "MoEExperts", "MoECombine"})


@dataclass(frozen=True)
class ModulePlan:
    """What a set of recomputed modules means on one graph.

    ``discarded``: layers whose outputs are not kept (output-discarding checkpoints and the attention
    core); ``units``: layer -> the checkpointed module it is in (normal checkpoints); ``recomputed``: layers
    whose forward reruns in the backward; ``moe_act``: the experts' activation is recomputed.
    """

    discarded: frozenset[str] = frozenset()
    units: Mapping[str, str] = field(default_factory=dict)
    recomputed: frozenset[str] = frozenset()
    moe_act: bool = False


def check_modules(modules: Iterable[str]) -> tuple[str, ...]:
    """``modules`` as a tuple in Megatron-Core's order, each once.

    Raises ``ConfigurationError`` naming an unknown module and the choices.
    """
    modules = tuple(modules)
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        raise ConfigurationError(f"unknown recompute module {unknown[0]!r}; choose from {', '.join(MODULES)}")
    if not modules:
        raise ConfigurationError(f"name at least one recompute module ({', '.join(MODULES)})")
    return tuple(m for m in MODULES if m in modules)


def _parts(graph: Graph) -> dict[str, dict]:
    """Per block: its layers in graph order, its layer norms, MoE layers and MLA up-projection layers."""
    def compute():
        of = blocks(graph)
        members: dict[str, list[str]] = {}
        for layer in graph.layers:
            if layer.name in of:
                members.setdefault(of[layer.name], []).append(layer.name)
        core = attention_core(graph)
        out = {}
        for name, layers in members.items():
            inside = set(layers)

            def residual_norm(n: str) -> bool:
                # A layer norm reads the residual stream: the block's input or a residual add.
                layer = graph.layer(n)
                return layer.op in NORM_OPS and all(
                    e.src not in inside or graph.layer(e.src).op == "Elementwise" for e in graph.in_edges(n))
            norms = [n for n in layers if residual_norm(n)]
            moe = [n for n in layers if graph.layer(n).op in MOE_OPS]
            up: set[str] = set()
            # The core's inputs: what its layers and the products reading it (the context product) read.
            readers = [n for n in layers if n in core or any(e.src in core for e in graph.in_edges(n))]
            stack = [e.src for n in readers for e in graph.in_edges(n) if e.src not in core]
            while stack:
                n = stack.pop()
                if n in up or n not in inside or graph.layer(n).op in NORM_OPS:
                    continue
                feeds = [e.src for e in graph.in_edges(n)]
                if graph.layer(n).weights and any(s in norms for s in feeds):
                    continue  # a down projection from the layer norm: kept, as Megatron keeps the latents
                up.add(n)
                stack.extend(feeds)
            # Up projections exist only where something of the core's inputs passed a latent's norm.
            latent = any(graph.layer(e.src).op in NORM_OPS and e.src not in norms
                         for n in up for e in graph.in_edges(n))
            out[name] = {"layers": layers, "norms": norms, "moe": moe, "up": up if latent else set()}
        return out
    return graph.derived("recompute module parts", compute)


def _ffn(part: Mapping) -> list[str]:
    """A block's MLP layers (:func:`_parts`' entry): after its second layer norm, before the residual add that
    closes it."""
    layers, norms = part["layers"], part["norms"]
    return layers[layers.index(norms[1]) + 1:-1] if len(norms) >= 2 else []


def shared_expert_layers(graph: Graph) -> dict[str, tuple[str, ...]]:
    """Per transformer block with experts (:func:`pase.model.roofline.blocks`' name), its shared experts' layers:
    the MLP's layers that are not the router, the experts or the combine."""
    return {block: tuple(n for n in _ffn(p) if n not in p["moe"])
            for block, p in _parts(graph).items() if p["moe"]}


def module_plan(graph: Graph, modules: Iterable[str]) -> ModulePlan:
    """The layers of ``graph`` that Megatron-Core's ``modules`` recompute (the module docstring).

    Raises ``ConfigurationError`` for an unknown module, ``mla_up_proj`` on a model without multi-latent
    attention, or ``moe`` / ``moe_act`` / ``shared_experts`` on a model without them (Megatron-Core's own
    refusals, or a module that would recompute nothing).
    """
    modules = check_modules(modules)
    parts = _parts(graph)
    discarded: set[str] = set()
    units: dict[str, str] = {}
    if "core_attn" in modules:
        discarded |= attention_core(graph)
    has = {"mla_up_proj": False, "moe": False, "shared_experts": False}
    for block, p in parts.items():
        norms, moe = p["norms"], p["moe"]
        ffn = _ffn(p)
        if "layernorm" in modules:
            if p["up"] and norms:
                discarded.add(norms[0])  # MLA's attention norm is a kernel of its own
            if moe and len(norms) >= 2:
                discarded.add(norms[1])  # the norm before the experts, a TENorm
        if "mla_up_proj" in modules and p["up"]:
            has["mla_up_proj"] = True
            discarded |= p["up"]
        if "mlp" in modules and not moe and ffn:
            for n in [norms[1], *ffn]:  # Transformer Engine fuses the norm into fc1
                units[n] = f"{block}.mlp"
        shared = [n for n in ffn if n not in moe]
        if moe and "moe" in modules:
            has["moe"] = True
            for n in ffn:
                units[n] = f"{block}.moe"
        elif moe and "shared_experts" in modules and shared:
            has["shared_experts"] = True
            for n in shared:
                units[n] = f"{block}.shared_experts"
        if moe:
            has["moe_act"] = True
    if "mla_up_proj" in modules and not has["mla_up_proj"]:
        raise ConfigurationError(f"{graph.name!r} has no multi-latent attention: the mla_up_proj recompute module "
                                 "applies only to it (Megatron-Core refuses it too); leave it out")
    for name in ("moe", "moe_act", "shared_experts"):
        if name in modules and not has.get(name, False):
            raise ConfigurationError(f"{graph.name!r} has no {'shared experts' if name == 'shared_experts' else 'experts'}: "
                                     f"the {name} recompute module recomputes nothing there; leave it out")
    discarded -= set(units)
    return ModulePlan(frozenset(discarded), units, frozenset(discarded) | frozenset(units), "moe_act" in modules)


def search_sets(graph: Graph) -> tuple[tuple[str, ...], ...]:
    """The module sets the 3-D search tries besides pase's three modes, where they matter: on a model with
    experts, recomputing the cheap, memory-heavy parts of its MoE blocks (``moe_act`` and ``layernorm``), and
    with multi-latent attention its up projections and the dense MLPs too (Megatron-Bridge's DeepSeek-V3
    recipes: ``mla_up_proj`` and ``mlp``). Not ``moe``: it reruns the dispatch's all-to-alls, where ``full``
    recomputation already keeps less. A dense model has none: pase's ``selective`` (the attention core) and
    ``full`` cover it. Each set costs the search another pass over its groups, so they are few."""
    parts = _parts(graph)
    if not any(p["moe"] for p in parts.values()):
        return ()
    if any(p["up"] for p in parts.values()):
        return (check_modules(("mla_up_proj", "mlp")), check_modules(("moe_act", "layernorm", "mla_up_proj", "mlp")))
    return (check_modules(("moe_act", "layernorm")),)
