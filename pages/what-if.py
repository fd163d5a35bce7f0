"""What-if: sweep devices (GPU types side by side, a fixed global or per-device batch, and bandwidth, FLOP/s or
batch), re-solve per point, and plot the result in today's units."""

import threading
import time
from dataclasses import replace

import streamlit as st

from pase.analysis import time_to_train as ttt
from pase.analysis.sweep import records_csv, with_training_estimates
from pase.analysis.throughput import sequence_length
from pase.errors import PaseError
from pase.hardware.cluster import PRESETS
from pase.limits import MAX_BANDWIDTH_BPS, MAX_BATCH, MAX_DEVICES, MAX_PEAK_FLOPS, MIN_BANDWIDTH_BPS, MIN_PEAK_FLOPS
from pase.ops import training_flops
from pase.planner import parallelism_kind
from ui import jobs, state
from ui.figures import split_changes_figure, sweep_figure, sweep_panels_figure
from ui.graphview import auto_group_depth, group_key
from ui.fmt import md
from ui.names import strategy_name
from ui.pagekit import require_problem, routed
from ui.stepmodel import CALIBRATED, PEAK, show_model, with_model
from ui.time_to_train_figures import time_to_train_figure

routed()  # first of all: run under app.py's router (see ui.pagekit.routed)

# Offered counts; any other count from 1 to MAX_DEVICES can be typed in (accept_new_options).
DEVICE_CHOICES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512]
SHOW = ["step time", "throughput", "MFU"]
VARY = {
    "nothing else": None,
    "link bandwidth (GB/s)": "bandwidth_Bps",
    "peak TFLOP/s": "peak_flops",
    "batch size": "batch",
}
BATCH_MODES = {
    "fixed global batch": "global",
    "fixed per-device batch": "per device",
}
# What each varied quantity's values may be: (unit scale, lowest, highest in the hardware's units, unit), the
# bounds of pase.hardware.cluster.Cluster and of `pase sweep --bandwidths/--tflops-list/--batches`.
BOUNDS = {
    "bandwidth_Bps": (1e9, MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS, "GB/s"),
    "peak_flops": (1e12, MIN_PEAK_FLOPS, MAX_PEAK_FLOPS, "TFLOP/s"),
    "batch": (1, 1, MAX_BATCH, ""),
}
# Heatmap rows: above this many layers, show modules (their first layer stands for them) or only changes.
MAX_ROWS = 80

st.title("What if?")
st.caption("Re-solve at every device count (on several GPU types, with a fixed global or per-device batch, and "
           "optionally several bandwidths, FLOP rates or batch sizes) and see how the estimated step time, "
           "throughput, MFU, memory, the time and cost to train and each layer's split change. "
           "Like the paper's Fig. 6, but modelled.")

problem = require_problem()
graph = state.load_graph(problem.source)
cluster = problem.cluster
st.markdown(f"**{md(graph.name)}** ({md(problem.source)}); hardware: {cluster.peak_flops / 1e12:g} TFLOP/s, "
            f"{cluster.bandwidth_Bps / 1e9:g} GB/s links")
# The sidebar's step-time model (ui.stepmodel) prices every GPU type: calibrated, each with its own calibration.
step_model = PEAK if cluster.efficiency is None else CALIBRATED
# A language model is planned at every point as `pase sweep` (and `pase solve`) plans it: by the 3-D search.
three_d = state.is_language_model(problem.source)
SEARCH = ("the **3-D search** at every point (tensor, pipeline, data parallelism, microbatches, schedule, "
          "recomputation, ZeRO; pase.search.stages.search_training) against the 3-D baselines (data parallel, "
          "ZeRO-3 / FSDP, Megatron), as `pase sweep` runs it for a language model" if three_d else
          "the **per-layer search** (the paper's) at every point against data parallelism and the expert "
          "strategies that apply")
st.caption(f"Search: {SEARCH}. A plan that does not fit memory (with the reserve, sidebar: Nodes and memory) is "
           "marked, never charted as a time, rate or cost.")

c1, c2, c3 = st.columns([3, 2, 2])
picked = c1.multiselect("Devices", DEVICE_CHOICES, default=[1, 2, 4, 8, 16, 32], key="wi_devices",
                        accept_new_options=True,
                        help=f"Pick counts or type any whole number from 1 to {MAX_DEVICES} (e.g. 24) and press Enter.")
