"""Pieces several pages share: running under the router, requiring a problem, the Solve button, headline numbers."""

from __future__ import annotations

import contextvars
import runpy
import time
from pathlib import Path

import streamlit as st

from pase.analysis.sweep import device_use
from pase.errors import PaseError
from pase.planner import Plan
from ui import state
from ui.fmt import fmt_count, fmt_time, md

__all__ = ["routed", "run_routed", "require_problem", "solve_button", "solve_training_button", "headline",
           "devices_used_text"]

APP = Path(__file__).resolve().parents[1] / "app.py"
# Seconds a search runs before its progress bar and Cancel button are drawn: a quick search (the landing page's,
# a few tenths of a second) draws neither, so the browser only draws its result.
SHOW_PROGRESS_AFTER_S = 0.4
# True while app.py's router runs the page it chose (in this script run's thread).
_ROUTED: contextvars.ContextVar[bool] = contextvars.ContextVar("pase_routed", default=False)


def run_routed(page) -> None:
    """Run ``page``, the one ``st.navigation`` chose; for app.py, the router."""
    token = _ROUTED.set(True)
    try:
        page.run()
    finally:
        _ROUTED.reset(token)


def routed() -> None:
    """Make sure this page runs under app.py's router; every page script calls it first.

    The page scripts live in ``pages/`` beside app.py, which puts Streamlit in its
    older folder-based navigation until the server process's first ``st.navigation``
    call: the first request of a fresh server to ``/compare`` (and every run of
    ``AppTest``, which starts afresh) runs the page script alone, without the page
    config, the sidebar or the router's navigation. Then this runs the router, which
    takes over for good (``st.navigation`` ends the folder mode), draws the sidebar and
    runs this page again; the lone run stops here.
    """
    if _ROUTED.get():
        return
    runpy.run_path(str(APP), run_name="__main__")
    st.stop()


def require_problem() -> state.Problem:
    """The sidebar's problem; otherwise say why there is none and stop this page."""
    problem, why = state.current_problem()
    if problem is None:
        if why and (why.startswith("Cannot") or "error" in why.lower()):
            st.error(md(why), icon=":material/error:")
        else:
            st.info(md(why) if why else "Choose a graph in the sidebar.", icon=":material/info:")
        st.stop()
    return problem


def solve_button(problem: state.Problem, *, key: str = "solve", label: str = "Solve") -> Plan | None:
    """The primary action: run the search with a progress bar. Returns the plan (cached or new) or None."""
    return _action_button(key, label, "Find the strategy of least estimated step time (the paper's search).",
                          state.cached_plan(problem), "Building cost tables...", "Search step",
                          lambda **kw: state.solve(problem, **kw))


def solve_training_button(problem: state.Problem, *, key: str = "solve", label: str = "Solve"):
    """:func:`solve_button` for a language model: the joint 3-D search (:func:`ui.state.solve_training`), as
    ``pase solve`` runs it. Returns ``(search, group plan)`` (cached or new) or None."""
    return _action_button(key, label, "Find the fastest 3-D parallel configuration that fits (tensor, pipeline, "
                                      "data parallelism, microbatch, schedule, recomputation, ZeRO), as "
                                      "`pase solve` does for language models.",
                          state.cached_training(problem), "Modelling 3-D configurations...",
                          "Microbatch sizes x groups modelled", lambda **kw: state.solve_training(problem, **kw))


