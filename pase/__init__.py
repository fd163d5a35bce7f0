"""PaSE: parallelization strategies for efficient DNN training (Elango, IPDPS 2021).

The front door is :func:`plan`: given a computation graph and a cluster, it
returns the :class:`Plan` (a configuration per layer) of least modelled step
time. :func:`evaluate` costs any given strategy under the same model.

>>> import pase
>>> from pase.models import sample
>>> result = pase.plan(sample("alexnet"), pase.preset("paper-model", devices=8))
>>> result.step_time_s > 0
True

Modules: :mod:`pase.graph` (IR), :mod:`pase.layers` (ops), :mod:`pase.configs`,
:mod:`pase.cluster`, :mod:`pase.cost`, :mod:`pase.search` (exact DP),
:mod:`pase.approx`, :mod:`pase.memory`, :mod:`pase.topology`,
:mod:`pase.baselines`, :mod:`pase.models`, :mod:`pase.io`,
:mod:`pase.onnx_import`, :mod:`pase.torch_import`, :mod:`pase.cli`.
"""

from pase import baselines, errors, layers, models
from pase.cluster import PRESETS, Cluster, preset
from pase.configs import ConfigOptions, config_counts
from pase.cost import CostModel, build_cost_model
from pase.graph import Graph, Layer, TensorSpec
from pase.io import dumps_graph, load_graph, loads_graph, save_graph
from pase.models import SAMPLES, sample
from pase.onnx_import import from_onnx
from pase.planner import Plan, evaluate, plan
from pase.torch_import import from_torch

__all__ = [
    "plan", "evaluate", "Plan",
    "Graph", "Layer", "TensorSpec",
    "Cluster", "PRESETS", "preset", "ConfigOptions", "config_counts",
    "CostModel", "build_cost_model",
    "load_graph", "save_graph", "loads_graph", "dumps_graph", "from_onnx", "from_torch",
    "sample", "SAMPLES",
    "baselines", "errors", "layers", "models",
]