devices = []
for v in picked:
    try:
        n = int(str(v).strip())
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_DEVICES:
        st.error(f"'{v}' is not a device count: type a whole number from 1 to {MAX_DEVICES}.")
        st.stop()
    devices.append(n)
devices = sorted(set(devices))

g1, g2, g3 = st.columns([3, 2, 2])
# The sidebar's cluster (its figures as edited there) and every preset as published (pase.hardware.cluster).
gpu_names = [cluster.name, *(n for n in PRESETS if n != cluster.name)]
gpu_picked = g1.multiselect("GPU types", gpu_names, default=[cluster.name], key="wi_gpus",
                            help="Sweep the same model on several cluster presets, drawn side by side on the same "
                                 f"device axis. {cluster.name}: the sidebar's figures; the others: the presets' "
                                 "published peak figures (pase.hardware.cluster.PRESETS). All priced by the "
                                 "sidebar's step-time model: calibrated, each preset with its own calibration "
                                 "(peak rates where it has none).")
# Every GPU type keeps the sidebar's memory reserve (Nodes and memory): "fits" means the same on each.
clusters = [cluster if n == cluster.name else replace(with_model(PRESETS[n], step_model, n),
                                                      reserved_bytes=cluster.reserved_bytes) for n in gpu_picked]
batch_mode = BATCH_MODES[g2.radio(
    "Batch", list(BATCH_MODES), key="wi_batch_mode",
    help="Fixed global batch (strong scaling): the same batch at every device count, split over more devices. "
         "Fixed per-device batch (weak scaling): each device keeps B samples, so at p devices the global batch "
         "is B x p.")]
global_batch = dict(problem.source.params).get("batch")
if batch_mode == "per device" and (problem.source.kind == "upload" or global_batch is None):
    g2.warning("A per-device batch needs a sample graph or a Hugging Face config with a batch size; the global "
               "batch stays fixed.")
    batch_mode = "global"

vary_label = c2.selectbox("Also vary", list(VARY), key="wi_vary")
vary = VARY[vary_label]
values: list[float] = []
if vary is not None:
    if vary == "batch" and problem.source.kind == "upload":
        c3.warning("Batch size can only vary for sample graphs and Hugging Face configs.")
        vary = None
    elif vary != "batch" and len(clusters) > 1:
        c3.warning(f"{vary_label} would override every GPU type's own figure; compare GPU types or vary it, "
                   "not both.")
        vary = None
    elif vary != "batch" and batch_mode == "per device":
        # Each point of a per-device batch is its own graph, solved as a batch sweep of one batch size.
        c3.warning(f"With a fixed per-device batch only the batch can vary, not the {vary_label}.")
        vary = None
    else:
        default = {
            "bandwidth_Bps": f"{cluster.bandwidth_Bps / 1e9 / 4:g}, {cluster.bandwidth_Bps / 1e9:g}, "
                             f"{cluster.bandwidth_Bps / 1e9 * 4:g}",
            "peak_flops": f"{cluster.peak_flops / 1e12:g}, {cluster.peak_flops / 1e12 * 4:g}",
            "batch": "32, 64, 128" if batch_mode == "global" else "2, 4, 8",
        }[vary]
        what = "per-device batch sizes" if vary == "batch" and batch_mode == "per device" else vary_label
        text = c3.text_input(what, value=default, key=f"wi_values_{vary}",
                             help="Comma-separated values." + (" Each is one device's batch: the global batch at "
                                                               "p devices is that times p."
                                                               if what != vary_label else ""))
        scale, low, high, unit = BOUNDS[vary]
        try:
            values = sorted({float(v) for v in text.replace(";", ",").split(",") if v.strip()})
        except ValueError:
            values = []
        # In range first (False for NaN and infinity), so that int() below only sees finite values.
        if not values or not all(low <= v * scale <= high and (vary != "batch" or v == int(v)) for v in values):
            kind = "whole numbers" if vary == "batch" else "numbers"
            st.error(f"'{text}' is not a comma-separated list of {kind} from {low / scale:g} to {high / scale:g}"
                     f"{' ' + unit if unit else ''}; type e.g. {default}")
            st.stop()
