"""The app in a real browser: solve a sample, see the graph drawn, visit every page.

Run alone with ``pytest tests/browser``. Screenshots land in ``artifacts/`` (git-ignored). No test here
asserts a duration: click-to-graph times are measured by ``benchmarks/bench_browser.py``.
"""

from __future__ import annotations

import urllib.parse

import pytest

pytestmark = pytest.mark.browser

PAGES = {"": "PaSE explorer", "compare": "Compare strategies", "what-if": "What if?", "training": "Training plans",
         "learn": "Learn"}
# The router's navigation (app.py): labels and their material icons, in order.
NAVIGATION = [("Explorer", "hub"), ("Compare", "compare_arrows"), ("What-if", "tune"), ("Training", "view_timeline"),
              ("Learn", "school")]
STRATEGY_POINTS = ".st-key-strategy-graph .js-plotly-plot .scatterlayer .trace .point"
STRUCTURE_POINTS = ".st-key-structure-graph .js-plotly-plot .scatterlayer .trace .point"
# Click Solve from inside the page and resolve with the milliseconds until the strategy graph
# has points in the DOM and the next frame is painted (benchmarks/bench_browser.py times with it).
CLICK_TO_GRAPH_JS = """
(selector) => new Promise((resolve, reject) => {
  const button = [...document.querySelectorAll('button')].find(b => b.innerText.trim().endsWith('Solve'));
  if (!button) { reject('no Solve button'); return; }
  if (document.querySelector(selector)) { reject('the strategy graph is already drawn'); return; }
  let t0 = null;
  const done = () => requestAnimationFrame(() => resolve(performance.now() - t0));
  const observer = new MutationObserver(() => {
    if (document.querySelector(selector)) { observer.disconnect(); done(); }
  });
  observer.observe(document.body, {subtree: true, childList: true});
  t0 = performance.now();
  button.click();
})
"""


def wait_idle(page, timeout_ms: int = 60_000) -> None:
    """Wait until the script run has finished (the app root's script state)."""
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', state="attached",
                           timeout=timeout_ms)


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector('[data-testid="stApp"]', state="attached")
    # The first run may start a moment after the app shell appears.
    page.wait_for_timeout(300)
    wait_idle(page)


def assert_no_exception(page, where: str) -> None:
    count = page.locator('[data-testid="stException"]').count()
    if count:
        text = page.locator('[data-testid="stException"]').first.inner_text()
        raise AssertionError(f"{where} shows an exception: {text[:1000]}")


def shoot(page, path, height: int = 2400) -> None:
    """Screenshot with a tall viewport: Streamlit scrolls inside its main block, so full_page alone is not enough."""
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": height})
    page.wait_for_timeout(500)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)


def set_number(page, label: str, value: str) -> None:
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Enter")
    page.wait_for_timeout(300)
    wait_idle(page)


def test_solve_draws_the_strategy_graph(page, app_url, artifacts):
    open_page(page, app_url)
    assert_no_exception(page, "the explorer before Solve")
    page.wait_for_selector(STRUCTURE_POINTS, state="attached")
    page.get_by_role("button", name="Solve").click()
    page.wait_for_selector(STRATEGY_POINTS, state="attached")
    wait_idle(page)
    assert_no_exception(page, "the explorer after Solve")
    assert page.get_by_text("Estimated step time").count() >= 1
    page.get_by_role("tab", name="Configurations (Table II)").click()
    page.wait_for_selector('[data-testid="stDataFrame"]', state="visible")
    # Several parallelism kinds or at least one trace of nodes drawn.
    assert page.locator(STRATEGY_POINTS).count() > 5
    shoot(page, artifacts / "browser-explorer.png")


