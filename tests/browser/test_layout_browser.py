"""The charts and numbers as Chromium lays them out (issue 30's legibility): read from the drawn page, not
from the figures' data.

For every plotly chart on the explorer (the default problem solved: the strategy graph by kind and by time,
the cost breakdown, the memory chart), on the Training page (a pipelined plan evaluated: the schedule, the
memory per stage, the mesh) and on the What-if page (its default sweep: the speedup, the small multiples with
the memory capacity, time to train with failures, the splits):

* no text is clipped: every text element's box lies inside its chart's SVG, and a strategy-graph label whose
  node is in view lies inside the plot area; no edge of the strategy graph runs through a node's label;
* every legend swatch is painted in a colour the marks of its series are painted in (fill or stroke, with
  opacity, a pattern's background resolved);
* plotly's toolbar does not overlap a legend, nor an axis's tick labels one another;
* no title, axis title or legend entry is a program's key (``step_ms``), and no chart text holds a number of
  more than four significant figures or an exponent (``8.72e+50``);

and every metric's label is drawn whole (not cut with an ellipsis) and its value is a number with a unit (or a
ratio, a percentage, a count) of at most four significant figures. One server for the module, three pages.
"""

from __future__ import annotations

import re

import pytest

from test_app_browser import STRATEGY_POINTS, assert_no_exception, choose_sample, open_page, set_number, wait_idle

pytestmark = pytest.mark.browser

WINDOW = {"width": 1500, "height": 1100}
# Antialiased text and rounded boxes may stand out of their container by a fraction of a pixel.
TOLERANCE_PX = 1.0
# A program's key rather than words: snake_case with an underscore (step_ms, memory_GB, tokens_per_s).
RAW_KEY = re.compile(r"\b[a-z]+_[A-Za-z0-9_]+\b")
# A number in chart text or a metric: digits with an optional decimal part.
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
EXPONENT = re.compile(r"\de[+-]?\d", re.IGNORECASE)
# A metric's value: a number (thousands separated) with an optional unit or suffix, a ratio, or n/a.
METRIC_VALUE = re.compile(r"^(n/a|-?\d[\d,]*(\.\d+)?\s?(×|%|[kMGTB]|[nµm]?s|min|h|days|[kMGT]?B(/s)?|[GTP]FLOP/s)?)$")

# Every visible plotly chart: the key of the Streamlit element holding it, its SVG's and plot areas' boxes, its
# toolbar's and legend's boxes, its text elements (class, text, box; for scatter text, whether the anchor is in
# its plot area), its traces' painted colours by trace index, and its legend items with their swatches' paints.
CHARTS_JS = r"""
() => {
  const box = e => { const r = e.getBoundingClientRect();
                     return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width}; };
  const resolve = (color, el) => {
    // A patterned bar is filled with url(#id): the pattern's background is its colour.
    const m = /url\("?#([^")]+)"?\)/.exec(color || '');
    if (!m) return color;
    const pattern = document.getElementById(m[1]);
    const bg = pattern && pattern.querySelector('rect');
    return bg ? getComputedStyle(bg).fill : color;
  };
  const paint = (e, what) => {
    const s = getComputedStyle(e);
    let opacity = parseFloat(s.opacity) * parseFloat(what === 'fill' ? s.fillOpacity : s.strokeOpacity);
    for (let p = e.parentElement; p && !p.classList.contains('main-svg'); p = p.parentElement) {
      opacity *= parseFloat(getComputedStyle(p).opacity);
    }
    return {color: resolve(s[what], e), opacity};
  };
  const traceOf = e => e.__data__ && e.__data__[0] && e.__data__[0].trace;
  return [...document.querySelectorAll('.js-plotly-plot')].filter(gd => gd.getBoundingClientRect().width > 0)
    .map(gd => {
      const holder = gd.closest('[class*="st-key-"]');
      const key = holder ? [...holder.classList].find(c => c.startsWith('st-key-')).slice(7) : '';
      const svg = gd.querySelector('.main-svg');
      const areas = [...gd.querySelectorAll('.bglayer .bg, .draglayer .nsewdrag')].map(box);
      const inArea = (x, y) => areas.some(a => x >= a.left && x <= a.right && y >= a.top && y <= a.bottom);
      const texts = [...gd.querySelectorAll('svg text')].filter(t => t.textContent.trim()
          && getComputedStyle(t).display !== 'none' && getComputedStyle(t).visibility !== 'hidden'
          && parseFloat(getComputedStyle(t).opacity) > 0)
        .map(t => {
          const b = box(t);
          const point = t.closest('.textpoint');
          return {cls: (t.getAttribute('class') || '') + ' ' + (t.parentElement.getAttribute('class') || ''),
                  text: t.textContent, box: b, point: !!point,
                  anchored: point ? inArea((b.left + b.right) / 2, (b.top + b.bottom) / 2) : null};
        });
      const marks = {};
      for (const g of gd.querySelectorAll('.cartesianlayer .trace')) {
        const t = traceOf(g);
        if (!t) continue;
        const m = marks[t.index] = marks[t.index] || {name: t.name, paints: []};
        for (const p of g.querySelectorAll('path.point, .point path')) m.paints.push(paint(p, 'fill'));
        for (const p of g.querySelectorAll('path.js-line')) m.paints.push(paint(p, 'stroke'));
      }
      const legend = [...gd.querySelectorAll('.legend .traces')].map(item => {
        const t = traceOf(item);
        return {text: item.querySelector('.legendtext').textContent, index: t ? t.index : null,
                name: t ? t.name : null,
                paints: [...[...item.querySelectorAll('.legendpoints path')].map(p => paint(p, 'fill')),
                         ...[...item.querySelectorAll('.legendlines path')].map(p => paint(p, 'stroke'))]};
      });
      const legendBox = gd.querySelector('.legend .bg') || gd.querySelector('.legend');
      const toolbar = gd.querySelector('.modebar-container .modebar') || gd.querySelector('.modebar');
      return {key, svg: box(svg), areas, texts, marks, legend,
              legendBox: legendBox && gd.querySelectorAll('.legend .traces').length ? box(legendBox) : null,
              toolbar: toolbar ? box(toolbar) : null};
    });
}
"""

