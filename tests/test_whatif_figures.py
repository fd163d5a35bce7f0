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
