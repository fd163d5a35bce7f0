"""PaSE: parallelization strategies for efficient DNN training (Elango, IPDPS 2021).

The front door is :func:`plan`: given a computation graph and a cluster, it
returns the :class:`Plan` (a configuration per layer) of least modelled step
time. :func:`evaluate` costs any given strategy under the same model.
:func:`plan_training` searches 3-D parallel training jointly (pipeline stages,
microbatches, schedule, recomputation, ZeRO, tensor and data sizes, the layer
splits inside a stage) for a model it can rebuild at any microbatch size, and
:func:`evaluate_training` models one :class:`Parallelism`.
:func:`export_plan` writes either kind of plan as DTensor placements, JAX
PartitionSpecs, Megatron-LM arguments, torchtitan or DeepSpeed settings.

>>> import pase
>>> from pase.models import sample
>>> result = pase.plan(sample("alexnet"), pase.preset("paper-model", devices=8))
>>> result.step_time_s > 0
True

The package's folders show its architecture: :mod:`pase.ir` (graph and
configurations), :mod:`pase.ops` (every op's rules), :mod:`pase.hardware`
(clusters and device meshes), :mod:`pase.model` (cost and memory),
:mod:`pase.search` (exact and approximate searches), :mod:`pase.strategies`
(baselines), :mod:`pase.io` (files, ONNX, PyTorch, Hugging Face configs), :mod:`pase.models`
(samples), :mod:`pase.cli`.
"""

from pase import errors, models, ops
from pase.hardware.cluster import PRESETS, Cluster, preset
from pase.io.graph_json import dumps_graph, load_graph, loads_graph, save_graph
from pase.io.hf_config import from_hf_config
from pase.io.export import export_plan
from pase.io.onnx import from_onnx
from pase.io.torch import from_torch
from pase.ir.configs import ConfigOptions, config_counts
from pase.ir.graph import Graph, Layer, TensorSpec
from pase.model.cost import CostModel, build_cost_model
from pase.models import SAMPLES, sample
from pase.model.training import Parallelism, TrainingPlan, evaluate_training
from pase.planner import Plan, PlanOptions, evaluate, plan
from pase.search.stages import search_training as plan_training
from pase.analysis import baselines

__all__ = [
    "plan", "evaluate", "Plan", "PlanOptions",
    "plan_training", "evaluate_training", "Parallelism", "TrainingPlan",
    "Graph", "Layer", "TensorSpec",
    "Cluster", "PRESETS", "preset", "ConfigOptions", "config_counts",
    "CostModel", "build_cost_model",
    "load_graph", "save_graph", "loads_graph", "dumps_graph", "from_onnx", "from_torch", "from_hf_config",
    "export_plan",
    "sample", "SAMPLES",
    "baselines", "errors", "ops", "models",
]