# Every metric: its label's text and whether any part of it is cut (content wider than its box), its value.
METRICS_JS = """
() => [...document.querySelectorAll('[data-testid="stMetric"]')].map(m => {
  const label = m.querySelector('[data-testid="stMetricLabel"]');
  const cut = [label, ...label.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1
                                                          && getComputedStyle(e).overflow !== 'visible');
  return {label: label.textContent.trim(), cut,
          value: m.querySelector('[data-testid="stMetricValue"]').textContent.trim()};
})
"""


# The strategy graph as drawn: every node label's box (its text element's, on screen) and, every pixel along each
# edge's path, the point on screen (the path's own coordinates through its screen transform).
GRAPH_JS = r"""
(key) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  const traceOf = e => e.__data__ && e.__data__[0] && e.__data__[0].trace;
  const labels = [], edges = [];
  for (const g of gd.querySelectorAll('.scatterlayer .trace')) {
    const t = traceOf(g);
    if (!t) continue;
    if (t.legendgroup === 'kinds') {
      for (const text of g.querySelectorAll('.textpoint text')) {
        const r = text.getBoundingClientRect();
        if (r.width > 0) labels.push({text: text.textContent, left: r.left, top: r.top, right: r.right,
                                      bottom: r.bottom});
      }
    } else if (t.legendgroup === 'edges') {
      for (const path of g.querySelectorAll('path.js-line')) {
        const m = path.getScreenCTM(), n = path.getTotalLength(), pts = [];
        for (let l = 0; l <= n; l += 1) {
          const p = path.getPointAtLength(l);
          pts.push([m.a * p.x + m.c * p.y + m.e, m.b * p.x + m.d * p.y + m.f]);
        }
        edges.push(pts);
      }
    }
  }
  return {labels, edges};
}
"""


def edges_through_labels(page, key: str) -> tuple[int, list[str]]:
    """How many node labels the strategy graph in element ``key`` draws, and the labels an edge's path runs
    through (a point of it more than TOLERANCE_PX inside the label's text box, as Chromium laid them out)."""
    drawn = page.evaluate(GRAPH_JS, key)
    crossed = []
    for label in drawn["labels"]:
        for pts in drawn["edges"]:
            if any(label["left"] + TOLERANCE_PX < x < label["right"] - TOLERANCE_PX
                   and label["top"] + TOLERANCE_PX < y < label["bottom"] - TOLERANCE_PX for x, y in pts):
                crossed.append(label["text"])
                break
    return len(drawn["labels"]), crossed


