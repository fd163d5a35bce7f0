"""The strategy graph's figure with edges routed clear of the node labels (issue 30): its building time and the
labels its edges cross.

For the explorer's views of the sample models (the Transformer grouped, as it opens; Inception v3, the
Transformer and GPT-2 layer by layer, solved at p = 64 on ``paper-model``; Llama 3 8B grouped with its first
block layer by layer, before Solve), it builds :func:`ui.figures.strategy_graph_figure` ``RUNS`` times and gives
the median CPU time (the figure alone: the view is built once), and counts the (edge, label) pairs where an edge
runs through a label's box (plotly.js's placement, 0.6 em a character, 1.25 em a line) on a plot of the nominal
width, as drawn and as straight lines between the nodes would run.

Usage: ``python benchmarks/bench_graph_figure.py [--no-write]``.
"""

from __future__ import annotations

import argparse
import datetime
import html
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import machine, publish  # noqa: E402

import pase  # noqa: E402
from pase.models import batch_builder  # noqa: E402
from ui.figures import strategy_graph_figure  # noqa: E402
from ui.figures import graph as graph_figures  # noqa: E402
from ui.figures.graph import NOMINAL_PLOT_PX  # noqa: E402
from ui.figures.routing import Box, polyline_crosses  # noqa: E402
from ui.graphview import build_graph_view, groups_of  # noqa: E402

SECTION = "## The strategy graph's edges clear of its labels (issue 30)"
RUNS = 5


def _views():
    cluster = pase.preset("paper-model", devices=64)
    for name, depth in (("transformer", 2), ("inception3", None), ("transformer", None), ("gpt", None)):
        g = pase.sample(name)
        label = name if depth or name == "inception3" else f"{name}, every layer"
        yield label, build_graph_view(g, pase.plan(g, cluster), depth=depth)
    g = batch_builder("llama3-8b")(8)
    first = next(k for k, ms in groups_of([layer.name for layer in g.layers], 2).items() if len(ms) > 1)
    yield "llama3-8b", build_graph_view(g, depth=2, expanded=[first])


def _crossings(fig) -> tuple[int, int]:
    """(edge, label) pairs crossing as drawn, and as straight edges would, on a plot NOMINAL_PLOT_PX wide."""
    lay = fig.layout
    (x0, x1), (y0, y1) = lay.xaxis.range, lay.yaxis.range
    plot_h = lay.height - lay.margin.t - lay.margin.b

    def px(x, y):
        return (x - x0) / (x1 - x0) * NOMINAL_PLOT_PX, (y1 - y) / (y1 - y0) * plot_h

    boxes = []
    for t in fig.data:
        if t.legendgroup != "kinds" or t.text is None:
            continue
        for x, y, text, size, at in zip(t.x, t.y, t.text, t.marker.size, t.textposition):
            lines = [html.unescape(re.sub("<[^>]+>", "", line)) for line in text.split("<br>")]
            w, h = max(map(len, lines)) * 0.6 * t.textfont.size, len(lines) * 1.25 * t.textfont.size
            cx, cy = px(x, y)
            r = size / 2 / 0.8 + 1
            vertical, horizontal = at.split()
            top = {"bottom": cy + r, "top": cy - r - h}[vertical]
            left = {"center": cx - w / 2, "right": cx + r, "left": cx - r - w}[horizontal]
            boxes.append(Box(left, top, left + w, top + h))
    drawn = straight = 0
    for t in fig.data:
        if t.legendgroup != "edges":
            continue
        points = []
        for x, y in zip(t.x, t.y):
            if x is not None:
                points.append(px(x, y))
                continue
            drawn += sum(polyline_crosses(points, b) for b in boxes)
            straight += sum(polyline_crosses([points[0], points[-1]], b) for b in boxes)
            points = []
    return drawn, straight


def run() -> str:
    rows = []
    placing = [0.0]  # CPU seconds in the label placement and edge routing of the current build
    place = graph_figures.place_labels_and_edges

    def timed_place(*args, **kwargs):
        t0 = time.process_time()
        try:
            return place(*args, **kwargs)
        finally:
            placing[0] += time.process_time() - t0

    graph_figures.place_labels_and_edges = timed_place
    try:
        for label, view in _views():
            times, routing = [], []
            for _ in range(RUNS):
                placing[0] = 0.0
                t0 = time.process_time()
                fig = strategy_graph_figure(view)
                times.append(time.process_time() - t0)
                routing.append(placing[0])
            drawn, straight = _crossings(fig)
            rows.append(f"| {label} | {len(view.nodes)} | {len(view.edges)} | {statistics.median(times) * 1e3:.0f} "
                        f"| {statistics.median(routing) * 1e3:.0f} | {straight} | {drawn} |")
    finally:
        graph_figures.place_labels_and_edges = place
    return (f"{SECTION}\n\n`python benchmarks/bench_graph_figure.py`, {datetime.date.today()}, {machine()}. "
            f"The explorer's strategy graph figure (`ui.figures.strategy_graph_figure`), median CPU time of {RUNS} "
            "builds, with edges between rows routed as elbows clear of the node labels and a blocked label moved "
            "(`ui.figures.routing`); *of which placing and routing*: the median CPU time of those builds spent "
            "placing the labels and routing the edges (`place_labels_and_edges`). Crossings: (edge, label) pairs where an edge "
            "runs through a label's box on a plot of the nominal width (1,000 px): straight lines between the nodes "
            "against the labels as placed, and the edges as drawn. Transformer grouped is the explorer's opening view; graphs above 80 layers open grouped.\n\n"
            "| view | nodes | edges | figure (ms CPU) | of which placing and routing (ms CPU) | crossings, straight edges | "
            "crossings, drawn |\n| --- | --- | --- | --- | --- | --- | --- |\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing it")
    publish(run(), parser.parse_args().no_write)
