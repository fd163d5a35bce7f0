"""Plans out of pase: DTensor placements, JAX PartitionSpecs, Megatron-LM, Megatron-Bridge, torchtitan, DeepSpeed.

:func:`export_plan` turns a plan document into the text a framework reads
(``pase export PLAN.json --format ...``, the app's downloads). It takes both
kinds of plan pase writes (``docs/plan-format.md``):

* a **per-layer plan** (:meth:`pase.planner.Plan.to_dict`): every layer's
  split of its iteration dimensions over all devices;
* a **3-D training plan** (:meth:`pase.model.training.TrainingPlan.to_dict`,
  what ``pase evaluate MODEL --tp ... --json`` and ``pase solve --search 3d
  --json`` print): tensor, context, data and pipeline sizes, microbatches,
  schedule, recomputation, ZeRO.

Per-layer plans on a device mesh
--------------------------------
The cost model lays each layer's split factors on the cluster's mesh
(:func:`pase.model.layout.place`): the mesh is read as prime-radix digits
(``node 2 x gpu 8`` is ``node:2, gpu:2, gpu:2, gpu:2``, outermost first), and
every split dimension takes a set of digits whose radices multiply to its
factor, the layer's last dimension on the innermost digits. The exported
mesh is that digit mesh with neighbouring digits merged wherever no layer
tells them apart (both taken by the same dimension of every layer, or both
left free), so a data-parallel plan on 8 devices exports a one-axis mesh of
8. A hardware axis kept whole keeps its name (``gpu``); one cut into several
mesh axes names them ``gpu_0``, ``gpu_1``... outermost first. Ranks are
row-major over the mesh, outermost first (``torch.arange(N).reshape(shape)``:
consecutive ranks share a node, as ``torchrun`` numbers them), and a
dimension split over several mesh axes numbers its blocks with the outer
axis more significant, as DTensor and JAX do for ``(Shard(0), Shard(0))``
and ``P(("a", "b"))``.

Every tensor of a layer (inputs, outputs, weights) then has, on each mesh
axis: ``Shard(i)`` when the axis belongs to the dimension tensor axis ``i``
follows, ``Partial()`` when it belongs to a dimension an output of a
contraction lacks (the pending sum of a split reduction), else
``Replicate()``: the layouts the cost model priced
(:func:`pase.model.layout.tensor_layout`). A JAX PartitionSpec names, per
tensor axis, the mesh axes sharding it (``None``, one name, or a tuple, outer
first); pending sums have no place in a spec and are listed as ``unreduced``.

3-D plans on a named mesh
-------------------------
A 3-D training plan's tensor-parallel layers export as DTensor placements and
PartitionSpecs too (:func:`training_layouts`), on the mesh ``pp x
dp_replicate x dp_shard x cp x tp``.

3-D plans as framework settings
-------------------------------
:mod:`pase.frameworks` writes them, one module per framework at a stated
version: Megatron-LM's arguments (main of 2026-08 with megatron-core 0.16)
and a Megatron-Bridge override, torchtitan 0.2.2's job TOML, DeepSpeed's
JSON, and the launch line (``launch``: nodes, GPUs per node, world size).
``t c d p`` map to the frameworks' tensor, context, data and pipeline sizes,
whose default rank order (tensor innermost, then context, data, pipeline)
is pase's placement (:mod:`pase.model.training`); the data size is the world
size over ``t p c``, so each export names the world. Transformer blocks per
stage are read from the plan's layer names (``pipeline.stages_detail``): a
cut inside a block is refused, and an export never claims layers split
evenly when they do not. A per-layer plan exports to these when its layers
split exactly as Megatron-LM's rule does
(:func:`~pase.strategies.baselines.tensor_parallel_strategy`) for some ``t``,
``c`` and sequence parallelism, the batch split over the rest of the
devices: one pipeline stage, no ZeRO, no recomputation.

What a target cannot express is refused with :class:`NotExpressibleError`,
naming the layers or settings: a per-layer plan whose layers split otherwise
(a per-layer plan is richer than global flags), what a framework does not run
(:meth:`pase.frameworks.Framework.problems`), layer splits searched per layer
inside a stage (the training plan does not record them).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

import numpy as np

from pase.errors import ConfigurationError, FormatError, GraphError
from pase.frameworks.base import NotExpressibleError, TrainingSettings, launch_line
from pase.frameworks.deepspeed import DEEPSPEED
from pase.frameworks.megatron import MEGATRON
from pase.frameworks.torchtitan import TORCHTITAN
from pase.hardware.mesh import DeviceMesh, MeshAxis
from pase.io.files import read_limited
from pase.io.strategy_json import strategy_from_dict
from pase.ir.configs import PRECISIONS, check_config
from pase.ir.graph import Graph, Layer, TensorSpec
from pase.limits import MAX_FILE_BYTES
from pase.model.layout import place, placeable
from pase.model.training import Parallelism
from pase.ops import OPS
from pase.search.stages import SEARCHED_SPLITS

__all__ = ["FORMATS", "NotExpressibleError", "TrainingSettings", "export_plan", "load_plan_document",
           "loads_plan_document", "is_training_plan", "training_from_dict", "plan_graph", "plan_strategy",
           "layer_layouts", "dtensor_export", "partitionspec_export", "megatron_equivalent", "megatron_arguments",
           "megatron_script", "torchtitan_toml", "deepspeed_config", "file_name", "training_layouts",
           "training_dtensor_export", "training_partitionspec_export", "launch_text", "TRAINING_MESH", "EXPERT_MESH",
           "expert_axes"]

FORMATS = ("dtensor", "partitionspec", "megatron", "megatron-bridge", "torchtitan", "deepspeed", "launch")
# Marker and version of the DTensor and PartitionSpec documents this module writes.
VERSION = 1
_SHOWN = 8  # offending layers named in a refusal before "and N more"


# -- reading plan documents ------------------------------------------------------------------


def loads_plan_document(text: str | bytes) -> dict:
    """Parse a plan file's contents (JSON) into a dict, either plan kind.

    Raises ``FormatError`` when it is larger than ``MAX_FILE_BYTES``, not
    JSON, or not an object.
    """
    if len(text) > MAX_FILE_BYTES:
        raise FormatError(f"the file is {len(text) / 2**20:.1f} MiB; at most {MAX_FILE_BYTES / 2**20:.0f} MiB is "
                          "accepted")
    try:
        data = json.loads(text)
    except RecursionError:
        raise FormatError("not valid JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(f"not valid JSON: {' '.join(str(exc).split())[:200]}") from None
    if not isinstance(data, dict):
        raise FormatError(f"a plan file holds a JSON object, not {type(data).__name__}")
    return data


def load_plan_document(path: str | Path) -> dict:
    """Read a plan file (:func:`loads_plan_document`); errors are prefixed with the file's name."""
    path = Path(path)
    data = read_limited(path, MAX_FILE_BYTES, what="plan file")
    try:
        return loads_plan_document(data)
    except FormatError as exc:
        raise FormatError(f"{path.name}: {exc}") from None


