"""What the strategy graph chart shows: nodes (layers or groups of layers), edges and positions.

Plain data built from a :class:`pase.planner.Plan`; :func:`ui.figures.strategy_graph_figure`
draws it. Large graphs stay legible by *grouping*: layers whose names share
a dotted prefix (``mixed_5b.branch3x3.conv`` -> ``mixed_5b`` at depth 1) become
one node, unless the user expands that group.

The layout is layered left to right: every node sits in the column of its
topological generation (networkx), and nodes of a column sit as near as they
can to the mean position of their predecessors, so a chain stays on one line
and parallel branches (Inception modules, attention q/k/v) side by side.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Iterable, Mapping

import networkx as nx
import numpy as np

from pase.ir.graph import Graph
from pase.planner import Plan, parallelism_kind
from ui.fmt import compact_config, config_str, dims_str, fmt_time, plotly_text
from ui.palette import KIND_COLORS

__all__ = [
    "KINDS",
    "kind_of",
    "NodeInfo",
    "EdgeInfo",
    "GraphView",
    "group_key",
    "auto_group_depth",
    "groups_of",
    "layered_layout",
    "short_name",
    "build_graph_view",
    "toggle_module",
    "training_search_with_group_plan",
]

# Parallelism kinds in legend order; "mixed": a group whose layers differ; "unsolved": no strategy yet.
KINDS = tuple(KIND_COLORS)  # data, tensor, hybrid, replicated, mixed, unsolved


def kind_of(dims: tuple[str, ...], config: tuple[int, ...]) -> str:
    """The kind of parallelism of a layer's configuration in the app's words: "data", "tensor" (only dimensions
    other than the batch split: the paper's "parameter" parallelism, :func:`pase.planner.parallelism_kind`,
    named as the Training page and Megatron-LM name it), "hybrid" or "replicated".

    >>> kind_of(("b", "n", "c"), (1, 4, 1))
    'tensor'
    """
    kind = parallelism_kind(tuple(dims), tuple(config))
    return "tensor" if kind == "parameter" else kind

# A grouped view aims at no more nodes than this (see auto_group_depth).
TARGET_GROUPED_NODES = 60
# Node names drawn on the graph are shortened to about this many characters.
SHORT_NAME_CHARS = 18


@dataclass(frozen=True)
class NodeInfo:
    """One drawn node: a layer, or a group of layers sharing a name prefix."""

    key: str
    members: tuple[str, ...]
    kind: str
    label: str
    hover: str
    compute_s: float
    intra_comm_s: float
    edge_comm_s: float
    x: float = 0.0
    y: float = 0.0
    name: str = ""  # the short name drawn on the node (see short_name)
    op: str = ""  # the op (or a summary of a group's ops) drawn under it
    baseline_s: float | None = None  # the same layers' total time under a baseline plan (data parallelism)

    @property
    def total_s(self) -> float:
        return self.compute_s + self.intra_comm_s + self.edge_comm_s

    @property
    def gain_s(self) -> float | None:
        """Baseline time minus this node's time (positive: faster than the baseline); ``None`` without one."""
        return None if self.baseline_s is None else self.baseline_s - self.total_s

    @property
    def is_group(self) -> bool:
        return len(self.members) > 1 or (len(self.members) == 1 and self.members[0] != self.key)


@dataclass(frozen=True)
class EdgeInfo:
    """One drawn edge with its redistribution time (the sum over the tensors it stands for)."""

    src: str
    dst: str
    cost_s: float
    tensors: int = 1


@dataclass(frozen=True)
class GraphView:
    """Nodes with positions and edges, ready to draw."""

    nodes: tuple[NodeInfo, ...]
    edges: tuple[EdgeInfo, ...]
    grouped: bool
    generations: int
    solved: bool = True

    def node(self, key: str) -> NodeInfo:
        for n in self.nodes:
            if n.key == key:
                return n
        raise KeyError(key)

    def node_of_layer(self, layer: str) -> NodeInfo:
        """The node that shows ``layer`` (itself or its group)."""
        for n in self.nodes:
            if layer in n.members:
                return n
        raise KeyError(layer)


