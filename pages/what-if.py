"""What-if: sweep devices (and bandwidth, FLOP/s or batch), re-solve per point, and plot the result."""

import streamlit as st

from pase.analysis.sweep import records_csv
from pase.analysis.throughput import estimate_from_rate, sequence_length
from pase.errors import PaseError
from pase.limits import MAX_BANDWIDTH_BPS, MAX_BATCH, MAX_DEVICES, MAX_PEAK_FLOPS, MIN_BANDWIDTH_BPS, MIN_PEAK_FLOPS
from pase.ops import training_flops
from pase.planner import parallelism_kind
from ui import state
from ui.figures import split_changes_figure, sweep_figure
from ui.graphview import auto_group_depth, group_key
from ui.fmt import md
from ui.pagekit import require_problem, routed

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
st.caption("Re-solve at every device count (and, optionally, several bandwidths, FLOP rates or batch sizes) "
           "and see how the estimated step time, the speedup over data parallelism and each layer's split change. "
           "Like the paper's Fig. 6, but modelled.")

problem = require_problem()
graph = state.load_graph(problem.source)
cluster = problem.cluster
st.markdown(f"**{md(graph.name)}** ({md(problem.source)}); hardware: {cluster.peak_flops / 1e12:g} TFLOP/s, "
            f"{cluster.bandwidth_Bps / 1e9:g} GB/s links")

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
vary_label = c2.selectbox("Also vary", list(VARY), key="wi_vary")
vary = VARY[vary_label]
values: list[float] = []
if vary is not None:
    if vary == "batch" and problem.source.kind != "sample":
        c3.warning("Batch size can only vary for sample graphs.")
        vary = None
    else:
        default = {
            "bandwidth_Bps": f"{cluster.bandwidth_Bps / 1e9 / 4:g}, {cluster.bandwidth_Bps / 1e9:g}, "
                             f"{cluster.bandwidth_Bps / 1e9 * 4:g}",
            "peak_flops": f"{cluster.peak_flops / 1e12:g}, {cluster.peak_flops / 1e12 * 4:g}",
            "batch": "32, 64, 128",
        }[vary]
        text = c3.text_input(vary_label, value=default, key=f"wi_values_{vary}",
                             help="Comma-separated values.")
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

if not devices:
    st.info("Choose at least one device count.")
    st.stop()
if all(training_flops(layer) == 0 for layer in graph):
    # Every step would take 0 s: speedups over data parallelism are undefined (as `pase sweep` says).
    st.error("This graph does no work: its layers only move data, so every step time is 0 s and speedups over "
             "data parallelism are undefined; sweep a model with computing layers.")
    st.stop()


def _duration(seconds: float) -> str:
    """A training time in the largest fitting unit (s, min, h, days)."""
    for scale, unit in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.3g} s"


key = ("sweep", problem, tuple(devices), vary, tuple(values))
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
        records = state.sweep(problem, graph, devices, cluster, vary, values, progress=show_progress,
                              heartbeat=beat.empty)
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
    st.info("Press **Run sweep**: each point runs the search and costs every applicable baseline.",
            icon=":material/info:")
    st.stop()

strategies = list(dict.fromkeys(r["strategy"] for r in records))
shown = st.multiselect("Strategies", strategies, default=[s for s in strategies if s in ("PaSE", "data parallel")]
                       or strategies[:2], key="wi_strategies")
rows = [r for r in records if r["strategy"] in shown]
show = st.selectbox("Show", SHOW, key="wi_show",
                    help="Left chart: step time, throughput (tokens/s for models with a sequence, else samples/s) or "
                         "MFU: model FLOPs / (devices x peak FLOP/s x step time), against the hardware's peak figure.")
if vary is not None:
    unit = {"bandwidth_Bps": (1e9, "GB/s"), "peak_flops": (1e12, "TFLOP/s"), "batch": (1, "batch")}[vary]
    for r in rows:
        r["series"] = f"{r['strategy']} @ {r[vary] / unit[0]:g} {unit[1]}"
    fig = sweep_figure(rows, series="series", show=show)
else:
    fig = sweep_figure(rows, show=show)
st.plotly_chart(fig, key="wi_sweep")
idle = sorted({(r["devices"], r["devices_used"]) for r in records
               if r["strategy"] == "PaSE" and r.get("devices_used", r["devices"]) < r["devices"]})
if idle:
    st.warning("Idle devices: " + ", ".join(f"at p = {p} PaSE's layers split over at most {u}" for p, u in idle)
               + "; the other devices only replicate work (a dimension, such as the batch, is too small to split "
               "further).", icon=":material/warning:")
st.download_button("Sweep records (CSV)", records_csv(records), file_name=f"{graph.name}-sweep.csv",
                   mime="text/csv", key="wi_csv", icon=":material/download:",
                   help="Every point and strategy: step time, throughput, MFU, speedup, memory, devices used and "
                        "PaSE's configurations.")


st.subheader("Time and cost to train")
tokens = sequence_length(graph) is not None and all(r.get("tokens_per_s") is not None for r in records)
unit_name = "tokens" if tokens else "samples"
t1, t2 = st.columns(2)
amount_text = t1.text_input(f"Train on N {unit_name}", value="1e9" if tokens else "1e6", key=f"wi_train_{unit_name}",
                            help=f"How many {unit_name} to train on, e.g. 300e9.")
price_text = t2.text_input("Price per GPU-hour (optional)", value="", key="wi_price",
                           help="In any currency; leave empty for no cost column.")
estimates = []
try:
    amount = float(amount_text.replace(",", "").replace("_", ""))
    price = float(price_text.replace(",", "")) if price_text.strip() else None
    first_value = None if vary is None else records[0][vary]
    for r in records:
        if r["strategy"] != "PaSE" or (vary is not None and r[vary] != first_value):
            continue
        e = estimate_from_rate(amount, r.get(f"{unit_name}_per_s"), r["devices"], price, unit=unit_name)
        estimates.append({
            "devices": r["devices"],
            "time to train": "undefined (0 s step)" if e.time_s is None else _duration(e.time_s),
            "GPU-hours": None if e.gpu_hours is None else float(f"{e.gpu_hours:.4g}"),
            **({} if price is None else {"cost": None if e.cost is None else round(e.cost, 2)}),
            "MFU (% of peak)": None if r.get("mfu") is None else round(r["mfu"] * 100, 1),
        })
except ValueError as exc:
    st.error(f"Cannot estimate: {md(exc) if isinstance(exc, PaseError) else 'N and the price must be numbers'} "
             f"(N a positive number of {unit_name}, the price a number >= 0).")
if estimates:
    st.dataframe(estimates, hide_index=True, key="wi_train_table")
    st.caption(f"PaSE's strategy at each device count{'' if vary is None else f', at {vary_label} = {first_value / unit[0]:g}'}: "
               f"time = N / {unit_name} per second, GPU-hours = time x devices / 3600, cost = GPU-hours x price. "
               "Modelled step times at the hardware's peak FLOP/s, so real runs are slower.")

st.subheader("Where each layer's split changes")
pase_records = [r for r in records if r["strategy"] == "PaSE"]
if vary is not None:
    first = pase_records[0][vary]
    pase_records = [r for r in pase_records if r[vary] == first]
    st.caption(f"At {vary_label} = {first / unit[0]:g}.")
configs = {r["devices"]: r["configs"] for r in pase_records}
if vary == "batch":
    graph = state.load_graph(problem.source.with_params(batch=int(first)))
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