def is_training_plan(data: object) -> bool:
    """Whether ``data`` is a 3-D training plan (``TrainingPlan.to_dict``): it has the sizes and the pipeline."""
    return isinstance(data, dict) and all(k in data for k in ("tensor_parallel", "data_parallel",
                                                              "pipeline_parallel", "pipeline"))


def _count(data: Mapping, key: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FormatError(f"field {key!r} of the training plan must be a positive integer, got {value!r}")
    return value


def _nodes(mesh: object, devices: int) -> int:
    """Nodes a training plan's devices span: the extents of its groups on a ``node`` axis, multiplied (1 when
    the mesh has none)."""
    extents = [e.get("node", 1) for e in mesh.values() if isinstance(e, dict)] if isinstance(mesh, dict) else []
    if not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in extents) or \
            devices % math.prod(extents):
        raise FormatError(f"field 'mesh' must give each group's extent on the mesh axes as whole numbers dividing "
                          f"the {devices} devices, got {str(mesh)[:80]!r}")
    return math.prod(extents)


def _modules(value) -> tuple[str, ...] | None:
    """A plan's ``recompute_modules``: None when absent or Megatron-Core's default (the attention core alone)."""
    if value is None or list(value) in ([], ["core_attn"]):
        return None
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise FormatError(f"field 'recompute_modules' must be a list of module names, got {value!r}")
    return tuple(value)


def _expert_settings(experts) -> dict:
    """The expert layout a training plan's ``experts`` object records (``TrainingPlan.experts_dict``), as
    :class:`~pase.model.training.Parallelism` keywords; none without experts."""
    if experts is None:
        return {}
    if not isinstance(experts, dict):
        raise FormatError(f"field 'experts' must be an object, got {str(experts)[:80]!r}")
    return dict(ep=_count(experts, "ep", 1), etp=_count(experts, "etp", 1),
                expert_imbalance=experts.get("imbalance", 1.0), capacity_factor=experts.get("capacity_factor"),
                expert_overlap=experts.get("dispatch_overlap", False), fp8_dispatch=experts.get("fp8_dispatch", False),
                dispatcher=experts.get("dispatcher", "alltoall"),
                shared_expert_overlap=experts.get("shared_expert_overlap", False))


