"""Figure builders: plain functions that return plotly figures (no Streamlit), one module per concern.

* :mod:`ui.figures.graph`: the strategy graph; :mod:`ui.figures.routing`: its labels and edges kept apart;
* :mod:`ui.figures.costs`: step time per layer and per strategy;
* :mod:`ui.figures.memory`: memory per device;
* :mod:`ui.figures.sweeps`: the what-if sweeps;
* :mod:`ui.figures.learn`: the Learn page's GEMM and search figures.

The 3-D training plans' figures (pipeline schedule, memory per stage, device mesh) are in
:mod:`ui.training_figures`. Every number drawn comes from :mod:`pase` (plans, sweeps, search
statistics); these functions only arrange and colour it. Everything is importable from here.
"""

from ui.figures.costs import SORT_KEYS, cost_breakdown_figure, layer_compare_figure, sort_layers, totals_figure
from ui.figures.graph import (
    EDGE_LEVELS, MAX_LABELLED_NODES, NODE_COLOR_MODES, edge_level, edge_style, node_label, strategy_graph_figure,
)
from ui.figures.learn import (
    STEP_ORDER, dependent_sets_figure, gemm_cube_figure, gemm_tensors_figure, search_step_figure,
)
from ui.figures.memory import MEMORY_PARTS, memory_figure
from ui.figures.sweeps import paired_colors, split_changes_figure, sweep_figure, sweep_panels_figure
from ui.graphview import KINDS
from ui.palette import COST_COLORS, KIND_COLORS

__all__ = [
    "KINDS",
    "KIND_COLORS",
    "COST_COLORS",
    "EDGE_LEVELS",
    "MAX_LABELLED_NODES",
    "NODE_COLOR_MODES",
    "MEMORY_PARTS",
    "STEP_ORDER",
    "strategy_graph_figure",
    "edge_level",
    "edge_style",
    "node_label",
    "cost_breakdown_figure",
    "SORT_KEYS",
    "sort_layers",
    "totals_figure",
    "memory_figure",
    "layer_compare_figure",
    "paired_colors",
    "sweep_figure",
    "sweep_panels_figure",
    "split_changes_figure",
    "gemm_cube_figure",
    "gemm_tensors_figure",
    "search_step_figure",
    "dependent_sets_figure",
]
