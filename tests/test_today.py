"""Today's published runs (section 3 of published-measurements.md) through ``benchmarks/validate_today.py``.

Every dense row but Nemotron-8B and -22B, predicted by the calibrations as they stand, none of whose figures
was fitted to these step times (out of sample). Issue 25's goal is a mean absolute error of 10% and a
largest of 20%; the 15 dense rows reach 8.8% and 19.2% (BENCHMARKS.md, "Today's runs against the model"),
so the test holds all of them to the goals themselves: a change that moves the model further from the
measurements fails here. It checks that every row fits its GPU's memory, as it ran, but one: Nemotron-340B,
which pase's memory model puts 0.08 GB over the H100's 85.5 GB (81,559 MiB by NVML) on its last pipeline
device (one transformer block and the 590-million-parameter output layer, as Megatron-Core stacks them), since
its FP8 weights are counted with their transposes, as Transformer Engine caches both over a step (v1.8's
``get_fp8_workspace(..., with_transpose=True)``; pase.model.precision); that row is held to the 85.7 GB it
reaches, pase's reserve of 3.9 GB being an estimate.

The mixture-of-experts rows of 3b (issue 27) are held apart: further from the goal (BENCHMARKS.md: 22% mean,
29% largest, all but one short); the test holds them to what they reach.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from validate_today import ROWS, predict  # noqa: E402

MEAN, LARGEST = 0.10, 0.20  # issue 25's goals, met
# What the MoE rows reach (issue 27's goals are 0.10, 0.20): a regression guard. The mean rose from 19.6% to 22.0%
# when the H100 DeepSeek-V3 row's DeepEP dispatch was priced as its recipe runs it (BENCHMARKS.md, "DeepEP for the
# H100 DeepSeek-V3 row"), and to 23.7% (largest 31.9%, that row) when its 1F1B all-to-all overlap was scheduled as
# Megatron-Core merges it (pase.model.expert_overlap) and the B200 DeepSeek-V3 row's shared experts ran beside its
# all-to-all, as their recipes set them: better models of those runs, each uncovering more of a compute shortfall the
# exchanges had hidden. Cut as Megatron-Core splits the blocks (validate_today.megatron_split), 23.0%; priced in
# the FP8 recipe they ran (current scaling, validate_today.Row.precision), 22.3% (largest 30.0%); with DeepSeek-V3's
# attention counted at its heads' widths and run at their published rates (pase.hardware.attention_kernels), 22.0%
# (largest 29.8%, the B200 Qwen3-30B-A3B row, slow).
MOE_MEAN, MOE_LARGEST = 0.24, 0.33
# Dense rows pase's memory model puts over their GPU's preset memory, and the bytes each is held to (the docstring).
OVER: dict[str, float] = {"3a NeMo 24.07: Nemotron-340B": 85.7e9}


@pytest.fixture(scope="module")
def every_plan():
    return {f"{row.source}: {row.label}": (row, predict(row)) for row in ROWS if row.in_section_3}


@pytest.fixture(scope="module")
def plans(every_plan):
    return {label: got for label, got in every_plan.items() if got[0].ep == 1}


def test_every_moe_row_of_section_3b_is_evaluated_within_reach(every_plan):
    moe = {label: (row, plan) for label, (row, plan) in every_plan.items() if row.ep > 1}
    assert len(moe) == 6 and all(plan.experts_dict()["ep"] == row.ep for row, plan in moe.values())
    errors = [plan.step_time_s / row.measured_step_s - 1 for row, plan in moe.values()]
    assert sum(map(abs, errors)) / len(errors) <= MOE_MEAN and max(map(abs, errors)) <= MOE_LARGEST, errors


def test_every_dense_row_of_section_3_is_evaluated(plans):
    assert len(plans) == 15 and all(plan.step_time_s > 0 for _, plan in plans.values())


def test_the_step_times_stay_within_reach_of_the_measured_ones(plans):
    errors = {label: plan.step_time_s / row.measured_step_s - 1 for label, (row, plan) in plans.items()}
    shown = ", ".join(f"{label} {e * 100:+.1f}%" for label, e in errors.items())
    assert sum(abs(e) for e in errors.values()) / len(errors) <= MEAN, shown
    assert max(abs(e) for e in errors.values()) <= LARGEST, shown


def test_every_run_fits_the_memory_of_the_gpu_it_ran_on(plans):
    over = {label: plan.memory_per_device_bytes for label, (_, plan) in plans.items() if not plan.fits_memory}
    assert set(over) <= set(OVER), over
    assert all(over[label] <= OVER[label] for label in over), over


# Section 3b's "model TFLOP/s/GPU" column: NVIDIA's own FLOP count of each run (published-measurements.md).
NVIDIA_TFLOPS_3B = {"Llama 3 8B (FSDP)": 725, "Llama 3 70B": 727, "Llama 3.1 405B": 763, "Llama 3 8B (B200)": 1544,
                    "Llama 3.1 405B (B200)": 1676, "DeepSeek-V3 (dropless)": 338, "Qwen3-30B-A3B (tokendrop)": 241,
                    "Qwen3-235B-A22B (tokendrop)": 178, "DeepSeek-V3 (B200, tokendrop)": 589,
                    "Qwen3-30B-A3B (B200, tokendrop)": 416, "Qwen3-235B-A22B (B200, tokendrop)": 607}


def test_the_model_flops_per_token_are_nvidias_for_every_row_of_3b(every_plan):
    # NVIDIA's FLOPs per token: its model TFLOP/s per GPU over its tokens/s per GPU (both rounded, to under 0.5%).
    # DeepSeek-V3's attention (192-wide score heads, 128-wide values) was 2.5% over before the context product was
    # counted at the value heads' width.
    rows = {row.label: (row, plan) for row, plan in every_plan.values() if row.source.startswith("3b")}
    assert set(rows) == set(NVIDIA_TFLOPS_3B)
    for label, (row, plan) in rows.items():
        nvidia = NVIDIA_TFLOPS_3B[label] * 1e12 / row.tokens_per_gpu_s
        assert plan.model_flops_per_step / (row.gbs * row.seq) == pytest.approx(nvidia, rel=0.01), label