def training_from_dict(data: Mapping) -> TrainingSettings:
    """The settings of a 3-D training plan document (``TrainingPlan.to_dict``; ``docs/plan-format.md``).

    Stage cuts are kept, so the same plan re-costs on another cluster
    (``pase evaluate --plan``); ``overlap`` is not recorded in the document and
    is left False.

    Raises
    ------
    FormatError
        A field is missing or of the wrong type, or the sizes do not make a
        valid :class:`~pase.model.training.Parallelism` (the message says why).
    """
    pipe = data.get("pipeline")
    if not isinstance(pipe, dict):
        raise FormatError("field 'pipeline' of the training plan must be an object (stages, microbatch_size, ...)")
    cuts = pipe.get("stage_cuts") or None
    if cuts is not None and (not isinstance(cuts, list) or not all(isinstance(c, int) and not isinstance(c, bool)
                                                                    for c in cuts)):
        raise FormatError(f"field 'pipeline.stage_cuts' must be a list of layer positions, got {cuts!r}")
    sp = data.get("sequence_parallel", False)
    if not isinstance(sp, bool):
        raise FormatError(f"field 'sequence_parallel' must be true or false, got {sp!r}")
    try:
        par = Parallelism(
            tensor=_count(data, "tensor_parallel"), context=_count(data, "context_parallel", 1),
            data=_count(data, "data_parallel"), pipeline=_count(data, "pipeline_parallel"),
            virtual_stages=_count(pipe, "virtual_stages", 1), microbatch_size=_count(pipe, "microbatch_size"),
            global_batch=_count(pipe, "global_batch"), sequence_parallel=sp,
            recompute=data.get("recompute", "none"), zero=data.get("zero_stage", 0),
            recompute_modules=_modules(data.get("recompute_modules")),
            schedule=pipe.get("schedule"), stage_cuts=tuple(cuts) if cuts else None,
            **_expert_settings(data.get("experts")))
    except ConfigurationError as exc:
        raise FormatError(f"the training plan's settings are not a valid configuration: {exc}") from None
    stages: list[tuple[int, tuple[str, str]]] = []
    detail = pipe.get("stages_detail") or []
    for s in detail if isinstance(detail, list) else []:
        index = s.get("index") if isinstance(s, dict) else None
        runs = s.get("layers") if isinstance(s, dict) else None
        if isinstance(index, bool) or not isinstance(index, int) or not isinstance(runs, list):
            raise FormatError(f"each of 'pipeline.stages_detail' must have an 'index' and its 'layers', got "
                              f"{str(s)[:80]!r}")
        for chunk, run in enumerate(runs):
            if not (isinstance(run, list) and len(run) == 2 and all(isinstance(n, str) for n in run)):
                raise FormatError(f"stage {index}: each run of 'layers' must be [first, last] layer names, got "
                                  f"{str(run)[:80]!r}")
            # Device s runs virtual stages s, s + p, ...: order the runs by virtual stage.
            stages.append((chunk * par.pipeline + index, (run[0], run[1])))
    label = str(data.get("label", ""))
    model = data.get("step_time_model")
    model = model if isinstance(model, dict) else {}
    precision, attention = model.get("precision", "bf16"), model.get("attention", "")
    if precision not in PRECISIONS or attention not in ("flash", "unfused", ""):
        raise FormatError(f"field 'step_time_model' must name precision {', '.join(PRECISIONS)} and attention "
                          "flash or unfused, "
                          f"got {str(model)[:80]!r}")
    return TrainingSettings(parallelism=par, model=str(data.get("graph", "")), label=label,
                            expert=par.ep, nodes=_nodes(data.get("mesh"), par.devices),
                            stages=tuple(run for _, run in sorted(stages)), searched=label.endswith(SEARCHED_SPLITS),
                            precision=precision, attention=attention,
                            blocks=_count(data, "transformer_blocks") if data.get("transformer_blocks") is not None
                            else None, experts=data.get("experts") is not None)


