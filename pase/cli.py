"""Command-line interface: ``pase COMMAND ...`` (also ``python -m pase``).

Each sub-command is registered by an ``_add_<name>`` function that builds its
parser and sets ``func``; a handler returns the process exit status. Errors of
pase (:class:`pase.errors.PaseError`) print one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from pase.analysis.baselines import applicable_baselines, evaluate_strategy
from pase.analysis.sweep import batch_sweep, sweep
from pase.errors import ClusterError, ConfigurationError, GraphError, PaseError
from pase.hardware.cluster import PRESETS, Cluster
from pase.io.graph_json import load_model_file
from pase.io.strategy_json import load_strategy
from pase.ir.configs import COST_MODELS, ConfigOptions, config_counts
from pase.ir.graph import Graph
from pase.models import SAMPLES, sample
from pase.planner import Plan, PlanOptions, parallelism_kind, plan

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of every sub-command."""
    parser = argparse.ArgumentParser(
        prog="pase",
        description="Find per-layer parallelization strategies for DNN training (PaSE).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_solve, _add_evaluate, _add_show, _add_sweep, _add_solve_instance):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PaseError as exc:
        print(f"pase: error: {exc}", file=sys.stderr)
        return 2


# -- shared options --------------------------------------------------------------------


def _add_model_options(p: argparse.ArgumentParser, *, many_devices: bool = False) -> None:
    p.add_argument("model", help="a sample name (alexnet, inception3, resnet101, rnnlm, transformer, densenet121, gpt) or a model file (.json in pase's format, or .onnx)")
    if many_devices:
        p.add_argument("--devices", "-p", type=int, nargs="+", required=True, help="device counts, e.g. 4 8 16 32 64")
    else:
        p.add_argument("--devices", "-p", type=int, required=True, help="number of devices")
    p.add_argument("--batch", type=int, help="batch size (sample models only)")
    p.add_argument("--powers-of-two", action="store_true", help="only split factors 1, 2, 4, 8...")
    p.add_argument("--min-shard", type=int, default=ConfigOptions().min_shard,
                   help="smallest block a split may leave along a dimension (default %(default)s)")
    p.add_argument("--spatial-split", action="store_true", help="let convolutions split image rows/columns")
    p.add_argument("--cost-model", choices=COST_MODELS, default=ConfigOptions().cost_model,
                   help="corrected: layouts on the device mesh with pending sums (default); "
                        "paper: the paper's equation 1 and its prototype's edge rule")
    p.add_argument("--sync-batchnorm", action=argparse.BooleanOptionalAction, default=None,
                   help="all-reduce BatchNorm statistics over a split batch (default: only under --cost-model paper)")


def _add_cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", choices=sorted(PRESETS), default="paper-model",
                   help="hardware preset (default %(default)s: 10 TFLOP/s, 16 GB/s)")
    p.add_argument("--tflops", type=float, help="peak TFLOP/s per device (overrides the preset)")
    p.add_argument("--bandwidth", type=float, help="link bandwidth in GB/s (overrides the preset)")
    p.add_argument("--bytes-per-element", type=int, help="4 for fp32, 2 for fp16/bf16 (overrides the preset)")
    p.add_argument("--memory-gb", type=float,
                   help="memory per device in GB (1e9 bytes); the strategy must fit (overrides the preset)")
    p.add_argument("--nodes", type=int, help="nodes the devices are spread over (devices per node = devices / nodes)")
    p.add_argument("--devices-per-node", type=int, help="devices in one node (overrides the preset)")
    p.add_argument("--intra-bandwidth", type=float,
                   help="link bandwidth inside a node in GB/s per device (same as --bandwidth)")
    p.add_argument("--inter-bandwidth", type=float,
                   help="network bandwidth between nodes in GB/s per device (overrides the preset)")


