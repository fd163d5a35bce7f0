"""Megatron-Core's 1F1B all-to-all overlap: one microbatch's expert exchanges hidden behind another's computation.

With ``overlap_moe_expert_parallel_comm`` Megatron-Core (0.14, ``TransformerLayerSchedulePlan.run``) merges the
forward of one microbatch with the backward of another, layer by layer, on two CUDA streams. Each transformer
layer is cut into its attention part (the norms, attention, the router and the dispatch's permutation), its MLP
part (the experts, the shared experts, the combine's un-permutation) and the four exchanges, issued in this order:

    communication stream: combine backward | dispatch forward -> dispatch backward | combine forward
    computation stream:   attention forward | MLP backward -> MLP weight gradients -> MLP forward | attention backward

each waiting for what it needs: the MLP's backward for the combine's backward, the dispatch forward for the
attention's forward, the dispatch's backward for the MLP's backward, the MLP's forward for the dispatch's forward,
the combine's forward for the MLP's forward, the attention's backward for the dispatch's backward.
:func:`merged_layer_s` runs that schedule as an event simulation.

An exchange's kernels may hold some of the GPU's SMs while they run: DeepEP's hold :data:`DEEPEP_SMS`, and the
computation beside them runs on the rest, at that share of its speed (:func:`comm_sm_share`). NCCL's all-to-all
also runs on SMs, as many as its channels, which its tuning sets; that share is not modelled.

The pipeline's warm-up forwards and cool-down backwards run unmerged, their exchanges exposed: as many as
Megatron-Core's warm-up (``get_pp_rank_microbatches``: one more under this overlap) on each pipeline rank, of the
``m v`` a rank runs (:func:`unmerged_share`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pase.hardware.cluster import Cluster

__all__ = ["DEEPEP_SMS", "LayerParts", "comm_sm_share", "merged_layer_s", "unmerged_share"]

# SMs DeepEP's kernels hold while they run: Megatron-Core's moe_deepep_num_sms default (TransformerConfig, 0.14) and
# DeepEP's Buffer.num_sms; DeepSeek-V3's report (section 3.2.2) trains with 20, and DeepSeek's published profile
# launches its products on 112 of an H800's 132 SMs (tests/data/deepseek-v3-h800-profile.json).
DEEPEP_SMS = 20


class LayerParts(NamedTuple):
    """Seconds of one transformer layer's parts, at the whole GPU's speed (computation) or as sent (exchanges)."""

    attention_forward: float
    mlp_forward: float
    mlp_backward: float  # the input gradients
    mlp_weight_gradients: float
    attention_backward: float  # weight gradients and recomputation included
    dispatch_forward: float
    combine_forward: float
    dispatch_backward: float
    combine_backward: float


def comm_sm_share(dispatcher: str, cluster: Cluster) -> float:
    """The share of the device's SMs the ``dispatcher``'s kernels hold while they run: DeepEP's
    :data:`DEEPEP_SMS` of the calibration's SM count; 0 for NCCL's all-to-all (the module docstring) and where the
    SM count is not known."""
    sms = cluster.efficiency.sms if cluster.efficiency is not None else None
    return min(DEEPEP_SMS / sms, 1.0) if dispatcher == "deepep" and sms else 0.0


# The schedule (the module docstring): per stream, its parts in issue order and what each waits for.
_COMPUTE = (("attention_forward", None), ("mlp_backward", "combine_backward"), ("mlp_weight_gradients", None),
            ("mlp_forward", "dispatch_forward"), ("attention_backward", "dispatch_backward"))
_EXCHANGE = (("combine_backward", None), ("dispatch_forward", "attention_forward"),
             ("dispatch_backward", "mlp_backward"), ("combine_forward", "mlp_forward"))


def merged_layer_s(parts: LayerParts, held: float = 0.0) -> float:
    """Seconds one layer's merged forward and backward take on Megatron-Core's two streams (the module docstring),
    the computation running at ``1 - held`` of its speed while an exchange runs.

    Raises ``ValueError`` for a time below 0 or ``held`` outside [0, 1).
    """
    if min(parts) < 0 or not 0 <= held < 1:
        raise ValueError(f"parts must be seconds >= 0 and held a share in [0, 1), got {parts}, {held}")
    left = parts._asdict()  # remaining: the computation's work at full speed, an exchange's seconds
    done: set[str] = set()
    queues = {"compute": list(_COMPUTE), "exchange": list(_EXCHANGE)}
    t = 0.0
    while queues["compute"] or queues["exchange"]:
        running = {stream: q[0][0] for stream, q in queues.items() if q and (q[0][1] is None or q[0][1] in done)}
        if not running:  # cannot happen: each stream's first part waits only on the other's earlier parts
            raise RuntimeError("the merged schedule deadlocked")
        rate = {"compute": 1.0 - held if "exchange" in running else 1.0, "exchange": 1.0}
        step = min(left[name] / rate[stream] for stream, name in running.items())
        for stream, name in running.items():
            left[name] -= step * rate[stream]
            if left[name] <= 1e-15:
                done.add(name)
                queues[stream].pop(0)
        t += step
    return t


def unmerged_share(stages: int, virtual: int, microbatches: int) -> np.ndarray:
    """Per pipeline rank, the share of its ``microbatches x virtual`` forward (and backward) passes that run unmerged
    under the 1F1B all-to-all overlap: Megatron-Core's warm-up count (``get_pp_rank_microbatches``), ``2 (p - r - 1)
    + (v - 1) p`` with the overlap's one extra, and as many cool-down backwards. Without pipelining, the first
    forward and the last backward (``combined_1f1b_schedule_for_no_pipelining``). Megatron-Core runs the overlap
    pipelined only with virtual stages; without them pase counts ``p - r`` (the plain 1F1B warm-up and the extra).
    """
    total = microbatches * virtual
    rank = np.arange(stages)
    if stages == 1:
        warmup = np.ones(1)
    elif virtual > 1:
        warmup = 2 * (stages - rank - 1) + (virtual - 1) * stages + 1
    else:
        warmup = stages - rank
    return np.minimum(warmup, total) / total
