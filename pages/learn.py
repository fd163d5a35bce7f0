"""Learn: how a layer is split across devices, and how the search finds the best strategy."""

from dataclasses import replace

import pandas as pd
import streamlit as st

from pase.errors import PaseError
from pase.hardware.cluster import PRESETS
from pase.ir.configs import ConfigOptions
from pase.models.teaching import GEMM_DIMS, small_graph
from pase.planner import PlanOptions, parallelism_kind, plan
from ui import state, walkthrough
from ui.figures import dependent_sets_figure, gemm_cube_figure, gemm_tensors_figure, search_step_figure
from ui.glossary import COMMON, glossary
from ui.fmt import compact_config, config_str, fmt_count, fmt_time, md
from ui.learnkit import ORDERING_FUNCS, gemm_communication, gemm_cost, gemm_costs, small_layout, walk
from ui.pagekit import routed

routed()  # first of all: run under app.py's router (see ui.pagekit.routed)

SPLITS = [1, 2, 4, 8]
SIZES = [64, 128, 256, 512, 1024, 2048, 4096]
SMALL_DEVICES = 4

st.title("Learn")
st.caption("The ideas behind PaSE, interactively: what a configuration is, what communication it causes, "
           "and how the search finds the best configuration for every layer.")

with st.expander("What the dimension letters mean"):
    st.markdown("Every layer is an iteration space over named dimensions; a configuration such as b8·n2 splits "
                "dimension b 8 ways and n 2 ways. The letters of each kind of layer (from the op builders):")
    st.markdown("\n".join(
        f"- **{op}**: " + "; ".join(f"*{d}* {m}" for d, m in letters.items())
        for op, letters in glossary().items() if "*" not in letters))
    st.markdown("Other layers (Einsum, Elementwise, Softmax, LayerNorm, Reshape...) take the letters their graph "
                "gives them; the sample models use: " + "; ".join(f"*{d}* {m}" for d, m in COMMON.items()) + ".")

problem, _ = state.current_problem()
# The paper's cost model, which this page teaches: the sidebar's figures at peak rates, whichever step-time model
# the sidebar prices the other pages with (a calibration's roofline and latencies would hide the FLOPs-and-bytes
# arithmetic shown here).
cluster = replace(problem.cluster, efficiency=None) if problem is not None else PRESETS["paper-model"]

# -- 1. the iteration space -------------------------------------------------------------------

st.header("1. A layer is an iteration space")
st.markdown(
    "A matrix product **C[i, j] = Σₖ A[i, k] · B[k, j]** visits every point of the box *i × j × k* once "
    "(the paper's Fig. 1). A **configuration** gives each dimension a split factor; the box is cut into "
    "equal blocks, one per device. A fully connected layer is this GEMM with i = batch, j = output "
    "features, k = input features, and B the weights."
)
c_sizes, c_splits = st.columns(2)
with c_sizes:
    st.markdown("**Sizes**")
    s1, s2, s3 = st.columns(3)
    sizes = (s1.selectbox("i", SIZES, index=3, key="ln_i"), s2.selectbox("j", SIZES, index=3, key="ln_j"),
             s3.selectbox("k", SIZES, index=3, key="ln_k"))
with c_splits:
    st.markdown("**Split factors**")
    f1, f2, f3 = st.columns(3)
    splits = (f1.selectbox("split i", SPLITS, index=1, key="ln_si"),
              f2.selectbox("split j", SPLITS, index=1, key="ln_sj"),
              f3.selectbox("split k", SPLITS, index=0, key="ln_sk"))
devices = splits[0] * splits[1] * splits[2]
gemm_cluster = cluster.with_devices(max(devices, 1))
try:
    chosen = gemm_cost(sizes, splits, gemm_cluster)
except PaseError as exc:
    st.error(str(exc))
    st.stop()

fig_col, text_col = st.columns([3, 2])
with fig_col:
    st.plotly_chart(gemm_cube_figure(sizes, splits, GEMM_DIMS), key="ln_cube")
    st.caption("Each block is drawn in its device's colour, with the device id at its centre: the ids the "
               "tensor blocks below list.")
with text_col:
    kind = parallelism_kind(GEMM_DIMS, splits, batch_dim="i")
    st.markdown(f"**{devices} device{'s' if devices > 1 else ''}**, configuration (i, j, k) = "
                f"{config_str(splits)}: {kind} parallelism if i is the batch.")
    for line in gemm_communication(splits):
        st.markdown(f"- {line}")
    st.markdown(
        f"On {gemm_cluster.peak_flops / 1e12:g} TFLOP/s devices with {gemm_cluster.bandwidth_Bps / 1e9:g} GB/s links "
        f"({gemm_cluster.bytes_per_element}-byte elements), at peak rates (the paper's model, whichever the sidebar "
        "chooses for the other pages), pase's cost model gives, per device and training step:"
    )
    m1, m2 = st.columns(2)
    m1.metric("Compute", fmt_time(chosen.compute_s), help=f"{fmt_count(chosen.compute_flops)} FLOPs of "
              f"{fmt_count(chosen.flops)} for the whole layer (forward and backward).")
    m2.metric("Communication", fmt_time(chosen.intra_comm_s),
              help=f"{fmt_count(chosen.intra_comm_s * gemm_cluster.bandwidth_Bps)} bytes sent by one device "
                   "inside the layer, at the link bandwidth.")