# The per-device batches: the varied ones, or one typed here.
per_device = [int(v) for v in values] if batch_mode == "per device" and vary == "batch" else []
if batch_mode == "per device" and not per_device:
    per_device = [int(g3.number_input(
        "Per-device batch B", min_value=1, max_value=MAX_BATCH, step=1, key="wi_per_device_batch",
        value=max(1, global_batch // cluster.devices),
        help=f"Samples each device processes per step; the default is the sidebar's batch ({global_batch}) over "
             f"its {cluster.devices} devices."))]

if not devices:
    st.info("Choose at least one device count.")
    st.stop()
if not clusters:
    st.info("Choose at least one GPU type.")
    st.stop()
if per_device and max(per_device) * devices[-1] > MAX_BATCH:
    st.error(f"A per-device batch of {max(per_device)} on {devices[-1]} devices is a global batch of "
             f"{max(per_device) * devices[-1]:,}, above the {MAX_BATCH:,} a sample may have; choose a smaller batch "
             "or fewer devices.")
    st.stop()
if all(training_flops(layer) == 0 for layer in graph):
    # Every step would take 0 s: speedups over data parallelism are undefined (as `pase sweep` says).
    st.error("This graph does no work: its layers only move data, so every step time is 0 s and speedups over "
             "data parallelism are undefined; sweep a model with computing layers.")
    st.stop()
st.caption("Hardware: " + "; ".join(
    f"**{md(c.name)}** {c.peak_flops / 1e12:g} TFLOP/s peak, {c.bandwidth_Bps / 1e9:g} GB/s links"
    + (f", {c.memory_bytes / 1e9:.3g} GB per device" if c.memory_bytes else ", no memory limit")
    + (" (the sidebar's figures" if c is cluster else " (published peak figures, pase.hardware.cluster.PRESETS")
    + (", calibrated)" if c.efficiency is not None else ", at peak rates)")
    for c in clusters))
show_model(clusters)
uncalibrated = [c.name for c in clusters if c.efficiency is None]
if step_model == CALIBRATED and uncalibrated:
    st.warning(f"{', '.join(md(n) for n in uncalibrated)}: no calibration, so priced at peak rates, faster than "
               "the calibrated GPU types would be on the same figures: compare them with care, or choose "
               "**peak rates** in the sidebar to price every GPU type alike.", icon=":material/warning:")
if vary in ("bandwidth_Bps", "peak_flops") and cluster.efficiency is not None:
    st.caption(f"Every {vary_label} value keeps the sidebar's calibration: its fractions apply to the varied "
               "figure; its vector rate, memory bandwidth and latencies stay as they are.")
# What the step times below are, for the captions under the charts and the table.
MODELLED = ("Step times at peak rates (the paper's model), so real runs are slower." if step_model == PEAK else
            "Step times by the calibrated model (above, with its sources)"
            + (f", at peak rates on {', '.join(md(n) for n in uncalibrated)}." if uncalibrated else "."))


def _fits(r: dict) -> str:
    """A record's fit: "yes, N GB to spare", "no (N GB of C GB)" or "no limit"."""
    need, cap = r["memory_per_device_bytes"], r["memory_capacity_bytes"]
    if r["fits_memory"] is None:
        return "no limit"
    if r["fits_memory"]:
        return f"yes, {(cap - need) / 1e9:.3g} GB to spare"
    return "no" if need is None else f"no ({need / 1e9:.3g} of {cap / 1e9:.3g} GB)"


def _duration(seconds: float) -> str:
    """A training time in the largest fitting unit (s, min, h, days)."""
    for scale, unit in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.3g} s"


# The sweep in parts, each one call of ui.state.sweep (which runs its points in parallel workers and keeps them
# for a resumed run): (problem, devices, cluster, vary, values, fields each record gets). A fixed global batch is
# one part per GPU type; a per-device batch B is one part per GPU type, B and device count, since the graph
# differs at every count (global batch B x p).
parts = []
for c in clusters:
    on_c = replace(problem, cluster=c)
    if batch_mode == "global":
        parts.append((on_c, devices, c, vary, values, {}))
    else:
        parts += [(on_c, [p], c, "batch", [b * p], {"batch_mode": "per device", "per_device_batch": b})
                  for b in per_device for p in devices]


