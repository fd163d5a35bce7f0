"""What the sub-commands print: aligned tables, strict JSON, and the lines of a plan (its layers, rates, memory,
3-D stages, experts and step-time model). Names come from files anyone can write, so every one is escaped."""

from __future__ import annotations

import json

from pase.analysis.throughput import throughput
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.model.memory import MemoryOptions
from pase.planner import Plan, parallelism_kind


def printable(text: str) -> str:
    """``text`` with every non-printable character escaped as in ``repr`` (``\\x1b``, ``\\n``, ``\\u202e``).

    Names come from files anyone can write: escaping keeps escape sequences
    and control characters from reaching the terminal, and keeps a message
    on one line.

    >>> printable("conv\\x1b[2J\\n1")
    'conv\\\\x1b[2J\\\\n1'
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def print_json(data: object) -> None:
    """Print ``data`` as strict JSON: a NaN or an infinity is a bug, never printed as invalid JSON."""
    print(json.dumps(data, indent=1, allow_nan=False))


def short(text: str, limit: int = 40) -> str:
    """``repr(text)`` cut to ``limit`` characters, for messages about what was typed."""
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def table(rows: list[list[str]]) -> str:
    """``rows`` as aligned columns, every cell escaped (names come from files)."""
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def print_stats(stats: dict) -> None:
    print("search statistics: " + ", ".join(_stat(key, value) for key, value in stats.items() if value is not None))


def _stat(key: str, value) -> str:
    if key.endswith("_bytes"):
        return f"{key[:-6].replace('_', ' ')} {value / 1e6:,.1f} MB"
    if key.endswith("_s"):
        return f"{key[:-2].replace('_', ' ')} {value:.3g} s"
    return f"{key.replace('_', ' ')} {value:,}"


def print_layers(result: Plan) -> None:
    """The per-layer table and the step-time totals of ``result`` (shared by solve and evaluate)."""
    rows = [["layer", "op", "dims", "configuration", "parallelism", "time (ms)"]]
    for r in result.layers:
        rows.append([r.name, r.op, " ".join(r.dims), "(" + ", ".join(map(str, r.config)) + ")",
                     parallelism_kind(r.dims, r.config), f"{r.total_s * 1e3:.3f}"])
    print(table(rows))
    t = result.totals_s()
    print(f"\n{printable(result.graph.name)} on {result.cluster}")
    print(f"estimated step time {result.step_time_s * 1e3:.2f} ms (compute {t['compute_s'] * 1e3:.2f}, "
          f"intra-layer communication {t['intra_comm_s'] * 1e3:.2f}, edge communication {t['edge_comm_s'] * 1e3:.2f})")
    print(rates_line(result))


def rates_line(result: Plan) -> str:
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


def memory_line(need: float, capacity: float | None, cluster: Cluster) -> str | None:
    """"memory per device N GB of C GB (reserve R GB included): fits, M GB to spare" (or "does NOT fit, M GB
    over"); None without a capacity."""
    if capacity is None:
        return None
    reserve = MemoryOptions().reserve_on(cluster)
    margin = capacity - need
    verdict = f"fits, {margin / 1e9:.2f} GB to spare" if margin >= 0 else f"does NOT fit, {-margin / 1e9:.2f} GB over"
    return (f"memory per device {need / 1e9:.2f} GB of {capacity / 1e9:.2f} GB (reserve {reserve / 1e9:.2f} GB "
            f"included: CUDA context, workspaces, NCCL buffers, fragmentation; --reserve-gb): {verdict}")


def print_memory(result: Plan) -> None:
    line = memory_line(result.memory_per_device_bytes, result.memory_capacity_bytes, result.cluster)
    if line is not None:
        print(line)


def print_training(result) -> None:
    """A 3-D plan as text: the configuration, its step, memory and rates, one line per stage."""
    d = result.to_dict()
    print(f"{printable(result.graph_name)} on {result.cluster}: {result.label}"
          + (f" (chosen: {', '.join(result.chosen)})" if result.chosen else ""))
    rows = [["stage", "layers", "forward (ms)", "backward (ms)", "in flight", "memory (GB)"]]
    for s in result.stages:
        rows.append([str(s.index), s.chunks_text(), f"{s.forward_s * 1e3:.2f}", f"{s.backward_s * 1e3:.2f}",
                     f"{s.in_flight:g}", f"{s.memory_bytes / 1e9:.2f}"])
    print(table(rows))
    p = d["pipeline"]
    print(f"step time {d['step_time_s']:.3f} s with {p['microbatches']} microbatches of {p['microbatch_size']} "
          f"({p['schedule']}; idle {d['bubble_fraction'] * 100:.1f}% of it: bubble and exposed gradient reduction); "
          f"{d['model_flops_per_device_per_s'] / 1e12:.1f} TFLOP/s per device, MFU {d['mfu'] * 100:.1f}%, "
          f"HFU {d['hfu'] * 100:.1f}% of the cluster's peak")
    line = memory_line(d["memory_per_device_bytes"], d["memory_capacity_bytes"], result.cluster)
    if line is not None:
        print(line)
    print(_memory_breakdown(max(result.stages, key=lambda s: s.memory_bytes)))
    if d.get("experts"):
        print(_experts_lines(d["experts"]))
    print_model(d["step_time_model"])
    if d["published_runs"] is not None:
        print(f"  published runs: {d['published_runs']['text']}:")
        for r in d["published_runs"]["runs"]:
            print(f"    {r['release']} {r['precision']}: {r['configuration']}: {r['tokens_per_gpu_s']:,.0f} "
                  f"tokens/s/GPU, a {r['step_s']:.3f} s step"
                  + ("  <- this configuration" if r["same_configuration"] else ""))


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
        f"  each {'DeepEP exchange' if e['dispatcher'] == 'deepep' else 'all-to-all'} sends "
        f"{e['tokens_sent_per_all_to_all']:,.0f} tokens per device per block {link}, "
        f"{e['tokens_across_nodes_per_all_to_all']:,.0f} of them to other nodes; "
        f"{e['tokens_per_local_expert']:,.0f} tokens per local expert",
        f"  per step on the busiest device: dispatch and combine {e['dispatch_s_per_step']:.3f} s "
        + (f"(overlapped with another microbatch's layer: {e['dispatch_exposed_s_per_step']:.3f} s stays exposed, "
           "the pipeline's unmerged warm-up and cool-down included)" if e["dispatch_overlap"] else
           f"(the shared experts run beside it: {e['dispatch_exposed_s_per_step']:.3f} s stays exposed)"
           if e["shared_expert_overlap"] else "(exposed, not overlapped)")
        + f", experts' compute {e['expert_compute_s_per_step']:.3f} s"])


def model_of(cluster: Cluster, options: ConfigOptions) -> dict:
    """:func:`pase.model.cost.describe_model` of what a command priced."""
    from pase.model.cost import attention_kind, describe_model

    return describe_model(cluster, attention_kind(options, cluster), options.precision)


def print_model(model: dict) -> None:
    print(f"step-time model: {model['model']} ({model['calibration']}); attention {model['attention']}, "
          f"precision {model['precision']}{f' ({s})' if (s := model.get('fp8_scaling')) else ''}; "
          f"{model['mfu_counting']}")
    if "accuracy" in model:
        print(f"  accuracy: {model['accuracy']['text']}")


def _memory_breakdown(stage) -> str:
    """The largest stage's memory per device by what holds it, one line."""
    parts = [("weights", stage.weights_bytes), ("gradients", stage.gradient_bytes),
             ("optimizer state", stage.optimizer_bytes), ("FP8 weight copies", stage.fp8_bytes),
             ("activations", stage.activation_bytes), ("communication buffers", stage.transient_bytes)]
    parts.append(("reserve", stage.memory_bytes - sum(value for _, value in parts)))
    return f"  stage {stage.index}: " + ", ".join(f"{name} {value / 1e9:.2f} GB" for name, value in parts if value)

