"""Training: plan 3-D parallel training (tensor, pipeline, data parallelism) of a large language model.

Search every configuration (:func:`pase.search.stages.search_training`) or
evaluate one (:func:`pase.model.training.evaluate_training`), always in a
worker process (:mod:`ui.jobs`), and see the step's pipeline schedule, the
memory of each stage and where every device sits in the mesh. The problem
(model, cluster, devices, global batch, attention, precision, step-time model)
is the sidebar's, the one every page plans.
"""

import json
from dataclasses import replace

import streamlit as st

from pase.errors import PaseError
from pase.frameworks import FRAMEWORK_CHOICES, FRAMEWORKS, framework, framework_cuts
from pase.io.export import FORMATS as EXPORT_FORMATS, export_plan, file_name
from pase.hardware.cluster import PRESETS
from pase.limits import MAX_BATCH, MAX_DEVICES
from pase.model.pipeline import SCHEDULES
from pase.model.parallelism import DISPATCHERS
from pase.model.training import RECOMPUTE, Parallelism, evaluate_training
from pase.models import LANGUAGE_MODELS
from pase.search.published import published_layouts
from pase.search.stages import search_training, training_baselines
from ui import jobs, state
from pase.model.memory import MemoryOptions
from ui.fmt import fmt_count, fmt_fit, fmt_percent, fmt_time, md
from ui.held import held_default
from ui.moe import show_moe
from ui.published import show_published
from ui.pagekit import require_problem, routed
from ui.stepmodel import CALIBRATED, PEAK, show_model
from ui.training_figures import (
    memory_timeline_figure, mesh_figure, schedule_figure, stage_memory_figure, stage_rows,
)

routed()  # first of all: run under app.py's router (see ui.pagekit.routed)

MODES = ["Search the best plan", "Evaluate a configuration"]
AUTO = "auto (interleaved when v > 1, else 1F1B)"
# Every input of the page, by name, outside the widgets' own state: Streamlit drops a widget's state on runs
# that do not draw it (the other mode, another page), and these values bring it back.
SAVED = "_training_inputs"

st.title("Training plans")
st.caption("3-D parallel training of a large language model: tensor (t), context (c), data (d) and pipeline (p) "
           "parallelism, microbatches, recomputation and ZeRO, modelled step by step "
           "(pase.model.training). The model, cluster, devices, global batch, attention and precision are the "
           "sidebar's, as on every page.")


def kept(widget, name: str, default, *args, **kwargs):
    """``widget(*args, key="tr_" + name, **kwargs)`` whose value survives runs that do not draw it (``default`` at first)."""
    saved = st.session_state.setdefault(SAVED, {})
    key = f"tr_{name}"
    if key not in st.session_state:
        st.session_state[key] = saved.get(name, default)
    value = widget(*args, key=key, **held_default(widget, key, args[1] if len(args) > 1 else None), **kwargs)
    saved[name] = value
    return value


def peak_source(name: str, bytes_per_element: int) -> str:
    """Where cluster ``name``'s peak FLOP/s and memory come from, in words (pase.hardware.cluster.PRESETS)."""
    if name == "paper-model":
        return "the paper's cost-model setting (not a real device's specification; no memory limit)"
    if name not in PRESETS:
        return "the figures typed in the sidebar (Cluster)"
    precision = "bf16/fp16 dense tensor-core" if bytes_per_element == 2 else "fp32"
    return f"the {name} preset's published specification (its GPU's {precision} peak and memory)"


def _plan_sample() -> None:
    """Make the language model picked here the sidebar's (the problem of every page)."""
    st.session_state["in_graph_kind"] = "Sample"
    st.session_state["in_sample"] = st.session_state["tr_pick"]


FASTER = "the faster (searched)"


