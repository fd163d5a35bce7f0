"""The guided first visit: a short tour of the app, shown once per session and reachable again from the sidebar.

The router (``app.py``) calls :func:`tour_button` after the sidebar and
:func:`show_tour` before the page. The tour is open on a session's first run;
"Got it" closes it, and the session remembers that (``st.session_state``) across
pages and reruns until "Show the tour" in the sidebar opens it again.
"""

from __future__ import annotations

import streamlit as st

__all__ = ["TOUR_STEPS", "OPEN_KEY", "tour_button", "show_tour"]

OPEN_KEY = "_tour_open"
TOUR_STEPS = (
    ("Pick a model and a cluster",
     "in the sidebar: a sample network (or your own graph file), a cluster preset and the device count. It opens "
     "on a Transformer on two DGX H100 nodes."),
    ("Solve",
     "on the Explorer: PaSE's search finds, for every layer, how to split it over the devices, and how much faster "
     "that is than plain data parallelism."),
    ("Read the graph:",
     "each layer is coloured by its kind of parallelism (data, tensor or hybrid: the legend says which colour "
     "is which, the same on every page) and each edge by the time its redistribution takes. Hover a layer for "
     "its split."),
    ("Go further:",
     "**Compare** sets the strategy against the baselines, **What-if** sweeps devices, bandwidth or batch, "
     "**Training** models pipelines, ZeRO and recomputation for large models, and **Learn** explains the ideas, "
     "with a walk-through of data, tensor, sequence and pipeline parallelism and ZeRO on one small model."),
)


def _set_open(value: bool) -> None:
    st.session_state[OPEN_KEY] = value


def tour_button() -> None:
    """The sidebar's "Show the tour" button (opens it; does nothing while it is open)."""
    st.sidebar.button("Show the tour", key="tour_show", icon=":material/tour:", on_click=_set_open, args=(True,),
                      help="A four-step guide to the app.")


def show_tour() -> None:
    """The tour, above the page, while it is open (it is on a session's first run)."""
    st.session_state.setdefault(OPEN_KEY, True)
    if not st.session_state[OPEN_KEY]:
        return
    with st.container(border=True, key="tour"):
        st.markdown("**Welcome to the PaSE explorer: four steps to start**")
        st.markdown("\n".join(f"{i}. **{head}** {body}" for i, (head, body) in enumerate(TOUR_STEPS, 1)))
        st.button("Got it", key="tour_dismiss", type="primary", icon=":material/check:", on_click=_set_open,
                  args=(False,), help="Hide the tour; \"Show the tour\" in the sidebar brings it back.")