def group_key(name: str, depth: int | None) -> str:
    """The group of layer ``name`` at ``depth`` dotted components (``None``: no grouping).

    >>> group_key("mixed_5b.branch1x1.bn", 1)
    'mixed_5b'
    >>> group_key("fc", 1)
    'fc'
    """
    if depth is None or depth < 1:
        return name
    parts = name.split(".")
    return ".".join(parts[:depth]) if len(parts) > depth else name


def groups_of(names: Iterable[str], depth: int | None) -> dict[str, list[str]]:
    """Group key -> member layer names (in the given order)."""
    out: dict[str, list[str]] = {}
    for n in names:
        out.setdefault(group_key(n, depth), []).append(n)
    return out


def auto_group_depth(names: Iterable[str], target: int = TARGET_GROUPED_NODES) -> int:
    """The finest grouping depth that leaves at most ``target`` nodes (depth 1 if none does)."""
    names = list(names)
    max_depth = max((n.count(".") for n in names), default=0)
    best = 1
    for depth in range(1, max_depth + 1):
        if len(groups_of(names, depth)) <= target:
            best = depth
        else:
            break
    return best


def short_name(name: str, limit: int = SHORT_NAME_CHARS) -> str:
    """``name`` shortened for a node label: its last two dotted parts (or the last), ellipsised past ``limit``.

    >>> short_name("Mixed_5b.branch3x3dbl_2.bn")
    'branch3x3dbl_2.bn'
    >>> short_name("h.0.attn.q")
    'attn.q'
    >>> short_name("a_rather_long_layer_name_indeed")
    'a_rather…me_indeed'
    """
    parts = name.split(".")
    short = ".".join(parts[-2:])
    if len(short) > limit and len(parts) > 1 and parts[-1]:
        short = parts[-1]
    if len(short) > limit:
        head = (limit - 1) // 2
        short = short[:head] + "…" + short[len(short) - (limit - 1 - head):]
    return short


def _spread(desired: list[float], gap: float) -> list[float]:
    """Multiples of ``gap`` as near ``desired`` (sorted) as they can be while at least ``gap`` apart."""
    out: list[float] = []
    for d in desired:
        out.append(d if not out else max(d, out[-1] + gap))
    shift = float(np.mean(desired) - np.mean(out)) if out else 0.0
    # Whole rows keep labels of neighbouring layers apart. Rounding half up or half down both keep the order
    # and the gaps; of the two, the one nearer the centre line keeps long graphs from drifting off it.
    ys = np.array(out) / gap + shift / gap
    up, down = np.floor(ys + 0.5), np.ceil(ys - 0.5)
    best = up if np.abs(up).sum() <= np.abs(down).sum() else down
    return [float(v) * gap for v in best]