@pytest.mark.parametrize("path", list(PAGES))
def test_every_page_loads_without_exception(page, app_url, artifacts, path):
    open_page(page, f"{app_url}/{path}")
    page.get_by_text(PAGES[path]).first.wait_for()
    assert_no_exception(page, f"page /{path}")
    if path == "what-if":
        page.get_by_role("button", name="Run sweep").click()
        page.wait_for_selector(".js-plotly-plot", state="attached", timeout=180_000)
        wait_idle(page, timeout_ms=180_000)
        assert_no_exception(page, "the what-if page after a sweep")
    if path == "compare":
        page.get_by_role("button", name="Solve").click()
        page.get_by_text("Per layer").first.wait_for(timeout=120_000)
        wait_idle(page, timeout_ms=120_000)
        assert_no_exception(page, "the compare page after Solve")
    shoot(page, artifacts / f"browser-{path or 'explorer-start'}.png")


def navigation(page) -> list[tuple[str, str]]:
    """The sidebar navigation's (label, icon) pairs."""
    links = page.locator('[data-testid="stSidebarNav"] a')
    pairs = []
    for i in range(links.count()):
        link = links.nth(i)
        icon = link.locator('[data-testid="stIconMaterial"]')
        pairs.append((link.locator("span").last.inner_text().strip(), icon.inner_text().strip() if icon.count() else ""))
    return pairs


@pytest.mark.parametrize("path", list(PAGES))
def test_every_page_url_opened_first_on_a_fresh_server(page, fresh_app_url, path):
    """The first request of a new server goes to this page's URL; it still runs under the router.

    With the page scripts in pages/ beside app.py, Streamlit's first run of a server is in its folder
    mode (ui.pagekit.routed): without the router taking over, /compare and /learn ran alone (no sidebar,
    folder-named navigation) and /what-if said "Page not found".
    """
    open_page(page, f"{fresh_app_url}/{path}")
    page.get_by_role("heading", name=PAGES[path]).first.wait_for()
    assert_no_exception(page, f"page /{path}, the server's first")
    assert page.url.rstrip("/") == f"{fresh_app_url}/{path}".rstrip("/")
    assert navigation(page) == NAVIGATION
    assert page.get_by_label("Devices p", exact=True).count() == 1, "the shared sidebar is drawn"
    assert page.get_by_text("Page not found").count() == 0
    assert page.title() == "PaSE explorer"


def test_no_request_leaves_the_machine_and_the_toolbar_has_no_deploy(page, app_url):
    """Loading the app, solving, and visiting every page asks nothing of any host but the app's own."""
    own = urllib.parse.urlsplit(app_url).netloc
    requests, sockets = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("websocket", lambda ws: sockets.append(ws.url))
    open_page(page, app_url)
    page.get_by_role("button", name="Solve").click()
    page.wait_for_selector(STRATEGY_POINTS, state="attached")
    wait_idle(page)
    for label, _ in NAVIGATION[1:]:
        page.get_by_role("link", name=label).click()
        page.wait_for_timeout(300)
        wait_idle(page)
        assert_no_exception(page, f"the {label} page")
    page.wait_for_timeout(1000)  # late requests (fonts, icons) of the last page
    urls = requests + sockets
    assert any(urllib.parse.urlsplit(u).netloc == own for u in requests), "the network log saw the page's requests"
    assert sockets, "the network log saw the app's websocket"
    # data: URLs (the inline favicon) are no requests to a host.
    away = sorted({u for u in urls if urllib.parse.urlsplit(u).scheme not in ("data", "blob")
                   and urllib.parse.urlsplit(u).netloc != own})
    assert not away, away
    assert page.locator('[data-testid="stToolbar"]').count() == 1
    assert page.get_by_role("button", name="Deploy").count() == 0
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0