def expert_inputs(evaluate: bool) -> dict:
    """The Experts inputs of a model with a mixture of experts, as :class:`Parallelism` keywords (``evaluate``: EP
    and ETP too) or, for the search, :func:`search_training`'s."""
    with st.expander("Experts (mixture of experts)", expanded=True):
        cols = st.columns(6 if evaluate else 4)
        out: dict = {}
        if evaluate:
            out["ep"] = int(kept(cols[0].number_input, "ep", 1, "Expert parallel EP", min_value=1,
                                 max_value=MAX_DEVICES, step=1,
                                 help="The experts dealt out over EP devices of a stage (inside a node first)."))
            etp = int(kept(cols[1].number_input, "etp", 0, "Expert tensor ETP", min_value=0, max_value=MAX_DEVICES,
                           step=1, help="Each expert's width split ETP ways; 0: the tensor-parallel size t, as "
                                        "Megatron-Core defaults it."))
            out["etp"] = None if etp == 0 else etp
        rest = cols[2:] if evaluate else cols
        choices = list(DISPATCHERS) if evaluate else [FASTER, *DISPATCHERS]
        via = kept(rest[0].selectbox, f"dispatcher_{int(evaluate)}", choices[0], "Token dispatcher", choices,
                   help="alltoall: Megatron-Core's all-to-all, every token copy sent. deepep: DeepEP, a token sent "
                        "across the network once per other node its experts are on, then over NVLink (keeps "
                        "every token). The search tries both unless one is chosen.")
        drop = kept(rest[2].checkbox, "token_drop", False, "Token drop",
                    help="Each expert takes at most its capacity (the factor times the mean), padded up to it; "
                         "off: dropless, every token kept.")
        if drop:
            capacity = float(kept(rest[3].number_input, "capacity", 1.0, "Capacity factor", min_value=0.01,
                                  max_value=1e3, step=0.25, help="Each expert's capacity over the mean tokens."))
            imbalance = 1.0
        else:
            capacity = None
            imbalance = float(kept(rest[3].number_input, "imbalance", 1.0, "Expert imbalance", min_value=1.0,
                                   max_value=1e3, step=0.25,
                                   help="The busiest expert's tokens over the mean (1: forced balance, as "
                                        "NVIDIA's benchmarks run)."))
        with rest[1]:
            overlap = kept(st.checkbox, "ep_overlap", False, "Overlap the all-to-all",
                           help="Megatron-Core's 1F1B all-to-all overlap: one microbatch's forward merged with "
                                "another's backward, each dispatch and combine hidden behind part of the other's "
                                "layer; DeepEP's 20 SMs slow the computation meanwhile (off: exposed).")
            out["shared_expert_overlap"] = kept(
                st.checkbox, "shared_overlap", False, "Shared experts beside it",
                help="Megatron-Core's shared-expert overlap: each block's shared experts run beside its dispatch "
                     "and combine (the all-to-all dispatcher, without the 1F1B overlap; the search plans it "
                     "where those hold).")
        out.update(expert_imbalance=imbalance, capacity_factor=capacity, expert_overlap=overlap)
        if evaluate:
            out["dispatcher"] = via
        else:
            out["dispatchers"] = DISPATCHERS if via == FASTER else (via,)
        return out


class Work:
    """A progress bar and a Cancel button over one or more jobs run in worker processes (:func:`ui.jobs.run`).

    Clicking Cancel reruns the page, which stops this script at the job's next heartbeat and kills its worker.
    Use as a context manager: both disappear when the work ends.
    """

    def __init__(self, text: str):
        self.bar = st.progress(0.0, text=text)
        self.cancel = st.empty()
        self.cancel.button("Cancel", key="tr_cancel", icon=":material/stop:", help="Stop the work in progress.")
        self.beat = st.empty()

    def __enter__(self) -> "Work":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.empty()
        self.cancel.empty()

    def run(self, fn, *args, what: str, text: str, counts: str | None = None, **kwargs):
        """``fn(*args, **kwargs)`` in a worker, the bar saying ``text``; with ``counts``, the bar follows
        ``fn``'s ``progress(done, total)`` as "``counts``: done of total"."""
        self.bar.progress(0.0, text=text)
        return jobs.run(fn, *args, what=what, heartbeat=self.beat.empty,
                        waiting=lambda: self.bar.progress(0.0, text="Waiting for a free worker (the server is busy)..."),
                        progress=state.throttled_progress(self.bar, counts) if counts else None, **kwargs)


