"""Megatron-Bridge's published tables, release after release (``pase/hardware/data/megatron-bridge-runs.json``).

Two checks of one transcription against another: the 25.09 runs extracted from Megatron-Bridge's own performance
documents (``benchmarks/extract_bridge_releases.py``) must give every section-3b step that pase's validation keeps
(``pase/hardware/data/validation.json``, transcribed by hand from published-measurements.md), and the extractor
must read both layouts those documents use (a table per system with a model column, or per model with a system
column) and their parentheses as a second run.
"""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from extract_bridge_releases import runs  # noqa: E402

RELEASES = json.loads((ROOT / "pase" / "hardware" / "data" / "megatron-bridge-runs.json").read_text())["runs"]
VALIDATION = json.loads((ROOT / "pase" / "hardware" / "data" / "validation.json").read_text())["rows"]
SYSTEMS = {"dgx-h100": "H100", "dgx-b200": "B200"}


@pytest.mark.parametrize("record", [r for r in VALIDATION if r["source"].startswith("3b")], ids=lambda r: r["run"])
def test_every_section_3b_step_is_a_25_09_run_of_the_extracted_tables(record):
    precision = "mxfp8" if "MXFP8" in record["run"] else "fp8-cs"
    found = [r for r in RELEASES if r["release"] == "25.09" and r["sample"] == record["sample"]
             and r["system"] == SYSTEMS[record["cluster"]] and r["gpus"] == record["gpus"]
             and r["precision"] == precision]
    assert len(found) == 1, found
    run = found[0]
    step = run["gbs"] * run["seq"] / (run["tokens_per_gpu_s"] * run["gpus"])
    assert step == pytest.approx(record["measured_step_s"], rel=1e-4)


def test_the_extractor_reads_both_table_layouts_and_parentheses():
    text = "\n".join([
        "## 26.02 NeMo Container", "### Pre-Training Performance", "#### Model: Qwen3_30B_a3B",
        "| System | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | "
        "Tokens / sec / GPU | Model TFLOP / sec / GPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| DGX-H100 | 16 | FP8 | 1024 | 1 | 4096 | 0 | 1 | 2 | 1 | 12 | 8 | 5113 | 118 |",
        "### SFT Performance", "#### Model: LLAMA3_70B",
        "| System | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | "
        "Tokens / sec / GPU | Model TFLOP / sec / GPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| DGX-H100 | 32 | FP8 | 32 | 1 | 4096 | 0 | 1 | 4 | 1 | n/a | n/a | 999 | 1 |",
        "## 25.09 NeMo Container", "#### System: DGX-GB200",
        "| Model | #-GPUs | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU | "
        "Model TFLOP / sec / GPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| DeepSeekV3 (tokendrop) | 256 | 2048 | 1 | 4096 | 0 | 1 | 4 (8) | 1 | 4 (2) | 64 | 32 (64) | 3454 (2835) | "
        "899 (738) |"])
    got = runs(text, "doc.md")
    assert [(r["release"], r["system"], r["sample"], r["variant"], r["precision"], r["pp"], r["vp"], r["ep"],
             r["tokens_per_gpu_s"]) for r in got] == [
        ("26.02", "H100", "qwen3-30b-a3b", "dropless", "fp8-cs", 2, 12, 8, 5113.0),
        ("25.09", "GB200", "deepseek-v3", "tokendrop", "fp8-cs", 4, 4, 64, 3454.0),
        ("25.09", "GB200", "deepseek-v3", "tokendrop", "mxfp8", 8, 2, 64, 2835.0)]


# --- pase.hardware.published_runs: the runs beside a plan --------------------------------------------------------

from validate_today import ROWS, predict  # noqa: E402

from pase.hardware.published_runs import beside, published_runs  # noqa: E402


def _row(label):
    return next(r for r in ROWS if r.label == label and r.source.startswith("3b"))


