"""The A100 calibration validated out of sample: each table predicted by a calibration fitted without it.

``A100_FITTED`` (``pase/hardware/efficiency.py``) has its matrix-product curve from published kernel
figures (``A100_KERNEL_CURVE``) and three figures (the HBM fraction, NVLink's efficiency, the
compute/memory overlap) fitted to Korthikanti et al.'s Table 5 and Megatron-LM's Table 1 together, so
its errors on those tables (``benchmarks/validate_published.py``) are in-sample. Here the same three
figures are fitted, from Calculon's published A100 figures as ``benchmarks/fit_calibration.py``
starts, to one table alone, and the other table is predicted with them: the errors a user would see
on runs the calibration never saw. Megatron-LM's Table 2 is never fitted (``validate_published.py``
reports it).

Usage: ``python benchmarks/validate_out_of_sample.py [--iterations N] [--no-write]``.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time

from _report import machine, publish
from fit_calibration import GOALS, NAMES, ROWS, errors, fit

SECTION = "## The A100 calibration out of sample"
# The goals for the A100 tables out of sample: mean and largest absolute error.
OUT_OF_SAMPLE_GOALS = (0.05, 0.10)
# Why the matrix curve is fixed rather than fitted (issue 25), with what was looked at before deciding.
WHY = [
    "Why this method (issue 25). The calibration before it fitted six figures, the matrix curve's points at 1, 16 "
    "and 128 GFLOP among them: fitted to Table 5 alone it predicted Table 1 at 3.0% mean error, 5.5% largest, but "
    "fitted to Table 1 alone it ran the curve off where Table 1 does not constrain it (26% of peak at 1 and at 16 "
    "GFLOP, far below what A100 products of those sizes reach) and predicted Table 5 at 6.0% and 9.9%, missing the "
    "goal (`--iterations 250`, 2026-12-04). Hardware figures belong to kernel measurements and published "
    "specifications, not to the step times they are scored on, so the curve is now fixed from published kernel "
    "figures before any step time is scored, and only the three figures no A100 kernel source here gives are "
    "fitted: fewer free figures, nothing left to run off. The choice rests on that principle, but it was not made "
    "blind: the out-of-sample results of this method and of one alternative were looked at before choosing. The "
    "alternative, the curve's shape fixed and its level fitted (four figures), predicted Table 5 from Table 1 at "
    "4.3% mean and 10.7% largest in a shorter development fit (60 iterations), missing the goal for the largest "
    "row.", "",
    "What the fitted figures absorb. The overlap goes to about 0 (Calculon's own A100 file sums compute and memory "
    "time), so a product pays its operands' HBM time on top of its compute: the best shape measured, 6912 x 16384 "
    "x 2048, is priced at 236 TFLOP/s against the 267.9 measured (12% slower; `tests/test_published.py` holds it "
    "within 15% and never faster). That stands for what separates these 2021-22 runs' products from the best "
    "shape timed with CUDA 12.1 (other shapes, older cuBLAS, clocks under a whole step's power), which no A100 "
    "kernel source here separates. The HBM fraction and NVLink's efficiency trade against each other from one "
    "table to the other; the shipped `A100_FITTED` takes their fit to both tables (`fit_calibration.py`).", "",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=250, help="Nelder-Mead iterations per fit")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    start = time.perf_counter()
    lines = ["| fitted to | figures (" + ", ".join(NAMES) + ") | predicted | mean error | largest error | in sample "
             "(fitted table) mean |", "| --- | --- | --- | ---: | ---: | ---: |"]
    worst_mean = worst = 0.0
    for fitted in GOALS:
        held_out = next(t for t in GOALS if t != fitted)
        x, _, evaluations = fit((fitted,), iterations=args.iterations)
        out = [abs(e) for e in errors(x, [r for r in ROWS if r[0] == held_out])]
        inside = [abs(e) for e in errors(x, [r for r in ROWS if r[0] == fitted])]
        worst_mean, worst = max(worst_mean, statistics.mean(out)), max(worst, max(out))
        lines.append(f"| {fitted} ({evaluations} evaluations) | {', '.join(f'{v:.3f}' for v in x)} | {held_out} | "
                     f"{statistics.mean(out) * 100:.1f}% | {max(out) * 100:.1f}% | "
                     f"{statistics.mean(inside) * 100:.1f}% |")
    goal_mean, goal_largest = OUT_OF_SAMPLE_GOALS
    verdict = ("meets" if worst_mean <= goal_mean and worst <= goal_largest else "does not meet")
    text = "\n".join([
        SECTION, "",
        f"`python benchmarks/validate_out_of_sample.py --iterations {args.iterations}` on "
        f"{datetime.date.today().isoformat()} ({time.perf_counter() - start:.0f} s); {machine()}.", "",
        "Each table predicted by the calibration of `benchmarks/fit_calibration.py` fitted to the other table "
        "alone: the matrix-product curve fixed from published kernel figures (`A100_KERNEL_CURVE`: Calculon's "
        "published A100 curve, its top at the best A100 bf16 product measured, 86% of peak; not fitted), the "
        "HBM fraction, NVLink's efficiency and the compute/memory overlap fitted from Calculon's figures (the rows "
        "evaluated as `validate_published.py` does: unfused attention, as they ran). The shipped `A100_FITTED` is "
        "the same three figures fitted to both tables; its errors in \"Published measurements against the model\" "
        "are in sample.", "",
        f"* Out of sample, the worse table's mean error is {worst_mean * 100:.1f}% and the largest row's "
        f"{worst * 100:.1f}%: this {verdict} the goals of {goal_mean * 100:.0f}% and {goal_largest * 100:.0f}%.",
        "", *lines, "", *WHY,
    ])
    publish(text, args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