# -- the problem (the sidebar's) ---------------------------------------------------------------------

problem = require_problem()
source, cluster, options = problem.source, problem.cluster, problem.options
if not state.is_language_model(source):
    st.info(f"The sidebar's model, **{md(source)}**, is not a language model this page plans in 3-D (the "
            "large samples and Hugging Face configs of dense models are; the Explorer plans the others per layer). "
            "Choose one here, or in the sidebar (Sample graph, or Upload a config.json): it becomes the problem "
            "of every page.", icon=":material/info:")
    st.selectbox("Plan a language model", list(LANGUAGE_MODELS), index=None, key="tr_pick", on_change=_plan_sample,
                 placeholder="Choose a language model",
                 help="Megatron-LM's GPT runs, GPT-3 and Llama 3 (pase.models), at their published sequence and "
                      "global batch.")
    st.stop()
try:
    build = state.training_builder(source)
    model = state.load_graph(source).name if source.kind == "config" else source.name
except PaseError as exc:
    st.error(f"Cannot plan {md(source)}: {md(exc)}", icon=":material/error:")
    st.stop()
global_batch = state.global_batch(source)
try:
    has_experts = any(layer.op == "MoEExperts" for layer in state.load_graph(source).layers)
except PaseError:
    has_experts = False
devices = cluster.devices
step_model = PEAK if cluster.efficiency is None else CALIBRATED
mode = kept(st.radio, "mode", MODES[0], "Mode", MODES, horizontal=True)
NO_FRAMEWORK = "none (cut anywhere)"
framework_name = kept(st.selectbox, "framework", "any", "Framework", [NO_FRAMEWORK, *FRAMEWORK_CHOICES],
                      help="Keep only what that framework runs, stages cut between whole transformer blocks "
                           "(pase.frameworks: Megatron-LM main 2026 with megatron-core 0.16, torchtitan 0.2.2, "
                           "DeepSpeed 0.16-0.19); any: every configuration cut between blocks, and the best each "
                           "framework runs; none: cuts anywhere between layers (where only the residual "
                           "crosses when that is faster), as no framework runs them.")
chosen_framework = None if framework_name == NO_FRAMEWORK else framework_name
cap = cluster.memory_bytes
st.markdown(f"**{md(model)}**, global batch {global_batch:,} · **{md(cluster)}**, "
            f"{'no memory limit' if cap is None else f'{cap / 1e9:.3g} GB per device'} · attention "
            f"{options.attention}, precision {options.precision}")
st.caption(f"Hardware figures: {md(peak_source(cluster.name, cluster.bytes_per_element))}. Change the model, "
           "cluster, devices, batch, attention or precision in the sidebar: every page plans the same problem.")
show_model([cluster])


