"""Modelled speedups over data parallelism for the paper's four benchmarks (issue 5).

For AlexNet, InceptionV3, RNNLM and the Transformer at p = 4 to 64 on the
paper's two clusters (8 x GTX 1080 Ti and 8 x RTX 2080 Ti PCIe nodes, several
nodes beyond 8 devices), solves with PaSE and costs every applicable baseline
under the same model, with no memory limit (the paper has no memory model;
the fit column says whether PaSE's strategy fits the 11 GB cards with Adam).
It does so twice: with the paper's peak model, and with the presets'
calibrations (``preset(name, calibrated=True)``: roofline kernels, achievable
link efficiency and latency; issue 12), and gives the calibrated speedup once
more with data parallelism's communication entirely hidden behind its compute,
a bound no overlap of it can beat; then AlexNet's calibrated speedup at larger
batches. Writes the section "Modelled speedups (issue 5)" of BENCHMARKS.md.

Usage: ``python benchmarks/bench_speedups.py [--no-write]``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time

from _report import machine, publish

from pase.analysis.baselines import applicable_baselines
from pase.hardware.cluster import preset
from pase.models import sample
from pase.planner import PlanOptions, plan

SECTION = "## Modelled speedups (issue 5)"
MODELS = ("alexnet", "inception3", "rnnlm", "transformer")
DEVICES = (4, 8, 16, 32, 64)
CLUSTERS = ("paper-1080ti", "paper-2080ti")
# AlexNet's calibrated speedup at these global batches and device counts: how the batch moves it.
ALEXNET_BATCHES = (128, 256, 512, 1024, 2048)
ALEXNET_BATCH_DEVICES = (8, 32)
# The paper's Fig. 6: measured speedup of PaSE's strategies over data parallelism.
PAPER = "up to 1.85x on the 1080 Ti nodes, up to 4x on the 2080 Ti nodes (no peer-to-peer over PCIe)"

DISCUSSION = """\
Where the model agrees with the paper. PaSE never loses to data parallelism, nor to any
other baseline, at any point. The gain is largest where weights are large relative to the
work per sample: AlexNet's fully connected layers, the RNNLM's 100k-word vocabulary and the
Transformer's 50k-word embedding and softmax, which PaSE splits along a model dimension
(the embedding width, the vocabulary of the output projection) instead of replicating, as
the paper's Table II does; InceptionV3, nearly all convolutions with few weights, gains least (1.0-1.3x),
as in the paper. The 2080 Ti cluster, whose links are slower relative to its FLOP/s, gains
more than the 1080 Ti one at every point, the paper's central observation (its 4x against
1.85x). The found strategies have the paper's shape: data-parallel early convolutions and
alternating out/in-channel splits in AlexNet's fully connected layers, model-dimension splits
for embeddings and softmax, and batch 16 x feed-forward-hidden 2 hybrids in the Transformer at
32 devices, the paper's 16 x 2.

