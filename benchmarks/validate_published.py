"""Predicted against measured training throughput: the published runs of ``published-measurements.md`` (issue 12).

Evaluates, with :func:`pase.model.training.evaluate_training` (what ``pase evaluate
--tp ... --calibrated`` does), every configuration of Korthikanti et al.'s Table 5 (both
columns), Megatron-LM's Table 1 (ten rows) and its Table 2, on the ``dgx-a100`` preset,
twice: with peak rates and nominal bandwidths (the paper's assumption), and calibrated
(:data:`pase.hardware.cluster.CALIBRATIONS`: ``A100_FITTED``, Calculon's A100 figures with the
matrix-product curve from published kernel figures and three figures fitted to Table 5 and Table 1
by ``benchmarks/fit_calibration.py``). Prints
each prediction, the measurement and the error, how many pairs of Table 2's rows the
model ranks as measured, and writes the table to BENCHMARKS.md.

Assumptions of the rows:

* Table 1: microbatch size, interleaving and data-parallel wrapper from the paper's own
  launch script (NVIDIA/Megatron-LM ``examples/sc21/run_table_1.sh``): microbatches 16,
  16, 16, 8, 4, 2, 2, 1, 1, 1; ``v`` 3 for 76B, 2 for 145B and 310B, 3 for 530B, else 1;
  full recomputation (``--recompute-method uniform``); PyTorch's DDP (the gradient
  all-reduce overlapped with the backward) for the rows without a pipeline, Megatron's
  local DDP (reduction after the last backward) for the others.
* Table 2: the given microbatch; full recomputation; the PTD-P rows with Megatron's local
  DDP and the plain 1F1B schedule. The paper does not say which schedule they ran; their
  measurements do (:func:`schedule_evidence`): with the GPUs, and so the microbatches per
  pipeline ``m``, changing at a fixed batch, a step takes ``m tau + K``, and the measured
  throughputs give the per-step constant ``K`` (the bubble, the gradient all-reduce, the
  optimizer) as 2.2 s for 175B and 5.2 s for 530B; the model gives 2.4 s and 6.0 s under
  1F1B and 1.0 s and 2.5 s under the interleaved schedule (``v`` 4 and 3). The ZeRO-3
  rows as DeepSpeed ran them, every layer's parameters gathered before its forward and
  backward and its gradient reduce-scattered, one flat ring over the data-parallel ranks
  each (:func:`pase.model.training.zero3_ring_s`), on
  streams of their own, each layer's parameters gathered as the layer before it starts
  (DeepSpeed's prefetch, whose bucket holds less than one of GPT-3's layers) and the
  reduce-scatters on its reduction stream (``overlap_comm``).
* Table 5: "full" is full recomputation with tensor-parallel all-reduces, "seq+sel"
  sequence parallelism with selective recomputation, with the given microbatch and
  interleaving; no data parallelism; Megatron-LM's asynchronous tensor-parallel backward
  (``Parallelism.tp_overlap``: each column-parallel product's input-gradient all-reduce or
  reduce-scatter runs during its weight-gradient product, the sequence-parallel re-gather
  during its input-gradient product), on by default in the Megatron-LM of these runs (May
  2022; ``LinearWithGradAccumulationAndAsyncCommunication``, the default from February 2022,
  NVIDIA/Megatron-LM 83b1e42) and in none of Tables 1 and 2's (April 2021: it first appeared,
  off by default, in September 2021).
* Every row: Megatron-LM's stage cuts (``L / (p v)`` transformer layers on each virtual
  stage, the embedding with the first, the final norm, output layer and loss with the last;
  :func:`megatron_cuts`), not the model's time-balanced ones; no data-parallel overlap
  unless said (Megatron-LM reduced its gradients after the backward until
  ``--overlap-grad-reduce``, September 2023: NVIDIA/Megatron-LM#391, #456). Throughput counts
  the FLOPs of Megatron's equation 3.

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
from pase.hardware.efficiency import Efficiency
from pase.ir.configs import ConfigOptions
from pase.model.training import Parallelism, cached_graph, evaluate_training
from pase.models import batch_builder

SECTION = "## Published measurements against the model (issue 12)"
SEQ, VOCAB = 2048, 51200
# Megatron-LM Table 1: sample, layers, hidden, t, p, GPUs, batch, measured TFLOP/s per GPU; then, from the
# paper's own launch script (NVIDIA/Megatron-LM examples/sc21/run_table_1.sh): microbatch size, interleaving v
# (from --num-layers-per-virtual-pipeline-stage), and whether it ran PyTorch's DDP (DDP=torch: the gradient
# all-reduce bucketed and overlapped with the backward) or Megatron's local DDP (DDP=local: after the backward).
TABLE1 = [
    ("megatron-1.7b", 24, 2304, 1, 1, 32, 512, 137, 16, 1, True),
    ("megatron-3.6b", 30, 3072, 2, 1, 64, 512, 138, 16, 1, True),
    ("megatron-7.5b", 36, 4096, 4, 1, 128, 512, 142, 16, 1, True),
    ("megatron-18b", 40, 6144, 8, 1, 256, 1024, 135, 8, 1, True),
    ("megatron-39b", 48, 8192, 8, 2, 512, 1536, 138, 4, 1, False),
    ("megatron-76b", 60, 10240, 8, 4, 1024, 1792, 140, 2, 3, False),
    ("megatron-146b", 80, 12288, 8, 8, 1536, 2304, 148, 2, 2, False),
    ("megatron-310b", 96, 16384, 8, 16, 1920, 2160, 155, 1, 2, False),
    ("megatron-530b", 105, 20480, 8, 35, 2520, 2520, 163, 1, 3, False),
    ("megatron-1t", 128, 25600, 8, 64, 3072, 3072, 163, 1, 1, False),
]


def eq3_flops(batch: int, layers: int, hidden: int) -> float:
    """Megatron-LM's equation 3: FLOPs of one iteration with full recomputation."""
    return 96 * batch * SEQ * layers * hidden ** 2 * (1 + SEQ / (6 * hidden) + VOCAB / (16 * layers * hidden))


