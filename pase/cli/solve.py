"""``pase solve``: the per-layer search (the paper's) or the 3-D search (:mod:`pase.search.stages`), with the
baselines it beats."""

from __future__ import annotations

import math
import sys

from pase.analysis.baselines import applicable_baselines
from pase.cli import time_to_train
from pase.cli.options import (
    BATCH,
    add_cluster_options,
    add_framework_option,
    add_model_options,
    add_routing_options,
    builder_of,
    check_tp_overlap,
    cluster_of,
    expert_search_options,
    framework_of,
    global_batch_of,
    load_model,
    options_of,
    wants_3d,
)
from pase.cli.text import (
    model_of,
    print_json,
    print_layers,
    print_memory,
    print_model,
    print_stats,
    print_training,
    printable,
)
from pase.errors import GraphError
from pase.ir.configs import ConfigOptions, config_counts
from pase.ir.graph import Graph
from pase.model.cost import options_on
from pase.planner import Plan, PlanOptions, plan
from pase.search.exact import ORDERINGS


def add_parser(sub, help: str) -> None:
    """Add the sub-command's parser to ``sub`` (argparse's sub-parsers), ``help`` its line in ``pase --help``."""
    p = sub.add_parser("solve", help=help)
    add_model_options(p)
    add_cluster_options(p)
    p.add_argument("--ordering", choices=ORDERINGS, help="search ordering (default: the best available)")
    p.add_argument("--search", choices=("auto", "layers", "3d"), default="auto",
                   help="layers: per-layer splits on all devices (the paper's search); 3d: pipeline stages, "
                        "microbatches, schedule, recomputation, ZeRO and tensor/data sizes jointly (sample models); "
                        "auto (default): 3d for the large language models (megatron-*, gpt3-175b, llama3-*) and Hugging "
                        "Face configs but mixtures of experts, else layers")
    p.add_argument("--global-batch", type=BATCH, help="samples per step for --search 3d (default: the sample's)")
    p.add_argument("--intra-search", action="store_true",
                   help="with --search 3d, also try the exact per-layer search on each stage's group")
    p.add_argument("--tp-overlap", action="store_true",
                   help="with --search 3d on a --calibrated cluster, plan for Megatron-LM's asynchronous "
                        "tensor-parallel backward (see pase evaluate --help)")
    p.add_argument("--tp-comm-overlap", action="store_true",
                   help="with --search 3d on a calibrated cluster, plan for Transformer Engine's tensor-parallel "
                        "communication overlap (the forward gathers and reduce-scatters pipelined with the products)")
    add_framework_option(p)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (a baseline's speedup is null where PaSE takes 0 s and it does not)")
    p.add_argument("--stats", action="store_true",
                   help="also print the search's statistics: configurations before and after pruning, layers "
                        "costed once per kind (repeated blocks), blocks folded into min-plus chains and their "
                        "tables, tables built, peak memory (under \"stats\" "
                        "with --json)")
    add_routing_options(p.add_argument_group("experts, for --search 3d (mixture-of-experts models; the search "
                                             "tries every EP and ETP)"), searched=True)
    time_to_train.add_options(p)
    p.set_defaults(func=run)


def _peak_rss_bytes() -> int:
    """The largest resident memory this process has held, in bytes (what a user's machine must have)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _layer_search_stats(graph: Graph, result: Plan, options: ConfigOptions) -> dict:
    """``pase solve --stats`` of the per-layer search: what was enumerated, pruned, shared, folded and held."""
    listed = sum(config_counts(graph, result.cluster.devices, options_on(options, result.cluster)).values())
    pruned = getattr(result.search, "pruned_configs", 0)
    ends = {(graph.kind(e.src), e.src_output, graph.kind(e.dst), e.dst_input) for e in graph.edges}
    return {
        "layers": len(graph), "layer_kinds": len({graph.kind(l.name) for l in graph}),
        "configurations": listed, "configurations_after_pruning": listed - pruned,
        "edges": len(graph.edges), "edge_tables": len(ends),
        "blocks_folded": getattr(result.search, "blocks_folded", 0),
        "block_tables": getattr(result.search, "block_tables", 0),
        "block_table_entries": getattr(result.search, "block_table_entries", 0),
        "max_dependent_set": result.search.max_dependent_set,
        "max_table_entries": result.search.max_table_entries,
        "peak_table_bytes": getattr(result.search, "peak_table_bytes", None),
        "search_time_s": result.search.search_time_s, "peak_memory_bytes": _peak_rss_bytes(),
    }


def _training_search_stats(found, cache: dict) -> dict:
    """``pase solve --stats`` of the 3-D search: configurations modelled and pruned, layer-time tables built."""
    graphs = [v for k, v in cache.items() if k[0] == "graph"]
    return {
        "configurations": found.configurations, "skipped_by_bound": found.skipped,
        "layers": len(graphs[0]) if graphs else None,
        "layer_kinds": len({graphs[0].kind(l.name) for l in graphs[0]}) if graphs else None,
        "graphs_built": len(graphs), "layer_time_tables": sum(1 for k, v in cache.items() if k[0] == "times" and isinstance(v, dict)),
        "search_time_s": found.search_time_s, "peak_memory_bytes": _peak_rss_bytes(),
    }


def _solve_training(args) -> int:
    """``pase solve --search 3d``: the joint search of :mod:`pase.search.stages`."""
    from pase.model.layer_times import cached_graph
    from pase.search.published import published_layouts
    from pase.search.stages import search_training, training_baselines

    cluster = cluster_of(args)
    check_tp_overlap(args, cluster)
    cache: dict = {}  # the baselines reuse the search's graphs and layer times
    build, batch = builder_of(args, cache), global_batch_of(args)
    progress = None if args.json else lambda done, total: print(f"  searched {done}/{total} microbatch and group "
                                                                 "sizes", file=sys.stderr)
    found = search_training(build, cluster, batch, options=options_of(args), intra_search=args.intra_search,
                            tp_overlap=args.tp_overlap, tp_comm_overlap=args.tp_comm_overlap, progress=progress,
                            cache=cache, framework=framework_of(args), **expert_search_options(args))
    baselines = training_baselines(build, cluster, batch, options=options_of(args), tp_overlap=args.tp_overlap,
                                   tp_comm_overlap=args.tp_comm_overlap, cache=cache)
    stats = _training_search_stats(found, cache) if args.stats else None
    layouts = published_layouts(build, cluster, batch, options=options_of(args), cache=cache,
                                tp_overlap=args.tp_overlap, tp_comm_overlap=args.tp_comm_overlap,
                                **expert_search_options(args))
    best = found.best.step_time_s
    trained = time_to_train.when_asked(found.best, args, cached_graph(build, 1, cache).parameter_count)
    if args.json:
        out = _with_extras(found.to_dict(), stats, trained, found.best.step_time_model())
        out["baselines"] = {
            name: {"label": b.label, "step_time_s": b.step_time_s, "speedup": b.step_time_s / best if best else None,
                   "memory_per_device_bytes": b.memory_per_device_bytes, "fits_memory": b.fits_memory}
            for name, b in baselines.items()}
        out["published_layouts"] = [layout.to_dict() for layout in layouts]
        print_json(out)
        return 0
    print_training(found.best)
    print(f"search {found.search_time_s:.2f} s: {found.configurations:,} configurations "
          f"({found.skipped:,} skipped by the bound); cuts within {found.gap_bound_s * 1e3:.1f} ms of any cut's bound")
    for r in found.runners_up[:3]:
        print(f"  runner-up {r.label}: {r.step_time_s:.3f} s "
              f"({(r.step_time_s / found.best.step_time_s - 1) * 100:.1f}% slower)")
    for note in found.notes:
        print(f"  note: {printable(note)}")
    if framework_of(args) is None:
        _note_unrunnable(found.best)
    for name, r in found.by_framework.items():
        print(f"  best {name} runs: " + ("none of the configurations" if r is None else
                                         f"{r.label}: {r.step_time_s:.3f} s "
                                         f"({(r.step_time_s / found.best.step_time_s - 1) * 100:.1f}% slower)"))
    for name, b in baselines.items():
        fits = "" if b.fits_memory is not False else ", does NOT fit memory"
        print(f"  vs {name} ({b.label}): {b.step_time_s:.3f} s{fits}, "
              f"{b.step_time_s / best:.2f}x the searched step")
    for layout in layouts:
        measured = ", ".join(f"{r.release} {r.step_s:.3f} s" for r in layout.runs)
        priced = (f"pase's best at it {layout.plan.label}: {layout.plan.step_time_s:.3f} s, "
                  f"{layout.plan.step_time_s / best:.2f}x the searched step" if layout.plan is not None
                  else f"pase finds no plan at it ({printable(layout.problem)})")
        print(f"  vs NVIDIA's published layout {layout.layout} (measured {measured}): {priced}")
    time_to_train.print_estimate(trained)
    if stats is not None:
        print_stats(stats)
    return 0


def _note_unrunnable(plan) -> None:
    """Say so when no framework pase knows runs the best plan as priced (ZeRO 2 with pipeline stages, say): the
    step is then what the model gives a plan no one can launch as is, and ``--framework`` plans what one runs."""
    from pase.frameworks import FRAMEWORKS

    refused = {name: f.problems(plan.parallelism, precision=plan.precision, attention=plan.attention,
                                experts=plan.experts is not None) for name, f in FRAMEWORKS.items()}
    if all(refused.values()):
        why = "; ".join(f"{name}: {problems[0].split(':')[0]}" for name, problems in refused.items())
        print(f"  note: no framework pase knows runs this plan as priced ({printable(why)}); --framework "
              f"{'|'.join(FRAMEWORKS)}|any plans only what one runs")


def _with_extras(out: dict, stats: dict | None, trained, model: dict) -> dict:
    """``out`` (a plan's JSON) with the search statistics and time to train when asked, and the step-time model."""
    if stats is not None:
        out["stats"] = stats
    if trained is not None:
        out["time_to_train"] = trained.to_dict()
    out["step_time_model"] = model
    return out


def _speedup(result: Plan, baseline: Plan) -> float | None:
    """``result.speedup_over(baseline)``, None where it is infinite (PaSE takes 0 s, the baseline more)."""
    s = result.speedup_over(baseline)
    return s if math.isfinite(s) else None


def run(args) -> int:
    """``pase solve``: the 3-D search (:func:`wants_3d`) or the per-layer one, with its baselines; the exit status."""
    if wants_3d(args):
        time_to_train.checked(args)
        return _solve_training(args)
    if args.global_batch is not None or args.intra_search or args.tp_overlap or args.tp_comm_overlap or \
            args.framework is not None:
        raise GraphError("--global-batch, --intra-search, --tp-overlap and --framework apply to --search 3d")
    graph, cluster, options = load_model(args), cluster_of(args), options_of(args)
    time_to_train.checked(args)
    result = plan(graph, cluster, PlanOptions(configs=options, ordering=args.ordering))
    stats = _layer_search_stats(graph, result, options) if args.stats else None
    baselines = applicable_baselines(graph, cluster, options)
    trained = time_to_train.when_asked(result, args)
    if args.json:
        out = _with_extras(result.to_dict(), stats, trained, model_of(cluster, options))
        out["baselines"] = {
            name: {"label": b.label, "cost": b.cost, "step_time_s": b.step_time_s, "speedup": _speedup(result, b),
                   "memory_per_device_bytes": b.memory_per_device_bytes, "fits_memory": b.fits_memory}
            for name, b in baselines.items()
        }
        print_json(out)
        return 0
    print_layers(result)
    if result.step_time_s == 0:
        print(f"note: {printable(graph.name)} does no work: its layers only move data "
              f"({printable(', '.join(sorted({layer.op for layer in graph})))}) and this strategy moves nothing "
              "between devices, so a step takes 0 s (a speedup over a baseline that takes 0 s too is 1)")
    print(f"search {result.search.search_time_s:.3f} s, largest dependent set {result.search.max_dependent_set}")
    if not result.exact:
        print("approximate: no ordering keeps the exact search in memory, so windows of layers were optimised "
              "exactly starting from every baseline (never worse than the best baseline; optimality not guaranteed)")
    print_memory(result)
    print_model(model_of(cluster, options))
    for name, b in baselines.items():
        fits = {None: "", True: ", fits memory", False: ", does NOT fit memory"}[b.fits_memory]
        speedup = _speedup(result, b)
        faster = "PaSE takes no time" if speedup is None else f"PaSE is {speedup:.2f}x faster"
        print(f"  vs {b.label}: {b.step_time_s * 1e3:.2f} ms{fits}, {faster}")
    time_to_train.print_estimate(trained)
    if stats is not None:
        print_stats(stats)
    return 0