def test_inception3_at_p8_solves_and_draws_the_strategy_graph(page, fresh_app_url, artifacts):
    """InceptionV3 (batch 128) at p = 8 on the paper's cluster: Solve, clicked from inside the page as the
    benchmark clicks it, draws the strategy graph and shows the step time the planner finds (on a server of its
    own, where no other test's Solve has cached the answer)."""
    from pase.hardware.cluster import preset
    from pase.models import sample
    from pase.planner import plan
    from ui.fmt import fmt_time

    open_page(page, fresh_app_url)
    choose_sample(page, "inception3")
    choose(page, "Cluster preset", "paper-model")
    set_number(page, "Devices p", "8")
    page.wait_for_selector(STRUCTURE_POINTS, state="attached")
    assert page.evaluate(CLICK_TO_GRAPH_JS, STRATEGY_POINTS) > 0
    wait_idle(page)
    assert_no_exception(page, "the explorer after solving inception3 at p = 8")
    assert page.locator(STRATEGY_POINTS).count() > 5
    assert step_time_shown(page) == fmt_time(plan(sample("inception3"), preset("paper-model", devices=8)).step_time_s)
    shoot(page, artifacts / "browser-inception3-p8.png")


def choose(page, label: str, option: str) -> None:
    page.get_by_role("combobox", name=label).click()
    # The list is virtualised (only the options in view exist in the page): type to bring the option into it.
    page.keyboard.type(option)
    page.get_by_role("option", name=option, exact=True).click()
    page.wait_for_timeout(300)
    wait_idle(page)


def choose_sample(page, name: str) -> None:
    choose(page, "Sample graph", name)


def step_time_shown(page) -> str:
    metric = page.locator('[data-testid="stMetric"]').filter(has_text="Estimated step time")
    return metric.locator('[data-testid="stMetricValue"]').inner_text().strip()


def test_two_sessions_solving_at_once_each_see_their_own_result(chromium, app_url):
    """A long search in one browser session does not hold up another's, and neither sees the other's plan."""
    from pase.hardware.cluster import preset
    from pase.models import sample
    from pase.planner import plan
    from ui.fmt import fmt_time

    contexts = [chromium.new_context(viewport={"width": 1500, "height": 1100}) for _ in range(2)]
    try:
        slow, fast = (c.new_page() for c in contexts)
        for pg in (slow, fast):
            pg.set_default_timeout(180_000)
            open_page(pg, app_url)
            choose(pg, "Cluster preset", "paper-model")
        choose_sample(slow, "gpt")
        set_number(slow, "Devices p", "128")
        choose_sample(fast, "alexnet")
        set_number(fast, "Devices p", "2")
        slow.get_by_role("button", name="Solve").click()
        slow.wait_for_timeout(500)
        fast.get_by_role("button", name="Solve").click()
        fast.wait_for_selector(STRATEGY_POINTS, state="attached")
        # The short search finished while the long one still runs in the other session.
        assert slow.locator(STRATEGY_POINTS).count() == 0
        slow.wait_for_selector(STRATEGY_POINTS, state="attached")
        for pg in (slow, fast):
            wait_idle(pg)
            assert_no_exception(pg, "a session solving beside another")
        cluster = preset("paper-model", devices=128)
        assert step_time_shown(slow) == fmt_time(plan(sample("gpt"), cluster).step_time_s)
        assert step_time_shown(fast) == fmt_time(plan(sample("alexnet"), preset("paper-model", devices=2)).step_time_s)
    finally:
        for c in contexts:
            c.close()


def test_cancel_stops_a_running_search_and_the_page_keeps_working(page, app_url):
    open_page(page, app_url)
    choose(page, "Cluster preset", "paper-model")
    choose_sample(page, "gpt")
    # A search of seconds (about 3 s alone on 2 cores): Cancel is drawn once a search has run 0.4 s.
    set_number(page, "Devices p", "384")
    page.get_by_role("button", name="Solve").click()
    page.get_by_role("button", name="Cancel").click(timeout=10_000)
    page.get_by_text("Search cancelled.").wait_for(timeout=10_000)
    wait_idle(page)
    assert page.locator(STRATEGY_POINTS).count() == 0
    assert_no_exception(page, "the explorer after Cancel")
    set_number(page, "Devices p", "2")
    page.get_by_role("button", name="Solve").click()
    page.wait_for_selector(STRATEGY_POINTS, state="attached")


