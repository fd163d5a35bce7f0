"""Sequence ops: embedding lookups and recurrent (LSTM) layers."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pase.errors import GraphError
from pase.ir.graph import Layer, TensorSpec
from pase.ops.registry import (
    Collective, CollectiveOptions, Flops, block_elements, check_letters, check_sizes, column, halo, no_collectives,
    params, register, weight_gradient_collectives,
)

# LSTM gate nonlinearities and cell update per hidden unit and step, forward + backward.
LSTM_POINTWISE_FLOPS = 30


def _embedding_flops(layer, blk):
    b, s, d, v = blk.T
    # A gather forward and a scatter-add backward, one op per output element each;
    # a vocabulary shard does not shrink the work: every device scans every token.
    return Flops(forward=b * s * d, backward=b * s * d, inputs=(np.zeros(len(blk)),))


@register("Embedding", _embedding_flops, onnx=("Gather",))
def embedding(name: str, b: int, s: int, d: int, v: int) -> Layer:
    """Embedding lookup ``y[b, s, d] = W[ids[b, s], d]`` over ``b s d v``.

    FLOPs: ``2bsd`` (gather forward, scatter-add backward), whatever the
    vocabulary split. Communication: splitting ``v`` leaves each device the
    rows of its vocabulary shard, so the output is a partial sum; splitting
    ``b s`` all-reduces the ``v x d`` weight gradient (the cost that makes
    data parallelism poor for large vocabularies).
    """
    check_sizes(name, b=b, s=s, d=d, v=v)
    return Layer(
        name, "Embedding", ("b", "s", "d", "v"), (b, s, d, v),
        inputs=(TensorSpec((b, s), ("b", "s"), "ids", differentiable=False),),
        outputs=(TensorSpec((b, s, d), ("b", "s", "d"), "y"),),
        weights=(TensorSpec((v, d), ("v", "d"), "weight"),),
        params=params(b=b, s=s, d=d, v=v),
    )


def _lstm_flops(layer, blk):
    l, b, s, d, e = blk.T
    full_e = layer.size_of["e"]
    # Per layer and step: gates = [x; h] @ W, 4e outputs over d + e inputs. The
    # recurrent input h is gathered whole, so its part does not shrink with the e split.
    gemm = 6.0 * l * b * s * 4 * e * (d + full_e)
    k_l = layer.size_of["l"] / l
    seq = layer.size_of["s"]
    # Splitting l pipelines layers over the sequence: s + k_l - 1 stage-steps instead of s.
    total = (gemm + LSTM_POINTWISE_FLOPS * l * b * s * e) * (seq + k_l - 1) / seq
    # The recurrence's backward (two of its three GEMMs) is one piece: the input's gradient
    # is not told apart from the recurrent state's.
    return Flops(forward=total / 3, backward=2 * total / 3, inputs=(np.zeros(len(blk)),))


def _lstm_collectives(layer, cfg, blk, options=CollectiveOptions()):
    l, b, s, d, e = blk.T
    full_e = layer.size_of["e"]
    return [
        Collective("allreduce", l * b * s * 4 * e, ("d",), "input projection partial sums"),
        # h gathered whole every step, forward and backward.
        Collective("allgather", 2.0 * l * s * b * full_e, ("e",), "hidden state"),
        Collective("allreduce", b * s * d, ("e",), "x gradient"),
        # Activations and gradients between stages.
        Collective("exchange", np.where(column(layer, cfg, "l") > 1, 2.0 * b * s * e, 0.0), ("l",), "pipeline stages"),
    ] + [Collective("allreduce", block_elements(layer, w, cfg), ("b",), f"{w.name} weight gradient", weight_gradient=True)
         for w in layer.weights]


def _lstm_extra(layer, cfg, blk):
    l, b, s, _, e = blk.T
    return 6.0 * l * b * s * e  # gates i f g o, cell and hidden state


@register("LSTM", _lstm_flops, _lstm_collectives, contraction=False, saved_extra=_lstm_extra, onnx=("LSTM",))
def lstm(name: str, l: int, b: int, s: int, d: int, e: int) -> Layer:
    """A whole ``l``-layer LSTM as one vertex over ``l b s d e`` (the paper's form).

    ``d``: input features, ``e``: hidden units (each layer's input is taken as
    ``d`` wide, exact when ``d == e``). FLOPs per layer and step: the gate GEMM
    ``[x; h] (4e x (d+e))``, ``2 * 4e(d+e)`` forward and twice that backward,
    plus ``LSTM_POINTWISE_FLOPS`` per hidden unit. Splitting ``l`` k ways
    pipelines the layers over the sequence: ``s + k - 1`` stage-steps instead
    of ``s``, plus activations and gradients passed between stages. Splitting
    ``e`` gathers the hidden state every step; splitting ``d`` all-reduces the
    input projection; ``b`` all-reduces weight gradients. ``s`` is never split
    (the recurrence is sequential).
    """
    check_sizes(name, l=l, b=b, s=s, d=d, e=e)
    dims = ("l", "b", "s", "d", "e")
    return Layer(
        name, "LSTM", dims, (l, b, s, d, e),
        inputs=(TensorSpec((b, s, d), ("b", "s", "d"), "x"),),
        outputs=(TensorSpec((b, s, e), ("b", "s", "e"), "y"),),
        weights=(
            TensorSpec((l, d, 4 * e), ("l", "d", "e"), "w_input"),
            TensorSpec((l, e, 4 * e), ("l", None, "e"), "w_hidden"),
            TensorSpec((l, 4 * e), ("l", "e"), "bias"),
        ),
        split_base=(l, b, 1, d, e),
        params=params(l=l, b=b, s=s, d=d, e=e),
    )