def layered_layout(g: nx.DiGraph, gap: float = 1.0, direction: str = "TB") -> dict[str, tuple[float, float]]:
    """Layered positions: one layer per topological generation, ``gap`` apart across it; an input (a node
    without predecessors) sits in the layer just before its first consumer's.

    ``direction="TB"``: ``y = -generation`` (producers above consumers);
    ``"LR"``: ``x = generation`` (producers left of consumers). Across a layer
    each node sits as near as it can to the mean position of its predecessors
    (roots in graph order), on a multiple of ``gap`` and at least ``gap`` from
    its neighbours.

    Raises ``networkx.NetworkXUnfeasible`` if ``g`` has a cycle.
    """
    if direction not in ("TB", "LR"):
        raise ValueError(f"direction must be 'TB' or 'LR', got {direction!r}")
    across: dict = {}
    order = {n: i for i, n in enumerate(g.nodes)}
    levels = {n: level for level, generation in enumerate(nx.topological_generations(g)) for n in generation}
    # An input consumed late (a decoder's embedding) would otherwise sit in the first layer and send one long
    # edge across every layer between, through their labels.
    for n in g.nodes:
        if g.in_degree(n) == 0 and g.out_degree(n) > 0:
            levels[n] = min(levels[s] for s in g.successors(n)) - 1
    by_level: dict[int, list] = defaultdict(list)
    for n in sorted(g.nodes, key=order.get):
        by_level[levels[n]].append(n)
    for level in sorted(by_level):
        generation = by_level[level]
        roots = sorted((n for n in generation if not any(p in across for p in g.predecessors(n))), key=order.get)
        root_at = {n: (j - (len(roots) - 1) / 2) * gap for j, n in enumerate(roots)}

        def desired(n):
            parents = [across[p] for p in g.predecessors(n) if p in across]
            return (float(np.mean(parents)) if parents else root_at[n], order[n])

        row = sorted(generation, key=desired)
        for n, a in zip(row, _spread([desired(n)[0] for n in row], gap)):
            across[n] = a
    if direction == "LR":
        return {n: (float(levels[n]), -across[n]) for n in g.nodes}
    return {n: (across[n], -float(levels[n])) for n in g.nodes}


def _layer_hover(row, kind: str) -> str:
    return "<br>".join([
        f"<b>{plotly_text(row.name)}</b> ({row.op})",
        f"dims: {dims_str(row.dims, row.sizes)}",
        f"config: {config_str(row.config)} = {compact_config(row.dims, row.config)} ({kind}, {row.devices} devices)",
        f"compute: {fmt_time(row.compute_s)}",
        f"intra-layer comm: {fmt_time(row.intra_comm_s)}",
        f"edge comm (in): {fmt_time(row.edge_comm_s)}",
        f"total: {fmt_time(row.total_s)}",
    ])