def _rgba(paint: dict) -> tuple[int, int, int, float] | None:
    """A painted colour as (r, g, b, alpha) with the element's opacity; None when nothing is painted."""
    match = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, ([\d.]+))?\)", paint["color"] or "")
    if not match:
        return None
    r, g, b, a = match.groups()
    alpha = (1.0 if a is None else float(a)) * paint["opacity"]
    return (int(r), int(g), int(b), round(alpha, 2)) if alpha > 0 else None


def _inside(inner: dict, outer: dict) -> bool:
    return (inner["left"] >= outer["left"] - TOLERANCE_PX and inner["right"] <= outer["right"] + TOLERANCE_PX
            and inner["top"] >= outer["top"] - TOLERANCE_PX and inner["bottom"] <= outer["bottom"] + TOLERANCE_PX)


def _overlap(a: dict, b: dict) -> bool:
    return (min(a["right"], b["right"]) - max(a["left"], b["left"]) > TOLERANCE_PX
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > TOLERANCE_PX)


def _significant(number: str) -> int:
    digits = number.replace(",", "").replace(".", "").lstrip("0")
    return len(digits.rstrip("0")) if "." not in number else len(digits)


def check_charts(page, where: str, keys: set[str]) -> list[dict]:
    """Every visible chart's layout checks (the module's docstring); the charts, which must include ``keys``."""
    page.wait_for_timeout(600)  # plotly lays text and legends out after the chart is attached
    charts = page.evaluate(CHARTS_JS)
    assert keys <= {c["key"] for c in charts}, (where, [c["key"] for c in charts])
    for chart in charts:
        name = f"{where}: {chart['key'] or 'a chart'}"
        for text in chart["texts"]:
            assert _inside(text["box"], chart["svg"]), (name, "text outside its chart", text)
            if text["point"] and text["anchored"]:
                assert any(_inside(text["box"], a) for a in chart["areas"]), (name, "label clipped by its plot", text)
            if not text["point"] and "tick" not in text["cls"]:  # words, not data (ticks and labels name layers)
                assert not RAW_KEY.search(text["text"]), (name, "a raw key", text["text"])
            assert not EXPONENT.search(text["text"]), (name, "an exponent", text["text"])
            for number in NUMBER.findall(text["text"]):
                assert _significant(number) <= 4, (name, "too many significant figures", text["text"])
        ticks: dict[str, list[dict]] = {}
        for text in chart["texts"]:
            axis = text["cls"].split()[-1] if text["cls"].split() else ""
            if "tick" in axis:
                ticks.setdefault(axis, []).append(text)
        for axis, labels in ticks.items():  # an axis's tick labels apart (a log axis labelled too densely overlaps)
            for i, a in enumerate(labels):
                for b in labels[i + 1:]:
                    assert not _overlap(a["box"], b["box"]), (name, f"{axis} labels overlap", a["text"], b["text"])
        for item in chart["legend"]:
            if item["index"] is None:  # a legend group's title
                continue
            swatch = {c for c in map(_rgba, item["paints"]) if c is not None and c[:3] != (255, 255, 255)}
            drawn = {c for m in chart["marks"].values() if m["name"] == item["name"]
                     for c in map(_rgba, m["paints"]) if c is not None}
            assert swatch, (name, "a legend item without a swatch", item)
            assert drawn, (name, "a legend item of nothing drawn", item)
            assert swatch <= drawn, (name, f"legend swatch of {item['text']!r} unlike its marks", swatch, drawn)
        if chart["legendBox"] and chart["toolbar"] and chart["toolbar"]["width"] > 0:
            assert not _overlap(chart["legendBox"], chart["toolbar"]), (name, "the toolbar over the legend", chart)
    return charts


def check_metrics(page, where: str) -> list[dict]:
    """Every metric's label whole and its value a number with a unit of at most four significant figures."""
    metrics = page.evaluate(METRICS_JS)
    assert metrics, where
    for m in metrics:
        assert not m["cut"] and not m["label"].endswith(("...", "…")), (where, "a label cut short", m)
        assert not RAW_KEY.search(m["label"]), (where, "a raw key", m)
        assert METRIC_VALUE.match(m["value"]) and not EXPONENT.search(m["value"]), (where, "a value without its unit",
                                                                                     m)
        for number in NUMBER.findall(m["value"]):
            assert _significant(number) <= 4, (where, "too many significant figures", m)
    return metrics