Where it differs. The modelled speedups are larger than the measured ones, most for AlexNet
(3x at p=4 to 19x at p=64 against the paper's measured 1.85x) and growing with p, because
(1) computation is charged at peak FLOP/s while real kernels reach a fraction of it, so
communication weighs more in the model than on the machine (real links reach a fraction of
their nominal bandwidth too: the calibrated table below prices both): AlexNet's 61M-parameter gradient
all-reduce (40 ms at 12 GB/s) against 6 ms of peak-rate compute on 8 devices; (2) the model
does not overlap gradient all-reduce with the backward pass, which data-parallel frameworks
do; (3) beyond 8 devices the presets' inter-node network (1.56 GB/s per GPU) carries data
parallelism's all-reduce, which frameworks ease with hierarchical, bucketed, overlapped
collectives. The paper's own prototype makes the same simplifications; what the search needs
is the ranking of strategies, and that matches the paper. The absolute speedups are an upper
bound on what measurement would show; the What-if page makes the bandwidth dependence visible."""

CALIBRATED_DISCUSSION = """\
What calibration changes. Where compute weighs, the calibrated speedups are smaller than the
peak model's: the Transformer's fall from 1.13-2.21x to 1.12-1.82x on the 1080 Ti nodes (from
1.25-2.52x to 1.23-2.11x on the 2080 Ti), InceptionV3's stay at 1.0-1.2x. AlexNet's largest falls
from 19.2x to 12.7x (1080 Ti) and from 23.6x to 15.8x (2080 Ti), at 64 devices, where PaSE's
kernels are smallest and lose most to the SGEMM curve and the launch cost. The RNNLM's rise a
little (1.38-5.93x, 1.80-7.82x): the measured ring reaches 73% of the PCIe link, which slows data
parallelism's all-reduce of the 100k-word embedding and softmax more than PaSE's split layers.
PaSE still beats every baseline at every point.

Against the paper's Fig. 6. At the sample batches the calibrated model is within the paper's
measured range (up to 1.85x and 4x) for the Transformer and InceptionV3 on both clusters, and
for the RNNLM on one node of 1080 Tis (1.84x at p=8) and on up to 16 2080 Tis (3.91x); AlexNet
(3.14-12.67x, 5.12-15.80x) and the larger RNNLM runs are not. Calibration alone cannot close
that: on these nodes data parallelism is bound by its gradient all-reduce (AlexNet at p=8: 10 ms
of compute against 50 ms to all-reduce 61M fp32 weights at 73% of 12 GB/s), so slowing the
kernels lengthens PaSE's mostly-compute step as much as DP's. Overlap cannot close it either:
with all of DP's communication hidden behind its compute (the bound column) AlexNet is still
4.1x at p=8 (6.9x on the 2080 Ti). The overlap of issue 12 (the gradient all-reduce bucketed
into the backward pass) is in the 3-D training model, not in the per-layer cost model of these
tables; for AlexNet the bound shows it would change little. The batch does close it on one node:
compute grows with the batch and the all-reduce does not, and at 128 images a device (global
batch 1,024 on 8 GPUs) the calibrated AlexNet speedup is 1.65x on the 1080 Ti nodes and 2.27x on
the 2080 Ti ones, the paper's size. Our notes on the paper do not record the batch its Fig. 6
runs used, so this is a sensitivity, not a reproduction.

What still differs. (1) The two clusters' ratio: the paper measured 4x against 1.85x (2.2 times);
the model's maxima are 15.8x against 12.7x (1.24 times), and 1.0-1.6 times at any one point. The
2080 Ti's host-staged link is the preset's 6 GB/s at the 1080 Ti's ring efficiency with twice its
latency, assumed, not measured on such nodes. (2) DeepBench measured its ring on one 8-GPU board
with a single PCIe root; if the paper's nodes spread their GPUs over two CPU sockets, the ring
crosses the socket link without peer-to-peer and is slower than modelled. Between nodes the
InfiniBand efficiency and latency are the A100 fit's; GeForce cards have no GPUDirect RDMA, so
that path too is staged through host memory. (3) Convolutions are priced on the SGEMM curve, while
cuDNN's Winograd kernels run 3x3 convolutions faster than that: their compute is overestimated,
which makes modelled speedups smaller, not larger. (4) The memory bandwidth fraction, the
compute/memory overlap and the launch cost are carried over from the A100 fit. (5) Whatever the
measured runs' framework added to split layers (the paper's implementation) the model does not
see. The calibrated model prices what these kernels and links were measured to do, which the
peak one does not, but at the sample batches it does not reproduce the measured speedups; what
the search depends on holds under both: PaSE's strategy ranks first."""


def _solve(graph, cluster):
    """PaSE's plan, data parallelism's and the fastest other baseline's on ``cluster``, no memory limit."""
    best = plan(graph, cluster, PlanOptions(memory_limit_bytes=None))
    others = applicable_baselines(graph, cluster)
    dp = others.pop("data parallel")
    return best, dp, min(others.values(), key=lambda b: b.step_time_s)


def _hidden_dp_speedup(best, dp) -> float:
    """PaSE's speedup over data parallelism if all of DP's communication were hidden behind its compute.

    DP's step can be no shorter than the longer of its compute and its communication, and PaSE's is
    kept serial, so no overlap of DP's gradient all-reduce with its backward pass brings the speedup lower.
    """
    t = dp.totals_s()
    return max(t["compute_s"], t["intra_comm_s"] + t["edge_comm_s"]) / best.step_time_s