def _load_model(args) -> Graph:
    if args.model in SAMPLES:
        return sample(args.model, **({} if args.batch is None else {"batch": args.batch}))
    path = Path(args.model)
    if not path.exists():
        raise GraphError(f"{args.model!r} is neither a sample ({', '.join(SAMPLES)}) nor an existing file")
    if args.batch is not None and path.suffix.lower() != ".onnx":
        raise GraphError("--batch applies to sample models and ONNX models; a graph file fixes its own batch size")
    return load_model_file(path, batch=args.batch)


def _options(args) -> ConfigOptions:
    return ConfigOptions(powers_of_two=args.powers_of_two, min_shard=args.min_shard, spatial_split=args.spatial_split,
                         cost_model=args.cost_model, sync_batchnorm=args.sync_batchnorm)


def _cluster(args) -> Cluster:
    base = PRESETS[args.cluster]
    changes = {"devices": args.devices}
    if args.tflops is not None:
        changes["peak_flops"] = args.tflops * 1e12
    if args.bandwidth is not None:
        changes["bandwidth_Bps"] = args.bandwidth * 1e9
    if args.bytes_per_element is not None:
        changes["bytes_per_element"] = args.bytes_per_element
    if getattr(args, "memory_gb", None) is not None:
        changes["memory_bytes"] = args.memory_gb * 1e9
    if getattr(args, "intra_bandwidth", None) is not None:
        changes["bandwidth_Bps"] = args.intra_bandwidth * 1e9
    if getattr(args, "inter_bandwidth", None) is not None:
        changes["inter_bandwidth_Bps"] = args.inter_bandwidth * 1e9
    nodes, per_node = getattr(args, "nodes", None), getattr(args, "devices_per_node", None)
    if nodes is not None:
        if nodes < 1 or args.devices % nodes or (per_node is not None and nodes * per_node != args.devices):
            raise ClusterError(f"--nodes {nodes} does not divide {args.devices} devices"
                               + ("" if per_node is None else f" into nodes of {per_node}"))
        per_node = args.devices // nodes
    if per_node is not None:
        changes["devices_per_node"] = per_node
    if len(changes) > 1:
        changes["name"] = "custom"
    return replace(base, **changes)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


# -- pase solve ------------------------------------------------------------------------


def _add_solve(sub) -> None:
    p = sub.add_parser("solve", help="find the best strategy for a model on a cluster")
    _add_model_options(p)
    _add_cluster_options(p)
    p.add_argument("--ordering", help="search ordering (default: the best available)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_solve)


def _print_layers(result: Plan) -> None:
    """The per-layer table and the step-time totals of ``result`` (shared by solve and evaluate)."""
    rows = [["layer", "op", "dims", "configuration", "parallelism", "time (ms)"]]
    for r in result.layers:
        rows.append([r.name, r.op, " ".join(r.dims), "(" + ", ".join(map(str, r.config)) + ")",
                     parallelism_kind(r.dims, r.config), f"{r.total_s * 1e3:.3f}"])
    print(_table(rows))
    t = result.totals_s()
    print(f"\n{result.graph.name} on {result.cluster}")
    print(f"estimated step time {result.step_time_s * 1e3:.2f} ms (compute {t['compute_s'] * 1e3:.2f}, "
          f"intra-layer communication {t['intra_comm_s'] * 1e3:.2f}, edge communication {t['edge_comm_s'] * 1e3:.2f})")


def _print_memory(result: Plan) -> None:
    if result.memory_capacity_bytes is not None:
        fits = "" if result.fits_memory else ": does NOT fit"
        print(f"memory per device {result.memory_per_device_bytes / 1e9:.2f} GB of "
              f"{result.memory_capacity_bytes / 1e9:.2f} GB{fits}")


def _solve(args) -> int:
    graph, cluster, options = _load_model(args), _cluster(args), _options(args)
    result = plan(graph, cluster, PlanOptions(configs=options, ordering=args.ordering))
    baselines = applicable_baselines(graph, cluster, options)
    if args.json:
        out = result.to_dict()
        out["baselines"] = {
            name: {"label": b.label, "cost": b.cost, "step_time_s": b.step_time_s, "speedup": result.speedup_over(b),
                   "memory_per_device_bytes": b.memory_per_device_bytes, "fits_memory": b.fits_memory}
            for name, b in baselines.items()
        }
        print(json.dumps(out, indent=1))
        return 0
    _print_layers(result)
    print(f"search {result.search.search_time_s:.3f} s, largest dependent set {result.search.max_dependent_set}")
    if not result.exact:
        print("approximate: no ordering keeps the exact search in memory, so windows of layers were optimised "
              "exactly starting from every baseline (never worse than the best baseline; optimality not guaranteed)")
    _print_memory(result)
    for name, b in baselines.items():
        fits = {None: "", True: ", fits memory", False: ", does NOT fit memory"}[b.fits_memory]
        print(f"  vs {b.label}: {b.step_time_s * 1e3:.2f} ms{fits}, PaSE is {result.speedup_over(b):.2f}x faster")
    return 0


# -- pase evaluate ---------------------------------------------------------------------


def _add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="cost a given strategy (a saved plan) for a model on a cluster",
                       description="Cost the strategy of a plan file for MODEL on the cluster the options describe, "
                                   "e.g. a plan saved by `pase solve --json` or the app, on other hardware. Layers "
                                   "the plan leaves out are data parallel. docs/plan-format.md describes the file.")
    _add_model_options(p)
    _add_cluster_options(p)
    p.add_argument("--plan", required=True, metavar="PLAN.json",
                   help="strategy file: a plan (pase solve --json, the app's download) or {layer: [factors...]}")
    p.add_argument("--json", action="store_true", help="print the evaluated plan as one JSON object")
    p.set_defaults(func=_evaluate)


