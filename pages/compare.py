"""Compare: the found strategy beside data parallelism, the expert strategies and your own plan."""

import streamlit as st

from pase.analysis.baselines import evaluate_strategy
from pase.errors import PaseError
from pase.io.strategy_json import loads_strategy
from ui import state
from ui.figures import layer_compare_figure, totals_figure
from ui.fmt import fmt_fit, fmt_time, md, round_sig
from pase.search.stages import training_baselines
from ui import jobs
from ui.pagekit import require_problem, routed, solve_button, solve_training_button
from ui.training_figures import plans_figure
from ui.names import strategy_name
from ui.palette import HIGHLIGHT_ROW
from ui.stepmodel import show_model
from ui.tables import comparison_table, differing_layers, totals_table

routed()  # first of all: run under app.py's router (see ui.pagekit.routed)

PASE = "PaSE"
# What a table's number cell shows where there is no number (a plan that does not fit has no step): the cell
# stays empty, so that the column stays numeric and sorts.
NO_VALUE = "—"
# Per-layer chart: at most this many layers (those whose times differ most).
MAX_CHART_LAYERS = 40

st.title("Compare strategies")
st.caption("The found strategy beside data parallelism and the expert strategies that apply to this model "
           "(OWT for CNNs, Mesh-TensorFlow and Megatron for Transformers, GNMT for LSTMs), all under the same "
           "cost model.")

problem = require_problem()
graph = state.load_graph(problem.source)
st.markdown(f"**{md(graph.name)}** ({md(problem.source)}) on **{md(problem.cluster)}**")
show_model([problem.cluster])  # every strategy below, your own plan too, is priced by it


def compare_training() -> None:
    """A language model: the 3-D search's best beside the 3-D baselines (pase.search.stages.training_baselines)."""
    st.caption(f"**{md(graph.name)}** is a language model, so this page compares what `pase solve` compares for it: "
               "the **3-D search**'s best plan (tensor, pipeline and data parallelism, microbatches, schedule, "
               "recomputation, ZeRO) beside the 3-D baselines (data parallel, ZeRO-3 / FSDP, Megatron), each at its "
               "best microbatch, by the same model.")
    found = solve_training_button(problem, key="solve_compare", label="Solve")
    if found is None:
        st.info("Press **Solve** to run the 3-D search (shared with the Explorer and the Training page).",
                icon=":material/info:")
        st.stop()
    search = found[0]
    key = ("training-baselines", problem)
    store = state.stores()["baselines"]
    baselines = store.get(key)
    if baselines is None:
        try:
            with st.spinner("Costing the 3-D baselines (data parallel, ZeRO-3 / FSDP, Megatron)..."):
                baselines = jobs.run(training_baselines, state.training_builder(problem.source), problem.cluster,
                                     state.global_batch(problem.source), options=problem.options,
                                     what="costing the 3-D baselines")
        except PaseError as exc:
            st.error(f"The baselines could not be costed: {md(exc)}")
            st.stop()
        store.put(key, baselines)
    plans = {PASE: search.best, **baselines}
    st.subheader("Step time")
    st.plotly_chart(plans_figure(plans, PASE), key="cmp_training")
    best = search.best.step_time_s
    st.dataframe([{"plan": name, "configuration": p.label,
                   "step time": "does not fit" if p.fits_memory is False else fmt_time(p.step_time_s),
                   # 3 significant figures, as the chart's labels (1.36×) and the fit's (60.5 GB).
                   "× the best's step": None if p.fits_memory is False else round_sig(p.step_time_s / best),
                   "MFU (% of peak)": None if p.fits_memory is False or p.mfu is None else round_sig(p.mfu * 100),
                   "memory per device (GB)": round_sig(p.memory_per_device_bytes / 1e9),
                   "fits memory": fmt_fit(p.memory_per_device_bytes, p.memory_capacity_bytes)}
                  for name, p in plans.items()], hide_index=True, key="cmp_training_table",
                 placeholder=NO_VALUE)
    st.caption(f"A plan that does not fit device memory (with the reserve, sidebar: Nodes and memory) is listed "
               f"with its memory but not charted: it cannot run, so its step and MFU read {NO_VALUE}. The Training "
               "page draws each plan's pipeline schedule and memory per stage.")