def headline(plan) -> None:
    """Step time, tokens/s, MFU and HFU of the peak, and the largest stage's memory against the capacity."""
    d = plan.to_dict()
    model, peak = d["step_time_model"], plan.cluster.peak_flops
    m1, m2, m3, m4, m5 = st.columns(5)
    m1.metric("Step time", fmt_time(plan.step_time_s),
              help=f"{plan.parallelism.microbatches} microbatches through the {plan.parallelism.schedule} schedule, "
                   "then the exposed gradient reduction and, on a calibrated cluster, the optimizer step.")
    tokens = d["tokens_per_s"]
    m2.metric("Tokens/s", "n/a" if tokens is None else fmt_count(tokens),
              help="Global batch x sequence length / step time.")
    for col, label, value, what in ((m3, "MFU", plan.mfu, "model FLOPs"),
                                    (m4, "HFU", plan.hfu, "hardware FLOPs (recomputation included)")):
        col.metric(f"{label} (of peak)", "n/a" if value is None else f"{value:.1%}",
                   help=f"{what} per device per second / the cluster's peak, {peak / 1e12:g} TFLOP/s per device.")
    mem = plan.memory_per_device_bytes
    fits = plan.fits_memory
    reserve = MemoryOptions().reserve_on(plan.cluster)
    m5.metric("Memory per device", f"{mem / 1e9:.3g} GB",
              delta=None if fits is None else fmt_fit(mem, plan.memory_capacity_bytes),
              delta_color="normal" if fits else "inverse",
              help="The stage needing most: weights, gradients, optimizer state, FP8 weight copies, activations in "
                   f"flight, transient buffers and the reserve of {reserve / 1e9:.3g} GB per device (CUDA context, "
                   "workspaces, NCCL buffers, fragmentation; the sidebar's Nodes and memory).")
    st.caption(f"MFU and HFU are of the cluster's peak, {peak / 1e12:g} TFLOP/s per device: "
               f"{md(peak_source(plan.cluster.name, plan.cluster.bytes_per_element))}. "
               + ("Step times at peak rates (the paper's model), so real runs are slower. "
                  if plan.cluster.efficiency is None else "Step times by the calibrated model (above, with its "
                                                          "sources). ")
               + f"Bubble: {fmt_percent(plan.schedule.bubble_fraction)} of the busiest device's step. "
               + f"{md(plan.label)}. Attention {plan.attention}, precision {plan.precision}"
               + (f" ({scaling})" if (scaling := model.get("fp8_scaling")) else "") + ": "
               + md(model["mfu_counting"]) + ".")
    accuracy = model.get("accuracy")
    if accuracy is not None:
        st.caption(f"How far to trust the step: {md(accuracy['text'])}.")
    if fits is False:
        st.warning(f"This plan needs {mem / 1e9:.3g} GB on a device of its largest stage, more than the "
                   f"{cap_text(plan)} it has: it would not run.", icon=":material/warning:")


def cap_text(plan) -> str:
    """The capacity per device, ``"80 GB"``."""
    return f"{plan.memory_capacity_bytes / 1e9:.3g} GB"


# The framework whose rules each export format writes (the others write any plan).
FORMAT_FRAMEWORK = {"megatron": "megatron", "megatron-bridge": "megatron", "torchtitan": "torchtitan",
                    "deepspeed": "deepspeed"}


