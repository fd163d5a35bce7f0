"""Record the plans `pase solve` finds on a representative set of samples and clusters (issue 31's fixture).

Each case runs ``pase solve ... --json`` in this process and keeps what a
user reads off the plan: for the per-layer search its cost, step time and the
configuration of every layer; for the 3-D search the best plan's label, step
time, memory, stage cuts, its runners-up and the baselines. The fixture
(``tests/data/plans_before.json``) was written by this script from main's
code before the search was made faster (issue 31); ``tests/test_plans_unchanged.py``
solves every case again and requires the same plans (exactly the same choices,
step times to 1e-9 relative).

Usage: ``python benchmarks/record_plans.py [--out PATH]`` (run it only to
record a deliberate change of the model, naming the change in the commit).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "data" / "plans_before.json"

# (per-layer or 3-D, `pase solve` arguments); the defaults (batch, precision, calibration) are the samples'.
CASES = [
    ["alexnet", "--devices", "8"],
    ["rnnlm", "--devices", "16"],
    ["inception3", "--devices", "16", "--cluster", "dgx-a100"],
    ["resnet101", "--devices", "8", "--cluster", "dgx-h100"],
    ["transformer", "--devices", "64", "--cluster", "dgx-a100"],
    ["transformer_large", "--devices", "16", "--cluster", "dgx1-v100"],
    ["gpt", "--devices", "32", "--cluster", "dgx-a100"],
    ["megatron-1.7b", "--devices", "32", "--cluster", "dgx-a100"],
    ["megatron-3.6b", "--devices", "16", "--cluster", "dgx-a100", "--intra-search"],
    ["llama3-8b", "--devices", "64", "--cluster", "dgx-h100", "--framework", "any"],
    ["megatron-39b", "--devices", "512", "--cluster", "dgx-a100", "--global-batch", "1536"],
    ["gpt3-175b", "--devices", "1024", "--cluster", "dgx-a100", "--global-batch", "1536"],
    ["llama3-405b", "--devices", "16384", "--cluster", "dgx-h100", "--global-batch", "2048"],
    ["megatron-530b", "--devices", "5128", "--cluster", "dgx-a100", "--global-batch", "2520"],
    ["megatron-530b", "--devices", "280", "--cluster", "dgx-a100", "--global-batch", "560"],
]


def solve_json(argv: list[str]) -> dict:
    """``pase solve ARGV --json`` run in this process, its JSON parsed (ValueError naming the case if it fails)."""
    from pase.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["solve", *argv, "--json"])
    if status:
        raise ValueError(f"pase solve {' '.join(argv)} exited with {status}")
    return json.loads(out.getvalue())


def summary(plan: dict) -> dict:
    """What a user reads off a plan: the per-layer search's choices and step time, or the 3-D search's best
    plan, runners-up and baselines."""
    if "layers" in plan:  # the per-layer search
        return {"kind": "layers", "cost": plan["cost"], "step_time_s": plan["step_time_s"],
                "configs": {l["name"]: l["config"] for l in plan["layers"]},
                "baselines": {n: {"label": b["label"], "step_time_s": b["step_time_s"]}
                              for n, b in plan["baselines"].items()}}
    return {"kind": "3d", "label": plan["label"], "step_time_s": plan["step_time_s"],
            "memory_per_device_bytes": plan["memory_per_device_bytes"],
            "stage_cuts": plan["pipeline"]["stage_cuts"],
            "runners_up": [{"label": r["label"], "step_time_s": r["step_time_s"]} for r in plan["runners_up"]],
            "by_framework": {n: None if r is None else {"label": r["label"], "step_time_s": r["step_time_s"]}
                             for n, r in plan.get("by_framework", {}).items()},
            "baselines": {n: {"label": b["label"], "step_time_s": b["step_time_s"], "fits_memory": b["fits_memory"]}
                          for n, b in plan["baselines"].items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=FIXTURE)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    cases = []
    for argv in CASES:
        print("pase solve " + " ".join(argv), file=sys.stderr)
        cases.append({"argv": argv, "plan": summary(solve_json(argv))})
    args.out.write_text(json.dumps({
        "generated_by": f"python benchmarks/record_plans.py (commit {commit}, before issue 31's speed-ups)",
        "cases": cases}, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
