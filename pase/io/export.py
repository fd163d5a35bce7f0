"""Plans out of pase: DTensor placements, JAX PartitionSpecs, Megatron-LM, torchtitan and DeepSpeed settings.

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

3-D plans as framework settings
-------------------------------
``t c d p`` map to Megatron-LM's tensor, context, (implied) data and
pipeline sizes, whose default rank order ``tp-cp-ep-dp-pp`` (tensor
innermost) is pase's placement (:mod:`pase.model.training`: the ``t x c``
group innermost, then data, then pipeline); the data size is the world size
over ``t p c``, so the export starts with the ``torchrun`` line giving the
world. torchtitan gets its ``[parallelism]`` degrees, and DeepSpeed the ZeRO
stage and batch arithmetic (``train_batch_size = micro x accumulation x d``).
A per-layer plan exports to these when its layers split exactly as
Megatron-LM's rule does (:func:`~pase.strategies.baselines.tensor_parallel_strategy`)
for some ``t``, ``c`` and sequence parallelism, the batch split over the
rest of the devices: one pipeline stage, no ZeRO, no recomputation.

What a target cannot express is refused with :class:`NotExpressibleError`,
naming the layers or settings: a per-layer plan whose layers split otherwise
(a per-layer plan is richer than global flags), ZeRO stages Megatron-LM or
torchtitan lack, GPipe in Megatron-LM, ZeRO 2 or 3 with pipeline stages in
DeepSpeed, layer splits searched per layer inside a stage (the training plan
does not record them).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from pase.errors import ConfigurationError, FormatError, GraphError, PaseError
from pase.hardware.mesh import DeviceMesh, MeshAxis
from pase.io.files import read_limited
from pase.io.strategy_json import strategy_from_dict
from pase.ir.configs import check_config
from pase.ir.graph import Graph, Layer, TensorSpec
from pase.limits import MAX_FILE_BYTES
from pase.model.layout import place, placeable
from pase.model.training import Parallelism
from pase.ops import OPS
from pase.search.stages import SEARCHED_SPLITS

__all__ = ["FORMATS", "NotExpressibleError", "TrainingSettings", "export_plan", "load_plan_document",
           "loads_plan_document", "is_training_plan", "training_from_dict", "plan_graph", "plan_strategy",
           "layer_layouts", "dtensor_export", "partitionspec_export", "megatron_equivalent", "megatron_arguments",
           "megatron_script", "torchtitan_toml", "deepspeed_config", "file_name"]

FORMATS = ("dtensor", "partitionspec", "megatron", "torchtitan", "deepspeed")
# Marker and version of the DTensor and PartitionSpec documents this module writes.
VERSION = 1
_TITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe"}
_SHOWN = 8  # offending layers named in a refusal before "and N more"


class NotExpressibleError(PaseError):
    """The plan cannot be written in the target framework's settings; the message names what cannot."""


@dataclass(frozen=True)
class TrainingSettings:
    """A plan as global 3-D settings: what the Megatron-LM, torchtitan and DeepSpeed exports write.

    ``parallelism`` holds the sizes, batch, schedule, recomputation and ZeRO
    stage; ``expert`` the expert-parallel size (1 without experts);
    ``nodes`` the nodes the devices span (1 on a flat mesh); ``stages`` per
    virtual stage its first and last layer name (empty when unknown);
    ``searched`` whether the splits inside a stage were searched per layer
    rather than Megatron's rule; ``label`` and ``model`` for comments.
    """

    parallelism: Parallelism
    model: str
    label: str = ""
    expert: int = 1
    nodes: int = 1
    stages: tuple[tuple[str, str], ...] = ()
    searched: bool = False


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


