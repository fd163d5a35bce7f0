"""The command line's shared options and what they build: the model, the cluster, the configuration options,
the 3-D builder and batch. Every number an option takes is bounded (:mod:`pase.limits`); a bad value is one line
naming what is expected."""

from __future__ import annotations

import argparse
import inspect
import math
from dataclasses import replace
from pathlib import Path

from pase.cli.text import printable, short
from pase.errors import ClusterError, ConfigurationError, GraphError, did_you_mean
from pase.hardware.cluster import CALIBRATIONS, PRESETS, Cluster, calibrated_by_default
from pase.io.hf_config import DEFAULT_BATCH, from_hf_config, hf_batch_builder, is_hf_config
from pase.ir.configs import ATTENTION_KINDS, COST_MODELS, PRECISIONS, SPLIT_SPACES, ConfigOptions
from pase.ir.graph import Graph
from pase.limits import (
    MAX_BANDWIDTH_BPS,
    MAX_BATCH,
    MAX_DEVICES,
    MAX_DIM,
    MAX_MEMORY_BYTES,
    MAX_PEAK_FLOPS,
    MIN_BANDWIDTH_BPS,
    MIN_MEMORY_BYTES,
    MIN_PEAK_FLOPS,
)
from pase.model.memory import DEFAULT_RESERVE
from pase.model.parallelism import DISPATCHERS
from pase.models import LANGUAGE_MODELS, SAMPLES, batch_builder, sample


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr and exit status 2, like pase's own errors."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {printable(message)} (see {self.prog} --help)\n")

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


