"""NVIDIA's published layouts for a problem, priced by pase (pase.search.published)."""

import json
import sys
from pathlib import Path

import pytest

from pase.cli import main
from pase.hardware.cluster import preset
from pase.ir.configs import ConfigOptions
from pase.models import batch_builder
from pase.search.published import published_layouts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from validate_today import ROWS, predict  # noqa: E402

OPTIONS = ConfigOptions(attention="flash", precision="fp8-cs")


def _llama3_8b_fsdp():
    """Section 3b's Llama 3 8B run: 8 H100s, GBS 128 of 8,192 tokens, FP8-CS, FSDP over the 8."""
    return batch_builder("llama3-8b", seq=8192), preset("dgx-h100", 8, calibrated=True)


def test_a_layout_two_releases_ran_is_priced_once_at_pase_s_best_for_what_the_tables_leave_out():
    build, cluster = _llama3_8b_fsdp()
    (layout,) = published_layouts(build, cluster, 128, options=OPTIONS, tp_overlap=True,
                                  tp_comm_overlap=True)
    assert [r.release for r in layout.runs] == ["25.09", "25.11"]
    assert layout.layout == "TP 1 PP 1 CP 1 VP 1 EP 1, MBS 1, FSDP 8"
    p = layout.plan.parallelism
    assert (p.tensor, p.pipeline, p.context, p.data, p.microbatch_size, p.zero) == (1, 1, 1, 8, 1, 3)
    # The recipe's own settings are among those searched: pase's best at the layout is no slower than them.
    recipe = predict(next(r for r in ROWS if r.label == "Llama 3 8B (FSDP)"))
    assert layout.plan.step_time_s <= recipe.step_time_s * (1 + 1e-9)
    assert layout.to_dict()["measured"][0] == {"release": "25.09", "tokens_per_gpu_s": 14079.0,
                                               "step_s": pytest.approx(128 * 8192 / (14079 * 8))}


def test_no_layouts_for_a_problem_nvidia_did_not_publish():
    build, cluster = _llama3_8b_fsdp()
    assert published_layouts(build, cluster, 256, options=OPTIONS) == []
    assert published_layouts(build, cluster, 128, options=ConfigOptions(attention="flash", precision="bf16")) == []


def test_a_layout_pase_cannot_fit_says_why_instead_of_a_plan():
    build, cluster = _llama3_8b_fsdp()
    (layout,) = published_layouts(build, cluster, 128, options=OPTIONS, memory_limit_bytes=1e9)
    assert layout.plan is None and "fits in 1 GB per device" in layout.problem
    assert layout.to_dict()["step_time_s"] is None


def test_solve_sets_the_searched_plan_against_nvidia_s_layout(capsys):
    argv = ["solve", "llama3-8b", "--devices", "8", "--cluster", "dgx-h100", "--global-batch", "128", "--seq",
            "8192", "--precision", "fp8-cs"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert ("vs NVIDIA's published layout TP 1 PP 1 CP 1 VP 1 EP 1, MBS 1, FSDP 8 (measured 25.09 9.310 s, 25.11 "
            "9.070 s): pase's best at it t1 p1 d8 mb1 1f1b zero3") in out
    assert main([*argv, "--json"]) == 0
    (layout,) = json.loads(capsys.readouterr().out)["published_layouts"]
    assert layout["layout"] == "TP 1 PP 1 CP 1 VP 1 EP 1, MBS 1, FSDP 8" and layout["step_time_s"] > 0
