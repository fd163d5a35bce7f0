"""The Training page: its figures (ui/training_figures.py) on real plans, and the page under AppTest."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pase.hardware.cluster import Cluster
from pase.model.memory import MemoryOptions
from pase.model.training import Parallelism, evaluate_training
from pase.models import batch_builder
from ui.training_figures import (
    MAX_DEVICE_CELLS, device_coordinates, mesh_figure, schedule_figure, stage_memory_figure, stage_rows, time_unit,
)

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
BUILD = batch_builder("gpt", layers=4, d_model=64, heads=4, seq=32, vocab=256)
# Two nodes of four devices: the pipeline's neighbours differ in the node axis or the gpu axis by the sizes.
CLUSTER = Cluster(8, 10e12, 100e9, 2, 16e9, "small", 4, 10e9)

CONFIGS = {
    "1f1b": Parallelism(tensor=2, pipeline=2, data=2, global_batch=16),
    "interleaved": Parallelism(tensor=2, pipeline=2, data=2, global_batch=16, virtual_stages=2),
    "gpipe": Parallelism(tensor=4, pipeline=2, data=1, global_batch=8, schedule="gpipe"),
    "overlap, zero 1, p on both axes": Parallelism(pipeline=4, data=2, global_batch=16, overlap=True, zero=1),
    "interleaved v4, no data": Parallelism(tensor=2, pipeline=4, global_batch=8, virtual_stages=2,
                                           recompute="full"),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def plan(request):
    return evaluate_training(BUILD, CLUSTER, CONFIGS[request.param], record=True)


def op_bars(fig):
    """(kind, row, start, end, microbatch, chunk) of every forward and backward bar, in the axis's unit."""
    out = []
    for trace in fig.data:
        if trace.name in ("forward", "backward") and trace.type == "bar":  # not the legend's swatches
            for y, base, width, cd in zip(trace.y, trace.base, trace.x, trace.customdata):
                out.append((trace.name, y, base, base + width, cd[1], cd[2]))
    return out


def test_the_gantt_has_one_bar_per_operation(plan):
    p = plan.parallelism
    S, m, v = p.pipeline, p.microbatches, p.virtual_stages
    bars = op_bars(schedule_figure(plan))
    assert len(bars) == 2 * S * m * v
    # Every (kind, stage, microbatch, chunk) exactly once.
    assert {(k, y, mb, c) for k, y, _, _, mb, c in bars} == {
        (k, s, j, c) for k in ("forward", "backward") for s in range(S) for j in range(m) for c in range(v)}


def test_bars_on_one_row_never_overlap(plan):
    rows = defaultdict(list)
    for _, y, start, end, *_ in op_bars(schedule_figure(plan)):
        assert end >= start
        rows[y].append((start, end))
    for spans in rows.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-12 * max(1.0, end)


def test_the_last_bar_plus_the_exposed_reduction_is_the_step(plan):
    scale, _ = time_unit(plan.step_time_s)
    last = defaultdict(float)
    for _, y, _, end, *_ in op_bars(schedule_figure(plan)):
        last[y] = max(last[y], end)
    exposed = plan.schedule.exposed_reduce_s
    step = max(last[s] + exposed[s] / scale for s in range(plan.parallelism.pipeline))
    assert step == pytest.approx(plan.step_time_s / scale, rel=1e-9)


def test_the_gantt_shows_each_stages_reduction_and_the_unit():
    plan = evaluate_training(BUILD, CLUSTER, CONFIGS["1f1b"], record=True)
    fig = schedule_figure(plan)
    (reduction,) = [t for t in fig.data if t.name == "gradient reduction"]
    scale, unit = time_unit(plan.step_time_s)
    assert list(reduction.x) == pytest.approx([s.reduce_s / scale for s in plan.stages])
    assert unit in fig.layout.xaxis.title.text
    # Serial reduction: it starts where its stage's last backward ends.
    ends = defaultdict(float)
    for kind, y, _, end, *_ in op_bars(fig):
        if kind == "backward":
            ends[y] = max(ends[y], end)
    assert list(reduction.base) == pytest.approx([ends[s] for s in range(plan.parallelism.pipeline)])