def interleaving(layers: int, p: int, m: int) -> int:
    """The largest v of 4, 3, 2 that divides the layers per stage when m is a multiple of p, else 1."""
    return next((v for v in (4, 3, 2) if p > 1 and m % p == 0 and layers % (p * v) == 0), 1)


def table1_config(layers: int, t: int, p: int, gpus: int, batch: int, mb: int, v: int, overlap: bool) -> Parallelism:
    """A Table 1 row as its launch script ran it (full recomputation: ``--recompute-method uniform``)."""
    return Parallelism(tensor=t, pipeline=p, data=gpus // (t * p), microbatch_size=mb, global_batch=batch,
                       recompute="full", virtual_stages=v, overlap=overlap)


def cases():
    """(table, label, sample, GPUs, Parallelism, measured value, unit, layers, hidden)."""
    for name, layers, hidden, t, p, gpus, batch, mb, v, full, sel in (
            ("megatron-22b", 48, 6144, 8, 1, 8, 4, 4, 1, 1.42, 1.10),
            ("gpt3-175b", 96, 12288, 8, 8, 64, 64, 1, 3, 18.13, 13.75),
            ("megatron-530b", 105, 20480, 8, 35, 280, 280, 1, 3, 49.05, 37.83),
            ("megatron-1t", 128, 25600, 8, 64, 512, 512, 1, 1, 94.42, 71.49)):
        base = dict(tensor=t, pipeline=p, data=gpus // (t * p), microbatch_size=mb, global_batch=batch,
                    virtual_stages=v, tp_overlap=True)
        yield ("Korthikanti Table 5", f"{name} full", name, gpus, Parallelism(**base, recompute="full"), full, "s",
               layers, hidden)
        yield ("Korthikanti Table 5", f"{name} seq+sel", name, gpus,
               Parallelism(**base, recompute="selective", sequence_parallel=True), sel, "s", layers, hidden)
    for name, layers, hidden, t, p, gpus, batch, measured, mb, v, overlap in TABLE1:
        yield ("Megatron Table 1", f"{name} t{t} p{p}", name, gpus,
               table1_config(layers, t, p, gpus, batch, mb, v, overlap), measured, "TFLOP/s", layers, hidden)
    for gpus, mb, measured in ((384, 4, 144), (768, 2, 88), (1536, 1, 44)):
        par = Parallelism(data=gpus, microbatch_size=mb, global_batch=1536, zero=3, recompute="full", overlap=True)
        yield "Megatron Table 2", f"gpt3-175b ZeRO-3 {gpus} GPUs", "gpt3-175b", gpus, par, measured, "TFLOP/s", 96, 12288
    for name, layers, hidden, t, p, batch, runs in (
            ("gpt3-175b", 96, 12288, 8, 12, 1536, ((384, 153), (768, 149), (1536, 141))),
            ("megatron-530b", 105, 20480, 8, 35, 2240, ((560, 171), (1120, 167), (2240, 159)))):
        for gpus, measured in runs:
            d = gpus // (t * p)
            par = Parallelism(tensor=t, pipeline=p, data=d, global_batch=batch, recompute="full")
            yield "Megatron Table 2", f"{name} PTD-P {gpus} GPUs", name, gpus, par, measured, "TFLOP/s", layers, hidden


