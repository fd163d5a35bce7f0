"""Explorer: solve the chosen graph on the chosen cluster and see the strategy on the graph."""

import json

import streamlit as st

from pase.ir.configs import config_counts
from pase.model.cost import options_on
from pase.errors import PaseError
from pase.io.export import FORMATS as EXPORT_FORMATS, export_plan, file_name
from ui import state
from ui.figures import SORT_KEYS, cost_breakdown_figure, memory_figure, strategy_graph_figure
from ui.fmt import fmt_count, fmt_fit, fmt_percent, fmt_time, md
from ui.graphview import auto_group_depth, build_graph_view, group_key, groups_of, toggle_module
from ui.pagekit import headline, require_problem, routed, solve_button, solve_training_button
from ui.stepmodel import show_model
from ui.tables import strategy_table
from ui.published import show_published

routed()  # first of all: run under app.py's router (see ui.pagekit.routed)

# Group modules by default above this many layers.
GROUP_ABOVE = 80
# "Colour nodes by" choices -> strategy_graph_figure's color_by.
COLOUR_BY = {"kind of parallelism": "kind", "time": "time", "gain over data parallelism": "gain"}
# The tabs under a solved plan's summary (session key "ex_tab" holds the open one).
EXPLORER_TABS = ["Per-layer cost breakdown", "Configurations (Table II)", "Memory per device"]

st.title("PaSE explorer")
st.caption("Find the per-layer parallelization strategy of least estimated training step time "
           "(Elango, *PaSE*, IPDPS 2021) and see it on the computation graph.")

problem = require_problem()
graph = state.load_graph(problem.source)
c = problem.cluster
space = options_on(problem.options, c)  # the split space the search uses on this cluster (its mesh, or divisors)
counts_key = ("config_counts", problem.source, c.devices, space)
counts = state.stores()["misc"].get(counts_key)
if counts is None:
    counts = config_counts(graph, c.devices, space)
    state.stores()["misc"].put(counts_key, counts)
st.markdown(
    f"**{md(graph.name)}** ({md(problem.source)}): {len(graph)} layers, {len(graph.edges)} edges, "
    f"{graph.parameter_count / 1e6:,.1f}M parameters · **{c}**, {c.bytes_per_element} bytes per element · "
    f"up to {max(counts.values())} configurations per layer ({fmt_count(sum(counts.values()))} in all)"
)
show_model([c])

# The large language models are planned as `pase solve` plans them: by the joint 3-D search (tensor, pipeline and
# data parallelism, microbatches, schedule, recomputation, ZeRO); one strategy of the whole batch on every device
# (the per-layer search) cannot fit their memory. The graph then shows one microbatch on one t x c group.
three_d = state.is_language_model(problem.source)
training = None
if three_d:
    batch = state.global_batch(problem.source)
    st.caption(f"**{md(graph.name)}** is a large language model, so **Solve** runs the joint 3-D search, as "
               f"`pase solve {problem.source.name}` does: tensor (t), pipeline (p) and data (d) parallelism, "
               "the microbatch size, pipeline schedule, recomputation and ZeRO, keeping the fastest configuration "
               f"that fits device memory. The sidebar's **Batch size** is the **global batch**: {batch:,} samples "
               "per step, split into microbatches by the search.")
    training = solve_training_button(problem)
    plan = None if training is None else training[1]
else:
    plan = solve_button(problem)
if plan is None:
    st.info("Press **Solve** to search for the best strategy; below is the graph's structure.", icon=":material/info:")
# Filled after the graph is drawn, so the graph comes first.
summary = st.container()
dp = dp_error = None
if plan is not None and not three_d:
    try:
        dp = state.data_parallel_plan(problem)
    except PaseError as exc:
        dp_error = exc

# -- the graph ---------------------------------------------------------------------------------

st.subheader("Strategy on the graph" if plan is not None else "The graph")
names = [layer.name for layer in graph.layers]
max_depth = max((n.count(".") for n in names), default=0)
can_group = max_depth > 0
g1, g2, g3, g4 = st.columns([1, 1, 2, 2])
group = g1.toggle("Group modules", value=can_group and len(names) > GROUP_ABOVE, disabled=not can_group,
                  key="ex_group", help="Draw layers that share a name prefix (a module) as one node.")
