"""The memory-over-the-step figure of a training plan (ui/training_figures.memory_timeline_figure) against an
independent count of the microbatches each device holds, from the recorded schedule."""

from __future__ import annotations

import pytest

from pase.hardware.cluster import Cluster
from pase.model.training import Parallelism, evaluate_training
from pase.models import batch_builder
from ui.fmt import fmt_time
from ui.training_figures import memory_timeline_figure, plans_figure, stage_memory_figure, time_unit

BUILD = batch_builder("gpt", layers=4, d_model=64, heads=4, seq=32, vocab=256)
# Two nodes of four devices, 16 GB each.
CLUSTER = Cluster(8, 10e12, 100e9, 2, 16e9, "small", 4, 10e9)
CONFIGS = {
    "1f1b": Parallelism(pipeline=4, data=2, global_batch=16),
    "interleaved": Parallelism(tensor=2, pipeline=4, global_batch=8, virtual_stages=2),
    "gpipe": Parallelism(tensor=2, pipeline=4, global_batch=8, schedule="gpipe"),
    "zb1p": Parallelism(pipeline=4, data=2, global_batch=16, schedule="zb1p"),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def plan(request):
    return evaluate_training(BUILD, CLUSTER, CONFIGS[request.param], record=True)


def lines(plan):
    """Per stage, its line's (x, y in GB)."""
    fig = memory_timeline_figure(plan)
    assert [t.name for t in fig.data] == [f"stage {s.index}" for s in plan.stages]
    return [(list(t.x), list(t.y)) for t in fig.data]


def resident(st) -> float:
    return st.weights_bytes + st.gradient_bytes + st.optimizer_bytes


def held(plan, device: int, t: float) -> int:
    """Chunk-microbatches device ``device`` holds just after time ``t`` (in the axis's unit): forwards begun by
    then less backwards (under zero bubble: weight gradients) ended by then, counted afresh from the recorded
    operations."""
    scale, _ = time_unit(plan.step_time_s)
    mine = [o for o in plan.schedule.operations if o.device == device]
    frees = "W" if plan.parallelism.schedule == "zb1p" else "B"
    return (sum(o.kind == "F" and o.start_s / scale <= t for o in mine)
            - sum(o.kind == frees and o.end_s / scale <= t for o in mine))


def test_each_point_is_the_resident_memory_plus_the_microbatches_held_then(plan):
    v = plan.parallelism.virtual_stages
    for st, (xs, ys) in zip(plan.stages, lines(plan)):
        per_chunk = st.activation_bytes / (st.in_flight * v)  # one chunk-microbatch's share
        for x, y in zip(xs, ys):
            assert y * 1e9 == pytest.approx(resident(st) + held(plan, st.index, x) * per_chunk, rel=1e-12)


def test_the_peak_holds_in_flight_microbatches_as_the_memory_model_counts_them(plan):
    p = plan.parallelism
    S, m, v = p.pipeline, p.microbatches, p.virtual_stages
    for st, (xs, _) in zip(plan.stages, lines(plan)):
        peak = max(held(plan, st.index, x) for x in xs) / v
        s = st.index
        # Megatron's counts by hand: 1F1B keeps S - s, interleaved its warm-up forwards plus one (a chunk 1/v),
        # GPipe every microbatch; ZB-H1 S - s - 1 warm-up forwards, s pairs whose weight gradients wait, one more.
        expected = {"1f1b": min(S - s, m), "gpipe": m, "zb1p": min(S, m),
                    "interleaved": min(m * v, (S - s - 1) * 2 + (v - 1) * S + 1) / v}[p.schedule]
        assert peak == pytest.approx(expected) == pytest.approx(st.in_flight)


def test_the_line_peaks_at_the_bars_memory_without_transient_and_reserve(plan):
    bars = {t.name: list(t.y) for t in stage_memory_figure(plan).data}
    for i, (st, (_, ys)) in enumerate(zip(plan.stages, lines(plan))):
        assert max(ys) * 1e9 == pytest.approx(resident(st) + st.activation_bytes, rel=1e-12)
        reserve = bars["reserve"][i] * 1e9 if "reserve" in bars else 0.0
        assert max(ys) * 1e9 == pytest.approx(st.memory_bytes - st.transient_bytes - reserve, rel=1e-12)
        # After the last backward only the resident memory remains, the least the line reaches.
        assert ys[-1] * 1e9 == pytest.approx(resident(st), rel=1e-12)
        assert min(ys) == ys[-1]


def test_the_time_axis_is_the_gantts_and_spans_the_step(plan):
    scale, unit = time_unit(plan.step_time_s)
    fig = memory_timeline_figure(plan)
    assert unit in fig.layout.xaxis.title.text
    for xs, _ in lines(plan):
        assert xs[0] == 0.0 and xs[-1] == pytest.approx(plan.step_time_s / scale)
        assert xs == sorted(xs)
    (capacity,) = fig.layout.shapes
    assert capacity.line.dash == "dash"
    assert capacity.y0 == capacity.y1 == pytest.approx(CLUSTER.memory_bytes / 1e9)
    assert "transient" in fig.layout.title.text


def test_the_timeline_needs_a_recorded_schedule():
    with pytest.raises(ValueError, match="record=True"):
        memory_timeline_figure(evaluate_training(BUILD, CLUSTER, CONFIGS["1f1b"]))


def test_the_gantt_draws_a_zero_bubble_schedules_weight_gradients_as_bars_of_their_own():
    from ui.training_figures import schedule_figure

    plan = evaluate_training(BUILD, CLUSTER, CONFIGS["zb1p"], record=True)
    bars = {t.name: t for t in schedule_figure(plan).data if t.type == "bar"}
    p = plan.parallelism
    weights = [o for o in plan.schedule.operations if o.kind == "W"]
    assert len(weights) == p.pipeline * p.microbatches == len(bars["weight gradient"].x)
    # Each weight gradient after its own input gradient, on the same device.
    backward = {(o.device, o.chunk, o.microbatch): o for o in plan.schedule.operations if o.kind == "B"}
    assert all(w.start_s >= backward[w.device, w.chunk, w.microbatch].end_s - 1e-15 for w in weights)


def test_a_plan_that_does_not_fit_has_no_bar_and_says_so_on_its_row():
    """Compare's 3-D chart: the fitting plans as bars labelled with their time; a plan that does not fit (here on
    devices of 1 MB) has none, and its row reads "does not fit in memory" with what it needs, drawn where a reader
    looks for the bar (a bar's own label needs a bar: plotly draws none for a missing one)."""
    fits = evaluate_training(BUILD, CLUSTER, CONFIGS["1f1b"])
    tight = Cluster(8, 10e12, 100e9, 2, 1e6, "tiny", 4, 10e9)
    too_big = evaluate_training(BUILD, tight, CONFIGS["1f1b"])
    assert fits.fits_memory and too_big.fits_memory is False
    fig = plans_figure({"PaSE": fits, "data parallel": too_big}, "PaSE")
    bars, labels = fig.data
    assert list(bars.y) == ["PaSE", "data parallel"] and bars.x[1] is None and bars.x[0] > 0
    assert bars.text[0].startswith(fmt_time(fits.step_time_s)) and not bars.text[1]
    assert list(labels.y) == ["data parallel"] and labels.x[0] == 0 and labels.mode == "text"
    assert labels.text[0] == f"does not fit in memory (needs {too_big.memory_per_device_bytes / 1e9:.3g} GB)"
