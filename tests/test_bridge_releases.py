"""Megatron-Bridge's published tables, release after release (``tests/data/megatron-bridge-releases.json``).

Two checks of one transcription against another: the 25.09 runs extracted from Megatron-Bridge's own performance
documents (``benchmarks/extract_bridge_releases.py``) must give every section-3b step that pase's validation keeps
(``pase/hardware/data/validation.json``, transcribed by hand from published-measurements.md), and the extractor
must read both layouts those documents use (a table per system with a model column, or per model with a system
column) and their parentheses as a second run.
"""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from extract_bridge_releases import runs  # noqa: E402

RELEASES = json.loads((ROOT / "tests" / "data" / "megatron-bridge-releases.json").read_text())["runs"]
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
