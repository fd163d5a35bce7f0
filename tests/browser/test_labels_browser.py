"""The explorer's graph as Chromium draws it in a 1500 x 1000 window: node labels readable and apart.

tests/test_figures.py checks label boxes estimated from the figure's data; this measures the boxes of
the SVG text elements the browser lays out (getBoundingClientRect), so fonts, multi-line labels and
the chart's real width count (issue 15: InceptionV3 ungrouped, the Transformer grouped at p=64 and
GPT at p=64 are legible, no two labels overlapping).
"""

from __future__ import annotations

import pytest

from test_app_browser import STRATEGY_POINTS, assert_no_exception, choose_sample, open_page, set_number, wait_idle

pytestmark = pytest.mark.browser

WINDOW = {"width": 1500, "height": 1000}
MIN_FONT_PX = 10
# Boxes may touch: antialiased glyph edges meet within a fraction of a pixel.
TOLERANCE_PX = 0.5

# Every line of every node label of the strategy graph (plotly draws a label as one SVG text, a tspan per
# line): its label's index, its text, its box in CSS pixels and its font size. Lines, not whole labels, are
# compared: a centred label's box has empty corners, where a neighbour's short line may sit.
LABELS_JS = """
() => [...document.querySelectorAll('.st-key-strategy-graph .js-plotly-plot .scatterlayer .textpoint text')]
  .flatMap((t, i) => [...t.querySelectorAll('tspan.line')].map(line => {
    const r = line.getBoundingClientRect();
    return {label: i, text: line.textContent, left: r.left, top: r.top, right: r.right, bottom: r.bottom,
            font: parseFloat(getComputedStyle(line).fontSize)};
  }))
"""
# The plot area of the strategy graph (its axes' drawing rectangle), in CSS pixels.
PLOT_AREA_JS = """
() => {
  const r = document.querySelector('.st-key-strategy-graph .js-plotly-plot .cartesianlayer .bg, '
                                   + '.st-key-strategy-graph .js-plotly-plot .bglayer .bg').getBoundingClientRect();
  return {left: r.left, top: r.top, right: r.right, bottom: r.bottom};
}
"""


def _overlaps(lines: list[dict]) -> list[tuple[str, str]]:
    """Pairs of lines of different labels whose boxes overlap by more than :data:`TOLERANCE_PX` both ways
    (a sweep by left edge: only boxes starting before one ends can meet it)."""
    lines = sorted(lines, key=lambda b: b["left"])
    found = []
    for i, a in enumerate(lines):
        for b in lines[i + 1:]:
            if b["left"] >= a["right"] - TOLERANCE_PX:
                break
            if a["label"] != b["label"] and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > TOLERANCE_PX:
                found.append((a["text"], b["text"]))
    return found


def _set_grouping(page, grouped: bool) -> None:
    toggle = page.locator(".st-key-ex_group input[type=checkbox]")
    if toggle.is_checked() != grouped:
        page.locator(".st-key-ex_group label").first.click()
        page.wait_for_timeout(300)
        wait_idle(page, timeout_ms=120_000)
    assert toggle.is_checked() == grouped


@pytest.mark.parametrize("name, grouped", [("inception3", False), ("transformer", True), ("gpt", True)])
def test_graph_labels_are_readable_and_apart_at_1500_by_1000(chromium, app_url, artifacts, name, grouped):
    context = chromium.new_context(viewport=WINDOW)
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        open_page(page, app_url)
        choose_sample(page, name)
        set_number(page, "Devices p", "64")
        page.get_by_role("button", name="Solve").click()
        page.wait_for_selector(STRATEGY_POINTS, state="attached")
        wait_idle(page, timeout_ms=120_000)
        _set_grouping(page, grouped)
        page.wait_for_selector(STRATEGY_POINTS, state="attached")
        page.wait_for_timeout(500)  # plotly lays its text out after the chart is attached
        assert_no_exception(page, f"the explorer, {name} at p=64")
        lines = page.evaluate(LABELS_JS)
        area = page.evaluate(PLOT_AREA_JS)
        # What the window shows of the graph, for a person to judge (artifacts/).
        page.locator(".st-key-strategy-graph").scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        page.screenshot(path=str(artifacts / f"browser-labels-{name}-{'grouped' if grouped else 'ungrouped'}.png"))

        names = {}  # label index -> its first line, the (shortened) layer or module name
        for line in lines:
            names.setdefault(line["label"], line["text"])
        assert len(names) >= 10, f"{len(names)} node labels drawn"
        assert all(n.strip() for n in names.values()), "every node label starts with a name"
        small = sorted({line["font"] for line in lines if line["font"] < MIN_FONT_PX})
        assert not small, f"label fonts below {MIN_FONT_PX} px: {small}"
        shown = {b["label"] for b in lines if b["left"] < area["right"] and b["right"] > area["left"]
                 and b["top"] < area["bottom"] and b["bottom"] > area["top"]}
        assert len(shown) >= min(10, len(names)), "the window shows at least ten labelled nodes"
        assert area["right"] - area["left"] >= 700, "the graph uses the width of the main column"
        overlapping = _overlaps(lines)
        assert not overlapping, f"{len(overlapping)} overlapping label pairs, e.g. {overlapping[:5]}"
    finally:
        context.close()
