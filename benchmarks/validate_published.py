"""Predicted against measured training throughput: the published runs of ``published-measurements.md`` (issue 12).

Evaluates, with :func:`pase.model.training.evaluate_training` (what ``pase evaluate
--tp ... --calibrated`` does), every configuration of Korthikanti et al.'s Table 5 (both
columns), Megatron-LM's Table 1 (ten rows) and its Table 2, on the ``dgx-a100`` preset,
twice: with peak rates and nominal bandwidths (the paper's assumption), and calibrated
(:data:`pase.hardware.cluster.CALIBRATIONS`: the roofline of every kernel, links at
their collective efficiency, the gradient reduction overlapped with the last backward).
Prints each prediction, the measurement and the error, and writes the table to
BENCHMARKS.md.

Assumptions where the papers are silent: Table 1 and 2 rows use microbatch 1 (Table 2
gives its own), full recomputation, and the interleaved schedule with the largest ``v``
of 4, 3, 2 dividing the layers per stage when the microbatches allow it (else 1F1B);
Table 5's "full" column is full recomputation with tensor-parallel all-reduces, its
"seq+sel" column sequence parallelism with selective recomputation, with the given
microbatch and interleaving. Throughput counts the FLOPs of Megatron's equation 3.

Usage: ``python benchmarks/validate_published.py [--no-write]``.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from dataclasses import replace

from _report import machine, publish

from pase.hardware.cluster import preset
from pase.model.training import Parallelism, evaluate_training
from pase.models import batch_builder

SECTION = "## Published measurements against the model (issue 12)"
SEQ, VOCAB = 2048, 51200
# Megatron-LM Table 1: sample, layers, hidden, t, p, GPUs, batch, measured TFLOP/s per GPU.
TABLE1 = [
    ("megatron-1.7b", 24, 2304, 1, 1, 32, 512, 137), ("megatron-3.6b", 30, 3072, 2, 1, 64, 512, 138),
    ("megatron-7.5b", 36, 4096, 4, 1, 128, 512, 142), ("megatron-18b", 40, 6144, 8, 1, 256, 1024, 135),
    ("megatron-39b", 48, 8192, 8, 2, 512, 1536, 138), ("megatron-76b", 60, 10240, 8, 4, 1024, 1792, 140),
    ("megatron-146b", 80, 12288, 8, 8, 1536, 2304, 148), ("megatron-310b", 96, 16384, 8, 16, 1920, 2160, 155),
    ("megatron-530b", 105, 20480, 8, 35, 2520, 2520, 163), ("megatron-1t", 128, 25600, 8, 64, 3072, 3072, 163),
]


def eq3_flops(batch: int, layers: int, hidden: int) -> float:
    """Megatron-LM's equation 3: FLOPs of one iteration with full recomputation."""
    return 96 * batch * SEQ * layers * hidden ** 2 * (1 + SEQ / (6 * hidden) + VOCAB / (16 * layers * hidden))


def interleaving(layers: int, p: int, m: int) -> int:
    """The largest v of 4, 3, 2 that divides the layers per stage when m is a multiple of p, else 1."""
    return next((v for v in (4, 3, 2) if p > 1 and m % p == 0 and layers % (p * v) == 0), 1)


