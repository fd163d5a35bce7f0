"""Outputs unchanged where the model did not change (issue 31): the plans main found before the search was made
faster, solved again.

``tests/data/plans_before.json`` was written by ``benchmarks/record_plans.py``
from main's code before the speed-ups (its ``generated_by`` names the
commit): per-layer plans of the paper's samples and 3-D plans of language
models, from 8 to 16,384 devices, with ``--intra-search`` and
``--framework any`` among them. Each case is solved again end to end through
the CLI and must choose the same: every layer's configuration, or the best
plan's label, stage cuts, runners-up, each framework's best and the
baselines; times and memory to 1e-9 relative.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from record_plans import FIXTURE, solve_json, summary  # noqa: E402

CASES = json.loads(FIXTURE.read_text())["cases"]


def _close(now, before, where: str) -> None:
    """``now`` equals ``before``: the same keys, lists and strings, numbers to 1e-9 relative."""
    if isinstance(before, dict):
        assert isinstance(now, dict) and now.keys() == before.keys(), f"{where}: {sorted(now)} != {sorted(before)}"
        for key in before:
            _close(now[key], before[key], f"{where}.{key}")
    elif isinstance(before, list):
        assert isinstance(now, list) and len(now) == len(before), f"{where}: {now} != {before}"
        for i, (a, b) in enumerate(zip(now, before)):
            _close(a, b, f"{where}[{i}]")
    elif isinstance(before, float):
        assert now == pytest.approx(before, rel=1e-9, abs=0.0), f"{where}: {now} != {before}"
    else:
        assert now == before, f"{where}: {now!r} != {before!r}"


@pytest.mark.parametrize("case", CASES, ids=[" ".join(c["argv"]) for c in CASES])
def test_the_same_plan_as_before(case):
    _close(summary(solve_json(case["argv"])), case["plan"], " ".join(case["argv"]))
