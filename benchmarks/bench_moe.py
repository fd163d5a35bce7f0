"""The MoE acceptance searches: DeepSeek-V3 on 1,024 H100s and Qwen3-235B-A22B on 256, timed, against the recipes.

``pase solve deepseek-v3 --devices 1024 --cluster dgx-h100 --global-batch 8192 --seq 4096 --precision fp8``
(issue 27; with ``--tp-overlap --tp-comm-overlap --ep-overlap``, the recipes' overlaps, and in the recipes' FP8
recipe, current scaling: ``--precision fp8-cs``) and the same for
``qwen3-235b-a22b`` on 256 H100s at a global batch of 2,048: the search's wall
time on this machine, its plan (does it fit 80 GB?) and its step against the published Megatron-Bridge 25.09
recipe of section 3b evaluated in the same model (``benchmarks/validate_today.py``'s configuration, each of
pase's recomputation modes tried, the fastest that fits kept, else the one needing least memory). A
benchmark, not a test: no wall-clock assertion anywhere.
"""

from __future__ import annotations

import argparse
import datetime
import time
from dataclasses import replace

from _report import machine, publish
from validate_today import ROWS, parallelism, recipe_cuts

from pase.hardware.cluster import preset
from pase.ir.configs import ConfigOptions
from pase.model.training import evaluate_training
from pase.models import batch_builder
from pase.search.stages import search_training

SECTION = "## Mixtures of experts at frontier scale: the acceptance searches"
CASES = (("deepseek-v3", 1024, 8192, "DeepSeek-V3 (dropless)"), ("qwen3-235b-a22b", 256, 2048,
                                                                 "Qwen3-235B-A22B (tokendrop)"))


def recipe(label: str, build, cluster, options):
    """The published row's configuration in pase's model as ``validate_today`` evaluates it (its recipe's
    recomputation modules, all-to-all overlap and stage cuts), dropless (the searches' routing)."""
    row = next(r for r in ROWS if r.label == label)
    par, cache = replace(parallelism(row), capacity_factor=None), {}
    par = replace(par, stage_cuts=recipe_cuts(row, build, cluster, par, options, cache))
    return evaluate_training(build, cluster, par, options=options, cache=cache)


def run() -> str:
    lines = ["| model | GPUs | search wall (s) | search CPU (s) | configurations | plan | step (s) | memory (GB) | "
             "recipe in pase's model | recipe step (s) | recipe memory (GB) |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: |"]
    # FP8 as the recipes run it, current per-tensor scaling (validate_today's Row.precision); the issue's
    # --precision fp8 prices delayed scaling, under which Megatron-Core recomputes neither moe_act nor layernorm.
    options = ConfigOptions(attention="flash", precision="fp8-cs")
    for name, gpus, batch, label in CASES:
        cluster = preset("dgx-h100", gpus, calibrated=True)
        build = batch_builder(name, seq=4096)
        start, cpu = time.perf_counter(), time.process_time()
        # The search given the framework features the recipes run (each applied where it can be).
        found = search_training(build, cluster, batch, options=options, tp_overlap=True, tp_comm_overlap=True,
                                expert_overlap=True)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        best = found.best
        rec = recipe(label, build, cluster, options)
        lines.append(f"| {name} | {gpus:,} | {elapsed:.1f} | {cpu:.1f} | {found.configurations:,} | {best.label} | "
                     f"{best.step_time_s:.2f} | {best.memory_per_device_bytes / 1e9:.1f} | {rec.label} | "
                     f"{rec.step_time_s:.2f} | {rec.memory_per_device_bytes / 1e9:.1f}"
                     f"{'' if rec.fits_memory else ' (over 80)'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    table = run()
    text = "\n".join([
        SECTION, "",
        f"`python benchmarks/bench_moe.py` on {datetime.date.today().isoformat()}; {machine()}.", "",
        "Issue 27's acceptance: `pase solve` of DeepSeek-V3 on 1,024 H100s (global batch 8,192) and Qwen3-235B-A22B "
        "on 256 (global batch 2,048), sequences of 4,096, FP8, flash attention, searching EP and ETP with every "
        "other knob (Megatron-Core's recompute modules among them, `pase.model.recompute.search_sets`, and the "
        "token dispatcher, all-to-all or DeepEP), dropless and balanced routing, planning for the overlaps the "
        "recipes run (`--tp-overlap --tp-comm-overlap --ep-overlap`: Megatron-LM's asynchronous tensor-parallel "
        "backward, Transformer Engine's communication overlap, the 1F1B all-to-all overlap, each where it applies); "
        "against the published Megatron-Bridge 25.09 recipe (section 3b; ETP 1; its own recomputation, dispatcher "
        "and all-to-all overlap, as `validate_today.py` sets them) evaluated in the same model. The "
        "search's wall time and the CPU time of its process (the machine's 2 cores are shared with other jobs: "
        "the CPU time is what the search itself costs).", "",
        table, "",
    ])
    publish(text, args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
