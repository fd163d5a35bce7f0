"""Today's units (pase.analysis.throughput): samples/s, tokens/s, model FLOPs, MFU, time and GPU-hours to train."""

from __future__ import annotations

import json
import math

import pytest

from pase import ops as L
from pase.analysis.throughput import (
    ThroughputError, batch_size, estimate_from_rate, model_flops, sequence_length, throughput, training_estimate,
)
from pase.errors import PaseError
from pase.hardware.cluster import Cluster
from pase.io.graph_json import loads_graph
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.models import sample
from pase.planner import PlanOptions, evaluate, plan

B, N1, C1, N2 = 4, 8, 16, 8
PEAK = 1e12


def _mlp() -> Graph:
    g = Graph("mlp")
    g.add_layer(L.fully_connected("fc1", b=B, n=N1, c=C1, bias=False))
    g.add_layer(L.fully_connected("fc2", b=B, n=N2, c=N1, bias=False), inputs=["fc1"])
    return g


def _cluster(p: int) -> Cluster:
    return Cluster(devices=p, peak_flops=PEAK, bandwidth_Bps=1e9, name="test")


# By hand: 6bnc per FC (forward 2bnc, dx 2bnc, dW 2bnc), less fc1's dx (2bnc): fc1 reads the graph's input.
HAND_FLOPS = (6 - 2) * B * N1 * C1 + 6 * B * N2 * N1


def test_model_flops_by_hand_on_a_tiny_mlp():
    assert HAND_FLOPS == 2048 + 1536
    assert model_flops(_mlp()) == HAND_FLOPS
    # The paper's model takes every input's gradient: 6bnc for both (the sum of ops.training_flops).
    assert model_flops(_mlp(), "paper") == 6 * B * N1 * C1 + 6 * B * N2 * N1
    assert model_flops(_mlp(), "paper") == sum(L.training_flops(layer) for layer in _mlp().layers)


def test_one_device_rates_by_hand():
    p = plan(_mlp(), _cluster(1))
    t = throughput(p)
    step = HAND_FLOPS / PEAK
    assert p.step_time_s == pytest.approx(step, rel=1e-12)
    assert (t.batch, t.sequence_length, t.devices) == (B, None, 1)
    assert t.samples_per_s == pytest.approx(B / step, rel=1e-12)
    assert t.tokens_per_s is None
    assert t.model_flops_per_step == HAND_FLOPS
    assert t.model_flops_per_device_per_s == pytest.approx(PEAK, rel=1e-12)
    # No communication on one device: MFU = compute_s / step_time_s = 1.
    assert t.mfu == pytest.approx(p.totals_s()["compute_s"] / p.step_time_s, rel=1e-12)
    assert t.mfu == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("cost_model", ["corrected", "paper"])
def test_mfu_is_at_most_one_and_matches_its_formula(cost_model):
    for devices in (1, 2, 4, 8):
        p = plan(_mlp(), _cluster(devices), PlanOptions(configs=ConfigOptions(cost_model=cost_model)))
        t = throughput(p)
        assert 0 < t.mfu <= 1 + 1e-12
        assert t.mfu == pytest.approx(t.model_flops_per_step / (devices * PEAK * p.step_time_s), rel=1e-12)
        assert t.model_flops_per_device_per_s == pytest.approx(t.model_flops_per_step / (devices * p.step_time_s))


def test_replicated_work_is_not_model_flops():
    # Every layer replicated on 4 devices: the step is the one-device step, the MFU a quarter.
    p = evaluate(_mlp(), _cluster(4), {"fc1": (1, 1, 1), "fc2": (1, 1, 1)})
    assert throughput(p).mfu == pytest.approx(0.25, rel=1e-12)


def test_gpt_tokens_per_second_is_batch_times_sequence_over_step():
    g = sample("gpt", batch=2, seq=16, d_model=32, layers=1, heads=2, vocab=50)
    assert (batch_size(g), sequence_length(g)) == (2, 16)
    p = plan(g, _cluster(2))
    t = throughput(p)
    assert t.tokens_per_s == pytest.approx(2 * 16 / p.step_time_s, rel=1e-12)
    assert t.samples_per_s == pytest.approx(2 / p.step_time_s, rel=1e-12)
    assert 0 < t.mfu <= 1


@pytest.mark.parametrize("name", ["transformer", "rnnlm"])
def test_sequence_samples_have_a_sequence_and_cnns_do_not(name):
    assert sequence_length(sample(name, batch=2, seq=8)) == 8
    # A convolution's s is its kernel width, not a sequence.
    assert sequence_length(sample("alexnet", batch=2)) is None and batch_size(sample("alexnet", batch=2)) == 2


def test_gpu_hours_to_train_by_hand():
    g = sample("gpt", batch=2, seq=16, d_model=32, layers=1, heads=2, vocab=50)
    p = plan(g, _cluster(4))
    n = 1e9
    tokens_per_s = 2 * 16 / p.step_time_s
    hand_hours = n / tokens_per_s * 4 / 3600
    e = training_estimate(p, tokens=n, price_per_gpu_hour=2.5)
    assert e.time_s == pytest.approx(n / tokens_per_s, rel=1e-12)
    assert e.gpu_hours == pytest.approx(hand_hours, rel=1e-12)
    assert e.cost == pytest.approx(2.5 * hand_hours, rel=1e-12)
    assert training_estimate(p, tokens=n).cost is None
    assert training_estimate(p, tokens=n, price_per_gpu_hour=0).cost == 0
    samples = training_estimate(p, samples=1000)
    assert samples.gpu_hours == pytest.approx(1000 / (2 / p.step_time_s) * 4 / 3600, rel=1e-12)
    assert estimate_from_rate(3600.0, 1.0, 2, 1.5).gpu_hours == 2.0


