"""The sidebar every page shares: the graph (sample or upload), the cluster and the search options.

Rendered by the router (``app.py``) on every run, so the choices survive
moving between pages. The chosen :class:`ui.state.Problem` (or the reason
there is none, e.g. a bad upload) is left in the session for the pages.
"""

from __future__ import annotations

import inspect

import streamlit as st

from pase.hardware.cluster import PRESETS, Cluster
from pase.ir.configs import ATTENTION_KINDS, PRECISIONS, ConfigOptions
from pase.errors import PaseError
from pase.model.memory import DEFAULT_RESERVE, RESERVE_SOURCES
from pase.io.graph_json import is_hf_config_data
from pase.io.hf_config import DEFAULT_BATCH
from pase.limits import (
    MAX_BANDWIDTH_BPS, MAX_BATCH, MAX_DEVICES, MAX_MEMORY_BYTES, MAX_PEAK_FLOPS, MIN_BANDWIDTH_BPS, MIN_PEAK_FLOPS,
)
from ui.fmt import md
from ui.held import held
from ui.links import Link, parse_link
from ui.state import GraphSource, Problem, load_graph, set_current_problem
from ui.stepmodel import CALIBRATED, model_choice, with_calibration_file, with_model

__all__ = ["problem_sidebar", "sample_parameters", "DEFAULT_SAMPLE", "DEFAULT_PRESET", "BASE", "MODEL_MEMORY"]

# Where the story is: a Transformer on two DGX H100 nodes (16 GPUs). Under the calibrated step-time model the
# app opens with (the H100's kernels measured on an H200, flash attention), the search mixes data, tensor and
# replicated layers and is 2.04x faster than data parallelism (1.56x than Megatron's dp4 x tp4; `pase solve
# transformer --devices 16 --cluster dgx-h100`); at peak rates it mixes data, hybrid and tensor parallelism,
# 1.60x faster (1.56x than Megatron's dp8 x tp2), in a fraction of a second either way.
DEFAULT_SAMPLE = "transformer"
DEFAULT_PRESET = "dgx-h100"
DEFAULT_DEVICES = 16
CUSTOM = "custom"
# Session keys: the preset whose figures the cluster fields hold (its calibration is the calibrated model's,
# also once a field is edited and the preset reads "custom"), and the step-time radio's memory
# (ui.stepmodel.model_choice: the user's explicit choice, the preset it was resolved for).
BASE = "_in_base_preset"
MODEL_MEMORY = "_in_step_model"
# Session key: the problem the session's address asked for (ui.links.Link), read on its first run.
LINK = "_in_link"


def sample_parameters(name: str) -> dict[str, int]:
    """The integer keyword parameters of sample ``name``'s builder with their defaults (batch first)."""
    from pase.models import SAMPLES

    builder = SAMPLES[name]
    params = {}
    for p in inspect.signature(builder).parameters.values():
        if isinstance(p.default, int) and not isinstance(p.default, bool):
            params[p.name] = p.default
    return dict(sorted(params.items(), key=lambda kv: kv[0] != "batch"))


def _preset_figures(c: Cluster) -> dict[str, float]:
    """The sidebar's cluster inputs (their session-state keys) holding preset ``c``'s figures."""
    return {"in_tflops": c.peak_flops / 1e12, "in_bandwidth": c.bandwidth_Bps / 1e9, "in_bpe": c.bytes_per_element,
            "in_node": c.devices_per_node or 0, "in_network": c.network_bandwidth_Bps / 1e9,
            "in_memory": (c.memory_bytes or 0) / 1e9}


def _apply_preset() -> None:
    name = st.session_state["in_preset"]
    if name in PRESETS:
        st.session_state.update(_preset_figures(PRESETS[name]))
        st.session_state[BASE] = name


def _to_custom() -> None:
    st.session_state["in_preset"] = CUSTOM


