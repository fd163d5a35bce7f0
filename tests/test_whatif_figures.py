"""What-if: device use, the sweep chart's axes and colours, the CSV of the records, the dimension glossary."""

from __future__ import annotations

import colorsys

import pytest

from pase import ops as L
from pase.analysis.sweep import device_use, records_csv, records_from_csv, sweep
from pase.hardware.cluster import Cluster
from pase.ir.graph import Graph
from pase.models import SAMPLES, sample
from pase.ops.registry import OPS
from pase.planner import plan
from ui import figures as F
from ui.glossary import glossary, meaning, op_letters
from ui.palette import STRATEGY_COLORS

CLUSTER = Cluster(devices=2, peak_flops=10e12, bandwidth_Bps=16e9, name="test")


def _mlp(b: int = 64) -> Graph:
    g = Graph("mlp")
    g.add_layer(L.fully_connected("fc1", b=b, n=256, c=128))
    g.add_layer(L.fully_connected("fc2", b=b, n=256, c=256), inputs=["fc1"])
    g.add_layer(L.softmax_cross_entropy("loss", (b, 256)), inputs=["fc2"])
    return g


def _hls(color: str) -> tuple[float, float, float]:
    return colorsys.rgb_to_hls(*(int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)))


def test_device_use_counts_the_most_devices_a_layer_splits_over():
    small = Graph("small")
    small.add_layer(L.fully_connected("fc1", b=4, n=4, c=4))
    small.add_layer(L.fully_connected("fc2", b=4, n=4, c=4), inputs=["fc1"])
    for p in (7, 64):
        best = plan(small, CLUSTER.with_devices(p))
        use = device_use(best)
        assert use.devices == p
        assert use.used == max(layer.devices for layer in best.layers) < p
        assert use.idle == p - use.used > 0 and use.full_fraction == 0.0
    big = Graph("big")
    big.add_layer(L.fully_connected("fc1", b=1024, n=4096, c=4096))
    big.add_layer(L.fully_connected("fc2", b=1024, n=4096, c=4096), inputs=["fc1"])
    full = device_use(plan(big, CLUSTER.with_devices(4)))
    assert (full.used, full.idle) == (4, 0) and 0 < full.full_fraction <= 1


def test_sweep_records_say_how_many_devices_each_strategy_uses():
    records = sweep(_mlp(b=8), [4, 32], CLUSTER)
    dp = {r["devices"]: r["devices_used"] for r in records if r["strategy"] == "data parallel"}
    assert dp == {4: 4, 32: 8}, "data parallelism cannot split a batch of 8 over 32 devices"
    assert all(1 <= r["devices_used"] <= r["devices"] for r in records)


def test_device_ticks_are_the_swept_counts_and_the_speedup_axis_starts_at_zero():
    devices = [1, 2, 4, 8, 16]
    fig = F.sweep_figure(sweep(_mlp(), devices, CLUSTER))
    for axis in (fig.layout.xaxis, fig.layout.xaxis2):
        assert axis.type == "log"
        assert list(axis.tickvals) == devices and list(axis.ticktext) == [str(p) for p in devices]
    assert fig.layout.yaxis2.rangemode == "tozero"
    assert fig.layout.yaxis2.autorange is not False


def test_a_second_parameter_pairs_colours_by_strategy():
    records = sweep(_mlp(), [2, 4], CLUSTER, bandwidths_Bps=[1e9, 4e9, 16e9])
    for r in records:
        r["series"] = f"{r['strategy']} @ {r['bandwidth_Bps'] / 1e9:g} GB/s"
    fig = F.sweep_figure(records, series="series")
    colours: dict[str, list[str]] = {}
    for trace in fig.data:
        if trace.showlegend:
            colours.setdefault(trace.name.split(" @ ")[0], []).append(trace.line.color)
    assert set(colours) == {r["strategy"] for r in records}
    hues = {}
    for strategy, cs in colours.items():
        assert len(cs) == 3 and len(set(cs)) == 3, "one shade per bandwidth"
        hls = [_hls(c) for c in cs]
        spread = max(h for h, _, _ in hls) - min(h for h, _, _ in hls)
        assert min(spread, 1 - spread) < 0.01, "one hue per strategy (hues wrap around at red)"
        lights = [light for _, light, _ in hls]
        assert lights == sorted(lights) and lights[0] < lights[-1], "lightness per value, darkest first"
        hues[strategy] = round(hls[0][0], 2) % 1.0
    assert len(set(hues.values())) == len(hues), "strategies keep distinct hues"