@pytest.mark.parametrize("kwargs", [
    {"tokens": 0}, {"tokens": -5}, {"tokens": math.inf}, {"tokens": math.nan}, {"samples": 0},
    {"tokens": 10, "price_per_gpu_hour": -1}, {"tokens": 10, "price_per_gpu_hour": math.nan},
    {}, {"tokens": 10, "samples": 10},
])
def test_bad_training_inputs_are_refused(kwargs):
    p = plan(sample("gpt", batch=2, seq=16, d_model=32, layers=1, heads=2, vocab=50), _cluster(1))
    with pytest.raises(ThroughputError) as info:
        training_estimate(p, **kwargs)
    assert isinstance(info.value, ValueError) and isinstance(info.value, PaseError)


def test_tokens_need_a_sequence():
    with pytest.raises(ThroughputError, match="no sequence dimension"):
        training_estimate(plan(_mlp(), _cluster(1)), tokens=100)


NO_WORK = {"format": "pase-graph", "version": 1, "name": "flat", "layers": [
    {"name": "r", "op": "Reshape", "params": {"shape": [8, 4, 4], "dims": ["b", "h", "w"], "out_shape": [8, 16]},
     "inputs": [None]}]}


def test_a_zero_step_time_gives_none_not_infinity_and_strict_json():
    p = plan(loads_graph(json.dumps(NO_WORK)), _cluster(4))
    assert p.step_time_s == 0
    t = throughput(p)
    assert (t.samples_per_s, t.tokens_per_s, t.model_flops_per_device_per_s, t.mfu) == (None, None, None, None)
    assert t.model_flops_per_step == 0
    e = training_estimate(p, samples=100)
    assert (e.time_s, e.gpu_hours, e.cost) == (None, None, None)
    d = json.loads(json.dumps(p.to_dict(), allow_nan=False))
    assert d["mfu"] is None and d["samples_per_s"] is None


def test_plan_to_dict_has_the_throughput_keys_as_strict_json():
    g = sample("gpt", batch=2, seq=16, d_model=32, layers=1, heads=2, vocab=50)
    p = plan(g, _cluster(2))
    d = json.loads(json.dumps(p.to_dict(), allow_nan=False))
    t = throughput(p)
    for key in ("samples_per_s", "tokens_per_s", "model_flops_per_step", "model_flops_per_device_per_s", "mfu"):
        assert d[key] == pytest.approx(getattr(t, key), rel=1e-12)
    assert json.loads(json.dumps(plan(_mlp(), _cluster(2)).to_dict(), allow_nan=False))["tokens_per_s"] is None


@pytest.mark.parametrize("show,title,key,scale", [
    ("step time", "ms per step", "step_time_s", 1e3), ("throughput", "samples/s", "samples_per_s", 1.0),
    ("MFU", "% of peak FLOP/s", "mfu", 100.0),
])
def test_the_sweep_figure_shows_step_time_throughput_or_mfu(show, title, key, scale):
    from pase.analysis.sweep import sweep
    from ui.figures import sweep_figure

    records = sweep(_mlp(), [1, 2, 3], _cluster(1))
    fig = sweep_figure(records, show=show)
    assert fig.layout.yaxis.title.text == title
    pase = next(t for t in fig.data if t.name == "PaSE")
    expected = [r[key] * scale for r in sorted((r for r in records if r["strategy"] == "PaSE"), key=lambda r: r["devices"])]
    assert list(pase.y) == pytest.approx(expected)
    with pytest.raises(ValueError):
        sweep_figure(records, show="nonsense")


def test_the_sweep_figure_shows_tokens_per_second_for_a_sequence_model():
    from pase.analysis.sweep import sweep
    from ui.figures import sweep_figure

    records = sweep(sample("gpt", batch=2, seq=16, d_model=32, layers=1, heads=2, vocab=50), [1, 2], _cluster(1))
    assert sweep_figure(records, show="throughput").layout.yaxis.title.text == "tokens/s"


def test_the_what_if_page_shows_mfu_and_a_training_table_at_any_device_count():
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120).run()
    at.switch_page("pages/what-if.py").run()
    at.multiselect(key="wi_devices").set_value([1, 3, 6]).run()
    at.button(key="wi_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    at.selectbox(key="wi_show").set_value("MFU").run()
    assert not at.exception and not at.error
    spec = json.loads(next(c for c in at.get("plotly_chart") if c.proto.id.endswith("wi_sweep")).proto.spec)
    assert spec["layout"]["yaxis"]["title"]["text"] == "% of peak FLOP/s"
    label = next(t.label for t in at.text_input if t.label.startswith("Train on N"))
    assert label in ("Train on N tokens", "Train on N samples")
    at.text_input(key="wi_price").set_value("2").run()
    table = at.dataframe[0].value
    assert list(table["devices"]) == [1, 3, 6]
    assert {"time to train", "GPU-hours", "cost"} <= set(table.columns)
    assert list(table["cost"]) == pytest.approx(list(table["GPU-hours"] * 2), rel=1e-3, abs=0.01)
    at.text_input(key="wi_price").set_value("-1").run()
    assert any("price" in e.value for e in at.error)


def test_the_what_if_page_takes_typed_device_counts_and_refuses_others():
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120).run()
    at.switch_page("pages/what-if.py").run()
    at.multiselect(key="wi_devices").set_value([2, "5"]).run()
    at.button(key="wi_run").click().run()
    assert not at.exception and not at.error
    assert list(at.dataframe[0].value["devices"]) == [2, 5]
    for bad in ("abc", "0", "100000"):
        at.multiselect(key="wi_devices").set_value([2, bad]).run()
        assert any("is not a device count" in e.value for e in at.error)