def plan_graph(data: Mapping, graph: Graph | None = None) -> Graph:
    """The graph a per-layer plan is for: ``graph``, or the sample its ``model`` names at the plan's batch.

    Raises
    ------
    GraphError
        No graph is given and ``model`` is not a sample, or a layer of the
        plan has other dimensions or sizes than the graph's (a plan for
        another model or batch).
    """
    if graph is None:
        from pase.models import SAMPLES, sample  # late: the samples import every model builder

        name = data.get("model")
        if name not in SAMPLES:
            raise GraphError(f"the plan is for model {name!r}, which is not a sample; give the model it was made "
                             "for (pase export PLAN.json --model MODEL)")
        graph = sample(name, **({} if _batch(data) is None else {"batch": _batch(data)}))
    layers = data.get("layers")
    for r in layers if isinstance(layers, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or r["name"] not in graph:
            continue
        layer = graph.layer(r["name"])
        if ("dims" in r and _dims(r) != list(layer.dims)) or ("sizes" in r and r["sizes"] != list(layer.sizes)):
            raise GraphError(f"plan layer {r['name']!r} has dimensions {''.join(_dims(r))} = {r.get('sizes')}, but "
                             f"the model's is {''.join(layer.dims)} = {list(layer.sizes)}; give the model and batch "
                             "the plan was made for")
    return graph


def _batch(data: Mapping) -> int | None:
    """The size of dimension ``b`` in the first plan layer that has one (None: no such layer)."""
    layers = data.get("layers")
    for r in layers if isinstance(layers, list) else []:
        sizes = r.get("sizes") if isinstance(r, dict) else None
        if "b" in _dims(r) and isinstance(sizes, list) and len(sizes) == len(_dims(r)):
            size = sizes[_dims(r).index("b")]
            if isinstance(size, int) and not isinstance(size, bool) and size >= 1:
                return size
    return None


def _dims(record: object) -> list[str]:
    dims = record.get("dims", []) if isinstance(record, dict) else []
    return list(dims) if isinstance(dims, (str, list)) else []


def plan_strategy(data: Mapping, graph: Graph) -> tuple[dict[str, tuple[int, ...]], int]:
    """Every layer's configuration in a per-layer plan (left-out layers data parallel) and its device count.

    Raises
    ------
    FormatError
        The document is no per-layer plan (:func:`~pase.io.strategy_json.strategy_from_dict`) or has no
        ``devices``.
    GraphError, ConfigurationError
        It names a layer the graph lacks, or a configuration does not suit its layer.
    """
    from pase.strategies.baselines import data_parallel_config

    devices = data.get("devices")
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise FormatError("the plan has no device count ('devices'); export a plan document that pase solve --json "
                          "or pase evaluate --json wrote")
    given = strategy_from_dict(dict(data))
    unknown = sorted(set(given) - {layer.name for layer in graph})
    if unknown:
        raise GraphError(f"the plan names layers graph {graph.name!r} does not have: {unknown[:5]}")
    strategy = {layer.name: check_config(layer, given[layer.name], devices) if layer.name in given
                else data_parallel_config(layer, devices) for layer in graph}
    return strategy, devices


def _hardware_mesh(data: Mapping, devices: int) -> DeviceMesh:
    """The device mesh a per-layer plan was costed on: its ``mesh`` text (``"node 2 x gpu 8"``), else flat."""
    text = data.get("mesh")
    axes = []
    if isinstance(text, str) and text:
        for part in text.split(" x "):
            name, _, size = part.rpartition(" ")
            if not name or not size.isdigit() or len(size) > 9 or int(size) < 1:
                raise FormatError(f"field 'mesh' must read like 'node 2 x gpu 8', got {text[:80]!r}")
            axes.append(MeshAxis(name, int(size), 1.0))
    mesh = DeviceMesh(tuple(axes) or (MeshAxis("devices", devices, 1.0),))
    if mesh.devices != devices:
        raise FormatError(f"the plan's mesh {str(text)[:80]!r} has {mesh.devices} devices, but the plan says "
                          f"{devices}")
    return mesh


# -- per-layer plans: DTensor and PartitionSpec ------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """One tensor's placement on the export mesh: per mesh axis, ``("S", i)``, ``("P",)`` or ``("R",)``."""

    role: str
    index: int
    tensor: TensorSpec
    placements: tuple[tuple, ...]
    local_shape: tuple[int, ...]
    mesh: str = "layer"  # "expert": placements over the expert mesh's inner dimensions (EXPERT_MESH)


def layer_layouts(graph: Graph, strategy: Mapping[str, tuple[int, ...]], mesh: DeviceMesh):
    """The export mesh and every layer's tensor layouts on it (module docstring).

    Returns ``(axes, layers)``: ``axes`` a list of ``(name, size)``, outermost
    first; ``layers`` a list of ``(layer, config, owners, layouts)`` where
    ``owners[j]`` is the dimension mesh axis ``j`` splits (None: replicated)
    and ``layouts`` a list of ``_Layout``.

    Raises
    ------
    NotExpressibleError
        A layer uses a device count that does not divide the mesh's (only the
        paper's cost model allows it), so no mesh axis holds its split.
    """
    bad = [name for name, cfg in strategy.items() if not placeable(np.array([cfg]), mesh.devices)[0]]
    if bad:
        shown = ", ".join(repr(n) for n in bad[:_SHOWN]) + (f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else "")
        raise NotExpressibleError(
            f"layers {shown} use a device count that does not divide the mesh's {mesh.devices} devices, so no device "
            "mesh holds their splits; re-plan under the corrected cost model (the default)")
    digits = mesh.digits
    n = len(digits)
    owners_by_layer = []
    for layer in graph:
        masks = place(np.array([strategy[layer.name]]), mesh).masks[0]
        owner = [None] * n
        for d, mask in enumerate(masks.tolist()):
            for i in range(n):
                if mask >> (n - 1 - i) & 1:
                    owner[i] = d
        owners_by_layer.append(owner)
    # Merge neighbouring digits of one hardware axis that every layer gives the same owner.
    groups: list[list[int]] = []
    for i in range(n):
        if groups and digits[groups[-1][-1]][0] == digits[i][0] and all(o[i] == o[groups[-1][-1]]
                                                                        for o in owners_by_layer):
            groups[-1].append(i)
        else:
            groups.append([i])
    per_axis: dict[int, int] = {}
    for g in groups:
        per_axis[digits[g[0]][0]] = per_axis.get(digits[g[0]][0], 0) + 1
    seen: dict[int, int] = {}
    axes = []
    for g in groups:
        j = digits[g[0]][0]
        name = mesh.axes[j].name
        if per_axis[j] > 1:
            name = f"{name}_{seen.get(j, 0)}"
            seen[j] = seen.get(j, 0) + 1
        axes.append((name, math.prod(digits[i][1] for i in g)))
    layers = []
    for layer, owner in zip(graph, owners_by_layer):
        owners = [None if owner[g[0]] is None else layer.dims[owner[g[0]]] for g in groups]
        layouts = [_tensor_layout(layer, role, k, t, owners, axes)
                   for role, tensors in (("input", layer.inputs), ("output", layer.outputs), ("weight", layer.weights))
                   for k, t in enumerate(tensors)]
        layers.append((layer, strategy[layer.name], owners, layouts))
    return axes, layers


def _tensor_layout(layer: Layer, role: str, index: int, tensor: TensorSpec, owners, axes) -> _Layout:
    pending = role == "output" and OPS[layer.op].contraction
    placements, split = [], [1] * len(tensor.shape)
    for dim, (_, size) in zip(owners, axes):
        if dim is not None and dim in tensor.axes:
            i = tensor.axes.index(dim)
            placements.append(("S", i))
            split[i] *= size
        elif dim is not None and pending:
            placements.append(("P",))
        else:
            placements.append(("R",))
    # DTensor chunks like torch.chunk: a device holds ceil(n / k) elements of an axis (the first ones).
    local = tuple(-(-n // k) for n, k in zip(tensor.shape, split))
    return _Layout(role, index, tensor, tuple(placements), local)


def _dtensor_text(p: tuple) -> str:
    return {"S": lambda: f"Shard({p[1]})", "P": lambda: "Partial()", "R": lambda: "Replicate()"}[p[0]]()


def _per_layer_header(data: Mapping, graph: Graph, devices: int, mesh: DeviceMesh, fmt: str) -> dict:
    return {"format": f"pase-{fmt}", "version": VERSION, "model": graph.name, "devices": devices,
            "hardware_mesh": str(mesh), "label": data.get("label", "")}


def dtensor_export(data: Mapping, graph: Graph | None = None) -> dict:
    """A per-layer plan as DTensor placements: the device mesh and, per layer, every tensor's placements.

    ``mesh.shape`` and ``mesh.dim_names`` build the mesh
    (``init_device_mesh("cuda", shape, mesh_dim_names=names)``); each
    tensor's ``placements`` has one of ``Shard(i)``, ``Replicate()``,
    ``Partial()`` per mesh dimension, and ``local_shape`` is the block one
    device holds. Raises as :func:`plan_graph`, :func:`plan_strategy` and
    :func:`layer_layouts`.
    """
    graph = plan_graph(data, graph)
    strategy, devices = plan_strategy(data, graph)
    mesh = _hardware_mesh(data, devices)
    axes, layers = layer_layouts(graph, strategy, mesh)
    out = _per_layer_header(data, graph, devices, mesh, "dtensor")
    out["mesh"] = {"shape": [s for _, s in axes], "dim_names": [a for a, _ in axes]}
    out["layers"] = [{
        "name": layer.name, "op": layer.op, "dims": list(layer.dims), "config": list(cfg),
        "mesh_dims": {d: [a for (a, _), o in zip(axes, owners) if o == d] for d in layer.dims if d in owners},
        "tensors": [{"role": t.role, "index": t.index, "name": t.tensor.name, "shape": list(t.tensor.shape),
                     "placements": [_dtensor_text(p) for p in t.placements], "local_shape": list(t.local_shape)}
                    for t in layouts],
    } for layer, cfg, owners, layouts in layers]
    return out


def partitionspec_export(data: Mapping, graph: Graph | None = None) -> dict:
    """A per-layer plan as JAX PartitionSpecs: the mesh's axis names and sizes and, per tensor, its spec.

    ``spec`` has one entry per tensor axis: ``null``, a mesh axis name, or a
    list of names (outer first); ``unreduced`` lists the mesh axes over which
    an output is a pending sum (the spec itself shows it replicated there);
    ``python`` is the spec as ``PartitionSpec`` source. Raises as
    :func:`dtensor_export`.
    """
    graph = plan_graph(data, graph)
    strategy, devices = plan_strategy(data, graph)
    mesh = _hardware_mesh(data, devices)
    axes, layers = layer_layouts(graph, strategy, mesh)
    out = _per_layer_header(data, graph, devices, mesh, "partitionspec")
    out["mesh"] = {"axis_names": [a for a, _ in axes], "shape": [s for _, s in axes]}
    records = []
    for layer, cfg, owners, layouts in layers:
        tensors = []
        for t in layouts:
            spec: list = [[] for _ in t.tensor.shape]
            for (name, _), p in zip(axes, t.placements):
                if p[0] == "S":
                    spec[p[1]].append(name)
            spec = [None if not s else s[0] if len(s) == 1 else s for s in spec]
            tensors.append({"role": t.role, "index": t.index, "name": t.tensor.name, "shape": list(t.tensor.shape),
                            "spec": spec, "unreduced": [n for (n, _), p in zip(axes, t.placements) if p[0] == "P"],
                            "python": _spec_source(spec)})
        records.append({"name": layer.name, "op": layer.op, "dims": list(layer.dims), "config": list(cfg),
                        "tensors": tensors})
    out["layers"] = records
    return out


def _spec_source(spec: list) -> str:
    def one(s):
        return "None" if s is None else repr(s) if isinstance(s, str) else "(" + ", ".join(map(repr, s)) + ")"
    return "P(" + ", ".join(one(s) for s in spec) + ")"


# -- per-layer plans as Megatron-LM's rule -----------------------------------------------------


def megatron_equivalent(data: Mapping, graph: Graph | None = None) -> TrainingSettings:
    """The global settings of a per-layer plan whose every layer splits as Megatron-LM's rule does.

    Tried: every tensor size ``t`` some layer splits a model dimension
    (vocabulary, heads, feed-forward) into and every context size ``c`` some
    layer splits its sequence into (and 1), with ``t c`` dividing the
    devices, with and without sequence parallelism; each layer must have
    :func:`~pase.strategies.baselines.tensor_parallel_strategy`'s split with
    its batch split ``devices / (t c)`` ways. The result has one pipeline
    stage, microbatch ``batch / d`` and no ZeRO or recomputation.

    Raises
    ------
    NotExpressibleError
        No such ``t``, ``c``: the message names the layers that differ from
        the closest candidate, with their configuration and Megatron's.
    """
    from pase.analysis.throughput import batch_size  # late: pase.analysis imports the planner
    from pase.strategies.baselines import MODEL_DIMS, tensor_parallel_strategy

    graph = plan_graph(data, graph)
    strategy, devices = plan_strategy(data, graph)
    batch = batch_size(graph)
    # Only sizes the plan itself uses can match every layer: this keeps the candidates few on large meshes.
    splits = [dict(zip(layer.dims, strategy[layer.name])) for layer in graph]
    tensors = {1} | {f for s in splits for dim, f in s.items() if dim in MODEL_DIMS}
    contexts = {1} | {s["s"] for s in splits if "s" in s}
    best = None
    for t, c, sp in ((t, c, sp) for t in sorted(tensors) for c in sorted(contexts) for sp in (False, True)
                     if devices % (t * c) == 0):
        try:
            rule = tensor_parallel_strategy(graph, t, c, sp)
        except ConfigurationError:
            continue
        d = devices // (t * c)
        want = {layer.name: tuple(d if dim == "b" else f for dim, f in zip(layer.dims, rule[layer.name]))
                for layer in graph}
        differ = [name for name in want if want[name] != tuple(strategy[name])]
        if best is None or len(differ) < len(best[0]):
            best = (differ, t, c, sp, d, want)
    differ, t, c, sp, d, want = best
    if not differ and (batch is None or batch % d):
        raise NotExpressibleError(f"the layers split as Megatron-LM's rule at tensor parallel {t}, but the model's "
                                  f"batch ({batch}) does not split over its {d} data-parallel replicas")
    if differ:
        shown = "; ".join(f"{n!r} {list(strategy[n])} (Megatron-LM's {list(want[n])})" for n in differ[:_SHOWN])
        more = f" and {len(differ) - _SHOWN} more" if len(differ) > _SHOWN else ""
        raise NotExpressibleError(
            f"the per-layer plan is not expressible as Megatron-LM's global flags: {len(differ)} of {len(graph)} "
            f"layers split otherwise than its rule at the closest setting (tensor parallel {t}, context parallel "
            f"{c}, data parallel {d}{', sequence parallel' if sp else ''}): {shown}{more}")
    par = Parallelism(tensor=t, context=c, data=d, pipeline=1, microbatch_size=batch // d, global_batch=batch,
                      sequence_parallel=sp and t > 1)
    return TrainingSettings(parallelism=par, model=graph.name, label=str(data.get("label", "")),
                            nodes=math.prod(a.size for a in _hardware_mesh(data, devices).axes if a.name == "node"))


def _settings(data: Mapping, graph: Graph | None) -> TrainingSettings:
    return training_from_dict(data) if is_training_plan(data) else megatron_equivalent(data, graph)


# -- 3-D plans on a named device mesh: DTensor and PartitionSpec -------------------------------------

# The mesh a 3-D plan's tensor-parallel layers live on, outermost first (torchtitan's ParallelDims order).
TRAINING_MESH = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
# The experts' mesh of a plan with expert parallelism, over the same devices: per pipeline stage its t c d
# devices folded as expert data x expert x expert tensor parallelism (Megatron-Core's and torchtitan's folding,
# ranks row-major as the dense mesh's: expert tensor innermost, then expert).
EXPERT_MESH = ("pp", "edp", "ep", "etp")


def expert_axes(par) -> list[tuple[str, int]] | None:
    """The ``(name, size)`` of the expert mesh of ``par`` (a :class:`~pase.model.training.Parallelism`), None
    without expert parallelism."""
    if par.ep == 1:
        return None
    return list(zip(EXPERT_MESH, (par.pipeline, par.expert_data, par.ep, par.expert_tensor)))


def _expert_layout(layout: _Layout, par, zero3: bool) -> _Layout:
    """An expert weight's layout on the expert mesh's inner dimensions ``edp, ep, etp``: the experts axis
    (``x``) over ``ep`` (and, under ZeRO 3, FSDP's ``edp`` outside it), each expert's feed-forward axis (``f``)
    over ``etp``."""
    t = layout.tensor
    experts, width = t.axes.index("x"), t.axes.index("f")
    placements = [("S", experts) if zero3 and par.expert_data > 1 else ("R",), ("S", experts),
                  ("S", width) if par.expert_tensor > 1 else ("R",)]
    sizes = [par.expert_data, par.ep, par.expert_tensor]
    return _Layout(layout.role, layout.index, t, tuple(placements), _local_shape(t.shape, placements, sizes),
                   mesh="expert")


def training_layouts(data: Mapping, graph: Graph | None = None):
    """The named mesh of a 3-D training plan and the placements of its layers' tensors on it.

    The mesh is ``pp x dp_replicate x dp_shard x cp x tp`` (torchtitan's
    order, ranks row-major as ``torchrun`` numbers them and Megatron-LM's
    ``tp-cp-dp-pp`` places them): the data-parallel replicas are
    ``dp_shard`` under ZeRO 3 (FSDP shards each weight's first axis over
    them) and ``dp_replicate`` otherwise. A layer runs on one pipeline stage,
    so its placements are over the four inner dimensions (``layer_mesh``):
    the batch over both data-parallel dimensions, the sequence over ``cp``
    (and over ``tp`` under sequence parallelism, in the layers without a
    model dimension), the model dimension (vocabulary, heads, feed-forward)
    over ``tp`` as Megatron-LM's rule splits it
    (:func:`~pase.strategies.baselines.tensor_parallel_strategy`), a row-
    parallel product's output ``Partial()`` over ``tp``. Shapes are global:
    an activation's batch is the microbatch times the replicas.

    Listed are the layers outside the transformer blocks and those of the
    first block; every other block's layers split as the first's. ``graph``
    is the model at the microbatch size (default: the sample the plan names).

    Returns ``(axes, layer_mesh, records)``: ``axes`` the ``(name, size)`` of
    the mesh, ``layer_mesh`` the names of its inner dimensions, ``records``
    per layer ``(layer, stage, layouts)``. With expert parallelism the
    experts' weights are placed on the expert mesh (:func:`expert_axes`,
    their layouts' ``mesh`` is ``"expert"``), the experts over ``ep``.

    Raises
    ------
    FormatError
        The document is no valid training plan.
    GraphError
        No graph is given and the plan's model is not a sample.
    NotExpressibleError
        Its layer splits were searched per layer (the plan does not record them).
    ConfigurationError
        Megatron's rule does not split the model at the plan's sizes.
    """
    from pase.frameworks.base import block_index
    from pase.strategies.baselines import tensor_parallel_strategy

    s = training_from_dict(data)
    par = s.parallelism
    if s.searched:
        raise NotExpressibleError(f"its layer splits inside a stage were searched per layer ({s.label!r}), which "
                                  "the training plan does not record; export a plan with Megatron layer splits")
    if graph is None:
        from pase.models import SAMPLES, sample  # late: the samples import every model builder

        if s.model not in SAMPLES:
            raise GraphError(f"the plan is for model {s.model!r}, which is not a sample; give the model it was made "
                             "for (pase export PLAN.json --model MODEL)")
        graph = sample(s.model, batch=par.microbatch_size)
    rule = tensor_parallel_strategy(graph, par.tensor, par.context, par.sequence_parallel)
    zero3 = par.zero == 3 and par.data > 1
    axes = list(zip(TRAINING_MESH, (par.pipeline, 1 if zero3 else par.data, par.data if zero3 else 1, par.context,
                                    par.tensor)))
    inner = axes[1:]
    index = [block_index(layer.name) for layer in graph]
    first_block = next((k for k in index if k is not None), None)
    seen_block = False
    records = []
    for layer, k in zip(graph, index):
        seen_block |= k is not None
        if k is not None and k != first_block:
            continue
        splits = dict(zip(layer.dims, rule[layer.name]))
        model = next((d for d, f in splits.items() if d != "s" and f > 1), None)
        sequence_tp = model is None and splits.get("s", 1) == par.context * par.tensor and par.tensor > 1
        owners = ["b" if "b" in layer.dims else None] * 2 + [
            "s" if par.context > 1 and "s" in layer.dims else None, "s" if sequence_tp else model]
        layouts = []
        for role, tensors in (("input", layer.inputs), ("output", layer.outputs), ("weight", layer.weights)):
            for i, t in enumerate(tensors):
                global_t = replace(t, shape=tuple(n * par.data if a == "b" else n for n, a in zip(t.shape, t.axes)))
                lay = _tensor_layout(layer, role, i, global_t, owners, inner)
                if role == "weight" and zero3 and t.shape:
                    # FSDP2 shards each weight's first axis over dp_shard (nested inside any tensor-parallel shard).
                    placements = list(lay.placements)
                    placements[1] = ("S", 0)
                    lay = _Layout(role, i, global_t, tuple(placements),
                                  _local_shape(global_t.shape, placements, [n for _, n in inner]))
                if role == "weight" and layer.op == "MoEExperts" and par.ep > 1:
                    lay = _expert_layout(lay, par, zero3)
                layouts.append(lay)
        # The layers before the blocks run on the first stage, those after them on the last (its device).
        stage = 0 if k is not None or not seen_block else (par.pipeline * par.virtual_stages - 1) % par.pipeline
        records.append((layer, stage, layouts))
    return axes, [a for a, _ in inner], records


def _local_shape(shape, placements, sizes) -> tuple[int, ...]:
    split = [1] * len(shape)
    for p, n in zip(placements, sizes):
        if p[0] == "S":
            split[p[1]] *= n
    return tuple(-(-x // k) for x, k in zip(shape, split))


def _training_header(data: Mapping, fmt: str, axes) -> dict:
    s = training_from_dict(data)
    return {"format": f"pase-{fmt}", "version": VERSION, "model": s.model, "devices": s.parallelism.devices,
            "label": s.label, "plan": "3-D training plan: the layers outside the transformer blocks and those of "
            "the first block; every block's layers split as the first's"}


def training_dtensor_export(data: Mapping, graph: Graph | None = None) -> dict:
    """A 3-D training plan as DTensor placements on the named mesh of :func:`training_layouts`.

    ``mesh`` builds the device mesh (``init_device_mesh("cuda", shape,
    mesh_dim_names=dim_names)``); each tensor's ``placements`` are over
    ``layer_mesh`` (``mesh[tuple(layer_mesh)]``, the sub-mesh of the layer's
    pipeline ``stage``), its ``shape`` global and ``local_shape`` what the
    first device holds (DTensor gives the first devices the larger blocks of
    an uneven split). Raises as :func:`training_layouts`.
    """
    axes, layer_mesh, records = training_layouts(data, graph)
    out = _training_header(data, "dtensor", axes)
    out["mesh"] = {"shape": [n for _, n in axes], "dim_names": [a for a, _ in axes], "layer_mesh": layer_mesh}
    experts = expert_axes(training_from_dict(data).parallelism)
    if experts is not None:
        out["expert_mesh"] = {"shape": [n for _, n in experts], "dim_names": [a for a, _ in experts],
                              "layer_mesh": [a for a, _ in experts[1:]]}
    out["layers"] = [{
        "name": layer.name, "op": layer.op, "dims": list(layer.dims), "stage": stage,
        "tensors": [{"role": t.role, "index": t.index, "name": t.tensor.name, "shape": list(t.tensor.shape),
                     "placements": [_dtensor_text(p) for p in t.placements], "local_shape": list(t.local_shape),
                     **({"mesh": "expert_mesh"} if t.mesh == "expert" else {})}
                    for t in layouts]} for layer, stage, layouts in records]
    return out


def training_partitionspec_export(data: Mapping, graph: Graph | None = None) -> dict:
    """A 3-D training plan as JAX PartitionSpecs on the named mesh of :func:`training_layouts` (``pp`` never
    appears in a spec: a layer lives on its ``stage``). Raises as :func:`training_layouts`."""
    axes, layer_mesh, records = training_layouts(data, graph)
    out = _training_header(data, "partitionspec", axes)
    out["mesh"] = {"axis_names": [a for a, _ in axes], "shape": [n for _, n in axes]}
    experts = expert_axes(training_from_dict(data).parallelism)
    if experts is not None:
        out["expert_mesh"] = {"axis_names": [a for a, _ in experts], "shape": [n for _, n in experts]}

    def record(t: _Layout) -> dict:
        if t.mesh == "expert":
            return {**_spec_record(t, [(a, 0) for a, _ in experts[1:]]), "mesh": "expert_mesh"}
        return _spec_record(t, [(a, 0) for a in layer_mesh])

    out["layers"] = [{"name": layer.name, "op": layer.op, "dims": list(layer.dims), "stage": stage,
                      "tensors": [record(t) for t in layouts]} for layer, stage, layouts in records]
    return out


def _spec_record(t: "_Layout", axes) -> dict:
    """One tensor's PartitionSpec record: per axis the mesh axes sharding it, outer first; pending sums apart."""
    spec: list = [[] for _ in t.tensor.shape]
    for (name, _), p in zip(axes, t.placements):
        if p[0] == "S":
            spec[p[1]].append(name)
    spec = [None if not x else x[0] if len(x) == 1 else x for x in spec]
    return {"role": t.role, "index": t.index, "name": t.tensor.name, "shape": list(t.tensor.shape), "spec": spec,
            "unreduced": [n for (n, _), p in zip(axes, t.placements) if p[0] == "P"], "python": _spec_source(spec)}


# -- 3-D settings: Megatron-LM, torchtitan, DeepSpeed (pase.frameworks), the launch line -------------


def megatron_arguments(s: TrainingSettings) -> list[str]:
    """Megatron-LM's arguments of ``s`` (:meth:`pase.frameworks.megatron.Megatron.arguments`)."""
    return MEGATRON.arguments(s)


def megatron_script(s: TrainingSettings) -> str:
    """The ``torchrun`` line and Megatron-LM arguments of ``s`` (:meth:`pase.frameworks.megatron.Megatron.script`)."""
    return MEGATRON.script(s)


def torchtitan_toml(s: TrainingSettings) -> str:
    """torchtitan's job TOML of ``s`` (:meth:`pase.frameworks.torchtitan.Torchtitan.toml`)."""
    return TORCHTITAN.toml(s)


def deepspeed_config(s: TrainingSettings) -> dict:
    """DeepSpeed's configuration of ``s`` (:meth:`pase.frameworks.deepspeed.DeepSpeed.config`)."""
    return DEEPSPEED.config(s)


def launch_text(s: TrainingSettings) -> str:
    """The plan's launch lines: nodes, GPUs per node and world size, and each framework's launcher."""
    p = s.parallelism
    return "\n".join([
        f"# {s.model or 'the model'}, pase plan {s.label or p.describe()!r}: {s.nodes} nodes x "
        f"{p.devices // s.nodes} GPUs per node = world size {p.devices} (tp {p.tensor} x cp {p.context} x dp "
        f"{p.data} x pp {p.pipeline})",
        f"NNODES={s.nodes} NPROC_PER_NODE={p.devices // s.nodes} WORLD_SIZE={p.devices}",
        "# Megatron-LM:  " + launch_line(s, "pretrain_gpt.py ..."),
        "# torchtitan:   " + launch_line(s, "-m torchtitan.train --job.config_file JOB.toml"),
        "# DeepSpeed:    " + DEEPSPEED.launch(s)]) + "\n"


# -- the front door ----------------------------------------------------------------------------


def export_plan(data: Mapping, fmt: str, *, graph: Graph | None = None) -> str:
    """Plan document ``data`` (either kind) as the text of ``fmt``, one of :data:`FORMATS`.

    ``graph`` is the model of a per-layer plan (default: the sample its
    ``model`` names), or of a 3-D training plan's DTensor and PartitionSpec
    exports at its microbatch size (default: the sample it names).

    Raises
    ------
    FormatError
        ``fmt`` is unknown, or the document is malformed.
    GraphError, ConfigurationError
        The plan does not suit the graph.
    NotExpressibleError
        The target cannot express the plan; the message names the layers or settings.
    """
    if fmt not in FORMATS:
        raise FormatError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt in ("dtensor", "partitionspec"):
        if is_training_plan(data):
            doc = (training_dtensor_export if fmt == "dtensor" else training_partitionspec_export)(data, graph)
        else:
            doc = dtensor_export(data, graph) if fmt == "dtensor" else partitionspec_export(data, graph)
        return json.dumps(doc, indent=1) + "\n"
    settings = _settings(data, graph)
    if fmt == "megatron":
        return MEGATRON.script(settings)
    if fmt == "megatron-bridge":
        return MEGATRON.bridge(settings)
    if fmt == "torchtitan":
        return TORCHTITAN.toml(settings)
    if fmt == "launch":
        return launch_text(settings)
    return json.dumps(DEEPSPEED.config(settings), indent=1) + "\n"


def file_name(model: str, fmt: str) -> str:
    """A download name for ``fmt`` of ``model``: ``gpt-megatron.sh``, ``gpt-torchtitan.toml``..."""
    ext = {"megatron": "sh", "launch": "sh", "torchtitan": "toml", "megatron-bridge": "txt"}.get(fmt, "json")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model or "plan")
    return f"{safe}-{fmt}.{ext}"