def test_the_gantt_needs_a_recorded_schedule():
    plan = evaluate_training(BUILD, CLUSTER, CONFIGS["1f1b"])
    with pytest.raises(ValueError, match="record=True"):
        schedule_figure(plan)


def test_memory_bars_sum_to_each_stages_memory(plan):
    fig = stage_memory_figure(plan)
    totals = defaultdict(float)
    for trace in fig.data:
        for x, y in zip(trace.x, trace.y):
            totals[x] += y
    assert [totals[f"stage {s.index}"] for s in plan.stages] == pytest.approx(
        [s.memory_bytes / 1e9 for s in plan.stages], rel=1e-9)
    # The cluster has a capacity, so the default reserve (pase.model.memory.DEFAULT_RESERVE) is a part of its own.
    assert MemoryOptions().reserve_on(CLUSTER) > 0
    assert [t.name for t in fig.data] == ["weights", "gradients", "optimizer state", "activations", "transient",
                                          "reserve"]
    (line,) = fig.layout.shapes
    assert line.y0 == line.y1 == pytest.approx(plan.memory_capacity_bytes / 1e9)


def test_the_mesh_has_one_cell_per_device_coloured_by_its_stage(plan):
    fig = mesh_figure(plan)
    (heat,) = fig.data
    coords = device_coordinates(plan)
    cells = [(r, c, z) for r, row in enumerate(heat.z) for c, z in enumerate(row) if z is not None]
    assert len(cells) == CLUSTER.devices == len(coords)
    width = CLUSTER.mesh.shape[-1]
    for r, c, z in cells:
        assert z == coords[r * width + c][3]
    # A placement: every device has its own coordinates, each within its size.
    p = plan.parallelism
    assert len(set(coords)) == CLUSTER.devices
    assert {x[3] for x in coords} == set(range(p.pipeline))
    assert {x[2] for x in coords} == set(range(p.data))
    assert {x[0] for x in coords} == set(range(p.tensor))


def test_the_mesh_axes_tick_whole_cells_only(plan):
    """No node or GPU at -0.5 or 0.5: every tick is a cell's number, from the first cell, at most 16 a side."""
    big = Cluster(2048, 10e12, 100e9, 2, 16e9, "big", 8, 10e9)
    large = evaluate_training(BUILD, big, Parallelism(tensor=4, pipeline=2, data=256, global_batch=256))
    for fig in (mesh_figure(plan), mesh_figure(large)):
        rows, cols = len(fig.data[0].z), len(fig.data[0].z[0])
        for ticks, cells in ((fig.layout.xaxis.tickvals, cols), (fig.layout.yaxis.tickvals, rows)):
            assert ticks[0] == 0 and len(ticks) <= 16, ticks
            assert all(isinstance(t, int) and 0 <= t < cells for t in ticks), (ticks, cells)
            steps = {b - a for a, b in zip(ticks, ticks[1:])}
            assert len(steps) <= 1 and (cells <= 16) == (steps <= {1}), (ticks, cells)