def whole(what: str, low: int, high: int):
    """An argparse type: a whole number from ``low`` to ``high``; the message says what is expected."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # "1e30", "8.5", "eight", or more digits than int() reads
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {what}: a whole number from {low} to {high}, "
                                             f"got {short(text)}")
        return value
    return parse


def amount(what: str, scale: float, low: float, high: float, unit: str, *, zero: str | None = None):
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
                                             f"{also}, got {short(text)}")
        return value
    return parse


DEVICES = whole("a device count", 1, MAX_DEVICES)


BATCH = whole("a batch size", 1, MAX_BATCH)


SEQ = whole("a sequence length", 1, MAX_DIM)


TFLOPS = amount("peak TFLOP/s per device", 1e12, MIN_PEAK_FLOPS, MAX_PEAK_FLOPS, "TFLOP/s")


GBPS = amount("a bandwidth", 1e9, MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS, "GB/s")


def add_model_options(p: argparse.ArgumentParser, *, many_devices: bool = False, seq: bool = True) -> None:
    p.add_argument("model", help="a sample name (alexnet, inception3, resnet101, rnnlm, transformer, densenet121, gpt), "
                                 "a model file (.json in pase's format, or .onnx) or a Hugging Face config.json "
                                 "(Llama, Mistral, Qwen2, Mixtral, DeepSeekMoE, GPT-2, GPT-NeoX, BERT)")
    if many_devices:
        p.add_argument("--devices", "-p", type=DEVICES, nargs="+", required=True,
                       help=f"device counts (1 to {MAX_DEVICES}), e.g. 4 8 16 32 64")
    else:
        p.add_argument("--devices", "-p", type=DEVICES, required=True, help=f"number of devices (1 to {MAX_DEVICES})")
    p.add_argument("--batch", type=BATCH, help=f"batch size, 1 to {MAX_BATCH} (sample and ONNX models and Hugging "
                                                "Face configs)")
    if seq:  # pase evaluate takes --seq with its 3-D options
        p.add_argument("--seq", type=SEQ, help="sequence length (sequence samples and Hugging Face configs)")
    p.add_argument("--powers-of-two", action="store_true", help="only split factors 1, 2, 4, 8...")
    p.add_argument("--min-shard", type=whole("a shard size", 1, MAX_DIM), default=ConfigOptions().min_shard,
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
                   help="bf16 (default), fp8, fp8-cs or mxfp8: the products of layers with weights at the GPU's "
                        "FP8 rate, as Transformer Engine runs them, with delayed scaling (fp8, its default), current "
                        "per-tensor scaling (fp8-cs, NVIDIA's Megatron-Bridge recipes: an amax pass before each "
                        "cast) (H100, H200, B200) or MXFP8 block scaling (mxfp8, B200 only); calibrated model; MFU "
                        "is still reported against the BF16 dense peak, as NVIDIA's tables do")


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    gbps = f"{MIN_BANDWIDTH_BPS / 1e9:g} to {MAX_BANDWIDTH_BPS / 1e9:g}"
    p.add_argument("--cluster", choices=sorted(PRESETS), default="paper-model",
                   help="hardware preset (default %(default)s: 10 TFLOP/s, 16 GB/s)")
    p.add_argument("--tflops", type=TFLOPS,
                   help=f"peak TFLOP/s per device, {MIN_PEAK_FLOPS / 1e12:g} to {MAX_PEAK_FLOPS / 1e12:g} "
                        "(overrides the preset)")
    p.add_argument("--bandwidth", type=GBPS, help=f"link bandwidth in GB/s, {gbps} (overrides the preset)")
    p.add_argument("--bytes-per-element", type=int, choices=(1, 2, 4, 8),
                   help="4 for fp32, 2 for fp16/bf16 (overrides the preset)")
    p.add_argument("--memory-gb", type=amount("memory per device", 1e9, MIN_MEMORY_BYTES, MAX_MEMORY_BYTES, "GB",
                                               zero="no limit"),
                   help=f"memory per device in GB (1e9 bytes), {MIN_MEMORY_BYTES / 1e9:g} to "
                        f"{MAX_MEMORY_BYTES / 1e9:g}; the strategy must fit; 0: no limit, as in the app "
                        "(overrides the preset)")
    p.add_argument("--reserve-gb", type=amount("reserve per device", 1e9, 0.0, MAX_MEMORY_BYTES, "GB"),
                   help="memory per device no strategy can use, in GB (1e9 bytes): CUDA context, cuBLAS and "
                        "Transformer Engine workspaces, NCCL buffers, allocator fragmentation; a plan fits when "
                        "its memory and the reserve fit (default: pase.model.memory.DEFAULT_RESERVE, "
                        f"{DEFAULT_RESERVE.total_bytes / 1e9:.2f} GB, each part with its source, on a device whose "
                        "memory is known; 0: none, the paper's model)")
    p.add_argument("--nodes", type=whole("a node count", 1, MAX_DEVICES),
                   help="nodes the devices are spread over (devices per node = devices / nodes)")
    p.add_argument("--devices-per-node", type=whole("a node size", 1, MAX_DEVICES),
                   help="devices in one node (overrides the preset)")
    p.add_argument("--intra-bandwidth", type=GBPS,
                   help=f"link bandwidth inside a node in GB/s per device, {gbps} (same as --bandwidth)")
    p.add_argument("--inter-bandwidth", type=GBPS,
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


def load_model(args) -> Graph:
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


def options_of(args) -> ConfigOptions:
    return ConfigOptions(powers_of_two=args.powers_of_two, min_shard=args.min_shard, spatial_split=args.spatial_split,
                         cost_model=args.cost_model, sync_batchnorm=args.sync_batchnorm,
                         split_space=args.split_space, attention=args.attention, precision=args.precision)


def cluster_of(args) -> Cluster:
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


def add_framework_option(p: argparse.ArgumentParser) -> None:
    # Free text checked by pase.frameworks.framework, so an unknown name is one line naming the choices.
    p.add_argument("--framework", metavar="NAME",
                   help="with --search 3d, keep only what that framework runs, stages cut between whole transformer "
                        "blocks: megatron (Megatron-LM main 2026 / megatron-core 0.16), torchtitan (0.2.2), deepspeed "
                        "(0.16-0.19); any: every configuration cut between blocks, and the best each framework runs")


def framework_of(args) -> str | None:
    """``--framework``, checked: None when not given; ConfigurationError naming the choices for an unknown name."""
    from pase.frameworks import framework

    name = getattr(args, "framework", None)
    if name is not None and name != "any":
        framework(name)
    return name


SIZE = whole("a parallel size", 1, MAX_DEVICES)


def add_training_options(p: argparse.ArgumentParser) -> None:
    from pase.model.pipeline import SCHEDULES
    from pase.model.training import RECOMPUTE

    g = p.add_argument_group("3-D parallel training (sample models; see pase.model.training)")
    g.add_argument("--tp", type=SIZE, help="tensor-parallel size")
    g.add_argument("--pp", type=SIZE, help="pipeline stages")
    g.add_argument("--dp", type=SIZE, help="data-parallel size (default: devices / (tp x pp x cp))")
    g.add_argument("--cp", type=SIZE, help="context-parallel size (the sequence split)")
    g.add_argument("--vp", type=SIZE, help="virtual stages per device (interleaved schedule)")
    g.add_argument("--microbatch-size", type=BATCH, help="samples per microbatch per replica (default: the best)")
    g.add_argument("--global-batch", type=BATCH, help="samples per step (default: the sample's batch)")
    g.add_argument("--seq", type=SEQ, help="sequence length (sample models and Hugging Face configs)")
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
    e.add_argument("--ep", type=SIZE, help="expert parallelism: the experts dealt out over this many devices of a "
                                            "stage (default 1)")
    e.add_argument("--etp", type=SIZE, help="expert tensor parallelism: each expert's width split this many ways "
                                             "(default: --tp, as Megatron-Core)")
    add_routing_options(e)


def add_routing_options(e, searched: bool = False) -> None:
    """The routing and token-dispatch options of a mixture of experts, on argument group ``e`` (``searched``: for
    the 3-D search, which tries both dispatchers unless one is named)."""
    e.add_argument("--expert-imbalance", type=amount("an expert imbalance", 1.0, 1.0, 1e3, "(the busiest "
                                                      "expert's tokens over the mean)"),
                   help="the busiest expert's tokens over the mean, dropless routing (default 1: forced balance, as "
                        "NVIDIA's benchmarks run)")
    e.add_argument("--capacity-factor", type=amount("a capacity factor", 1.0, 1e-3, 1e3, "x the mean"),
                   help="token drop: each expert takes at most this factor of the mean, padded up to it "
                        "(default: dropless)")
    e.add_argument("--ep-overlap", action="store_true",
                   help="hide each microbatch's token dispatch and combine behind another microbatch's layer "
                        "(Megatron-Core's 1F1B all-to-all overlap, its merged forward and backward; DeepEP's SMs "
                        "slow the computation meanwhile; default: exposed)")
    e.add_argument("--shared-expert-overlap", action="store_true",
                   help="run each block's shared experts beside its dispatch and combine (Megatron-Core's "
                        "moe_shared_expert_overlap; all-to-all dispatcher, not with --ep-overlap"
                        + ("; the search plans it where those hold" if searched else "") + "; default: off)")
    e.add_argument("--fp8-dispatch", action="store_true", help="send dispatched tokens in FP8 (DeepEP)")
    e.add_argument("--dispatcher", choices=DISPATCHERS,
                   help="how tokens reach their experts: alltoall (Megatron-Core's default) or deepep (once per "
                        "node across the network, then NVLink; Megatron-Core's flex dispatcher)"
                        + ("; default: the faster of the two that the framework runs" if searched else ""))


def expert_search_options(args) -> dict:
    """The expert options of ``pase solve``'s 3-D search (:func:`pase.search.stages.search_training`'s keywords):
    the routing, the dispatcher (both tried unless one is named), the all-to-all overlap, FP8 dispatch and the
    shared experts beside the all-to-all."""
    return {"expert_imbalance": args.expert_imbalance or 1.0, "capacity_factor": args.capacity_factor,
            "dispatchers": (args.dispatcher,) if args.dispatcher else DISPATCHERS,
            "expert_overlap": args.ep_overlap, "fp8_dispatch": args.fp8_dispatch,
            "shared_expert_overlap": args.shared_expert_overlap}


TRAINING_FLAGS = ("tp", "pp", "dp", "cp", "vp", "microbatch_size", "global_batch", "seq", "recompute",
                  "recompute_modules", "zero", "schedule", "ep", "etp", "expert_imbalance", "capacity_factor",
                  "framework", "dispatcher")


def training_asked(args) -> bool:
    given = any(getattr(args, f, None) is not None for f in TRAINING_FLAGS + ("overlap",))
    return given or args.sp or args.tp_overlap or args.tp_comm_overlap or args.ep_overlap or args.fp8_dispatch


def builder_of(args, cache: dict | None = None):
    """``build(batch)`` for a sample model with ``--seq``, or GraphError naming the fix.

    A sample is built once at batch 1 to check ``--seq``; with ``cache`` (a layer-time cache,
    :func:`pase.model.layer_times.cached_graph`) that graph is kept there rather than built again.
    """
    hf = is_hf_config(args.model)
    if args.model not in SAMPLES and not hf:
        raise GraphError(f"3-D parallel training needs the model rebuilt at the microbatch size: give a sample "
                         f"name ({', '.join(SAMPLES)}) or a Hugging Face config.json, not {short(args.model)}")
    if args.batch is not None:
        raise GraphError("give the batch of a 3-D configuration with --global-batch (and --microbatch-size), "
                         "not --batch")
    seq = getattr(args, "seq", None)
    if hf:
        return hf_batch_builder(args.model, seq=seq)
    from pase.model.layer_times import cached_graph  # late: the per-layer commands need no layer times

    params = {} if seq is None else {"seq": seq}
    build = batch_builder(args.model, **params)
    try:
        cached_graph(build, 1, {} if cache is None else cache)
    except GraphError as exc:
        raise GraphError(f"{exc} (--seq applies to sequence models)") from None
    return build


def global_batch_of(args) -> int:
    if args.global_batch is not None:
        return args.global_batch
    if is_hf_config(args.model):
        return DEFAULT_BATCH
    default = inspect.signature(SAMPLES[args.model]).parameters["batch"].default
    return int(default)


def check_tp_overlap(args, cluster) -> None:
    """Refuse ``--tp-overlap`` and ``--tp-comm-overlap`` where they would change nothing: the paper's model
    prices no overlap."""
    for flag in ("tp_overlap", "tp_comm_overlap"):
        if getattr(args, flag, False) and cluster.efficiency is None:
            raise ConfigurationError(f"--{flag.replace('_', '-')} is priced on a calibrated cluster (the paper's "
                                     "model keeps every collective exposed); drop --peak-rates")



def wants_3d(args) -> bool:
    """Whether ``args`` (of solve or sweep) ask for the 3-D search: ``--search 3d``, or ``auto`` on a sample
    language model or a Hugging Face config (a transformer language model; a mixture of experts too, its experts
    split by the 3-D search's expert parallelism, :mod:`pase.model.experts`)."""
    return args.search == "3d" or (args.search == "auto" and (args.model in LANGUAGE_MODELS
                                                              or is_hf_config(args.model)))
