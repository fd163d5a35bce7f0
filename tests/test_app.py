"""The Streamlit app under streamlit.testing.v1.AppTest: every page loads, Solve draws, errors are shown."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGES = ["pages/explorer.py", "pages/compare.py", "pages/what-if.py", "pages/training.py", "pages/learn.py"]
TIMEOUT_S = 120
EXAMPLE = (ROOT / "docs" / "example-graph.json").read_bytes()



def shown(element) -> str:
    """An element's markdown as the reader sees it: the app escapes user text with backslashes."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", element.value)

def new_app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest, key: str) -> list:
    """Plotly charts whose element id ends with ``key``."""
    return [c for c in at.get("plotly_chart") if c.proto.id.endswith(key)]


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def solve(at: AppTest, key: str = "solve") -> AppTest:
    at.button(key=key).click().run()
    no_exception(at)
    return at


def open_tab(at: AppTest, label: str, key: str = "ex_tab") -> AppTest:
    """Open the tab ``label`` of the tabs ``key``: only the open one is built (``on_change="rerun"``)."""
    at.session_state[key] = label
    at.run()
    no_exception(at)
    return at


def choose_sample(at: AppTest, name: str, devices: int = 4) -> AppTest:
    at.selectbox(key="in_sample").set_value(name).run()
    at.number_input(key="in_devices").set_value(devices).run()
    no_exception(at)
    return at


@pytest.mark.parametrize("page", PAGES)
def test_every_page_loads_without_exception(page):
    at = new_app()
    at.switch_page(page).run()
    no_exception(at)
    assert at.title, "every page has a title"
    assert not at.error, [e.value for e in at.error]
    # Under the router: AppTest starts every run afresh, in Streamlit's folder mode for pages/
    # (ui.pagekit.routed), and the page still has the shared sidebar.
    assert at.number_input(key="in_devices").value == 16


def test_the_default_problem_shows_a_strategy_worth_finding():
    """The app opens on a Transformer on two DGX H100 nodes, where the search beats data parallelism clearly:
    under the calibrated model it opens with (flash attention; a mix of kinds), and at peak rates (a mix of data,
    hybrid and tensor parallelism, 1.6x)."""
    at = new_app()
    assert at.selectbox(key="in_sample").value == "transformer"
    assert at.selectbox(key="in_preset").value == "dgx-h100"
    assert at.number_input(key="in_devices").value == 16
    assert at.radio(key="in_model").value == "calibrated"
    solve(at)
    assert not at.error, [e.value for e in at.error]
    speedup = float(at.metric[1].value.rstrip("×"))
    assert speedup > 1.6, speedup  # about 2x at this writing; margin for refits of the calibration
    open_tab(at, "Configurations (Table II)")
    kinds = set(at.dataframe[0].value["parallelism"])
    assert "tensor" in kinds and len(kinds - {"replicated"}) >= 2, kinds
    at.radio(key="in_model").set_value("peak").run()
    solve(at)
    speedup = float(at.metric[1].value.rstrip("×"))
    assert speedup > 1.5, speedup
    open_tab(at, "Configurations (Table II)")
    kinds = set(at.dataframe[0].value["parallelism"])
    assert {"data", "hybrid", "tensor"} <= kinds, kinds


def test_explorer_explains_each_layer_with_its_runner_up():
    at = choose_sample(new_app(), "alexnet", devices=4)
    open_tab(solve(at), "Configurations (Table II)")
    at.toggle(key="ex_why").set_value(True).run(timeout=60)
    assert not at.error, [e.value for e in at.error]
    table = at.dataframe[0].value
    assert {"runner_up", "runner_up_slower_ms"} <= set(table.columns)
    # The plan is the unconstrained optimum: no single layer's change makes it faster.
    assert (table["runner_up_slower_ms"].dropna() >= -1e-9).all()
    assert table["runner_up"].str.startswith("(").any()


def test_explorer_shows_the_structure_before_solving():
    # A problem no other test solves: the plans are cached for the whole process.
    at = choose_sample(new_app(), "resnet101", devices=3)
    (graph,) = charts(at, "graph_chart")
    assert "Not solved yet" in graph.proto.spec
    assert not at.metric