class _Stopped(Exception):
    """Raised in a part's thread once the sweep stops (Cancel, or another part failed): its workers are killed."""


def run_parts(show_progress, heartbeat) -> list[dict]:
    """Every part's records, in order; ``show_progress(done, total, eta_s)`` and ``heartbeat()`` as in
    :func:`ui.state.sweep`.

    One part runs in this (the script's) thread. Several run at once, up to :data:`ui.jobs.MAX_JOBS`, each
    in a thread carrying this script's context (the result stores are Streamlit resources); this thread
    alone touches the page: it sums their points into one count, whose ETA is the points left at the rate
    of this run so far. When this thread is stopped (Cancel) or a part fails, every part is stopped and
    the exception re-raised; the points done are kept.

    Raises
    ------
    PaseError
        A point's search or costing failed (the first such error).
    """
    from concurrent.futures import ThreadPoolExecutor

    from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

    if len(parts) == 1:
        on_c, devs, c, v, vals, extra = parts[0]
        return [{**r, **extra} for r in state.sweep(on_c, graph, devs, c, v, vals, progress=show_progress,
                                                     heartbeat=heartbeat)]
    # Parts of one GPU type share its store of points done: an empty sweep creates it here, once, rather
    # than in two threads at once (where one thread's points would be lost from it).
    for on_c, _, c, v, _, _ in parts:
        state.sweep(on_c, graph, [], c, v, [])
    stop = threading.Event()
    sizes = [len(devs) * max(1, len(vals)) for _, devs, _, _, vals, _ in parts]
    done, first = [0] * len(parts), [None] * len(parts)

    def check() -> None:
        if stop.is_set():
            raise _Stopped("the sweep was stopped")

    def run_part(i: int) -> list[dict]:
        def seen(n: int, _total: int, _eta) -> None:
            done[i] = n
            if first[i] is None:
                first[i] = n  # the points this part had done before this run
        on_c, devs, c, v, vals, extra = parts[i]
        return [{**r, **extra} for r in state.sweep(on_c, graph, devs, c, v, vals, progress=seen, heartbeat=check)]

    ctx = get_script_run_ctx()
    workers = min(jobs.MAX_JOBS, len(parts))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pase-what-if",
                              initializer=lambda: add_script_run_ctx(threading.current_thread(), ctx))
    futures = [pool.submit(run_part, i) for i in range(len(parts))]
    start = time.monotonic()

    def tick(_finished: set) -> None:
        # The parts started first say at once how many of their points were done before; until they
        # have, a count would show a resumed sweep starting from nothing.
        if all(first[i] is not None or futures[i].done() for i in range(workers)):
            total, now = sum(sizes), sum(done)
            new = now - sum(f for f in first if f is not None)
            eta = (total - now) * (time.monotonic() - start) / new if new > 0 else None
            show_progress(now, total, eta)

    return [r for part in jobs.gather(pool, futures, stop, tick=tick, heartbeat=heartbeat) for r in part]


key = ("sweep", problem, tuple(devices), vary, tuple(values), tuple(clusters), batch_mode, tuple(per_device))
store = state.stores()["sweeps"]
records = store.get(key)
cancelled = st.session_state.get("wi_cancel")
if st.button("Run sweep", type="primary", key="wi_run", icon=":material/play_arrow:") and records is None:
    bar = st.progress(0.0, text="Sweeping...")
    # Clicking Cancel reruns the page, which stops this script at its next heartbeat and kills the workers;
    # the points already solved are kept, so the next Run sweep resumes from them.
    cancel = st.empty()
    cancel.button("Cancel", key="wi_cancel", icon=":material/stop:", help="Stop the sweep (points done are kept).")
    beat = st.empty()

    def show_progress(done: int, total: int, eta_s: float | None) -> None:
        left = "" if eta_s is None or done >= total else f" (about {_duration(eta_s)} left)"
        bar.progress(done / total if total else 1.0, text=f"Points solved: {done} of {total}{left}")

    try:
        records = run_parts(show_progress, beat.empty)
        store.put(key, records)
    except PaseError as exc:
        records = None
        st.error(f"{type(exc).__name__}: {md(exc)}")
    finally:
        bar.empty()
        cancel.empty()
