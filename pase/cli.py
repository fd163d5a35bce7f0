"""Command-line interface: ``pase COMMAND ...`` (also ``python -m pase``).

Each sub-command is registered by an ``_add_<name>`` function that builds its
parser and sets ``func``; a handler returns the process exit status. Errors of
pase (:class:`pase.errors.PaseError`) and of the command line (an unknown
option, a number out of range) print one line on stderr and exit 2. Every
number an option takes is bounded (:mod:`pase.limits`), names printed from
files are escaped, and ``--json`` output is strict JSON (no NaN or Infinity).

What only some sub-commands use (the 3-D training model and search, the
exporters, sweeps, graph files) is imported where it is used, so a
``pase solve`` of a sample loads none of it (see :func:`build_parser`).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

from pase.analysis.baselines import applicable_baselines, evaluate_strategy
from pase.analysis.throughput import throughput
from pase.errors import ClusterError, ConfigurationError, FormatError, GraphError, PaseError, did_you_mean
from pase.hardware.cluster import CALIBRATIONS, PRESETS, Cluster, calibrated_by_default
from pase.io.hf_config import DEFAULT_BATCH, from_hf_config, hf_batch_builder, is_hf_config
from pase.io.strategy_json import load_strategy
from pase.ir.configs import ATTENTION_KINDS, COST_MODELS, PRECISIONS, SPLIT_SPACES, ConfigOptions, config_counts
from pase.ir.graph import Graph
from pase.limits import (
    MAX_BANDWIDTH_BPS, MAX_BATCH, MAX_DEVICES, MAX_DIM, MAX_INSTANCE_BYTES, MAX_MEMORY_BYTES, MAX_PEAK_FLOPS,
    MIN_BANDWIDTH_BPS, MIN_MEMORY_BYTES, MIN_PEAK_FLOPS,
)
from pase.model.cost import options_on
from pase.model.memory import DEFAULT_RESERVE, MemoryOptions
from pase.models import LANGUAGE_MODELS, SAMPLES, batch_builder, sample
from pase.ops import training_flops
from pase.planner import Plan, PlanOptions, parallelism_kind, plan
from pase.search.exact import DEFAULT_ORDERING, ORDERINGS

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr and exit status 2, like pase's own errors."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {_printable(message)} (see {self.prog} --help)\n")

    def _check_value(self, action, value):
        # argparse's own check, its message extended with the closest choices to a misspelt name.
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            hint = did_you_mean(value, map(str, action.choices))
            if not hint:
                raise
            head, listed, choices = exc.message.partition(" (choose from ")
            raise argparse.ArgumentError(action, f"{head}; {hint}{listed}{choices}") from None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Return the argument parser of every sub-command.

    With ``command`` (a sub-command's name) only that sub-command gets its
    options; the others are listed, as ``pase --help`` shows them, without
    theirs. That parses ``command``'s arguments exactly as the full parser
    does, without importing what only the other sub-commands' options name
    (the 3-D training model's schedules, the export formats).
    """
    parser = _Parser(
        prog="pase",
        description="Find per-layer parallelization strategies for DNN training (PaSE).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, add in _COMMANDS.items():
        if command in (None, name):
            add(sub)
        else:
            sub.add_parser(name, help=_HELP[name])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    0: done; 2: bad input (a usage error or a :class:`~pase.errors.PaseError`),
    told in one line on stderr; 1: stdout was closed by its reader (``pase
    show gpt -p 64 | head -1``), which ends the command quietly. ``--help``
    returns 0 after printing the help.
    """
    try:
        try:
            argv = sys.argv[1:] if argv is None else argv
            args = build_parser(argv[0] if argv and argv[0] in _COMMANDS else None).parse_args(argv)
        except SystemExit as exc:  # --help, or a usage error already told on stderr
            status = exc.code if isinstance(exc.code, int) else 2
        else:
            try:
                status = args.func(args)
            except PaseError as exc:
                print(f"pase: error: {_printable(str(exc))}", file=sys.stderr)
                status = 2
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, rather than at exit
        return status
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed() -> int:
    """Status 1 after the reader of stdout went away, with stdout sent to /dev/null.

    As the Python documentation advises for SIGPIPE: the interpreter flushes
    stdout again at exit, which would fail and print a second error, so the
    descriptor is pointed at /dev/null first. The status is 1, not 0, because
    the output was cut short (as ``pipefail`` shells expect); nothing is
    printed, as for any program whose reader stopped reading.
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stream (tests) has no descriptor to redirect
        return 1
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return 1


def _printable(text: str) -> str:
    """``text`` with every non-printable character escaped as in ``repr`` (``\\x1b``, ``\\n``, ``\\u202e``).

    Names come from files anyone can write: escaping keeps escape sequences
    and control characters from reaching the terminal, and keeps a message
    on one line.

    >>> _printable("conv\\x1b[2J\\n1")
    'conv\\\\x1b[2J\\\\n1'
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _print_json(data: object) -> None:
    """Print ``data`` as strict JSON: a NaN or an infinity is a bug, never printed as invalid JSON."""
    print(json.dumps(data, indent=1, allow_nan=False))


# -- shared options --------------------------------------------------------------------


def _whole(what: str, low: int, high: int):
    """An argparse type: a whole number from ``low`` to ``high``; the message says what is expected."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # "1e30", "8.5", "eight", or more digits than int() reads
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {what}: a whole number from {low} to {high}, "
                                             f"got {_short(text)}")
        return value
    return parse


def _amount(what: str, scale: float, low: float, high: float, unit: str, *, zero: str | None = None):
    """An argparse type: a number whose value times ``scale`` lies in ``[low, high]`` (the hardware's units).

    The value is returned as given, in ``unit``; ``zero`` (a meaning, e.g. "no limit") also admits 0.
    """
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if zero is not None and value == 0:
            return 0.0
        if not low <= value * scale <= high:  # False for NaN
            also = "" if zero is None else f", or 0 for {zero}"
            raise argparse.ArgumentTypeError(f"expected {what} from {low / scale:g} to {high / scale:g} {unit}"
                                             f"{also}, got {_short(text)}")
        return value
    return parse


def _short(text: str, limit: int = 40) -> str:
    """``repr(text)`` cut to ``limit`` characters, for messages about what was typed."""
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_DEVICES = _whole("a device count", 1, MAX_DEVICES)
_BATCH = _whole("a batch size", 1, MAX_BATCH)
_SEQ = _whole("a sequence length", 1, MAX_DIM)
_TFLOPS = _amount("peak TFLOP/s per device", 1e12, MIN_PEAK_FLOPS, MAX_PEAK_FLOPS, "TFLOP/s")
_GBPS = _amount("a bandwidth", 1e9, MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS, "GB/s")