def test_explorer_solve_draws_the_strategy_graph_and_table():
    at = choose_sample(new_app(), "alexnet", devices=8)
    solve(at)
    assert not at.error, [e.value for e in at.error]
    (graph,) = charts(at, "graph_chart")
    spec = json.loads(graph.proto.spec)
    names = {t.get("name") for t in spec["data"]}
    assert names & {"data", "tensor", "hybrid", "replicated"}, names
    assert charts(at, "breakdown_chart")
    assert not charts(at, "memory_chart") and not at.dataframe, "only the open tab is built"
    at.selectbox(key="ex_sort").set_value("compute").run()
    open_tab(at, "Memory per device")
    assert charts(at, "memory_chart") and not charts(at, "breakdown_chart")
    open_tab(at, "Configurations (Table II)")
    assert len(at.dataframe) == 1
    open_tab(at, "Per-layer cost breakdown")
    assert at.selectbox(key="ex_sort").value == "compute", "a closed tab's choices are kept"
    open_tab(at, "Configurations (Table II)")
    labels = [m.label for m in at.metric]
    assert labels == ["Estimated step time", "Speedup over data parallelism", "Search time", "Largest dependent set"]
    speedup = at.metric[1].value
    assert speedup.endswith("×") and float(speedup[:-1]) >= 0.999, "the optimum never loses to data parallelism"
    table = at.dataframe[0].value
    assert {"layer", "configuration", "parallelism", "total_ms"} <= set(table.columns)
    assert len(table) == 13  # alexnet's layers
    assert {b.label for b in at.get("download_button")} >= {"Strategy (JSON)", "Table (CSV)"}


def test_solving_again_is_cached():
    at = choose_sample(new_app(), "alexnet")
    solve(at)
    first = charts(at, "graph_chart")[0].proto.spec
    from ui.state import Problem, cached_plan

    problem = at.session_state["_problem"]
    assert isinstance(problem, Problem) and cached_plan(problem) is not None
    solve(at)
    assert charts(at, "graph_chart")[0].proto.spec == first


def test_find_a_layer_highlights_it_and_grouping_can_expand():
    at = choose_sample(new_app(), "inception3", devices=4)
    solve(at)
    assert at.toggle(key="ex_group").value is True, "a 219-layer graph is grouped by default"
    grouped = json.loads(charts(at, "graph_chart")[0].proto.spec)
    grouped_nodes = sum(len(t["x"]) for t in grouped["data"] if t.get("legendgroup") == "kinds")
    assert grouped_nodes < 80
    at.selectbox(key="ex_find_inception3").set_value("Mixed_5b.branch1x1").run()
    no_exception(at)
    spec = json.loads(charts(at, "graph_chart")[0].proto.spec)
    assert any(t.get("name") == "found" for t in spec["data"])
    at.toggle(key="ex_group").set_value(False).run()
    no_exception(at)
    full = json.loads(charts(at, "graph_chart")[0].proto.spec)
    assert sum(len(t["x"]) for t in full["data"] if t.get("legendgroup") == "kinds") == 219


def test_bad_upload_shows_an_error_and_the_app_keeps_working():
    at = new_app()
    at.number_input(key="in_devices").set_value(8).run()
    at.radio(key="in_graph_kind").set_value("Upload").run()
    no_exception(at)
    at.file_uploader(key="in_upload").upload("broken.json", b"{not json", "application/json").run()
    no_exception(at)
    assert at.error and "not valid JSON" in shown(at.error[0])
    assert at.number_input(key="in_devices").value == 8, "the other inputs are kept"

    # A file in the right format whose graph is wrong: the message names the problem.
    bad = json.loads(EXAMPLE)
    bad["layers"][1]["inputs"] = ["nowhere"]
    at.file_uploader(key="in_upload").clear().upload("bad.json", json.dumps(bad).encode(), "application/json").run()
    no_exception(at)
    assert at.error and "nowhere" in shown(at.error[0])

    # A good file works after the bad ones.
    at.file_uploader(key="in_upload").clear().upload("tiny.json", EXAMPLE, "application/json").run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    open_tab(solve(at), "Configurations (Table II)")
    assert charts(at, "graph_chart") and len(at.dataframe[0].value) == 4

    # And so does going back to the samples.
    at.radio(key="in_graph_kind").set_value("Sample").run()
    no_exception(at)
    assert not at.error