def _defaults() -> None:
    ss = st.session_state
    if "in_preset" not in ss:  # a session's first run: start on what its address asks for (ui.links)
        ss[LINK] = parse_link(st.query_params.to_dict())
        ss["in_preset"] = ss[LINK].preset or DEFAULT_PRESET
        _apply_preset()
    # A run that ends without drawing the cluster's inputs makes Streamlit drop their values: fill what is
    # missing from the preset they came from (each input's value is also its default, ui.held), never from 0.
    base = ss["in_preset"] if ss["in_preset"] in PRESETS else ss.get(BASE, DEFAULT_PRESET)
    for key, value in _preset_figures(PRESETS[base]).items():
        ss.setdefault(key, value)
    ss.setdefault("in_devices", ss.get(LINK, Link()).devices or DEFAULT_DEVICES)


def _graph_source(sb) -> tuple[GraphSource | None, bytes | None, str | None]:
    from pase.models import SAMPLES

    kind = sb.radio("Graph", ["Sample", "Upload"], horizontal=True, key="in_graph_kind",
                    help="A sample network built by pase, or your own model: pase's JSON format "
                         "(see docs/graph-format.md), a Hugging Face config.json or an ONNX model.")
    if kind == "Sample":
        names = list(SAMPLES)
        first = st.session_state.get(LINK, Link()).model or DEFAULT_SAMPLE
        name = sb.selectbox("Sample graph", names, index=names.index(first) if first in names else 0,
                            key="in_sample")
        params = sample_parameters(name)
        values = {}
        if "batch" in params:
            values["batch"] = int(sb.number_input("Batch size", min_value=1, max_value=MAX_BATCH, value=params["batch"],
                                                  step=1, key=f"in_{name}_batch"))
        others = [k for k in params if k != "batch"]
        if others:
            with sb.expander("Model sizes"):
                for k in others:
                    # A count that defaults to 0 (DeepSeek-V3's prediction modules, mtp) may stay 0.
                    values[k] = int(st.number_input(k, min_value=min(1, params[k]), max_value=1 << 24,
                                                    value=params[k], step=1, key=f"in_{name}_{k}"))
        # Only parameters that differ from the defaults make the cache key, in a fixed order.
        chosen = tuple((k, v) for k, v in values.items())
        return GraphSource("sample", name, chosen), None, None
    upload = sb.file_uploader("Model file (.json or .onnx)", type=["json", "onnx"], key="in_upload",
                              help="pase's graph format (docs/graph-format.md), a Hugging Face model's config.json "
                                   "(the architecture from its sizes, no weights; as `pase solve config.json`) or "
                                   "an ONNX model.")
    if upload is None:
        return None, None, ("Upload a model file (pase's JSON format, a Hugging Face config.json or an ONNX model), "
                            "or pick a sample graph.")
    data = upload.getvalue()
    if is_hf_config_data(data):
        # A language model (a mixture of experts too, its experts split by expert parallelism): planned in 3-D on
        # every page, at a global batch chosen here (the CLI's default).
        batch = int(sb.number_input("Global batch (samples)", min_value=1, max_value=MAX_BATCH, value=DEFAULT_BATCH,
                                    step=1, key="in_config_batch",
                                    help=f"Sequences per step; {DEFAULT_BATCH} unless you change it, as `pase solve "
                                         "config.json`."))
        return GraphSource.for_config(upload.name, data, batch), data, None
    return GraphSource.for_upload(upload.name, data), data, None