def _expert_settings(experts) -> dict:
    """The expert layout a training plan's ``experts`` object records (``TrainingPlan.experts_dict``), as
    :class:`~pase.model.training.Parallelism` keywords; none without experts."""
    if experts is None:
        return {}
    if not isinstance(experts, dict):
        raise FormatError(f"field 'experts' must be an object, got {str(experts)[:80]!r}")
    return dict(ep=_count(experts, "ep", 1), etp=_count(experts, "etp", 1),
                expert_imbalance=experts.get("imbalance", 1.0), capacity_factor=experts.get("capacity_factor"),
                expert_overlap=experts.get("dispatch_overlap", False), fp8_dispatch=experts.get("fp8_dispatch", False))


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
    return TrainingSettings(parallelism=par, model=str(data.get("graph", "")), label=label,
                            expert=_count(data, "expert_parallel", 1), nodes=_nodes(data.get("mesh"), par.devices),
                            stages=tuple(run for _, run in sorted(stages)), searched=label.endswith(SEARCHED_SPLITS))


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


# -- 3-D settings: Megatron-LM, torchtitan, DeepSpeed -------------------------------------------


def _refuse(target: str, problems: list[str]) -> None:
    if problems:
        raise NotExpressibleError(f"the plan is not expressible in {target}: " + "; ".join(problems))


def _common(s: TrainingSettings) -> list[str]:
    """What no global-flag target expresses: splits searched per layer, virtual stages without a pipeline."""
    out = [f"its layer splits inside a stage were searched per layer ({s.label!r}), which the training plan does "
           "not record and global flags cannot express; export a plan with Megatron layer splits"] if s.searched else []
    p = s.parallelism
    if p.virtual_stages > 1 and p.pipeline == 1:
        out.append(f"{p.virtual_stages} virtual stages on one pipeline stage: frameworks interleave chunks across "
                   "several stages only")
    return out


def megatron_arguments(s: TrainingSettings) -> list[str]:
    """Megatron-LM's command-line arguments for the settings ``s`` (the data size is the world's, see
    :func:`megatron_script`).

    Raises
    ------
    NotExpressibleError
        ZeRO 2 or 3 over several replicas (Megatron-LM's distributed
        optimizer shards the optimizer state only, ZeRO 1), GPipe over
        several stages (Megatron-LM runs 1F1B or interleaved), virtual stages
        on one stage, or layer splits searched per layer.
    """
    p = s.parallelism
    problems = _common(s)
    if p.zero >= 2 and p.data > 1:
        problems.append(f"ZeRO stage {p.zero} shards the {'weights and ' if p.zero == 3 else ''}gradients, which "
                        "Megatron-LM's distributed optimizer does not (it shards the optimizer state: ZeRO 1); "
                        "re-cost with --zero 1 or export --format deepspeed")
    if p.schedule == "gpipe" and p.pipeline > 1:
        problems.append("the GPipe schedule: Megatron-LM runs 1F1B or, with virtual stages, the interleaved schedule")
    _refuse("Megatron-LM", problems)
    args = ["--tensor-model-parallel-size", str(p.tensor), "--pipeline-model-parallel-size", str(p.pipeline),
            "--context-parallel-size", str(p.context), "--expert-model-parallel-size", str(s.expert)]
    if p.virtual_stages > 1:
        args += ["--virtual-pipeline-model-parallel-size", str(p.virtual_stages)]
    if p.sequence_parallel and p.tensor > 1:
        args.append("--sequence-parallel")
    if p.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif p.recompute == "full":
        # pase's full recomputation keeps each transformer layer's input and recomputes the layer.
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if p.zero == 1:
        args.append("--use-distributed-optimizer")
    args += ["--micro-batch-size", str(p.microbatch_size), "--global-batch-size", str(p.global_batch)]
    return args


def _stage_comment(s: TrainingSettings) -> list[str]:
    if len(s.stages) < 2:
        return []
    runs = ", ".join(f"{a} .. {b}" for a, b in s.stages)
    return [f"pase's {len(s.stages)} (virtual) stages run {runs}"]