depth = None
expanded: list[str] = []
if group and can_group:
    auto = auto_group_depth(names)
    if three_d:  # a language model: one node per transformer block (layers.0, layers.1...)
        auto = min(2, max_depth)
    depth = g2.selectbox("Name depth", list(range(1, max_depth + 1)), index=auto - 1, key=f"ex_depth_{graph.name}",
                         help="How many dotted name parts make a module: mixed_5b (1), mixed_5b.branch1x1 (2)...")
    modules = {k: ms for k, ms in groups_of(names, depth).items() if len(ms) > 1}
    multi = list(modules)
    expand_key = f"ex_expand_{graph.name}_{depth}"
    if three_d and multi and expand_key not in st.session_state:
        st.session_state[expand_key] = multi[:1]  # the first block layer by layer: the split of each of its layers
    expanded = g3.multiselect("Expand modules", multi, key=expand_key,
                              placeholder="Draw these modules layer by layer",
                              help="Or click a module on the graph to expand it, and one of its layers to collapse it.")
found = g4.selectbox("Find a layer", names, index=None, placeholder="Layer name...", key=f"ex_find_{graph.name}")

if found is not None and depth is not None:
    key = group_key(found, depth)
    if key != found and key not in expanded:
        expanded = [*expanded, key]
colour_by = "kind"
if plan is not None:
    choices = [c for c, v in COLOUR_BY.items() if v != "gain" or dp is not None]
    colour_by = COLOUR_BY[st.radio("Colour nodes by", choices, horizontal=True, key="ex_colour",
                                   help="Time: each node's total time. Gain: data parallelism's time minus this "
                                        "strategy's, per node (positive: faster than data parallelism).")]
view = build_graph_view(graph if plan is None else plan.graph, plan, depth=depth,
                        expanded=expanded, config_counts=counts, baseline=dp)
highlight = None
if found is not None:
    highlight = view.node_of_layer(found).key
    if plan is not None:
        row = next(r for r in plan.layers if r.name == found)
        st.caption(f"**{md(found)}**: configuration {row.config} over {' '.join(row.dims)}; "
                   f"total {fmt_time(row.total_s)} (compute {fmt_time(row.compute_s)}, "
                   f"intra-layer {fmt_time(row.intra_comm_s)}, edge {fmt_time(row.edge_comm_s)}).")
fig = strategy_graph_figure(view, highlight=highlight, color_by=colour_by)


def _on_graph_click() -> None:
    """A click on a node: expand its module, or collapse the module of a layer (the multiselect's state)."""
    if depth is None:
        return
    event = st.session_state.get("graph_chart") or {}
    for point in event.get("selection", {}).get("points", []):
        key = point.get("customdata")
        if isinstance(key, (list, tuple)):
            key = key[0] if key else None
        if isinstance(key, str):
            st.session_state[expand_key] = toggle_module(st.session_state.get(expand_key, []), key, modules)


# The container's key names the chart for tests: strategy-graph once solved, structure-graph before.
with st.container(key="strategy-graph" if plan is not None else "structure-graph"):
    st.plotly_chart(fig, key="graph_chart", on_select=_on_graph_click, selection_mode="points",
                    config={"scrollZoom": True, "displaylogo": False, "modeBarButtonsToRemove": ["select2d", "lasso2d"]})
if training is not None:
    par = training[0].best.parallelism
    st.caption(
        f"The graph is **one microbatch** ({par.microbatch_size} sample{'s' if par.microbatch_size > 1 else ''}) on "
        f"**one t x c group** of {par.group} device{'s' if par.group > 1 else ''} (t = {par.tensor}, "
        f"c = {par.context}) of the 3-D plan: each layer split by Megatron-LM's rule, the splits the search "
        f"costed{', with sequence parallelism' if par.sequence_parallel else ''}. The plan runs "
        f"{par.data} such replicas (d) x {par.pipeline} pipeline stage{'s' if par.pipeline > 1 else ''} (p), "
        f"{par.microbatches:,} microbatches per step. Node and edge times: one microbatch on the group, by the "
        "per-layer cost model (pase.evaluate).")
if plan is not None:
    st.caption(
        f"{len(view.nodes)} nodes for {len(names)} layers, {view.generations} steps deep, left to right. "
        + {"kind": "Colour: kind of parallelism; ",
           "time": "Colour: node time (compute + intra-layer + incoming edges), on the lower colour bar; ",
           "gain": "Colour: data parallelism's time minus this strategy's, per node (green: faster, "
                   "magenta: slower, grey: the same), on the lower colour bar; "}[colour_by]
        + "label: layer, op and split "
        "(e.g. b8·n2 = batch 8 ways, n 2 ways; 1 = unsplit); square: a module of several layers; "
        + "edge colour and width: redistribution time, on the scale of the "
        + ("colour bar. " if colour_by == "kind" else "upper colour bar. ")
        + ("Click a module to expand it, a layer of an expanded module to collapse it. " if depth is not None else "")
        + "Drag to pan along the graph, scroll to zoom, double-click to reset; hover for full names and costs."
    )
else:
    st.caption(f"{len(view.nodes)} nodes for {len(names)} layers, {view.generations} steps deep, left to right; "
               "square: a module of several layers. Drag to pan along the graph, scroll to zoom; "
               "hover for full names, dimensions and configuration counts.")
    st.stop()