_GRAPHS: dict = {}


def megatron_cuts(sample: str, par: Parallelism) -> tuple[int, ...] | None:
    """Megatron-LM's stage cuts: ``L / (p v)`` transformer layers on every virtual stage, the embedding with the
    first and the final norm, output layer and loss with the last (not cut for balance, as the model would)."""
    q = par.pipeline * par.virtual_stages
    if q == 1:
        return None
    names = [l.name for l in _graph(sample, par.microbatch_size).layers]
    firsts = [i for i, n in enumerate(names) if n.startswith("h.") and n.split(".")[1].isdigit()
              and (i == 0 or names[i - 1].split(".")[:2] != n.split(".")[:2])]
    per = len(firsts) // q
    if per * q != len(firsts):
        return None
    return tuple(firsts[k * per] for k in range(1, q))


def step_constant_s(m1: int, t1: float, m2: int, t2: float) -> float:
    """The per-step constant ``K`` (s) of steps ``t1`` and ``t2`` (s) of one configuration at ``m1`` and ``m2``
    microbatches per pipeline, taking a step to be ``m tau + K``: ``(m1 t2 - m2 t1) / (m1 - m2)``."""
    return (m1 * t2 - m2 * t1) / (m1 - m2)


def schedule_evidence() -> list[tuple[str, float, float, float]]:
    """Per PTD-P series of Table 2: (sample, the per-step constant its smallest and largest runs imply, the
    model's under 1F1B, the model's under the interleaved schedule with the largest ``v`` of 4, 3, 2), seconds.

    The measured constant is what tells which schedule the runs used: the interleaved one divides the
    bubble, most of it, by ``v``.
    """
    series: dict[str, list] = {}
    for table, label, sample, gpus, par, measured, unit, layers, hidden in cases():
        if "PTD-P" in label:
            series.setdefault(sample, []).append((gpus, par, measured, layers, hidden))
    evidence = []
    for sample, runs in series.items():
        (g1, par1, x1, layers, hidden), (g2, par2, x2, _, _) = runs[0], runs[-1]
        m1, m2 = par1.microbatches, par2.microbatches
        flops = eq3_flops(par1.global_batch, layers, hidden)
        measured = step_constant_s(m1, flops / (g1 * x1 * 1e12), m2, flops / (g2 * x2 * 1e12))
        modelled = []
        for v in (1, interleaving(layers, par1.pipeline, m2)):
            steps = [predict(sample, g, replace(par, virtual_stages=v, schedule=None), "s", layers, hidden, True)[0]
                     for g, par in ((g1, par1), (g2, par2))]
            modelled.append(step_constant_s(m1, steps[0], m2, steps[1]))
        evidence.append((sample, measured, *modelled))
    return evidence


