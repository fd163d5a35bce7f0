"""Issue 15's acceptance in real Chromium: Solve to drawn graph for the default problem and for Llama 3 70B on
64 H100s (the explorer's 3-D path), and the Training page's Gantt, memory and mesh views of a pipelined plan.

Run alone with ``pytest tests/browser/test_training_browser.py -s`` (``-s`` prints the timings). The timings
land in ``artifacts/browser-timing-*.json``, the screenshots in ``artifacts/`` (git-ignored).
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import time

import pytest

from test_app_browser import (
    CLICK_TO_GRAPH_JS, STRATEGY_POINTS, STRUCTURE_POINTS, TIMING_RUNS, assert_no_exception, choose_sample, open_page,
    set_number, shoot, wait_idle,
)

pytestmark = pytest.mark.browser

# Issue 15: Solve to drawn graph under 3 s, for the default problem and for llama3-70b on 64 H100s.
GOAL_S = 3.0
# Llama 3 70B's 3-D search alone takes about 1.4 s of one core in the app (its repeated layers costed on three
# of them, the configurations tried best first); measured on the 2-core machine these tests were written on,
# click to graph took a median of 2.1 s (runs of 2.0 to 2.6 s) at a load of 1.1 to 1.3. The record says the
# load the runs met, each run's search time and how many workers shared it.


def click_to_graph(page, what: str, slug: str, artifacts) -> dict:
    """Median seconds from the click on Solve to the drawn strategy graph over TIMING_RUNS uncached runs.

    Each run uses another link bandwidth (the preset's + 0.01 x run GB/s), so that every Solve searches afresh.
    """
    base = float(page.get_by_label("Link GB/s", exact=True).input_value())
    load_before = os.getloadavg()[0]
    times_s, searches = [], []
    for run in range(TIMING_RUNS):
        bandwidth = f"{base + 0.01 * (run + 1):.2f}"
        set_number(page, "Link GB/s", bandwidth)
        page.get_by_text(f"{bandwidth} GB/s").first.wait_for()  # a new question, so no cached answer
        page.wait_for_selector(STRUCTURE_POINTS, state="attached")
        page.wait_for_timeout(500)
        ms = page.evaluate(CLICK_TO_GRAPH_JS, STRATEGY_POINTS)
        times_s.append(ms / 1e3)
        wait_idle(page)
        found = page.locator('[data-testid="stAlert"]').filter(has_text="configurations modelled")
        took = re.search(r"modelled .* in ([0-9.]+ m?s)", found.first.inner_text()) if found.count() else None
        if took:  # the 3-D search says how long it took itself, and how many workers shared it
            shared = page.get_by_text(re.compile(r"Searched by \d+ worker processes"))
            workers = re.search(r"by (\d+) worker", shared.first.inner_text()).group(1) if shared.count() else "1"
            searches.append(f"{took.group(1)} on {workers} worker(s)")
        assert_no_exception(page, f"{slug}: timing run {run}")
    median = statistics.median(times_s)
    record = {
        "what": f"click Solve -> strategy graph drawn, {what}, uncached",
        "runs_s": [round(t, 3) for t in times_s],
        "median_s": round(median, 3),
        "goal_s": GOAL_S,
        "machine": f"{platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} cores",
        # Other work on the machine slows every run: the 1-minute load average before and after the runs.
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "date": time.strftime("%Y-%m-%d"),
    }
    if searches:
        record["search_s"] = searches  # of each run: the search's own time, as the page shows it
    (artifacts / f"browser-timing-{slug}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"\nclick-to-graph, {slug}: median {median:.2f} s over {TIMING_RUNS} runs {record['runs_s']}")
    shoot(page, artifacts / f"browser-{slug}-solved.png")
    return record


def test_click_to_graph_time_of_the_default_problem(page, app_url, artifacts):
    """The problem the app opens with (ui.sidebar: the Transformer on 16 DGX H100 GPUs), under 3 s."""
    from ui.sidebar import DEFAULT_DEVICES, DEFAULT_PRESET, DEFAULT_SAMPLE

    open_page(page, app_url)
    record = click_to_graph(page, f"the default problem, {DEFAULT_SAMPLE} on {DEFAULT_DEVICES} {DEFAULT_PRESET} "
                                  "devices", "default", artifacts)
    assert page.get_by_text("Estimated step time").count() >= 1
    assert record["median_s"] < GOAL_S, record


def test_click_to_graph_time_of_llama3_70b_on_64_h100s(page, app_url, artifacts):
    """The explorer's 3-D path: Llama 3 70B, global batch 2048, on 64 DGX H100 GPUs."""
    open_page(page, app_url)
    choose_sample(page, "llama3-70b")
    set_number(page, "Devices p", "64")
    page.get_by_text("global batch").first.wait_for()
    record = click_to_graph(page, "llama3-70b (global batch 2048) on 64 dgx-h100 devices, the 3-D search",
                            "llama3-70b", artifacts)
    assert_no_exception(page, "the explorer after the 3-D search")
    assert page.get_by_text("one t x c group").count() >= 1
    assert page.get_by_text("Memory per device (largest stage)").count() >= 1
    assert record["median_s"] < GOAL_S, record


# Per plotly chart inside the element of key ``key`` (its st-key-<key> class): the trace count, the traces'
# names and types and how many SVG bars, heat-map images and points the browser drew for them.
CHART_JS = """
(key) => [...document.querySelectorAll(`.st-key-${key} .js-plotly-plot`)].map(gd => ({
  traces: (gd.data || []).length,
  names: (gd.data || []).map(t => t.name || ''),
  types: (gd.data || []).map(t => t.type || 'scatter'),
  bars: gd.querySelectorAll('.barlayer .point').length,
  heatmaps: gd.querySelectorAll('.heatmaplayer image, .hm image').length,
  width: gd.getBoundingClientRect().width,
}))
"""


def chart(page, key: str) -> dict:
    page.wait_for_selector(f".st-key-{key} .js-plotly-plot", state="attached")
    found = page.evaluate(CHART_JS, key)
    assert len(found) == 1, (key, found)
    return found[0]


def test_the_training_page_draws_the_gantt_memory_and_mesh_of_a_pipelined_plan(page, app_url, artifacts):
    """Megatron 1.7B on 16 DGX A100 GPUs evaluated at t = 4, p = 2 (d = 2): a pipelined plan's views (the
    schedule, the memory per stage at its peak and over the step, the mesh)."""
    open_page(page, f"{app_url}/training")
    page.get_by_role("heading", name="Training plans").first.wait_for()
    assert_no_exception(page, "the Training page")
    page.get_by_text("Evaluate a configuration", exact=True).click()
    page.wait_for_timeout(300)
    wait_idle(page)
    set_number(page, "Devices", "16")
    set_number(page, "Tensor t", "4")
    set_number(page, "Pipeline p", "2")
    page.get_by_text("d = 16 / (t p c) = 2").first.wait_for()
    page.get_by_role("button", name="Evaluate").click()
    page.wait_for_selector(".st-key-tr_eval_gantt .js-plotly-plot", state="attached", timeout=120_000)
    wait_idle(page, timeout_ms=120_000)
    assert_no_exception(page, "the Training page after Evaluate")
    assert page.get_by_text("t4 p2 d2").count() >= 1

    gantt = chart(page, "tr_eval_gantt")
    assert {"forward", "backward", "gradient reduction", "idle"} <= set(gantt["names"]), gantt
    assert set(gantt["types"]) == {"bar"}, gantt
    # 2 stages x m microbatches x (forward, backward) bars at least, drawn as SVG.
    assert gantt["bars"] >= 4, gantt

    memory = chart(page, "tr_eval_memory")
    assert {"weights", "gradients", "optimizer state", "activations"} <= set(memory["names"]), memory
    assert memory["bars"] >= 2 * 4, memory  # two stages, four parts or more each
    # The memory over the step, in the tab beside the bars: one step line per stage, drawn once the tab shows.
    page.get_by_role("tab", name="Over the step").click()
    page.wait_for_timeout(300)
    timeline = chart(page, "tr_eval_memory_timeline")
    assert timeline["names"] == ["stage 0", "stage 1"] and set(timeline["types"]) == {"scatter"}, timeline
    assert timeline["width"] > 100, timeline
    drawn = page.evaluate("() => document.querySelectorAll("
                          "'.st-key-tr_eval_memory_timeline .js-plotly-plot .scatterlayer .js-line').length")
    assert drawn == 2, drawn

    mesh = chart(page, "tr_eval_mesh")
    assert "heatmap" in mesh["types"], mesh
    assert mesh["traces"] >= 1 and mesh["width"] > 100, mesh
    assert mesh["heatmaps"] >= 1, mesh  # the grid drawn
    shoot(page, artifacts / "browser-training-pipelined.png", height=3200)


def test_cancel_stops_the_3d_search_and_a_later_solve_draws(page, app_url):
    """The 3-D search's workers stop on Cancel, as the per-layer search's do; Solve afterwards still works."""
    open_page(page, app_url)
    choose_sample(page, "llama3-70b")
    set_number(page, "Devices p", "64")
    set_number(page, "Link GB/s", "449.5")  # a question no other test asks: not cached
    page.get_by_role("button", name="Solve").click()
    page.get_by_role("button", name="Cancel").click(timeout=10_000)
    page.get_by_text("Search cancelled.").wait_for(timeout=10_000)
    wait_idle(page)
    assert page.locator(STRATEGY_POINTS).count() == 0
    assert_no_exception(page, "the explorer after cancelling the 3-D search")
    page.get_by_role("button", name="Solve").click()
    page.wait_for_selector(STRATEGY_POINTS, state="attached", timeout=120_000)
    wait_idle(page)
    assert_no_exception(page, "the explorer after solving again")
