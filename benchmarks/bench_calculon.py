"""Plans in the blink of an eye (issue 31): pase beside Calculon on Calculon's own README case, and the end-to-end cases.

In one run of this script, each command in a fresh process:

* **Calculon** (calculon-ai/calculon, a checkout given by ``--calculon``, run
  by its own Python ``--calculon-python`` with its dependencies, never
  pase's): its README's system execution optimizer, ``llm-optimal-execution``
  of ``models/turing-530B.json`` on 5,128 processors, a batch of up to 2,520,
  float16, ``systems/a100_80g.json``, ``-m`` (``-c`` its worker processes:
  by default its own default, the machine's physical cores). Run once: it
  is the anchor.
* **pase** on the same case, ``pase solve megatron-530b --devices 5128
  --cluster dgx-a100 --global-batch 2520``, and on the issue's other cases:
  the Transformer sample at p = 64 on ``dgx-a100`` (the per-layer search),
  ``gpt3-175b`` on 1,024 A100s, ``llama3-405b`` on 16,384 H100s, each
  ``--json`` (what a script reads), ``--runs`` times (median).
* **solve-instance** on the paper's transformer-p64 instance
  (``../shared/instances``), against a plain vectorised variable elimination
  (the yardstick, :data:`YARDSTICK`: the file read by ``json``, nodes
  eliminated smallest-table first, each table built by numpy broadcasting,
  no pruning), both end to end (reading the file included), ``--runs`` times.

Wall time is the command's, from start to exit (imports included); peak RSS
the largest resident memory of the process (``wait4``'s ``ru_maxrss``; for
Calculon, which runs a pool of workers, the largest of its processes). The
two problems are alike, not identical: Calculon searches tensor, pipeline and
data sizes, interleaving, recomputation, optimizer sharding, its
tensor-parallel communication and overlap and offloading, with the batch the
largest multiple of the data-parallel size up to 2,520; pase searches the
sizes, microbatches, schedules, recomputation, ZeRO stages and sequence
parallelism at a global batch of exactly 2,520, its stages cut anywhere.

Usage::

    python benchmarks/bench_calculon.py [--runs 5] [--calculon /work/calculon]
        [--calculon-python /work/calculon-venv/bin/python] [--calculon-cpus N] [--yardstick-runs 3] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import machine, publish

REPO = Path(__file__).resolve().parents[1]
INSTANCE = REPO.parent / "shared" / "instances" / "transformer-p64.json.gz"
SECTION = "## Plans in the blink of an eye (issue 31)"
CALCULON_CASE = ["llm-optimal-execution", "models/turing-530B.json", "5128", "2520", "float16",
                 "systems/a100_80g.json"]
PASE_CASES = [
    ("megatron-530b on 5,128 A100s, global batch 2,520 (Calculon's README case)",
     ["solve", "megatron-530b", "--devices", "5128", "--cluster", "dgx-a100", "--global-batch", "2520"],
     "<= 0.1 x Calculon, < 1 GB"),
    ("transformer p=64 dgx-a100", ["solve", "transformer", "--devices", "64", "--cluster", "dgx-a100"], "< 1 s"),
    ("gpt3-175b on 1,024 A100s, global batch 1,536",
     ["solve", "gpt3-175b", "--devices", "1024", "--cluster", "dgx-a100", "--global-batch", "1536"], "< 5 s"),
    ("llama3-405b on 16,384 H100s, global batch 2,048",
     ["solve", "llama3-405b", "--devices", "16384", "--cluster", "dgx-h100", "--global-batch", "2048"], "< 5 s"),
]

CUTS = (
    "Since (issue 27's stage cuts, `pase.model.stage_cuts`): the default cuts spread the slack evenly and, in a "
    "model of transformer blocks, are also balanced over the places where only the residual crosses, the faster "
    "slowest stage with its sends kept, so `tests/data/plans_before.json` was re-recorded. Plans: the README case "
    "40.51 s becomes 36.39 s (the same configuration, its 641 stages even), gpt3-175b 16.28 s becomes 16.33 s, "
    "llama3-405b t8 p8 v4 with selective recomputation 7.051 s becomes t8 p16 v4 6.786 s. CPU: the README case "
    "1.93 s becomes 2.03 s (the even cuts' pass over 640 cuts, 396 times), gpt3-175b 2.59 s becomes 3.00 s (two "
    "candidate cuts balanced per configuration), each within its goal.")
READING = (
    "Where the time went, and what changed (profiles of each case with `python -X importtime` and cProfile; "
    "every plan unchanged: `tests/test_plans_unchanged.py` solves 15 samples and clusters again against the plans "
    "main found before, `tests/data/plans_before.json`). Calculon's README case left pase nothing to choose but "
    "641 or 1,282 pipeline stages (5,128 = 8 x 641 devices, a global batch of exactly 2,520 needs a data-parallel "
    "size dividing it), so with 2,520 microbatches every schedule simulated was a loop of 3.2 million operations "
    "(about a second each, 59 of them), and the loop's dependency lists, cached, held 2.6 GB. Now: long GPipe and "
    "1F1B pipelines are timed level by level (`pase.model.schedule_levels`: the same additions and maxima, "
    "vectorised over the operations no one of which waits on another, equal to the loop bit for bit); the search "
    "goes best first (a configuration that fits waits under its tighter bound and is simulated only once no other "
    "bound is lower: 11 schedules simulated instead of 59 on this case, the kept plans those of trying every one); "
    "a schedule whose times equal one simulated before (ZeRO stages often) is not simulated again; stage reports "
    "are built only for finished plans; the balanced cuts find every run's end at once; the tied weights' blocks "
    "are derived once per layer-time table. The 641-stage pipelines stay in the space: without `--framework` pase "
    "cuts stages anywhere, and with one (whole blocks a stage) this case has no configuration at a global batch of "
    "exactly 2,520. solve-instance spent 3 of its 5 s parsing 212 MB of cost tables of which 13 MB are distinct "
    "(repeated layers repeat their tables word for word): each distinct text is now parsed once. Then (second "
    "pass): Python's cyclic garbage collector scanned the models' ~10^5 long-lived small objects every 700 "
    "allocations, a fifth of the README case's CPU time: `pase` raises its first threshold to 100,000 while a "
    "command runs; the model at batch 1 is built once, not three times (the check of `--seq`, the search's probe, "
    "the parameter count); a layer's signature no longer recurses into every number of its parameters; the "
    "balanced cuts follow their runs by doubling, in numpy; a table's checkpointed units are spread over the "
    "1,792 layers once per microbatch size, not once per table. Then (third pass, the README case's CPU time "
    "3.46 to 2.49 s): a long 1F1B or GPipe pipeline is timed from one vector of each stage's latest end "
    "(an operation waits on the latest end of the stage before or after it, or, a GPipe last stage's backward, "
    "on a forward kept aside, and follows its own stage's latest, so a level is a strided run or two over that "
    "643-entry vector, read before written): no per-operation level layout is built (3.2 million-entry index arrays and their sort, 0.1 to "
    "0.2 s for each of the 4 schedules and sizes of a run) and no per-operation times gathered, 0.04 s a "
    "schedule instead of 0.09 plus its layout; the same additions and maxima in the same order, every "
    "operation's end equal to the loop's (a test compares each one); the balanced cuts' last pass follows its "
    "runs by doubling instead of a Python loop over the 640 cuts (a run held back to leave a layer for every "
    "later one holds back all later runs, so each cut is the smaller of the free run's and the latest "
    "possible); cuts the search computed itself are not validated again; an edge whose producer and consumer "
    "hold the tensor in the same layout, with no pending sums, costs 0 s without the collective steps being "
    "worked out (three in four of the layer-time tables' edges; a test compares such one-layout calls with the "
    "table over every configuration pair); a graph's blocks, layer names, tied-weight holders and sequence "
    "length are derived once per graph. Then (fourth pass): a model's repeated blocks are built once, not once "
    "a block: inside `pase.ops.registry.reusing_layers` (every sample and Hugging Face config build) an op "
    "builder called again with the same arguments under another name returns the layer it built, renamed, its "
    "signature computed once (the 1,792 layers of Turing-530B are 24 kinds); a test compares every sample and "
    "several configs, a mixture of experts among them, with their layer-by-layer builds at several microbatch "
    "sizes, field for field; the 8 builds take 0.14 s instead of 0.45. What is left on the README case (CPU "
    "seconds inside one run): placing and bounding 1,392 configurations 0.60 (396 balanced cuts among them), "
    "the 52 layer-time tables 0.52 (and their spreading over the 1,792 layers 0.12), building the model at 8 "
    "microbatch sizes 0.14, the "
    "simulations of the kept plans 0.21 (7 schedules), the imports 0.18, the "
    "baselines 0.04. The machine is shared: CPU seconds (user and system, children included) are less "
    "sensitive to its load than wall times; Calculon runs 2 worker processes, so its wall time on a quiet "
    "machine would be about half its CPU time.")

# The yardstick: a straightforward vectorised variable elimination of an instance file, end to end.
YARDSTICK = r'''
import gzip, json, sys
import numpy as np
doc = json.load(gzip.open(sys.argv[1]))
n = len(doc["nodes"])
tables = [((int(v["id"]),), np.asarray(v["cost"], dtype=float)) for v in doc["nodes"]]
tables += [((int(e["src"]), int(e["dst"])), np.asarray(e["cost"], dtype=float)) for e in doc["edges"]]
size = {int(v["id"]): len(v["cost"]) for v in doc["nodes"]}
near = {x: set() for x in range(n)}
for e in doc["edges"]:
    near[int(e["src"])].add(int(e["dst"]))
    near[int(e["dst"])].add(int(e["src"]))
alive = set(range(n))
while alive:
    x = min(alive, key=lambda x: (int(np.prod([size[y] for y in near[x]])), x))
    out = sorted(near[x])
    axes = out + [x]
    total = np.zeros([size[y] for y in axes])
    keep = []
    for s, t in tables:
        if x not in s:
            keep.append((s, t))
            continue
        order = sorted(range(len(s)), key=lambda i: axes.index(s[i]))
        t = np.transpose(t, order)
        total = total + t.reshape([size[y] if y in s else 1 for y in axes])
    tables = keep + [(tuple(out), total.min(axis=-1))]
    for y in out:
        near[y] |= near[x] - {y}
        near[y].discard(x)
    alive.remove(x)
print(json.dumps({"cost": float(sum(float(t) for s, t in tables if not s))}))
'''


def _run(argv: list[str], cwd: Path | None = None, env: dict | None = None) -> tuple[float, int, str, float]:
    """Run ``argv`` in a fresh process: its wall time (s), its peak resident memory (bytes, the largest of it
    and the children it waited for), its output and its CPU seconds (user and system, its waited-for children's
    included); RuntimeError with its error output if it fails."""
    began = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, error = out.read().decode(), err.read().decode()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} exited with {proc.returncode}: {error[-2000:]}")
    return wall, usage.ru_maxrss * 1024, text + error, usage.ru_utime + usage.ru_stime


def _pase_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(REPO)
    return env


def _median_runs(argv: list[str], runs: int, env: dict | None = None,
                 warm: bool = True) -> tuple[float, list[float], int, str, float]:
    """Median wall time, every run's, the largest peak memory, the last output and the median CPU seconds of
    ``runs`` fresh runs, after one untimed run with ``warm`` (so that Python's bytecode cache is written, as a
    user's is)."""
    if warm:
        _run(argv, env=env)
    walls, cpus, peak, text = [], [], 0, ""
    for _ in range(runs):
        wall, rss, text, cpu = _run(argv, env=env)
        walls.append(wall)
        cpus.append(cpu)
        peak = max(peak, rss)
    return statistics.median(walls), walls, peak, text, statistics.median(cpus)


def _calculon(args) -> dict:
    """Calculon's README case, once: wall time, peak memory, what it found."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "calculon.json"
        argv = [args.calculon_python, "bin/calculon", *CALCULON_CASE, str(out), "-m"]
        if args.calculon_cpus:
            argv += ["-c", str(args.calculon_cpus)]
        env = dict(os.environ, PYTHONPATH=str(args.calculon))
        wall, rss, log, cpu = _run(argv, cwd=args.calculon, env=env)
        best = json.loads(out.read_text())["0"]
    e = best["execution"]
    rate = next(float(line.split(":")[-1]) for line in log.splitlines() if "Best sample rate" in line)
    count = next(int(line.split(":")[-1]) for line in log.splitlines() if "Total executions" in line)
    return {"command": "PYTHONPATH=. " + " ".join(["python", "bin/calculon", *CALCULON_CASE, "output.json", "-m"]
                                                 + (["-c", str(args.calculon_cpus)] if args.calculon_cpus else [])),
            "wall": wall, "rss": rss, "cpu": cpu, "executions": count,
            "best": f"t{e['tensor_par']} p{e['pipeline_par']} d{e['data_par']} mb{e['microbatch_size']} batch "
                    f"{e['batch_size']} recompute {e['activation_recompute']}, interleave "
                    f"{e['pipeline_interleaving']}, optimizer sharding {e['optimizer_sharding']}, offload "
                    f"weights/activations/optimizer {e['weight_offload']}/{e['activations_offload']}/"
                    f"{e['optimizer_offload']}: {e['batch_size'] / rate:.2f} s a step ({rate:.1f} samples/s)"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--yardstick-runs", type=int, default=3, help="runs of the yardstick (tens of seconds each)")
    ap.add_argument("--calculon", type=Path, default=Path("/work/calculon"))
    ap.add_argument("--calculon-python", default="/work/calculon-venv/bin/python")
    ap.add_argument("--calculon-cpus", type=int, help="Calculon's -c (default: its own, the physical cores)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if not (args.calculon / "bin" / "calculon").is_file() or not Path(args.calculon_python).is_file():
        sys.exit(f"bench_calculon: no Calculon checkout at {args.calculon} or no Python at {args.calculon_python}; "
                 "check out calculon-ai/calculon and make a venv with its dependencies (numpy, pandas, psutil), "
                 "then give --calculon and --calculon-python")
    started = datetime.date.today().isoformat()
    where = machine()
    py, env = sys.executable, _pase_env()

    calc = _calculon(args)
    print(f"Calculon: {calc['wall']:.1f} s, {calc['rss'] / 1e9:.2f} GB", file=sys.stderr)
    rows = []
    for label, argv, goal in PASE_CASES:
        med, walls, peak, text, cpu = _median_runs([py, "-m", "pase", *argv, "--json"], args.runs, env)
        plan = json.loads(text[text.index("{"):])
        found = (f"{plan['label']}: {plan['step_time_s']:.4g} s" if "pipeline" in plan
                 else f"PaSE: {plan['step_time_s']:.4g} s")
        print(f"{label}: {med:.2f} s", file=sys.stderr)
        rows.append((label, "pase " + " ".join(argv), goal, med, walls, peak, found, cpu))
    inst_med, inst_walls, inst_peak, inst_text, inst_cpu = _median_runs(
        [py, "-m", "pase", "solve-instance", str(INSTANCE), "--json"], args.runs, env)
    print(f"solve-instance: {inst_med:.2f} s", file=sys.stderr)
    yard_med, yard_walls, yard_peak, yard_text, yard_cpu = _median_runs([py, "-c", YARDSTICK, str(INSTANCE)],
                                                              args.yardstick_runs, warm=False)
    pase_cost, yard_cost = json.loads(inst_text)["cost"], json.loads(yard_text)["cost"]

    anchor = rows[0]
    lines = [
        SECTION, "",
        f"`python benchmarks/bench_calculon.py --runs {args.runs}`, {started}; {where}; `nproc` "
        f"{os.cpu_count()}, load average after the run {os.getloadavg()[0]:.1f}. Each command in a fresh "
        "process, end to end (imports, building the model, the search, the baselines, the JSON); pase's "
        f"cases the median of {args.runs} runs after an untimed one, the yardstick's of {args.yardstick_runs}, "
        "Calculon once. Peak RSS: the process's "
        "largest resident memory (`wait4`; Calculon's largest process of its pool).", "",
        "| case | command | goal | wall s, median (runs) | CPU s | peak GB | plan found |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| Calculon, Turing-530B on 5,128 A100s, batch up to 2,520 | `{calc['command']}` (calculon-ai/calculon, "
        f"its own venv) | anchor | {calc['wall']:.2f} (1 run, {calc['executions']:,} executions) | "
        f"{calc['cpu']:.2f} | {calc['rss'] / 1e9:.2f} | {calc['best']} |",
    ]
    for label, command, goal, med, walls, peak, found, cpu in rows:
        lines.append(f"| pase, {label} | `{command}` | {goal} | {med:.2f} ({', '.join(f'{w:.2f}' for w in walls)})"
                     f" | {cpu:.2f} | {peak / 1e9:.2f} | {found} |")
    lines.append(f"| solve-instance transformer-p64 | `pase solve-instance transformer-p64.json.gz --json` | "
                 f"<= 0.25 x the yardstick | {inst_med:.2f} ({', '.join(f'{w:.2f}' for w in inst_walls)}) | "
                 f"{inst_cpu:.2f} | {inst_peak / 1e9:.2f} | cost {pase_cost:.10g} |")
    lines.append(f"| yardstick: plain vectorised variable elimination | `python -c YARDSTICK "
                 f"transformer-p64.json.gz` (bench_calculon.py) | - | {yard_med:.2f} "
                 f"({', '.join(f'{w:.2f}' for w in yard_walls)}) | {yard_cpu:.2f} | {yard_peak / 1e9:.2f} | "
                 f"cost {yard_cost:.10g} |")
    lines += ["", f"Ratios: pase / Calculon on the README case, wall {anchor[3] / calc['wall']:.3f} (goal <= 0.1), "
                  f"CPU {anchor[7] / calc['cpu']:.3f}, wall against half Calculon's CPU time (its wall on a quiet "
                  f"machine, its 2 workers each on a core of their own) {anchor[3] / (calc['cpu'] / 2):.3f}; peak {anchor[5] / 1e9:.2f} GB (goal < 1); solve-instance / "
                  f"yardstick, wall {inst_med / yard_med:.3f} (goal <= 0.25), CPU {inst_cpu / yard_cpu:.3f}; costs "
                  f"{'equal' if abs(pase_cost - yard_cost) <= 1e-9 * yard_cost else 'DIFFER'}."]
    lines += ["", READING, "", CUTS]
    publish("\n".join(lines), args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