def _add_model_options(p: argparse.ArgumentParser, *, many_devices: bool = False, seq: bool = True) -> None:
    p.add_argument("model", help="a sample name (alexnet, inception3, resnet101, rnnlm, transformer, densenet121, gpt), "
                                 "a model file (.json in pase's format, or .onnx) or a Hugging Face config.json "
                                 "(Llama, Mistral, Qwen2, Mixtral, DeepSeekMoE, GPT-2, GPT-NeoX, BERT)")
    if many_devices:
        p.add_argument("--devices", "-p", type=_DEVICES, nargs="+", required=True,
                       help=f"device counts (1 to {MAX_DEVICES}), e.g. 4 8 16 32 64")
    else:
        p.add_argument("--devices", "-p", type=_DEVICES, required=True, help=f"number of devices (1 to {MAX_DEVICES})")
    p.add_argument("--batch", type=_BATCH, help=f"batch size, 1 to {MAX_BATCH} (sample and ONNX models and Hugging "
                                                "Face configs)")
    if seq:  # pase evaluate takes --seq with its 3-D options
        p.add_argument("--seq", type=_SEQ, help="sequence length (sequence samples and Hugging Face configs)")
    p.add_argument("--powers-of-two", action="store_true", help="only split factors 1, 2, 4, 8...")
    p.add_argument("--min-shard", type=_whole("a shard size", 1, MAX_DIM), default=ConfigOptions().min_shard,
                   help="smallest block a split may leave along a dimension (default %(default)s)")
    p.add_argument("--spatial-split", action="store_true", help="let convolutions split image rows/columns")
    p.add_argument("--split-space", choices=SPLIT_SPACES, default=ConfigOptions().split_space,
                   help="the configurations a layer may take: divisors (every tuple of divisors using at most p "
                        "devices, the paper's), mesh (placements of whole mesh axes, each sharding one dimension "
                        "or replicating, on the cluster's hierarchy and with a node's GPUs split in two each way: "
                        "far fewer, growing with the mesh's axes, not with p) or auto (divisors on the paper-* "
                        "presets, else mesh); default %(default)s")
    p.add_argument("--cost-model", choices=COST_MODELS, default=ConfigOptions().cost_model,
                   help="corrected: layouts on the device mesh with pending sums (default); "
                        "paper: the paper's equation 1 and its prototype's edge rule")
    p.add_argument("--sync-batchnorm", action=argparse.BooleanOptionalAction, default=None,
                   help="all-reduce BatchNorm statistics over a split batch (default: only under --cost-model paper)")
    p.add_argument("--attention", choices=ATTENTION_KINDS, default=ConfigOptions().attention,
                   help="flash: each attention core one fused kernel (FlashAttention, cuDNN), no s x s tensor kept "
                        "or moved through memory, a causal mask halving its work; unfused: its products, softmax "
                        "and dropout as kernels of their own (2021-22 Megatron-LM, eager PyTorch); auto (default): "
                        "flash under the calibrated model, unfused at peak rates")
    p.add_argument("--precision", choices=PRECISIONS, default=ConfigOptions().precision,
                   help="bf16 (default) or fp8: the products of layers with weights at the GPU's FP8 rate, as "
                        "Transformer Engine's recipes run them (H100, H200, B200; calibrated model); MFU is "
                        "still reported against the BF16 dense peak, as NVIDIA's tables do")


def _add_cluster_options(p: argparse.ArgumentParser) -> None:
    gbps = f"{MIN_BANDWIDTH_BPS / 1e9:g} to {MAX_BANDWIDTH_BPS / 1e9:g}"
    p.add_argument("--cluster", choices=sorted(PRESETS), default="paper-model",
                   help="hardware preset (default %(default)s: 10 TFLOP/s, 16 GB/s)")
    p.add_argument("--tflops", type=_TFLOPS,
                   help=f"peak TFLOP/s per device, {MIN_PEAK_FLOPS / 1e12:g} to {MAX_PEAK_FLOPS / 1e12:g} "
                        "(overrides the preset)")
    p.add_argument("--bandwidth", type=_GBPS, help=f"link bandwidth in GB/s, {gbps} (overrides the preset)")
    p.add_argument("--bytes-per-element", type=int, choices=(1, 2, 4, 8),
                   help="4 for fp32, 2 for fp16/bf16 (overrides the preset)")
    p.add_argument("--memory-gb", type=_amount("memory per device", 1e9, MIN_MEMORY_BYTES, MAX_MEMORY_BYTES, "GB",
                                               zero="no limit"),
                   help=f"memory per device in GB (1e9 bytes), {MIN_MEMORY_BYTES / 1e9:g} to "
                        f"{MAX_MEMORY_BYTES / 1e9:g}; the strategy must fit; 0: no limit, as in the app "
                        "(overrides the preset)")
    p.add_argument("--reserve-gb", type=_amount("reserve per device", 1e9, 0.0, MAX_MEMORY_BYTES, "GB"),
                   help="memory per device no strategy can use, in GB (1e9 bytes): CUDA context, cuBLAS and "
                        "Transformer Engine workspaces, NCCL buffers, allocator fragmentation; a plan fits when "
                        "its memory and the reserve fit (default: pase.model.memory.DEFAULT_RESERVE, "
                        f"{DEFAULT_RESERVE.total_bytes / 1e9:.2f} GB, each part with its source, on a device whose "
                        "memory is known; 0: none, the paper's model)")
    p.add_argument("--nodes", type=_whole("a node count", 1, MAX_DEVICES),
                   help="nodes the devices are spread over (devices per node = devices / nodes)")
    p.add_argument("--devices-per-node", type=_whole("a node size", 1, MAX_DEVICES),
                   help="devices in one node (overrides the preset)")
    p.add_argument("--intra-bandwidth", type=_GBPS,
                   help=f"link bandwidth inside a node in GB/s per device, {gbps} (same as --bandwidth)")
    p.add_argument("--inter-bandwidth", type=_GBPS,
                   help=f"network bandwidth between nodes in GB/s per device, {gbps} (overrides the preset)")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--calibrated", action="store_true",
                       help="price compute by the roofline and links at their achievable efficiency and latency, "
                            f"with the preset's calibration ({', '.join(CALIBRATIONS)}; pase.hardware.efficiency, "
                            "each figure with its source); the default on the DGX presets")
    model.add_argument("--peak-rates", action="store_true",
                       help="the paper's model: every FLOP at the peak and every byte at the nominal bandwidth "
                            "(the default on the paper-* presets and on hardware without a calibration)")
    p.add_argument("--calibration", metavar="FILE",
                   help="a calibration file (pase calibrate): the device's peaks, memory and kernel figures from "
                        "the file, the topology from --cluster; implies the calibrated model")


def _load_model(args) -> Graph:
    seq = getattr(args, "seq", None)
    if args.model in SAMPLES:
        given = {key: value for key, value in (("batch", args.batch), ("seq", seq)) if value is not None}
        return sample(args.model, **given)
    if is_hf_config(args.model):
        return from_hf_config(args.model, batch=args.batch, seq=seq)
    path = Path(args.model)
    if not path.exists():
        hint = did_you_mean(args.model, SAMPLES)
        if hint:  # a misspelt sample: the closest names, not all of them
            raise GraphError(f"{args.model!r} is neither a sample nor an existing file; {hint}")
        raise GraphError(f"{args.model!r} is neither a sample ({', '.join(SAMPLES)}) nor an existing file; "
                         "give a sample name or the path of a model file")
    if seq is not None:
        raise GraphError("--seq applies to sample models and Hugging Face configs; a graph or ONNX file fixes its "
                         "own sequence length")
    if args.batch is not None and path.suffix.lower() != ".onnx":
        raise GraphError("--batch applies to sample models and ONNX models; a graph file fixes its own batch size")
    from pase.io.graph_json import load_model_file  # late: a sample (the common case) needs no file reader

    return load_model_file(path, batch=args.batch)


