"""Long pipeline schedules stay legible and small: the figures of Llama 3 70B on 64 H100s with 1,024 microbatches
each stay under FIGURE_BYTES of JSON (what the browser receives and lays out), the schedule draws the fill and the
drain bar by bar and the steady state as one band a stage, and its legend's swatches are the bars' colours."""

from __future__ import annotations

import pytest

from pase.hardware.cluster import preset
from pase.model.training import Parallelism, evaluate_training
from pase.models import batch_builder
from ui.training_figures import (
    MAX_DRAWN_MICROBATCHES, OPERATION_COLORS, STEADY_COLOR, WINDOW_MICROBATCHES, memory_timeline_figure, mesh_figure,
    schedule_figure, stage_memory_figure,
)

# The stated bound on one figure's JSON: 200 kB, a twentieth of the 3.7 MB schedule that blocked a browser for
# 28-49 s (issue 30).
FIGURE_BYTES = 200_000


@pytest.fixture(scope="module")
def long_plan():
    par = Parallelism(tensor=8, pipeline=4, data=2, global_batch=2048, microbatch_size=1)
    plan = evaluate_training(batch_builder("llama3-70b"), preset("dgx-h100", 64, calibrated=True), par, record=True)
    assert plan.parallelism.microbatches == 1024
    return plan


@pytest.mark.parametrize("figure", [schedule_figure, stage_memory_figure, memory_timeline_figure, mesh_figure])
def test_every_figure_of_a_long_schedule_stays_under_the_bound(long_plan, figure):
    assert len(figure(long_plan).to_json()) < FIGURE_BYTES


def test_a_long_schedule_draws_its_ends_bar_by_bar_and_its_steady_state_as_one_band(long_plan):
    fig = schedule_figure(long_plan)
    bars = {t.name: t for t in fig.data if t.type == "bar"}
    m, S = 1024, len(long_plan.stages)
    # The first and last WINDOW microbatches, a forward and a backward each on every stage.
    assert len(bars["forward"].x) == len(bars["backward"].x) == 2 * WINDOW_MICROBATCHES * S
    steady = bars["steady state"]
    assert list(steady.y) == list(range(S))
    middle = [o for o in long_plan.schedule.operations if WINDOW_MICROBATCHES <= o.microbatch < m - WINDOW_MICROBATCHES]
    for s, base, width in zip(steady.y, steady.base, steady.x):
        mine = [o for o in middle if o.device == s]
        assert base == pytest.approx(min(o.start_s for o in mine)) and base + width == pytest.approx(
            max(o.end_s for o in mine))
    assert "steady state" in fig.layout.title.text


def test_a_short_schedule_is_drawn_whole_and_the_legend_shows_the_bars_colours():
    par = Parallelism(tensor=8, pipeline=4, data=2, global_batch=MAX_DRAWN_MICROBATCHES * 2, microbatch_size=1)
    plan = evaluate_training(batch_builder("llama3-8b"), preset("dgx-h100", 64, calibrated=True), par, record=True)
    fig = schedule_figure(plan)
    names = {t.name for t in fig.data}
    assert "steady state" not in names
    bars = {t.name: t for t in fig.data if t.type == "bar"}
    assert len(bars["forward"].x) == MAX_DRAWN_MICROBATCHES * len(plan.stages)
    # Each legend entry's swatch is a plain square of its bars' colour (a patterned bar's swatch was white).
    swatches = {t.name: t.marker.color for t in fig.data if t.showlegend is not False and t.type == "scatter"}
    assert swatches == {"forward": OPERATION_COLORS["forward"], "backward": OPERATION_COLORS["backward"]}
    for name in ("forward", "backward"):
        assert bars[name].marker.color == swatches[name] and bars[name].showlegend is False
    legended = {t.name for t in fig.data if t.showlegend is not False}
    assert {"idle", "gradient reduction"} <= legended
    assert STEADY_COLOR not in swatches.values()


def test_the_memory_over_a_long_step_keeps_each_stages_peak(long_plan):
    fig = memory_timeline_figure(long_plan)
    lines = [t for t in fig.data if t.name and t.name.startswith("stage ")]
    assert len(lines) == len(long_plan.stages)
    for line, st in zip(lines, long_plan.stages):
        resident = st.weights_bytes + st.gradient_bytes + st.optimizer_bytes + st.fp8_bytes
        assert max(line.y) * 1e9 == pytest.approx(resident + st.activation_bytes, rel=1e-9)
        assert list(line.x) == sorted(line.x)


def test_the_memory_charts_legends_lie_below_the_plot_clear_of_the_toolbar(long_plan):
    """Plotly's toolbar sits at the top right of a chart: a legend above the plot of a half-width column wraps
    under it. The memory charts (the Training page's two columns) keep theirs below the plot."""
    for fig in (stage_memory_figure(long_plan), memory_timeline_figure(long_plan)):
        legend = fig.layout.legend
        assert legend.y < 0 and legend.yanchor == "top" and legend.x == 0, legend
        # The bars' and lines' legend entries are the traces' own colours (nothing hidden, nothing extra).
        assert all(t.showlegend is not False for t in fig.data if t.name)
