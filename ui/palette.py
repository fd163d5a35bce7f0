"""Every colour the app draws with, named by what it means.

One meaning, one set of colours: the figures (:mod:`ui.figures`) and the
pages take their colours from here, so a colour keeps its meaning across the
app. Sets that can appear on one page use distinct hues: the strategies never
reuse a cost component's colour (the compare page shows both), nor a kind of
parallelism's (the what-if page shows both).
"""

from __future__ import annotations

__all__ = [
    "KIND_COLORS",
    "COST_COLORS",
    "EDGE_COLORSCALE",
    "ZERO_EDGE_COLOR",
    "UNCOSTED_EDGE_COLOR",
    "NODE_TIME_COLORSCALE",
    "GAIN_COLORSCALE",
    "SCALED_NODE_OUTLINE",
    "STRATEGY_COLORS",
    "strategy_color",
    "MEMORY_COLORS",
    "CAPACITY_COLOR",
    "DEVICE_COLORS",
    "device_color",
    "ORDERING_COLORS",
    "ordering_color",
    "STEP_COLORS",
    "REPLICATED_SCALE",
    "PARTIAL_SUM_SCALE",
    "HIGHLIGHT_ROW",
    "INK",
    "MUTED_LINE",
    "OUTLINE",
    "FOUND_RING",
    "PARALLELISM_COLORS",
    "MEASURED",
]

# -- kinds of parallelism (the explorer's graph, the what-if heat map) ----------------------------
KIND_COLORS = {
    "data": "#1f77b4",
    "tensor": "#d62728",
    "hybrid": "#9467bd",
    "replicated": "#7f7f7f",
    "mixed": "#bcbd22",
    "unsolved": "#8c96a3",
}

# -- cost components (explorer's breakdown, compare's step time) ----------------------------------
COST_COLORS = {
    "compute": "#4c78a8",
    "intra-layer comm": "#f58518",
    "edge comm": "#e45756",  # redistribution between layers
}
# Edges of the explorer's graph: redistribution time on an absolute scale (oranges to brown).
EDGE_COLORSCALE = [[0.0, "#fdd0a2"], [0.25, "#fdae6b"], [0.5, "#fd8d3c"], [0.75, "#e6550d"], [1.0, "#7f2704"]]
ZERO_EDGE_COLOR = "#d0d0d0"
UNCOSTED_EDGE_COLOR = "#9aa5b1"
# Nodes of the explorer's graph coloured by their total time (sequential: light to dark blue-green),
# or by their gain over data parallelism (diverging, centred on no gain: magenta slower, green faster).
NODE_TIME_COLORSCALE = [[0.0, "#edf8b1"], [0.25, "#7fcdbb"], [0.5, "#41b6c4"], [0.75, "#225ea8"], [1.0, "#081d58"]]
GAIN_COLORSCALE = [[0.0, "#8e0152"], [0.25, "#de77ae"], [0.5, "#f7f7f7"], [0.75, "#7fbc41"], [1.0, "#276419"]]
SCALED_NODE_OUTLINE = "#555"  # outline of nodes on those scales: their light colours stay visible on white

# -- strategies: PaSE and the baselines (compare, what-if) ----------------------------------------
STRATEGY_COLORS = {
    "PaSE": "#2ca02c",
    "data parallel": "#17becf",
    "OWT": "#e377c2",
    "Mesh-TensorFlow": "#6a3d9a",
    "Megatron": "#8c564b",
    "GNMT": "#c9a227",
    "your plan": "#3b3b3b",
}
# Any other label takes the next of these, in order of appearance.
_STRATEGY_SPARE = ["#98df8a", "#f7b6d2", "#c5b0d5", "#9edae5", "#c49c94", "#dbdb8d", "#525252"]


def strategy_color(name: str, others: list[str] | tuple[str, ...] = ()) -> str:
    """The colour of strategy ``name``; an unknown one takes a spare colour by its place in ``others``."""
    if name in STRATEGY_COLORS:
        return STRATEGY_COLORS[name]
    unknown = [n for n in dict.fromkeys(others) if n not in STRATEGY_COLORS]
    i = unknown.index(name) if name in unknown else 0
    return _STRATEGY_SPARE[i % len(_STRATEGY_SPARE)]


# -- memory per device (explorer's memory tab) -----------------------------------------------------
MEMORY_COLORS = {
    "weights": "#1b9e77",
    "gradients": "#66c2a5",
    "optimizer state": "#7570b3",
    "FP8 weight copies": "#66a61e",
    "activations": "#e7298a",
    "largest comm buffer": "#a6761d",
    "reserve": "#b3b3b3",
}
CAPACITY_COLOR = "#d62728"

# -- devices (Learn: the cube and the tensor blocks' device ids) ----------------------------------
DEVICE_COLORS = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
]


def device_color(d: int) -> str:
    """Device ``d``'s colour, the same wherever a device id is drawn."""
    return DEVICE_COLORS[int(d) % len(DEVICE_COLORS)]


# -- Learn: orderings and the states of a search step ----------------------------------------------
# Hues of their own: the walk-through on the same page draws data and tensor parallelism in blue and red.
ORDERING_COLORS = {"GenerateSeq": "#01665e", "breadth-first": "#8c510a"}
_ORDERING_SPARE = ["#5ab4ac", "#d8b365", "#762a83", "#1b7837"]


def ordering_color(name: str, index: int = 0) -> str:
    """The colour of ordering ``name`` (``index``: its place, for an ordering without a colour of its own)."""
    return ORDERING_COLORS.get(name, _ORDERING_SPARE[index % len(_ORDERING_SPARE)])


STEP_COLORS = {  # not the walk-through's blues and reds: both are on the Learn page
    "current": "#4d4d4d",
    "dependent": "#ff7f0e",
    "connected": "#c7e9c0",
    "done": "#c7c7c7",
    "pending": "#ffffff",
}
# Tensor blocks: how many devices hold one (a copy: blues; partial sums of C: reds).
REPLICATED_SCALE = [[0, "#e8f1fa"], [1, "#08519c"]]
PARTIAL_SUM_SCALE = [[0, "#fde8e6"], [1, "#a50f15"]]

# -- neutral -----------------------------------------------------------------------------------------
HIGHLIGHT_ROW = "#fff3cd"  # a table row that differs
INK = "#222"
MEASURED = "#9e9e9e"  # published measurements, beside a model's line in INK
MUTED_LINE = "#999"
OUTLINE = "#333"
FOUND_RING = "#111"  # the ring around the layer found on the explorer's graph

# -- kinds of parallelism of a 3-D configuration (Learn: the walk-through's traffic) -----------------
# Data and tensor parallelism take the explorer's colours for data and tensor parallelism; ZeRO, which
# shards the data-parallel replicas' state, a light shade of data's; sequence parallelism, an extension of
# tensor parallelism, a light shade of tensor's; the pipeline a hue of its own.
PARALLELISM_COLORS = {
    "data": KIND_COLORS["data"],
    "ZeRO": "#9ecae1",
    "tensor": KIND_COLORS["tensor"],
    "sequence": "#fc9272",
    "pipeline": "#e6ab02",
}
