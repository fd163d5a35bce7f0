"""NVIDIA's published runs of a plan's model on its system, beside the plan (:mod:`pase.hardware.published_runs`).

* :func:`published_rows`: the runs as table rows, release by release, the plan's own configuration marked with
  the plan's step against it;
* :func:`show_published`: a line saying it and the table in an expander (Streamlit).
"""

from __future__ import annotations

import streamlit as st

from pase.hardware.published_runs import beside
from pase.model.training_plan import TrainingPlan
from ui.fmt import md

__all__ = ["published_rows", "show_published"]


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


def show_published(plan: TrainingPlan, prefix: str) -> None:
    """The plan beside NVIDIA's published runs of its model on its system; nothing where there are none."""
    found = beside(plan)
    if found is None:
        return
    st.caption(f"{md(found['text'])}.")
    with st.expander(f"NVIDIA's published runs of this model on DGX {found['system']}"):
        st.dataframe(published_rows(found), hide_index=True, key=f"{prefix}_published")
        st.caption("Tokens/s/GPU of Megatron-Bridge's performance recipes as NVIDIA published them with each NeMo "
                   "release; the step is GBS x sequence / (tokens/s/GPU x GPUs). The same configuration's "
                   "throughput can move between releases, by up to a factor of two for mixtures of experts "
                   f"(BENCHMARKS.md, \"Section 3b's runs release after release\"). Source: {md(found['source'])}.")
