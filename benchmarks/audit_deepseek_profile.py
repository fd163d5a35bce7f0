"""A DeepSeek-V3 layer as pase prices it, against DeepSeek's own published profile of one (out of sample).

DeepSeek published a profiler trace of its training (github.com/deepseek-ai/profile-data, ``train.json``):
DeepSeek-V3's MoE layers at EP 64, TP 1, 4K sequences, on H800 GPUs, the expert exchange (DeepEP) overlapped with
computation. ``extract_deepseek_profile.py`` summarises it per layer into
``tests/data/deepseek-v3-h800-profile.json``; this script prices one such layer with ``pase evaluate``'s model on
the ``dgx-h100`` calibration (the H800 is the H100 SXM's chip at its clocks and HBM; only its NVLink is narrower,
and no link enters this comparison) and sets the two side by side, class by class: one forward and one backward of
one MoE layer (layer 10 of the ``deepseek-v3`` sample; every MoE layer is priced alike), one 4,096-token sequence
a microbatch, FP8 products, flash attention, DeepSeek-V3's recomputation (its RMSNorms and MLA up-projections:
pase's ``layernorm`` and ``mla_up_proj`` modules), the routing balanced, DeepEP with the exchange overlapped.

Classes (the profile's, ``extract_deepseek_profile.py``): MLA's attention kernel, forward and backward; the
matrix products with their FP8 casts (pase prices a product's casts with it); the rest (normalisations, rotary
embeddings, SwiGLU, the permutation and the sort of the received rows, the router, element-wise kernels); the
kernels' sum; and, for the profile, the time its compute streams were busy. DeepSeek runs the MoE block's weight
gradients on a second stream, two products at once, each slowed by the other: the profile's products row sums
their kernels' times and so overstates them, and the busy time is the like-for-like total.

What differs, and is not priced away: DeepSeek's kernels are its own (DeepGEMM's FP8 products with fine-grained
scaling, FlashAttention 3's MLA kernels), not the cuBLAS and cuDNN kernels the calibration measured; DeepEP kept 20
of the H800's 132 SMs throughout (the profile's products were launched on 112 CTAs, one an SM), so pase's kernel
times are also shown on 112 SMs (times 132 / 112). Nothing here was fitted: the calibration saw the H200's kernels
alone (BENCHMARKS.md, "The H200 calibration against the measured kernels").

Usage: ``python benchmarks/audit_deepseek_profile.py [--no-write]``.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from _report import audit_main
from audit_today import priced
from validate_today import ROWS

from pase.model.attention import flash_units
from pase.model.experts import block_costs, expert_layout, moe_blocks

SECTION = "## A DeepSeek-V3 layer against DeepSeek's published profile (issue 27, out of sample)"
PROFILE = Path(__file__).resolve().parents[1] / "tests" / "data" / "deepseek-v3-h800-profile.json"
LAYER = "layers.10."
CLASSES = ("MLA attention kernel", "products with their FP8 casts", "the rest (memory-bound)", "kernels' sum")
EXCHANGES = "DeepEP's exchanges (their own stream)"


def profile_classes(profile: dict) -> dict[str, float]:
    """The profile's microseconds a layer per class (compute streams only; the exchange's are communication)."""
    blocks = {k: v for k, v in profile["blocks_us"].items() if k != "exchange"}
    attention = sum(b.get("attention", 0.0) for b in blocks.values())
    products = sum(b.get("products", 0.0) + b.get("casts", 0.0) for b in blocks.values())
    rest = sum(b.get("memory-bound", 0.0) for b in blocks.values())
    return dict(zip(CLASSES, (attention, products, rest, attention + products + rest)))


def deepseek_row():
    """The profile's configuration as a ``validate_today`` row (the module docstring)."""
    base = next(r for r in ROWS if r.label == "DeepSeek-V3 (dropless)")
    return replace(base, gpus=64, gbs=64, mbs=1, tp=1, pp=1, vp=1, ep=64, mtp=0, layout=None,
                   recompute_modules=("layernorm", "mla_up_proj"), ep_overlap=True, deepep=True)


