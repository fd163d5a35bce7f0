"""Solve to drawn result in a real browser (issue 30): the goals the browser tests no longer assert.

Starts ``streamlit run app.py`` on a loopback port and drives it in headless Chromium (Debian's
``/usr/bin/chromium`` through Playwright, as ``tests/browser/`` does: ``.ci/browser-setup.sh`` installs
both; this script reuses that suite's server and page helpers). For each case it clicks Solve from inside
the page and reads two times from the page's own clock (``performance.now``):

* **to graph**: until the strategy graph's points are in the DOM and the next frame is painted (the measure
  of BENCHMARKS.md's earlier App tables);
* **to result**: until the script run that Solve started has finished (the app root's script state is
  ``notRunning`` again) and its result is drawn: the "Estimated step time" metric of the summary, which the
  browser draws a moment after the run ends (both the per-layer and the 3-D path show it), then the next
  painted frame.

Each run asks a new question (the link bandwidth raised by 0.01 GB/s per run), so that every Solve
builds the cost tables and searches afresh rather than answering from the cache; the server is fresh, so
the first run also pays for the first search and plot of the process. The table gives every run and the
medians, against the issue's goals: under 1 s for the landing page's default problem and under 10 s for
``llama3-70b`` on 64 H100s (the explorer's 3-D search), on a 2-core machine.

Usage: ``python benchmarks/bench_browser.py [--no-write] [--runs N] [--only NAME...]``
(``PASE_CHROMIUM`` names another Chromium binary).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from _report import machine, publish

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "browser")]

from conftest import CHROMIUM, CHROMIUM_ARGS, _missing_browser, _serve  # noqa: E402  (tests/browser)
from test_app_browser import (  # noqa: E402
    STRATEGY_POINTS, STRUCTURE_POINTS, assert_no_exception, choose, choose_sample, open_page, set_number, wait_idle,
)

SECTION = "## Browser: Solve to drawn result (issue 30)"
RUNS = 5

# Click Solve from inside the page; resolve with {graph_ms, result_ms}: the milliseconds until the strategy
# graph has points in the DOM, and until the script run is over with the step-time metric drawn, each to the next
# painted frame.
CLICK_TO_RESULT_JS = """
(selector) => new Promise((resolve, reject) => {
  const button = [...document.querySelectorAll('button')].find(b => b.innerText.trim().endsWith('Solve'));
  const app = document.querySelector('[data-testid="stApp"]');
  if (!button || !app) { reject('no Solve button or no app root'); return; }
  if (document.querySelector(selector)) { reject('the strategy graph is already drawn'); return; }
  let t0 = null, graphMs = null, waiting = false;
  const check = () => {
    if (!waiting && document.querySelector(selector)) {
      waiting = true;
      requestAnimationFrame(() => { graphMs = performance.now() - t0; });
    }
    // textContent, not innerText: innerText lays the page out on every mutation, slowing what is measured.
    const metric = waiting && [...document.querySelectorAll('[data-testid="stMetric"]')]
      .some(m => m.textContent.includes('Estimated step time'));
    if (waiting && metric && app.getAttribute('data-test-script-state') === 'notRunning') {
      observer.disconnect();
      requestAnimationFrame(() => resolve({graph_ms: graphMs, result_ms: performance.now() - t0}));
    }
  };
  const observer = new MutationObserver(check);
  observer.observe(document.body, {subtree: true, childList: true, attributes: true,
                                   attributeFilter: ['data-test-script-state']});
  t0 = performance.now();
  button.click();
})
"""


def _default(page) -> None:
    """The landing page as it opens: nothing to choose."""


def _llama3_70b(page) -> None:
    choose_sample(page, "llama3-70b")
    set_number(page, "Devices p", "64")
    page.get_by_text("global batch").first.wait_for()


def _inception3(page) -> None:
    choose_sample(page, "inception3")
    choose(page, "Cluster preset", "paper-model")
    set_number(page, "Devices p", "8")


def _cases():
    """(name, what, set-up of the page, goal in seconds or None, the goal in words)."""
    from ui.sidebar import DEFAULT_DEVICES, DEFAULT_PRESET, DEFAULT_SAMPLE

    yield ("default", f"the landing page's default: {DEFAULT_SAMPLE} on {DEFAULT_DEVICES} {DEFAULT_PRESET} GPUs",
           _default, 1.0, "under 1 s")
    yield ("llama3-70b", "llama3-70b (global batch 2048) on 64 dgx-h100 GPUs, the 3-D search", _llama3_70b, 10.0,
           "under 10 s")
    yield ("inception3", "inception3 (batch 128) at p = 8 on paper-model (issue 4's case)", _inception3, None, "-")


def measure(page, url: str, setup, runs: int) -> list[dict]:
    """Open the explorer, set the case up, and time ``runs`` uncached Solves: per run {graph_ms, result_ms}."""
    open_page(page, url)
    setup(page)
    base = float(page.get_by_label("Link GB/s", exact=True).input_value())
    times = []
    for run in range(runs):
        bandwidth = f"{base + 0.01 * (run + 1):.2f}"
        set_number(page, "Link GB/s", bandwidth)
        page.get_by_text(f"{bandwidth} GB/s").first.wait_for()  # a new question, so no cached answer
        page.wait_for_selector(STRUCTURE_POINTS, state="attached")
        page.wait_for_timeout(500)
        times.append(page.evaluate(CLICK_TO_RESULT_JS, STRATEGY_POINTS))
        wait_idle(page)
        assert_no_exception(page, f"run {run}")
    return times


def run(runs: int, only: list[str] | None) -> str:
    """Time every case (those whose name contains one of ``only``) and return BENCHMARKS.md's section."""
    why = _missing_browser()
    if why:
        sys.exit(f"bench_browser: {why}")
    from playwright.sync_api import sync_playwright

    cases = [c for c in _cases() if not only or any(o in c[0] for o in only)]
    described = machine()  # its load average is the one before the runs
    lines, verdicts = [], []
    with tempfile.TemporaryDirectory() as scratch, _serve(Path(scratch) / "server.log") as url, \
            sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        chromium = f"Chromium {browser.version} headless"
        try:
            for name, what, setup, goal_s, goal in cases:
                context = browser.new_context(viewport={"width": 1500, "height": 1100})
                page = context.new_page()
                page.set_default_timeout(180_000)
                try:
                    times = measure(page, url, setup, runs)
                finally:
                    context.close()
                result = [t["result_ms"] / 1e3 for t in times]
                graph = [t["graph_ms"] / 1e3 for t in times]
                median = statistics.median(result)
                if goal_s is not None:
                    verdicts.append(f"{name} {median:.2f} s ({'met' if median < goal_s else 'not met'}, goal {goal})")
                lines.append(f"| {what} | {goal} | {', '.join(f'{t:.2f}' for t in result)} | **{median:.2f}** | "
                             f"{statistics.median(graph):.2f} |")
                print(lines[-1], file=sys.stderr)
        finally:
            browser.close()
    after = f"load average after the runs {os.getloadavg()[0]:.1f}"
    header = ("| case | goal (to result) | runs to result (s) | median to result (s) | median to graph (s) |\n"
              "| --- | --- | --- | --- | --- |")
    return (f"{SECTION}\n\n`python benchmarks/bench_browser.py`, {datetime.date.today()}, {described}, {after}; "
            f"{chromium}, "
            f"Streamlit {version('streamlit')}. Solve clicked from inside the page, {runs} uncached runs per case "
            "on one fresh server; *to graph*: the strategy graph's points drawn; *to result*: the run Solve started "
            "finished and its step-time metric drawn; each to the next painted frame.\n\n"
            f"{header}\n" + "\n".join(lines) + "\n\nAgainst the issue's goals (median to result): "
            + ("; ".join(verdicts) or "no case with a goal run") + ".\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--only", nargs="+", help="cases whose name contains one of these: default, llama3-70b, "
                                                  "inception3")
    args = parser.parse_args()
    publish(run(args.runs, args.only), args.no_write)


if __name__ == "__main__":
    main()
