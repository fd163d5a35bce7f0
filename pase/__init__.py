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

import importlib

# Public name -> the module that defines it (and its name there). They are imported on first use, so
# that ``python -m pase solve`` loads neither the ONNX and PyTorch importers nor the 3-D training model
# and the exporters unless it needs them.
_LAZY = {
    "PRESETS": "pase.hardware.cluster", "Cluster": "pase.hardware.cluster", "preset": "pase.hardware.cluster",
    "Calibration": "pase.hardware.calibration", "load_calibration": "pase.hardware.calibration",
    "dumps_graph": "pase.io.graph_json", "load_graph": "pase.io.graph_json", "loads_graph": "pase.io.graph_json",
    "save_graph": "pase.io.graph_json",
    "from_hf_config": "pase.io.hf_config",
    "export_plan": "pase.io.export",
    "from_onnx": "pase.io.onnx",
    "from_torch": "pase.io.torch",
    "ConfigOptions": "pase.ir.configs", "config_counts": "pase.ir.configs",
    "Graph": "pase.ir.graph", "Layer": "pase.ir.graph", "TensorSpec": "pase.ir.graph",
    "CostModel": "pase.model.cost", "build_cost_model": "pase.model.cost",
    "SAMPLES": "pase.models", "sample": "pase.models",
    "Parallelism": "pase.model.training", "TrainingPlan": "pase.model.training",
    "evaluate_training": "pase.model.training",
    "Plan": "pase.planner", "PlanOptions": "pase.planner", "evaluate": "pase.planner", "plan": "pase.planner",
    "plan_training": ("pase.search.stages", "search_training"),
}
_SUBMODULES = {"errors": "pase.errors", "models": "pase.models", "ops": "pase.ops",
               "baselines": "pase.analysis.baselines"}

__all__ = [
    "plan", "evaluate", "Plan", "PlanOptions",
    "plan_training", "evaluate_training", "Parallelism", "TrainingPlan",
    "Graph", "Layer", "TensorSpec",
    "Cluster", "PRESETS", "preset", "Calibration", "load_calibration", "ConfigOptions", "config_counts",
    "CostModel", "build_cost_model",
    "load_graph", "save_graph", "loads_graph", "dumps_graph", "from_onnx", "from_torch", "from_hf_config",
    "export_plan",
    "sample", "SAMPLES",
    "baselines", "errors", "ops", "models",
]


def __getattr__(name: str):
    """Import the public attribute ``name`` on first use (see ``_LAZY``); AttributeError for any other name."""
    if name in _SUBMODULES:
        value = importlib.import_module(_SUBMODULES[name])
    elif name in _LAZY:
        module, attr = _LAZY[name] if isinstance(_LAZY[name], tuple) else (_LAZY[name], name)
        value = getattr(importlib.import_module(module), attr)
    else:
        raise AttributeError(f"module 'pase' has no attribute {name!r}")
    globals()[name] = value  # later look-ups find it without this function
    return value


def __dir__() -> list[str]:
    """The module's names, the public ones not imported yet included."""
    return sorted(set(globals()) | set(__all__))