def _graph(sample: str, batch: int):
    return cached_graph(batch_builder(sample), batch, _GRAPHS.setdefault(sample, {}))


def predict(sample: str, gpus: int, par: Parallelism, unit: str, layers: int, hidden: int, calibrated: bool,
            efficiency: Efficiency | None = None):
    """The model's iteration time (s) or eq.-3 TFLOP/s per GPU, and the plan.

    ``efficiency`` replaces the preset's calibration (``benchmarks/fit_calibration.py``). The gradient
    reduction overlaps the backward only where the row says so (``par.overlap``: PyTorch's DDP);
    Megatron-LM's own DDP reduced its gradients after the last backward until ``--overlap-grad-reduce``
    (September 2023, NVIDIA/Megatron-LM#391 and #456), after all these runs. Attention runs unfused, as
    Megatron-LM ran it then (its fused softmax between two batched products; FlashAttention came in 2023).
    """
    cluster = preset("dgx-a100", gpus, calibrated=calibrated)
    if calibrated and efficiency is not None:
        cluster = replace(cluster, efficiency=efficiency)
    # The graphs (not the costs, which depend on the calibration) are built once per sample.
    graph = _graph(sample, par.microbatch_size)
    got = evaluate_training(graph, cluster, replace(par, stage_cuts=megatron_cuts(sample, par)),
                            options=ConfigOptions(attention="unfused"))
    if unit == "s":
        return got.step_time_s, got
    return eq3_flops(par.global_batch, layers, hidden) / got.step_time_s / gpus / 1e12, got


def run() -> tuple[str, str, float]:
    start = time.perf_counter()
    lines, errors, ranked = [], {False: {}, True: {}}, {False: [], True: []}
    for table, label, sample, gpus, par, measured, unit, layers, hidden in cases():
        cells = [table, label, f"{par.describe()}" + (" overlapped reduction" if par.overlap else ""),
                 f"{measured:g} {unit}"]
        for calibrated in (False, True):
            value, got = predict(sample, gpus, par, unit, layers, hidden, calibrated)
            error = value / measured - 1
            if table == "Megatron Table 2":
                ranked[calibrated].append((measured, value))
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
    for calibrated in (False, True):
        summary.append(f"* Megatron Table 2, {'calibrated' if calibrated else 'peak model'}: "
                       f"{order(ranked[calibrated])} ordered as measured")
    for sample, measured, plain, interleaved in schedule_evidence():
        summary.append(f"* Table 2 PTD-P {sample}, per-step constant (bubble, gradient all-reduce, optimizer) implied "
                       f"by its smallest and largest runs: measured {measured:.2f} s; calibrated model {plain:.2f} s "
                       f"under 1F1B, {interleaved:.2f} s interleaved")
    return table, "\n".join(summary), time.perf_counter() - start


