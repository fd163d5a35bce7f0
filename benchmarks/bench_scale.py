"""Planning at scale (issue 13): what a user waits for, end to end, from `pase solve ... --json --stats`.

Each case runs the command in a fresh process (imports, building the model,
costing, the search and the baselines included), once untimed (so that
Python's bytecode cache is written, as a user's is), then ``RUNS`` times; the table
gives the median wall time, the largest peak resident memory (the process's
``ru_maxrss``, from ``--stats``), the search's statistics and the plan found.
Where the case has a published configuration (Megatron-LM's Table 1 t and p
with the assumptions of ``validate_published.py``; Llama 3 405B's TP 8, PP 16,
microbatch 1, the interleaved schedule, on 16,384 H100s), that configuration
is costed in the same model by ``pase evaluate`` and the ratio of its step
time to the searched plan's is given (at least 1: the search never loses).

The cases are the issue's acceptance: the Transformer sample at p = 64 on
``dgx-a100`` (the per-layer search), ``gpt3-175b`` on 1,024 A100s (128 nodes
x 8) and ``llama3-405b`` on 16,384 H100s (the joint 3-D search: pipeline,
tensor, data and sequence parallelism, ZeRO and recomputation), and every
row of Megatron-LM's Table 1 (its published configuration as its launch script ran it:
``validate_published.py``).

Usage: ``python benchmarks/bench_scale.py [--no-write] [--runs N] [--only NAME...]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

from _report import machine, publish

from validate_published import TABLE1

SECTION = "## Planning at scale: end-to-end solve times (issue 13)"
RUNS = 3
READING = (
    "How. The per-layer search folds a run of identical blocks into one block table over its boundary layouts, "
    "chained by min-plus products (`pase.search.fold`: blocks folded, above). The 3-D search costs a run of "
    "identical transformer layers on three of them and spreads the values over the run (`pase.model.repeats`, "
    "exact: a test compares every field with the whole graph's), shares the layer times of a (microbatch, tensor, "
    "context, sequence parallelism) across pipeline sizes, schedules, ZeRO stages and the baselines, and tries the "
    "configurations in the order of their cheapest bound (the average device's work), so that few schedules are "
    "simulated and most configurations are never built (skipped by the bound, above). The last column is the "
    "published configuration, evaluated in the same model as its launch script ran it, against the plan found: "
    "at least 1, the search never loses.")


def _cases():
    """(label, solve arguments, the published configuration as `pase evaluate` arguments or None, goal)."""
    yield ("transformer p=64 dgx-a100", ["transformer", "-p", "64", "--cluster", "dgx-a100"], None, "under 1 s")
    yield ("gpt3-175b on 1,024 A100s", ["gpt3-175b", "-p", "1024", "--cluster", "dgx-a100", "--global-batch", "1536"],
           None, "under 10 s and 2 GB")
    yield ("llama3-405b on 16,384 H100s", ["llama3-405b", "-p", "16384", "--cluster", "dgx-h100"],
           ["--tp", "8", "--pp", "16", "--microbatch-size", "1", "--vp", "2", "--schedule", "interleaved"],
           "under 30 s and 4 GB")
    for name, _, _, t, p, gpus, batch, _, mb, v, overlap in TABLE1:
        # As its launch script ran it (validate_published.py's assumptions).
        published = ["--tp", str(t), "--pp", str(p), "--global-batch", str(batch), "--microbatch-size", str(mb),
                     "--recompute", "full", "--overlap" if overlap else "--no-overlap"]
        if v > 1:
            published += ["--vp", str(v), "--schedule", "interleaved"]
        yield (f"{name} on {gpus:,} A100s (Table 1)",
               [name, "-p", str(gpus), "--cluster", "dgx-a100", "--global-batch", str(batch)], published,
               "under 10 s")


def _pase(*argv: str) -> tuple[dict, float]:
    """The JSON `pase` prints and the command's wall time in seconds (Python's bytecode cache on, as a user's
    is: the runs are timed after one untimed run)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pase", *argv], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - began
    if done.returncode:
        raise RuntimeError(f"pase {' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return json.loads(done.stdout), wall


def _goal(goal: str) -> tuple[float, float]:
    """Seconds and GB of a goal written "under 10 s and 2 GB" (no memory goal: infinite)."""
    seconds = float(re.search(r"under ([0-9.]+) s", goal).group(1))
    memory = re.search(r"and ([0-9.]+) GB", goal)
    return seconds, float(memory.group(1)) if memory else math.inf


def run(runs: int, only: list[str] | None) -> str:
    lines, verdicts = [], []
    for label, argv, published, goal in _cases():
        if only and not any(o in label for o in only):
            continue
        _pase("solve", *argv, "--json")  # untimed: bytecode and page cache as a user's second run finds them
        results = [_pase("solve", *argv, "--json", "--stats") for _ in range(runs)]
        walls = [w for _, w in results]
        out = results[0][0]
        stats = out["stats"]
        peak = max(r["stats"]["peak_memory_bytes"] for r, _ in results)
        counted = (f"{stats['configurations']:,} configurations, {stats['configurations_after_pruning']:,} after "
                   f"pruning; {stats['layers']:,} layers of {stats['layer_kinds']} kinds; "
                   f"{stats['edge_tables']} edge tables; {stats['blocks_folded']} blocks folded into "
                   f"{stats['block_tables']} block tables") if "edge_tables" in stats else (
            f"{stats['configurations']:,} configurations, {stats['skipped_by_bound']:,} skipped by the bound; "
            f"{stats['layers']:,} layers of {stats['layer_kinds']} kinds; {stats['graphs_built']} graphs, "
            f"{stats['layer_time_tables']} layer-time tables")
        ratio = "-"
        if published is not None:
            gpus = argv[argv.index("-p") + 1]
            theirs, _ = _pase("evaluate", argv[0], "--devices", gpus, "--cluster", argv[argv.index("--cluster") + 1],
                              *published, "--json")
            ratio = f"{theirs['step_time_s'] / out['step_time_s']:.2f} ({theirs['label']}: {theirs['step_time_s']:.3g} s)"
        plan = out.get("label") or "per-layer plan"
        wall, limit_s, limit_gb = statistics.median(walls), *_goal(goal)
        verdicts.append(f"{label} {wall:.1f} s ({'met' if wall < limit_s and peak / 1e9 < limit_gb else 'not met'})")
        lines.append(f"| {label} | {goal} | {statistics.median(walls):.2f} ({', '.join(f'{w:.2f}' for w in walls)}) "
                     f"| {peak / 1e9:.2f} | {counted} | {plan}: {out['step_time_s']:.4g} s | {ratio} |")
        print(lines[-1], file=sys.stderr)
    header = ("| case | goal | wall s, median (runs) | peak GB | search statistics | plan found: step | "
              "published configuration's step / found |\n| --- | --- | --- | --- | --- | --- | --- |")
    return (f"{SECTION}\n\n`python benchmarks/bench_scale.py`, {datetime.date.today()}, {machine()}. "
            "Each case is `pase solve ... --json --stats` in a fresh process, end to end, "
            f"{runs} runs. Peak GB is the process's largest resident memory.\n\n{header}\n" + "\n".join(lines)
            + "\n\nAgainst the issue's goals (median wall time and peak memory): " + "; ".join(verdicts) + ".\n\n"
            + READING + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--only", nargs="+", help="cases whose label contains one of these")
    args = parser.parse_args()
    publish(run(args.runs, args.only), args.no_write)


if __name__ == "__main__":
    main()