def test_an_onnx_upload_is_solved():
    pytest.importorskip("onnx")
    model = ROOT / "tests" / "data" / "onnx" / "mlp.onnx"
    if not model.exists():
        pytest.skip("no ONNX fixture")
    at = new_app()
    at.radio(key="in_graph_kind").set_value("Upload").run()
    at.file_uploader(key="in_upload").upload("mlp.onnx", model.read_bytes(), "application/octet-stream").run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    solve(at)
    assert charts(at, "graph_chart") and at.metric


def test_a_search_too_large_is_reported_not_raised(monkeypatch):
    import ui.jobs
    import ui.solving
    from pase.errors import SearchTooLargeError

    run = ui.jobs.run

    def refuse_searches(fn, *args, **kwargs):
        # What the worker sends back when the search refuses (the worker's own path is tested in test_jobs).
        if fn is ui.solving.plan_and_data_parallel:
            raise SearchTooLargeError("the search would hold 1e30 table entries; use fewer devices")
        return run(fn, *args, **kwargs)

    # Six devices: a problem no other test solves, so nothing is cached.
    at = choose_sample(new_app(), "alexnet", devices=6)
    with monkeypatch.context() as m:
        m.setattr(ui.jobs, "run", refuse_searches)
        solve(at)
    assert at.error and "SearchTooLargeError" in shown(at.error[0]) and "fewer devices" in shown(at.error[0])
    assert not at.metric
    # The app still answers afterwards, with the user's inputs kept.
    assert at.selectbox(key="in_sample").value == "alexnet"
    solve(at)
    assert not at.error and at.metric


def test_cluster_preset_fills_the_fields_and_edits_make_it_custom():
    at = new_app()
    at.selectbox(key="in_preset").set_value("dgx-a100").run()
    no_exception(at)
    assert at.number_input(key="in_tflops").value == pytest.approx(312)
    assert at.number_input(key="in_bandwidth").value == pytest.approx(300)
    at.number_input(key="in_bandwidth").set_value(100.0).run()
    assert at.selectbox(key="in_preset").value == "custom"


# -- the step-time model: calibrated on the modern presets, the paper's peak rates on the paper's ------------

def model_captions(at: AppTest) -> list[str]:
    return [shown(c) for c in at.caption if c.value.startswith("Step-time model")]


def test_the_step_time_model_defaults_to_calibrated_on_dgx_presets_and_to_peak_on_the_papers():
    from pase.hardware.cluster import CALIBRATIONS

    at = new_app()
    model = at.radio(key="in_model")
    assert model.value == "calibrated" and not model.disabled
    assert at.session_state["_problem"].cluster.efficiency == CALIBRATIONS["dgx-h100"]
    (caption,) = model_captions(at)
    assert "**calibrated**, with dgx-h100's calibration" in caption and "same GH100 chip" in caption, caption
    for name in ("paper-1080ti", "paper-2080ti", "paper-model", "dgx1-v100"):
        at.selectbox(key="in_preset").set_value(name).run()
        no_exception(at)
        assert at.radio(key="in_model").value == "peak", name
        assert at.session_state["_problem"].cluster.efficiency is None, name
        assert "**peak rates** (the paper's)" in model_captions(at)[0]
    assert at.radio(key="in_model").disabled, "dgx1-v100 has no calibration: peak rates only"
    at.selectbox(key="in_preset").set_value("dgx-a100").run()
    assert at.radio(key="in_model").value == "calibrated", "a preset switch resets the default"
    assert at.session_state["_problem"].cluster.efficiency == CALIBRATIONS["dgx-a100"]
    assert "fitted to Korthikanti Table 5" in model_captions(at)[0]


