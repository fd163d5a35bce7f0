"""Compare: the found strategy beside data parallelism, the expert strategies and your own plan."""

import streamlit as st

from pase.analysis.baselines import evaluate_strategy
from pase.errors import PaseError
from pase.io.strategy_json import loads_strategy
from ui import state
from ui.figures import layer_compare_figure, totals_figure
from ui.fmt import fmt_time, md
from ui.pagekit import require_problem, routed, solve_button
from ui.palette import HIGHLIGHT_ROW
from ui.stepmodel import show_model
from ui.tables import comparison_table, differing_layers, totals_table

routed()  # first of all: run under app.py's router (see ui.pagekit.routed)

PASE = "PaSE"
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

plans = {PASE: plan, **baselines}

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
