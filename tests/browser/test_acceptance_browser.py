"""Issue 30's acceptance in real Chromium: a What-if sweep of Llama 3 8B over 8 to 128 GPUs shows 3-D plans that
fit with tokens/s and MFU; the Training page plans an uploaded Hugging Face config.json as ``pase solve`` does;
the sidebar's problem is the one every page plans. One server for the module.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_app_browser import assert_no_exception, open_page, set_number, wait_idle

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "hf" / "tiny-llama" / "config.json"
SWEPT = [8, 16, 32, 64, 128]
PAGES = {"": "PaSE explorer", "compare": "Compare strategies", "what-if": "What if?", "training": "Training plans",
         "learn": "Learn"}

# The traces of the chart in the element of key ``key``, as plotly holds them, and its axes' titles.
TRACES_JS = """
(key) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  const titles = {};
  for (const [name, axis] of Object.entries(gd.layout)) {
    if (name.startsWith('yaxis')) titles['y' + name.slice(5)] = axis.title && axis.title.text;
  }
  return {traces: gd.data.map(t => ({name: t.name, x: t.x, y: t.y, yaxis: t.yaxis || 'y'})), titles};
}
"""


@pytest.fixture()
def wide(chromium):
    context = chromium.new_context(viewport={"width": 1500, "height": 1100})
    page = context.new_page()
    page.set_default_timeout(180_000)
    yield page
    context.close()


def test_a_whatif_sweep_of_llama3_8b_over_8_to_128_gpus_shows_3d_plans_that_fit(wide, app_url):
    page = wide
    open_page(page, f"{app_url}/what-if?model=llama3-8b")
    page.get_by_text("3-D search").first.wait_for()
    # The device counts: clear the defaults (Backspace removes the last) and type the swept ones.
    page.locator(".st-key-wi_devices input").click()
    for _ in range(6):
        page.keyboard.press("Backspace")
        page.wait_for_timeout(150)
    for n in SWEPT:  # typed to bring the option into the (virtualised) list, then picked by its exact name
        page.keyboard.type(str(n))
        page.get_by_role("option", name=str(n), exact=True).click()
        page.wait_for_timeout(300)
        wait_idle(page)
    page.keyboard.press("Escape")
    wait_idle(page)
    assert page.locator(".st-key-wi_devices").inner_text().split()[1:] == [str(n) for n in SWEPT]
    page.get_by_role("button", name="Run sweep").click()
    page.wait_for_selector(".st-key-wi_panels .js-plotly-plot", state="attached")
    wait_idle(page, timeout_ms=300_000)
    assert_no_exception(page, "the What-if sweep of llama3-8b")
    chart = page.evaluate(TRACES_JS, "wi_panels")
    pase = {t["yaxis"]: t for t in chart["traces"] if t["name"] == "PaSE"}
    rate = next(a for a, title in chart["titles"].items() if title == "tokens/s")
    mfu = next(a for a, title in chart["titles"].items() if title == "% of peak")
    for axis in (rate, mfu):
        assert pase[axis]["x"] == SWEPT, pase[axis]
        # A point is drawn only for a plan that fits (None otherwise): every count has its rate and MFU.
        assert all(v is not None and v > 0 for v in pase[axis]["y"]), pase[axis]
    assert all(0 < v < 100 for v in pase[mfu]["y"]), pase[mfu]


def test_the_training_page_plans_an_uploaded_config_json_as_pase_solve_does(wide, app_url):
    from pase.hardware.cluster import preset
    from pase.io.hf_config import DEFAULT_BATCH, hf_batch_builder
    from pase.search.stages import search_training
    from ui.fmt import fmt_time

    page = wide
    open_page(page, f"{app_url}/training")
    page.get_by_role("radiogroup", name="Graph").get_by_text("Upload", exact=True).click()
    page.wait_for_timeout(300)
    wait_idle(page)
    page.locator('.st-key-in_upload input[type="file"]').set_input_files(
        files=[{"name": "config.json", "mimeType": "application/json", "buffer": TINY.read_bytes()}])
    page.get_by_label("Global batch (samples)", exact=True).wait_for()  # the upload is read: a config's batch
    wait_idle(page)
    set_number(page, "Devices p", "8")
    page.get_by_text("8 x 989 TFLOP/s").first.wait_for()  # the page plans the sidebar's 8 devices
    page.get_by_role("button", name="Search", exact=True).click()
    metric = page.locator('[data-testid="stMetric"]').filter(has_text="Step time")
    metric.first.wait_for()
    wait_idle(page)
    assert_no_exception(page, "the Training page after searching an uploaded config.json")
    expected = search_training(hf_batch_builder(TINY), preset("dgx-h100", 8, calibrated=True), DEFAULT_BATCH).best
    shown = metric.first.locator('[data-testid="stMetricValue"]').inner_text().strip()
    assert shown == fmt_time(expected.step_time_s), (shown, expected.label,
                                                     page.locator('[data-testid="stMain"]').inner_text()[:3000])


def test_every_page_plans_the_sidebars_problem(wide, app_url):
    page = wide
    open_page(page, f"{app_url}/?model=llama3-8b&devices=64")
    for path, title in PAGES.items():
        page.locator('[data-testid="stSidebarNav"] a').filter(has_text={"": "Explorer", "compare": "Compare",
                                                                       "what-if": "What-if", "training": "Training",
                                                                       "learn": "Learn"}[path]).click()
        page.get_by_role("heading", name=title).first.wait_for()
        wait_idle(page)
        assert_no_exception(page, f"page /{path}")
        assert page.get_by_label("Devices p", exact=True).input_value() == "64", path
        assert page.get_by_role("combobox", name="Sample graph").input_value() == "llama3-8b", path
        if path in ("", "compare", "training"):
            main = page.locator('[data-testid="stMain"]').inner_text()
            assert "llama3-8b" in main and "64 x 989 TFLOP/s" in main, (path, main[:2000])