def test_an_explicit_step_time_model_survives_preset_switches_and_edits():
    from pase.hardware.cluster import CALIBRATIONS

    at = new_app()
    at.radio(key="in_model").set_value("peak").run()
    assert at.session_state["_problem"].cluster.efficiency is None
    at.selectbox(key="in_preset").set_value("dgx-b200").run()
    assert at.radio(key="in_model").value == "peak", "the user's choice is kept"
    at.selectbox(key="in_preset").set_value("dgx1-v100").run()  # no calibration: peak, disabled
    assert at.radio(key="in_model").value == "peak" and at.radio(key="in_model").disabled
    at.selectbox(key="in_preset").set_value("dgx-h200").run()
    assert at.radio(key="in_model").value == "peak", "the explicit choice outlives a preset without a calibration"
    at.radio(key="in_model").set_value("calibrated").run()
    at.selectbox(key="in_preset").set_value("paper-1080ti").run()
    assert at.radio(key="in_model").value == ("calibrated" if "paper-1080ti" in CALIBRATIONS else "peak")
    # An edited figure keeps the calibration of the preset the fields came from, with the user's peak.
    at.selectbox(key="in_preset").set_value("dgx-h100").run()
    at.number_input(key="in_tflops").set_value(500.0).run()
    cluster = at.session_state["_problem"].cluster
    assert at.selectbox(key="in_preset").value == "custom" and cluster.peak_flops == 500e12
    assert cluster.efficiency == CALIBRATIONS["dgx-h100"]
    assert any("Edited figures on dgx-h100's calibration" in c.value for c in at.sidebar.caption)
    assert "figures edited from dgx-h100's keep its calibration" in model_captions(at)[0]


def test_the_calibrated_step_time_is_longer_than_the_peak_models_and_cached_apart():
    """AlexNet on 4 H100s is compute bound: kernels below the peak make its step longer than at peak rates."""
    from pase.hardware.cluster import preset
    from pase.models import sample
    from pase.planner import plan
    from ui.state import cached_plan

    at = choose_sample(new_app(), "alexnet", devices=4)
    solve(at)
    calibrated_problem = at.session_state["_problem"]
    calibrated = cached_plan(calibrated_problem)
    shown_calibrated = at.metric[0].value
    assert "roofline" in at.metric[0].help
    at.radio(key="in_model").set_value("peak").run()
    assert cached_plan(at.session_state["_problem"]) is None, "the cache keys on the cluster with its calibration"
    solve(at)
    peak_problem = at.session_state["_problem"]
    peak = cached_plan(peak_problem)
    assert peak_problem != calibrated_problem and hash(peak_problem.cluster) != hash(calibrated_problem.cluster)
    assert at.metric[0].value != shown_calibrated and "peak FLOP/s" in at.metric[0].help
    totals, peak_totals = calibrated.totals_s(), peak.totals_s()
    assert totals["compute_s"] > 2 * totals["intra_comm_s"] + totals["edge_comm_s"], "compute bound"
    assert calibrated.step_time_s > peak.step_time_s and totals["compute_s"] > peak_totals["compute_s"]
    # The numbers are pase's on the preset with and without its calibration (pase solve --calibrated).
    graph = sample("alexnet")
    assert calibrated.step_time_s == pytest.approx(plan(graph, preset("dgx-h100", 4, calibrated=True)).step_time_s,
                                                   rel=1e-9)
    assert peak.step_time_s == pytest.approx(plan(graph, preset("dgx-h100", 4, calibrated=False)).step_time_s, rel=1e-9)


def test_compare_and_learn_say_which_model_prices_them():
    at = choose_sample(new_app(), "alexnet", devices=8)
    at.switch_page("pages/compare.py").run()
    assert "**calibrated**" in model_captions(at)[0]
    at.radio(key="in_model").set_value("peak").run()
    assert "**peak rates**" in model_captions(at)[0]
    at.radio(key="in_model").set_value("calibrated").run()
    at.switch_page("pages/learn.py").run()
    no_exception(at)
    assert any("at peak rates (the paper's model" in m.value for m in at.markdown)