def _options(args) -> ConfigOptions:
    return ConfigOptions(powers_of_two=args.powers_of_two, min_shard=args.min_shard, spatial_split=args.spatial_split,
                         cost_model=args.cost_model, sync_batchnorm=args.sync_batchnorm,
                         split_space=args.split_space, attention=args.attention, precision=args.precision)


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
        changes["memory_bytes"] = args.memory_gb * 1e9 or None  # 0: no limit
    if getattr(args, "intra_bandwidth", None) is not None:
        changes["bandwidth_Bps"] = args.intra_bandwidth * 1e9
    if getattr(args, "inter_bandwidth", None) is not None:
        changes["inter_bandwidth_Bps"] = args.inter_bandwidth * 1e9
    nodes, per_node = getattr(args, "nodes", None), getattr(args, "devices_per_node", None)
    if nodes is not None:
        if per_node is not None and nodes * per_node != args.devices:
            raise ClusterError(f"--nodes {nodes} of --devices-per-node {per_node} make {nodes * per_node} devices, "
                               f"not {args.devices}; give one of the two")
        if args.devices % nodes:
            raise ClusterError(f"--nodes {nodes} does not divide {args.devices} devices; give a divisor")
        per_node = args.devices // nodes
    if per_node is not None:
        changes["devices_per_node"] = per_node
    if len(changes) > 1:
        changes["name"] = "custom"
    if getattr(args, "calibrated", False) or (calibrated_by_default(args.cluster)
                                               and not getattr(args, "peak_rates", False)):
        if args.cluster not in CALIBRATIONS:
            raise ClusterError(f"--calibrated: preset {args.cluster!r} has no calibration; calibrated presets: "
                               f"{', '.join(CALIBRATIONS)}")
        changes["efficiency"] = CALIBRATIONS[args.cluster]
    cluster = replace(base, **changes)
    if getattr(args, "calibration", None) is not None:
        from pase.hardware.calibration import load_calibration  # late: only a calibration file needs its reader

        if getattr(args, "peak_rates", False):
            raise ClusterError("--calibration prices with the file's measured figures; drop --peak-rates")
        args.calibrated = True  # a calibration file implies the calibrated model's options (--tp-overlap...)
        if cluster.efficiency is None and args.cluster in CALIBRATIONS:
            cluster = replace(cluster, efficiency=CALIBRATIONS[args.cluster])  # the preset's links, unless measured
        cluster = load_calibration(args.calibration).apply(cluster)
    if getattr(args, "reserve_gb", None) is not None:  # not a hardware figure: the preset keeps its name
        cluster = replace(cluster, reserved_bytes=args.reserve_gb * 1e9)
    return cluster


