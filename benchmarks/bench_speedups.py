"""Modelled speedups over data parallelism for the paper's four benchmarks (issue 5).

For AlexNet, InceptionV3, RNNLM and the Transformer at p = 4 to 64 on the
paper's two clusters (8 x GTX 1080 Ti and 8 x RTX 2080 Ti PCIe nodes, several
nodes beyond 8 devices), solves with PaSE and costs every applicable baseline
under the same model, with no memory limit (the paper has no memory model;
the fit column says whether PaSE's strategy fits the 11 GB cards with Adam).
Writes the section "Modelled speedups (issue 5)" of BENCHMARKS.md.

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
communication weighs more in the model than on the machine: AlexNet's 61M-parameter gradient
all-reduce (40 ms at 12 GB/s) against 6 ms of peak-rate compute on 8 devices; (2) the model
does not overlap gradient all-reduce with the backward pass, which data-parallel frameworks
do; (3) beyond 8 devices the presets' inter-node network (1.56 GB/s per GPU) carries data
parallelism's all-reduce, which frameworks ease with hierarchical, bucketed, overlapped
collectives. The paper's own prototype makes the same simplifications; what the search needs
is the ranking of strategies, and that matches the paper. The absolute speedups are an upper
bound on what measurement would show; the What-if page makes the bandwidth dependence visible."""


def run() -> tuple[str, float]:
    start = time.perf_counter()
    rows = []
    for model in MODELS:
        graph = sample(model)
        for p in DEVICES:
            cells = [model, str(p)]
            for name in CLUSTERS:
                cluster = preset(name, p)
                best = plan(graph, cluster, PlanOptions(memory_limit_bytes=None))
                others = applicable_baselines(graph, cluster)
                dp = others.pop("data parallel")
                expert = min(others.values(), key=lambda b: b.step_time_s)
                fits = {None: "?", True: "yes", False: "no"}[best.fits_memory]
                cells += [f"{best.step_time_s * 1e3:.1f}", f"{dp.step_time_s * 1e3:.1f}",
                          f"**{best.speedup_over(dp):.2f}x**", f"{expert.label} {best.speedup_over(expert):.2f}x", fits]
            rows.append("| " + " | ".join(cells) + " |")
            print(rows[-1], file=sys.stderr)
    header = ["model", "p"] + [f"{c} {h}" for c in ("1080 Ti", "2080 Ti")
                               for h in ("PaSE ms", "DP ms", "speedup over DP", "vs best other baseline", "fits 11 GB")]
    table = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header), *rows]
    return "\n".join(table), time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    table, elapsed = run()
    text = "\n".join([
        SECTION, "",
        f"`python benchmarks/bench_speedups.py` on {datetime.date.today().isoformat()} ({elapsed:.0f} s); {machine()}.",
        "",
        "Modelled step time of PaSE's strategy and of data parallelism (DP) under the same cost model, "
        "sample batch sizes (128, 128, 64, 64), Adam, fp32, no memory limit; 8 devices per node, nodes "
        "joined by the preset's network. 'vs best other baseline': PaSE's speedup over the fastest of "
        "parameter parallelism, OWT (CNNs), Mesh-TF and Megatron (Transformer), GNMT (RNNLM). "
        f"The paper's Fig. 6 (measured): {PAPER}.",
        "", table, "", DISCUSSION, "",
    ])
    publish(text, args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