def test_the_what_if_sweep_prices_every_gpu_type_by_the_chosen_model(monkeypatch):
    from pase.analysis import sweep as sweep_module
    from pase.hardware.cluster import preset
    from pase.models import sample
    from pase.planner import plan

    written = []
    real = sweep_module.records_csv
    monkeypatch.setattr(sweep_module, "records_csv", lambda records: (written.append(list(records)), real(records))[1])
    at = choose_sample(new_app(), "alexnet")
    at.switch_page("pages/what-if.py").run()
    at.multiselect(key="wi_devices").set_value([2, 4]).run()
    at.multiselect(key="wi_gpus").set_value(["dgx-h100", "dgx-a100"]).run()

    def pase_steps() -> dict:
        at.button(key="wi_run").click().run()
        no_exception(at)
        assert not at.error, [e.value for e in at.error]
        return {(r["cluster"], r["devices"]): r["step_time_s"] for r in written[-1] if r["strategy"] == "PaSE"}

    calibrated = pase_steps()
    for name in ("dgx-h100", "dgx-a100"):  # a line per GPU type, naming it and its calibration
        line = f"**{name}**: Step-time model: **calibrated**, with {name}'s calibration"
        assert sum(shown(c).startswith(line) for c in at.caption) == 1, name
    assert any("Step times by the calibrated model" in c.value for c in at.caption)
    graph = sample("alexnet")
    for name in ("dgx-h100", "dgx-a100"):  # each GPU type with its own calibration
        assert calibrated[(name, 2)] == pytest.approx(plan(graph, preset(name, 2, calibrated=True)).step_time_s,
                                                      rel=1e-9), name
    at.radio(key="in_model").set_value("peak").run()
    peak = pase_steps()
    assert all(calibrated[k] > peak[k] for k in peak), (calibrated, peak)
    assert peak[("dgx-a100", 2)] == pytest.approx(plan(graph, preset("dgx-a100", 2, calibrated=False)).step_time_s, rel=1e-9)
    assert any("Step times at peak rates (the paper's model)" in c.value for c in at.caption)
    # A GPU type without a calibration beside calibrated ones is priced at peak rates, and the page says so.
    at.radio(key="in_model").set_value("calibrated").run()
    at.multiselect(key="wi_gpus").set_value(["dgx-h100", "dgx1-v100"]).run()
    no_exception(at)
    assert any("dgx1-v100" in shown(w) and "no calibration" in w.value for w in at.warning)


def test_compare_page_shows_baselines_and_differences():
    at = choose_sample(new_app(), "alexnet", devices=8)
    at.switch_page("pages/compare.py").run()
    solve(at, "solve_compare")
    assert not at.error, [e.value for e in at.error]
    assert charts(at, "cmp_totals")
    totals = at.dataframe[0].value
    assert {"PaSE", "data parallel"} <= set(totals["strategy"])
    assert (totals["PaSE speedup (×)"] >= 0.999).all(), "the optimum is never slower than a baseline"


def test_compare_and_what_if_name_the_parameter_parallel_baseline_as_the_other_pages_name_its_split():
    """Issue 30: the Explorer and Training pages call a split of the model's dimensions "tensor"; Compare and
    What-if name the paper's "parameter parallel" baseline with both words, while the library and the CLI keep
    the paper's name."""
    from pase.strategies.baselines import BASELINES

    assert "parameter parallel" in BASELINES
    at = choose_sample(new_app(), "alexnet", devices=8)
    at.switch_page("pages/compare.py").run()
    solve(at, "solve_compare")
    names = set(at.dataframe[0].value["strategy"])
    assert "parameter (tensor) parallel" in names and "parameter parallel" not in names, names
    assert "parameter (tensor) parallel" in at.multiselect(key="cmp_chosen").options
    at.switch_page("pages/what-if.py").run()
    at.multiselect(key="wi_devices").set_value([2, 4]).run()
    at.button(key="wi_run").click().run()
    no_exception(at)
    assert "parameter (tensor) parallel" in at.multiselect(key="wi_strategies").options
    assert "parameter parallel" not in at.multiselect(key="wi_strategies").options