def table1_config(layers: int, t: int, p: int, gpus: int, batch: int) -> Parallelism:
    """A Table 1 row with the assumptions of the module docstring (microbatch 1, full recomputation)."""
    d = gpus // (t * p)
    return Parallelism(tensor=t, pipeline=p, data=d, global_batch=batch, recompute="full",
                       virtual_stages=interleaving(layers, p, batch // d))


def cases():
    """(table, label, sample, GPUs, Parallelism, measured value, unit, layers, hidden)."""
    for name, layers, hidden, t, p, gpus, batch, mb, v, full, sel in (
            ("megatron-22b", 48, 6144, 8, 1, 8, 4, 4, 1, 1.42, 1.10),
            ("gpt3-175b", 96, 12288, 8, 8, 64, 64, 1, 3, 18.13, 13.75),
            ("megatron-530b", 105, 20480, 8, 35, 280, 280, 1, 3, 49.05, 37.83),
            ("megatron-1t", 128, 25600, 8, 64, 512, 512, 1, 1, 94.42, 71.49)):
        base = dict(tensor=t, pipeline=p, data=gpus // (t * p), microbatch_size=mb, global_batch=batch,
                    virtual_stages=v)
        yield ("Korthikanti Table 5", f"{name} full", name, gpus, Parallelism(**base, recompute="full"), full, "s",
               layers, hidden)
        yield ("Korthikanti Table 5", f"{name} seq+sel", name, gpus,
               Parallelism(**base, recompute="selective", sequence_parallel=True), sel, "s", layers, hidden)
    for name, layers, hidden, t, p, gpus, batch, measured in TABLE1:
        yield ("Megatron Table 1", f"{name} t{t} p{p}", name, gpus, table1_config(layers, t, p, gpus, batch), measured,
               "TFLOP/s", layers, hidden)
    for gpus, mb, measured in ((384, 4, 144), (768, 2, 88), (1536, 1, 44)):
        par = Parallelism(data=gpus, microbatch_size=mb, global_batch=1536, zero=3, recompute="full")
        yield "Megatron Table 2", f"gpt3-175b ZeRO-3 {gpus} GPUs", "gpt3-175b", gpus, par, measured, "TFLOP/s", 96, 12288
    for name, layers, hidden, t, p, batch, runs in (
            ("gpt3-175b", 96, 12288, 8, 12, 1536, ((384, 153), (768, 149), (1536, 141))),
            ("megatron-530b", 105, 20480, 8, 35, 2240, ((560, 171), (1120, 167), (2240, 159)))):
        for gpus, measured in runs:
            d = gpus // (t * p)
            par = Parallelism(tensor=t, pipeline=p, data=d, global_batch=batch, recompute="full",
                              virtual_stages=interleaving(layers, p, batch // d))
            yield "Megatron Table 2", f"{name} PTD-P {gpus} GPUs", name, gpus, par, measured, "TFLOP/s", layers, hidden


def predict(sample: str, gpus: int, par: Parallelism, unit: str, layers: int, hidden: int, calibrated: bool):
    """The model's iteration time (s) or eq.-3 TFLOP/s per GPU, and the plan."""
    cluster = preset("dgx-a100", gpus, calibrated=calibrated)
    # Frameworks overlap the data-parallel reduction with the backward: on under calibration.
    got = evaluate_training(batch_builder(sample), cluster, replace(par, overlap=calibrated))
    if unit == "s":
        return got.step_time_s, got
    return eq3_flops(par.global_batch, layers, hidden) / got.step_time_s / gpus / 1e12, got


def run() -> tuple[str, str, float]:
    start = time.perf_counter()
    lines, errors = [], {False: {}, True: {}}
    for table, label, sample, gpus, par, measured, unit, layers, hidden in cases():
        cells = [table, label, f"{par.describe()}", f"{measured:g} {unit}"]
        for calibrated in (False, True):
            value, got = predict(sample, gpus, par, unit, layers, hidden, calibrated)
            error = value / measured - 1
            errors[calibrated].setdefault(table, []).append(error)
            fits = "" if got.fits_memory else " (does not fit)"
            cells += [f"{value:.3g}{fits}", f"{error * 100:+.1f}%"]
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr)
    header = ["table", "run", "configuration as evaluated", "measured", "peak model", "error",
              "calibrated", "error"]
    table = "\n".join(["| " + " | ".join(header) + " |", "|" + " --- |" * len(header), *lines])
    summary = []
    for table_name in errors[True]:
        for calibrated in (False, True):
            e = [abs(x) for x in errors[calibrated][table_name]]
            summary.append(f"* {table_name}, {'calibrated' if calibrated else 'peak model'}: mean absolute error "
                           f"{statistics.mean(e) * 100:.1f}%, largest {max(e) * 100:.1f}%")
    return table, "\n".join(summary), time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    table, summary, elapsed = run()
    text = "\n".join([
        SECTION, "",
        f"`python benchmarks/validate_published.py` on {datetime.date.today().isoformat()} ({elapsed:.0f} s); "
        f"{machine()}.", "",
        "Every configuration of `../shared/design/published-measurements.md`, evaluated on `dgx-a100` with peak "
        "rates and nominal bandwidths, and with the preset's calibration (Calculon's published A100 figures: "
        "matrix products at 60-95% of peak by size, vector operations at 78 TFLOP/s, HBM at 2,048 GB/s, NVLink "
        "at 65% and InfiniBand at 90% of nominal; assumed 5 us per kernel and 5/10 us per collective step; "
        "gradient reduction overlapped with the last backward, then the optimizer update at 28 bytes a parameter). Assumptions where the papers are silent: "
        "microbatch 1 in Tables 1 and 2 unless given, full recomputation, interleaving v = the largest of 4, 3, 2 "
        "dividing the layers per stage when the microbatches allow it. Table 5 compares iteration times, "
        "Tables 1 and 2 TFLOP/s per GPU of Megatron's equation 3.", "",
        summary, "", table, "",
        "Where the calibrated model stands: it closes most of the gap of the peak model but does not yet meet "
        "the goal (3.5% mean on Table 5, 5% on Table 1); it is optimistic almost everywhere, most for ZeRO-3, "
        "whose measured throughput falls far faster with the GPUs than bandwidth alone explains. Known causes: "
        "(1) the efficiency figures are Calculon's, not fitted to these runs, and ZeRO-3's fine-grained "
        "gathers have no efficiency of their own; (2) a tensor read by several layers is redistributed once per "
        "reader (q, k and v each all-gather the norm's output that Megatron gathers once for its fused QKV "
        "product), which over-counts tensor-parallel traffic and so hides part of the optimism. Fitting the "
        "figures to this table, and then saying so, is the next step of issue 12.", "",
    ])
    publish(text, args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