def upload(page, name: str, data: bytes) -> None:
    page.get_by_role("radiogroup", name="Graph").get_by_text("Upload", exact=True).click()
    # The model's uploader (its widget key), not the calibration file's below it.
    page.locator('.st-key-in_upload input[type="file"]').set_input_files(
        files=[{"name": name, "mimeType": "application/json", "buffer": data}])
    page.wait_for_timeout(500)
    wait_idle(page)


def test_an_upload_stays_with_its_session_while_another_churns_uploads(chromium, app_url):
    """One session uploads more graphs than the shared cache holds; the other's upload still works on every page."""
    from pase import ops
    from pase.io.graph_json import dumps_graph
    from pase.ir.graph import Graph
    from ui.state import stores

    def mlp(name: str, width: int) -> bytes:
        g = Graph(name)
        g.add_layer(ops.fully_connected("fc1", b=32, n=width, c=64))
        g.add_layer(ops.fully_connected("fc2", b=32, n=10, c=width), inputs=["fc1"])
        return dumps_graph(g).encode()

    contexts = [chromium.new_context(viewport={"width": 1500, "height": 1100}) for _ in range(2)]
    try:
        mine, churn = (c.new_page() for c in contexts)
        for pg in (mine, churn):
            pg.set_default_timeout(120_000)
            open_page(pg, app_url)
        upload(mine, "mine.json", mlp("my-model", 48))
        mine.get_by_role("button", name="Solve").click()
        mine.wait_for_selector(STRATEGY_POINTS, state="attached")
        for i in range(stores.__wrapped__()["graphs"].maxsize + 4):
            upload(churn, f"other-{i}.json", mlp(f"other-{i}", 16 + i))
            assert_no_exception(churn, f"upload {i} of the churning session")
        # Through the app's navigation: loading a URL would start a new session.
        mine.get_by_role("link", name="Compare").click()
        mine.get_by_text("Compare strategies").first.wait_for()
        wait_idle(mine)
        mine.get_by_role("button", name="Solve").click()
        mine.get_by_text("Per layer").first.wait_for()
        wait_idle(mine)
        assert_no_exception(mine, "the compare page of the session whose upload others evicted")
        assert mine.get_by_text("my-model").count() >= 1
        assert mine.locator('[data-testid="stAlert"]').filter(has_text="upload it again").count() == 0
    finally:
        for c in contexts:
            c.close()


def test_a_cancelled_sweep_resumes_from_the_points_done(page, app_url, artifacts):
    """What-if, 6 device counts: Cancel after the first point, then Run sweep again resumes from the points done."""
    import re

    open_page(page, f"{app_url}/what-if")
    page.get_by_text("What if?").first.wait_for()
    # A transformer of 24 + 24 layers: points of one to six seconds, and no point cached by another test.
    page.get_by_text("Model sizes").first.click()
    set_number(page, "encoder_layers", "24")
    set_number(page, "decoder_layers", "24")
    progress = re.compile(r"Points solved: (\d) of 6")
    page.get_by_role("button", name="Run sweep").click()
    page.get_by_text(re.compile(r"Points solved: [1-6] of 6")).first.wait_for(timeout=120_000)
    page.get_by_role("button", name="Cancel").click()
    page.get_by_text("Sweep cancelled").first.wait_for(timeout=30_000)
    wait_idle(page)
    assert_no_exception(page, "the what-if page after Cancel")
    assert page.locator(".st-key-wi_sweep .js-plotly-plot").count() == 0, "the cancelled sweep drew no chart"
    page.get_by_role("button", name="Run sweep").click()
    first = page.get_by_text(progress).first
    first.wait_for(timeout=60_000)
    started_at = int(progress.search(first.inner_text()).group(1))
    assert started_at >= 1, "the points solved before the cancel are reused"
    page.wait_for_selector(".st-key-wi_sweep .js-plotly-plot", state="attached", timeout=180_000)
    wait_idle(page, timeout_ms=180_000)
    assert_no_exception(page, "the what-if page after the resumed sweep")
    shoot(page, artifacts / "browser-what-if-resumed.png")