# -- headline numbers and downloads (above the graph) ---------------------------------------

def training_summary(search, group_plan) -> None:
    """The 3-D plan's label and numbers, runners-up, a download, and the way to its schedule (the Training page)."""
    best = search.best
    par = best.parallelism
    d = best.to_dict()
    st.success(f"Best of {search.configurations:,} 3-D configurations modelled ({search.skipped:,} skipped by the "
               f"bound) in {fmt_time(search.search_time_s)}: **{md(best.label)}**.", icon=":material/check_circle:")
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Estimated step time", fmt_time(best.step_time_s),
              help=f"{par.microbatches:,} microbatches through the {par.schedule} schedule, then the exposed "
                   "gradient reduction (pase.model.training).")
    tokens = d["tokens_per_s"]
    m2.metric("Tokens/s", "n/a" if tokens is None else fmt_count(tokens),
              help="Global batch x sequence length / step time.")
    m3.metric("MFU (of peak)", "n/a" if best.mfu is None else f"{best.mfu:.1%}",
              help=f"Model FLOPs per device per second / the cluster's peak, {c.peak_flops / 1e12:g} TFLOP/s.")
    mem, cap = best.memory_per_device_bytes, best.memory_capacity_bytes
    m4.metric("Memory per device", f"{mem / 1e9:.3g} GB", delta=None if cap is None else fmt_fit(mem, cap),
              delta_color="normal" if best.fits_memory in (True, None) else "inverse",
              help="The stage needing most: weights, gradients, optimizer state, activations in flight, transient "
                   "buffers and the reserve per device (CUDA context, workspaces, NCCL buffers, fragmentation; "
                   "Nodes and memory)" + ("" if cap is not None else "; no capacity given (Nodes and memory)") + ".")
    schedule = (f"interleaved schedule, {par.virtual_stages} chunks per device" if par.virtual_stages > 1
                else f"{par.schedule} schedule")
    st.caption(
        f"Tensor t = {par.tensor}" + (f", context c = {par.context}" if par.context > 1 else "")
        + f", pipeline p = {par.pipeline}, data d = {par.data} ({par.devices:,} devices); microbatch "
        f"{par.microbatch_size} x {par.microbatches:,} per step (global batch {par.global_batch:,}); {schedule}; "
        f"recomputation {par.recompute}; ZeRO stage {par.zero}"
        + ("; sequence parallelism" if par.sequence_parallel else "")
        + f". Bubble {fmt_percent(best.schedule.bubble_fraction)} of the step.")
    if search.runners_up:
        st.caption("Runners-up: " + "; ".join(
            f"{md(r.label)} ({r.step_time_s / best.step_time_s - 1:+.1%})" for r in search.runners_up[:3]) + ".")
    for note in search.notes:
        st.caption(md(note))
    show_published(best, "explorer")
    source = problem.source
    l1, l2 = st.columns([1, 3])
    # Written when clicked (a callable), as the other downloads: the page does not wait for them.
    l1.download_button("Plan (JSON)", lambda: json.dumps(search.to_dict(), indent=1),
                       file_name=f"{source.name}-p{c.devices}-training.json", mime="application/json",
                       icon=":material/download:", key="dl_training_json")
    # A link, as the navigation's: st.switch_page from a button would drop the sidebar's widget state (the problem).
    l2.page_link("pages/training.py", label="See its pipeline schedule, memory per stage and device mesh on the "
                 "Training page (the same problem)", icon=":material/view_timeline:")


if training is not None:
    with summary:
        training_summary(*training)
    st.stop()

