"""``pase sweep``: step time, fit and speedup over data parallelism across device counts, bandwidths, peaks,
batches or GPU types (and time to train across device counts)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pase.cli import time_to_train
from pase.cli.options import (
    BATCH,
    GBPS,
    TFLOPS,
    add_cluster_options,
    add_framework_option,
    add_model_options,
    builder_of,
    cluster_of,
    framework_of,
    global_batch_of,
    load_model,
    options_of,
    wants_3d,
)
from pase.cli.text import model_of, print_json, print_model, table
from pase.errors import ClusterError, GraphError
from pase.hardware.cluster import PRESETS
from pase.io.hf_config import is_hf_config
from pase.ir.graph import Graph
from pase.models import SAMPLES
from pase.ops import training_flops


def add_parser(sub, help: str) -> None:
    """Add the sub-command's parser to ``sub`` (argparse's sub-parsers), ``help`` its line in ``pase --help``."""
    p = sub.add_parser("sweep", help=help)
    add_model_options(p, many_devices=True)
    p.add_argument("--bandwidths", type=GBPS, nargs="+", help="link bandwidths to sweep, GB/s")
    p.add_argument("--tflops-list", type=TFLOPS, nargs="+", help="peak TFLOP/s values to sweep")
    p.add_argument("--batches", type=BATCH, nargs="+", help="batch sizes to sweep (sample and ONNX models)")
    p.add_argument("--per-device-batch", action="store_true",
                   help="weak scaling: --batches (or --batch) is each device's batch, so the global batch at p "
                        "devices is that times p; default: a fixed global batch (strong scaling)")
    add_cluster_options(p)
    p.add_argument("--clusters", choices=sorted(PRESETS), nargs="+", metavar="PRESET",
                   help="GPU types side by side: sweep every preset given instead of --cluster, each with its "
                        "published figures (calibrated with --calibrated; options that override a figure are "
                        f"refused); choose from {', '.join(sorted(PRESETS))}")
    p.add_argument("--json", action="store_true", help="print the records as a JSON list")
    p.add_argument("--search", choices=("auto", "layers", "3d"), default="auto",
                   help="layers: PaSE's per-layer search and the baselines at each point; 3d: the 3-D search "
                        "(tensor, pipeline, data parallelism, microbatches, recomputation, ZeRO) and the 3-D "
                        "baselines at each point (sample language models and Hugging Face configs), with --train-tokens "
                        "its time to train, failures included, at each device count; auto (default): 3d for the "
                        "large language models and Hugging Face configs but mixtures of experts, else layers, as "
                        "pase solve")
    p.add_argument("--global-batch", type=BATCH,
                   help="samples per step for the 3-D search (default: the sample's; --batches to sweep several)")
    add_framework_option(p)
    time_to_train.add_options(p)
    p.set_defaults(func=run)


def _working(graph: Graph) -> Graph:
    """``graph``, or ``GraphError`` when no layer computes anything: a sweep's speedups over data parallelism
    divide by step times, which are 0 s for data movement alone."""
    if all(training_flops(layer) == 0 for layer in graph):
        raise GraphError(f"{graph.name!r} does no work: its layers only move data, so every step time is 0 s and "
                         "speedups over data parallelism are undefined; sweep a model with computing layers")
    return graph


def run(args) -> int:
    """``pase sweep``: the records of the sweep ``args`` ask for, as a table or JSON; the exit status."""
    from pase.analysis.sweep import batch_sweep, sweep, training_sweep

    three_d = wants_3d(args)
    if three_d and time_to_train.checked(args):
        return _sweep_training(args)
    if not three_d and (args.global_batch is not None or args.framework is not None):
        raise GraphError("--global-batch and --framework apply to the 3-D search (--search 3d, the default for "
                         "language models)")
    names = list(dict.fromkeys(args.clusters)) if args.clusters else [args.cluster]
    cluster = [cluster_of(argparse.Namespace(**{**vars(args), "cluster": name, "devices": args.devices[0]}))
               for name in names]
    if len(cluster) > 1 and len({c.name for c in cluster}) == 1:
        # An override (--tflops...) renames every preset "custom", leaving the GPU types indistinguishable.
        raise ClusterError("--clusters compares presets as they are; drop the options that override their figures")
    if args.per_device_batch:
        if args.batches is None and args.batch is None:
            raise GraphError("--per-device-batch needs the per-device batch: give it with --batch or --batches")
        if args.batches is None:
            args.batches, args.batch = [args.batch], None
    grid = dict(
        bandwidths_Bps=[b * 1e9 for b in args.bandwidths] if args.bandwidths else None,
        peak_flops=[f * 1e12 for f in args.tflops_list] if args.tflops_list else None,
        options=options_of(args),
        progress=None if args.json else lambda done, total: print(f"  solved {done}/{total}", file=sys.stderr),
    )
    if three_d:
        build = builder_of(argparse.Namespace(**{**vars(args), "batch": None}))
        if args.per_device_batch:
            records = [r for b in args.batches
                       for r in training_sweep(build, args.devices, cluster, b, per_device_batch=b,
                                               framework=framework_of(args), **grid)]
        else:
            records = [r for b in (args.batches or [global_batch_of(args)])
                       for r in training_sweep(build, args.devices, cluster, b, framework=framework_of(args), **grid)]
    elif args.batches is None:
        records = sweep(_working(load_model(args)), args.devices, cluster, **grid)
    else:
        if args.batch is not None:
            raise GraphError("give the batch sizes with --batches, or one with --batch, not both")
        path = Path(args.model)
        if args.model not in SAMPLES and path.suffix.lower() != ".onnx" and path.exists() and not is_hf_config(path):
            raise GraphError("--batches applies to sample models and ONNX models; a graph file fixes its own "
                             "batch size")
        records = batch_sweep(lambda batch: _working(load_model(argparse.Namespace(**{**vars(args), "batch": batch}))),
                              args.batches, args.devices, cluster, per_device=args.per_device_batch, **grid)
    if time_to_train.checked(args):
        from pase.analysis.time_to_train import with_time_to_train

        failures, power = time_to_train.models(args)
        parameters = load_model(argparse.Namespace(**{**vars(args), "batch": (args.batches or [args.batch])[0]})
                                 ).parameter_count
        records = with_time_to_train(records, parameters, cluster, tokens=args.train_tokens, steps=args.train_steps,
                                     failures=failures, power=power, price_per_gpu_hour=args.price_per_gpu_hour)
    if args.json:
        print_json(records)
        return 0
    by_batch, by_cluster = args.batches is not None, len(cluster) > 1
    batch_head = "global batch" if args.per_device_batch else "batch"
    rows = [(["GPU type"] if by_cluster else []) + ([batch_head] if by_batch else [])
            + ["devices", "GB/s", "TFLOP/s", "strategy", "fits", "step time (ms)", "speedup over DP"]
            + (["MFU"] if three_d else ["idle devices"])]
    for r in records:
        # A plan that does not fit memory cannot run: its time and speedup are bracketed, never read as a result.
        shown = (lambda text: f"[{text}]") if r["fits_memory"] is False else str
        speedup = r["speedup_over_dp"]
        rows.append(([r["cluster"]] if by_cluster else []) + ([str(r["batch"])] if by_batch else []) + [
            str(r["devices"]), f"{r['bandwidth_Bps'] / 1e9:g}", f"{r['peak_flops'] / 1e12:g}",
            (f"{'PaSE 3-D' if r['strategy'] == 'PaSE' else r['strategy']}: " if three_d else "") + r["label"], _fits(r),
            "-" if r["step_time_s"] is None else shown(f"{r['step_time_s'] * 1e3:.2f}"),
            "-" if speedup is None else shown(f"{speedup:.2f}")]
            + ([("-" if r["mfu"] is None or r["fits_memory"] is False else f"{r['mfu'] * 100:.1f}%")]
               if three_d else [str(r["idle_devices"])]))
    if "goodput" in records[0]:
        rows[0] += ["days to train", "goodput"]
        for row, r in zip(rows[1:], records):
            row += ["-", "-"] if r["goodput"] is None else [f"{r['wall_days']:.3g}", f"{r['goodput']:.3f}"]
    print(table(rows))
    if any(r["fits_memory"] is False for r in records):
        print("[...]: the plan does not fit device memory (fits: no), so no run reaches that time; shown for "
              "comparison only")
    print("search: " + ("3-D (pase.search.stages.search_training at each point; baselines: data parallel, "
                        "ZeRO-3 / FSDP, Megatron, each at its best microbatch)" if three_d else
                        "per layer (the paper's; baselines: data parallelism and the expert strategies)"))
    for c in cluster:
        print(f"{c.name}: " if len(cluster) > 1 else "", end="")
        print_model(model_of(c, grid["options"]))
    return 0


def _sweep_training(args) -> int:
    """``pase sweep --search 3d --train-tokens N``: the 3-D search and its time to train at each device count."""
    from pase.analysis.time_to_train import scale_sweep

    if args.clusters or args.batches or args.bandwidths or args.tflops_list or args.per_device_batch:
        raise GraphError("--search 3d sweeps device counts on one --cluster: drop --clusters, --batches, "
                         "--bandwidths, --tflops-list and --per-device-batch")
    failures, power = time_to_train.models(args)
    cluster = cluster_of(argparse.Namespace(**{**vars(args), "devices": args.devices[0]}))
    progress = None if args.json else lambda done, total: print(f"  searched {done}/{total}", file=sys.stderr)
    records = scale_sweep(builder_of(args), cluster, args.devices, global_batch_of(args), tokens=args.train_tokens,
                          steps=args.train_steps, failures=failures, power=power,
                          price_per_gpu_hour=args.price_per_gpu_hour, options=options_of(args), progress=progress,
                          framework=framework_of(args))
    if args.json:
        print_json(records)
        return 0
    rows = [["devices", "plan", "step (s)", "days without failures", "days", "goodput", "interruptions a day",
             "GPU-hours", "MWh"] + (["cost"] if args.price_per_gpu_hour is not None else [])]
    for r in records:
        if r["goodput"] is None:
            rows.append([f"{r['devices']:,}", r["label"]] + ["-"] * (len(rows[0]) - 2))
            continue
        rows.append([f"{r['devices']:,}", r["label"], f"{r['step_time_s']:.3g}", f"{r['failure_free_days']:.3g}",
                     f"{r['wall_days']:.3g}", f"{r['goodput']:.3f}", f"{r['interruptions_per_day']:.3g}",
                     f"{r['wall_gpu_hours']:,.0f}", "-" if r["energy_MWh"] is None else f"{r['energy_MWh']:,.0f}"]
                    + ([f"{r['wall_cost']:,.0f}"] if args.price_per_gpu_hour is not None else []))
    print(table(rows))
    return 0


def _fits(record: dict) -> str:
    """A sweep record's "fits" cell: "yes", "no (NEED of CAPACITY GB)" or "no limit" (the cluster has no capacity)."""
    if record["fits_memory"] is None:
        return "no limit"
    if record["fits_memory"]:
        return "yes"
    if record["memory_per_device_bytes"] is None:
        return "no"
    need, capacity = record["memory_per_device_bytes"] / 1e9, record["memory_capacity_bytes"] / 1e9
    return f"no ({need:,.0f} of {capacity:g} GB)" if need >= 100 else f"no ({need:.3g} of {capacity:g} GB)"