st.plotly_chart(gemm_tensors_figure(splits, GEMM_DIMS), key="ln_tensors")
st.caption("Which devices hold each block of A, B and C. Blue: a block held by several devices is a copy "
           "(replicated). Red: the devices holding a C block each have a partial sum.")

with st.expander(f"Every configuration of this GEMM on {devices} device{'s' if devices > 1 else ''}, cheapest first"):
    try:
        rows = gemm_costs(sizes, gemm_cluster)
    except PaseError as exc:
        st.error(str(exc))
        rows = []
    if rows:
        df = pd.DataFrame([{
            "(i, j, k)": config_str(dict(zip(r.dims, r.config))[d] for d in GEMM_DIMS),
            "split": compact_config(r.dims, r.config),
            "devices used": r.devices,
            "compute ms": r.compute_s * 1e3,
            "communication ms": r.intra_comm_s * 1e3,
            "total ms": r.total_s * 1e3,
        } for r in sorted(rows, key=lambda r: r.total_s)])
        st.dataframe(df, hide_index=True, key="ln_configs",
                     column_config={c: st.column_config.NumberColumn(format="%.4g")
                                    for c in ("compute ms", "communication ms", "total ms")})
        st.caption("Alone, a layer is cheapest with the split that balances compute and communication; in a "
                   "network, the search must also weigh what the neighbours' layouts cost to redistribute.")

# -- 2. the search, step by step ----------------------------------------------------------------

st.header("2. The search, step by step")
st.markdown(
    "A strategy is one configuration per layer, so brute force tries K^|V| strategies. PaSE instead "
    "**eliminates the layers one at a time** in an ordering. When layer v(i) goes, the best choice for it "
    "depends only on the not-yet-eliminated layers it is tied to, its **dependent set D(i)**, so the search "
    "keeps a table with one entry per combination of their configurations: the product of their K. "
    "The layers eliminated before and tied to v(i) form its **connected set X(i)**. The ordering does not "
    "change the optimum, only the table sizes: **GenerateSeq** (the paper's Fig. 3) always takes the layer "
    "with the smallest dependent set; a **breadth-first** ordering lets dependent sets grow."
)
small = small_graph()
options = problem.options if problem is not None else ConfigOptions()
small_cluster = cluster.with_devices(SMALL_DEVICES)
walks = {name: walk(small, SMALL_DEVICES, options, name) for name in ORDERING_FUNCS}
n = len(small)
step = st.slider("Step i", 1, n, 1, key="ln_step",
                 help="Move through the ordering: the red layer is eliminated at this step.")
pos = small_layout(small)
cols = st.columns(2)
for col, (name, steps) in zip(cols, walks.items()):
    s = steps[step - 1]
    order = {t.vertex: t.index for t in steps}
    with col:
        st.subheader(name)
        st.plotly_chart(search_step_figure(
            small.nx, pos, done=[t.vertex for t in steps[:step - 1]], current=s.vertex,
            dependent=s.dependent, connected=s.connected, order=order,
        ), key=f"ln_step_{name}")
        dep = ", ".join(s.dependent) or "none"
        st.markdown(f"v({step}) = **{s.vertex}**; D({step}) = {{{dep}}}; table of **{s.table_entries:,}** entries "
                    f"({s.work:,} sums).")
st.caption(f"Configuration counts on {SMALL_DEVICES} devices; numbers in brackets: position in the ordering.")

table = pd.DataFrame([
    {"step": i + 1,
     **{f"{name} v(i)": walks[name][i].vertex for name in walks},
     **{f"{name} D(i)": ", ".join(walks[name][i].dependent) for name in walks},
     **{f"{name} table": walks[name][i].table_entries for name in walks}}
    for i in range(n)
])
st.dataframe(table, hide_index=True, key="ln_steps")

results = {}
for name, key in (("GenerateSeq", "generateseq"), ("breadth-first", "bfs")):
    try:
        results[name] = plan(small, small_cluster, PlanOptions(configs=options, ordering=key, memory_limit_bytes=None))
    except PaseError as exc:
        st.error(f"{name}: {md(exc)}")
if len(results) == 2:
    a, b = results["GenerateSeq"], results["breadth-first"]
    st.markdown(
        f"Both orderings find the same optimum ({fmt_time(a.step_time_s)} per step on {SMALL_DEVICES} devices): "
        f"GenerateSeq's largest table has {fmt_count(a.search.max_table_entries)} entries, breadth-first's "
        f"{fmt_count(b.search.max_table_entries)}."
    )

# -- 3. the walk-through: five ways to split training, on one model ---------------------------------