def _table(rows: list[list[str]]) -> str:
    """``rows`` as aligned columns, every cell escaped (names come from files)."""
    rows = [[_printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


# -- pase solve ------------------------------------------------------------------------


def _add_solve(sub) -> None:
    p = sub.add_parser("solve", help=_HELP["solve"])
    _add_model_options(p)
    _add_cluster_options(p)
    p.add_argument("--ordering", choices=ORDERINGS, help="search ordering (default: the best available)")
    p.add_argument("--search", choices=("auto", "layers", "3d"), default="auto",
                   help="layers: per-layer splits on all devices (the paper's search); 3d: pipeline stages, "
                        "microbatches, schedule, recomputation, ZeRO and tensor/data sizes jointly (sample models); "
                        "auto (default): 3d for the large language models (megatron-*, gpt3-175b, llama3-*) and Hugging "
                        "Face configs but mixtures of experts, else layers")
    p.add_argument("--global-batch", type=_BATCH, help="samples per step for --search 3d (default: the sample's)")
    p.add_argument("--intra-search", action="store_true",
                   help="with --search 3d, also try the exact per-layer search on each stage's group")
    p.add_argument("--tp-overlap", action="store_true",
                   help="with --search 3d on a --calibrated cluster, plan for Megatron-LM's asynchronous "
                        "tensor-parallel backward (see pase evaluate --help)")
    p.add_argument("--tp-comm-overlap", action="store_true",
                   help="with --search 3d on a calibrated cluster, plan for Transformer Engine's tensor-parallel "
                        "communication overlap (the forward gathers and reduce-scatters pipelined with the products)")
    _add_framework_option(p)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (a baseline's speedup is null where PaSE takes 0 s and it does not)")
    p.add_argument("--stats", action="store_true",
                   help="also print the search's statistics: configurations before and after pruning, layers "
                        "costed once per kind (repeated blocks), blocks folded into min-plus chains and their "
                        "tables, tables built, peak memory (under \"stats\" "
                        "with --json)")
    _add_time_to_train_options(p)
    p.set_defaults(func=_solve)


def _add_framework_option(p: argparse.ArgumentParser) -> None:
    # Free text checked by pase.frameworks.framework, so an unknown name is one line naming the choices.
    p.add_argument("--framework", metavar="NAME",
                   help="with --search 3d, keep only what that framework runs, stages cut between whole transformer "
                        "blocks: megatron (Megatron-LM main 2026 / megatron-core 0.16), torchtitan (0.2.2), deepspeed "
                        "(0.16-0.19); any: every configuration cut between blocks, and the best each framework runs")


def _framework(args) -> str | None:
    """``--framework``, checked: None when not given; ConfigurationError naming the choices for an unknown name."""
    from pase.frameworks import framework

    name = getattr(args, "framework", None)
    if name is not None and name != "any":
        framework(name)
    return name


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


def _print_stats(stats: dict) -> None:
    print("search statistics: " + ", ".join(_stat(key, value) for key, value in stats.items() if value is not None))


def _stat(key: str, value) -> str:
    if key.endswith("_bytes"):
        return f"{key[:-6].replace('_', ' ')} {value / 1e6:,.1f} MB"
    if key.endswith("_s"):
        return f"{key[:-2].replace('_', ' ')} {value:.3g} s"
    return f"{key.replace('_', ' ')} {value:,}"


def _add_time_to_train_options(p: argparse.ArgumentParser) -> None:
    from pase.cli_time_to_train import add_options

    add_options(p)


def _time_to_train_asked(args) -> bool:
    """Whether ``--train-tokens`` (or ``--train-steps``) asks for a time to train; its figures are checked here,
    before any search, so that bad ones fail at once."""
    from pase.cli_time_to_train import asked, models

    if not asked(args):
        return False
    models(args)
    return True


def _time_to_train(plan, args, parameters: int | None = None):
    """The time to train ``plan`` as ``args`` ask (:mod:`pase.cli_time_to_train`), or None when not asked."""
    from pase.cli_time_to_train import estimate

    return estimate(plan, args, parameters) if _time_to_train_asked(args) else None


def _print_time_to_train(estimate) -> None:
    from pase.cli_time_to_train import lines

    if estimate is not None:
        print("\n".join(lines(estimate)))


def _solve_training(args) -> int:
    """``pase solve --search 3d``: the joint search of :mod:`pase.search.stages`."""
    from pase.search.stages import search_training, training_baselines

    cluster = _cluster(args)
    _check_tp_overlap(args, cluster)
    build, batch = _builder(args), _global_batch(args)
    progress = None if args.json else lambda done, total: print(f"  searched {done}/{total} microbatch and group "
                                                                 "sizes", file=sys.stderr)
    cache: dict = {}  # the baselines reuse the search's graphs and layer times
    found = search_training(build, cluster, batch, options=_options(args), intra_search=args.intra_search,
                            tp_overlap=args.tp_overlap, tp_comm_overlap=args.tp_comm_overlap, progress=progress,
                            cache=cache, framework=_framework(args))
    baselines = training_baselines(build, cluster, batch, options=_options(args), tp_overlap=args.tp_overlap,
                                   tp_comm_overlap=args.tp_comm_overlap, cache=cache)
    stats = _training_search_stats(found, cache) if args.stats else None
    best = found.best.step_time_s
    trained = _time_to_train(found.best, args, build(1).parameter_count)
    if args.json:
        out = found.to_dict()
        if stats is not None:
            out["stats"] = stats
        if trained is not None:
            out["time_to_train"] = trained.to_dict()
        out["step_time_model"] = found.best.step_time_model()
        out["baselines"] = {
            name: {"label": b.label, "step_time_s": b.step_time_s, "speedup": b.step_time_s / best if best else None,
                   "memory_per_device_bytes": b.memory_per_device_bytes, "fits_memory": b.fits_memory}
            for name, b in baselines.items()}
        _print_json(out)
        return 0
    _print_training(found.best)
    print(f"search {found.search_time_s:.2f} s: {found.configurations:,} configurations "
          f"({found.skipped:,} skipped by the bound); cuts within {found.gap_bound_s * 1e3:.1f} ms of any cut's bound")
    for r in found.runners_up[:3]:
        print(f"  runner-up {r.label}: {r.step_time_s:.3f} s "
              f"({(r.step_time_s / found.best.step_time_s - 1) * 100:.1f}% slower)")
    for note in found.notes:
        print(f"  note: {_printable(note)}")
    for name, r in found.by_framework.items():
        print(f"  best {name} runs: " + ("none of the configurations" if r is None else
                                         f"{r.label}: {r.step_time_s:.3f} s "
                                         f"({(r.step_time_s / found.best.step_time_s - 1) * 100:.1f}% slower)"))
    for name, b in baselines.items():
        fits = "" if b.fits_memory is not False else ", does NOT fit memory"
        print(f"  vs {name} ({b.label}): {b.step_time_s:.3f} s{fits}, "
              f"{b.step_time_s / best:.2f}x the searched step")
    _print_time_to_train(trained)
    if stats is not None:
        _print_stats(stats)
    return 0


def _print_layers(result: Plan) -> None:
    """The per-layer table and the step-time totals of ``result`` (shared by solve and evaluate)."""
    rows = [["layer", "op", "dims", "configuration", "parallelism", "time (ms)"]]
    for r in result.layers:
        rows.append([r.name, r.op, " ".join(r.dims), "(" + ", ".join(map(str, r.config)) + ")",
                     parallelism_kind(r.dims, r.config), f"{r.total_s * 1e3:.3f}"])
    print(_table(rows))
    t = result.totals_s()
    print(f"\n{_printable(result.graph.name)} on {result.cluster}")
    print(f"estimated step time {result.step_time_s * 1e3:.2f} ms (compute {t['compute_s'] * 1e3:.2f}, "
          f"intra-layer communication {t['intra_comm_s'] * 1e3:.2f}, edge communication {t['edge_comm_s'] * 1e3:.2f})")
    print(_rates_line(result))


def _rates_line(result: Plan) -> str:
    """One line of today's units: samples/s, tokens/s, model FLOPs per step and per device, MFU (peak-based)."""
    d = throughput(result).to_dict()
    if d["mfu"] is None:
        return f"throughput undefined (a step takes 0 s); model FLOPs per step {d['model_flops_per_step']:.3g}"
    parts = [] if d["samples_per_s"] is None else [f"{d['samples_per_s']:,.1f} samples/s"]
    if d["tokens_per_s"] is not None:
        parts.append(f"{d['tokens_per_s']:,.0f} tokens/s")
    parts += [f"model FLOPs per step {d['model_flops_per_step']:.3g}",
              f"{d['model_flops_per_device_per_s'] / 1e12:.3g} TFLOP/s per device",
              f"MFU {d['mfu'] * 100:.1f}% of peak"]
    return ", ".join(parts)


def _memory_line(need: float, capacity: float | None, cluster: Cluster) -> str | None:
    """"memory per device N GB of C GB (reserve R GB included): fits, M GB to spare" (or "does NOT fit, M GB
    over"); None without a capacity."""
    if capacity is None:
        return None
    reserve = MemoryOptions().reserve_on(cluster)
    margin = capacity - need
    verdict = f"fits, {margin / 1e9:.2f} GB to spare" if margin >= 0 else f"does NOT fit, {-margin / 1e9:.2f} GB over"
    return (f"memory per device {need / 1e9:.2f} GB of {capacity / 1e9:.2f} GB (reserve {reserve / 1e9:.2f} GB "
            f"included: CUDA context, workspaces, NCCL buffers, fragmentation; --reserve-gb): {verdict}")


def _print_memory(result: Plan) -> None:
    line = _memory_line(result.memory_per_device_bytes, result.memory_capacity_bytes, result.cluster)
    if line is not None:
        print(line)


def _speedup(result: Plan, baseline: Plan) -> float | None:
    """``result.speedup_over(baseline)``, None where it is infinite (PaSE takes 0 s, the baseline more)."""
    s = result.speedup_over(baseline)
    return s if math.isfinite(s) else None


def _solve(args) -> int:
    # A Hugging Face config is a transformer language model, planned in 3-D like the large samples; a mixture of
    # experts too, its experts split by the 3-D search's expert parallelism (pase.model.experts).
    hf_3d = is_hf_config(args.model)
    if args.search == "3d" or (args.search == "auto" and (args.model in LANGUAGE_MODELS or hf_3d)):
        _time_to_train_asked(args)
        return _solve_training(args)
    if args.global_batch is not None or args.intra_search or args.tp_overlap or args.tp_comm_overlap or \
            args.framework is not None:
        raise GraphError("--global-batch, --intra-search, --tp-overlap and --framework apply to --search 3d")
    graph, cluster, options = _load_model(args), _cluster(args), _options(args)
    _time_to_train_asked(args)
    result = plan(graph, cluster, PlanOptions(configs=options, ordering=args.ordering))
    stats = _layer_search_stats(graph, result, options) if args.stats else None
    baselines = applicable_baselines(graph, cluster, options)
    trained = _time_to_train(result, args)
    if args.json:
        out = result.to_dict()
        if stats is not None:
            out["stats"] = stats
        if trained is not None:
            out["time_to_train"] = trained.to_dict()
        out["step_time_model"] = _model_of(cluster, options)
        out["baselines"] = {
            name: {"label": b.label, "cost": b.cost, "step_time_s": b.step_time_s, "speedup": _speedup(result, b),
                   "memory_per_device_bytes": b.memory_per_device_bytes, "fits_memory": b.fits_memory}
            for name, b in baselines.items()
        }
        _print_json(out)
        return 0
    _print_layers(result)
    if result.step_time_s == 0:
        print(f"note: {_printable(graph.name)} does no work: its layers only move data "
              f"({_printable(', '.join(sorted({layer.op for layer in graph})))}) and this strategy moves nothing "
              "between devices, so a step takes 0 s (a speedup over a baseline that takes 0 s too is 1)")
    print(f"search {result.search.search_time_s:.3f} s, largest dependent set {result.search.max_dependent_set}")
    if not result.exact:
        print("approximate: no ordering keeps the exact search in memory, so windows of layers were optimised "
              "exactly starting from every baseline (never worse than the best baseline; optimality not guaranteed)")
    _print_memory(result)
    _print_model(_model_of(cluster, options))
    for name, b in baselines.items():
        fits = {None: "", True: ", fits memory", False: ", does NOT fit memory"}[b.fits_memory]
        speedup = _speedup(result, b)
        faster = "PaSE takes no time" if speedup is None else f"PaSE is {speedup:.2f}x faster"
        print(f"  vs {b.label}: {b.step_time_s * 1e3:.2f} ms{fits}, {faster}")
    _print_time_to_train(trained)
    if stats is not None:
        _print_stats(stats)
    return 0


# -- pase evaluate ---------------------------------------------------------------------


def _add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help=_HELP["evaluate"],
                       description="Cost the strategy of a plan file for MODEL on the cluster the options describe, "
                                   "e.g. a plan saved by `pase solve --json` or the app, on other hardware. Layers "
                                   "the plan leaves out are data parallel. docs/plan-format.md describes the file.")
    _add_model_options(p, seq=False)
    _add_cluster_options(p)
    p.add_argument("--plan", metavar="PLAN.json",
                   help="strategy file: a plan (pase solve --json, the app's download) or {layer: [factors...]}")
    _add_training_options(p)
    p.add_argument("--json", action="store_true", help="print the evaluated plan as one JSON object")
    _add_time_to_train_options(p)
    p.set_defaults(func=_evaluate)


_SIZE = _whole("a parallel size", 1, MAX_DEVICES)


def _add_training_options(p: argparse.ArgumentParser) -> None:
    from pase.model.pipeline import SCHEDULES
    from pase.model.training import RECOMPUTE

    g = p.add_argument_group("3-D parallel training (sample models; see pase.model.training)")
    g.add_argument("--tp", type=_SIZE, help="tensor-parallel size")
    g.add_argument("--pp", type=_SIZE, help="pipeline stages")
    g.add_argument("--dp", type=_SIZE, help="data-parallel size (default: devices / (tp x pp x cp))")
    g.add_argument("--cp", type=_SIZE, help="context-parallel size (the sequence split)")
    g.add_argument("--vp", type=_SIZE, help="virtual stages per device (interleaved schedule)")
    g.add_argument("--microbatch-size", type=_BATCH, help="samples per microbatch per replica (default: the best)")
    g.add_argument("--global-batch", type=_BATCH, help="samples per step (default: the sample's batch)")
    g.add_argument("--seq", type=_SEQ, help="sequence length (sample models and Hugging Face configs)")
    g.add_argument("--sp", action="store_true", help="Megatron's sequence parallelism")
    g.add_argument("--recompute", choices=RECOMPUTE, help="activation recomputation (default none)")
    g.add_argument("--recompute-modules", type=lambda v: tuple(m for m in v.split(",") if m),
                   metavar="M1,M2", help="Megatron-Core's selective recomputation modules (core_attn, moe_act, "
                   "layernorm, mla_up_proj, mlp, moe, shared_experts); implies --recompute selective")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage over the data-parallel replicas")
    g.add_argument("--schedule", choices=SCHEDULES, help="pipeline schedule (default 1f1b; interleaved with --vp)")
    g.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=None,
                   help="overlap the gradient reduction with the last backward, and ZeRO-3's parameter gathers "
                        "with the compute (default: on a --calibrated cluster, as frameworks do; else serial, the "
                        "paper's model)")
    g.add_argument("--tp-overlap", action="store_true",
                   help="Megatron-LM's asynchronous tensor-parallel backward (a --calibrated cluster): each product "
                        "reduces its input gradient while it computes its weight gradient, and re-gathers a "
                        "sequence-parallel input while it computes its input gradient (default: exposed)")
    g.add_argument("--tp-comm-overlap", action="store_true",
                   help="Transformer Engine's tensor-parallel communication overlap (Megatron-Core's "
                        "--tp-comm-overlap; a calibrated cluster): the forward all-gathers and reduce-scatters "
                        "pipelined with the products they feed or come from (default: exposed)")
    g.add_argument("--framework", metavar="NAME",
                   help="cut the stages as that framework runs them (megatron, torchtitan, deepspeed: whole "
                        "transformer blocks) and refuse what it does not run; any: balanced whole-block cuts")
    e = p.add_argument_group("experts (mixture-of-experts models; see pase.model.experts)")
    e.add_argument("--ep", type=_SIZE, help="expert parallelism: the experts dealt out over this many devices of a "
                                            "stage (default 1)")
    e.add_argument("--etp", type=_SIZE, help="expert tensor parallelism: each expert's width split this many ways "
                                             "(default: --tp, as Megatron-Core)")
    e.add_argument("--expert-imbalance", type=_amount("an expert imbalance", 1.0, 1.0, 1e3, "(the busiest "
                                                      "expert's tokens over the mean)"),
                   help="the busiest expert's tokens over the mean, dropless routing (default 1: forced balance, as "
                        "NVIDIA's benchmarks run)")
    e.add_argument("--capacity-factor", type=_amount("a capacity factor", 1.0, 1e-3, 1e3, "x the mean"),
                   help="token drop: each expert takes at most this factor of the mean, padded up to it "
                        "(default: dropless)")
    e.add_argument("--ep-overlap", action="store_true",
                   help="hide the token dispatch and combine behind the experts' compute (default: exposed)")
    e.add_argument("--fp8-dispatch", action="store_true", help="send dispatched tokens in FP8 (DeepEP)")


_TRAINING_FLAGS = ("tp", "pp", "dp", "cp", "vp", "microbatch_size", "global_batch", "seq", "recompute",
                   "recompute_modules", "zero",
                   "schedule", "ep", "etp", "expert_imbalance", "capacity_factor", "framework")


def _training_asked(args) -> bool:
    given = any(getattr(args, f, None) is not None for f in _TRAINING_FLAGS + ("overlap",))
    return given or args.sp or args.tp_overlap or args.tp_comm_overlap or args.ep_overlap or args.fp8_dispatch


def _builder(args):
    """``build(batch)`` for a sample model with ``--seq``, or GraphError naming the fix."""
    hf = is_hf_config(args.model)
    if args.model not in SAMPLES and not hf:
        raise GraphError(f"3-D parallel training needs the model rebuilt at the microbatch size: give a sample "
                         f"name ({', '.join(SAMPLES)}) or a Hugging Face config.json, not {_short(args.model)}")
    if args.batch is not None:
        raise GraphError("give the batch of a 3-D configuration with --global-batch (and --microbatch-size), "
                         "not --batch")
    seq = getattr(args, "seq", None)
    if hf:
        return hf_batch_builder(args.model, seq=seq)
    params = {} if seq is None else {"seq": seq}
    try:
        sample(args.model, batch=1, **params)
    except GraphError as exc:
        raise GraphError(f"{exc} (--seq applies to sequence models)") from None
    return batch_builder(args.model, **params)


def _global_batch(args) -> int:
    if args.global_batch is not None:
        return args.global_batch
    if is_hf_config(args.model):
        return DEFAULT_BATCH
    default = inspect.signature(SAMPLES[args.model]).parameters["batch"].default
    return int(default)


def _check_tp_overlap(args, cluster) -> None:
    """Refuse ``--tp-overlap`` and ``--tp-comm-overlap`` where they would change nothing: the paper's model
    prices no overlap."""
    for flag in ("tp_overlap", "tp_comm_overlap"):
        if getattr(args, flag, False) and cluster.efficiency is None:
            raise ConfigurationError(f"--{flag.replace('_', '-')} is priced on a calibrated cluster (the paper's "
                                     "model keeps every collective exposed); drop --peak-rates")


def _evaluate_training(args) -> int:
    """``pase evaluate MODEL --tp ...``: one 3-D configuration; options left out are chosen and reported."""
    from pase.model.training import Parallelism, evaluate_training

    cluster = _cluster(args)
    _check_tp_overlap(args, cluster)
    build, batch = _builder(args), _global_batch(args)
    t, pp, cp = args.tp or 1, args.pp or 1, args.cp or 1
    if args.dp is None:
        if cluster.devices % (t * pp * cp):
            raise ConfigurationError(f"tp {t} x pp {pp} x cp {cp} = {t * pp * cp} does not divide the "
                                     f"{cluster.devices} devices; choose sizes whose product divides them")
        dp = cluster.devices // (t * pp * cp)
    else:
        dp = args.dp
    if t * pp * cp * dp != cluster.devices:
        raise ConfigurationError(f"tp {t} x pp {pp} x cp {cp} x dp {dp} = {t * pp * cp * dp:,} devices, but the "
                                 f"cluster has {cluster.devices:,}; choose sizes whose product is the device count")
    chosen = [] if args.microbatch_size is not None else ["microbatch size"]
    microbatches = [args.microbatch_size] if args.microbatch_size is not None else [
        b for b in (1, 2, 4, 8) if batch % (dp * b) == 0]
    schedule = args.schedule or ("interleaved" if args.vp else "1f1b")
    if schedule == "interleaved" and args.vp is None:
        chosen.append("virtual stages")
    virtual = [args.vp] if args.vp is not None else ([2, 3, 4] if schedule == "interleaved" else [1])
    if not microbatches:
        raise ConfigurationError(f"the global batch {batch} does not split over {dp} data-parallel replicas; "
                                 "give a --global-batch that is a multiple of --dp")
    best, error = None, None
    if args.framework is not None:
        from pase.frameworks import framework, framework_cuts

        fw = None if args.framework == "any" else framework(args.framework)
    cache: dict = {}
    for b in microbatches:
        for v in virtual:
            try:
                par = Parallelism(tensor=t, pipeline=pp, data=dp, context=cp, virtual_stages=v, microbatch_size=b,
                                  global_batch=batch, sequence_parallel=args.sp,
                                  recompute=args.recompute or ("selective" if args.recompute_modules else "none"),
                                  recompute_modules=args.recompute_modules,
                                  zero=args.zero or 0, schedule=schedule, tp_overlap=args.tp_overlap,
                                  tp_comm_overlap=args.tp_comm_overlap, ep=args.ep or 1, etp=args.etp,
                                  expert_imbalance=args.expert_imbalance or 1.0,
                                  capacity_factor=args.capacity_factor, expert_overlap=args.ep_overlap,
                                  fp8_dispatch=args.fp8_dispatch,
                                  overlap=cluster.efficiency is not None if args.overlap is None else args.overlap)
                if args.framework is not None:
                    par = replace(par, stage_cuts=framework_cuts(fw, build, cluster, par, _options(args), cache))
                got = evaluate_training(build, cluster, par, options=_options(args), cache=cache)
            except ConfigurationError as exc:
                if len(microbatches) * len(virtual) == 1:
                    raise
                error = exc
                continue
            rank = (not got.fits_memory if got.fits_memory is not None else False, got.step_time_s)
            if best is None or rank < best[0]:
                best = (rank, got)
    if best is None:
        raise error
    result = replace(best[1], chosen=tuple(chosen))
    return _report_training(result, args, build)


def _report_training(result, args, build) -> int:
    """Print an evaluated 3-D plan (JSON or text) with its time to train when asked; the exit code, 0."""
    trained = _time_to_train(result, args, build(1).parameter_count)
    if args.json:
        _print_json(result.to_dict() if trained is None else {**result.to_dict(), "time_to_train": trained.to_dict()})
        return 0
    _print_training(result)
    _print_time_to_train(trained)
    return 0


def _print_training(result) -> None:
    """A 3-D plan as text: the configuration, its step, memory and rates, one line per stage."""
    d = result.to_dict()
    print(f"{_printable(result.graph_name)} on {result.cluster}: {result.label}"
          + (f" (chosen: {', '.join(result.chosen)})" if result.chosen else ""))
    rows = [["stage", "layers", "forward (ms)", "backward (ms)", "in flight", "memory (GB)"]]
    for s in result.stages:
        runs = "; ".join(f"{a} .. {b}" for a, b in s.layers)
        rows.append([str(s.index), runs, f"{s.forward_s * 1e3:.2f}", f"{s.backward_s * 1e3:.2f}",
                     f"{s.in_flight:g}", f"{s.memory_bytes / 1e9:.2f}"])
    print(_table(rows))
    p = d["pipeline"]
    print(f"step time {d['step_time_s']:.3f} s with {p['microbatches']} microbatches of {p['microbatch_size']} "
          f"({p['schedule']}; idle {d['bubble_fraction'] * 100:.1f}% of it: bubble and exposed gradient reduction); "
          f"{d['model_flops_per_device_per_s'] / 1e12:.1f} TFLOP/s per device, MFU {d['mfu'] * 100:.1f}%, "
          f"HFU {d['hfu'] * 100:.1f}% of the cluster's peak")
    line = _memory_line(d["memory_per_device_bytes"], d["memory_capacity_bytes"], result.cluster)
    if line is not None:
        print(line)
    print(_memory_breakdown(max(result.stages, key=lambda s: s.memory_bytes)))
    if d.get("experts"):
        print(_experts_lines(d["experts"]))
    _print_model(d["step_time_model"])


def _experts_lines(e: dict) -> str:
    """An MoE plan as its user reads it (TrainingPlan.experts_dict), three lines."""
    def axes(spans: dict) -> str:
        return " x ".join(f"{name} {k}" for name, k in spans.items()) or "one device"

    link = f"across the {e['all_to_all_link']!r} axis" if e["all_to_all_link"] else "inside each device (none moves)"
    load = (f"capacity factor {e['capacity_factor']:g} (token drop)" if e["capacity_factor"] is not None
            else f"dropless, imbalance {e['imbalance']:g}")
    return "\n".join([
        f"experts: EP {e['ep']} ({axes(e['mesh']['expert'])}), ETP {e['etp']} ({axes(e['mesh']['expert tensor'])}), "
        f"expert-DP {e['edp']}; {e['experts_per_device']} of {e['experts']} experts per device (top-{e['top_k']}), "
        f"{e['expert_parameters_per_device'] / 1e9:.2f}B expert parameters per device; {load}",
        f"  each all-to-all sends {e['tokens_sent_per_all_to_all']:,.0f} tokens per device per block {link}; "
        f"{e['tokens_per_local_expert']:,.0f} tokens per local expert",
        f"  per step on the busiest device: dispatch and combine {e['dispatch_s_per_step']:.3f} s "
        f"({'overlapped with' if e['dispatch_overlap'] else 'exposed, not overlapped with'} the experts' compute), "
        f"experts' compute {e['expert_compute_s_per_step']:.3f} s"])


def _model_of(cluster: Cluster, options: ConfigOptions) -> dict:
    """:func:`pase.model.cost.describe_model` of what a command priced."""
    from pase.model.cost import attention_kind, describe_model

    return describe_model(cluster, attention_kind(options, cluster), options.precision)


def _print_model(model: dict) -> None:
    print(f"step-time model: {model['model']} ({model['calibration']}); attention {model['attention']}, "
          f"precision {model['precision']}; {model['mfu_counting']}")


def _memory_breakdown(stage) -> str:
    """The largest stage's memory per device by what holds it, one line."""
    parts = [("weights", stage.weights_bytes), ("gradients", stage.gradient_bytes),
             ("optimizer state", stage.optimizer_bytes), ("FP8 weight copies", stage.fp8_bytes),
             ("activations", stage.activation_bytes), ("communication buffers", stage.transient_bytes)]
    parts.append(("reserve", stage.memory_bytes - sum(value for _, value in parts)))
    return f"  stage {stage.index}: " + ", ".join(f"{name} {value / 1e9:.2f} GB" for name, value in parts if value)


def _strategy(args) -> tuple[dict[str, tuple[int, ...]], str]:
    """The strategy ``pase evaluate`` costs (layer name -> configuration, possibly partial) and its label."""
    path = Path(args.plan)
    return load_strategy(path), path.name


def _evaluate(args) -> int:
    from pase.io.export import is_training_plan, load_plan_document

    _time_to_train_asked(args)
    if _training_asked(args):
        if args.plan is not None:
            raise GraphError("give either --plan PLAN.json or a 3-D configuration (--tp, --pp, --dp...), not both")
        return _evaluate_training(args)
    if args.plan is None:
        raise GraphError("give the strategy to cost: --plan PLAN.json, or a 3-D configuration "
                         "(--tp T --pp P --dp D ...)")
    try:
        document = load_plan_document(args.plan)
    except FormatError:
        document = None  # the strategy reader below reports the problem in its own words
        if _looks_exported(args.plan):
            return _evaluate_exported(args)
    if is_training_plan(document):
        return _evaluate_training_plan(args, document)
    if isinstance(document, dict) and "zero_optimization" in document and "train_batch_size" in document:
        return _evaluate_exported(args)  # a DeepSpeed configuration: says what it lacks
    graph, cluster, options = _load_model(args), _cluster(args), _options(args)
    strategy, label = _strategy(args)
    try:
        result = evaluate_strategy(graph, cluster, strategy, options=options, label=label)
    except (GraphError, ConfigurationError) as exc:
        raise type(exc)(f"{label}: {exc}") from None
    trained = _time_to_train(result, args)
    if args.json:
        _print_json(result.to_dict() if trained is None else {**result.to_dict(), "time_to_train": trained.to_dict()})
        return 0
    _print_layers(result)
    given = sum(1 for layer in graph if layer.name in strategy)
    print(f"{given} of {len(graph)} layers configured by {_printable(label)}" +
          ("" if given == len(graph) else f"; the other {len(graph) - given} data parallel"))
    _print_memory(result)
    _print_time_to_train(trained)
    return 0


def _looks_exported(path: str) -> bool:
    """Whether the file at ``path`` reads like a Megatron-LM or torchtitan export (pase.frameworks.read_export)."""
    from pase.io.files import read_limited
    from pase.limits import MAX_FILE_BYTES

    text = read_limited(Path(path), MAX_FILE_BYTES, what="plan file").decode("utf-8", "replace")
    return ("torchrun" in text and ".py" in text) or "[parallelism]" in text


def _evaluate_exported(args) -> int:
    """``pase evaluate MODEL --plan EXPORT``: a Megatron-LM or torchtitan export of a 3-D plan, re-costed on the
    cluster the options describe in the export's precision and attention (its stage cuts from its blocks per
    stage)."""
    from pase.frameworks import block_layout, read_export
    from pase.io.files import read_limited
    from pase.limits import MAX_FILE_BYTES
    from pase.model.training import evaluate_training

    label = Path(args.plan).name
    text = read_limited(Path(args.plan), MAX_FILE_BYTES, what="plan file").decode("utf-8", "replace")
    try:
        name, settings, counts = read_export(text)
    except FormatError as exc:
        raise FormatError(f"{label}: {exc}") from None
    build, cluster = _builder(args), _cluster(args)
    par = settings.parallelism
    try:
        cuts = None
        if par.pipeline * par.virtual_stages > 1:
            if not counts:
                raise FormatError("it gives no transformer blocks per stage (--num-layers or a layout)")
            cuts = block_layout([layer.name for layer in build(1).layers]).cuts_of(counts)
        par = replace(par, stage_cuts=cuts, overlap=cluster.efficiency is not None)
        options = replace(_options(args), precision=settings.precision,
                          attention=settings.attention or _options(args).attention)
        result = evaluate_training(build, cluster, par, options=options, label=f"{label} ({name}): {par.describe()}")
    except (GraphError, ConfigurationError, FormatError) as exc:
        raise type(exc)(f"{label}: {exc}") from None
    return _report_training(result, args, build)


def _evaluate_training_plan(args, document: dict) -> int:
    """``pase evaluate MODEL --plan TRAINING.json``: the plan's 3-D configuration, stage cuts included, re-costed
    on the cluster the options describe (the gradient reduction overlapped on a calibrated cluster)."""
    from pase.io.export import training_from_dict
    from pase.model.training import evaluate_training

    label = Path(args.plan).name
    try:
        settings = training_from_dict(document)
    except FormatError as exc:
        raise FormatError(f"{label}: {exc}") from None
    if settings.searched:
        raise GraphError(f"{label}: its layer splits inside a stage were searched per layer, and a training plan "
                         "does not record them; run pase solve --search 3d --intra-search on this cluster instead")
    build, cluster = _builder(args), _cluster(args)
    if settings.model and settings.model != build(1).name:
        raise GraphError(f"{label} is a plan for {_short(settings.model)}, not {_short(args.model)}; its stage cuts "
                         "are positions in that model's layers")
    par = replace(settings.parallelism, overlap=cluster.efficiency is not None)
    try:
        result = evaluate_training(build, cluster, par, options=_options(args), label=f"{label}: {par.describe()}")
    except (GraphError, ConfigurationError) as exc:
        raise type(exc)(f"{label}: {exc}") from None
    return _report_training(result, args, build)


# -- pase sweep ------------------------------------------------------------------------


def _add_sweep(sub) -> None:
    p = sub.add_parser("sweep", help=_HELP["sweep"])
    _add_model_options(p, many_devices=True)
    p.add_argument("--bandwidths", type=_GBPS, nargs="+", help="link bandwidths to sweep, GB/s")
    p.add_argument("--tflops-list", type=_TFLOPS, nargs="+", help="peak TFLOP/s values to sweep")
    p.add_argument("--batches", type=_BATCH, nargs="+", help="batch sizes to sweep (sample and ONNX models)")
    p.add_argument("--per-device-batch", action="store_true",
                   help="weak scaling: --batches (or --batch) is each device's batch, so the global batch at p "
                        "devices is that times p; default: a fixed global batch (strong scaling)")
    _add_cluster_options(p)
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
    p.add_argument("--global-batch", type=_BATCH,
                   help="samples per step for the 3-D search (default: the sample's; --batches to sweep several)")
    _add_framework_option(p)
    _add_time_to_train_options(p)
    p.set_defaults(func=_sweep)


def _working(graph: Graph) -> Graph:
    """``graph``, or ``GraphError`` when no layer computes anything: a sweep's speedups over data parallelism
    divide by step times, which are 0 s for data movement alone."""
    if all(training_flops(layer) == 0 for layer in graph):
        raise GraphError(f"{graph.name!r} does no work: its layers only move data, so every step time is 0 s and "
                         "speedups over data parallelism are undefined; sweep a model with computing layers")
    return graph


def _sweep(args) -> int:
    from pase.analysis.sweep import batch_sweep, sweep, training_sweep

    hf_3d = is_hf_config(args.model)
    three_d = args.search == "3d" or (args.search == "auto" and (args.model in LANGUAGE_MODELS or hf_3d))
    if three_d and _time_to_train_asked(args):
        return _sweep_training(args)
    if not three_d and (args.global_batch is not None or args.framework is not None):
        raise GraphError("--global-batch and --framework apply to the 3-D search (--search 3d, the default for "
                         "language models)")
    names = list(dict.fromkeys(args.clusters)) if args.clusters else [args.cluster]
    cluster = [_cluster(argparse.Namespace(**{**vars(args), "cluster": name, "devices": args.devices[0]}))
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
        options=_options(args),
        progress=None if args.json else lambda done, total: print(f"  solved {done}/{total}", file=sys.stderr),
    )
    if three_d:
        build = _builder(argparse.Namespace(**{**vars(args), "batch": None}))
        if args.per_device_batch:
            records = [r for b in args.batches for r in training_sweep(build, args.devices, cluster, b,
                                                                         per_device_batch=b, framework=_framework(args),
                                                                         **grid)]
        else:
            records = [r for b in (args.batches or [_global_batch(args)])
                       for r in training_sweep(build, args.devices, cluster, b, framework=_framework(args), **grid)]
    elif args.batches is None:
        records = sweep(_working(_load_model(args)), args.devices, cluster, **grid)
    else:
        if args.batch is not None:
            raise GraphError("give the batch sizes with --batches, or one with --batch, not both")
        path = Path(args.model)
        if args.model not in SAMPLES and path.suffix.lower() != ".onnx" and path.exists() and not is_hf_config(path):
            raise GraphError("--batches applies to sample models and ONNX models; a graph file fixes its own "
                             "batch size")
        records = batch_sweep(lambda batch: _working(_load_model(argparse.Namespace(**{**vars(args), "batch": batch}))),
                              args.batches, args.devices, cluster, per_device=args.per_device_batch, **grid)
    if _time_to_train_asked(args):
        from pase.analysis.time_to_train import with_time_to_train
        from pase.cli_time_to_train import models

        failures, power = models(args)
        parameters = _load_model(argparse.Namespace(**{**vars(args), "batch": (args.batches or [args.batch])[0]})
                                 ).parameter_count
        records = with_time_to_train(records, parameters, cluster, tokens=args.train_tokens, steps=args.train_steps,
                                     failures=failures, power=power, price_per_gpu_hour=args.price_per_gpu_hour)
    if args.json:
        _print_json(records)
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
    print(_table(rows))
    if any(r["fits_memory"] is False for r in records):
        print("[...]: the plan does not fit device memory (fits: no), so no run reaches that time; shown for "
              "comparison only")
    print("search: " + ("3-D (pase.search.stages.search_training at each point; baselines: data parallel, "
                        "ZeRO-3 / FSDP, Megatron, each at its best microbatch)" if three_d else
                        "per layer (the paper's; baselines: data parallelism and the expert strategies)"))
    for c in cluster:
        print(f"{c.name}: " if len(cluster) > 1 else "", end="")
        _print_model(_model_of(c, grid["options"]))
    return 0


def _sweep_training(args) -> int:
    """``pase sweep --search 3d --train-tokens N``: the 3-D search and its time to train at each device count."""
    from pase.analysis.time_to_train import scale_sweep
    from pase.cli_time_to_train import models

    if args.clusters or args.batches or args.bandwidths or args.tflops_list or args.per_device_batch:
        raise GraphError("--search 3d sweeps device counts on one --cluster: drop --clusters, --batches, "
                         "--bandwidths, --tflops-list and --per-device-batch")
    failures, power = models(args)
    cluster = _cluster(argparse.Namespace(**{**vars(args), "devices": args.devices[0]}))
    progress = None if args.json else lambda done, total: print(f"  searched {done}/{total}", file=sys.stderr)
    records = scale_sweep(_builder(args), cluster, args.devices, _global_batch(args), tokens=args.train_tokens,
                          steps=args.train_steps, failures=failures, power=power,
                          price_per_gpu_hour=args.price_per_gpu_hour, options=_options(args), progress=progress,
                          framework=_framework(args))
    if args.json:
        _print_json(records)
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
    print(_table(rows))
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


# -- pase show -------------------------------------------------------------------------


def _add_show(sub) -> None:
    p = sub.add_parser("show", help=_HELP["show"])
    _add_model_options(p)
    _add_cluster_options(p)  # the mesh split space counts placements on the cluster's mesh
    p.set_defaults(func=_show)


def _show(args) -> int:
    graph, options, cluster = _load_model(args), _options(args), _cluster(args)
    shape = cluster.mesh.shape
    # Both split spaces' counts: the paper's divisors and the mesh placements of this cluster's mesh.
    counts = {space: config_counts(graph, args.devices, replace(options, split_space=space).on_mesh(shape))
              for space in ("divisors", "mesh")}
    rows = [["layer", "op", "dims", "configurations (divisors)", "configurations (mesh)"]]
    for layer in graph:
        dims = " ".join(f"{d}={n}" for d, n in zip(layer.dims, layer.sizes))
        rows.append([layer.name, layer.op, dims] + [str(c[layer.name]) for c in counts.values()])
    print(_table(rows))
    totals = ", ".join(f"{sum(c.values()):,} {space} configurations (largest {max(c.values()):,})"
                       for space, c in counts.items())
    print(f"\n{_printable(graph.name)}: {len(graph)} layers, {graph.parameter_count / 1e6:.1f}M parameters; on "
          f"{args.devices} devices ({' x '.join(map(str, shape))} mesh): {totals}")
    return 0


# -- pase solve-instance -----------------------------------------------------------------


def _add_solve_instance(sub) -> None:
    p = sub.add_parser("solve-instance", help=_HELP["solve-instance"])
    p.add_argument("file", help="instance file: JSON, gzip-compressed or not (at most "
                                f"{MAX_INSTANCE_BYTES / 2**20:.0f} MiB uncompressed)")
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
        }, allow_nan=False))
        return 0
    rows = [["node", "op", "configuration", "index"]]
    for v, a in enumerate(result.assignment.tolist()):
        node = meta["nodes"][v]
        config = node["configs"][a] if node["configs"] is not None else "-"
        rows.append([str(v), str(node["op"] or "-"), str(config), str(a)])
    print(_table(rows))
    print(f"\n{_printable(meta['name'] or args.file)}: {cost_graph.num_nodes} nodes, {len(cost_graph.edges)} edges, "
          f"{sum(cost_graph.config_counts)} configurations")
    print(f"optimal cost {result.cost:.12g}")
    print(f"search {result.search_time_s:.3f} s with ordering {args.ordering}: largest dependent set "
          f"{result.max_dependent_set}, largest table {result.max_table_entries:,} entries, "
          f"{result.total_work:,} sums, {result.pruned_configs} dominated configurations dropped")
    return 0


