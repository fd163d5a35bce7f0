"""Mixture of experts: the top-k router, the batched SwiGLU experts and the weighted combine.

A mixture-of-experts feed-forward block is three vertices (GShard's
formulation, Lepikhin et al. 2020, with the sequence as the group):

``MoERouter`` over ``b s d``
    ``logits = x W_r^T`` to ``E`` experts, softmax, top-``k``, and the
    *dispatch*: every token copied into the slots of its ``k`` experts. Outputs
    the dispatched tokens ``[b, C, E, d]`` and each slot's gate ``[b, C, E]``.
``MoEExperts`` over ``b c x d f``
    ``E`` SwiGLU feed-forward networks, one per expert (``x``), each applied to
    its ``C`` slots per sequence: ``y = (silu(t W_g^T) * (t W_u^T)) W_d^T``.
``MoECombine`` over ``b s d``
    every token's output, the gate-weighted sum of its ``k`` slots.

``C`` is the *capacity*: slots per expert and sequence,
``ceil(capacity_factor * s * k / E)`` (:func:`expert_capacity`). With
capacity factor 1 every expert gets its even share, ``k`` of the ``E``
experts' work per token: the FLOPs of a token-dropless run with balanced
routing; a larger factor pads (more slots, more work, more bytes), a smaller
one drops tokens.

Expert parallelism is the split of ``x`` in ``MoEExperts``. The slot tensors
index the router's and combiner's ``s`` by their capacity axis (a device
holding a chunk of the sequence holds that chunk's share of the slots, a
GShard group) and the expert axis by nothing, so between a token-parallel
router (``b`` or ``s`` split) and expert-parallel experts the shard moves
from the token axis to the expert axis: the layout model
(:func:`pase.model.layout.redistribute_s`) prices that as an all-to-all (the
dispatch; the combine back the same way, and both gradients in reverse),
never an all-gather. A router that replicates the tokens over the expert
split instead (every device routes every token and keeps its experts' slots)
is priced as the all-gather it is: both are real token dispatchers (Megatron-LM's
``alltoall`` and ``allgather``).

Every expert's weights are weights of ``MoEExperts`` (all ``E``: the
memory model counts them all, split ``x`` ways under expert parallelism), and
their gradients are all-reduced over ``b c`` only: over the replicas of each
expert, never across experts.

FLOP constants are per element; a multiply-add counts 2.
"""

from __future__ import annotations

import math

import numpy as np

from pase.errors import GraphError
from pase.ir.graph import Layer, TensorSpec
from pase.ops.norm import SOFTMAX_FLOPS_PER_ELEMENT, SOFTMAX_FORWARD_FLOPS
from pase.ops.registry import (
    Collective, CollectiveOptions, Flops, check_sizes, params, register, weight_gradient_collectives,
)

__all__ = ["expert_capacity", "moe_router", "moe_experts", "moe_combine", "TOPK_FLOPS_PER_LOGIT",
           "SWIGLU_FLOPS_PER_ELEMENT"]

# Top-k selection: k passes over the E logits of a token, one comparison each.
TOPK_FLOPS_PER_LOGIT = 1
# silu(gate) * up, training: value and product forward (2), derivative and chain rule backward (2),
# and each factor's gradient product (1 each): the gated Elementwise op's count.
SWIGLU_FLOPS_PER_ELEMENT = 6
SWIGLU_FORWARD_FLOPS = 2


def expert_capacity(tokens: int, experts: int, top_k: int, capacity_factor: float = 1.0) -> int:
    """Slots per expert for a group of ``tokens``: ``ceil(capacity_factor * tokens * top_k / experts)``.

    Raises
    ------
    GraphError
        A count is not a positive integer, ``top_k`` exceeds ``experts``, or
        ``capacity_factor`` is not a positive finite number.
    """
    check_sizes("expert capacity", tokens=tokens, experts=experts, top_k=top_k)
    if top_k > experts:
        raise GraphError(f"top_k {top_k} is more than the {experts} experts")
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float)) \
            or not 0 < capacity_factor < math.inf:
        raise GraphError(f"capacity_factor must be a positive finite number, got {capacity_factor!r}")
    # Rounded to 1e-9 first so that 1.25 * 4096 * 2 / 8 is 1280, not 1281 from a binary fraction.
    return max(1, math.ceil(round(capacity_factor * tokens * top_k / experts, 9)))