def _group_node(key: str, rows: list, kinds: list[str]) -> NodeInfo:
    labels = sorted({compact_config(r.dims, r.config) for r in rows})
    kind_set = set(kinds)
    kind = kinds[0] if len(kind_set) == 1 else "mixed"
    label = labels[0] if len(labels) == 1 else f"{len(labels)} splits"
    compute = sum(r.compute_s for r in rows)
    intra = sum(r.intra_comm_s for r in rows)
    edge = sum(r.edge_comm_s for r in rows)
    counts = defaultdict(int)
    for r in rows:
        counts[compact_config(r.dims, r.config)] += 1
    splits = ", ".join(f"{c}×{n}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1])[:6])
    kinds_txt = ", ".join(f"{k} {kinds.count(k)}" for k in KINDS if k in kind_set)
    hover = "<br>".join([
        f"<b>{plotly_text(key)}</b>: group of {len(rows)} layers",
        f"splits: {splits}" + (" ..." if len(counts) > 6 else ""),
        f"kinds: {kinds_txt}",
        f"compute: {fmt_time(compute)}",
        f"intra-layer comm: {fmt_time(intra)}",
        f"edge comm (in): {fmt_time(edge)}",
        f"total: {fmt_time(compute + intra + edge)}",
    ])
    return NodeInfo(key, tuple(r.name for r in rows), kind, label, hover, compute, intra, edge)


def _ops_summary(ops: list[str]) -> str:
    """How many layers a group holds, and their op when they share one."""
    return f"{len(ops)} × {ops[0]}" if len(set(ops)) == 1 else f"{len(ops)} layers"


def _structure_hover(layer, configs: int | None) -> str:
    lines = [f"<b>{plotly_text(layer.name)}</b> ({layer.op})", f"dims: {dims_str(layer.dims, layer.sizes)}"]
    if configs is not None:
        lines.append(f"{configs} configurations")
    return "<br>".join(lines)


def build_graph_view(
    graph: Graph,
    plan: Plan | None = None,
    edge_costs: Mapping[tuple[str, str], float] | None = None,
    *,
    depth: int | None = None,
    expanded: Iterable[str] = (),
    config_counts: Mapping[str, int] | None = None,
    baseline: Plan | None = None,
) -> GraphView:
    """Nodes, edges and layered positions for ``graph``, coloured by ``plan``'s strategy when given.

    Parameters
    ----------
    graph : Graph
    plan : Plan, optional
        A strategy for ``graph``; without one every node is ``"unsolved"``
        (the structure alone, before the search).
    edge_costs : mapping (src, dst) -> seconds, optional
        Defaults to ``plan.edge_costs_s``.
    depth : int, optional
        Group layers by their first ``depth`` name components; ``None`` draws
        every layer.
    expanded : iterable of str
        Group keys to draw layer by layer anyway.
    config_counts : mapping layer -> int, optional
        Shown in the hover of an unsolved graph.
    baseline : Plan, optional
        Another strategy for ``graph`` (data parallelism): each node of a
        solved view carries its layers' total time under it as ``baseline_s``.
    """
    if plan is not None and edge_costs is None:
        edge_costs = plan.edge_costs_s
    if edge_costs is None:
        edge_costs = {(e.src, e.dst): 0.0 for e in graph.edges}
    expanded = set(expanded)
    layers = graph.layers
    names = [layer.name for layer in layers]
    rows = {r.name: r for r in plan.layers} if plan is not None else {}
    kinds = {r.name: kind_of(r.dims, r.config) for r in plan.layers} if plan is not None else {}

    # Layer -> node key.
    node_of: dict[str, str] = {}
    if depth is not None:
        for key, members in groups_of(names, depth).items():
            for m in members:
                node_of[m] = m if (len(members) == 1 or key in expanded) else key
    else:
        node_of = {n: n for n in names}

    def quotient():
        q = nx.DiGraph()
        q.add_nodes_from(dict.fromkeys(node_of[n] for n in names))
        for (u, v) in edge_costs:
            if node_of[u] != node_of[v]:
                q.add_edge(node_of[u], node_of[v])
        return q

    # Merge groups caught in a cycle (rare with prefix groups).
    q = quotient()
    if not nx.is_directed_acyclic_graph(q):
        cond = nx.condensation(q)
        comp = cond.graph["mapping"]
        parts: dict[int, list[str]] = defaultdict(list)
        for n in q.nodes:
            parts[comp[n]].append(n)
        merged = {c: ps[0] if len(ps) == 1 else " + ".join(sorted(ps)) for c, ps in parts.items()}
        node_of = {n: merged[comp[k]] for n, k in node_of.items()}
        q = quotient()

    members: dict[str, list[str]] = defaultdict(list)
    for n in names:
        members[node_of[n]].append(n)

    pos = layered_layout(q, direction="LR")
    by_name = {layer.name: layer for layer in layers}
    base = {r.name: r.total_s for r in baseline.layers} if plan is not None and baseline is not None else None
    nodes = []
    for key in q.nodes:
        ms = members[key]
        single = len(ms) == 1 and ms[0] == key
        if plan is None:
            if single:
                layer = by_name[key]
                count = config_counts.get(key) if config_counts else None
                node = NodeInfo(key, (key,), "unsolved", "", _structure_hover(layer, count), 0.0, 0.0, 0.0)
            else:
                ops = sorted({by_name[m].op for m in ms})
                hover = f"<b>{plotly_text(key)}</b>: group of {len(ms)} layers<br>ops: {', '.join(ops[:8])}"
                node = NodeInfo(key, tuple(ms), "unsolved", "", hover, 0.0, 0.0, 0.0)
        elif single:
            r = rows[key]
            k = kinds[key]
            node = NodeInfo(key, (key,), k, compact_config(r.dims, r.config), _layer_hover(r, k),
                            r.compute_s, r.intra_comm_s, r.edge_comm_s)
        else:
            node = _group_node(key, [rows[m] for m in ms], [kinds[m] for m in ms])
        if base is not None:
            node = replace(node, baseline_s=float(sum(base[m] for m in ms)))
        x, y = pos[key]
        op = by_name[key].op if single else _ops_summary([by_name[m].op for m in ms])
        nodes.append(replace(node, x=x, y=y, name=short_name(key), op=op))

    agg: dict[tuple[str, str], list[float]] = {}
    for (u, v), cost in edge_costs.items():
        a, b = node_of[u], node_of[v]
        if a == b:
            continue
        entry = agg.setdefault((a, b), [0.0, 0])
        entry[0] += cost
        entry[1] += 1
    edges = tuple(EdgeInfo(a, b, c, int(t)) for (a, b), (c, t) in agg.items())
    generations = int(max((n.x for n in nodes), default=0)) + 1
    return GraphView(tuple(nodes), edges, depth is not None, generations, solved=plan is not None)


def toggle_module(expanded: Iterable[str], key: str, modules: Mapping[str, Iterable[str]]) -> list[str]:
    """The modules to expand after a click on node ``key``.

    ``modules``: the modules that can expand (group key -> member layers).
    A click on a collapsed module expands it; a click on a layer of an
    expanded module collapses that module again; any other click changes
    nothing. Order is kept, a newly expanded module goes last.

    >>> toggle_module([], "mixed_5b", {"mixed_5b": ["mixed_5b.a", "mixed_5b.b"]})
    ['mixed_5b']
    >>> toggle_module(["mixed_5b"], "mixed_5b.a", {"mixed_5b": ["mixed_5b.a", "mixed_5b.b"]})
    []
    """
    out = list(dict.fromkeys(expanded))
    if key in modules:
        return out if key in out else [*out, key]
    for module, members in modules.items():
        if module in out and key in set(members):
            return [m for m in out if m != module]
    return out


def training_search_with_group_plan(build, cluster, global_batch: int, options=None, microbatch_sizes=None,
                                    progress=None):
    """The 3-D search of the model ``build(batch)`` builds (a picklable builder: ``pase.models.batch_builder``,
    ``pase.io.hf_config.hf_batch_builder``) on ``cluster`` at ``global_batch`` samples per step, and the
    strategy graph of its best plan: ``(search, plan)``.

    ``search`` is :func:`pase.search.stages.search_training`'s result (as ``pase solve`` runs it for a
    language model); ``plan`` a :class:`~pase.planner.Plan` of ONE microbatch of the best configuration
    on ONE ``t x c`` group (:func:`pase.model.training.group_cluster`), each layer split by Megatron-LM's
    rule (:func:`pase.strategies.baselines.tensor_parallel_strategy`), the rule the search costed, so
    that the graph view can draw it. A module-level function of a module free of Streamlit, so that
    :func:`ui.jobs.run` can run it in a worker process in one job (the graphs built once).

    Raises what the search raises (``InsufficientMemoryError`` when nothing fits,
    ``ConfigurationError`` when no configuration tiles the cluster) and ``GraphError``.
    """
    from pase.ir.configs import ConfigOptions
    from pase.model.training import cached_graph, group_cluster
    from pase.planner import PlanOptions, evaluate
    from pase.search.stages import search_training
    from pase.strategies.baselines import tensor_parallel_strategy

    options = ConfigOptions() if options is None else options
    cache: dict = {}  # the graph at the best microbatch, built once for the search and the graph
    search = search_training(build, cluster, global_batch, options=options, microbatch_sizes=microbatch_sizes,
                             progress=progress, cache=cache)
    par = search.best.parallelism
    graph = cached_graph(build, par.microbatch_size, cache)
    strategy = tensor_parallel_strategy(graph, par.tensor, par.context, par.sequence_parallel)
    plan = evaluate(graph, group_cluster(cluster, par), strategy, PlanOptions(configs=options),
                    label=f"one microbatch of {search.best.label} on a t{par.tensor} x c{par.context} group")
    return search, plan