def test_one_series_per_strategy_keeps_the_plain_palette():
    fig = F.sweep_figure(sweep(_mlp(), [2, 4], CLUSTER))
    pase = [t for t in fig.data if t.name == "PaSE"]
    assert {t.line.color for t in pase} == {STRATEGY_COLORS["PaSE"]} and pase[0].line.width == 3


def test_strategies_and_kinds_on_the_what_if_page_use_different_colours():
    records = sweep(_mlp(), [1, 2, 4], CLUSTER)
    lines = {t.line.color for t in F.sweep_figure(records).data}
    configs = {r["devices"]: r["configs"] for r in records if r["strategy"] == "PaSE"}
    heat = F.split_changes_figure([(layer.name, layer.dims) for layer in _mlp().layers], configs)
    cells = {c for _, c in heat.data[0].colorscale}
    assert lines and cells and not lines & cells


def test_the_csv_parses_back_to_the_records():
    records = sweep(_mlp(), [1, 2, 4], CLUSTER, bandwidths_Bps=[1e9, 16e9])
    back = records_from_csv(records_csv(records))
    assert back == records
    assert any("configs" in r for r in back) and not all("configs" in r for r in back)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_letter_of_every_sample_layer_has_a_meaning(name):
    for layer in sample(name).layers:
        assert all(meaning(layer.op, d) for d in layer.dims), (layer.op, layer.dims)
        if op_letters(layer.op):
            assert set(layer.dims) == set(op_letters(layer.op)), "the docstring's letters are the layer's"


def test_the_glossary_reads_the_builders_and_tells_conv_s_from_sequence_s():
    table = glossary()
    assert set(table) == set(OPS)
    assert op_letters("FullyConnected") == ("b", "n", "c")
    assert op_letters("LSTM") == ("l", "b", "s", "d", "e")
    assert table["FullyConnected"]["b"] == "batch"
    assert "kernel" in table["Conv2D"]["s"] and "sequence" in table["Embedding"]["s"]
    assert "vocabulary" in table["Embedding"]["v"] and "hidden" in table["LSTM"]["e"]


# -- GPU types side by side ------------------------------------------------------------------------

A100 = Cluster(devices=2, peak_flops=312e12, bandwidth_Bps=300e9, memory_bytes=80e9, name="dgx-a100")
H100 = Cluster(devices=2, peak_flops=989e12, bandwidth_Bps=450e9, memory_bytes=40e9, name="dgx-h100")


def _gpu_records(price: float | None = 2.0):
    from pase.analysis.sweep import with_training_estimates

    records = with_training_estimates(sweep(_mlp(), [1, 2, 4], [A100, H100]), 1e6, unit="samples",
                                      price_per_gpu_hour=price)
    for r in records:
        r["series"] = f"{r['strategy']} on {r['cluster']}"
    return [r for r in records if r["strategy"] in ("PaSE", "data parallel")]


def test_the_panels_show_every_quantity_on_one_device_axis():
    fig = F.sweep_panels_figure(_gpu_records(), series="series")
    titles = [a.text for a in fig.layout.annotations if a.text in {
        "Step time", "Throughput", "MFU (of peak FLOP/s)", "Memory per device", "GPU-hours", "Cost"}
        or a.text.startswith("Time to train")]
    assert len(titles) == 7, titles
    axes = [k for k in fig.layout if k.startswith("xaxis")]
    assert len(axes) >= 7
    for k in axes[:7]:
        assert fig.layout[k].type == "log" and list(fig.layout[k].tickvals) == [1, 2, 4]
    unpriced = F.sweep_panels_figure(_gpu_records(price=None), series="series")
    assert len([t for t in unpriced.data if not t.name.startswith("capacity")]) == 4 * 6, "no price: no cost"


