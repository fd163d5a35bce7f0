"""Section 3b's runs release after release: how far NVIDIA's own throughput moved at a fixed configuration (issue 27).

Section 3b is Megatron-Bridge's 25.09 table. NVIDIA published a table with each NeMo container after it
(``pase/hardware/data/megatron-bridge-runs.json``, extracted from Megatron-Bridge's performance documents by
``extract_bridge_releases.py``; ``pase`` shows them beside a plan of the same model and system), and several of
them ran section 3b's configurations again on the same systems: the same model, GPUs, precision, global and
micro batch, sequence, TP, PP, CP, VP, EP and FSDP. Between them the hardware, the model and the parallel layout
are fixed, so pase's prediction is one number, and what moves is the software: the framework's kernels and
fusions, its token dispatch (the 25.09 mixtures of experts dropped tokens at capacity, the later ones run dropless
with forced balance: the same tokens reach the same experts), its overlap settings and CUDA graphs.

The table lists each section-3b run (and its MXFP8 twin) beside every release that ran its configuration:
tokens/s/GPU, the step they imply, and pase's step against it (``validate_today.predict``, the 25.09 recipe's
settings, as section 3 prices it). Then, per run, the spread of the releases' own steps (slowest over fastest) and
pase's error against the newest release. Not a validation: nothing is fitted, no release is chosen by how well it
agrees, and section 3's figures stay those against 25.09. It says how fixed the target is.

NVIDIA names where the mixtures of experts' time went in its own words: host-boundedness among the "three
walls" of MoE training (small expert products, many kernel launches; "Scalable Training of Mixture-of-Experts
Models with Megatron Core", arXiv:2603.07685), and CPU synchronisation among the three bottlenecks its fused,
sync-free MoE kernels of June 2026 removed, worth 8% end to end on its DeepSeek-V3 pre-training and 93% on
GPT-OSS (NVIDIA Technical Blog, "Boosting MoE Training Throughput with Advanced Fusion Kernels", 2026-06-15).
pase prices each kernel at its time alone, the host's issue included, and no synchronisation with the host:
neither moves with a release.

Usage: ``python benchmarks/audit_releases.py [--no-write]``.
"""

from __future__ import annotations

import json
import time

from _report import audit_main
from validate_today import ROWS, Row, predict

from pase.hardware.published_runs import RUNS, PublishedRun, published_runs

SECTION = "## Section 3b's runs release after release (issue 27)"


def same_runs(row: Row) -> list[PublishedRun]:
    """The published runs of ``row``'s configuration on its system, oldest release first (the module docstring)."""
    key = ("gpus", "gbs", "mbs", "seq", "tp", "pp", "cp", "vp", "ep")
    return [r for r in published_runs(row.sample, row.cluster) if r.precision == row.precision
            and bool(r.fsdp) == bool(row.fsdp) and all(getattr(r, k) == getattr(row, k) for k in key)]


def run() -> tuple[str, float]:
    start = time.perf_counter()
    lines = ["| run | pase's step (s) | release | as the table names it | tokens/s/GPU | measured step (s) | "
             "pase's error |", "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
    spreads: dict[str, list[tuple[str, float, float, int]]] = {"mixture-of-experts": [], "dense": []}
    for row in ROWS:
        if row.source != "3b Megatron-Bridge 25.09":
            continue
        found = same_runs(row)
        if len(found) < 2:
            continue
        step = predict(row).step_time_s
        steps = [r.step_s for r in found]
        for i, (r, measured) in enumerate(zip(found, steps)):
            named = f"{r.model} ({r.variant}), {r.precision}" if r.variant else f"{r.model}, {r.precision}"
            lines.append(f"| {row.label if i == 0 else ''} | {f'{step:.3f}' if i == 0 else ''} | {r.release} | "
                         f"{named} | {r.tokens_per_gpu_s:,.0f} | {measured:.3f} | "
                         f"{(step / measured - 1) * 100:+.1f}% |")
        kind = "mixture-of-experts" if row.ep > 1 else "dense"
        spreads[kind].append((row.label, max(steps) / min(steps) - 1, step / steps[-1] - 1, len(found)))
    lines.append("")
    for kind, found in spreads.items():
        if not found:
            continue
        lines.append(f"* The {len(found)} {kind} runs that later releases repeated: the releases' steps differ by "
                     f"{min(s for _, s, _, _ in found) * 100:.0f}% to {max(s for _, s, _, _ in found) * 100:.0f}% "
                     f"(slowest over fastest, per run); pase against the newest release: " + "; ".join(
                         f"{label} {error * 100:+.1f}% ({n} releases, spread {spread * 100:.0f}%)"
                         for label, spread, error, n in found) + ".")
    lines.append("")
    lines.append(f"Source: {json.loads(RUNS.read_text())['source']}.")
    return "\n".join(lines), time.perf_counter() - start


if __name__ == "__main__":
    raise SystemExit(audit_main(SECTION, "audit_releases.py", __doc__, run))