def pase_classes(row) -> dict[str, float]:
    """pase's microseconds for one MoE layer of ``row``, forward, backward and recomputation, per class."""
    p = priced(row)
    lt, graph = p.lt, p.graph
    attention = {u.scores for u in flash_units(graph, explicit=True)}
    blocks = {b.experts_layer: b for b in moe_blocks(graph)}
    out = dict.fromkeys(CLASSES[:3], 0.0)
    for i, layer in enumerate(graph.layers):
        if not layer.name.startswith(LAYER):
            continue
        kernels = float(lt.forward_s[i] + lt.backward_s[i] + lt.recompute_s[i])  # TP 1: no communication
        if layer.name in blocks:
            costs = block_costs(blocks[layer.name], p.par, p.cluster, expert_layout(p.par, p.cluster.mesh), "fp8")
            rest = costs["sort_s"] + costs["act_s"]
            out["products with their FP8 casts"] += costs["compute_s"] - rest
            out["the rest (memory-bound)"] += rest
        elif layer.name in attention:
            out["MLA attention kernel"] += kernels
        elif layer.weights and layer.op in ("Einsum", "FullyConnected"):
            out["products with their FP8 casts"] += kernels
        else:
            out["the rest (memory-bound)"] += kernels
    out = {k: v * 1e6 for k, v in out.items()}
    out["kernels' sum"] = sum(out.values())
    # The four exchanges as DeepSeek sends them (FP8 dispatch, BF16 combine), each alone at the links' rates.
    block = next(iter(blocks.values()))
    fp8 = replace(p.par, fp8_dispatch=True)
    out[EXCHANGES] = block_costs(block, fp8, p.cluster, expert_layout(fp8, p.cluster.mesh), "fp8")["dispatch_s"] * 1e6
    return out


def run() -> tuple[str, float]:
    start = time.perf_counter()
    profile = json.loads(PROFILE.read_text())
    measured = profile_classes(profile)
    pase = pase_classes(deepseek_row())
    sms = profile["sms"] / min(profile["product_grid_ctas"])
    lines = ["| class (microseconds a layer, forward and backward) | DeepSeek's profile (H800) | pase (dgx-h100) | "
             f"pase on {min(profile['product_grid_ctas'])} SMs | pase against the profile |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for c in CLASSES:
        lines.append(f"| {c} | {measured[c]:,.0f} | {pase[c]:,.0f} | {pase[c] * sms:,.0f} | "
                     f"{(pase[c] * sms / measured[c] - 1) * 100:+.0f}% |")
    busy = profile["compute_busy_us"]
    lines.append(f"| compute streams busy | {busy:,.0f} |  | {pase[CLASSES[3]] * sms:,.0f} | "
                 f"{(pase[CLASSES[3]] * sms / busy - 1) * 100:+.0f}% |")
    comm = profile["communication_busy_us"]
    lines.append(f"| {EXCHANGES} | {comm:,.0f} | {pase[EXCHANGES]:,.0f} |  | "
                 f"{(pase[EXCHANGES] / comm - 1) * 100:+.0f}% |")
    lines += ["", f"Source: {profile['source']}; {profile['what']} The exchanges' kernels were busy "
              f"{comm:,.0f} us of the layer's {profile['span_us']:,.0f} us span, alongside the computation; "
              "pase prices the four exchanges alone at the links' published rates (about DeepEP's own published "
              "EP 64 figures, 51 and 50 GB/s of RDMA bandwidth for the dispatch and the combine, measured alone on "
              "H800: deepseek-ai/DeepEP, docs/legacy.md). Beside the computation they took about twice that, their "
              "notification kernels (waits for the other ranks among them) over a quarter of it: not a rate to price "
              "them by, since what the computation leaves idle they may fill with waiting."]
    return "\n".join(lines), time.perf_counter() - start


if __name__ == "__main__":
    raise SystemExit(audit_main(SECTION, "audit_deepseek_profile.py", __doc__, run))
