"""pase's fused attention kernels against NVIDIA's published cuDNN timings (issue 27).

NVIDIA's cudnn-frontend publishes its attention kernels' times for the shapes of Llama 3.1 (128-wide heads,
grouped-query), DeepSeek-V3 (multi-head latent attention: 192-wide score heads, 128-wide values) and GPT-OSS
(64-wide heads under a sliding window) on one H200 (cuDNN 9.19) and one GB200 (cuDNN 9.22), BF16, causal
(``pase/hardware/data/cudnn-attention-*.json``). Each is priced here as pase prices a decoder block of that shape
on one device: its fused kernel's forward and backward (``pase.model.attention.flash_times_s``), on the H200's fit
at the 1,980 MHz its kernels were timed at (the ``dgx-h200.json`` calibration, with Hopper's head shapes), and on
the ``dgx-b200`` preset against the GB200's (a B200's assumed curves: the H200's scaled by the peak ratio, at its
stated clock; the GB200 runs its Blackwell at 1,200 W against a B200's 1,000).

Out of sample: every 128-wide row (pase's H200 curve was fitted to PyTorch's flash kernels, not cuDNN's; the B200
curve to nothing measured on a Blackwell). The other shapes' rates relative to the 128-wide rows come from these
runs themselves (``pase.hardware.attention_kernels``), so those rows land as near as the 128-wide rows of their
run do: in sample, shown for completeness. Nothing here is compared with a training step.

Where pase is off: its curves take a kernel's efficiency from its FLOPs, which stands for its parallelism in a
full causal kernel; a sliding window's kernel of few FLOPs still has as many query tiles as a full one of its
sequence, so the GB200's windowed kernels, flat at 150-170 TFLOP/s from 2,048 to 32,768 tokens, are priced slower
the shorter they are. The B200's curve is the H200's scaled by the peak ratio, not a Blackwell's own, and NVIDIA
states the GB200's dense BF16 peak 11% above the B200's (2.5 PFLOP/s against 2.25: GB200 NVL72's 180 over 72
GPUs, HGX B200's 18 over 8), which accounts for about half of the 128-wide rows' gap.

Usage: ``python benchmarks/audit_attention.py [--no-write]``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from _report import audit_main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from pase.hardware.attention_kernels import SHAPE_TABLES, published_rates  # noqa: E402
from pase.hardware.cluster import CALIBRATIONS, H200_MEASURED  # noqa: E402
from pase.model.attention import attention_units, flash_times_s  # noqa: E402
from pase.models import sample  # noqa: E402
from pase.models.llama import llama  # noqa: E402

SECTION = "## Attention kernels against NVIDIA's published cuDNN timings (issue 27)"
# What each published run is priced on: the calibration and its BF16 peak (FLOP/s).
RUNS = {"hopper": ("H200", replace(H200_MEASURED.efficiency, attention_shapes=published_rates("hopper")), 989e12),
        "blackwell": ("GB200", CALIBRATIONS["dgx-b200"], 2250e12)}


def _graph(row: dict):
    if row["model"] == "dsv3":
        return sample("deepseek-v3", batch=row["b"], seq=row["s"])
    return llama("a", layers=1, hidden=row["hq"] * row["d_qk"], heads=row["hq"], kv_heads=row["hkv"], ffn=64,
                 vocab=64, batch=row["b"], seq=row["s"], head_dim=row["d_qk"], window=row["window"])


def run() -> tuple[str, float]:
    start = time.perf_counter()
    lines = ["| GPU | shape | batch x sequence | heads (q/kv) | published forward (ms) | pase forward (ms) | "
             "published backward (ms) | pase backward (ms) | pase's forward + backward against published |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    groups: dict[tuple[str, str], list[float]] = {}
    for table, (gpu, efficiency, peak) in RUNS.items():
        for row in json.loads(SHAPE_TABLES[table].read_text())["rows"]:
            g = _graph(row)
            unit = attention_units(g)[0]
            cfg = np.ones((1, len(g.layer(unit.scores).dims)))
            fwd, bwd = (float(t[0]) * 1e3 for t in flash_times_s(g, unit, cfg, peak, efficiency, 2))
            error = (fwd + bwd) / (row["fwd_ms"] + row["bwd_ms"]) - 1
            shape = f"{row['d_qk']}/{row['d_v']}" + (f", window {row['window']:,}" if row["window"] else "")
            kind = f"{row['d_qk']}/{row['d_v']} heads" + (" under a window" if row["window"] else "")
            groups.setdefault((gpu, kind), []).append(error)
            lines.append(f"| {gpu} | {shape} | {row['b']} x {row['s']:,} | {row['hq']}/{row['hkv']} | "
                         f"{row['fwd_ms']:.3f} | {fwd:.3f} | {row['bwd_ms']:.3f} | {bwd:.3f} | {error:+.0%} |")
    summary = [f"* {gpu}, {kind} ({'out of sample' if kind == '128/128 heads' else 'in sample'}): pase's forward "
               f"plus backward {statistics.median(e):+.0%} on the median, {min(e):+.0%} to {max(e):+.0%}."
               for (gpu, kind), e in groups.items()]
    return "\n".join([*lines, "", *summary]), time.perf_counter() - start


if __name__ == "__main__":
    raise SystemExit(audit_main(SECTION, "audit_attention.py", __doc__, run))
