"""Where a mixture-of-experts step's time goes: pase's seconds per class against a hand estimate from the kernel file.

For three MoE rows of section 3b (``validate_today.py``'s rows and configurations: Qwen3-30B-A3B on 16 H100 and on
8 B200, DeepSeek-V3 on 256 B200), the seconds a step spends on its busiest device, per class of work, as ``pase
evaluate``'s model prices it (its layer times, ``pase.model.training.cached_times``, the expert blocks as
``pase.model.experts`` costs them) and as a hand estimate from the H200 kernel file
(``pase/hardware/data/h200-kernels.json``) and the links' published figures alone:

* dense products, attention (MLA's and grouped-query) and memory-bound kernels as ``audit_today.py`` estimates them,
  but for the products' times (each product's three products, FP8 or BF16, at the measured time interpolated in log
  FLOPs between the nearest measured sizes, the smallest's time below them: a kernel alone never ran faster; each
  fused attention kernel at the rate of the measured causal kernel nearest in FLOPs; normalisations, residual adds,
  activations and FP8 casts by hand-counted bytes at the measured rates), all at NVIDIA's stated 1,830 MHz tensor
  clock; on the B200, a kernel of ``F`` FLOPs takes what the H200's measured kernel of ``F`` over the peak ratio
  took (2,250 / 989 BF16, 4,500 / 1,979 FP8: the B200 calibration's own assumption, ``pase.hardware.cluster``),
  and bytes move at the published HBM ratio (8 TB/s against the H200's 4.8);
* grouped expert products: every local expert's ``fc1`` (gate and up) and ``fc2`` as kernels of their own, each of
  its three FP8 products at the measured time so interpolated (the file times each kernel alone), their casts and
  SwiGLU as pase counts their bytes, at the copies' bandwidth;
* router and permutation: the router's logits product (three products, BF16, nearest measured row), its scores read
  and written, the permutation of the ``T k`` token copies (read and written, forward; 1.5 times backward) and the
  combine's un-permutation and sum, at the copies' bandwidth;
* the local sort of the received tokens by local expert (Megatron-Core's "permutation 2", done when a device holds
  more than one expert: ``MoEAlltoAllTokenDispatcher.dispatch_postprocess``, a transpose made contiguous under
  token-drop with padding, ``sort_chunks_by_idxs`` without) and its reverse before the combine, forward and
  backward, each a read and a write of the received rows at the copies' bandwidth;
* all-to-all dispatch and combine: forward and backward, ``T k`` token copies of ``d`` BF16 elements each way, the
  share to other devices of the node at NCCL's bus bandwidth over NVLink (370.8 GB/s H100, 721.8 B200, NCCL's
  link model; NVIDIA/nccl-tests#212 for the H100) and the share to other nodes at one NDR NIC's 47 GB/s (an
  all-to-all does not aggregate NICs: NVIDIA/nccl-tests#267);
* what pase alone prices: communication inside the step (tensor parallelism's), recomputation, the optimizer step,
  the data-parallel reduction left exposed, the pipeline's idle time.

Not a validation (nothing here is compared with the published step but its total) and nothing is fitted.

Usage: ``python benchmarks/audit_moe.py [--no-write]``.
"""

from __future__ import annotations

import time

import numpy as np
from _report import audit_main, audit_table
from audit_today import KERNELS, _casts_s, _rate, _vector_hand_s, priced, step_rest
from validate_today import ROWS

from pase.hardware.cluster import H100_TENSOR_CLOCK_HZ, H200_MEASURED_CLOCK_HZ
from pase.model.attention import flash_flops, flash_units
from pase.model.experts import PROB_BYTES, block_costs, expert_layout, moe_blocks
from pase.model.precision import fp8_recipe
from pase.model.roofline import fp8_products
from pase.ops import OPS, block_elements

SECTION = "## Mixtures of experts: where a step's time goes (issue 27's audit)"
LABELS = ("Qwen3-30B-A3B (tokendrop)", "Qwen3-30B-A3B (B200, tokendrop)", "DeepSeek-V3 (B200, tokendrop)")
CLOCK = H200_MEASURED_CLOCK_HZ / H100_TENSOR_CLOCK_HZ
H200_HBM = 4.8e12
COPY_BPS_H200 = max(r["bytes"] / r["s"] for r in KERNELS["memory_bound"]["rows"] if r["kind"] == "copy")
# Published link figures (module docstring): NCCL's NVLink bus bandwidths and one NDR NIC's.
NVLINK_BUSBW = {"dgx-h100": 18 * 20.6e9, "dgx-b200": 18 * 40.1e9}
NIC_BUSBW = 47e9
# The B200's published peaks over the H200's (BF16, FP8) and HBM: the B200 calibration's scaling.
PEAK_RATIO = {"dgx-h100": (1.0, 1.0), "dgx-b200": (2250 / 989, 4500 / 1979)}
HBM_BPS = {"dgx-h100": 3.35e12, "dgx-b200": 8.0e12}
SUM = "kernels' and all-to-alls' sum"
CLASSES = ("dense products (FP8 and BF16, with their casts)", "attention (MLA or grouped-query)", "memory-bound",
           "router and permutation", "local sort by expert (permutation 2)", "grouped expert products",
           "all-to-all dispatch and combine (exposed)")


