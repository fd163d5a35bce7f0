"""Benchmark the search on the 20 shared instances and record the results in BENCHMARKS.md.

Each instance runs in its own subprocess, so its peak resident memory is its
own: the process peak (loading the JSON included) and the search's peak
(measured from the end of loading: the kernel's high-water mark is reset
through /proc/self/clear_refs). The search time is the median of several runs
of :func:`pase.search.exact.solve` (pruning, ordering, tables and back-substitution;
not the loading). Breadth-first ordering is tried too, under a memory budget
and a time limit; the search refuses it up front where its tables would not fit.

Usage::

    python benchmarks/bench_search.py [--runs 5] [--only transformer] [--no-write]

The section "Search (issue 3)" of BENCHMARKS.md (repository root) is replaced,
or added, with the table, the machine (CPU model, cores) and the date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _report import machine, publish

REPO = Path(__file__).resolve().parents[1]
INSTANCES = REPO.parent / "shared" / "instances"
SECTION = "## Search (issue 3)"

# The paper prototype's search times on a 2-core machine of this class, and the
# paper's Table I, both as given in ../shared/instances/README.md (seconds;
# None where the prototype did not finish or was not run).
PROTOTYPE_S = {
    "alexnet": (0.09, 0.09, 0.10, 0.19, 0.27),
    "rnnlm": (0.04, 0.05, 0.03, 0.05, 0.11),
    "inception3": (2.2, 3.7, 10.7, 32.7, 96.1),
    "transformer": (4.1, 18.8, 152.3, None, None),
}
PROTOTYPE_NOTE = {"transformer-p32": "out of memory (24 GB) after 694 s", "transformer-p64": "not attempted"}
PAPER_S = {
    "alexnet": (0.23, 0.25, 0.30, 0.36, 0.48),
    "rnnlm": (0.06, 0.09, 0.07, 0.13, 0.22),
    "inception3": (14.4, 20.0, 39.8, 86.0, 196.3),
    "transformer": (9.8, 28.8, 130.9, 553.0, 1883.2),
}
DEVICES = (4, 8, 16, 32, 64)


def _vm_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(path: str, ordering: str, runs: int, budget_gib: float) -> dict:
    """Load one instance, solve it ``runs`` times, report times and memory (runs in the subprocess)."""
    from pase.io.instance import load_instance
    from pase.errors import SearchTooLargeError
    from pase.search.exact import estimate, solve

    t0 = time.perf_counter()
    graph, _ = load_instance(path)
    load_s = time.perf_counter() - t0
    rss_loaded_kib = _vm_kib("VmRSS")
    load_peak_kib = _vm_kib("VmHWM")
    try:  # reset the high-water mark so that VmHWM measures the search alone
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        hwm_reset = True
    except OSError:
        hwm_reset = False
    budget = int(budget_gib * 2**30)
    out = {"load_s": load_s, "rss_loaded_mib": rss_loaded_kib / 1024}
    try:
        times = []
        for _ in range(runs):
            result = solve(graph, ordering=ordering, memory_budget_bytes=budget)
            times.append(result.search_time_s)
    except SearchTooLargeError as exc:
        est = estimate(graph, ordering=ordering)
        out.update(refused=str(exc), max_dependent_set=est.max_dependent_set, peak_bytes=est.peak_bytes)
        return out
    out.update(
        times_s=times,
        cost=result.cost,
        max_dependent_set=result.max_dependent_set,
        max_table_entries=result.max_table_entries,
        total_work=result.total_work,
        pruned_configs=result.pruned_configs,
        peak_table_bytes=result.peak_table_bytes,
        search_peak_rss_mib=_vm_kib("VmHWM") / 1024 if hwm_reset else None,
        # clear_refs resets ru_maxrss too, so the process peak is the larger of the two phases.
        process_peak_rss_mib=max(load_peak_kib, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024,
    )
    return out


def run_child(path: Path, ordering: str, runs: int, budget_gib: float, timeout_s: float) -> dict:
    cmd = [sys.executable, __file__, "--child", str(path), "--ordering", ordering, "--runs", str(runs),
           "--budget-gib", str(budget_gib)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout_s}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout)


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def report(rows: list[tuple[dict, dict, dict]], runs: int) -> str:
    lines = [
        SECTION,
        "",
        f"`python benchmarks/bench_search.py` on {datetime.date.today().isoformat()}; {machine()}.",
        "",
        f"Search time: median of {runs} runs of `pase.search.exact.solve` with the default ordering (`auto`), "
        "each in a fresh subprocess per instance; it covers pruning, ordering, tables and back-substitution, "
        "not reading the file (load column). Peak RSS: the high-water mark from the end of loading (the "
        "search's own, plus the interpreter and the loaded instance, which stay resident) and the whole "
        "process's (parsing the JSON included). Prototype: the paper's Python "
        "prototype on a 2-core machine of this class and the paper's Table I, from "
        "../shared/instances/README.md. Breadth-first: the paper's baseline ordering, one run, 16 GiB budget; "
        "`refused` means the search declined before allocating (estimated peak shown).",
        "",
        "| instance | configs (pruned) | max D | max table | search s (median) | min-max s | search peak RSS MiB "
        "| process peak RSS MiB | load s | prototype s | paper s | breadth-first |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for entry, res, bfs in rows:
        stem = entry["file"].split(".")[0]
        model, p = stem.rsplit("-p", 1)
        i = DEVICES.index(int(p))
        proto = PROTOTYPE_NOTE.get(stem) or _fmt_s(PROTOTYPE_S[model][i])
        if "times_s" not in res:
            lines.append(f"| {stem} | {entry['total_configs']} | | | failed: {res} | | | | | {proto} | "
                         f"{_fmt_s(PAPER_S[model][i])} | |")
            continue
        times = res["times_s"]
        ok = abs(res["cost"] - entry["optimal_cost"]) / entry["optimal_cost"] < 1e-9
        if "times_s" in bfs:
            bfs_text = f"{statistics.median(bfs['times_s']):.3f} s, max D {bfs['max_dependent_set']}"
        elif "refused" in bfs:
            bfs_text = f"refused: max D {bfs['max_dependent_set']}, {bfs['peak_bytes'] / 2**30:.3g} GiB"
        elif "timeout" in bfs:
            bfs_text = f"stopped after {bfs['timeout']:.0f} s"
        else:
            bfs_text = f"failed: {bfs.get('error')}"
        search_rss = res["search_peak_rss_mib"]
        lines.append(
            f"| {stem}{'' if ok else ' (WRONG COST)'} | {entry['total_configs']} ({res['pruned_configs']}) "
            f"| {res['max_dependent_set']} | {res['max_table_entries']:,} | **{statistics.median(times):.3f}** "
            f"| {min(times):.3f}-{max(times):.3f} | {'-' if search_rss is None else f'{search_rss:.0f}'} "
            f"| {res['process_peak_rss_mib']:.0f} | {res['load_s']:.2f} | {proto} | {_fmt_s(PAPER_S[model][i])} "
            f"| {bfs_text} |"
        )
    lines += ["", _summary(rows), ""]
    return "\n".join(lines)


def _summary(rows: list[tuple[dict, dict, dict]]) -> str:
    """One line against the goals: under 0.5 s except transformer p=64, which gets 3 s and 1 GB."""
    done = {e["file"].split(".")[0]: r for e, r, _ in rows if "times_s" in r}
    others = {k: statistics.median(r["times_s"]) for k, r in done.items() if k != "transformer-p64"}
    parts = []
    if others:
        worst = max(others, key=others.get)
        parts.append(f"slowest instance besides transformer-p64: {worst}, {others[worst]:.3f} s (goal 0.5 s)")
    if "transformer-p64" in done:
        r = done["transformer-p64"]
        parts.append(f"transformer-p64: {statistics.median(r['times_s']):.3f} s (goal 3 s), search peak RSS "
                     f"{r['search_peak_rss_mib']:.0f} MiB, process {r['process_peak_rss_mib']:.0f} MiB (goal 1 GB)")
    wrong = [e["file"] for e, r, _ in rows
             if "times_s" in r and abs(r["cost"] - e["optimal_cost"]) / e["optimal_cost"] >= 1e-9]
    parts.append(f"costs off the manifest optimum: {', '.join(wrong) if wrong else 'none'}")
    return "Against the goals: " + "; ".join(parts) + "."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="search runs per instance (median reported)")
    parser.add_argument("--only", default="", help="only instances whose file name contains this")
    parser.add_argument("--instances", type=Path, default=INSTANCES, help="directory of the instances")
    parser.add_argument("--bfs-timeout", type=float, default=120, help="seconds before a breadth-first run is stopped")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--ordering", default="auto", help=argparse.SUPPRESS)
    parser.add_argument("--budget-gib", type=float, default=16, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.ordering, args.runs, args.budget_gib)))
        return 0
    manifest = json.loads((args.instances / "manifest.json").read_text())
    rows = []
    for entry in manifest:
        if args.only not in entry["file"]:
            continue
        path = args.instances / entry["file"]
        res = run_child(path, "auto", args.runs, 16, timeout_s=600)
        bfs = run_child(path, "bfs", 1, 16, timeout_s=args.bfs_timeout)
        rows.append((entry, res, bfs))
        median = statistics.median(res["times_s"]) if "times_s" in res else None
        print(f"{entry['file']:26s} search {_fmt_s(median)} s  peak RSS {res.get('search_peak_rss_mib', 0) or 0:.0f} / "
              f"{res.get('process_peak_rss_mib', 0):.0f} MiB  bfs {'ok' if 'times_s' in bfs else 'no'}", flush=True)
    publish(report(rows, args.runs), args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