def test_a_series_keeps_one_colour_in_every_panel_and_each_gpu_type_its_marker():
    records = _gpu_records()
    fig = F.sweep_panels_figure(records, series="series")
    colour, symbol = {}, {}
    for t in fig.data:
        if t.name.startswith("capacity"):
            continue
        colour.setdefault(t.name, set()).add(t.line.color)
        symbol.setdefault(t.name.split(" on ")[1], set()).add(t.marker.symbol[0].replace("-open", ""))
    assert all(len(c) == 1 for c in colour.values()), "the same colour in every panel"
    assert len({next(iter(c)) for c in colour.values()}) == 4, "each series its own colour"
    assert colour["PaSE on dgx-a100"] != colour["PaSE on dgx-h100"]
    main = {t.name: t.line.color for t in F.sweep_figure(records, series="series").data}
    assert all(main[n] == next(iter(c)) for n, c in colour.items()), "and the same as on the sweep chart"
    assert len({next(iter(s)) for s in symbol.values()}) == 2, "one marker per GPU type"
    hues = {n: round(_hls(next(iter(c)))[0], 2) for n, c in colour.items()}
    assert hues["PaSE on dgx-a100"] == hues["PaSE on dgx-h100"] != hues["data parallel on dgx-a100"]


def test_idle_devices_get_open_markers_and_a_point_that_does_not_fit_an_x():
    records = _gpu_records()
    records[0] = {**records[0], "idle_devices": 1, "devices_used": 0, "fits_memory": False}
    fig = F.sweep_panels_figure(records, series="series")
    first = next(t for t in fig.data if t.name == records[0]["series"])
    points = sorted((r for r in records if r["series"] == records[0]["series"]), key=lambda r: r["devices"])
    at = points.index(records[0])
    assert first.marker.symbol[at] == "x-open"
    assert "idle" in first.hovertext[at] and "does not fit" in first.hovertext[at]
    for symbol, r in zip(first.marker.symbol, points):
        assert symbol.endswith("-open") == (r["idle_devices"] > 0)


def test_each_gpu_type_s_memory_capacity_is_drawn_on_the_memory_panel():
    def capacities(fig):
        lines = [t for t in fig.data if t.name.startswith("capacity")]
        assert all(t.xaxis == "x4" and t.yaxis == "y4" for t in lines), "on the memory panel"
        assert all(list(t.x) == [1, 4] and t.y[0] == t.y[1] for t in lines), "across the device axis"
        return {t.text[0]: t.y[0] for t in lines}

    assert capacities(F.sweep_panels_figure(_gpu_records(), series="series")) == {
        "dgx-a100: 80 GB": 80.0, "dgx-h100: 40 GB": 40.0}
    same = [{**r, "memory_capacity_bytes": 80e9} for r in _gpu_records()]
    assert capacities(F.sweep_panels_figure(same, series="series")) == {"dgx-a100, dgx-h100: 80 GB": 80.0}, \
        "GPU types of one capacity share a line"


# -- the What-if page: both batch modes, two GPU types ---------------------------------------------