def _check_moe(name: str, s: int, experts: int, top_k: int, capacity: int) -> None:
    """``GraphError`` naming layer ``name`` unless the routing sizes are positive and consistent."""
    check_sizes(name, experts=experts, top_k=top_k, capacity=capacity)
    if top_k > experts:
        raise GraphError(f"layer {name!r}: top_k {top_k} is more than the {experts} experts")
    if capacity > s:
        # A token takes at most one slot of an expert: more slots than tokens are never filled.
        raise GraphError(f"layer {name!r}: capacity {capacity} is more slots than the {s} tokens of a sequence")


def _slots(layer: Layer, blk: np.ndarray) -> np.ndarray:
    """Slots of one device's block of a router or combiner: ``b * C * E`` scaled by its share of the sequence."""
    p = layer.param_dict
    b, s = blk[:, 0], blk[:, 1]
    return b * p["capacity"] * (s / layer.size_of["s"]) * p["experts"]


def _sequence_base(s: int, capacity: int) -> int:
    """Split base of ``s`` in a router or combiner: the capacity axis follows ``s``, so a split divides both."""
    return math.gcd(s, capacity)


def _router_flops(layer, blk):
    p = layer.param_dict
    b, s, d = blk.T
    experts, k = p["experts"], p["top_k"]
    gemm = 2.0 * b * s * d * experts
    # Softmax and top-k run on whole rows of E logits, on every device of a d split (after the all-reduce).
    logits = b * s * experts
    dispatched = _slots(layer, blk) * d
    return Flops(forward=gemm + (SOFTMAX_FORWARD_FLOPS + k * TOPK_FLOPS_PER_LOGIT) * logits + dispatched,
                 backward=gemm + (SOFTMAX_FLOPS_PER_ELEMENT - SOFTMAX_FORWARD_FLOPS) * logits,
                 inputs=(gemm + dispatched,))


def _router_collectives(layer, cfg, blk, options=CollectiveOptions()):
    b, s, _ = blk.T
    # A split d leaves every device partial logits; top-k needs the whole sum before it can route.
    logits = Collective("allreduce", b * s * layer.param_dict["experts"], ("d",), "router logits partial sums")
    return [logits] + weight_gradient_collectives(layer, cfg, blk, options)


def _router_extra(layer, cfg, blk):
    b, s, _ = blk.T
    return b * s * layer.param_dict["experts"]  # the routing probabilities, for the softmax's backward


@register("MoERouter", _router_flops, _router_collectives, contraction=False,
          saved=lambda layer: (frozenset({0}), frozenset()), saved_extra=_router_extra)