def _cluster(sb) -> Cluster:
    presets = [*PRESETS, CUSTOM]
    sb.selectbox("Cluster preset", presets, index=presets.index(held("in_preset")), key="in_preset",
                 on_change=_apply_preset,
                 help="Fills in device speed, links, nodes and memory; edit them below.")
    devices = int(sb.number_input("Devices p", min_value=1, max_value=MAX_DEVICES, value=held("in_devices"), step=1,
                                  key="in_devices"))
    c1, c2 = sb.columns(2)
    # The bounds are the Cluster's (pase.limits), as in the CLI's --tflops, --bandwidth and --memory-gb.
    tflops = c1.number_input("TFLOP/s per device", min_value=MIN_PEAK_FLOPS / 1e12, max_value=MAX_PEAK_FLOPS / 1e12,
                             value=held("in_tflops"), step=1.0, format="%g", key="in_tflops", on_change=_to_custom)
    bandwidth = c2.number_input("Link GB/s", min_value=MIN_BANDWIDTH_BPS / 1e9, max_value=MAX_BANDWIDTH_BPS / 1e9,
                                value=held("in_bandwidth"), step=1.0, format="%g",
                                key="in_bandwidth", on_change=_to_custom,
                                help="Bytes per second one device sends to another (inside its node).")
    sizes = [4, 2, 1, 8]
    bpe = sb.selectbox("Bytes per element", sizes, index=sizes.index(held("in_bpe")), key="in_bpe",
                       format_func=lambda b: {4: "4 (fp32)", 2: "2 (fp16/bf16)", 1: "1 (int8/fp8)", 8: "8 (fp64)"}[b],
                       on_change=_to_custom)
    with sb.expander("Nodes and memory"):
        node = int(st.number_input("Devices per node", min_value=0, max_value=4096, value=held("in_node"), step=1,
                                   key="in_node",
                                   on_change=_to_custom, help="0: all devices in one node (the paper's flat model)."))
        network = st.number_input("Network GB/s per device", min_value=MIN_BANDWIDTH_BPS / 1e9,
                                  max_value=MAX_BANDWIDTH_BPS / 1e9, value=held("in_network"), step=1.0,
                                  format="%g", key="in_network", on_change=_to_custom,
                                  help="Bytes per second one device sends to other nodes.")
        memory = st.number_input("Memory per device (GB)", min_value=0.0, max_value=MAX_MEMORY_BYTES / 1e9,
                                 value=held("in_memory"), step=1.0, format="%g", key="in_memory",
                                 on_change=_to_custom,
                                 help="0: unknown, no memory limit (as `pase --memory-gb 0`). Otherwise only "
                                      "strategies that fit are chosen.")
        reserve = st.number_input("Reserve per device (GB)", min_value=0.0, max_value=MAX_MEMORY_BYTES / 1e9,
                                  value=DEFAULT_RESERVE.total_bytes / 1e9, step=0.5, format="%.2f", key="in_reserve",
                                  help="Memory no strategy can use, counted in every plan's memory so that "
                                       "\"fits\" means fits with it (as `pase --reserve-gb`). The default, each "
                                       "part with its source (pase.model.memory.RESERVE_SOURCES): "
                                       + "; ".join(f"**{name}** {RESERVE_SOURCES[name]}"
                                                   for name in DEFAULT_RESERVE.parts())
                                       + ". Applies where the memory is known.")
    base = st.session_state.get(BASE)
    model = model_choice(sb, "in_model", base, st.session_state.setdefault(MODEL_MEMORY, {}))
    if model == CALIBRATED and st.session_state["in_preset"] != base:
        sb.caption(f"Edited figures on {base}'s calibration: its fractions of peak and link efficiencies apply to "
                   "the figures above; its vector rate, memory bandwidth and latencies stay as they are.")
    # The preset's FP8 peak, scaled with an edited BF16 peak (the same GPU, faster or slower).
    fp8 = PRESETS[base].fp8_peak_flops if base in PRESETS else None
    cluster = Cluster(
        fp8_peak_flops=None if fp8 is None else fp8 * float(tflops) * 1e12 / PRESETS[base].peak_flops,
        devices=devices, peak_flops=float(tflops) * 1e12, bandwidth_Bps=float(bandwidth) * 1e9,
        bytes_per_element=int(bpe), memory_bytes=float(memory) * 1e9 if memory > 0 else None,
        name=st.session_state["in_preset"],
        devices_per_node=node if node > 0 else None,
        inter_bandwidth_Bps=float(network) * 1e9 if node > 0 else None,
        reserved_bytes=float(reserve) * 1e9, mxfp8=PRESETS[base].mxfp8 if base in PRESETS else False,
    )
    cluster = with_model(cluster, model, base)
    upload = sb.file_uploader("Calibration file (pase calibrate)", type=["json"], key="in_calibration",
                              help="A calibration file written by `pase calibrate` on your GPU: the device's peaks, "
                                   "memory and kernel figures from the file, the topology from the figures above "
                                   "(as `pase --calibration FILE`). It implies the calibrated model.")
    if upload is not None:
        cluster, message = with_calibration_file(cluster, upload.name, upload.getvalue(), base)
        (sb.error if message.startswith("Calibration file refused") else sb.caption)(message)
    return cluster


