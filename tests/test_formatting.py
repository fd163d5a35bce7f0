"""What the app shows reads as numbers with units: significant figures, no exponent glued to a suffix, no
negative zero, no raw keys in headers, and one word (tensor) for splitting a layer's non-batch dimensions."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pase.hardware.cluster import Cluster
from pase.models import sample
from pase.planner import evaluate, plan
from ui.fmt import fmt_count, fmt_percent, fmt_words, round_sig
from ui.graphview import KINDS, build_graph_view, kind_of
from ui.tables import strategy_table, totals_table

APP = str(Path(__file__).resolve().parents[1] / "app.py")
# A header that is a program's key rather than words: snake_case (step_ms, memory_GB, intra_comm_ms).
RAW_KEY = re.compile(r"^[A-Za-z]+(_[A-Za-z0-9]+)+$")


# -- helpers of ui.fmt -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [8.72e62, 1e15, 3.3e20, -4.5e18])
def test_huge_counts_read_as_powers_of_ten(n):
    text = fmt_count(n)
    assert "e+" not in text and "e-" not in text and not text.endswith("T"), text
    mantissa, power = re.fullmatch(r"(-?[\d.]+)×10([⁰¹²³⁴⁵⁶⁷⁸⁹]+)", text).groups()
    exponent = int(power.translate(str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")))
    assert float(mantissa) * 10 ** exponent == pytest.approx(n, rel=5e-3)


@pytest.mark.parametrize("n,text", [(999, "999"), (1500, "1.5k"), (2.5e6, "2.5M"), (7.25e12, "7.25T"), (-0.0, "0"),
                                    (0.5, "0.5")])
def test_counts_keep_their_suffixes_below_a_quadrillion(n, text):
    assert fmt_count(n) == text


@pytest.mark.parametrize("fraction", [-0.0, -1e-17, -0.0004, 0.0, 1e-9])
def test_a_zero_percentage_is_never_negative(fraction):
    assert fmt_percent(fraction) == "0.0%"
    assert fmt_percent(fraction, digits=0) == "0%"


def test_percentages_keep_their_sign_and_digits():
    assert fmt_percent(0.1234) == "12.3%" and fmt_percent(-0.25) == "-25.0%" and fmt_percent(1) == "100.0%"


@pytest.mark.parametrize("x,rounded", [(0.9666, 0.967), (10.3333, 10.3), (123456.7, 123000.0), (-0.0, 0.0),
                                       (1e-7 / 3, 3.33e-8), (None, None)])
def test_round_sig_keeps_three_significant_figures(x, rounded):
    got = round_sig(x)
    assert got == rounded
    assert got is None or math.copysign(1, got) == math.copysign(1, rounded)  # 0.0, never -0.0


# -- tables ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plans():
    g = sample("alexnet")
    cluster = Cluster(8, 10e12, 16e9, memory_bytes=2e9, reserved_bytes=0.0)  # a toy device: no GPU reserve
    best = plan(g, cluster)
    data = evaluate(g, cluster, {layer.name: tuple(8 if d == "b" else 1 for d in layer.dims) for layer in g},
                    label="data parallel")
    return {"PaSE": best, "data parallel": data}


def test_the_totals_table_names_units_and_no_raw_keys(plans):
    table = totals_table(plans, "PaSE")
    for column in table.columns:
        assert not RAW_KEY.match(column), column
    numeric = [c for c in table.columns if table[c].dtype.kind == "f"]
    assert numeric and all(re.search(r"\((ms|GB|×)\)$", c) for c in numeric), numeric
    for c in numeric:
        for value in table[c]:
            assert value == round_sig(value), (c, value)  # three significant figures at most
    assert set(table["fits memory"]) <= {"yes", "no", "no limit"}
    assert table.loc[table["strategy"] == "PaSE", "PaSE speedup (×)"].item() == 1.0


def test_the_tables_say_tensor_not_parameter(plans):
    kinds = set(strategy_table(plans["PaSE"])["parallelism"])
    assert "parameter" not in kinds and kinds <= {"data", "tensor", "hybrid", "replicated"}
    assert "tensor" in KINDS and "parameter" not in KINDS
    assert kind_of(("b", "n", "c"), (1, 4, 2)) == "tensor"
    assert kind_of(("b", "n", "c"), (4, 1, 1)) == "data"
    assert kind_of(("b", "n", "c"), (2, 2, 1)) == "hybrid"


def test_the_strategy_graph_legend_says_tensor(plans):
    from ui.figures import strategy_graph_figure

    fig = strategy_graph_figure(build_graph_view(plans["PaSE"].graph, plans["PaSE"]))
    names = {t.name for t in fig.data if t.name}
    assert "parameter" not in names


# -- pages -----------------------------------------------------------------------------------------


def _texts(at: AppTest) -> list[str]:
    """Every text the page shows: markdown, captions, metrics (labels and values) and alerts."""
    out = [e.value for kind in ("markdown", "caption", "success", "info", "warning", "error")
           for e in at.get(kind)]
    out += [f"{m.label} {m.value}" for m in at.metric]
    return out


def test_the_compare_page_shows_no_raw_keys():
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.selectbox(key="in_sample").set_value("alexnet").run()
    at.number_input(key="in_devices").set_value(8).run()
    at.switch_page("pages/compare.py").run()
    at.button(key="solve_compare").click().run()
    assert not at.exception, [e.value for e in at.exception]
    totals = at.dataframe[0].value
    assert not [c for c in totals.columns if RAW_KEY.match(c)], list(totals.columns)
    assert "(fits: false)" not in " ".join(_texts(at))


def test_the_explorer_of_a_3d_plan_shows_no_negative_zero_or_glued_exponent():
    at = AppTest.from_file(APP, default_timeout=240).run()
    at.selectbox(key="in_sample").set_value("llama3-8b").run()
    at.number_input(key="in_devices").set_value(8).run()
    at.button(key="solve").click().run()
    assert not at.exception, [e.value for e in at.exception]
    texts = _texts(at)
    assert any("Bubble" in t for t in texts), texts
    for t in texts:
        assert "-0.0%" not in t and not re.search(r"\de\+\d+[kMGT]", t), t
    graph = [c for c in at.get("plotly_chart") if c.proto.id.endswith("graph_chart")]
    names = {tr.get("name") for tr in json.loads(graph[0].proto.spec)["data"]}
    assert "parameter" not in names, names


@pytest.mark.parametrize("n,text", [(1e9, "1 billion"), (2.5e12, "2.5 trillion"), (15e6, "15 million"),
                                    (300_000, "300,000"), (0.5, "0.5")])
def test_a_count_in_a_title_reads_in_words_not_as_an_exponent(n, text):
    assert fmt_words(n) == text


def test_the_sweeps_logarithmic_axes_label_every_tick_in_full():
    """Plotly labels the ticks between powers of ten of a logarithmic axis with their leading digit alone ("2",
    "5": 20 GB reads as 2) unless the axis has a tick format; every logarithmic axis of the sweep figures has one."""
    from pase.analysis.sweep import sweep
    from pase.hardware.cluster import preset
    from ui.figures import sweep_figure, sweep_panels_figure

    records = sweep(sample("alexnet"), [1, 2, 4], preset("dgx-h100", devices=4))
    for fig in (sweep_figure(records), sweep_panels_figure(records)):
        logs = [a for a in fig.layout if a.startswith("yaxis") and fig.layout[a].type == "log"]
        assert logs and all(fig.layout[a].tickformat for a in logs), fig.layout


@pytest.mark.parametrize("values", [[10_000, 200_000], [15, 45], [5, 90], [0.4, 8.5], [4e5, 1.1e6], [1, 1e9]])
def test_log_ticks_are_few_round_numbers_over_the_values(values):
    from ui.figures.sweeps import log_ticks

    ticks = log_ticks(values)
    assert 2 <= len(ticks) <= 6 and ticks == sorted(ticks), ticks
    for t in ticks:
        mantissa = t / 10 ** math.floor(math.log10(t) + 1e-9)
        assert min(abs(mantissa - m) for m in (1, 1.5, 2, 3, 5, 7)) < 1e-9, t  # a round number
    inside = [t for t in ticks if min(values) / 1.15 <= t <= max(values) * 1.15]
    assert len(inside) >= 2, (values, ticks)


def test_log_ticks_leave_a_range_narrower_than_their_steps_to_plotly():
    from ui.figures.sweeps import log_ticks

    assert log_ticks([23, 24]) is None and log_ticks([None, 0]) is None


def test_a_flat_sweep_reads_flat_between_labelled_ticks():
    """Perfect scaling: the GPU-hours to train equal at every device count up to rounding (25.59 and 25.59 +
    3e-12): the axis must not stretch the rounding into a staircase with no tick to read it by."""
    from pase.analysis.sweep import sweep, with_training_estimates
    from pase.hardware.cluster import preset
    from ui.figures import sweep_figure, sweep_panels_figure

    records = with_training_estimates(sweep(sample("alexnet"), [1, 2, 4], preset("dgx-h100", devices=4)), 1e6,
                                      unit="samples")
    flat = [{**r, "gpu_hours": 25.59 + i * 1e-12, "step_time_s": 0.02 + i * 1e-15} for i, r in enumerate(records)]
    panels, left = sweep_panels_figure(flat), sweep_figure(flat)
    axes = [panels.layout[a] for a in panels.layout if a.startswith("yaxis")
            and panels.layout[a].title.text in ("GPU-hours", "ms per step")] + [left.layout.yaxis]
    assert len(axes) == 3
    for axis, value in zip(axes, (20.0, 25.59, 20.0)):
        assert axis.type == "log"
        lo, hi = (10 ** v for v in axis.range)
        assert hi / lo >= 3 - 1e-9 and lo < value * 0.999 and value * 1.001 < hi, (axis.range, value)
        assert len([t for t in axis.tickvals if lo <= t <= hi]) >= 2, (axis.tickvals, lo, hi)
    gpu_hours = next(a for a in axes if a.title.text == "GPU-hours")
    lo, hi = (10 ** v for v in gpu_hours.range)
    assert math.sqrt(lo * hi) == pytest.approx(25.59)  # the line in the middle of its panel


@pytest.mark.parametrize("seconds,text", [(6.36e6, "73.6 days"), (999, "999 s"), (5400, "1.5 h"), (1200, "20 min"),
                                          (0.0123, "12.3 ms")])
def test_a_long_duration_reads_in_minutes_hours_or_days_not_as_an_exponent(seconds, text):
    from ui.fmt import fmt_time

    assert fmt_time(seconds) == text


def test_the_devices_used_line_counts_layers_not_a_rounded_share():
    """One layer of 214 on all 16 devices read "0% of layers use all 16" beside "at most 16 of 16": a count, by hand."""
    from pase import ops as L
    from pase.ir.graph import Graph
    from ui.pagekit import devices_used_text

    g = Graph("two")
    g.add_layer(L.fully_connected("fc1", b=8, n=8, c=8))
    g.add_layer(L.fully_connected("fc2", b=8, n=8, c=8), inputs=["fc1"])
    cluster = Cluster(devices=8, peak_flops=1e12, bandwidth_Bps=1e9)
    assert devices_used_text(evaluate(g, cluster, {"fc1": (8, 1, 1), "fc2": (4, 1, 1)})) == "1 of 2 layers uses all 8."
    assert devices_used_text(evaluate(g, cluster, {"fc1": (2, 1, 1), "fc2": (4, 1, 1)})) == "0 of 2 layers use all 8."
    assert devices_used_text(evaluate(g, cluster, {"fc1": (8, 1, 1), "fc2": (2, 2, 2)})) == "all 2 layers use all 8."
