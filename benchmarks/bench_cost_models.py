"""The paper's cost model against the corrected one on the paper's four benchmarks (issue 10).

For AlexNet, InceptionV3, RNNLM and the Transformer at p = 8 and 32 on the
paper's 1080 Ti nodes (8 GPUs a node, several nodes beyond 8), solves under
both cost models with no memory limit and reports the modelled step time,
the speedup over data parallelism under the same model, and how many layers
the corrected model splits differently. Writes the section "Paper model
against corrected model (issue 10)" of BENCHMARKS.md.

Usage: ``python benchmarks/bench_cost_models.py [--no-write]``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time

from _report import machine, publish

from pase.analysis.baselines import data_parallel
from pase.hardware.cluster import preset
from pase.ir.configs import ConfigOptions
from pase.models import sample
from pase.planner import PlanOptions, plan

SECTION = "## Paper model against corrected model (issue 10)"
MODELS = ("alexnet", "inception3", "rnnlm", "transformer")
DEVICES = (8, 32)
CLUSTER = "paper-1080ti"

DISCUSSION = """\
What changes. The corrected model leaves a split reduction's output as a pending sum for the
next edge to finish (an all-reduce into a replicated consumer, a reduce-scatter into a sharded
one), moves nothing where a consumer's block is already on the device, prices an edge's gradient
from its own layouts, skips the gradient of graph inputs (the first layer's 6bnc becomes 4bnc),
places every layer digit-exactly on a sub-mesh that tiles the cluster, and, like PyTorch's DDP,
does not synchronise BatchNorm statistics over the batch. "Layers changed" counts layers whose
configuration differs between the two optima; speedups are over data parallelism under the same
model.

Under the corrected model every step time is lower (less is charged: pending sums finished where
they are needed, no transfer of data already on the device, no gradient for graph inputs) and every
speedup over data parallelism is at least the paper model's, most at p = 32 across four nodes
(RNNLM 3.21x -> 3.91x), where the mesh pricing of the gradient all-gathers and reduce-scatters pays.
One thing the corrected model charges that the paper's rule hides: a layer that splits both n and c
puts them on different mesh digits (the last dimension innermost), so the next layer's c, this one's
n, lands on another digit and pays an all-to-all that the paper's aligned-block assumption never
charges. The placement order is fixed today; searching it as part of a configuration would let the
search align such layers, as Megatron aligns column- and row-parallel layers on one group.
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = ap.parse_args()
    start = time.perf_counter()
    rows = []
    for name in MODELS:
        graph = sample(name)
        for p in DEVICES:
            cluster = preset(CLUSTER, devices=p)
            out = {}
            for model in ("paper", "corrected"):
                options = ConfigOptions(cost_model=model)
                t0 = time.perf_counter()
                best = plan(graph, cluster, PlanOptions(configs=options, memory_limit_bytes=None))
                solve_s = time.perf_counter() - t0
                dp = data_parallel(graph, cluster, options)
                out[model] = (best, best.speedup_over(dp), solve_s)
            changed = sum(out["paper"][0].strategy[k] != out["corrected"][0].strategy[k] for k in out["paper"][0].strategy)
            rows.append(
                f"| {name} | {p} | {out['paper'][0].step_time_s * 1e3:.2f} | {out['corrected'][0].step_time_s * 1e3:.2f} "
                f"| {out['paper'][1]:.2f}x | {out['corrected'][1]:.2f}x | {changed} of {len(graph)} "
                f"| {out['paper'][2]:.1f} / {out['corrected'][2]:.1f} |"
            )
            print(rows[-1], file=sys.stderr)
    elapsed = time.perf_counter() - start
    text = "\n".join([
        SECTION, "",
        f"`python benchmarks/bench_cost_models.py` on {datetime.date.today().isoformat()} ({elapsed:.0f} s); {machine()}.",
        f"Cluster `{CLUSTER}` (nodes of 8 GTX 1080 Ti, 12 GB/s inside a node, 1.56 GB/s per GPU across); no memory limit.",
        "",
        "| model | p | paper step ms | corrected step ms | paper speedup over DP | corrected speedup over DP "
        "| layers changed | solve s (paper / corrected) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows, "", DISCUSSION,
    ])
    publish(text, args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