def _measured_s(rows, flops: float, seconds: str) -> float:
    """Seconds of a product of ``flops`` FLOPs from the measured rows: log time interpolated in log FLOPs between
    the nearest measured sizes (each size's fastest shape), the smallest's time below them (the measured floor of a
    kernel alone), the largest's rate above."""
    best: dict[float, float] = {}
    for r in rows:
        best[r["flops"]] = min(best.get(r["flops"], np.inf), r[seconds])
    f = np.array(sorted(best))
    t = np.array([best[x] for x in f])
    if flops >= f[-1]:
        return flops / f[-1] * t[-1]
    return float(np.exp(np.interp(np.log(flops), np.log(f), np.log(t))))


class _Hand:
    """Hand estimates on one cluster from the H200 kernel file (module docstring)."""

    def __init__(self, cluster_name: str):
        self.bf16_ratio, self.fp8_ratio = PEAK_RATIO[cluster_name]
        self.hbm = H200_HBM / HBM_BPS[cluster_name]  # memory-bound seconds scale by this from the H200's
        self.copy_Bps = COPY_BPS_H200 / self.hbm

    def fp8_product_s(self, flops: float) -> float:
        """One FP8 product's forward, input- and weight-gradient products (three at the forward's FLOPs)."""
        return 3 * _measured_s(KERNELS["gemm_fp8"]["rows"], flops / self.fp8_ratio, "s") * CLOCK

    def bf16_product_s(self, flops: float) -> float:
        f = flops / self.bf16_ratio
        return CLOCK * sum(_measured_s(KERNELS["gemm_bf16"]["rows"], f, c) for c in ("fwd_s", "dgrad_s", "wgrad_s"))

    def attention_s(self, flops: float) -> float:
        f = flops / self.bf16_ratio
        rows = [dict(r, flops=r["fwd_flops"]) for r in KERNELS["attention"]["rows"]]
        return f * CLOCK / _rate(rows, f, "fwd_bwd_s")

    def vector_s(self, layer, cfg) -> float:
        return _vector_hand_s(layer, cfg) * self.hbm / (4.8e12 / 3.35e12)  # audit_today's are at the H100's HBM


def audit(row) -> dict[str, tuple[float, float | None]]:
    """Class -> (pase's seconds a step on the busiest device, the hand estimate or None)."""
    p = priced(row)
    plan, par, cluster, lt, graph, strategy, cost = p.plan, p.par, p.cluster, p.lt, p.graph, p.strategy, p.cost
    m = par.microbatches
    hand_of = _Hand(row.cluster)
    fp8, recipe = fp8_products(graph), fp8_recipe(row.precision)
    units = {u.scores: u for u in flash_units(graph, explicit=True)}
    inside = frozenset().union(*(u.members for u in units.values()))
    blocks = {b.experts_layer: b for b in moe_blocks(graph)}
    routers = {b.router: b for b in blocks.values()}
    combines = {b.combine: b for b in blocks.values()}
    stage = max(plan.stages, key=lambda s: s.forward_s + s.backward_s)
    on_stage = _stage_layers(graph, stage)
    pase = dict.fromkeys((*CLASSES, "communication inside the step", "recomputation"), 0.0)
    hand = dict.fromkeys(CLASSES, 0.0)
    q = par.tensor * par.context
    layout = expert_layout(par, cluster.mesh)
    for i, layer in enumerate(graph.layers):
        if layer.name not in on_stage:
            continue
        cfg = strategy[layer.name]
        total = float(lt.forward_s[i] + lt.backward_s[i])
        pase["recomputation"] += float(lt.recompute_s[i])
        if layer.name in blocks:
            b = blocks[layer.name]
            load = par.capacity_factor if par.capacity_factor is not None else par.expert_imbalance
            copies = load * b.b * b.s / q * b.top_k
            compute = float(lt.expert_compute_s[i])
            sort = block_costs(b, par, cluster, layout, row.precision)["sort_s"]
            pase["local sort by expert (permutation 2)"] += sort
            pase["grouped expert products"] += compute - sort
            pase["all-to-all dispatch and combine (exposed)"] += total - compute
            local = b.experts // par.ep
            n = copies / local
            f = b.f
            for flops in (2.0 * n * b.d * 2 * f, 2.0 * n * f * b.d):
                hand["grouped expert products"] += local * hand_of.fp8_product_s(flops)
            x_y = ((n * b.d, n * 2 * f), (n * f, n * b.d))  # the weights are cast once a step
            casts = sum(local * (x * recipe.activation.forward + y * recipe.gradient.backward) for x, y in x_y)
            hand["grouped expert products"] += (casts + 7.5 * copies * f * 2) / hand_of.copy_Bps
            if local > 1:  # each way, forward and backward: read and write the received rows and their gates
                hand["local sort by expert (permutation 2)"] += 4 * copies * (2 * b.d * 2 + 2 * PROB_BYTES) \
                    / hand_of.copy_Bps
            sent = 4 * copies * b.d * 2
            inner = min(par.ep, cluster.node_size)
            hand["all-to-all dispatch and combine (exposed)"] += (
                sent * (inner - 1) / par.ep / NVLINK_BUSBW[row.cluster]
                + sent * (par.ep - inner) / par.ep / NIC_BUSBW)
            continue
        if layer.name in routers or layer.name in combines:
            b = routers.get(layer.name) or combines[layer.name]
            pase["router and permutation"] += total
            T = b.b * b.s / q
            if layer.name in routers:
                hand["router and permutation"] += (hand_of.bf16_product_s(2.0 * T * b.d * b.experts)
                                                   + (5 * T * b.experts * 2 + 2.5 * 2 * T * b.top_k * b.d * 2)
                                                   / hand_of.copy_Bps)
            else:
                hand["router and permutation"] += 2.5 * (T * b.top_k * b.d + T * b.d) * 2 / hand_of.copy_Bps
            continue
        compute = float(cost.compute_s[layer.name][0])
        pase["communication inside the step"] += total - compute
        flops = OPS[layer.op].flops(layer, np.asarray(layer.sizes, dtype=float) / cfg)
        forward = float(flops.forward[0])
        key = "dense products (FP8 and BF16, with their casts)"
        if layer.name in fp8:
            pase[key] += compute
            hand[key] += hand_of.fp8_product_s(forward) + _casts_s(graph, layer, cfg, fp8, recipe, hand_of.copy_Bps, 0.0)
        elif layer.weights and layer.op in ("Einsum", "FullyConnected"):
            pase[key] += compute
            hand[key] += hand_of.bf16_product_s(forward)
        elif layer.name in units:
            pase["attention (MLA or grouped-query)"] += compute
            fwd, _ = flash_flops(graph, units[layer.name], cfg)
            hand["attention (MLA or grouped-query)"] += hand_of.attention_s(float(fwd[0]))
            if units[layer.name].rotary:
                qk = sum(float(block_elements(layer, t, cfg)[0]) for t in layer.inputs)
                hand["attention (MLA or grouped-query)"] += 2 * 2 * qk * 2 / hand_of.copy_Bps
        else:
            pase["memory-bound"] += compute
            if layer.name not in inside:
                hand["memory-bound"] += hand_of.vector_s(layer, cfg)
    out = {k: (pase[k] * m, hand[k] * m) for k in CLASSES}
    out[SUM] = (sum(p for p, _ in out.values()), sum(h for _, h in out.values()))
    for k in ("communication inside the step", "recomputation"):
        out[k] = (pase[k] * m, None)
    return {**out, **step_rest(plan, stage, row)}