def megatron_script(s: TrainingSettings) -> str:
    """The ``torchrun`` line and Megatron-LM arguments of ``s``, as shell text with comments.

    The world size ``nodes x devices per node`` fixes Megatron-LM's data size,
    ``world / (t p c)``. Raises as :func:`megatron_arguments`.
    """
    p = s.parallelism
    args = megatron_arguments(s)
    per_node = p.devices // s.nodes
    lines = [f"# Megatron-LM for pase plan {s.label or p.describe()!r} of {s.model or 'the model'} on {p.devices} "
             f"devices: data parallel {p.data} = {p.devices} / (tp {p.tensor} x pp {p.pipeline} x cp {p.context}).",
             "# Add the model's own arguments (--num-layers, --hidden-size, --seq-length ...) and data paths."]
    lines += [f"# {c}; Megatron-LM splits the transformer layers evenly over the stages."
              for c in _stage_comment(s)]
    pairs = []
    i = 0
    while i < len(args):
        take = 2 if i + 1 < len(args) and not args[i + 1].startswith("--") else 1
        pairs.append(" ".join(shlex.quote(a) for a in args[i:i + take]))
        i += take
    lines.append(f"torchrun --nnodes {s.nodes} --nproc-per-node {per_node} pretrain_gpt.py \\")
    lines += [f"  {a} \\" for a in pairs[:-1]] + [f"  {pairs[-1]}"]
    return "\n".join(lines) + "\n"


def _block(name: str) -> int | None:
    """The transformer block number of a layer name (``h.12.ln2`` -> 12), None outside the blocks."""
    parts = name.split(".")
    return next((int(x) for x in parts if x.isdigit()), None)


def torchtitan_toml(s: TrainingSettings) -> str:
    """torchtitan's ``[parallelism]``, ``[training]`` and ``[activation_checkpoint]`` settings of ``s`` (TOML).

    Data parallelism is DDP (``data_parallel_replicate_degree``) under ZeRO
    0, FSDP (``data_parallel_shard_degree``) under ZeRO 3, and FSDP keeping
    the gathered weights until the backward (``fsdp_reshard_after_forward =
    "never"``, ZeRO 2's memory) under ZeRO 2. Virtual stages are split points
    at the transformer blocks (``layers.N``) where pase's stages begin,
    rounded down to the block holding the cut.

    Raises
    ------
    NotExpressibleError
        ZeRO 1 (torchtitan shards gradients with the optimizer state),
        tensor parallelism without sequence parallelism (torchtitan's
        tensor-parallel plans always shard the norms over the sequence), a
        stage beginning outside the numbered blocks, or layer splits
        searched per layer.
    """
    p = s.parallelism
    problems = _common(s)
    if p.zero == 1 and p.data > 1:
        problems.append("ZeRO stage 1: torchtitan's FSDP shards the gradients too (ZeRO 2 or 3); re-cost with "
                        "--zero 2 or export --format megatron")
    if p.tensor > 1 and not p.sequence_parallel:
        problems.append(f"tensor parallel {p.tensor} without sequence parallelism: torchtitan's tensor-parallel "
                        "plans always shard the norms and dropouts over the sequence; re-cost with --sp")
    splits = []
    if p.pipeline * p.virtual_stages > 1:
        if len(s.stages) != p.pipeline * p.virtual_stages:
            problems.append("the plan lists no layers per stage (pipeline.stages_detail), so no split points follow")
        for first, _ in s.stages[1:]:
            k = _block(first)
            if k is None:
                problems.append(f"a stage begins at {first!r}, outside the numbered transformer blocks, where "
                                "torchtitan cannot split (it splits at layers.N)")
            elif f"layers.{k}" in splits:
                problems.append(f"two stages begin inside block {k} ({first!r}); torchtitan splits at whole blocks")
            else:
                splits.append(f"layers.{k}")
    _refuse("torchtitan", problems)
    replicate, shard = (p.data, 1) if p.zero == 0 else (1, p.data)
    lines = [f"# torchtitan settings for pase plan {s.label or p.describe()!r} of {s.model or 'the model'} on "
             f"{p.devices} devices."]
    lines += [f"# {c}; split points round down to the block holding each cut." for c in _stage_comment(s)]
    lines += ["", "[parallelism]",
              f"data_parallel_replicate_degree = {replicate}",
              f"data_parallel_shard_degree = {shard}"]
    if p.zero == 2 and p.data > 1:
        lines.append('fsdp_reshard_after_forward = "never"')
    lines += [f"tensor_parallel_degree = {p.tensor}",
              f"context_parallel_degree = {p.context}",
              f"expert_parallel_degree = {s.expert}",
              f"pipeline_parallel_degree = {p.pipeline}"]
    if p.pipeline > 1:
        lines += [f'pipeline_parallel_schedule = "{_TITAN_SCHEDULES[p.schedule]}"',
                  f"pipeline_parallel_microbatch_size = {p.microbatch_size}",
                  "pipeline_parallel_split_points = [" + ", ".join(f'"{x}"' for x in splits) + "]"]
    # Without stages torchtitan accumulates gradients over local batches; with stages a local batch is one
    # pipeline pass of all its microbatches.
    local = p.microbatch_size if p.pipeline == 1 else p.global_batch // p.data
    lines += ["", "[training]",
              f"local_batch_size = {local}",
              f"global_batch_size = {p.global_batch}",
              "", "[activation_checkpoint]",
              f'mode = "{p.recompute}"']
    if p.recompute == "selective":
        lines.append('selective_ac_option = "op"')
    return "\n".join(lines) + "\n"