@pytest.fixture()
def wide(chromium):
    context = chromium.new_context(viewport=WINDOW)
    page = context.new_page()
    page.set_default_timeout(120_000)
    yield page
    context.close()


def test_the_explorers_charts_and_numbers_read_whole(wide, app_url):
    page = wide
    open_page(page, app_url)
    page.get_by_role("button", name="Solve").click()
    page.wait_for_selector(STRATEGY_POINTS, state="attached")
    wait_idle(page)
    assert_no_exception(page, "the explorer after Solve")
    check_charts(page, "the explorer, by kind", {"graph_chart", "breakdown_chart"})
    labels = [m["label"] for m in check_metrics(page, "the explorer")]
    assert "Estimated step time" in labels

    page.get_by_text("time", exact=True).click()
    page.wait_for_timeout(300)
    wait_idle(page)
    charts = check_charts(page, "the explorer, by time", {"graph_chart"})
    graph = next(c for c in charts if c["key"] == "graph_chart")
    # Both colour bars (redistribution and node time) are drawn, with their titles, inside the chart.
    titles = " ".join(t["text"] for t in graph["texts"] if "cbtitle" in t["cls"] or "colorbar" in t["cls"])
    assert "node time" in titles and "redistribution" in titles, titles

    labels, crossed = edges_through_labels(page, "graph_chart")
    assert labels and not crossed, ("the explorer: edges through node labels", crossed)

    page.get_by_role("tab", name="Memory per device").click()
    page.wait_for_selector(".st-key-memory_chart .js-plotly-plot", state="attached")
    wait_idle(page)
    check_charts(page, "the explorer's memory tab", {"memory_chart"})


@pytest.mark.parametrize("name", ["transformer", "llama3-8b"])
def test_no_edge_of_the_explorers_graph_runs_through_a_label(wide, app_url, name):
    """Issue 30 saw an edge through "0.ffn_norm" and "ffn.up" on llama3-8b and the Transformer sample: their graphs
    as the explorer opens them (solved or not; modules grouped, a language model's first block layer by layer)
    keep every edge clear of every node label, as Chromium draws them."""
    page = wide
    open_page(page, app_url)
    choose_sample(page, name)
    page.wait_for_selector(".st-key-graph_chart .js-plotly-plot .textpoint", state="attached")
    wait_idle(page)
    assert_no_exception(page, f"the explorer on {name}")
    page.wait_for_timeout(600)
    labels, crossed = edges_through_labels(page, "graph_chart")
    assert labels >= 10 and not crossed, (name, labels, crossed)


def test_the_training_pages_charts_and_numbers_read_whole(wide, app_url):
    page = wide
    open_page(page, f"{app_url}/training")
    choose_sample(page, "megatron-1.7b")
    set_number(page, "Devices p", "16")
    page.get_by_text("Evaluate a configuration", exact=True).click()
    page.wait_for_timeout(300)
    wait_idle(page)
    set_number(page, "Tensor t", "4")
    set_number(page, "Pipeline p", "2")
    page.get_by_role("button", name="Evaluate").click()
    page.wait_for_selector(".st-key-tr_eval_gantt .js-plotly-plot", state="attached")
    wait_idle(page)
    assert_no_exception(page, "the Training page after Evaluate")
    charts = check_charts(page, "the Training page", {"tr_eval_gantt", "tr_eval_memory"})
    gantt = next(c for c in charts if c["key"] == "tr_eval_gantt")
    assert {"forward", "backward"} <= {item["text"] for item in gantt["legend"]}, gantt["legend"]
    labels = [m["label"] for m in check_metrics(page, "the Training page")]
    assert any(label.startswith("Memory per device") for label in labels), labels


def test_the_what_if_pages_charts_read_whole(wide, app_url):
    page = wide
    open_page(page, f"{app_url}/what-if")
    page.get_by_role("button", name="Run sweep").click()
    page.wait_for_selector(".st-key-wi_panels .js-plotly-plot", state="attached")
    wait_idle(page)
    assert_no_exception(page, "the What-if page after a sweep")
    charts = check_charts(page, "the What-if page", {"wi_sweep", "wi_panels", "wi_time_to_train"})
    panels = next(c for c in charts if c["key"] == "wi_panels")
    titles = [t["text"] for t in panels["texts"] if "annotation" in t["cls"]]
    assert any(t.startswith("Time to train") for t in titles), titles