def _options(sb, cluster: Cluster) -> ConfigOptions:
    k1, k2 = sb.columns(2)
    attention = k1.selectbox("Attention", list(ATTENTION_KINDS), key="in_attention",
                             help="flash: each attention core one fused kernel (FlashAttention, cuDNN): no s x s "
                                  "tensor kept, a causal mask halving the work; unfused: separate products and "
                                  "softmax (2021-22 Megatron-LM, eager PyTorch); auto: flash under the calibrated "
                                  "model, unfused at peak rates.")
    fp8_ok = cluster.fp8_peak_flops is not None and cluster.efficiency is not None
    precision = k2.selectbox("Precision", list(PRECISIONS), key="in_precision", disabled=not fp8_ok,
                             help="fp8: products with weights at the GPU's FP8 rate (Transformer Engine), delayed "
                                  "scaling; fp8-cs: current per-tensor scaling (NVIDIA's Megatron-Bridge recipes), "
                                  "an amax pass before each cast; mxfp8: MXFP8 block scaling (Blackwell: B200). MFU stays "
                                  "against the BF16 peak." + ("" if fp8_ok else " Needs an H100, H200 or "
                                                                         "B200 preset and the calibrated model."))
    with sb.expander("Search options"):
        pow2 = st.checkbox("Powers of two only", key="in_pow2", help="Split factors 1, 2, 4, 8... only.")
        min_shard = int(st.number_input("Minimum shard", min_value=1, max_value=1024, value=ConfigOptions().min_shard,
                                        step=1, key="in_min_shard",
                                        help="Smallest block a split may leave along a dimension."))
        spatial = st.checkbox("Split image rows/columns", key="in_spatial",
                              help="Let convolutions and pooling split h and w (paying halo exchange).")
    return ConfigOptions(powers_of_two=pow2, min_shard=min_shard, spatial_split=spatial, attention=attention,
                         precision=precision if fp8_ok else "bf16")


def problem_sidebar() -> Problem | None:
    """Draw the sidebar; store and return the chosen problem (None, with a reason, if there is none)."""
    _defaults()
    sb = st.sidebar
    sb.markdown("### Problem")
    link = st.session_state.get(LINK, Link())
    if link.errors and parse_link(st.query_params.to_dict()) == link:  # told while the address still asks it
        for line in link.errors:
            sb.error(line, icon=":material/link_off:")
    try:
        source, data, why = _graph_source(sb)
        sb.markdown("### Cluster")
        cluster = _cluster(sb)
        options = _options(sb, cluster)
    except PaseError as exc:
        set_current_problem(None, str(exc))
        return None
    if source is None:
        set_current_problem(None, why)
        return None
    try:
        graph = load_graph(source, data)
    except PaseError as exc:
        what = f"sample {source.name}" if source.kind == "sample" else "the uploaded file"
        set_current_problem(None, f"Cannot use {what}: {exc}")
        return None
    sb.caption(f"**{md(graph.name)}**: {len(graph)} layers, {len(graph.edges)} edges, "
               f"{graph.parameter_count / 1e6:,.1f}M parameters")
    problem = Problem(source, cluster, options)
    set_current_problem(problem)
    return problem