def _action_button(key: str, label: str, help: str, cached, text: str, counts: str, compute):
    """A Solve button: ``cached`` if there is one; on a click, ``compute(progress=, waiting=, heartbeat=)``
    under a progress bar (``text`` at first, then "``counts``: done of total") and a Cancel button, both drawn
    once it has run :data:`SHOW_PROGRESS_AFTER_S`. A PaseError is shown with st.error, returning None."""
    cancelled = st.session_state.get(f"{key}_cancel")
    clicked = st.button(label, type="primary", key=key, icon=":material/play_arrow:", help=help)
    if not clicked:
        if cancelled and cached is None:
            st.info("Search cancelled.", icon=":material/stop_circle:")
        return cached
    if cached is not None:
        return cached
    bar, cancel, beat = st.empty(), st.empty(), st.empty()
    started = time.monotonic()
    shown = [False]

    def show() -> bool:
        """Draw the progress bar and the Cancel button once the search has run SHOW_PROGRESS_AFTER_S; whether
        they are drawn."""
        if not shown[0] and time.monotonic() - started >= SHOW_PROGRESS_AFTER_S:
            shown[0] = True
            bar.progress(0.0, text=text)
            # Clicking Cancel reruns the page, which stops this script at its next heartbeat and kills the worker.
            cancel.button("Cancel", key=f"{key}_cancel", icon=":material/stop:", help="Stop the search.")
        return shown[0]

    counted = state.throttled_progress(bar, counts)

    def progress(done: int, total: int) -> None:
        if show():
            counted(done, total)

    def waiting() -> None:
        if show():
            bar.progress(0.0, text="Waiting for a free worker (the server is busy)...")

    def heartbeat() -> None:
        show()
        beat.empty()

    try:
        return compute(progress=progress, waiting=waiting, heartbeat=heartbeat)
    except PaseError as exc:
        st.error(f"{type(exc).__name__}: {md(exc)}", icon=":material/error:")
        return None
    finally:
        bar.empty()
        cancel.empty()


def devices_used_text(plan: Plan) -> str:
    """How many of ``plan``'s layers split over all its devices, as a count ("1 of 214 layers uses all 16."): a
    share rounded to whole percent read "0% of layers use all 16" beside "at most 16 of 16"."""
    p = plan.cluster.devices
    full = sum(min(int(layer.devices), p) == p for layer in plan.layers)
    n = len(plan.layers)
    verb = "uses" if full == 1 else "use"
    return f"all {n:,} layers use all {p}." if full == n and n > 1 else f"{full:,} of {n:,} layers {verb} all {p}."


def headline(plan: Plan, dp: Plan | None) -> None:
    """Four metrics: estimated step time, speedup over data parallelism, search time, largest dependent set.

    Below them, how many devices the plan's layers split over (the most, and the share of layers using all of
    them), with a warning when some devices are idle throughout; the speedup names data parallelism's device
    count when it uses fewer than the cluster's.
    """
    p = plan.cluster.devices
    use = device_use(plan)
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Estimated step time", fmt_time(plan.step_time_s),
              help="The paper's cost F(G, φ) divided by the device's peak FLOP/s (peak rates, the paper's model)."
              if plan.cluster.efficiency is None else
              "Each layer's kernels by the roofline and its communication at the links' achievable efficiency and "
              "latency (the calibrated model, described under the page's title with its sources).")
    if dp is not None:
        dp_used = device_use(dp).used
        label = "Speedup over data parallelism" + (f" (on {dp_used} of {p} devices)" if dp_used < p else "")
        c2.metric(label, f"{plan.speedup_over(dp):.2f}×",
                  help=f"Data parallelism: {fmt_time(dp.step_time_s)} per step under the same model"
                       + (f", splitting the batch over {dp_used} devices (the batch cannot be split {p} "
                          "ways); the others only replicate its work." if dp_used < p else "."))
    else:
        c2.metric("Speedup over data parallelism", "n/a")
    search = plan.search
    if search is not None:
        c3.metric("Search time", fmt_time(search.search_time_s))
        c4.metric("Largest dependent set", str(search.max_dependent_set),
                  help=f"Largest table: {fmt_count(search.max_table_entries)} entries.")
    else:
        c3.metric("Search time", "n/a")
        c4.metric("Largest dependent set", "n/a")
    st.caption(f"Devices used: layers split over at most {use.used} of {p}; {devices_used_text(plan)}")
    if use.idle:
        st.warning(f"{use.idle} of {p} devices are idle: no layer splits over more than {use.used} (a dimension "
                   f"too small to split {p} ways, e.g. a batch smaller than the device count).", icon=":material/warning:")
    if not plan.exact:
        st.warning("No elimination ordering keeps the exact search within memory (dense connections, as in "
                   "DenseNet), so windows of layers were optimised exactly, starting from every baseline: the "
                   "strategy is never worse than the best baseline, but optimality is not guaranteed.",
                   icon=":material/info:")
