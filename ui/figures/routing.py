"""Node labels and edges of the strategy graph placed so that no edge runs through a label.

The graph is layered left to right: nodes in columns one generation apart and rows apart, each label centred
over or under its node. A straight edge between two rows runs diagonally through the labels beside its
ends. Such an edge is drawn instead as an elbow: along its source's row, down (or up) a vertical leg in a gap
between its ends' columns, and along its target's row. Rows are clear of labels (a label's box lies between its
node's row and the next), so only the leg needs a place: of the places that cross the fewest labels and nodes,
the one nearest the middle of the gap before the target. Where every place crosses a label (two wide labels
filling one gap), a label moves (to its node's other side, or beside it) if the place is free and fewer edges
then cross labels.
Pure geometry on boxes in pixels, y growing downwards; no plotly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["Box", "Node", "label_size", "place_labels_and_edges", "polyline_crosses"]

# The leg's candidate places are this many pixels apart across a gap, and keep this far from a node's marker.
STEP_PX = 2.0
CLEARANCE_PX = 3.0
# A crossed label or node weighs this much more than the leg's distance (px) from its preferred place.
CROSSING_PENALTY = 1e6
# Room kept round a label's glyphs for their halo.
MARGIN_PX = 2.0
# Where a crossed label may move, on its own side or the other: centred, or beside its node's vertical (right or
# left), out of the gap an elbow's leg needs.
ALTERNATIVES = ("center", "right", "left")
# A moved label must be clear of others by this share of its width each side (see _padded).
MOVE_SLACK = 0.25


@dataclass(frozen=True)
class Box:
    """An axis-aligned box in pixels, y growing downwards."""

    left: float
    top: float
    right: float
    bottom: float


@dataclass(frozen=True)
class Node:
    """A drawn node: its key, centre (px), marker size (px across) and label size (px, 0 x 0 without one)."""

    key: str
    x: float
    y: float
    marker: float
    label_w: float = 0.0
    label_h: float = 0.0

    def marker_box(self) -> Box:
        r = self.marker / 2
        return Box(self.x - r, self.y - r, self.x + r, self.y + r)

    def label_box(self, position: str) -> Box:
        """The label's box at plotly's text ``position`` ("bottom center", "top right"...), as plotly.js places
        text round a marker (``Drawing.textPointPosition``: off its centre by the marker's radius / 0.8 + 1 px
        on each named side), with MARGIN_PX all round (an empty box at the node's centre without a label)."""
        if self.label_w <= 0:
            return Box(self.x, self.y, self.x, self.y)
        vertical, horizontal = position.split()
        r = self.marker / 2 / 0.8 + 1
        top = {"bottom": self.y + r, "top": self.y - r - self.label_h, "middle": self.y - self.label_h / 2}[vertical]
        left = {"center": self.x - self.label_w / 2, "right": self.x + r, "left": self.x - r - self.label_w}[horizontal]
        return Box(left - MARGIN_PX, top - MARGIN_PX, left + self.label_w + MARGIN_PX, top + self.label_h + MARGIN_PX)


def label_size(lines: Sequence[str], font_px: float, char_em: float = 0.6,
               line_em: float = 1.25) -> tuple[float, float]:
    """A label's width and height (px): ``char_em`` of the font a character of its longest line, ``line_em`` a
    line (a sans-serif's average glyph is about 0.55 em wide; 0.6 errs wide)."""
    return max((len(s) for s in lines), default=0) * char_em * font_px, len(lines) * line_em * font_px


def polyline_crosses(points: Sequence[tuple[float, float]], box: Box) -> bool:
    """Whether the polyline through ``points`` (px) passes through the inside of ``box`` (Liang-Barsky clipping)."""
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        dx, dy = x1 - x0, y1 - y0
        lo, hi = 0.0, 1.0
        for p, q in ((-dx, x0 - box.left), (dx, box.right - x0), (-dy, y0 - box.top), (dy, box.bottom - y0)):
            if p == 0:
                if q <= 0:
                    break
            else:
                u = q / p
                if p < 0:
                    lo = max(lo, u)
                else:
                    hi = min(hi, u)
        else:
            if lo < hi:
                return True
    return False


class _Scene:
    """The obstacles (label boxes and node markers) of the current label sides, with an index by left edge."""

    def __init__(self, nodes: Sequence[Node], places: list[str]):
        self.nodes, self.places = nodes, places
        self.index = {n.key: i for i, n in enumerate(nodes)}
        n = len(nodes)
        self.boxes = [nd.label_box(p) for nd, p in zip(nodes, places)] + [nd.marker_box() for nd in nodes]
        self.owner = np.array(list(range(n)) + list(range(n)), dtype=int)  # each obstacle's node
        self.is_label = np.array([nd.label_w > 0 for nd in nodes] + [False] * n)
        self.arr = np.array([[b.left, b.top, b.right, b.bottom] for b in self.boxes]).reshape(-1, 4)
        # A label's width is the same in every place: the widest obstacle bounds how far left of a span to look.
        self.widest = float((self.arr[:, 2] - self.arr[:, 0]).max()) if n else 0.0
        self._index()

    def _index(self) -> None:
        self.order = np.argsort(self.arr[:, 0], kind="stable")
        self.lefts = self.arr[self.order, 0]

    def place(self, i: int, place: str) -> None:
        """Move node ``i``'s label to ``place``."""
        self.places[i] = place
        box = self.nodes[i].label_box(place)
        self.boxes[i] = box
        self.arr[i] = (box.left, box.top, box.right, box.bottom)
        self._index()

    def near(self, a: float, b: float, ends: tuple[int, int]) -> np.ndarray:
        """The obstacles reaching into ``a``..``b`` in x, but the markers of nodes ``ends`` (an edge's own)."""
        i0 = np.searchsorted(self.lefts, a - self.widest)
        i1 = np.searchsorted(self.lefts, b, side="right")
        js = self.order[i0:i1]
        mine = (self.owner[js] == ends[0]) | (self.owner[js] == ends[1])
        return js[(self.arr[js, 2] > a) & (self.is_label[js] | ~mine)]

    def overlapped(self, box: Box, i: int) -> bool:
        """Whether ``box`` overlaps a label or marker other than node ``i``'s own."""
        hit = ((np.minimum(self.arr[:, 2], box.right) > np.maximum(self.arr[:, 0], box.left))
               & (np.minimum(self.arr[:, 3], box.bottom) > np.maximum(self.arr[:, 1], box.top)))
        hit[[i, len(self.nodes) + i]] = False
        return bool(hit.any())

    def route(self, src: str, dst: str, column_px: float) -> list[tuple[float, float]]:
        """An edge's polyline: straight if that crosses nothing, else the elbow of least crossings."""
        s, d = self.nodes[self.index[src]], self.nodes[self.index[dst]]
        straight = [(s.x, s.y), (d.x, d.y)]
        if s.y == d.y or s.x == d.x:
            return straight
        a, b = min(s.x, d.x), max(s.x, d.x)
        ylo, yhi = min(s.y, d.y), max(s.y, d.y)
        # Only what reaches into the rows between the ends can meet the edge, straight or an elbow.
        near = self.near(a, b, (self.index[src], self.index[dst]))
        near = near[(self.arr[near, 3] > ylo) & (self.arr[near, 1] < yhi)]
        if not any(polyline_crosses(straight, self.boxes[j]) for j in near):
            return straight
        sub = self.arr[near]
        l, t, r, btm = (sub[:, k][None, :] for k in range(4))
        first, last = (s, d) if s.x < d.x else (d, s)
        lo_x, hi_x = a + first.marker / 2 + CLEARANCE_PX, b - last.marker / 2 - CLEARANCE_PX
        xs = (np.arange(lo_x, hi_x + 1e-9, STEP_PX) if hi_x > lo_x else np.array([(a + b) / 2]))[:, None]
        leg = (l < xs) & (xs < r) & (np.minimum(yhi, btm) > np.maximum(ylo, t))
        run_s = (np.minimum(np.maximum(s.x, xs), r) > np.maximum(np.minimum(s.x, xs), l)) & (t < s.y) & (s.y < btm)
        run_d = (np.minimum(np.maximum(d.x, xs), r) > np.maximum(np.minimum(d.x, xs), l)) & (t < d.y) & (d.y < btm)
        crossed = (leg | run_s | run_d).sum(axis=1)
        prefer = d.x - np.sign(d.x - s.x) * column_px / 2
        x = float(xs[int(np.argmin(crossed * CROSSING_PENALTY + np.abs(xs[:, 0] - prefer))), 0])
        return [(s.x, s.y), (x, s.y), (x, d.y), (d.x, d.y)]


def place_labels_and_edges(
    nodes: Sequence[Node],
    below: Sequence[bool],
    edges: Sequence[tuple[str, str]],
    column_px: float,
    bounds: tuple[float, float] = (-np.inf, np.inf),
) -> tuple[list[str], dict[tuple[str, str], list[tuple[float, float]]]]:
    """Label places and edge polylines (px) so that as few edges as can be run through labels.

    ``below``: each node's preferred side (its label centred under its marker, else over it). Every edge is
    routed (:meth:`_Scene.route`); then each label some edge still crosses, and each label of such an edge's
    ends, moves to the place (ALTERNATIVES on either side) where it overlaps no other label or marker and, the
    edges near it routed again, fewest edges cross labels, if fewer than before; a greedy pass, so a few
    crossings may stay where wide labels fill a gap from both sides. Returns ``(places, routes)``: each node's
    plotly text position ("bottom center"...) and the routes keyed by ``(src, dst)``. A label of a node within
    ``bounds`` (left, right px: the plot's opening window) moves only to places within them, so that it is not
    clipped.
    """
    scene = _Scene(nodes, ["bottom center" if b else "top center" for b in below])
    routes = {e: scene.route(*e, column_px) for e in edges}
    n = len(nodes)
    # A crossed label may move, or the label of a crossing edge's end (out of the gap the edge's leg needs).
    movable = set()
    for (src, dst), route in routes.items():
        crossed = _labels_crossed(scene, route)
        movable.update(crossed + ([scene.index[src], scene.index[dst]] if crossed else []))
    for i in sorted(movable):
        if nodes[i].label_w <= 0:
            continue
        own = scene.places[i].split()[0]
        other = "top" if own == "bottom" else "bottom"
        tries = [f"{v} {h}" for v in (own, other) for h in ALTERNATIVES if f"{v} {h}" != scene.places[i]]
        inside = bounds[0] <= nodes[i].x <= bounds[1]
        tries = [p for p in tries if not scene.overlapped(_padded(nodes[i].label_box(p)), i) and not (
            inside and (nodes[i].label_box(p).left < bounds[0] or nodes[i].label_box(p).right > bounds[1]))]
        if not tries:
            continue
        # The edges whose span reaches a place of the label: the only ones its move can reroute or cross.
        spots = [nodes[i].label_box(p) for p in [*tries, scene.places[i]]]
        lo, hi = min(b.left for b in spots), max(b.right for b in spots)
        top, bottom = min(b.top for b in spots), max(b.bottom for b in spots)
        local = {e: r for e, r in routes.items() if _reaches(_span(scene, e), lo, hi, top, bottom)}
        best, best_routes = sum(len(_labels_crossed(scene, r)) for r in local.values()), None
        if not best:
            continue
        was, best_place = scene.places[i], None
        for place in tries:
            scene.place(i, place)
            moved = {e: scene.route(*e, column_px) for e in local}
            count = sum(len(_labels_crossed(scene, r)) for r in moved.values())
            if count < best:
                best, best_routes, best_place = count, moved, place
        scene.place(i, was if best_place is None else best_place)
        if best_routes is not None:
            routes.update(best_routes)
    return scene.places, routes


def _padded(box: Box) -> Box:
    """``box`` widened by MOVE_SLACK of its width each side and MARGIN_PX up and down: a moved label keeps clear of
    its neighbours though the browser's glyphs run wider than :func:`label_size` estimates or the plot is
    narrower than the nominal width the places are computed at."""
    pad = MOVE_SLACK * (box.right - box.left)
    return Box(box.left - pad, box.top - MARGIN_PX, box.right + pad, box.bottom + MARGIN_PX)


def _span(scene: _Scene, edge: tuple[str, str]) -> tuple[float, float, float, float]:
    """The box between an edge's ends (px), which every route of it stays in: left, right, top, bottom."""
    s, d = scene.nodes[scene.index[edge[0]]], scene.nodes[scene.index[edge[1]]]
    return min(s.x, d.x), max(s.x, d.x), min(s.y, d.y), max(s.y, d.y)


def _reaches(span: tuple[float, float, float, float], lo: float, hi: float, top: float, bottom: float) -> bool:
    return span[0] <= hi and span[1] >= lo and span[2] <= bottom and span[3] >= top


def _labels_crossed(scene: _Scene, route: list[tuple[float, float]]) -> list[int]:
    """The labels (node indices) ``route`` runs through."""
    xs, ys = [x for x, _ in route], [y for _, y in route]
    ylo, yhi = min(ys), max(ys)
    js = scene.near(min(xs), max(xs), (-1, -1))
    js = js[scene.is_label[js] & (scene.arr[js, 3] > ylo) & (scene.arr[js, 1] < yhi)]
    return [int(j) for j in js if polyline_crosses(route, scene.boxes[j])]