def _what_if(monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from pase.analysis import sweep as sweep_module

    written = []
    real = sweep_module.records_csv

    def recording(records):
        written.append(list(records))
        return real(records)

    monkeypatch.setattr(sweep_module, "records_csv", recording)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=240).run()
    at.selectbox(key="in_sample").set_value("rnnlm").run()
    at.selectbox(key="in_preset").set_value("dgx-a100").run()
    at.number_input(key="in_devices").set_value(8).run()
    at.switch_page("pages/what-if.py").run()
    at.multiselect(key="wi_devices").set_value([2, 4, 8]).run()
    return at, written


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def test_the_what_if_page_sweeps_two_gpu_types_with_a_fixed_global_batch(monkeypatch):
    import json

    at, written = _what_if(monkeypatch)
    at.multiselect(key="wi_gpus").set_value(["dgx-a100", "dgx-h100"]).run()
    at.button(key="wi_run").click().run()
    _ok(at)
    table = at.dataframe[0].value
    assert list(zip(table["GPU type"], table["devices"])) == [(c, p) for c in ("dgx-a100", "dgx-h100")
                                                              for p in (2, 4, 8)]
    assert len(set(table["global batch"])) == 1, "a fixed global batch"
    panels = json.loads(next(c for c in at.get("plotly_chart") if c.proto.id.endswith("wi_panels")).proto.spec)
    names = {t["name"] for t in panels["data"]}
    assert {"PaSE on dgx-a100", "PaSE on dgx-h100"} <= names
    records = written[-1]
    assert {r["cluster"] for r in records} == {"dgx-a100", "dgx-h100"}
    assert {r["batch_mode"] for r in records} == {"global"} and all("gpu_hours" in r for r in records)
    assert any("published peak figures" in c.value for c in at.caption)


def test_the_what_if_page_with_a_per_device_batch_doubles_the_global_batch(monkeypatch):
    at, written = _what_if(monkeypatch)
    at.radio(key="wi_batch_mode").set_value("fixed per-device batch").run()
    at.number_input(key="wi_per_device_batch").set_value(16).run()
    at.button(key="wi_run").click().run()
    _ok(at)
    at.text_input(key="wi_price").set_value("3").run()
    table = at.dataframe[0].value
    assert list(table["devices"]) == [2, 4, 8] and list(table["global batch"]) == [32, 64, 128]
    assert list(table["cost"]) == pytest.approx(list(table["GPU-hours"] * 3), rel=1e-3, abs=0.01)
    records = written[-1]
    assert {(r["devices"], r["batch"], r["per_device_batch"], r["batch_mode"]) for r in records} == {
        (p, 16 * p, 16, "per device") for p in (2, 4, 8)}
    from pase.analysis.throughput import sequence_length

    seq = sequence_length(sample("rnnlm"))
    for r in records:
        assert r["tokens_per_s"] == pytest.approx(r["global_batch"] * seq / r["step_time_s"], rel=1e-9)
        assert r["gpu_hours"] == pytest.approx(r["devices"] * r["time_to_train_s"] / 3600)
    at.number_input(key="wi_per_device_batch").set_value(2**20).run()
    assert any("above the" in e.value for e in at.error), "a global batch too large is refused with a message"
    assert not at.exception


def test_the_what_if_page_varies_the_per_device_batch_and_refuses_what_it_cannot_vary_with_it(monkeypatch):
    import json

    at, written = _what_if(monkeypatch)
    at.multiselect(key="wi_devices").set_value([2, 4]).run()
    at.radio(key="wi_batch_mode").set_value("fixed per-device batch").run()
    at.selectbox(key="wi_vary").set_value("link bandwidth (GB/s)").run()
    assert any("only the batch can vary" in w.value for w in at.warning)
    at.selectbox(key="wi_vary").set_value("batch size").run()
    at.text_input(key="wi_values_batch").set_value("2, 8").run()
    at.button(key="wi_run").click().run()
    _ok(at)
    assert {(r["devices"], r["per_device_batch"], r["batch"]) for r in written[-1]} == {
        (p, b, b * p) for p in (2, 4) for b in (2, 8)}
    spec = json.loads(next(c for c in at.get("plotly_chart") if c.proto.id.endswith("wi_sweep")).proto.spec)
    assert {"PaSE @ 2 per device", "PaSE @ 8 per device"} <= {t.get("name") for t in spec["data"]}
    assert any("per-device batch of 2" in c.value for c in at.caption), "the heat map says which batch it shows"
    at.multiselect(key="wi_gpus").set_value(["dgx-a100", "dgx-b200"]).run()
    at.selectbox(key="wi_vary").set_value("peak TFLOP/s").run()
    assert any("override every GPU type" in w.value for w in at.warning)
    assert not at.exception