def deepspeed_config(s: TrainingSettings) -> dict:
    """DeepSpeed's configuration of ``s``: ZeRO stage and batch, ``train_batch_size = micro x accumulation x d``.

    The tensor, context and pipeline sizes are the launcher's (Megatron-DeepSpeed's
    Megatron-LM arguments), not the configuration's; bf16 mixed precision is
    what pase's memory model counts (2-byte weights and gradients, fp32 Adam
    state).

    Raises
    ------
    NotExpressibleError
        ZeRO 2 or 3 with several pipeline stages (DeepSpeed's pipeline engine
        takes ZeRO 0 or 1), or layer splits searched per layer.
    """
    p = s.parallelism
    problems = _common(s)
    if p.zero >= 2 and p.pipeline > 1:
        problems.append(f"ZeRO stage {p.zero} with {p.pipeline} pipeline stages: DeepSpeed's pipeline engine "
                        "supports ZeRO stages 0 and 1 only")
    _refuse("DeepSpeed", problems)
    return {"train_batch_size": p.global_batch, "train_micro_batch_size_per_gpu": p.microbatch_size,
            "gradient_accumulation_steps": p.microbatches, "zero_optimization": {"stage": p.zero},
            "bf16": {"enabled": True}}


# -- the front door ----------------------------------------------------------------------------


def export_plan(data: Mapping, fmt: str, *, graph: Graph | None = None) -> str:
    """Plan document ``data`` (either kind) as the text of ``fmt``, one of :data:`FORMATS`.

    ``graph`` is the model of a per-layer plan (default: the sample its
    ``model`` names); a 3-D training plan needs none.

    Raises
    ------
    FormatError
        ``fmt`` is unknown, or the document is malformed; DTensor and
        PartitionSpec asked of a training plan.
    GraphError, ConfigurationError
        The per-layer plan does not suit the graph.
    NotExpressibleError
        The target cannot express the plan; the message names the layers or settings.
    """
    if fmt not in FORMATS:
        raise FormatError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt in ("dtensor", "partitionspec"):
        if is_training_plan(data):
            raise FormatError(f"{fmt} placements come from a per-layer plan (pase solve --search layers --json); a "
                              "3-D training plan exports as megatron, torchtitan or deepspeed")
        doc = dtensor_export(data, graph) if fmt == "dtensor" else partitionspec_export(data, graph)
        return json.dumps(doc, indent=1) + "\n"
    settings = _settings(data, graph)
    if fmt == "megatron":
        return megatron_script(settings)
    if fmt == "torchtitan":
        return torchtitan_toml(settings)
    return json.dumps(deepspeed_config(settings), indent=1) + "\n"


def file_name(model: str, fmt: str) -> str:
    """A download name for ``fmt`` of ``model``: ``gpt-megatron.sh``, ``gpt-torchtitan.toml``..."""
    ext = {"megatron": "sh", "torchtitan": "toml"}.get(fmt, "json")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model or "plan")
    return f"{safe}-{fmt}.{ext}"