@pytest.mark.parametrize("name, stage_of", [
    # t2 (gpu) then d2 (gpu) then p2: the pipeline spans the nodes.
    ("1f1b", lambda n: n // 4),
    # d2 (gpu), then p4 over the rest of the gpu axis and the nodes: node-major, inner gpu pair fastest.
    ("overlap, zero 1, p on both axes", lambda n: (n // 4) * 2 + (n % 4) // 2),
])
def test_each_devices_pipeline_coordinate_follows_the_mesh_layout(name, stage_of):
    plan = evaluate_training(BUILD, CLUSTER, CONFIGS[name], record=True)
    mesh = plan.to_dict()["mesh"]
    assert "node" in mesh["pipeline"]
    assert [c[3] for c in device_coordinates(plan)] == [stage_of(n) for n in range(CLUSTER.devices)]
    if name == "1f1b":
        assert [c[0] for c in device_coordinates(plan)] == [n % 2 for n in range(8)]
        assert [c[2] for c in device_coordinates(plan)] == [(n // 2) % 2 for n in range(8)]


def test_a_large_mesh_draws_one_cell_per_node():
    big = Cluster(2048, 10e12, 100e9, 2, 16e9, "big", 8, 10e9)
    plan = evaluate_training(BUILD, big, Parallelism(tensor=4, pipeline=2, data=256, global_batch=256))
    assert plan.parallelism.devices > MAX_DEVICE_CELLS
    fig = mesh_figure(plan)
    cells = [z for row in fig.data[0].z for z in row if z is not None]
    assert len(cells) == 256  # nodes
    assert sorted(set(cells)) == [0, 1]
    assert "one cell per node" in fig.layout.title.text


def test_the_stage_table_lists_every_stage():
    plan = evaluate_training(BUILD, CLUSTER, CONFIGS["interleaved"], record=True)
    rows = stage_rows(plan)
    assert [r["stage"] for r in rows] == [0, 1]
    assert sum(r["layer count"] for r in rows) == len(BUILD(1))
    assert rows[0]["forward ms"] == pytest.approx(plan.stages[0].forward_s * 1e3, rel=1e-3)
    assert rows[0]["layers"].count(";") == 1  # two chunks
    # Many chunks a stage (2 stages of 6 chunks each): the first two, "...", the last and how many.
    many = stage_rows(evaluate_training(BUILD, CLUSTER, replace(CONFIGS["interleaved"], virtual_stages=6)))
    assert all(r["layers"].count(";") == 3 and r["layers"].endswith("(6 chunks)") and "; ...; " in r["layers"]
               for r in many)


# -- the page ----------------------------------------------------------------------------------------

def page(model: str = "megatron-1.7b", preset: str = "dgx-a100", devices: int = 8, batch: int = 16) -> AppTest:
    """The Training page planning the sidebar's problem: ``model`` at a global ``batch`` on ``devices`` of ``preset``."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.sidebar.selectbox(key="in_sample").set_value(model).run()
    at.sidebar.selectbox(key="in_preset").set_value(preset).run()
    at.sidebar.number_input(key="in_devices").set_value(devices).run()
    at.sidebar.number_input(key=f"in_{model}_batch").set_value(batch).run()
    at.switch_page("pages/training.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_page_plans_the_sidebars_problem_and_offers_a_language_model_otherwise():
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("pages/training.py").run()
    assert not at.exception, [e.value for e in at.exception]
    # The app opens on a Transformer sample, planned per layer: the page says so and offers a language model ...
    assert any("not a language model" in i.value for i in at.info), [i.value for i in at.info]
    at.selectbox(key="tr_pick").set_value("megatron-1.7b").run()
    assert not at.exception, [e.value for e in at.exception]
    # ... which becomes the sidebar's, the problem of every page.
    assert at.sidebar.selectbox(key="in_sample").value == "megatron-1.7b"
    assert any(m.value.startswith("**megatron\\-1\\.7b**, global batch 512") for m in at.markdown), \
        [m.value for m in at.markdown]
    assert "tr_search" in [b.key for b in at.button]


def test_the_page_searches_and_shows_the_best_plan_runners_up_and_baselines():
    at = page(devices=2, batch=2)
    at.button(key="tr_search").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert [m.label for m in at.metric] == ["Step time", "Tokens/s", "MFU (of peak)", "HFU (of peak)",
                                            "Memory per device"]
    memory = next(m for m in at.metric if m.label == "Memory per device")
    assert "GB to spare" in memory.delta or "exceeds" in memory.delta, memory.delta
    assert any("published specification" in c.value for c in at.caption)
    ids = [c.proto.id for c in at.get("plotly_chart")]
    keys = ("tr_best_gantt", "tr_best_memory", "tr_best_memory_timeline", "tr_best_mesh")
    assert [any(i.endswith(k) for i in ids) for k in keys] == [True] * 4
    (runners,) = [df for df in at.dataframe if "slower than the best" in df.value.columns]
    plans = list(runners.value["plan"])
    assert plans[0] == "best" and "runner-up" in plans and "data parallel" in plans
    slower = [float(x.rstrip("%")) for x in runners.value["slower than the best"][1:]]
    assert all(x >= -1e-9 for x in slower[:plans.count("runner-up")]), "runners-up are never faster than the best"
    (stages,) = [df for df in at.dataframe if "in flight" in df.value.columns]
    assert len(stages.value) >= 1
    # The mode survives a trip to another page; the problem stays the sidebar's.
    at.switch_page("pages/explorer.py").run()
    at.switch_page("pages/training.py").run()
    assert at.radio(key="tr_mode").value == "Search the best plan"
    assert at.sidebar.number_input(key="in_devices").value == 2


def test_the_page_evaluates_a_configuration_and_names_impossible_ones():
    at = page()
    at.radio(key="tr_mode").set_value("Evaluate a configuration").run()
    for k, value in (("tr_t", 2), ("tr_p", 2), ("tr_v", 2)):
        at.number_input(key=k).set_value(value).run()
    assert not at.error, [e.value for e in at.error]
    assert any("d = 8 / (t p c) = 2" in m.value for m in at.markdown)
    at.button(key="tr_evaluate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.metric and any(c.proto.id.endswith("tr_eval_gantt") for c in at.get("plotly_chart"))
    # The memory over the step, in the tab beside the peak bars, with its caption: 2 chunks, evenly shared.
    (timeline,) = [c for c in at.get("plotly_chart") if c.proto.id.endswith("tr_eval_memory_timeline")]
    assert [t["name"] for t in json.loads(timeline.proto.spec)["data"]] == ["stage 0", "stage 1"]
    assert [t.label for t in at.tabs] == ["Peak", "Over the step"]
    assert any(c.value.startswith("Each stage's memory per device through the step") and "even share" in c.value
               for c in at.caption)
    # t = 3 does not divide 8 devices: a message, no exception.
    at.number_input(key="tr_t").set_value(3).run()
    assert not at.exception
    assert "does not divide the 8 devices" in at.error[0].value
    # A configuration pase refuses: 2 chunks per stage without the interleaved schedule.
    at.number_input(key="tr_t").set_value(2).run()
    at.selectbox(key="tr_schedule").set_value("gpipe").run()
    assert not at.exception
    assert "interleaved schedule" in at.error[0].value
    # And one that only the evaluation finds impossible: 3 data-parallel replicas of 2 devices do not tile the
    # 8 GPUs of a node (3 nodes of 8: t2 p4 d3).
    at.selectbox(key="tr_schedule").set_value("1f1b").run()
    at.number_input(key="tr_v").set_value(1).run()
    at.sidebar.number_input(key="in_devices").set_value(24).run()
    at.number_input(key="tr_p").set_value(4).run()
    at.sidebar.number_input(key="in_megatron-1.7b_batch").set_value(24).run()
    assert not at.error, [e.value for e in at.error]
    at.button(key="tr_evaluate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "does not fit the device mesh" in at.error[0].value
    assert not at.metric


def test_the_page_models_the_step_by_the_sidebars_step_time_model():
    """Calibrated by default on the DGX presets (the gradient reduction overlapped, as the search assumes there),
    the paper's peak rates on the paper's; the step differs between the two, and the page says which it is."""
    from pase.hardware.cluster import preset

    at = page()
    assert at.sidebar.radio(key="in_model").value == "calibrated"
    assert any(c.value.startswith("Step-time model: **calibrated**") for c in at.caption)
    at.radio(key="tr_mode").set_value("Evaluate a configuration").run()
    for k, value in (("tr_t", 2), ("tr_p", 2)):
        at.number_input(key=k).set_value(value).run()
    assert at.checkbox(key="tr_overlap_calibrated").value is True

    def step() -> str:
        at.button(key="tr_evaluate").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.error, [e.value for e in at.error]
        return next(m.value for m in at.metric if m.label == "Step time")

    calibrated = step()
    assert any("Step times by the calibrated model" in c.value for c in at.caption)
    at.sidebar.radio(key="in_model").set_value("peak").run()
    assert at.checkbox(key="tr_overlap_peak").value is False
    peak = step()
    assert peak != calibrated
    assert any("Step times at peak rates (the paper's model)" in c.value for c in at.caption)
    # Each model's step is pase's, on the preset with and without its calibration.
    from ui.fmt import fmt_time

    from pase.frameworks import framework_cuts
    from pase.ir.configs import ConfigOptions

    build = batch_builder("megatron-1.7b")
    for shown, calibrate in ((calibrated, True), (peak, False)):
        cluster = preset("dgx-a100", 8, calibrated=calibrate)
        par = Parallelism(tensor=2, pipeline=2, data=2, global_batch=16, overlap=calibrate)
        # The page's default framework, any, cuts the stages between whole transformer blocks.
        par = replace(par, stage_cuts=framework_cuts(None, build, cluster, par, ConfigOptions(), {}))
        assert shown == fmt_time(evaluate_training(build, cluster, par).step_time_s)


def test_the_page_overlaps_the_tensor_parallel_backward_under_the_calibrated_model_only():
    from pase.hardware.cluster import preset
    from ui.fmt import fmt_time

    at = page()
    at.radio(key="tr_mode").set_value("Evaluate a configuration").run()
    at.number_input(key="tr_t").set_value(4).run()
    assert at.checkbox(key="tr_tp_overlap").value is False and not at.checkbox(key="tr_tp_overlap").disabled
    at.checkbox(key="tr_tp_overlap").check().run()
    at.button(key="tr_evaluate").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    shown = next(m.value for m in at.metric if m.label == "Step time")
    par = Parallelism(tensor=4, data=2, global_batch=16, overlap=True, tp_overlap=True)
    cluster = preset("dgx-a100", 8, calibrated=True)
    assert shown == fmt_time(evaluate_training(batch_builder("megatron-1.7b"), cluster, par).step_time_s)
    assert shown != fmt_time(evaluate_training(batch_builder("megatron-1.7b"), cluster,
                                               replace(par, tp_overlap=False)).step_time_s)
    at.sidebar.radio(key="in_model").set_value("peak").run()
    assert at.checkbox(key="tr_tp_overlap").disabled


def test_the_export_menu_offers_the_plan_each_framework_runs_in_one_click():
    """With the framework "any", every framework's export is one download: the best plan's, or, where that
    framework cannot run it, the best plan it runs."""
    at = page(devices=8, batch=16)
    assert at.selectbox(key="tr_framework").value == "any"
    at.button(key="tr_search").click().run()
    assert not at.exception, [e.value for e in at.exception]
    for fmt, title in (("megatron", "Megatron-LM"), ("torchtitan", "torchtitan"), ("deepspeed", "DeepSpeed")):
        at.selectbox(key="tr_best_export_format").set_value(fmt).run()
        assert not at.exception, [e.value for e in at.exception]
        labels = {b.label for b in at.get("download_button")}
        assert f"Export ({fmt})" in labels or any(l.startswith(f"Export the best plan {title} runs") for l in labels), \
            (fmt, labels, [e.value for e in at.error])


@pytest.mark.parametrize("name,fmt", [("megatron", "megatron"), ("torchtitan", "torchtitan")])
def test_a_chosen_framework_exports_its_runnable_plan_in_one_click(name, fmt):
    """With one framework chosen, the searched plan is one it runs: its export is a single download whose text
    is the export of the plan the search found."""
    from pase.hardware.cluster import preset
    from pase.io.export import export_plan
    from pase.search.stages import search_training

    at = page(devices=8, batch=16)
    at.selectbox(key="tr_framework").set_value(name).run()
    at.button(key="tr_search").click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    at.selectbox(key="tr_best_export_format").set_value(fmt).run()
    assert not at.error, [e.value for e in at.error]
    assert [b.label for b in at.get("download_button")].count(f"Export ({fmt})") == 1
    # The plan offered is the search's for that framework, and it exports.
    plan = search_training(batch_builder("megatron-1.7b"), preset("dgx-a100", 8, calibrated=True), 16,
                           framework=name).best
    assert any(plan.label in m.value.replace("\\", "") for m in at.success), [m.value for m in at.success]
    assert export_plan(plan.to_dict(), fmt)


def test_a_mixture_of_experts_offers_its_expert_inputs_and_evaluates_with_deepep():
    at = page(model="qwen3-30b-a3b", preset="dgx-h100", devices=16, batch=64)
    # The search mode offers the dispatcher (the faster of the two unless one is named) and the routing; a named
    # one is what the search keeps.
    assert at.selectbox(key="tr_dispatcher_0").value == "the faster (searched)"
    at.selectbox(key="tr_dispatcher_0").set_value("alltoall").run()
    at.button(key="tr_search").click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    (table,) = [df.value for df in at.dataframe if "quantity" in df.value.columns]
    assert dict(zip(table["quantity"], table["value"]))["token dispatcher"].startswith("all-to-all")
    at.radio(key="tr_mode").set_value("Evaluate a configuration").run()
    for name, value in (("t", 1), ("p", 2), ("ep", 8)):
        at.number_input(key=f"tr_{name}").set_value(value).run()
    at.selectbox(key="tr_dispatcher_1").set_value("deepep").run()
    at.button(key="tr_evaluate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    (table,) = [df.value for df in at.dataframe if "quantity" in df.value.columns]
    rows = dict(zip(table["quantity"], table["value"]))
    assert rows["expert parallelism (EP)"].startswith("8 ") and rows["token dispatcher"].startswith("DeepEP")
    # Beside the step, how far the model was from the published mixture-of-experts runs on this preset.
    assert any(c.value.replace("\\", "").startswith("How far to trust the step: against 4 published "
                                                     "mixture-of-experts") for c in at.caption)
    # DeepEP keeps every token: asking it to drop some is refused on the page, in words, and nothing is lost.
    at.checkbox(key="tr_token_drop").check().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("DeepEP keeps every token" in e.value for e in at.error), [e.value for e in at.error]
    assert at.number_input(key="tr_ep").value == 8


def test_the_shared_expert_overlap_is_evaluated_and_a_refused_pair_is_said_in_words():
    at = page(model="deepseek-v3", preset="dgx-h100", devices=64, batch=64)
    at.radio(key="tr_mode").set_value("Evaluate a configuration").run()
    for name, value in (("t", 1), ("p", 4), ("ep", 8)):
        at.number_input(key=f"tr_{name}").set_value(value).run()
    at.checkbox(key="tr_shared_overlap").check().run()
    at.button(key="tr_evaluate").click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    (table,) = [df.value for df in at.dataframe if "quantity" in df.value.columns]
    assert "the shared experts run beside it" in dict(zip(table["quantity"], table["value"]))[
        "dispatch and combine per step (busiest device)"]
    # With the 1F1B overlap too: refused on the page, in one sentence; the inputs stay.
    at.checkbox(key="tr_ep_overlap").check().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("one or the other" in e.value for e in at.error), [e.value for e in at.error]
    assert at.checkbox(key="tr_shared_overlap").value and at.number_input(key="tr_ep").value == 8


def test_mxfp8_is_refused_by_name_off_blackwell_and_priced_on_a_b200():
    # The sidebar offers every FP8 recipe on an FP8 GPU; MXFP8 needs Blackwell's tensor cores: on an H100 the page
    # says so in one message and keeps the choice, on a B200 it prices the plan in MXFP8.
    at = page(preset="dgx-h100", devices=2, batch=2)
    assert "mxfp8" in at.sidebar.selectbox(key="in_precision").options
    at.sidebar.selectbox(key="in_precision").set_value("mxfp8").run()
    at.button(key="tr_search").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("MXFP8" in e.value and "B200" in e.value for e in at.error), [e.value for e in at.error]
    assert at.sidebar.selectbox(key="in_precision").value == "mxfp8"
    at.sidebar.selectbox(key="in_preset").set_value("dgx-b200").run()
    at.button(key="tr_search").click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    assert any("precision mxfp8 (MXFP8 block scaling)" in c.value for c in at.caption), [c.value for c in at.caption]


def test_the_search_sets_nvidias_published_layout_for_the_problem_beside_its_plans():
    # Section 3b's Llama 3 8B problem (8 H100s, GBS 128 of 8,192 tokens, FP8-CS): NVIDIA's FSDP layout, run in 25.09
    # and 25.11, priced at pase's best for what the tables leave out, among the baselines.
    at = page(model="llama3-8b", preset="dgx-h100", devices=8, batch=128)
    at.sidebar.selectbox(key="in_precision").set_value("fp8-cs").run()
    at.button(key="tr_search").click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    (runners,) = [df for df in at.dataframe if "slower than the best" in df.value.columns]
    table = runners.value
    (row,) = table[table["plan"] == "NVIDIA's layout (25.09, 25.11)"].to_dict("records")
    assert row["configuration"].startswith("t1 p1 d8 mb1 1f1b zero3") and float(row["slower than the best"][:-1]) >= 0
    assert any("TP 1 PP 1 CP 1 VP 1 EP 1, MBS 1, FSDP 8: 25.09 9.31 s, 25.11 9.07 s" in c.value.replace("\\", "")
               for c in at.caption), [c.value for c in at.caption]
