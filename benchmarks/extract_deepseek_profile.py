"""DeepSeek's published training profile, summarised per layer: what ``audit_deepseek_profile.py`` checks pase against.

DeepSeek published a PyTorch-profiler trace of its own training framework (github.com/deepseek-ai/profile-data,
``train.json``, commit 4496024): one forward chunk and one backward chunk of 4 DeepSeek-V3 MoE layers each, EP 64,
TP 1, 4K sequences, on NVIDIA H800 GPUs (the H100 SXM's GH100 chip, 132 SMs, its clocks and HBM; a narrower
NVLink), balanced routing simulated, DualPipe overlapping the expert exchange (DeepEP, on its own stream) with the
other chunk's computation. This script reads that trace and writes, per layer (the mean of the 4), the GPU time
of each class of kernel, split by the trace's own annotations into the attention block (``attn``: the norms, MLA,
the router) and the MoE block (``mlp``: the routed and shared experts), and the time the compute streams were busy
at all (their union: DeepSeek runs weight gradients on a second stream beside the first).

Classes: ``attention`` (FlashAttention's MLA kernels, forward, backward and its pre- and post-processing),
``products`` (the FP8 and BF16 matrix products), ``casts`` (FP8 casts and transposes), ``memory-bound`` (the rest:
norms, rotary embeddings, SwiGLU, the permutation, the router's top-k, element-wise kernels, and the kernels
launched outside an annotation); the exchange's kernels (``dpsk::ep``) are the communication.

The microbatch: the trace records no shapes. One 4,096-token sequence per chunk is the only size its attention
kernel allows: MLA's causal forward over 128 heads of 192 + 128 dimensions is 0.69 TFLOP a sequence, done in
1.24 ms (555 TFLOP/s); two sequences would be 1,110 TFLOP/s, above the H800's 989 TFLOP/s BF16 peak.

Usage: ``python benchmarks/extract_deepseek_profile.py TRACE [OUT]`` (``TRACE``: ``train.json`` of that
repository; ``OUT``: ``tests/data/deepseek-v3-h800-profile.json``).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "deepseek-v3-h800-profile.json"
LAYERS = 4  # MoE layers a chunk (the repository's README)
GPU_KINDS = ("kernel", "gpu_memcpy", "gpu_memset")


def kernel_class(name: str) -> str:
    """The class of a kernel by its name (the module docstring)."""
    if "dpsk::ep" in name:
        return "communication"
    if "flash" in name.lower():
        return "attention"
    if ("grouped_gemm" in name and "utils::transpose" not in name) or "xmma_gemm" in name:
        return "products"
    if "swiglu" not in name and ("cast" in name or "transpose" in name):
        return "casts"
    return "memory-bound"


def union_us(intervals) -> float:
    """Microseconds covered by the ``(start, end)`` intervals."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def summarise(trace: dict) -> dict:
    """The per-layer summary of a profile-data trace (the module docstring)."""
    events = trace["traceEvents"]
    phases = [e for e in events if e.get("cat") == "user_annotation" and "(" in e["name"]]
    phase_of = {}  # a launch's correlation id -> the annotation its launch ran in
    for launch in (e for e in events if e.get("cat") == "cuda_runtime"):
        for p in phases:
            if p["ts"] <= launch["ts"] < p["ts"] + p["dur"]:
                phase_of[launch["args"]["correlation"]] = p["name"]
                break
    gpu = [e for e in events if e.get("cat") in GPU_KINDS]
    comm_streams = {e["args"]["stream"] for e in gpu if kernel_class(e["name"]) == "communication"}
    blocks: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in gpu:
        phase = phase_of.get(e["args"].get("correlation"), "unannotated(-)")
        block = {"attn": "attention block", "mlp": "MoE block"}.get(phase.split("(")[0], "exchange"
                                                                     if phase.startswith(("dispatch", "combine"))
                                                                     else "unannotated")
        blocks[block][kernel_class(e["name"])] += e["dur"] / LAYERS
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if e["args"]["stream"] not in comm_streams]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if e["args"]["stream"] in comm_streams]
    grids = sorted({e["args"]["grid"][0] * e["args"]["grid"][1] for e in gpu
                    if "grouped_gemm" in e["name"] and "utils" not in e["name"]})
    props = trace["deviceProperties"][0]
    return {
        "what": "DeepSeek-V3 training on NVIDIA H800, per MoE layer (the mean of 4), microseconds of GPU time: "
                "DeepSeek's own framework (DeepGEMM FP8 products, FlashAttention 3 MLA kernels, DeepEP), EP 64, "
                "TP 1, one 4,096-token sequence a microbatch, balanced routing simulated; one forward and one "
                "backward of each layer, the backward with DeepSeek-V3's recomputation of its RMSNorms and MLA "
                "up-projections; the exchange overlapped with computation (DualPipe). Summarised by "
                "benchmarks/extract_deepseek_profile.py.",
        "source": "github.com/deepseek-ai/profile-data, train.json at commit 4496024 (PyTorch profiler trace)",
        "gpu": props["name"], "sms": props["numSms"], "world_size": trace["distributedInfo"]["world_size"],
        "layers": LAYERS, "tokens_per_microbatch": 4096, "ep": 64, "tp": 1,
        "product_grid_ctas": grids,
        "blocks_us": {b: {c: round(t, 1) for c, t in sorted(cs.items())} for b, cs in sorted(blocks.items())},
        "compute_busy_us": round(union_us(compute) / LAYERS, 1),
        "communication_busy_us": round(union_us(comm) / LAYERS, 1),
        "span_us": round((max(e for _, e in compute + comm) - min(s for s, _ in compute + comm)) / LAYERS, 1),
    }


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    summary = summarise(json.loads(Path(argv[0]).read_text()))
    out = Path(argv[1]) if len(argv) > 1 else OUT
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