def test_compare_page_accepts_a_user_plan():
    at = choose_sample(new_app(), "alexnet", devices=8)
    at.switch_page("pages/compare.py").run()
    solve(at, "solve_compare")
    at.file_uploader(key="cmp_user_plan").upload("plan.json", json.dumps({"fc6": [1, 8, 1]}).encode(),
                                                 "application/json").run()
    no_exception(at)
    assert "your plan" in set(at.dataframe[0].value["strategy"])
    at.file_uploader(key="cmp_user_plan").clear().upload("plan.json", json.dumps({"fc6": [3, 1, 1]}).encode(),
                                                         "application/json").run()
    no_exception(at)
    assert at.error and "Cannot use this plan" in shown(at.error[0])


def test_compare_page_recosts_a_downloaded_plan_to_the_same_step_time():
    at = choose_sample(new_app(), "alexnet", devices=8)
    at.switch_page("pages/compare.py").run()
    solve(at, "solve_compare")
    from ui.state import cached_plan

    found = cached_plan(at.session_state["_problem"])
    # What the explorer's "Strategy (JSON)" download and `pase solve --json` write.
    at.file_uploader(key="cmp_user_plan").upload("alexnet-p8-strategy.json", json.dumps(found.to_dict()).encode(),
                                                 "application/json").run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    totals = at.dataframe[0].value.set_index("strategy")
    assert totals.loc["your plan", "step time (ms)"] == pytest.approx(totals.loc["PaSE", "step time (ms)"], rel=1e-9)


@pytest.mark.parametrize("content,match", [
    (b"{not json", "not valid JSON"),
    (b'{"fc6": [1, 2.5, 1]}', "layer 'fc6': split factor 2.5"),
    (b'{"nosuchlayer": [1, 8, 1]}', "nosuchlayer"),
])
def test_compare_page_names_what_is_wrong_with_a_plan_file(content, match):
    at = choose_sample(new_app(), "alexnet", devices=8)
    at.switch_page("pages/compare.py").run()
    solve(at, "solve_compare")
    at.file_uploader(key="cmp_user_plan").upload("plan.json", content, "application/json").run()
    no_exception(at)
    assert at.error and "Cannot use this plan" in shown(at.error[0]) and match in shown(at.error[0])
    assert "your plan" not in set(at.dataframe[0].value["strategy"])


def test_what_if_batch_sweep_plots_one_series_per_batch():
    at = choose_sample(new_app(), "alexnet")
    at.switch_page("pages/what-if.py").run()
    at.multiselect(key="wi_devices").set_value([2, 4]).run()
    at.selectbox(key="wi_vary").set_value("batch size").run()
    at.text_input(key="wi_values_batch").set_value("32, 64").run()
    at.button(key="wi_run").click().run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    spec = json.loads(charts(at, "wi_sweep")[0].proto.spec)
    names = {t.get("name", "") for t in spec["data"]}
    assert {"PaSE @ 32 batch", "PaSE @ 64 batch"} <= names, names
    assert charts(at, "wi_splits")


def test_what_if_batch_size_is_for_sample_graphs_only():
    at = new_app()
    at.radio(key="in_graph_kind").set_value("Upload").run()
    at.file_uploader(key="in_upload").upload("tiny.json", EXAMPLE, "application/json").run()
    at.switch_page("pages/what-if.py").run()
    at.selectbox(key="wi_vary").set_value("batch size").run()
    no_exception(at)
    assert any("only vary for sample graphs" in w.value for w in at.warning)


def test_what_if_sweep_plots_step_time_and_splits():
    at = choose_sample(new_app(), "alexnet")
    at.switch_page("pages/what-if.py").run()
    at.multiselect(key="wi_devices").set_value([2, 4, 8]).run()
    at.button(key="wi_run").click().run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert charts(at, "wi_sweep")
    assert charts(at, "wi_splits")
    at.selectbox(key="wi_vary").set_value("link bandwidth (GB/s)").run()
    at.button(key="wi_run").click().run()
    no_exception(at)
    spec = json.loads(charts(at, "wi_sweep")[0].proto.spec)
    assert any("GB/s" in t.get("name", "") for t in spec["data"])