def run() -> tuple[str, str, str, float]:
    """The peak-model table, the calibrated table, AlexNet's batch table (Markdown) and the seconds taken."""
    start = time.perf_counter()
    peak_rows, calibrated_rows = [], []
    for model in MODELS:
        graph = sample(model)
        for p in DEVICES:
            peak, calibrated = [model, str(p)], [model, str(p)]
            for name in CLUSTERS:
                best, dp, expert = _solve(graph, preset(name, p))
                fits = {None: "?", True: "yes", False: "no"}[best.fits_memory]
                peak += [f"{best.step_time_s * 1e3:.1f}", f"{dp.step_time_s * 1e3:.1f}",
                         f"**{best.speedup_over(dp):.2f}x**", f"{expert.label} {best.speedup_over(expert):.2f}x", fits]
                best, dp, expert = _solve(graph, preset(name, p, calibrated=True))
                calibrated += [f"{best.step_time_s * 1e3:.1f}", f"{dp.step_time_s * 1e3:.1f}",
                               f"**{best.speedup_over(dp):.2f}x**", f"{_hidden_dp_speedup(best, dp):.2f}x",
                               f"{expert.label} {best.speedup_over(expert):.2f}x"]
            peak_rows.append("| " + " | ".join(peak) + " |")
            calibrated_rows.append("| " + " | ".join(calibrated) + " |")
            print(peak_rows[-1], calibrated_rows[-1], sep="\n", file=sys.stderr)
    batch_rows = []
    for batch in ALEXNET_BATCHES:
        graph = sample("alexnet", batch=batch)
        cells = [str(batch)]
        for p in ALEXNET_BATCH_DEVICES:
            for name in CLUSTERS:
                best, dp, _ = _solve(graph, preset(name, p, calibrated=True))
                cells.append(f"{best.speedup_over(dp):.2f}x")
        batch_rows.append("| " + " | ".join(cells) + " |")
    clusters = ("1080 Ti", "2080 Ti")
    return (_table(["model", "p"] + [f"{c} {h}" for c in clusters for h in (
                "PaSE ms", "DP ms", "speedup over DP", "vs best other baseline", "fits 11 GB")], peak_rows),
            _table(["model", "p"] + [f"{c} {h}" for c in clusters for h in (
                "PaSE ms", "DP ms", "speedup over DP", "DP comm. hidden (bound)", "vs best other baseline")],
                calibrated_rows),
            _table(["global batch"] + [f"p={p} {c}" for p in ALEXNET_BATCH_DEVICES for c in clusters], batch_rows),
            time.perf_counter() - start)


def _table(header: list[str], rows: list[str]) -> str:
    """A Markdown table of ``header`` and the already formatted ``rows``."""
    return "\n".join(["| " + " | ".join(header) + " |", "|" + " --- |" * len(header), *rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    peak, calibrated, batches, elapsed = run()
    text = "\n".join([
        SECTION, "",
        f"`python benchmarks/bench_speedups.py` on {datetime.date.today().isoformat()} ({elapsed:.0f} s); {machine()}.",
        "",
        "Modelled step time of PaSE's strategy and of data parallelism (DP) under the same cost model, "
        "sample batch sizes (128, 128, 64, 64), Adam, fp32, no memory limit; 8 devices per node, nodes "
        "joined by the preset's network. 'vs best other baseline': PaSE's speedup over the fastest of "
        "parameter parallelism, OWT (CNNs), Mesh-TF and Megatron (Transformer), GNMT (RNNLM). "
        f"The paper's Fig. 6 (measured): {PAPER}.",
        "", "The paper's model: every FLOP at peak, every link at its nominal bandwidth.", "", peak, "",
        DISCUSSION, "",
        "The calibrated model (`preset(name, calibrated=True)`, `--calibrated`; `GTX1080TI_FP32` and "
        "`RTX2080TI_FP32` in `pase/hardware/efficiency.py`, each figure with its source): kernels on the "
        "roofline with DeepBench's measured fp32 SGEMM curve of the 1080 Ti, the PCIe ring at DeepBench's "
        "measured 73% of 12 GB/s and 4.9 us a step, the 2080 Ti carrying these over. 'DP comm. hidden "
        "(bound)': PaSE's speedup if all of DP's communication were hidden behind its compute, the least "
        "any overlap of the gradient all-reduce with the backward pass could leave; below 1 it says "
        "nothing, as it keeps PaSE's own communication serial.", "", calibrated, "",
        "AlexNet's calibrated speedup over DP as the global batch grows (per-device batch = batch / p):", "",
        batches, "", CALIBRATED_DISCUSSION, "",
    ])
    publish(text, args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
