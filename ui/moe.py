"""A mixture-of-experts plan as its user reads it: expert groups, experts per device, dispatch against compute.

* :func:`moe_rows`: the table (EP / ETP / expert-DP sizes and the mesh axes they span, experts and their
  parameters per device, the tokens each all-to-all moves and over which link, the tokens per local expert,
  the routing, and the dispatch and expert-compute seconds of a step on the busiest device);
* :func:`moe_figure`: per pipeline stage, the token dispatch and combine against the experts' compute, per
  step on a device of that stage;
* :func:`show_moe`: both on a page (Streamlit), for any :class:`~pase.model.training.TrainingPlan` with experts.

Every number comes from the plan (:meth:`~pase.model.training.TrainingPlan.experts_dict` and its stages).
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from pase.model.training import TrainingPlan
from ui.fmt import fmt_count, fmt_time, plotly_text
from ui.palette import COST_COLORS, INK

__all__ = ["moe_rows", "moe_figure", "show_moe"]

# Dispatch is communication, the experts' products compute: the colours the app gives those everywhere.
DISPATCH_COLOR, COMPUTE_COLOR = COST_COLORS["intra-layer comm"], COST_COLORS["compute"]


def _axes(extents: dict) -> str:
    """``{"node": 8, "gpu": 8}`` as ``"node 8 x gpu 8"``; an empty one as ``"one device"``."""
    return " x ".join(f"{a} {k}" for a, k in extents.items()) or "one device"


def moe_rows(plan: TrainingPlan) -> list[dict]:
    """The plan's expert layout as (quantity, value) rows; empty for a plan without experts."""
    e = plan.experts_dict()
    if e is None:
        return []
    mesh = e["mesh"]
    routing = ("dropless, imbalance " f"{e['imbalance']:g}" if e["capacity_factor"] is None
               else f"capacity factor {e['capacity_factor']:g} (tokens past it dropped)")
    rows = [
        ("expert parallelism (EP)", f"{e['ep']} ({_axes(mesh['expert'])})"),
        ("expert tensor parallelism (ETP)", f"{e['etp']} ({_axes(mesh['expert tensor'])})"),
        ("expert data parallelism (expert-DP)", f"{e['edp']} ({_axes(mesh['expert data'])})"),
        ("experts per device", f"{e['experts_per_device']} of {e['experts']} (top-{e['top_k']})"),
        ("expert parameters per device", fmt_count(e["expert_parameters_per_device"])),
        ("token dispatcher", "DeepEP (once per node across the network, then NVLink)"
         if e["dispatcher"] == "deepep" else "all-to-all (Megatron-Core's default)"),
        ("tokens each all-to-all moves (per device, block, microbatch)",
         f"{fmt_count(e['tokens_sent_per_all_to_all'])} sent, {fmt_count(e['tokens_across_nodes_per_all_to_all'])} "
         f"of them to other nodes, for {fmt_count(e['tokens_per_all_to_all'])} routed copies"),
        ("link the all-to-all crosses", e["all_to_all_link"] or "none (EP 1)"),
        ("tokens per local expert (its products' rows)", fmt_count(e["tokens_per_local_expert"])),
        ("routing", routing),
        ("dispatch and combine per step (busiest device)",
         fmt_time(e["dispatch_s_per_step"])
         + (f" (overlapped with another microbatch's layer: {fmt_time(e['dispatch_exposed_s_per_step'])} exposed)"
            if e["dispatch_overlap"] else
            f" (the shared experts run beside it: {fmt_time(e['dispatch_exposed_s_per_step'])} exposed)"
            if e["shared_expert_overlap"] else " (exposed: not overlapped)")
         + (", FP8 dispatch" if e["fp8_dispatch"] else "")),
        ("experts' compute per step (busiest device)", fmt_time(e["expert_compute_s_per_step"])),
    ]
    return [{"quantity": q, "value": v} for q, v in rows]


def moe_figure(plan: TrainingPlan) -> go.Figure:
    """Per pipeline stage, seconds per step on one of its devices: dispatch and combine (every all-to-all and
    expert-tensor collective, forward and backward, before any overlap), under the all-to-all overlap what of
    them stays exposed, and the experts' compute."""
    m = plan.parallelism.microbatches
    stages = [f"stage {s.index}" for s in plan.stages]
    e = plan.experts
    series = [("dispatch and combine", [s.dispatch_s * m for s in plan.stages], DISPATCH_COLOR, None)]
    if e["dispatch_overlap"] or e["shared_expert_overlap"]:
        series.append(("of them exposed (overlap)", [plan.exposed_dispatch_s(s) for s in plan.stages],
                       DISPATCH_COLOR, "/"))
    series.append(("experts' compute", [s.expert_compute_s * m for s in plan.stages], COMPUTE_COLOR, None))
    fig = go.Figure()
    for name, values, color, pattern in series:
        fig.add_bar(x=stages, y=values, name=name, marker_color=color, marker_pattern_shape=pattern,
                    opacity=0.6 if pattern else 1.0,
                    hovertemplate="%{x}: %{y:.3g} s<extra>" + plotly_text(name) + "</extra>")
    fig.update_layout(barmode="group", height=300, margin=dict(l=10, r=10, t=30, b=10),
                      yaxis_title="seconds per step", font_color=INK,
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig


def show_moe(plan: TrainingPlan, prefix: str) -> None:
    """The plan's experts (nothing for a plan without them): the table and the dispatch-against-compute bars
    (element keys start with ``prefix``)."""
    if plan.experts is None:
        return
    st.subheader("Experts")
    a, b = st.columns([3, 2])
    a.dataframe(moe_rows(plan), hide_index=True, key=f"{prefix}_moe_table")
    b.plotly_chart(moe_figure(plan), key=f"{prefix}_moe_dispatch")
    st.caption("Expert parallelism as Megatron-Core lays it out (MoE parallel folding): the experts of each stage "
               "on the same devices as its attention, dealt over EP, each split over ETP, replicated over "
               "expert-DP. The bars: per step on one device of each stage, the tokens' dispatch and combine "
               "(all-to-alls, before any overlap; under the all-to-all overlap, hatched, what stays exposed) "
               "against the experts' grouped products.")