elif cancelled and records is None:
    st.info("Sweep cancelled: the points already solved are kept, and **Run sweep** resumes from them.",
            icon=":material/stop_circle:")

if records is None:
    st.info(f"Press **Run sweep**: each point runs {SEARCH}.", icon=":material/info:")
    st.stop()

# The paper's "parameter parallel" baseline under the app's word for its split as well ("tensor", ui.names).
records = [{**r, "strategy": strategy_name(r["strategy"])} for r in records]
several_gpus = len({r["cluster"] for r in records}) > 1
if vary is not None:
    unit = {"bandwidth_Bps": (1e9, "GB/s"), "peak_flops": (1e12, "TFLOP/s"), "batch": (1, "batch")}[vary]


def series_name(r: dict) -> str:
    """The line a record belongs to: its strategy, GPU type (when several) and varied value."""
    name = r["strategy"] + (f" on {r['cluster']}" if several_gpus else "")
    if vary is None:
        return name
    if vary == "batch" and batch_mode == "per device":
        return f"{name} @ {r['per_device_batch']} per device"
    return f"{name} @ {r[vary] / unit[0]:g} {unit[1]}"


strategies = list(dict.fromkeys(r["strategy"] for r in records))
shown = st.multiselect("Strategies", strategies, default=[s for s in strategies if s in ("PaSE", "data parallel")]
                       or strategies[:2], key="wi_strategies")
# Copies: the stored records stay as the sweep returned them (and as the CSV gives them).
rows = [{**r, "series": series_name(r)} for r in records if r["strategy"] in shown]
show = st.selectbox("Show", SHOW, key="wi_show",
                    help="Left chart: step time, throughput (tokens/s for models with a sequence, else samples/s) or "
                         "MFU: model FLOPs / (devices x peak FLOP/s x step time), against the hardware's peak figure.")
st.plotly_chart(sweep_figure(rows, series="series", show=show), key="wi_sweep")
if batch_mode == "per device":
    st.caption("Fixed per-device batch (weak scaling): at p devices the global batch is B x p, so the step time of "
               "perfect scaling stays flat and the throughput grows with p.")
idle = {}
for r in rows:
    if r["idle_devices"] > 0:
        idle.setdefault(r["strategy"] + (f" on {r['cluster']}" if several_gpus else ""), set()).add(
            (r["devices"], r["devices_used"]))
if idle:
    st.warning("Idle devices (no layer splits over them; they only replicate work, since a dimension such as the "
               "batch is too small to split further): "
               + "; ".join(f"{md(name)} at " + ", ".join(f"p = {p} uses {u}" for p, u in sorted(pairs))
                           for name, pairs in idle.items()) + ".",
               icon=":material/warning:")


st.subheader("Side by side: throughput, MFU, memory, time and cost to train")
# Records without a step (nothing fits there) have no rate of either kind.
tokens = sequence_length(graph) is not None and all(r.get("tokens_per_s") is not None for r in records
                                                    if r["step_time_s"] is not None)
unit_name = "tokens" if tokens else "samples"
t1, t2 = st.columns(2)
amount_text = t1.text_input(f"Train on N {unit_name}", value="1e9" if tokens else "1e6", key=f"wi_train_{unit_name}",
                            help=f"How many {unit_name} to train on, e.g. 300e9.")
price_text = t2.text_input("Price per GPU-hour (optional)", value="", key="wi_price",
                           help="In any currency; leave empty for no cost column.")
estimated = None
try:
    amount = float(amount_text.replace(",", "").replace("_", ""))
    price = float(price_text.replace(",", "")) if price_text.strip() else None
    estimated = with_training_estimates(records, amount, unit=unit_name, price_per_gpu_hour=price)
except ValueError as exc:
    st.error(f"Cannot estimate: {md(exc) if isinstance(exc, PaseError) else 'N and the price must be numbers'} "
             f"(N a positive number of {unit_name}, the price a number >= 0).")
st.plotly_chart(sweep_panels_figure([{**r, "series": series_name(r)} for r in (estimated or records)
                                     if r["strategy"] in shown], series="series"), key="wi_panels")