def show_plan(plan, prefix: str, runnable: dict | None = None) -> None:
    """The plan's headline, schedule, stage memory (peak and over the step), mesh and stage table (element keys
    start with ``prefix``); ``runnable`` (framework name -> its best plan, or None) offers, beside an export the
    plan cannot be written as, the best plan that framework runs."""
    headline(plan)
    show_published(plan, prefix)
    st.subheader("Pipeline schedule")
    st.plotly_chart(schedule_figure(plan), key=f"{prefix}_gantt")
    st.caption("One row per pipeline stage (device position): forward and backward of each microbatch (its number "
               "on the bar when wide enough; drag to zoom in on hundreds of them), the gradient reduction in the thin lane below, "
               "idle time in grey.")
    a, b = st.columns(2)
    with a:
        st.subheader("Memory per stage")
        peak_tab, timeline_tab = st.tabs(["Peak", "Over the step"])
        with peak_tab:
            st.plotly_chart(stage_memory_figure(plan), key=f"{prefix}_memory")
        with timeline_tab:
            st.plotly_chart(memory_timeline_figure(plan), key=f"{prefix}_memory_timeline")
            big = max(s.transient_bytes for s in plan.stages)
            st.caption("Each stage's memory per device through the step, on the schedule's time axis: weights, "
                       "gradients and optimizer state all step, plus the activations each forward keeps until its "
                       f"backward frees them; the transient buffers (up to {big / 1e9:.3g} GB, for moments) are in "
                       "the peak bars, not the lines"
                       + (", and each chunk's activations are taken as an even share of its stage's"
                          if plan.parallelism.virtual_stages > 1 else "") + ".")
        st.caption("Per device of each stage, in GB (1e9 bytes); the capacity line: "
                   f"{md(peak_source(plan.cluster.name, plan.cluster.bytes_per_element))}.")
    with b:
        st.subheader("Devices")
        st.plotly_chart(mesh_figure(plan), key=f"{prefix}_mesh")
        st.caption("t, d, p: each device's tensor, data and pipeline coordinates (the t x c group innermost on the "
                   "mesh, then the data-parallel replicas, then the pipeline).")
    show_moe(plan, prefix)
    st.subheader("Stages")
    st.dataframe(stage_rows(plan), hide_index=True, key=f"{prefix}_stages")
    st.download_button("Plan (JSON)", json.dumps(plan.to_dict(), indent=1), file_name=file_name(model, "training"),
                       mime="application/json", key=f"{prefix}_json", icon=":material/download:")
    e1, e2 = st.columns([1, 2])
    export_format = e1.selectbox("Export as", list(EXPORT_FORMATS), index=None, placeholder="Choose a framework",
                                 key=f"{prefix}_export_format",
                                 help="Megatron-LM arguments or a Megatron-Bridge override, a torchtitan job TOML, a "
                                      "DeepSpeed config, DTensor placements or JAX PartitionSpecs of the "
                                      "tensor-parallel layers, or the launch line (docs/plan-format.md)")
    try:
        exported = None if export_format is None else export_plan(plan.to_dict(), export_format)
    except PaseError as exc:  # a setting the framework lacks: say which, and offer its best runnable plan
        e2.error(md(exc), icon=":material/block:")
        other = (runnable or {}).get(FORMAT_FRAMEWORK.get(export_format))
        if other is not None:
            slower = other.step_time_s / plan.step_time_s - 1
            e2.download_button(f"Export the best plan {FRAMEWORKS[FORMAT_FRAMEWORK[export_format]].title} runs "
                               f"({other.label}, {slower:+.1%})", export_plan(other.to_dict(), export_format),
                               file_name=file_name(model, export_format), key=f"{prefix}_export_runnable",
                               icon=":material/download:")
    else:
        if exported is not None:
            e2.download_button(f"Export ({export_format})", exported, file_name=file_name(model, export_format),
                               key=f"{prefix}_export", icon=":material/download:")


store = state.stores()["misc"]

# -- search ------------------------------------------------------------------------------------------