def test_learn_page_walks_the_search():
    at = new_app()
    at.switch_page("pages/learn.py").run()
    no_exception(at)
    assert charts(at, "ln_cube") and charts(at, "ln_tensors")
    at.selectbox(key="ln_sk").set_value(4).run()
    no_exception(at)
    assert any("k split 4 ways" in m.value for m in at.markdown)
    at.slider(key="ln_step").set_value(5).run()
    no_exception(at)
    assert charts(at, "ln_step_GenerateSeq") and charts(at, "ln_step_breadth-first")
    assert any("same optimum" in m.value for m in at.markdown)
    assert charts(at, "ln_real_sets")


def test_no_file_of_the_broken_corpus_breaks_the_app():
    """Every broken upload of tests/corpus shows its error; the app keeps running and keeps the inputs.

    Files of other types (a pickle...) never reach the app: its uploader accepts only
    pase.io.graph_json.MODEL_SUFFIXES, which Streamlit enforces.
    """
    from pase.io.graph_json import MODEL_SUFFIXES

    corpus = ROOT / "tests" / "corpus"
    expected = json.loads((corpus / "expected.json").read_text())
    at = new_app()
    at.number_input(key="in_devices").set_value(8).run()
    at.radio(key="in_graph_kind").set_value("Upload").run()
    uploadable = {n: p for n, p in expected.items() if Path(n).suffix.lower() in MODEL_SUFFIXES}
    assert len(uploadable) > 40
    for name, pattern in sorted(uploadable.items()):
        at.file_uploader(key="in_upload").clear().upload(name, (corpus / name).read_bytes(),
                                                         "application/octet-stream").run()
        no_exception(at)
        assert at.error, name
        assert re.search(pattern, shown(at.error[0]), re.I), (name, shown(at.error[0]))
        assert at.number_input(key="in_devices").value == 8, "the other inputs are kept"


def test_an_approximate_strategy_says_so():
    at = choose_sample(new_app(), "densenet121", devices=4)
    solve(at)
    assert not at.error, [e.value for e in at.error]
    assert any("optimality is not guaranteed" in w.value for w in at.warning)
    assert charts(at, "graph_chart")


def test_hostile_names_are_shown_literally_never_interpreted():
    """A graph or layer name with markdown, HTML or terminal escapes is text on every element that shows it."""
    from pase import ops
    from pase.io.graph_json import dumps_graph
    from pase.ir.graph import Graph

    graph_name = "![x](http://host/x.png) :red[alarm] **bold**\x1b[31m"
    layer_name = "<a href='http://host/'>fc</a><br>"
    g = Graph(graph_name)
    g.add_layer(ops.fully_connected(layer_name, b=64, n=256, c=256))
    g.add_layer(ops.fully_connected("fc2", b=64, n=16, c=256), inputs=[layer_name])
    at = new_app()
    at.radio(key="in_graph_kind").set_value("Upload").run()
    at.file_uploader(key="in_upload").upload("hostile.json", dumps_graph(g).encode(), "application/json").run()
    solve(at)
    texts = [e for kind in ("markdown", "caption") for e in at.get(kind)]
    showing = [e for e in texts if "alarm" in e.value]
    assert showing, "the graph's name is shown somewhere"
    for e in showing:
        assert "![x](" not in e.value and ":red[" not in e.value and "**bold**" not in e.value and "\x1b" not in e.value
        assert "![x](http://host/x.png) :red[alarm] **bold**\\x1b[31m" in shown(e)
    figures = "".join(c.proto.spec for c in at.get("plotly_chart"))
    assert "href" in figures and "<a href" not in figures and "&lt;a href" in figures


def _tiny(batch: int) -> bytes:
    graph = json.loads(EXAMPLE)
    for layer in graph["layers"]:
        if "b" in layer["params"]:
            layer["params"]["b"] = batch
        else:
            layer["params"]["shape"][0] = batch
    return json.dumps(graph).encode()