def _strategy(args) -> tuple[dict[str, tuple[int, ...]], str]:
    """The strategy ``pase evaluate`` costs (layer name -> configuration, possibly partial) and its label."""
    path = Path(args.plan)
    return load_strategy(path), path.name


def _evaluate(args) -> int:
    graph, cluster, options = _load_model(args), _cluster(args), _options(args)
    strategy, label = _strategy(args)
    try:
        result = evaluate_strategy(graph, cluster, strategy, options=options, label=label)
    except (GraphError, ConfigurationError) as exc:
        raise type(exc)(f"{label}: {exc}") from None
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return 0
    _print_layers(result)
    given = sum(1 for layer in graph if layer.name in strategy)
    print(f"{given} of {len(graph)} layers configured by {label}" +
          ("" if given == len(graph) else f"; the other {len(graph) - given} data parallel"))
    _print_memory(result)
    return 0


# -- pase sweep ------------------------------------------------------------------------


def _add_sweep(sub) -> None:
    p = sub.add_parser("sweep", help="step time and speedup over data parallelism across device counts")
    _add_model_options(p, many_devices=True)
    p.add_argument("--bandwidths", type=float, nargs="+", help="link bandwidths to sweep, GB/s")
    p.add_argument("--tflops-list", type=float, nargs="+", help="peak TFLOP/s values to sweep")
    p.add_argument("--batches", type=int, nargs="+", help="batch sizes to sweep (sample and ONNX models)")
    _add_cluster_options(p)
    p.add_argument("--json", action="store_true", help="print the records as a JSON list")
    p.set_defaults(func=_sweep)


