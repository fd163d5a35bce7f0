"""How far each preset's model was from published runs (pase.hardware.accuracy), said beside a plan's step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pase.cli import main
from pase.hardware import accuracy as acc
from pase.hardware.cluster import preset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from validate_today import ROWS, predict  # noqa: E402


def test_the_kept_runs_are_what_the_model_predicts_now():
    """``data/validation.json`` is every published run of validate_today, its measured step and the step the
    model gives it today: a change of the model that moves a prediction must write the file again
    (``python benchmarks/validate_today.py``), or outputs would quote a stale accuracy."""
    kept = {(r["source"], r["run"], r["cluster"], r["gpus"]): r for r in acc.validation_rows()}
    assert len(kept) == len(ROWS)
    for row in ROWS:
        r = kept[row.source, row.label, row.cluster, row.gpus]
        assert r["experts"] == (row.ep > 1) and r["measured_step_s"] == pytest.approx(row.measured_step_s, rel=1e-6)
        assert r["model_step_s"] == pytest.approx(predict(row).step_time_s, rel=1e-5), row.label


def test_the_summary_by_hand(monkeypatch):
    rows = ({"run": "a", "source": "3b Megatron-Bridge 25.09", "cluster": "dgx-h100", "experts": True,
             "measured_step_s": 10.0, "model_step_s": 9.0},
            {"run": "b", "source": "3b Megatron-Bridge 25.09", "cluster": "dgx-h100", "experts": True,
             "measured_step_s": 10.0, "model_step_s": 12.0},
            {"run": "c", "source": "3a NeMo 24.07", "cluster": "dgx-h100", "experts": True,
             "measured_step_s": 10.0, "model_step_s": 7.0},
            {"run": "d", "source": "3a NeMo 24.07", "cluster": "dgx-h100", "experts": False,
             "measured_step_s": 1.0, "model_step_s": 5.0},
            {"run": "e", "source": "3b Megatron-Bridge 25.09", "cluster": "dgx-b200", "experts": True,
             "measured_step_s": 1.0, "model_step_s": 5.0})
    monkeypatch.setattr(acc, "validation_rows", lambda: rows)
    got = acc.accuracy(preset("dgx-h100", 8, calibrated=True), experts=True)
    # Errors -10%, +20%, -30%: mean of their sizes 20%, the furthest -30%, two of three short.
    assert got["runs"] == 3 and got["preset"] == "dgx-h100" and got["short"] == 2
    assert got["mean_abs_error"] == pytest.approx(0.2) and got["largest_error"] == pytest.approx(-0.3)
    assert "3 published mixture-of-experts training runs on dgx-h100 (Megatron-Bridge 25.09 and NeMo 24.07)" in \
        got["text"] and "20% off on average and -30% at most, shorter than measured in 2 of them" in got["text"]


def test_no_accuracy_where_no_published_run_was_priced_by_that_model():
    assert acc.accuracy(preset("dgx-h100", 8, calibrated=False), experts=True) is None  # peak rates
    assert acc.accuracy(preset("dgx-h200", 8, calibrated=True), experts=False) is None  # no published run on it
    assert acc.accuracy(preset("dgx-a100", 8, calibrated=True), experts=True) is None


def test_evaluate_says_the_accuracy_beside_the_step(capsys):
    argv = ["evaluate", "qwen3-30b-a3b", "--devices", "16", "--cluster", "dgx-h100", "--calibrated", "--tp", "1",
            "--pp", "2", "--ep", "8", "--global-batch", "64", "--microbatch-size", "1", "--seq", "4096",
            "--precision", "fp8"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # Section 3b's three H100 runs and GPT-OSS's of Megatron-Bridge 26.02 (validate_today.LATER_RUNS).
    assert "  accuracy: against 4 published mixture-of-experts training runs on dgx-h100 (Megatron-Bridge 25.09 " \
           "and Megatron-Bridge 26.02)" in out
    assert main([*argv, "--json"]) == 0
    model = json.loads(capsys.readouterr().out)["step_time_model"]
    assert model["accuracy"]["runs"] == 4 and model["accuracy"]["short"] == 4
    assert main(["evaluate", "qwen3-30b-a3b", "--devices", "16", "--cluster", "dgx-h100", "--peak-rates", "--tp",
                 "1", "--pp", "2", "--ep", "8", "--global-batch", "64", "--microbatch-size", "1", "--seq",
                 "4096"]) == 0
    assert "accuracy:" not in capsys.readouterr().out