if state.is_language_model(problem.source):
    compare_training()
    st.stop()

plan = solve_button(problem, key="solve_compare", label="Solve")
if plan is None:
    st.info("Press **Solve** to find the strategy to compare.", icon=":material/info:")
    st.stop()

try:
    with st.spinner("Costing the baselines..."):
        baselines = state.baseline_plans(problem)
except PaseError as exc:
    st.error(f"The baselines could not be costed: {md(exc)}")
    st.stop()

# The paper's "parameter parallel" baseline under the app's word for its split as well ("tensor", ui.names).
plans = {PASE: plan, **{strategy_name(name): p for name, p in baselines.items()}}

with st.expander("Add your own plan", icon=":material/upload_file:"):
    st.markdown(
        "A JSON object mapping layer names to configurations, e.g. `{\"fc6\": [1, 8, 1]}`, or a strategy file "
        "downloaded from the explorer (or written by `pase solve --json`); docs/plan-format.md describes both. "
        "Layers it leaves out are data parallel."
    )
    own = st.file_uploader("Strategy file (.json)", type=["json"], key="cmp_user_plan")
    if own is not None:
        try:
            user = evaluate_strategy(graph, problem.cluster, loads_strategy(own.getvalue()), options=problem.options,
                                     label="your plan")
            plans["your plan"] = user
            st.success(f"Your plan: {fmt_time(user.step_time_s)} per step.")
        except PaseError as exc:
            st.error(f"Cannot use this plan: {md(exc)}")

st.subheader("Step time")
speedups = {name: plan.speedup_over(p) for name, p in plans.items() if name != PASE}
st.plotly_chart(totals_figure({name: p.totals_s() for name, p in plans.items()}, speedups=speedups),
                key="cmp_totals")
st.dataframe(totals_table(plans, PASE), hide_index=True, key="cmp_totals_table")
st.caption("The number after each bar: how many times faster the found strategy's step is. "
           "A baseline that does not fit in device memory is still costed (fits memory: no).")

st.subheader("Per layer")
others = [n for n in plans if n != PASE]
c1, c2 = st.columns([2, 1])
chosen = c1.multiselect("Compare with", others, default=[n for n in others if n == "data parallel"] or others[:1],
                        key="cmp_chosen")
only_diff = c2.toggle("Only layers that differ", value=True, key="cmp_only_diff")
subset = {PASE: plan, **{n: plans[n] for n in chosen}}
differ = differing_layers(subset, PASE)
table = comparison_table(subset, PASE)
if only_diff:
    table = table[table["differs"]]
st.caption(f"{len(differ)} of {len(plan.layers)} layers are split differently.")
if len(subset) > 1 and differ:
    # The layers whose times differ most.
    spread = {name: max(p.layers[i].total_s for p in subset.values()) - min(p.layers[i].total_s for p in subset.values())
              for i, name in enumerate(r.name for r in plan.layers)}
    shown = sorted(differ, key=lambda n: -spread[n])[:MAX_CHART_LAYERS]
    st.plotly_chart(layer_compare_figure({k: v.layers for k, v in subset.items()}, only=shown), key="cmp_layers")
    if len(differ) > MAX_CHART_LAYERS:
        st.caption(f"The chart shows the {MAX_CHART_LAYERS} layers whose times differ most; the table lists all.")


def _highlight(row):
    return [f"background-color: {HIGHLIGHT_ROW}" if row["differs"] else "" for _ in row]


st.dataframe(
    table.style.apply(_highlight, axis=1).format({c: "{:.4g}" for c in table.columns if c.endswith(" ms")}),
    hide_index=True, key="cmp_table",
)