# -- pase export -----------------------------------------------------------------------


def _add_export(sub) -> None:
    from pase.io.export import FORMATS as EXPORT_FORMATS

    p = sub.add_parser("export", help=_HELP["export"],
                       description="Write a plan pase saved in the form a framework reads (pase.io.export; "
                                   "docs/plan-format.md). A per-layer plan (pase solve --json) exports to every "
                                   "format, to Megatron-LM, torchtitan and DeepSpeed when its layers split as "
                                   "Megatron-LM's rule does; a 3-D training plan (pase evaluate --tp ... --json, "
                                   "pase solve --search 3d --json) to every format, its dtensor and partitionspec "
                                   "on the mesh pp x dp_replicate x dp_shard x cp x tp. What the format cannot "
                                   "express is refused, naming the layers or settings (pase.frameworks: the "
                                   "versions each targets).")
    p.add_argument("plan", metavar="PLAN.json", help="a plan document pase wrote (either kind)")
    p.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="what to write")
    p.add_argument("--out", metavar="FILE", help="write to FILE (default: standard output)")
    p.add_argument("--model", help="the model of a per-layer plan: a sample name, a model file or a Hugging Face "
                                   "config.json (default: the sample the plan names, at the plan's batch)")
    p.add_argument("--batch", type=_BATCH, help="the batch of --model (sample and ONNX models, Hugging Face configs)")
    p.set_defaults(func=_export)