def order(rows: list[tuple[float, float]]) -> str:
    """How many pairs of (measured, predicted) rows the prediction ranks as the measurement does."""
    pairs = [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:] if a[0] != b[0]]
    right = sum((a[0] - b[0]) * (a[1] - b[1]) > 0 for a, b in pairs)
    return f"{right} of the {len(pairs)} pairs of rows"


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
        "rates and nominal bandwidths, and with the preset's calibration (`A100_FITTED` in "
        "`pase/hardware/efficiency.py`: Calculon's published A100 figures; the matrix-product curve from "
        "published kernel figures, not fitted (`A100_KERNEL_CURVE`: Calculon's curve, 60/90/95% of peak at 1, 16 "
        "and 128 GFLOP, scaled so that its top is the best A100 bf16 product measured, 267.9 of 312 TFLOP/s: 54%, "
        "81%, 86%); three figures fitted to Korthikanti Table 5 and Megatron Table 1 by "
        "`benchmarks/fit_calibration.py`: the HBM fraction, NVLink's efficiency and the fraction of a kernel's "
        "shorter compute or memory time hidden behind the longer; vector operations at 78 TFLOP/s, InfiniBand at 90% of nominal, 5 us per kernel, 5/10 us per "
        "collective step as before; the optimizer update at 28 bytes a parameter). Assumptions of the rows (the "
        "script's docstring): Table 1's microbatch, interleaving and DDP from Megatron-LM's own "
        "`examples/sc21/run_table_1.sh`; Table 2's PTD-P rows on the plain 1F1B schedule, which their measurements "
        "imply (below); full recomputation in Tables 1 and 2; Megatron's stage cuts (equal transformer layers per "
        "virtual stage, embedding first, output layer last); the gradient reduction after the backward except "
        "under PyTorch's DDP (Megatron-LM had no `--overlap-grad-reduce` before 2023); ZeRO-3 as DeepSpeed ran it, "
        "one flat ring per layer over the data-parallel ranks, each ring step paying the latency of the link it crosses "
        "(NCCL's own ring model), on a stream of its own, one layer ahead of the compute. "
        "Table 5 compares iteration times, Tables 1 and 2 "
        "TFLOP/s per GPU of Megatron's equation 3. Table 5's and Table 1's calibrated errors are in sample (the "
        "rows the three figures were fitted to); Table 2 was never fitted; \"The A100 calibration out of sample\" "
        "predicts each of Tables 5 and 1 from a fit to the other.", "",
        summary, "", table, "",
        "Where the calibrated model stands. Before the fit, with Calculon's figures, it was optimistic almost "
        "everywhere (Table 5 mean 14.3%, Table 1 21.2%, Table 2 45.5%). Modelling causes fixed first: a tensor "
        "several layers read in one layout is redistributed once (Megatron's fused QKV gathers the norm's output "
        "once, and reduces its gradient once, not once for each of q, k and v); Table 1 runs as its launch script "
        "ran it (larger microbatches, its interleaving, Megatron's local DDP without overlap where it used it); "
        "Megatron's layer-count stage cuts, with the embedding and the output layer unbalancing the first and last "
        "stage; ZeRO-3's gathers as one flat ring over all ranks, whose latency grows with the GPUs, so that its "
        "throughput falls with them as measured. A first fit of the six figures left Table 5 at 3.9% mean, 9.6% "
        "largest: its \"full\" rows 3-10% slow, its \"seq+sel\" rows within 5%. Two things Megatron does were "
        "then priced, on calibrated clusters only (the peak model's numbers are unchanged): element-wise chains run "
        "as one kernel (`pase.model.roofline.fused_chains`, a documented assumption of the roofline: a chain of "
        "element-wise layers feeding one another, in the same split, reads its inputs and writes its outputs once; "
        "in these graphs Megatron's bias + dropout + residual add after attention and after the feed-forward block, "
        "and the embedding sum with its dropout; replicated on every tensor-parallel rank without sequence "
        "parallelism, these weigh most on the full rows), and under sequence parallelism the backward re-gathers the "
        "sequence-sharded input of each column-parallel product (QKV once, the first feed-forward product, the "
        "output layer), as the memory model already assumed, priced as the forward's all-gather once more and not "
        "overlapped, like every tensor-parallel collective here. With the first fit's figures these alone gave "
        "Table 5 2.7% mean (5.7% largest) and Table 1 4.4% (8.4%). A refit then left Table 5 at 2.9% mean (6.6% "
        "largest) with its full rows 2-7% slow and Table 1 at 3.5% (8.1%) with its pipelined rows 5-8% fast: one "
        "calibration split between two versions of Megatron-LM. They differ in one thing the model can price. "
        "The Megatron-LM of Table 5's runs (May 2022) overlaps the tensor-parallel backward by default "
        "(`LinearWithGradAccumulationAndAsyncCommunication`, the default from February 2022, NVIDIA/Megatron-LM "
        "83b1e42): each column-parallel product reduces its input gradient (an all-reduce, or a reduce-scatter under "
        "sequence parallelism) while it computes its weight gradient, and re-gathers a sequence-parallel input while "
        "it computes its input gradient. That of Tables 1 and 2 (April 2021) exposes them; the option first "
        "appeared, off by default, in September 2021. Priced (`Parallelism.tp_overlap`, "
        "`pase evaluate --tp-overlap`; each collective hides up to the product's own seconds, once per reduction "
        "however many layers share it) on Table 5's rows and refitted (`benchmarks/fit_calibration.py "
        "--iterations 80` from the previous figures, 125 evaluations, 70 s): matrix products at 32%, 75% and 81% "
        "of peak at 1, 16 and 128 GFLOP (the smallest products of these runs, 175B's attention products at "
        "microbatch 1, are 13 GFLOP per kernel, so the 1 GFLOP point is weakly determined; continued, the fit "
        "lowers it and the 16 GFLOP point to 5% and 54% for 2% of its objective, not taken), HBM at 64% of 2,039 "
        "GB/s, NVLink at 60% of nominal (Calculon's figure is 65%), 47% of the shorter of a kernel's compute and "
        "memory time hidden. Table 5: mean 2.2%, largest 4.5% (goal 3.5%, 8%); Table 1: mean 2.4%, largest 5.0% "
        "(goal 5%, 10%), its pipelined 76B to 530B rows still the fastest (+2% to +5%). Issue 25 then fixed the "
        "matrix curve from published kernel figures instead (`A100_KERNEL_CURVE`, above), as fitted to one table "
        "alone the six figures ran off where that table does not constrain them (\"The A100 calibration out of "
        "sample\"), and refitted the other three from Calculon's figures (`benchmarks/fit_calibration.py "
        "--iterations 250`, 190 evaluations, 92 s): HBM at 68% of 2,039 GB/s, NVLink at 64% of nominal, 1% of the "
        "shorter of a kernel's compute and memory time hidden (Calculon's A100 file sums them). The table above "
        "is that calibration; Table 5: mean 2.0%, largest 4.7%; Table 1: mean 2.6%, largest 5.8%.", "",
        "Table 2 (not fitted). The paper does not give the PTD-P rows' schedule. At a fixed batch, a run on more "
        "GPUs has fewer microbatches per pipeline m, and a step takes m tau + K, so two runs of one configuration "
        "give the per-step constant K (the pipeline bubble, the gradient all-reduce and the optimizer) from the "
        "measured throughputs alone. The lines above show it: 2.2 s for 175B and 5.2 s for 530B, close to what "
        "the model gives under 1F1B and more than twice what it gives under the interleaved schedule, whose bubble "
        "is v times smaller; the rows are evaluated on 1F1B. Interleaved, the PTD-P rows would be 2-8% fast, their "
        "error growing with the GPUs, and ZeRO-3 on 384 GPUs would rank below PTD-P 175B on 1,536. ZeRO-3's rings "
        "run through the GPUs of each node in turn, so of a ring's d - 1 steps only the nodes' count less one "
        "cross the network and the rest stay on NVLink, each paying its own link's latency, as NCCL's tuning model "
        "prices a ring (`src/graph/tuning.cc`); charged the network's latency on every step, as before, ZeRO-3 on "
        "1,536 GPUs was 22% low. Now every one of the 36 pairs of rows is ordered as measured: ZeRO-3 falls from "
        "149 to 42 TFLOP/s as the GPUs grow (measured 144 to 44), the PTD-P rows stay within 3% (175B: 154, 149, "
        "141 against 153, 149, 141). ZeRO-3 on 768 GPUs is the largest error, 7.5% high: measured, it takes as long "
        "a step as on 1,536 GPUs (66.7 s), so the rings' latency, which doubles from 768 to 1,536 ranks, seems "
        "hidden in what DeepSpeed and NCCL ran; the model's step grows by 7 s.", "",
    ])
    publish(text, args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