st.caption("One colour per line in every panel; marker shape: GPU type; open marker: some devices idle; x: does "
           f"not fit in memory (dotted: each GPU type's capacity). {MODELLED}")
if estimated:
    first_value = None if vary is None else records[0][vary]
    table = []
    for r in estimated:
        if r["strategy"] != "PaSE" or (vary is not None and r[vary] != first_value):
            continue
        table.append({
            **({"GPU type": r["cluster"]} if several_gpus else {}),
            "devices": r["devices"],
            "global batch": r["global_batch"],
            f"{unit_name}/s": None if r[f"{unit_name}_per_s"] is None or r["fits_memory"] is False
            else float(f"{r[f'{unit_name}_per_s']:.4g}"),
            "plan": r["label"],
            "time to train": ("does not fit" if r["fits_memory"] is False else "undefined (0 s step)"
                              if r["time_to_train_s"] is None else _duration(r["time_to_train_s"])),
            # A plan that does not fit cannot run: no rate, hours or cost for it.
            "GPU-hours": None if r["gpu_hours"] is None or r["fits_memory"] is False else float(f"{r['gpu_hours']:.4g}"),
            **({} if price is None else {"cost": None if r["train_cost"] is None or r["fits_memory"] is False
                                         else round(r["train_cost"], 2)}),
            "MFU (% of peak)": None if r.get("mfu") is None or r["fits_memory"] is False else round(r["mfu"] * 100, 1),
            "fits memory": _fits(r),
            "idle devices": r["idle_devices"],
        })
    # Rates of millions read with thousands separators (1,014,000), not as a run of digits.
    # A plan that does not fit has no rate, hours, cost or MFU: an em dash in the cell, the column numeric.
    st.dataframe(table, hide_index=True, key="wi_train_table", placeholder="—",
                 column_config={f"{unit_name}/s": st.column_config.NumberColumn(format="localized")})
    st.caption(f"PaSE's strategy at each device count{'' if vary is None else f', at {vary_label} = {first_value / unit[0]:g}'}: "
               f"time = N / {unit_name} per second, GPU-hours = time x devices / 3600 (idle devices are paid for "
               f"too), cost = GPU-hours x price. {MODELLED}")
if estimated:
    st.subheader("With failures and checkpoints")
    failures_set = None
    with st.expander("Failure, checkpoint and power assumptions (editable)", expanded=True,
                     icon=":material/tune:"):
        f1, f2, f3, f4 = st.columns(4)
        rate_text = f1.text_input(
            "Interruptions per million GPU-hours", value=f"{ttt.LLAMA3_INTERRUPTIONS_PER_GPU_HOUR * 1e6:.3g}",
            key="wi_fail_rate",
            help="Failures per million hours of one device running. Default: Llama 3's 419 unexpected "
                 "interruptions in a 54-day snapshot on 16,384 H100s (Meta 2024, section 3.3.4).")
        restart_text = f2.text_input(
            "Restart (minutes)", value=f"{ttt.DEFAULT_RESTART_S / 60:g}", key="wi_restart",
            help="From a failure to training again, reading the checkpoint aside. Default: an assumption "
                 "consistent with Llama 3's >90% effective training time.")
        storage_text = f3.text_input(
            "Storage (GB/s, whole job)", value=f"{ttt.DEFAULT_STORAGE_BPS / 1e9:g}", key="wi_storage",
            help="The file system's aggregate write and read rate. Default: Llama 3's Tectonic, 2 TB/s sustained "
                 "(section 3.3.1); each device also writes at most 12.5 GB/s (a DGX H100's storage ports over "
                 "its 8 GPUs).")
        asynchronous = f4.toggle("Asynchronous checkpoints", key="wi_async",
                                 help="Training stops only to copy each device's share to host memory; the write "
                                      "runs in the background (a failure during it loses one more interval).")
        try:
            failures_set = ttt.FailureModel(
                interruptions_per_gpu_hour=float(rate_text) / 1e6, restart_s=float(restart_text) * 60,
                storage_Bps=float(storage_text) * 1e9, async_checkpoint=asynchronous)
        except ValueError as exc:
            st.error(f"Cannot model failures: {md(exc) if isinstance(exc, PaseError) else 'type numbers'} (the "
                     "interruption rate and storage bandwidth numbers > 0, the restart minutes >= 0).")
        st.caption("Checkpoints hold the weights and optimizer state (14 bytes a parameter in mixed-precision "
                   "Adam), written once and shared by every device; the interval is the one that maximises "
                   "goodput. Energy: each GPU at its published board power plus the DGX node overhead. "
                   "Failures are taken as independent and memoryless (see pase.analysis.time_to_train for where "
                   "that and Young-Daly's interval break).")
    if failures_set is not None:
        fit = [r for r in estimated if r["strategy"] in shown and r["fits_memory"] is not False]
        try:
            timed = ttt.with_time_to_train(fit, graph.parameter_count, clusters, **{unit_name: amount},
                                           failures=failures_set, price_per_gpu_hour=price)
        except PaseError as exc:
            timed = None
            st.error(f"Cannot estimate the time to train: {md(exc)}")
        if timed:
            st.plotly_chart(time_to_train_figure([{**r, "series": series_name(r)} for r in timed]),
                            key="wi_time_to_train")
            st.caption("Only plans that fit in memory. Goodput falls as jobs grow (more devices, more failures a "
                       "day); where the days stop falling, adding GPUs no longer shortens the run. "
                       + ("" if price is not None else "No price given: no cost (pase has no default price). ")
                       + MODELLED)