def _sweep(args) -> int:
    cluster = _cluster(argparse.Namespace(**{**vars(args), "devices": args.devices[0]}))
    grid = dict(
        bandwidths_Bps=[b * 1e9 for b in args.bandwidths] if args.bandwidths else None,
        peak_flops=[f * 1e12 for f in args.tflops_list] if args.tflops_list else None,
        options=_options(args),
        progress=None if args.json else lambda done, total: print(f"  solved {done}/{total}", file=sys.stderr),
    )
    if args.batches is None:
        records = sweep(_load_model(args), args.devices, cluster, **grid)
    else:
        if args.batch is not None:
            raise GraphError("give the batch sizes with --batches, or one with --batch, not both")
        path = Path(args.model)
        if args.model not in SAMPLES and path.suffix.lower() != ".onnx" and path.exists():
            raise GraphError("--batches applies to sample models and ONNX models; a graph file fixes its own "
                             "batch size")
        records = batch_sweep(lambda batch: _load_model(argparse.Namespace(**{**vars(args), "batch": batch})),
                              args.batches, args.devices, cluster, **grid)
    if args.json:
        print(json.dumps(records, indent=1))
        return 0
    by_batch = args.batches is not None
    rows = [(["batch"] if by_batch else []) + ["devices", "GB/s", "TFLOP/s", "strategy", "step time (ms)",
                                                 "speedup over DP"]]
    for r in records:
        rows.append(([str(r["batch"])] if by_batch else []) + [
            str(r["devices"]), f"{r['bandwidth_Bps'] / 1e9:g}", f"{r['peak_flops'] / 1e12:g}", r["label"],
            f"{r['step_time_s'] * 1e3:.2f}", f"{r['speedup_over_dp']:.2f}"])
    print(_table(rows))
    return 0


# -- pase show -------------------------------------------------------------------------


def _add_show(sub) -> None:
    p = sub.add_parser("show", help="list a model's layers, dimensions and configuration counts")
    _add_model_options(p)
    p.set_defaults(func=_show)


def _show(args) -> int:
    graph = _load_model(args)
    counts = config_counts(graph, args.devices, _options(args))
    rows = [["layer", "op", "dims", "configurations"]]
    for layer in graph:
        dims = " ".join(f"{d}={n}" for d, n in zip(layer.dims, layer.sizes))
        rows.append([layer.name, layer.op, dims, str(counts[layer.name])])
    print(_table(rows))
    print(f"\n{graph.name}: {len(graph)} layers, {graph.parameter_count / 1e6:.1f}M parameters, "
          f"{sum(counts.values())} configurations on {args.devices} devices (largest {max(counts.values())})")
    return 0


# -- pase solve-instance -----------------------------------------------------------------


def _add_solve_instance(sub) -> None:
    from pase.search.exact import DEFAULT_ORDERING, ORDERINGS

    p = sub.add_parser("solve-instance", help="solve a solver-level instance file (the ../shared/instances format)")
    p.add_argument("file", help="instance file: JSON, gzip-compressed or not")
    p.add_argument("--ordering", choices=ORDERINGS, default=DEFAULT_ORDERING,
                   help="vertex ordering of the search (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=_solve_instance)


def _solve_instance(args) -> int:
    from pase.search.costgraph import load_instance
    from pase.search.exact import solve

    cost_graph, meta = load_instance(args.file)
    result = solve(cost_graph, ordering=args.ordering)
    if args.json:
        print(json.dumps({
            "name": meta["name"],
            "devices": meta["devices"],
            "cost": result.cost,
            "assignment": result.assignment.tolist(),
            "search_time_s": result.search_time_s,
            "ordering_name": args.ordering,
            "ordering": list(result.ordering),
            "max_table_entries": result.max_table_entries,
            "total_table_entries": result.total_table_entries,
            "max_dependent_set": result.max_dependent_set,
            "total_work": result.total_work,
            "pruned_configs": result.pruned_configs,
            "peak_table_bytes": result.peak_table_bytes,
        }))
        return 0
    rows = [["node", "op", "configuration", "index"]]
    for v, a in enumerate(result.assignment.tolist()):
        node = meta["nodes"][v]
        config = node["configs"][a] if node["configs"] is not None else "-"
        rows.append([str(v), str(node["op"] or "-"), str(config), str(a)])
    print(_table(rows))
    print(f"\n{meta['name'] or args.file}: {cost_graph.num_nodes} nodes, {len(cost_graph.edges)} edges, "
          f"{sum(cost_graph.config_counts)} configurations")
    print(f"optimal cost {result.cost:.12g}")
    print(f"search {result.search_time_s:.3f} s with ordering {args.ordering}: largest dependent set "
          f"{result.max_dependent_set}, largest table {result.max_table_entries:,} entries, "
          f"{result.total_work:,} sums, {result.pruned_configs} dominated configurations dropped")
    return 0