def _stage_layers(graph, stage) -> frozenset[str]:
    """The layer names of a pipeline stage's report (its runs of first and last layer names)."""
    index = {l.name: i for i, l in enumerate(graph.layers)}
    names = [l.name for l in graph.layers]
    return frozenset(n for first, last in stage.layers for n in names[index[first]:index[last] + 1])


def run() -> tuple[str, float]:
    start = time.perf_counter()
    rows = [r for r in ROWS if r.label in LABELS]
    audits = {r.label: audit(r) for r in rows}
    lines = audit_table(audits, "hand")
    sums = ", ".join(f"{label} {a[SUM][0]:.2f} s against {a[SUM][1]:.2f} s" for label, a in audits.items())
    gaps = ", ".join(f"{label} {(a['step'][0] / a['step'][1] - 1) * 100:+.0f}%" for label, a in audits.items())
    lines += ["", f"pase's kernels and all-to-alls against the hand estimates: {sums}. Against the published steps, "
              f"pase's are {gaps}. Every class pase prices agrees with its hand estimate within about 20% but the "
              "memory-bound kernels on the B200 (pase adds its fitted 4.6 us launch overhead to each small kernel; "
              "the hand estimate scales the measured per-byte times only) and the B200 router's and all-to-alls' "
              "(pase's assumed 5 us latency per peer step), and the B200 DeepSeek-V3 row's MLA attention, which pase "
              "runs at the published Blackwell rate of its 192/128-wide heads (pase.hardware.attention_kernels: its "
              "backward at 0.8-0.87 of the 128-wide heads' rate) where the hand estimate takes the 128-wide kernels "
              "of the file; the grouped expert products are the largest class and, each kernel priced alone, "
              "agree with the kernel file's times; the B200 Qwen3-30B-A3B row's 96 expert products a layer and "
              "microbatch sit on the measured floor of a kernel timed alone (26-30 us), which its recipe's CUDA "
              "graphs would shorten by an amount nothing here measures. The B200 DeepSeek-V3 row's exposed "
              "all-to-all is what its shared experts leave of it (its recipe runs them beside the exchange, "
              "Megatron-Core's moe_shared_expert_overlap); the hand estimate is the whole exchange."]
    return "\n".join(lines), time.perf_counter() - start


if __name__ == "__main__":
    raise SystemExit(audit_main(SECTION, "audit_moe.py", __doc__, run))