st.header("3. Five ways to split training, on one model")
walk_cluster = walkthrough.walk_cluster()
st.markdown(
    f"One tiny language model (an embedding, two feed-forward blocks, an output head: "
    f"{walkthrough.walk_graph().parameter_count / 1e6:.1f}M parameters, sequences of 256 tokens, "
    f"{walkthrough.GLOBAL_BATCH} sequences per step) on the same eight GPUs, two nodes of four "
    f"({walk_cluster.peak_flops / 1e12:g} TFLOP/s, NVLink at {walk_cluster.bandwidth_Bps / 1e9:g} GB/s inside a "
    f"node, {walk_cluster.network_bandwidth_Bps / 1e9:g} GB/s per GPU between the nodes, bf16 with Adam). Each step "
    "splits the training differently: see what every GPU holds and what crosses which link. Every number is "
    "pase's (the memory model and the cost model of the Training page)."
)
walk_name = st.radio("Step", walkthrough.STEPS, horizontal=True, key="wt_step",
                     format_func=lambda s: f"{walkthrough.STEPS.index(s) + 1}. {s}")
zero = 3
if walk_name == "ZeRO":
    zero = st.radio("ZeRO stage", walkthrough.ZERO_STAGES, index=2, horizontal=True, key="wt_zero",
                    format_func=lambda z: {1: "1: optimizer state", 2: "2: + gradients", 3: "3: + weights"}[z])
try:
    walk_now = walkthrough.walk_step(walk_name, zero)
except PaseError as exc:
    st.error(f"This step cannot be modelled: {md(exc)}", icon=":material/error:")
else:
    for paragraph in walkthrough.step_story(walk_now):
        st.markdown(paragraph)
    w1, w2, w3, w4 = st.columns(4)
    largest = max(walk_now.plan.stages, key=lambda s: s.memory_bytes)
    w1.metric("Memory per GPU", walkthrough.fmt_mb(largest.memory_bytes),
              help="The largest stage's: weights, gradients, optimizer state, activations, the largest "
                   "communication buffer and the reserve.")
    busiest = max(range(walk_now.parallelism.pipeline), key=lambda s: sum(walk_now.bytes_by_axis(s).values()))
    sent = walk_now.bytes_by_axis(busiest)
    w2.metric("Sent over NVLink per GPU", walkthrough.fmt_mb(sent.get("gpu", 0.0)), help="Per training step.")
    w3.metric("Sent over the network per GPU", walkthrough.fmt_mb(sent.get("node", 0.0)), help="Per training step.")
    w4.metric("Step time", fmt_time(walk_now.plan.step_time_s), help=walk_now.parallelism.describe())
    hold_col, link_col = st.columns(2)
    with hold_col:
        st.plotly_chart(walkthrough.holdings_figure(walk_now), key="wt_holdings")
    with link_col:
        st.plotly_chart(walkthrough.traffic_figure(walk_now), key="wt_traffic")
    st.caption("Left: each GPU's memory, with its place in the configuration under its bar (its tensor-parallel "
               "shard, pipeline stage, data-parallel replica or ZeRO shard). Right: the bytes one GPU sends per "
               "step on each link, one piece per collective or send, coloured by the parallelism that causes it "
               "(data and tensor in the explorer's colours for data and tensor parallelism).")
    with st.expander("Which block of which weight each GPU holds"):
        st.dataframe(pd.DataFrame(walkthrough.weight_rows(walk_now)), hide_index=True, key="wt_weights")
    with st.expander("Every transfer of this step"):
        st.dataframe(pd.DataFrame(walkthrough.transfer_rows(walk_now)), hide_index=True, key="wt_transfers")
    with st.expander("All five steps at a glance"):
        st.dataframe(pd.DataFrame(walkthrough.summary_rows(zero)), hide_index=True, key="wt_summary")

# -- 4. on a real network ------------------------------------------------------------------------

st.header("4. On a real network")
if problem is None:
    st.info("Choose a graph in the sidebar to see its dependent sets here.")
    st.stop()
graph = state.load_graph(problem.source)
p = problem.cluster.devices
key = ("walks", problem.source, p, problem.options)
store = state.stores()["misc"]
real = store.get(key)
if real is None:
    with st.spinner(f"Walking both orderings over {len(graph)} layers..."):
        real = {name: walk(graph, p, problem.options, name, connected=False) for name in ORDERING_FUNCS}
    store.put(key, real)
st.markdown(f"**{md(graph.name)}** at p = {p}: the size of the dependent set D(i) at every step i, and the table "
            "the step builds. Breadth-first makes the search exponentially larger on branchy networks; the paper's "
            "breadth-first runs out of memory on InceptionV3 and the Transformer.")
st.plotly_chart(dependent_sets_figure({n: [len(s.dependent) for s in w] for n, w in real.items()}),
                key="ln_real_sets")
st.plotly_chart(dependent_sets_figure({n: [s.table_entries for s in w] for n, w in real.items()},
                                      y_title="table entries", log_y=True), key="ln_real_tables")
summary = pd.DataFrame([{
    "ordering": name,
    "largest |D(i)|": max(len(s.dependent) for s in w),
    "largest table": fmt_count(max(s.table_entries for s in w)),
    "all tables": fmt_count(sum(s.table_entries for s in w)),
    "sums examined": fmt_count(sum(s.work for s in w)),
} for name, w in real.items()])
st.dataframe(summary, hide_index=True, key="ln_real_summary")
