"""Sweeps of a language model run the 3-D search at every point (pase.analysis.sweep.training_sweep, `pase sweep`'s
default for them), say per point whether the plan fits, and never chart the time of a plan that does not fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pase.analysis.sweep import training_sweep
from pase.cli import main
from pase.hardware.cluster import Cluster, preset
from pase.models import batch_builder
from pase.search.stages import search_training
from ui.figures import sweep_figure, sweep_panels_figure

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "hf" / "tiny-llama" / "config.json"
BUILD = batch_builder("gpt", layers=4, d_model=64, heads=4, seq=32, vocab=256)
# Toy devices whose memory fits the model on 4 devices but not on 1 (no reserve: a toy device).
CLUSTER = Cluster(4, 100e12, 100e9, 2, 2.5e6, "toy", 4, 10e9, reserved_bytes=0.0)


@pytest.fixture(scope="module")
def records():
    return training_sweep(BUILD, [1, 4], CLUSTER, 8)


def test_the_3d_sweep_is_the_3d_search_at_each_point(records):
    assert {r["search"] for r in records} == {"3d"}
    pase = {r["devices"]: r for r in records if r["strategy"] == "PaSE"}
    best = search_training(BUILD, CLUSTER.with_devices(4), 8).best
    assert pase[4]["label"] == best.label and pase[4]["step_time_s"] == pytest.approx(best.step_time_s)
    assert pase[4]["fits_memory"] is True and pase[4]["mfu"] == pytest.approx(best.mfu)
    assert {"data parallel", "ZeRO-3 / FSDP"} <= {r["strategy"] for r in records}


def test_where_nothing_fits_the_record_has_no_time(records):
    (one,) = [r for r in records if r["strategy"] == "PaSE" and r["devices"] == 1]
    assert one["fits_memory"] is False and one["label"] == "nothing fits memory"
    assert one["step_time_s"] is None and one["tokens_per_s"] is None and one["speedup_over_dp"] is None
    assert one["memory_per_device_bytes"] > CLUSTER.memory_bytes  # the least any configuration needs
    # A baseline that does not fit keeps its figures but no speedup (it cannot run).
    assert all(r["speedup_over_dp"] is None for r in records if r["fits_memory"] is False)


def test_figures_draw_no_time_rate_or_speedup_for_a_plan_that_does_not_fit(records):
    rows = [{**r, "series": r["strategy"]} for r in records]
    for fig in (sweep_figure(rows, series="series"), sweep_figure(rows, series="series", show="MFU"),
                sweep_panels_figure(rows, series="series")):
        for trace in fig.data:
            points = [r for r in rows if r["series"] == trace.name]
            if not points or trace.y is None:
                continue  # a capacity line
            for r, y in zip(sorted(points, key=lambda r: r["devices"]), trace.y):
                if r["fits_memory"] is False and "Memory" not in str(trace.yaxis):
                    memory_panel = fig.layout[trace.yaxis.replace("y", "yaxis")].title.text == "GB"
                    assert y is None or memory_panel, (trace.name, r["devices"], y)


def test_pase_sweep_plans_a_language_model_in_3d_by_default(capsys):
    assert main(["sweep", str(TINY), "-p", "1", "2", "--cluster", "dgx-h100", "--global-batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "search: 3-D" in out and "PaSE 3-D:" in out and "fits" in out.splitlines()[0]
    assert main(["sweep", str(TINY), "-p", "2", "--cluster", "dgx-h100", "--global-batch", "8", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {r["search"] for r in records} == {"3d"} and all("fits_memory" in r for r in records)
    # The per-layer search stays one option away.
    assert main(["sweep", str(TINY), "-p", "2", "--cluster", "dgx-h100", "--search", "layers", "--batch", "8"]) == 0
    assert "search: per layer" in capsys.readouterr().out


def test_a_language_models_step_times_are_charted_in_seconds_a_small_models_in_ms():
    """Steps of minutes read as "180 s", not as 180,000 ms; steps of milliseconds stay in ms."""
    long = [{"devices": p, "strategy": "PaSE", "step_time_s": t, "speedup_over_dp": 1.0, "fits_memory": True}
            for p, t in ((8, 180.0), (16, 90.0))]
    short = [dict(r, step_time_s=r["step_time_s"] / 1e4) for r in long]
    for records, unit, scale in ((long, "s per step", 1.0), (short, "ms per step", 1e3)):
        for fig in (sweep_figure(records), sweep_panels_figure(records)):
            assert fig.layout.yaxis.title.text == unit
            (first,) = [t for t in fig.data if t.name == "PaSE" and t.yaxis in (None, "y")][:1]
            assert first.y[0] == pytest.approx(records[0]["step_time_s"] * scale)