st.download_button("Sweep records (CSV)", records_csv(estimated or records), file_name=f"{graph.name}-sweep.csv",
                   mime="text/csv", key="wi_csv", icon=":material/download:",
                   help="Every point and strategy: GPU type, batch mode, global and per-device batch, step time, "
                        "throughput, MFU, speedup, memory and its fit, devices used and idle, the time, GPU-hours and "
                        "cost to train N, and PaSE's configurations.")

if three_d:
    st.caption("Each device count's 3-D configuration is in the table above (plan); the Explorer and the Training "
               "page draw one on the graph and as a pipeline schedule.")
    st.stop()
st.subheader("Where each layer's split changes")
pase_records = [r for r in records if r["strategy"] == "PaSE" and r["cluster"] == records[0]["cluster"]]
where = [f"on {records[0]['cluster']}"] if several_gpus else []
if vary is not None:
    first = pase_records[0][vary]
    if batch_mode == "per device":
        first = pase_records[0]["per_device_batch"]
        pase_records = [r for r in pase_records if r["per_device_batch"] == first]
        where.append(f"at a per-device batch of {first}")
    else:
        pase_records = [r for r in pase_records if r[vary] == first]
        where.append(f"at {vary_label} = {first / unit[0]:g}")
if where:
    st.caption(f"PaSE {', '.join(where)}.")
configs = {r["devices"]: r["configs"] for r in pase_records}
if vary == "batch":
    graph = state.load_graph(problem.source.with_params(batch=int(pase_records[0]["batch"])))
layers = [(layer.name, layer.dims) for layer in graph.layers]
# On one device everything is replicated; kinds are compared from two devices up.
kinds_change = [
    name for name, dims in layers
    if len({parallelism_kind(dims, tuple(c[name])) for p, c in configs.items() if p > 1}) > 1
]
only_changes = st.toggle("Only layers whose kind of parallelism changes", value=len(layers) > MAX_ROWS,
                         key="wi_only_changes")
rows_shown = [(n, d) for n, d in layers if n in set(kinds_change)] if only_changes else layers
if len(rows_shown) > MAX_ROWS:
    # One row per module: its first layer stands for it.
    depth = auto_group_depth([n for n, _ in rows_shown])
    seen, reduced = set(), []
    for n, d in rows_shown:
        g = group_key(n, depth)
        if g not in seen:
            seen.add(g)
            reduced.append((n, d))
    st.caption(f"{len(rows_shown)} layers: showing the first layer of each of {len(reduced)} modules.")
    rows_shown = reduced
if rows_shown:
    st.plotly_chart(split_changes_figure(rows_shown, configs, ops={layer.name: layer.op for layer in graph.layers}),
                    key="wi_splits")
    st.caption("Each cell: the layer's split at that device count (b8·n2 = batch 8 ways, n 2 ways); colour: kind "
               "of parallelism; bold: the kind changed from the column to its left.")
else:
    st.info("No layer changes its split across these device counts.")