def _export(args) -> int:
    from pase.io.export import NotExpressibleError, export_plan, is_training_plan, load_plan_document

    label = Path(args.plan).name
    document = load_plan_document(args.plan)
    if args.model is None and args.batch is not None:
        raise GraphError("--batch applies to the model given with --model")
    if args.model is not None and is_training_plan(document) and args.format not in ("dtensor", "partitionspec"):
        raise GraphError(f"--model applies to per-layer plans and to the dtensor and partitionspec exports; "
                         f"{_printable(label)} is a 3-D training plan, which names its model")
    graph = None if args.model is None else _load_model(argparse.Namespace(model=args.model, batch=args.batch))
    try:
        text = export_plan(document, args.format, graph=graph)
    except (FormatError, GraphError, ConfigurationError, NotExpressibleError) as exc:
        raise type(exc)(f"{label}: {exc}") from None
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.out).write_text(text)
    except OSError as exc:
        raise FormatError(f"cannot write {_short(args.out)}: {exc.strerror or exc}") from None
    print(f"wrote the {args.format} export of {_printable(label)} to {_printable(args.out)}", file=sys.stderr)
    return 0


# -- pase calibrate (pase.calibrate.command) ------------------------------------------------


def _add_calibrate(sub) -> None:
    from pase.calibrate.command import add_parser  # late: the other commands never load the profiler's module

    add_parser(sub)


# -- the sub-commands ------------------------------------------------------------------

# Each sub-command's one-line help (pase --help lists them) and the function adding its parser.
_HELP = {
    "solve": "find the best strategy for a model on a cluster",
    "evaluate": "cost a given strategy (a saved plan) for a model on a cluster",
    "show": "list a model's layers, dimensions and configuration counts",
    "sweep": "step time and speedup over data parallelism across device counts",
    "solve-instance": "solve a solver-level instance file (the ../shared/instances format)",
    "export": "write a plan as DTensor placements, JAX PartitionSpecs, Megatron-LM arguments, a Megatron-Bridge "
              "override, torchtitan or DeepSpeed settings, or its launch line",
    "calibrate": "measure this machine's GPU (and its links) and write a calibration file pase plans with",
}
_COMMANDS = {
    "solve": _add_solve, "evaluate": _add_evaluate, "show": _add_show, "sweep": _add_sweep,
    "solve-instance": _add_solve_instance, "export": _add_export,
    "calibrate": _add_calibrate,
}
