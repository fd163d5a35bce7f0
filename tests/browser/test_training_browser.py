"""Issue 15's acceptance in real Chromium: Solve draws the graph for the default problem and for Llama 3 70B on
64 H100s (the explorer's 3-D path), and the Training page's Gantt, memory and mesh views of a pipelined plan.

Run alone with ``pytest tests/browser/test_training_browser.py``; screenshots land in ``artifacts/``
(git-ignored). The goals on Solve-to-result times live in ``benchmarks/bench_browser.py``, which measures them
(BENCHMARKS.md); no test asserts a duration.
"""

from __future__ import annotations

import pytest

from test_app_browser import (
    CLICK_TO_GRAPH_JS, STRATEGY_POINTS, STRUCTURE_POINTS, assert_no_exception, choose_sample, open_page, set_number,
    shoot, wait_idle,
)

pytestmark = pytest.mark.browser


def solve_from_the_page(page) -> None:
    """Click Solve from inside the page, as the benchmark does, and wait until the strategy graph is drawn and
    the run has finished, without an exception."""
    page.wait_for_selector(STRUCTURE_POINTS, state="attached")
    assert page.evaluate(CLICK_TO_GRAPH_JS, STRATEGY_POINTS) > 0
    wait_idle(page)
    assert_no_exception(page, "the explorer after Solve")
    assert page.locator(STRATEGY_POINTS).count() >= 1


def test_the_default_problem_solves_and_draws(page, fresh_app_url, artifacts):
    """The problem the app opens with (ui.sidebar's defaults): Solve draws the strategy graph and the step time.
    On a server of its own, where no other test's Solve has cached the answer."""
    open_page(page, fresh_app_url)
    solve_from_the_page(page)
    page.get_by_text("Estimated step time").first.wait_for()  # drawn a moment after the run ends
    shoot(page, artifacts / "browser-default-solved.png")


def test_llama3_70b_on_64_h100s_solves_in_3d_and_draws(page, fresh_app_url, artifacts):
    """The explorer's 3-D path: Llama 3 70B, global batch 2048, on 64 DGX H100 GPUs (a server of its own: no
    cached answer)."""
    open_page(page, fresh_app_url)
    choose_sample(page, "llama3-70b")
    set_number(page, "Devices p", "64")
    page.get_by_text("global batch").first.wait_for()
    solve_from_the_page(page)
    page.get_by_text("one t x c group").first.wait_for()  # drawn a moment after the run ends
    page.locator('[data-testid="stMetric"]').filter(has_text="Memory per device").first.wait_for()
    # NVIDIA's published runs of the model on the system, beside the plan (ui/published.py), their table in an
    # expander that opens.
    page.get_by_text("runs of llama3-70b on DGX H100").first.wait_for()
    page.get_by_text("NVIDIA's published runs of this model on DGX H100").first.click()
    page.locator('[data-testid="stExpander"]').filter(has_text="NVIDIA's published runs").locator(
        '[data-testid="stDataFrame"]').first.wait_for()
    shoot(page, artifacts / "browser-llama3-70b-solved.png")


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
    """Megatron 1.7B on 16 DGX H100 GPUs evaluated at t = 4, p = 2 (d = 2): a pipelined plan's views (the
    schedule, the memory per stage at its peak and over the step, the mesh). The page plans the sidebar's problem."""
    open_page(page, f"{app_url}/training")
    page.get_by_role("heading", name="Training plans").first.wait_for()
    assert_no_exception(page, "the Training page")
    choose_sample(page, "megatron-1.7b")
    set_number(page, "Devices p", "16")
    page.get_by_text("Evaluate a configuration", exact=True).click()
    page.wait_for_timeout(300)
    wait_idle(page)
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
    # Bars, and the legend's plain swatches (scatter markers in the bars' colours).
    assert set(gantt["types"]) == {"bar", "scatter"}, gantt
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