def moe_router(name: str, b: int, s: int, d: int, experts: int, top_k: int, capacity: int, groups: int = 1,
               group_topk: int = 1) -> Layer:
    """Top-k router and dispatch of ``b`` sequences of ``s`` tokens of width ``d`` to ``experts`` experts.

    ``groups`` and ``group_topk``: group-limited routing (DeepSeek-V3's node-limited routing, Megatron-Core's
    ``moe_router_num_groups`` and ``moe_router_group_topk``): the experts dealt into ``groups`` equal groups of
    consecutive experts, a token's ``top_k`` chosen among those of its ``group_topk`` best groups (1, 1: no
    limit). It decides where a token's copies go (:mod:`pase.model.experts`), not what routing computes.

    Input ``x[b, s, d]``; weight ``W_r[E, d]``; outputs the dispatched tokens
    ``[b, capacity, E, d]`` and the slot gates ``[b, capacity, E]``, their
    capacity axis following ``s`` and their expert axis never split (the
    module docstring). ``capacity``: slots per expert and sequence
    (:func:`expert_capacity`).

    FLOPs: the logits ``2 b s d E`` forward, ``2 b s d E`` for ``dW_r`` and for
    ``dx``; softmax ``SOFTMAX_FLOPS_PER_ELEMENT`` and top-k ``k *
    TOPK_FLOPS_PER_LOGIT`` per logit (``b s E``), on whole rows; the dispatch
    one copy per dispatched element forward and one add into ``dx`` backward.
    Communication: a split ``d`` all-reduces the logits (``b s E`` per
    device); a split ``b s`` all-reduces ``dW_r``. Keeps ``x`` and the
    routing probabilities (``b s E``).

    Raises
    ------
    GraphError
        A size is not a positive integer, ``top_k`` exceeds ``experts``,
        ``capacity`` exceeds ``s``, or the groups do not divide the experts
        or leave fewer than ``top_k`` experts to choose from.
    """
    check_sizes(name, b=b, s=s, d=d, groups=groups, group_topk=group_topk)
    _check_moe(name, s, experts, top_k, capacity)
    if experts % groups or group_topk > groups or top_k > group_topk * (experts // groups):
        raise GraphError(f"layer {name!r}: {groups} router groups choosing {group_topk} must divide the {experts} "
                         f"experts and leave at least top_k {top_k} of them to choose from")
    # Routing groups are recorded only where they limit the routing, so that other graphs keep their params.
    limited = {"groups": groups, "group_topk": group_topk} if groups > 1 else {}
    return Layer(
        name, "MoERouter", ("b", "s", "d"), (b, s, d),
        inputs=(TensorSpec((b, s, d), ("b", "s", "d"), "x"),),
        outputs=(TensorSpec((b, capacity, experts, d), ("b", "s", None, "d"), "dispatched"),
                 TensorSpec((b, capacity, experts), ("b", "s", None), "gates")),
        weights=(TensorSpec((experts, d), (None, "d"), "router"),),
        split_base=(b, _sequence_base(s, capacity), d),
        params=params(b=b, s=s, d=d, experts=experts, top_k=top_k, capacity=capacity, **limited),
    )


def _experts_flops(layer, blk):
    b, c, x, d, f = blk.T
    slots = b * c * x
    gemm = 2.0 * slots * d * f  # one of the three products
    hidden = slots * f
    # Backward: the three weight gradients, and dh through the down projection (h is internal, so
    # always needed); the slots' own gradient is dx through gate and up.
    return Flops(forward=3 * gemm + SWIGLU_FORWARD_FLOPS * hidden,
                 backward=4 * gemm + (SWIGLU_FLOPS_PER_ELEMENT - SWIGLU_FORWARD_FLOPS) * hidden,
                 inputs=(2 * gemm,))


def _experts_collectives(layer, cfg, blk, options=CollectiveOptions()):
    b, c, x, d, f = blk.T
    hidden = b * c * x * f
    # The contraction rule finishes the sums of the layer's own tensors on its edges; the two products
    # over d inside it (gate and up forward, dh backward) are summed here when d is split.
    return [Collective("allreduce", 2.0 * hidden, ("d",), "gate and up partial sums"),
            Collective("allreduce", hidden, ("d",), "hidden gradient partial sums")] \
        + weight_gradient_collectives(layer, cfg, blk, options)


def _experts_extra(layer, cfg, blk):
    b, c, x, _, f = blk.T
    return 3.0 * b * c * x * f  # gate and up pre-activations (SwiGLU's backward) and h (for dW_down)


@register("MoEExperts", _experts_flops, _experts_collectives, saved_extra=_experts_extra)
def moe_experts(name: str, b: int, capacity: int, experts: int, d: int, f: int) -> Layer:
    """``experts`` SwiGLU feed-forward networks over ``b c x d f``, each on its slots of ``b`` sequences.

    Iteration space ``b c x d f`` (``c``: ``capacity`` slots per expert and sequence, ``x``:
    the expert). Input and output ``[b, c, x, d]``; weights ``gate[x, f, d]``,
    ``up[x, f, d]`` and ``down[x, d, f]``, every expert's.

    FLOPs, with ``N = b c x`` slots: forward ``6 N d f`` (three products) and
    ``SWIGLU_FORWARD_FLOPS`` per hidden element; backward ``6 N d f`` for the
    weight gradients, ``2 N d f`` for ``dh`` and the rest of the SwiGLU's
    ``SWIGLU_FLOPS_PER_ELEMENT``; the input's gradient ``4 N d f``. So ``18 N
    d f + 6 N f`` in all: with capacity factor 1, ``k`` dense SwiGLU networks
    per token.

    Communication: splitting ``x`` (expert parallelism) needs none inside
    the layer; ``f`` leaves the output and the input's gradient partial (the
    contraction rule, finished on the edges); ``d`` all-reduces the gate and
    up products forward and ``dh`` backward (``3 N f`` per device); ``b c``
    all-reduce each expert's weight gradients over its replicas. Keeps its
    input and ``3 N f`` hidden elements.

    Raises
    ------
    GraphError
        A size is not a positive integer.
    """
    check_sizes(name, b=b, capacity=capacity, experts=experts, d=d, f=f)
    slots = (b, capacity, experts, d)
    return Layer(
        name, "MoEExperts", ("b", "c", "x", "d", "f"), (b, capacity, experts, d, f),
        inputs=(TensorSpec(slots, ("b", "c", "x", "d"), "dispatched"),),
        outputs=(TensorSpec(slots, ("b", "c", "x", "d"), "y"),),
        weights=(TensorSpec((experts, f, d), ("x", "f", "d"), "gate"),
                 TensorSpec((experts, f, d), ("x", "f", "d"), "up"),
                 TensorSpec((experts, d, f), ("x", "d", "f"), "down")),
        params=params(b=b, capacity=capacity, experts=experts, d=d, f=f),
    )


def _combine_flops(layer, blk):
    d = blk[:, 2]
    weighted = _slots(layer, blk) * d
    # Forward: scale each slot by its gate and add it into its token. Backward: the slot's gradient
    # (gate times the token's gradient) and the gate's (a dot product over d).
    return Flops(forward=2.0 * weighted, backward=np.zeros(len(blk)), inputs=(weighted, 2.0 * weighted))


def _combine_collectives(layer, cfg, blk, options=CollectiveOptions()):
    # A split d leaves each gate's gradient a partial dot product.
    return [Collective("allreduce", _slots(layer, blk), ("d",), "gate gradient partial sums")]


@register("MoECombine", _combine_flops, _combine_collectives, contraction=False)
def moe_combine(name: str, b: int, s: int, d: int, experts: int, top_k: int, capacity: int) -> Layer:
    """Every token's output: the gate-weighted sum of its slots' expert outputs, over ``b s d``.

    Inputs the experts' output ``[b, capacity, E, d]`` and the router's slot
    gates ``[b, capacity, E]`` (capacity axis following ``s``, expert axis
    never split: the module docstring); output ``[b, s, d]``.

    FLOPs, with ``N d`` slot elements on the device: forward ``2 N d`` (scale
    and add); the slots' gradient ``N d``, the gates' ``2 N d``.
    Communication: a split ``d`` all-reduces the gates' gradient (``N`` per
    device). Keeps both inputs.

    Raises
    ------
    GraphError
        As :func:`moe_router`.
    """
    check_sizes(name, b=b, s=s, d=d)
    _check_moe(name, s, experts, top_k, capacity)
    return Layer(
        name, "MoECombine", ("b", "s", "d"), (b, s, d),
        inputs=(TensorSpec((b, capacity, experts, d), ("b", "s", None, "d"), "y"),
                TensorSpec((b, capacity, experts), ("b", "s", None), "gates")),
        outputs=(TensorSpec((b, s, d), ("b", "s", "d"), "out"),),
        split_base=(b, _sequence_base(s, capacity), d),
        params=params(b=b, s=s, d=d, experts=experts, top_k=top_k, capacity=capacity),
    )
