"""NVIDIA's published runs of a plan's model on its system, beside the plan (:mod:`pase.hardware.published_runs`).

* :func:`published_rows`: the runs as table rows, release by release, the plan's own configuration marked with
  the plan's step against it;
* :func:`published_figure`: the tokens/s/GPU each release measured in the plan's own configuration, against the
  plan's;
* :func:`show_published`: a line saying it, and the table and the figure in an expander (Streamlit).
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from pase.hardware.published_runs import beside
from pase.model.training_plan import TrainingPlan
from ui.fmt import md, plotly_text
from ui.palette import INK, MEASURED

__all__ = ["published_rows", "published_figure", "show_published"]


def published_rows(found: dict) -> list[dict]:
    """One row per published run of :func:`~pase.hardware.published_runs.beside`'s ``found``; the plan's step
    against a run in a column of its own where some run is the plan's configuration."""
    mine = any(r["same_configuration"] for r in found["runs"])
    return [{"release": r["release"], "as published": f"{r['model']} ({r['variant']})" if r["variant"] else r["model"],
             "precision": r["precision"], "configuration": r["configuration"],
             "tokens/s/GPU": round(r["tokens_per_gpu_s"]), "step (s)": round(r["step_s"], 3),
             **({"this plan's step against it": "" if r["model_error"] is None else f"{r['model_error']:+.1%}"}
                if mine else {})}
            for r in found["runs"]]


def published_figure(found: dict) -> go.Figure | None:
    """Bars: the tokens/s/GPU of each release that ran the plan's own configuration; a dashed line: the plan's
    (None where no release ran it)."""
    same = [r for r in found["runs"] if r["same_configuration"]]
    if not same or found["model_tokens_per_gpu_s"] is None:
        return None
    names = [f"{r['release']} ({r['precision']})" for r in same]
    fig = go.Figure()
    fig.add_bar(x=names, y=[r["tokens_per_gpu_s"] for r in same], name="measured (NVIDIA)", marker_color=MEASURED,
                customdata=[r["step_s"] for r in same],
                hovertemplate="%{x}: %{y:,.0f} tokens/s/GPU, a %{customdata:.3f} s step<extra></extra>")
    model = found["model_tokens_per_gpu_s"]
    fig.add_scatter(x=names, y=[model] * len(names), mode="lines", name="this plan (pase)",
                    line=dict(color=INK, dash="dash"),
                    hovertemplate=plotly_text(f"this plan: {model:,.0f} tokens/s/GPU") + "<extra></extra>")
    # Room for the tick labels and the axis title: the chart is drawn in a narrow expander.
    fig.update_layout(height=280, margin=dict(l=80, r=10, t=40, b=40), yaxis=dict(title="tokens/s per GPU",
                      tickformat=",.0f", rangemode="tozero"), font_color=INK,
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig


def show_published(plan: TrainingPlan, prefix: str) -> None:
    """The plan beside NVIDIA's published runs of its model on its system; nothing where there are none."""
    found = beside(plan)
    if found is None:
        return
    st.caption(f"{md(found['text'])}.")
    with st.expander(f"NVIDIA's published runs of this model on DGX {found['system']}"):
        st.dataframe(published_rows(found), hide_index=True, key=f"{prefix}_published")
        figure = published_figure(found)
        if figure is not None:
            st.plotly_chart(figure, key=f"{prefix}_published_figure")
        st.caption("Tokens/s/GPU of Megatron-Bridge's performance recipes as NVIDIA published them with each NeMo "
                   "release; the step is GBS x sequence / (tokens/s/GPU x GPUs). The same configuration's "
                   "throughput can move between releases, by up to a factor of two for mixtures of experts "
                   f"(BENCHMARKS.md, \"Section 3b's runs release after release\"). Source: {md(found['source'])}.")