with summary:
    if dp_error is not None:
        st.warning(f"Data parallelism could not be costed: {md(dp_error)}")
    headline(plan, dp)
    totals = plan.totals_s()
    total = sum(totals.values()) or 1.0
    st.caption(
        f"Step time = compute {fmt_time(totals['compute_s'])} ({100 * totals['compute_s'] / total:.0f}%) + "
        f"intra-layer communication {fmt_time(totals['intra_comm_s'])} ({100 * totals['intra_comm_s'] / total:.0f}%) + "
        f"redistribution between layers {fmt_time(totals['edge_comm_s'])} ({100 * totals['edge_comm_s'] / total:.0f}%)."
    )
    if plan.memory_per_device_bytes is not None:
        capacity = plan.memory_capacity_bytes
        st.caption(
            f"Memory per device: {plan.memory_per_device_bytes / 1e9:.3g} GB"
            + (f", the reserve of {plan.memory.reserved_bytes / 1e9:.3g} GB included: "
               f"{fmt_fit(plan.memory_per_device_bytes, capacity)}" if capacity else
               " (no capacity given: set one under Nodes and memory to search only strategies that fit)")
        )
    table = strategy_table(plan)
    d1, d2, d3, d4 = st.columns([1, 1, 1, 2])
    # Written when clicked (callables): writing them took longer than drawing the rest of the summary.
    d1.download_button("Strategy (JSON)", lambda: json.dumps(plan.to_dict(), indent=1),
                       file_name=f"{graph.name}-p{c.devices}-strategy.json", mime="application/json",
                       icon=":material/download:", key="dl_json")
    d2.download_button("Table (CSV)", lambda csv=table: csv.to_csv(index=False),
                       file_name=f"{graph.name}-p{c.devices}-table.csv", mime="text/csv",
                       icon=":material/download:", key="dl_csv")
    export_format = d3.selectbox("Export as", EXPORT_FORMATS, index=None, placeholder="Export as...",
                                 key="ex_export_format", label_visibility="collapsed",
                                 help="DTensor placements and JAX PartitionSpecs of every layer; Megatron-LM, "
                                      "torchtitan and DeepSpeed settings when the layers split as Megatron-LM's "
                                      "rule does (docs/plan-format.md)")
    try:  # only once a format is chosen: the Megatron-LM check tries every tensor size
        exported = None if export_format is None else export_plan(plan.to_dict(), export_format, graph=plan.graph)
    except PaseError as exc:  # not expressible in that framework: say which layers, and offer nothing to download
        d4.error(md(exc), icon=":material/block:")
    else:
        if exported is not None:
            d4.download_button(f"Export ({export_format})", exported,
                               file_name=file_name(graph.name, export_format), icon=":material/download:",
                               key="dl_export")

# -- cost breakdown and table ------------------------------------------------------------------

# Only the open tab is built and sent (switching tabs reruns the page): building and drawing all three after every
# Solve took about a third of the landing page's Solve to result on 2 cores (BENCHMARKS.md, the browser section).
tab_chart, tab_table, tab_memory = st.tabs(EXPLORER_TABS, key="ex_tab", on_change="rerun")
# A widget not drawn in a run loses its value: keep those of the closed tabs for when they open again (their
# defaults set here, not as the widgets' own, which Streamlit refuses beside a value kept this way).
for kept, default in (("ex_sort", "total"), (f"ex_limit_{graph.name}", min(len(names), 40)), ("ex_why", False)):
    st.session_state[kept] = st.session_state.get(kept, default)
if tab_chart.open:
    with tab_chart:
        s1, s2 = st.columns([1, 1])
        sort_by = s1.selectbox("Sort by", list(SORT_KEYS), key="ex_sort")
        limit = int(s2.number_input("Layers shown", min_value=1, max_value=len(names), step=5,
                                    key=f"ex_limit_{graph.name}"))
        st.plotly_chart(cost_breakdown_figure(plan.layers, sort_by=sort_by, limit=limit), key="breakdown_chart")
if tab_table.open:
    with tab_table:
        if st.toggle("Why this split? Show each layer's runner-up", key="ex_why",
                     help="The next-best configuration of each layer with every other layer kept as planned, and "
                          "how much slower the whole step would be with it (pase.analysis.explain)."):
            try:
                with st.spinner("Pricing every layer's alternatives (a worker process)..."):
                    table = strategy_table(plan, state.explanations(problem, plan))
            except PaseError as exc:
                st.error(f"The runners-up could not be computed: {md(str(exc))}")
        st.dataframe(
            table, hide_index=True, key="strategy_table",
            column_config={
                "compute_ms": st.column_config.NumberColumn("compute ms", format="%.4g"),
                "intra_comm_ms": st.column_config.NumberColumn("intra-layer ms", format="%.4g"),
                "edge_comm_ms": st.column_config.NumberColumn("edge ms", format="%.4g"),
                "total_ms": st.column_config.NumberColumn("total ms", format="%.4g"),
                "runner_up": st.column_config.TextColumn("runner-up"),
                "runner_up_slower_ms": st.column_config.NumberColumn(
                    "runner-up slower by ms", format="%.4g",
                    help="Negative: faster, but the plan keeps its choice to fit device memory."),
            },
        )
if tab_memory.open:
    with tab_memory:
        if plan.memory is None:
            st.info("This plan carries no memory estimate.", icon=":material/info:")
        else:
            if plan.fits_memory is False:
                st.error(f"This strategy needs {plan.memory_per_device_bytes / 1e9:.3g} GB per device, more than "
                         f"the {plan.memory_capacity_bytes / 1e9:.3g} GB each device has.", icon=":material/memory:")
            st.plotly_chart(memory_figure(plan.memory), key="memory_chart")
            st.caption("Adam with fp32 master weights; activations are those the backward pass keeps. Set a "
                       "capacity under Nodes and memory to search only strategies that fit.")