def _solved_batch4(devices: int):
    """The app with the 4-sample upload solved on ``devices`` devices."""
    at = new_app()
    at.radio(key="in_graph_kind").set_value("Upload").run()
    at.file_uploader(key="in_upload").upload("batch4.json", _tiny(4), "application/json").run()
    at.number_input(key="in_devices").set_value(devices).run()
    solve(at)
    return at


def test_the_headline_flags_idle_devices_when_the_batch_is_smaller_than_the_cluster():
    at = _solved_batch4(7)
    # Power-of-two splits of a batch of 4 and layers of 512 and 10 features: no layer uses all 7 devices.
    idle = [w.value for w in at.warning if "idle" in w.value]
    assert idle and "of 7 devices are idle" in idle[0], [w.value for w in at.warning]
    assert any("at most" in c.value and "of 7" in c.value for c in at.caption)
    assert re.fullmatch(r"Speedup over data parallelism \(on [1-4] of 7 devices\)", at.metric[1].label)


def test_the_headline_names_data_parallelisms_devices_beside_the_speedup():
    at = _solved_batch4(8)
    assert at.metric[1].label == "Speedup over data parallelism (on 4 of 8 devices)"


def test_the_headline_names_no_idle_devices_when_every_device_works():
    at = choose_sample(new_app(), "alexnet")
    solve(at)
    assert not [w.value for w in at.warning if "idle" in w.value]
    assert at.metric[1].label == "Speedup over data parallelism"


def test_what_if_offers_the_records_as_csv_that_parse_back(monkeypatch):
    from pase.analysis import sweep as sweep_module

    written = []

    def recording(records):
        written.append((records, sweep_module.records_from_csv(text := real(records))))
        return text

    real = sweep_module.records_csv
    monkeypatch.setattr(sweep_module, "records_csv", recording)
    at = choose_sample(new_app(), "alexnet")
    at.switch_page("pages/what-if.py").run()
    at.multiselect(key="wi_devices").set_value([2, 4]).run()
    at.button(key="wi_run").click().run()
    no_exception(at)
    assert [b for b in at.get("download_button") if b.proto.label == "Sweep records (CSV)"]
    spec = json.loads(charts(at, "wi_sweep")[0].proto.spec)
    assert spec["layout"]["xaxis"]["tickvals"] == [2, 4] and spec["layout"]["yaxis2"]["rangemode"] == "tozero"
    records, back = written[-1]
    assert back == records
    assert {(r["devices"], r["strategy"]) for r in back} >= {(2, "PaSE"), (4, "PaSE"), (4, "data parallel")}


def test_explorer_graph_is_clickable_and_colours_by_kind_time_or_gain():
    at = choose_sample(new_app(), "inception3", devices=4)
    (graph,) = charts(at, "graph_chart")
    assert list(graph.proto.selection_mode), "a click on a node selects it (to expand or collapse its module)"
    solve(at)
    (graph,) = charts(at, "graph_chart")
    assert list(graph.proto.selection_mode)
    colour = at.radio(key="ex_colour")
    assert colour.value == "kind of parallelism"
    assert list(colour.options) == ["kind of parallelism", "time", "gain over data parallelism"]

    def nodes():
        spec = json.loads(charts(at, "graph_chart")[0].proto.spec)
        return spec, sum(len(t["x"]) for t in spec["data"] if t.get("legendgroup") == "kinds")

    _, grouped = nodes()
    for choice in ("time", "gain over data parallelism"):
        colour.set_value(choice).run()
        no_exception(at)
        spec, count = nodes()
        assert count == grouped
        assert any(t.get("name") == "node scale" for t in spec["data"]), choice
        colour = at.radio(key="ex_colour")
    # The multiselect, like a click, expands a module (the state a click writes to).
    expand = next(m for m in at.multiselect if m.key and m.key.startswith("ex_expand_inception3_"))
    expand.set_value([expand.options[0]]).run()
    no_exception(at)
    _, expanded = nodes()
    assert expanded > grouped