if mode == MODES[0]:
    routing = expert_inputs(evaluate=False) if has_experts else {}
    key = ("training-search", problem, chosen_framework, tuple(sorted(routing.items())))
    found = store.get(key)
    clicked = st.button("Search", type="primary", key="tr_search", icon=":material/play_arrow:",
                        help="Model every configuration that tiles the mesh and keep the fastest that fits.")
    if clicked and found is None:
        try:
            with Work("Searching...") as work:
                search = work.run(search_training, build, cluster, global_batch, options=options,
                                  framework=chosen_framework, **routing, what="the training search",
                                  text="Searching...", counts="Microbatch sizes x groups modelled")
                best = work.run(evaluate_training, build, cluster, search.best.parallelism, record=True,
                                options=options,
                                label=search.best.label, what="recording the best plan's schedule",
                                text="Recording the best plan's schedule...")
                baselines = work.run(training_baselines, build, cluster, global_batch, options=options,
                                     what="costing the baselines",
                                     text="Costing the baselines (data parallel, ZeRO-3, Megatron)...")
                layouts = work.run(published_layouts, build, cluster, global_batch, options=options, **routing,
                                   what="pricing NVIDIA's published layouts",
                                   text="Pricing the layouts NVIDIA published for this problem...")
            found = (search, best, baselines, layouts)
            store.put(key, found)
        except PaseError as exc:
            st.error(f"{type(exc).__name__}: {md(exc)}", icon=":material/error:")
            st.stop()
    if found is None:
        if st.session_state.get("tr_cancel"):
            st.info("Search cancelled.", icon=":material/stop_circle:")
        st.info("Press **Search** to model every tensor, pipeline and data-parallel configuration (with "
                "microbatch sizes, schedules, recomputation, ZeRO and sequence parallelism) and keep the fastest "
                "that fits.", icon=":material/info:")
        st.stop()
    search, best, baselines, layouts = found
    st.success(f"Best of {search.configurations:,} configurations modelled ({search.skipped:,} skipped by the "
               f"bound) in {fmt_time(search.search_time_s)}: **{md(best.label)}**.", icon=":material/check_circle:")
    for note in search.notes:
        st.caption(md(note))
    show_plan(best, "tr_best", search.by_framework or (
        {chosen_framework: best} if chosen_framework in FRAMEWORKS else None))
    for name, r in search.by_framework.items():
        st.caption(f"Best plan {md(FRAMEWORKS[name])} runs: " + ("none of the configurations." if r is None else
                   f"**{md(r.label)}**, {fmt_time(r.step_time_s)} ({r.step_time_s / best.step_time_s - 1:+.1%})."))
    st.subheader("Runners-up and baselines")
    def row(name: str, r, configuration: str = "") -> dict:
        """A plan's row of the table (``r`` None: a layout pase found no plan at, ``configuration`` its own)."""
        if r is None:
            return {"plan": name, "configuration": configuration, "step time": "-", "slower than the best": "-",
                    "memory per device GB": None, "fits": None}
        return {"plan": name, "configuration": r.label, "step time": fmt_time(r.step_time_s),
                "slower than the best": "-" if r is best else f"{r.step_time_s / best.step_time_s - 1:+.1%}",
                "memory per device GB": round(r.memory_per_device_bytes / 1e9, 3), "fits": r.fits_memory}

    rows = [row("best", best), *(row("runner-up", r) for r in search.runners_up),
            *(row(name, r) for name, r in baselines.items()),
            *(row(f"NVIDIA's layout ({', '.join(run.release for run in layout.runs)})", layout.plan, layout.layout)
              for layout in layouts)]
    st.dataframe(rows, hide_index=True, key="tr_runners")
    st.caption("Baselines are what practitioners run (pase.search.stages.training_baselines), each at its best "
               "microbatch, costed by the same model; a baseline that does not fit shows its smallest-memory "
               f"variant. The search's step is within {fmt_time(search.gap_bound_s)} of any stage cut of its "
               "configuration."
               + (" NVIDIA's layouts are those Megatron-Bridge's performance tables publish for this problem (its "
                  "GPUs, global batch, sequence and precision), at pase's best for what the tables leave out "
                  "(recomputation, dispatcher, schedule details; pase.search.published); NVIDIA measured "
                  + "; ".join(f"{md(layout.layout)}: " + ", ".join(f"{run.release} {fmt_time(run.step_s)}"
                                                                   for run in layout.runs)
                              + ("" if layout.plan is not None else f" (pase: {md(layout.problem)})")
                              for layout in layouts) + "." if layouts else ""))
    st.stop()

# -- evaluate ----------------------------------------------------------------------------------------

e1, e2, e3, e4, e5 = st.columns(5)
t = int(kept(e1.number_input, "t", 8, "Tensor t", min_value=1, max_value=MAX_DEVICES, step=1))
p = int(kept(e2.number_input, "p", 1, "Pipeline p", min_value=1, max_value=MAX_DEVICES, step=1))
c = int(kept(e3.number_input, "c", 1, "Context c", min_value=1, max_value=MAX_DEVICES, step=1))
v = int(kept(e4.number_input, "v", 1, "Chunks per stage v", min_value=1, max_value=64, step=1,
             help="Virtual stages per device: more than 1 needs the interleaved schedule."))
