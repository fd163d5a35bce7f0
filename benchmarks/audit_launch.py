"""How much of section 3's predictions rests on kernels timed alone with the host's issue inside (issue 27).

Every kernel of ``pase/hardware/data/h200-kernels.json`` was timed alone: CUDA events around one call on an idle
GPU, so each timing holds the host's time to issue the kernel before the GPU starts it and, for a kernel shorter
than the host's work after issuing it, that too (``pase.calibrate.profile.Timer``). The file shows it: a BF16
product of 0.03 GFLOP takes 22-26 us alone and one of 17 GFLOP 30 us, which no GPU's work explains. How much of a
timing is the host's the file does not say, but it bounds it: no kernel runs faster than its peak, so a product's
time alone less its FLOPs at the measured clock's peak is at least the host's time before it. The smallest such
difference over the file's rows bounds that host time for each kind of product.

Each mixture-of-experts row of section 3b (``validate_today.py``'s rows and configurations) priced three ways:

* **as pase prices it**: every kernel at its time alone, the host's issue included, as the file measured it;
* **host's issue out**: every product kernel at its time alone less the most host time the file allows (the
  bound above, per kind of product), never faster than the calibration's best product rate, and no launch
  overhead on any kernel (the copies' fitted 4.6 us intercept is the same host time): the fastest a step could
  price if a kernel's own time were its time alone less the host's, as in a CUDA graph;
* **ideal GPU**: every product at the calibration's best product rate whatever its size, no launch overhead: the
  floor of any reading of the small kernels.

A row whose measured step is longer than pase's cannot be explained by the small kernels' timings, since every
other reading of them is faster; a row whose measured step lies between the ways is within what that reading
leaves open. The dense rows of section 3 come after, for contrast. Not a validation: nothing is fitted and no
way is chosen by its score here; it says how far the unmeasured split of a small kernel's time between the host
and the GPU could move each prediction. ``pase calibrate``'s launch rows measure that split on one GPU
(``benchmarks/device_calibrate.sh``).

Usage: ``python benchmarks/audit_launch.py [--no-write]``.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from _report import audit_main
from validate_today import ROWS, predict

from pase.hardware.cluster import H100_TENSOR_CLOCK_HZ, H200_MEASURED_CLOCK_HZ

SECTION = "## Kernels timed alone: how far the host's share could move section 3 (issue 27)"
KERNELS = json.loads((Path(__file__).resolve().parents[1] / "pase" / "hardware" / "data" /
                      "h200-kernels.json").read_text())
H200_BF16_PEAK, H200_FP8_PEAK = 989e12, 1979e12  # NVIDIA H200 SXM datasheet, dense, at 1,830 MHz
MEASURED = H200_MEASURED_CLOCK_HZ / H100_TENSOR_CLOCK_HZ  # the kernels were timed at 1,980 MHz


def host_bounds() -> tuple[float, float, str]:
    """The most host time before a BF16 and an FP8 product that the file's timings allow (seconds), and the rows
    that set them: each row's time alone less its FLOPs at the peak of the clock it ran at, the smallest."""
    bf16 = min((r[col] - r["flops"] / (H200_BF16_PEAK * MEASURED), f"BF16 {r['m']} x {r['n']} x {r['k']} {col}")
               for r in KERNELS["gemm_bf16"]["rows"] for col in ("fwd_s", "dgrad_s", "wgrad_s"))
    fp8 = min((r["s"] - r["flops"] / (H200_FP8_PEAK * MEASURED), f"FP8 {r['m']} x {r['n']} x {r['k']}")
              for r in KERNELS["gemm_fp8"]["rows"])
    return bf16[0], fp8[0], f"{bf16[1]} ({bf16[0] * 1e6:.1f} us), {fp8[1]} ({fp8[0] * 1e6:.1f} us)"


def _faster(curve, peak: float, less_s: float):
    """``curve`` (FLOPs, fraction of ``peak``) with each anchor's kernel ``less_s`` seconds shorter, never faster
    than the curve's best fraction; ``less_s = inf``: every anchor at the best fraction."""
    if curve is None:
        return None
    top = max(f for _, f in curve)
    out = []
    for flops, fraction in curve:
        t = max(flops / (peak * fraction) - less_s, flops / (peak * top))
        out.append((flops, flops / (peak * t)))
    return tuple(out)


def adjusted(cluster, bf16_host_s: float, fp8_host_s: float):
    """``cluster`` with its product kernels shortened by the host time less its launch overhead (already
    separate), and no launch overhead (the module docstring's second way; ``inf``: the third)."""
    eff = cluster.efficiency
    over = eff.kernel_overhead_s
    curves = {name: _faster(getattr(eff, name), cluster.peak_flops, bf16_host_s - over)
              for name in ("matmul_curve", "matmul_dgrad_curve", "matmul_wgrad_curve")}
    curves["fp8_matmul_curve"] = _faster(eff.fp8_matmul_curve, cluster.fp8_peak_flops, fp8_host_s - over)
    return replace(cluster, efficiency=replace(eff, kernel_overhead_s=0.0, **curves))


def run() -> tuple[str, float]:
    start = time.perf_counter()
    bf16_host, fp8_host, rows_that_set = host_bounds()
    ways = (("as pase prices it", None), ("host's issue out", (bf16_host, fp8_host)),
            ("ideal GPU", (float("inf"), float("inf"))))
    lines = [f"Bounds on the host's time before a product, from the file: {rows_that_set}.", "",
             "| run | GPUs | measured step (s) | " + " | ".join(f"{w} (s)" for w, _ in ways) +
             " | measured against pase's ways |", "| --- | ---: | ---: |" + " ---: |" * len(ways) + " --- |"]
    verdicts: dict[str, dict[str, list[str]]] = {"mixture-of-experts": {}, "dense": {}}
    for row in sorted(ROWS, key=lambda r: r.ep == 1):
        steps = []
        for _, bounds in ways:
            adjust = None if bounds is None else (lambda c, b=bounds: adjusted(c, *b))
            steps.append(predict(row, adjust=adjust).step_time_s)
        measured = row.measured_step_s
        if measured > steps[0]:
            verdict = f"longer than every way ({measured / steps[0] - 1:+.0%} on pase's)"
        elif measured >= steps[-1]:
            verdict = "within the ways"
        else:
            verdict = "shorter than every way"
        lines.append(f"| {row.label} | {row.gpus:,} | {measured:.3f} | " + " | ".join(f"{s:.3f}" for s in steps) +
                     f" | {verdict} |")
        kind = verdicts["mixture-of-experts" if row.ep > 1 else "dense"]
        kind.setdefault(verdict.split(" (")[0], []).append(row.label)
    lines.append("")
    for kind, found in verdicts.items():
        lines.append(f"* The {sum(map(len, found.values()))} {kind} rows: " + "; ".join(
            f"{verdict}, {len(labels)} ({', '.join(labels)})" for verdict, labels in found.items()) + ".")
    return "\n".join(lines), time.perf_counter() - start


if __name__ == "__main__":
    raise SystemExit(audit_main(SECTION, "audit_launch.py", __doc__, run))