def test_a_plan_of_a_published_configuration_is_set_against_every_release_that_ran_it():
    row = _row("Qwen3-30B-A3B (tokendrop)")
    plan = predict(row)
    found = beside(plan)
    same = [r for r in found["runs"] if r["same_configuration"]]
    # The table rows by hand: 25.09 ran it at 10,494 tokens/s/GPU, 25.11 at 5,275 (16 GPUs, GBS 512, 4,096 tokens).
    assert [(r["release"], r["tokens_per_gpu_s"]) for r in same] == [("25.09", 10494.0), ("25.11", 5275.0)]
    for r, tokens in zip(same, (10494, 5275)):
        assert r["model_error"] == pytest.approx(plan.step_time_s / (512 * 4096 / (tokens * 16)) - 1)
    assert "25.09 at 10,494 tokens/s/GPU" in found["text"] and found["system"] == "H100"
    # Other configurations of the model on the system are listed, not compared.
    others = [r for r in found["runs"] if not r["same_configuration"]]
    assert others and all(r["model_error"] is None for r in others)
    assert len(found["runs"]) == len(published_runs("qwen3-30b-a3b", "dgx-h100"))


def test_no_runs_beside_a_model_or_system_the_tables_do_not_have():
    assert published_runs("gpt3-5b", "dgx-h100") == ()
    assert published_runs("llama3-8b", "dgx-h200") == ()  # the tables have no H200
    # Llama 3 70B's 3b configuration, in another precision than any run of it: the runs, none of them its own.
    plan = replace(predict(_row("Llama 3 70B")), precision="bf16")
    found = beside(plan)
    assert found["runs"] and not any(r["same_configuration"] for r in found["runs"])
    assert found["text"].endswith("none in this configuration")


def test_the_cli_prints_the_runs_beside_an_evaluated_plan(capsys):
    from pase.cli import main

    assert main(["evaluate", "llama3-8b", "--devices", "8", "--cluster", "dgx-h100", "--tp", "1", "--pp", "1",
                 "--dp", "8", "--zero", "3", "--global-batch", "128", "--microbatch-size", "1", "--seq", "8192",
                 "--precision", "fp8-cs"]) == 0
    out = capsys.readouterr().out
    assert "published runs: NVIDIA published 2 runs of llama3-8b on DGX H100" in out
    assert "25.09 at 14,079 tokens/s/GPU" in out and "25.11 at 14,451 tokens/s/GPU" in out
    listed = [line for line in out.splitlines() if line.startswith("    25.")]
    assert len(listed) == 2 and all(line.endswith("<- this configuration") for line in listed)
    assert "8 GPUs, GBS 128, MBS 1, sequence 8,192, TP 1 PP 1 CP 1 VP 1 EP 1, FSDP 8: 14,079 tokens/s/GPU" in listed[0]


def _view():
    from tests.test_bridge_releases import _row
    from ui.published import show_published
    from validate_today import predict

    show_published(predict(_row("Qwen3-235B-A22B (tokendrop)")), "t")


def test_the_app_shows_the_runs_with_the_plans_own_configuration_marked():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_view, default_timeout=60).run()
    assert not at.exception
    assert "this configuration ran in 25.09 at 1,204 tokens/s/GPU" in at.caption[0].value.replace("\\", "")
    table = at.dataframe[0].value
    marked = table[table["this plan's step against it"] != ""]
    assert list(marked["release"]) == ["25.09", "25.11"]
    assert len(at.get("plotly_chart")) == 1  # the two releases' bars against the plan


def test_the_apps_table_has_no_comparison_column_when_no_run_is_the_plans_configuration():
    from ui.published import published_rows

    found = beside(replace(predict(_row("Llama 3 70B")), precision="bf16"))
    rows = published_rows(found)
    assert len(rows) == len(found["runs"]) and all("this plan's step against it" not in r for r in rows)
    assert rows[0]["configuration"] == "64 GPUs, GBS 128, MBS 1, sequence 8,192, TP 4 PP 8 CP 1 VP 5 EP 1"


def test_the_figure_sets_each_release_of_the_plans_configuration_against_the_plan():
    from ui.published import published_figure

    row = _row("Qwen3-30B-A3B (tokendrop)")
    plan = predict(row)
    found = beside(plan)
    bars, line = published_figure(found).data
    assert list(bars.x) == ["25.09 (fp8-cs)", "25.11 (fp8-cs)"] and list(bars.y) == [10494.0, 5275.0]
    # The plan's tokens/s/GPU by hand: GBS 512 x 4,096 tokens over its step and 16 GPUs.
    assert list(line.y) == pytest.approx([512 * 4096 / (plan.step_time_s * 16)] * 2)
    assert published_figure(beside(replace(plan, precision="bf16"))) is None  # no release ran it in BF16