b = int(kept(e5.number_input, "microbatch", 1, "Microbatch size", min_value=1, max_value=MAX_BATCH, step=1,
             help="Samples per microbatch per data-parallel replica."))
f1, f2, f3, f4 = st.columns(4)
recompute = kept(f1.selectbox, "recompute", "none", "Recomputation", list(RECOMPUTE))
zero = int(kept(f2.selectbox, "zero", 0, "ZeRO stage", [0, 1, 2, 3]))
schedule = kept(f3.selectbox, "schedule", AUTO, "Schedule", [AUTO, *SCHEDULES])
with f4:
    sp = kept(st.checkbox, "sp", False, "Sequence parallelism")
    # Per model, as the search and `pase evaluate` default it: overlapped on a calibrated cluster (frameworks
    # overlap it), not at peak rates (the paper's model does not).
    overlap = kept(st.checkbox, f"overlap_{step_model}", step_model == CALIBRATED, "Overlap gradient reduction",
                   help="Hide each device's reduction behind its last backward. On by default under the "
                        "calibrated model, as the search assumes there; off at peak rates (the paper's).")
    asked = kept(st.checkbox, "tp_overlap", False, "Overlap tensor-parallel backward",
                 disabled=step_model != CALIBRATED,
                 help="Megatron-LM's asynchronous backward (its default since 2022): each product reduces its "
                      "input gradient while it computes its weight gradient. Priced under the calibrated model "
                      "only; off, every tensor-parallel collective is exposed.")
    tp_overlap = asked and step_model == CALIBRATED
experts = expert_inputs(evaluate=True) if has_experts else {}

per_group = t * p * c
if devices % per_group:
    st.error(f"t x p x c = {t} x {p} x {c} = {per_group} does not divide the {devices} devices, so no whole "
             "data-parallel size d fits; choose sizes whose product divides the device count.",
             icon=":material/error:")
    st.stop()
d = devices // per_group
st.markdown(f"Data parallel **d = {devices} / (t p c) = {d}**")
try:
    par = Parallelism(tensor=t, pipeline=p, data=d, context=c, virtual_stages=v, microbatch_size=b,
                      global_batch=global_batch, sequence_parallel=sp, recompute=recompute, zero=zero,
                      schedule=None if schedule == AUTO else schedule, overlap=overlap, tp_overlap=tp_overlap,
                      **experts)
except PaseError as exc:
    st.error(f"Not a valid configuration: {md(exc)}", icon=":material/error:")
    st.stop()
key = ("training-eval", problem, par, chosen_framework)
plan = store.get(key)
if st.button("Evaluate", type="primary", key="tr_evaluate", icon=":material/play_arrow:",
             help="Model this configuration's step, memory and schedule.") and plan is None:
    try:
        with Work(f"Evaluating {par.describe()}...") as work:
            if chosen_framework is not None:  # its stage cuts (any: whole blocks), or why it does not run this
                par = replace(par, stage_cuts=work.run(
                    framework_cuts, framework(chosen_framework) if chosen_framework in FRAMEWORKS else None,
                    build, cluster, par, options, {},
                    what="the framework's stage cuts", text=f"Cutting the stages as {chosen_framework} does..."))
            plan = work.run(evaluate_training, build, cluster, par, record=True, options=options,
                            what="the evaluation",
                            text=f"Evaluating {par.describe()} (building the model at the microbatch size, "
                                 "costing its layers, simulating the schedule)...")
        store.put(key, plan)
    except PaseError as exc:
        st.error(f"This configuration cannot run: {md(exc)}", icon=":material/error:")
        st.stop()
if plan is None:
    st.info(f"Press **Evaluate** to model {md(par.describe())} ({par.microbatches} microbatches per step).",
            icon=":material/info:")
    st.stop()
show_plan(plan, "tr_eval")
