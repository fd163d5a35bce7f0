"""Section 3b's runs release after release: how far NVIDIA's own throughput moved at a fixed configuration (issue 27).

Section 3b is Megatron-Bridge's 25.09 table. NVIDIA published a table with each NeMo container after it
(``tests/data/megatron-bridge-releases.json``, extracted from Megatron-Bridge's performance documents by
``extract_bridge_releases.py``), and several of them ran section 3b's configurations again on the same systems:
the same model, GPUs, precision, global and micro batch, sequence, TP, PP, CP, VP, EP and FSDP. Between them the
hardware, the model and the parallel layout are fixed, so pase's prediction is one number, and what moves is the
software: the framework's kernels and fusions, its token dispatch (the 25.09 mixtures of experts dropped tokens
at capacity, the later ones run dropless with forced balance: the same tokens reach the same experts), its
overlap settings and CUDA graphs.

The table lists each section-3b run (and its MXFP8 twin) beside every release that ran its configuration:
tokens/s/GPU, the step they imply, and pase's step against it (``validate_today.predict``, the 25.09 recipe's
settings, as section 3 prices it). Then, per run, the spread of the releases' own steps (slowest over fastest) and
pase's error against the newest release. Not a validation: nothing is fitted, no release is chosen by how well it
agrees, and section 3's figures stay those against 25.09. It says how fixed the target is.

Usage: ``python benchmarks/audit_releases.py [--no-write]``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from _report import audit_main
from validate_today import ROWS, Row, predict

SECTION = "## Section 3b's runs release after release (issue 27)"
RELEASES = Path(__file__).resolve().parents[1] / "tests" / "data" / "megatron-bridge-releases.json"
SYSTEMS = {"dgx-h100": "H100", "dgx-b200": "B200"}
KEY = ("gpus", "gbs", "mbs", "seq", "tp", "pp", "cp", "vp", "ep")


def release_order(release: str) -> tuple[int, ...]:
    """A NeMo container release ("26.02.01") as a sortable tuple."""
    return tuple(int(part) for part in release.split("."))


def same_runs(row: Row, runs: list[dict]) -> list[dict]:
    """The published runs of ``row``'s configuration on its system, oldest release first (the module docstring)."""
    found = [r for r in runs if r["sample"] == row.sample and r["system"] == SYSTEMS[row.cluster]
             and r["precision"] == row.precision and bool(r["fsdp"]) == bool(row.fsdp)
             and all(r[k] == getattr(row, k) for k in KEY)]
    return sorted(found, key=lambda r: release_order(r["release"]))


def run() -> tuple[str, float]:
    start = time.perf_counter()
    data = json.loads(RELEASES.read_text())
    lines = ["| run | pase's step (s) | release | as the table names it | tokens/s/GPU | measured step (s) | "
             "pase's error |", "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
    spreads: dict[str, list[tuple[str, float, float, int]]] = {"mixture-of-experts": [], "dense": []}
    for row in ROWS:
        if row.source != "3b Megatron-Bridge 25.09":
            continue
        found = same_runs(row, data["runs"])
        if len(found) < 2:
            continue
        step = predict(row).step_time_s
        steps = []
        for i, r in enumerate(found):
            measured = row.gbs * row.seq / (r["tokens_per_gpu_s"] * row.gpus)
            steps.append(measured)
            named = f"{r['model']} ({r['variant']}), {r['precision']}" if r["variant"] else \
                f"{r['model']}, {r['precision']}"
            lines.append(f"| {row.label if i == 0 else ''} | {f'{step:.3f}' if i == 0 else ''} | {r['release']} | "
                         f"{named} | {r['tokens_per_gpu_s']:,.0f} | {measured:.3f} | "
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
    lines.append(f"Source: {data['source']}.")
    return "\n".join(lines), time.perf_counter() - start


if __name__ == "__main__":
    raise SystemExit(audit_main(SECTION, "audit_releases.py", __doc__, run))
