"""The joint search of 3-D parallel training: every global knob, the layer splits inside a stage, the cuts.

:func:`search_training` enumerates, for a model, a cluster and a global
batch, every configuration of :class:`~pase.model.training.Parallelism` the
space below allows and models each (:mod:`pase.model.training`), keeping the
fastest whose every stage fits device memory:

* tensor ``t``, context ``c``, data ``d`` and pipeline ``p`` sizes with
  ``t c d p`` the cluster's devices, placed innermost first on the mesh (only
  placements that tile it; ``p`` at most the layers);
* microbatch sizes ``b`` dividing ``G / d`` (up to ``max_microbatch``);
* schedules 1F1B, GPipe and interleaved with ``v`` in ``virtual_stages`` (when
  the microbatches are a multiple of ``p``); the zero-bubble ``zb1p`` (one
  chunk a device, or ``v``) only for a framework that runs it (torchtitan),
  or when ``schedules`` names it;
* recomputation none, selective, full; ZeRO 0 to 3; sequence parallelism on or off;
* for a model with experts, expert parallelism ``ep`` (the divisors of the
  experts) and expert tensor parallelism ``etp`` (1 or ``t``) with ``etp x ep``
  dividing the stage's ``t c d`` devices, placed innermost first (EP inside a
  node before it leaves it; :mod:`pase.model.experts`), and the token
  dispatcher: the all-to-all, and DeepEP where expert parallelism is on and
  every token is kept (DeepEP does not drop tokens);
* the layer splits on each ``t x c`` group: Megatron's rule and, when
  ``intra_search`` is on and the group has more than one device, the exact
  per-layer search (:mod:`pase.search.exact`) of one microbatch on the group
  with the weight-gradient reductions counted once per step (``1/m`` per
  microbatch);
* the gradient reduction overlapped with the last backward and ZeRO-3's
  gathers with the compute on a calibrated cluster (as frameworks do), serial
  otherwise (the paper's model);
* stage cuts: for each of the above, the time-balanced cut (the smallest
  slowest stage, :func:`~pase.model.training.balanced_cuts`).

With ``framework`` the search keeps only what that framework runs
(:mod:`pase.frameworks`: its ZeRO stages, schedules, recomputation, context
parallelism, precision) and cuts the stages between whole transformer blocks
as it does (balanced over the blocks, or DeepSpeed's uniform partition), the
embedding on the first stage and the head on the last. With ``"any"`` it
keeps every configuration, cut between blocks, and also the best plan each
framework runs (``TrainingSearch.by_framework``).

Exact over that space: every configuration is modelled, except those
skipped because a lower bound of their step already reaches the slowest of
the plans kept (the best and its runners-up), so skipping never loses one.
The configurations are tried best first: in the order of their cheapest bound
(the average device's work) they are placed (stage cuts, memory) and given a
tighter bound (the first microbatch's way through the stages before a device
and back, :func:`~pase.model.training.assemble`), and a placed configuration's
schedule is simulated only once no other bound is lower, so the kept plans
are the fastest early and, once the cheapest bound left reaches the last of
them, every other configuration is skipped at once. The
cuts are not searched for memory: a configuration whose balanced cut does
not fit is dropped even if another cut would fit. The result carries
``gap_bound_s``: its step time minus a lower bound of any cut of the same
configuration (the average device load times ``m``), bounding what searching
the cuts further could gain.

Identical work is done once: the layer times of a (microbatch, group,
sequence parallelism, recomputation, layer splits) are shared by every
pipeline size, schedule and ZeRO stage, and a long pipeline's schedule whose
times are all those of one simulated before (ZeRO stages often are) is not
simulated again (:func:`~pase.model.training.assemble`).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from pase.errors import ConfigurationError, SearchTooLargeError
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.model.cost import build_cost_model, check_precision
from pase.model.experts import moe_blocks
from pase.model.parallelism import DISPATCHERS
from pase.model.recompute import search_sets
from pase.model.memory import InsufficientMemoryError, MemoryOptions
from pase.model.pipeline import SCHEDULES, ZERO_BUBBLE, schedule_problem
from pase.model.training import (
    RECOMPUTE, Deferred, LayerTimes, Parallelism, TrainingPlan, assemble, average_load_s, cached_graph, cached_times,
    cut_weights_s, evaluate_training, group_cluster, group_extents, layer_times,
)
from pase.search.solver import exact

__all__ = ["TrainingSearch", "search_training", "training_baselines", "divisors"]

MEGATRON_SPLITS = "Megatron layer splits"
SEARCHED_SPLITS = "searched layer splits"


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    small = [k for k in range(1, int(n ** 0.5) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


@dataclass(frozen=True)
class TrainingSearch:
    """What :func:`search_training` found.

    ``best`` is the fastest configuration that fits; ``runners_up`` the next
    fastest distinct ones (best first), for "why this one";
    ``configurations`` the number modelled and ``skipped`` those pruned by
    the bound; ``gap_bound_s`` as the module docstring says.
    """

    best: TrainingPlan
    runners_up: tuple[TrainingPlan, ...]
    configurations: int
    skipped: int
    search_time_s: float
    gap_bound_s: float
    notes: tuple[str, ...] = ()
    framework: str | None = None
    by_framework: Mapping[str, TrainingPlan | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The best plan's JSON plus the search's statistics and runners-up; with a framework, its name, and
        under ``"any"`` the best plan each framework runs (``by_framework``: label, step, how much slower, or
        null where it runs none)."""
        out = self.best.to_dict()
        out["search"] = {"configurations": self.configurations, "skipped_by_bound": self.skipped,
                         "search_time_s": self.search_time_s, "gap_bound_s": self.gap_bound_s,
                         "notes": list(self.notes)}
        if self.framework is not None:
            out["framework"] = self.framework
        if self.by_framework:
            out["by_framework"] = {
                name: None if r is None else {
                    "label": r.label, "step_time_s": r.step_time_s,
                    "slower_by": r.step_time_s / self.best.step_time_s - 1 if self.best.step_time_s else None,
                    "memory_per_device_bytes": r.memory_per_device_bytes}
                for name, r in self.by_framework.items()}
        out["runners_up"] = [{"label": r.label, "step_time_s": r.step_time_s,
                              "slower_by": r.step_time_s / self.best.step_time_s - 1 if self.best.step_time_s else None,
                              "memory_per_device_bytes": r.memory_per_device_bytes} for r in self.runners_up]
        return out


def _groups(cluster: Cluster, devices: int, sequence: int | None, contexts: Sequence[int]):
    """(t, c, d, p, the data-parallel group's mesh extents) of the placements that tile the mesh."""
    for group in divisors(devices):
        for c in contexts:
            if group % c or (c > 1 and (sequence is None or sequence % c)):
                continue
            rest = devices // group
            for p in divisors(rest):
                d = rest // p
                try:
                    _, data_k, _ = group_extents(cluster.mesh, (group, d, p), ("group", "data", "pipeline"))
                except ConfigurationError:
                    continue
                yield group // c, c, d, p, data_k


def _overlaps(shared: bool, expert_overlap: bool, ep: int, dispatcher: str) -> dict[str, bool]:
    """The overlaps a searched plan of expert parallelism ``ep`` and ``dispatcher`` runs, as ``Parallelism``
    keywords: the 1F1B all-to-all overlap where asked for and there are exchanges (EP > 1), and the shared experts
    beside the all-to-all where asked for (``shared``), with the all-to-all dispatcher, and where the 1F1B overlap
    does not hide the same exchanges (Megatron-Core runs one or the other)."""
    merged = expert_overlap and ep > 1
    return {"expert_overlap": merged, "shared_expert_overlap": shared and dispatcher == "alltoall" and not merged}


def search_training(
    build: Callable[[int], Graph],
    cluster: Cluster,
    global_batch: int,
    *,
    options: ConfigOptions = ConfigOptions(),
    memory: MemoryOptions = MemoryOptions(),
    memory_limit_bytes: float | None = None,
    tensor: Sequence[int] | None = None,
    pipeline: Sequence[int] | None = None,
    context: Sequence[int] = (1,),
    microbatch_sizes: Sequence[int] | None = None,
    max_microbatch: int = 8,
    schedules: Sequence[str] | None = None,
    virtual_stages: Sequence[int] = (2, 3, 4),
    recompute: Sequence[str] = RECOMPUTE,
    zero: Sequence[int] = (0, 1, 2, 3),
    sequence_parallel: Sequence[bool] = (False, True),
    intra_search: bool = False,
    tp_overlap: bool = False,
    tp_comm_overlap: bool = False,
    expert: Sequence[int] | None = None,
    expert_tensor: Sequence[int] | None = None,
    expert_imbalance: float = 1.0,
    capacity_factor: float | None = None,
    dispatchers: Sequence[str] = DISPATCHERS,
    expert_overlap: bool = False,
    fp8_dispatch: bool = False,
    shared_expert_overlap: bool = False,
    runners_up: int = 5,
    progress: Callable[[int, int], None] | None = None,
    cache: dict | None = None,
    framework: str | None = None,
) -> TrainingSearch:
    """Find the fastest 3-D parallel configuration that fits (see the module docstring).

    ``build(batch)`` builds the model at a batch size. ``tensor``,
    ``pipeline``, ``context`` and ``microbatch_sizes`` restrict those sizes
    (default: all that tile the mesh; microbatches up to ``max_microbatch``);
    the other sequences restrict their knob; ``expert`` and ``expert_tensor``
    restrict EP and ETP (default: every divisor of the experts, and 1 or
    ``t``), ``expert_imbalance`` and ``capacity_factor`` are the routing's
    (:class:`~pase.model.training.Parallelism`); ``dispatchers`` the token
    dispatchers to try (DeepEP only with EP and dropless routing);
    ``expert_overlap`` and ``fp8_dispatch`` plan for Megatron-Core's 1F1B
    all-to-all overlap and FP8 dispatch wherever expert parallelism is on (a
    framework asked for keeps only the plans it runs them in);
    ``shared_expert_overlap`` for the shared experts beside the all-to-all
    wherever the all-to-all dispatcher runs without the 1F1B overlap. ``tp_overlap``
    plans for Megatron-LM's asynchronous tensor-parallel backward,
    ``tp_comm_overlap`` for Transformer Engine's forward overlap
    (:class:`~pase.model.training.Parallelism`). ``memory_limit_bytes``
    defaults to the cluster's memory. ``progress(done, total)`` counts (microbatch, group) pairs.
    ``cache`` (a dict, :func:`~pase.model.training.cached_times`) shares the
    graphs and layer times with later calls for the same model, cluster and
    options (:func:`training_baselines`, ``evaluate_training``).
    ``framework`` (``"megatron"``, ``"torchtitan"``, ``"deepspeed"`` or
    ``"any"``; None: every configuration, cut anywhere) as the module
    docstring says.

    Raises
    ------
    ConfigurationError
        The global batch is not a positive integer, the precision cannot be
        priced on ``cluster`` (:func:`pase.model.cost.check_precision`), the
        restrictions leave nothing to try, the framework is unknown or runs
        none of them, or the model has no transformer blocks to cut between.
    InsufficientMemoryError
        No configuration fits; the message gives the least memory seen.
    """
    from pase.analysis.throughput import sequence_length

    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ConfigurationError(f"the global batch must be a positive integer, not {global_batch!r}")
    check_precision(options, cluster)  # before any configuration is tried: every one would be refused alike
    started = time.perf_counter()
    capacity = cluster.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    overlap = cluster.efficiency is not None  # frameworks overlap the gradient reduction; the paper's model does not
    cache = {} if cache is None else cache
    probe = cached_graph(build, 1, cache)
    layers, sequence = len(probe), sequence_length(probe)
    experts = {b.experts for b in moe_blocks(probe)}
    module_sets = search_sets(probe)
    targets = _targets(framework)
    # DeepEP keeps every token; a framework asked for alone tries only the dispatchers it runs.
    usable = tuple(via for via in dispatchers if (via == "alltoall" or capacity_factor is None)
                   and (framework in (None, "any") or via in targets[framework].dispatchers))
    if experts and not usable:
        raise ConfigurationError(
            "DeepEP keeps every token: it does not drop tokens past a capacity (--capacity-factor); search with "
            "--dispatcher alltoall or without a capacity factor" if capacity_factor is not None else
            f"{targets[framework].title} does not run the {', '.join(dispatchers)} dispatcher; search with "
            f"--dispatcher {' or '.join(targets[framework].dispatchers)}")
    if schedules is None:  # zero-bubble schedules only where a framework asked for runs them
        schedules = [s for s in SCHEDULES if s not in ZERO_BUBBLE
                     or any(s in f.schedules for f in targets.values())]
    if targets:
        from pase.frameworks import block_layout

        layers = block_layout([l.name for l in probe.layers]).blocks  # stages hold whole blocks
    groups = [g for g in _groups(cluster, cluster.devices, sequence, context)
              if (tensor is None or g[0] in tensor) and (pipeline is None or g[3] in pipeline) and g[3] <= layers]
    work = sorted({(b, t, c) for t, c, d, p, _ in groups for b in divisors(global_batch // d)
                   if global_batch % d == 0 and (b in microbatch_sizes if microbatch_sizes else b <= max_microbatch)})
    if not work:
        raise ConfigurationError(
            f"no configuration of {cluster.devices:,} devices and a global batch of {global_batch} is left to try: "
            "the batch must be a multiple of the data-parallel size times the microbatch size; widen the sizes")
    # First every configuration with its cheapest bound (the average device's work), then the most promising
    # first: the kept list fills with fast plans early, and once a bound reaches its last entry, so do all after.
    pending: list[tuple[float, int, LayerTimes, Parallelism, tuple, str]] = []
    notes: list[str] = []
    for n, (b, t, c) in enumerate(work):
        searched: dict = {}  # searched layer splits' times of this microbatch and group, by microbatch count
        for t_, c_, d, p, data_k in groups:
            if (t_, c_) != (t, c) or global_batch % (d * b):
                continue
            m = global_batch // (d * b)
            base = Parallelism(tensor=t, pipeline=p, data=d, context=c, microbatch_size=b, global_batch=global_batch,
                               overlap=overlap, tp_overlap=tp_overlap, tp_comm_overlap=tp_comm_overlap,
                               expert_imbalance=expert_imbalance, capacity_factor=capacity_factor,
                               fp8_dispatch=fp8_dispatch)
            candidates = []
            for sp in sequence_parallel:
                if sp and t == 1:
                    continue
                for ep, etp, vias in _expert_layouts(experts, t, t * c * d, expert, expert_tensor, usable):
                    # Megatron-Core's module recomputation where it matters (MoE models), as selective recomputation.
                    for modules in (None, *(module_sets if "selective" in recompute else ())):
                        got = []
                        recomputing = {} if modules is None else {"recompute_modules": modules,
                                                                  "recompute": "selective"}
                        for via in vias:
                            try:
                                times = cached_times(build, cluster, replace(
                                    base, sequence_parallel=sp, ep=ep, etp=etp, dispatcher=via,
                                    **_overlaps(shared_expert_overlap, expert_overlap, ep, via),
                                    **recomputing), options, memory, cache)
                            except ConfigurationError:
                                continue
                            got.append((via, times if modules is None else {"selective": times["selective"]}))
                        if modules is None and not got:
                            break
                        if len(got) > 1 and framework != "any":
                            # The dispatchers differ only in the exchange's time (what the experts compute and
                            # hold is the same): the faster one is never slower in any schedule, cut or ZeRO stage.
                            # Under "any" both stay, for the frameworks that run only one.
                            got = [min(got, key=lambda g: _time_s(g[1]))]
                        candidates += [(MEGATRON_SPLITS, (sp, ep, etp, modules, via), times) for via, times in got]
            if intra_search and t * c > 1:
                if m not in searched:
                    searched[m] = None
                    graph = cached_graph(build, b, cache)
                    strategy = _intra_search(graph, cluster, base, m, options, notes)
                    if strategy is not None:
                        try:
                            searched[m] = layer_times(graph, cluster, strategy, base, options, memory,
                                                      recompute=recompute)
                        except ConfigurationError:
                            pass
                if searched[m] is not None:
                    candidates.append((SEARCHED_SPLITS, (False, 1, None, None, "alltoall"), searched[m]))
            for label, sp, all_times in candidates:
                for rc, lt in all_times.items():
                    if rc not in recompute:
                        continue
                    for schedule, v in [(s, 1) for s in schedules if s != "interleaved"] + [
                            (s, v) for s in ("interleaved", *ZERO_BUBBLE) if s in schedules and p > 1
                            for v in virtual_stages]:
                        if (schedule == "interleaved" and (m % p or p * v > layers)) or (schedule == "gpipe" and p == 1):
                            continue
                        if schedule in ZERO_BUBBLE and (p == 1 or p * v > layers
                                                        or schedule_problem(schedule, p, m, v)):
                            continue
                        for z in zero:
                            if z and d == 1:
                                continue
                            rules = _rules(targets, framework, lambda: replace(
                                base, sequence_parallel=sp[0], ep=sp[1], etp=sp[2], recompute=rc,
                                recompute_modules=sp[3], dispatcher=sp[4],
                                **_overlaps(shared_expert_overlap, expert_overlap, sp[1], sp[4]),
                                zero=z, schedule=schedule, virtual_stages=v),
                                options.precision, lt.attention, lt.experts is not None)
                            if not rules:
                                continue
                            floor_s = average_load_s(lt, cluster, data_k, z, m, p, overlap)
                            for rule, lists in rules:
                                pending.append((floor_s, len(pending), lt, base, (sp, rc, z, schedule, v), label,
                                                data_k, rule, lists))
        if progress is not None:
            progress(n + 1, len(work))
    if targets and not pending:
        names = " or ".join(f.title for f in targets.values())
        raise ConfigurationError(f"{names} runs none of the {probe.name!r} configurations on {cluster.devices:,} "
                                 "devices left to try (its ZeRO stages, schedules, recomputation, context "
                                 "parallelism, precision and attention); widen the sizes or change --precision / "
                                 "--attention")
    pending.sort(key=lambda e: e[:2])
    # Kept plans per list: "" the best and its runners-up, a framework's name its best alone (under "any").
    keep = {"": runners_up, **{name: 0 for name in targets if framework == "any"}}
    kept: dict[str, list[TrainingPlan]] = {name: [] for name in keep}
    too_large: list[float] = []
    skipped = 0
    # Best first: a configuration placed and found to fit waits in ``placed`` under its tighter bound (the first
    # microbatch's way through the stages) until no other configuration's bound is lower; only then is its
    # schedule simulated. Every plan faster than the last kept is still simulated (its bounds are lower), so
    # the kept lists are those of trying every configuration.
    placed: list[tuple[float, int, Deferred, tuple[str, ...]]] = []
    i = 0
    while i < len(pending) or placed:
        bounds = {name: _bound(kept[name], keep[name]) for name in keep}
        full = None not in bounds.values()
        if placed and (i == len(pending) or placed[0][0] <= pending[i][0]):
            lower, _, deferred, lists = heapq.heappop(placed)
            bound = None if any(bounds[n] is None for n in lists) else max(bounds[n] for n in lists)
            if bound is not None and lower >= bound:
                skipped += 1
                continue
            got = deferred.finish()
            for name in lists:
                kept[name].append(got)
                # Equal steps (ZeRO stages often tie): the one needing less memory first.
                kept[name].sort(key=lambda r: (round(r.step_time_s, 12), r.memory_per_device_bytes))
                del kept[name][keep[name] + 1:]
            continue
        floor_s, order, lt, base, (sp, rc, z, schedule, v), label, data_k, rule, lists = pending[i]
        if full and floor_s >= max(bounds.values()):
            # Every later configuration's floor, and every placed one's bound, is at least this one's floor.
            skipped += len(pending) - i + len(placed)
            break
        i += 1
        bound = None if any(bounds[n] is None for n in lists) else max(bounds[n] for n in lists)
        if bound is not None and floor_s >= bound:
            skipped += 1
            continue
        sp, ep, etp, modules, via = sp
        par = replace(base, sequence_parallel=sp, recompute=rc, zero=z, schedule=schedule, virtual_stages=v, ep=ep,
                      etp=etp, recompute_modules=modules, dispatcher=via,
                      **_overlaps(shared_expert_overlap, expert_overlap, ep, via))
        if rule is not None:
            try:
                par = replace(par, stage_cuts=_block_cuts(lt, cluster, par, data_k, targets[rule] if rule in targets
                                                          else None))
            except ConfigurationError:  # more (virtual) stages than blocks
                skipped += 1
                continue
        got = assemble(lt, cluster, par, memory, capacity, label=f"{par.describe()}, {label}", bound_s=bound,
                       rejected=too_large.append, defer=True)
        if got is None:
            skipped += 1
            continue
        heapq.heappush(placed, (got.lower_bound_s, order, got, lists))
    found = kept[""]
    if not found:
        raise InsufficientMemoryError(
            f"no configuration of {probe.name!r} on {cluster.devices:,} devices fits in "
            f"{(capacity or 0) / 1e9:.3g} GB per device; more devices, a smaller global batch, ZeRO or "
            "recomputation (if restricted), or more memory would help"
            + (f"; the least any needs is {min(too_large) / 1e9:.3g} GB" if too_large else ""),
            capacity or 0.0, min(too_large, default=0.0))
    best = found[0]
    lower = best.parallelism.microbatches * max(
        (sum(s.forward_s + s.backward_s for s in best.stages) / len(best.stages)), 0.0)
    if targets:
        notes.append("stage cuts between whole transformer blocks, the embedding on the first stage and the head on "
                     "the last; " + ("every configuration, and the best each framework runs: "
                                     if framework == "any" else "only what ")
                     + ", ".join(repr(f) for f in targets.values()) + (" runs" if framework != "any" else ""))
    return TrainingSearch(best=best, runners_up=tuple(found[1:]), configurations=len(pending), skipped=skipped,
                          search_time_s=time.perf_counter() - started, gap_bound_s=max(0.0, best.step_time_s - lower),
                          notes=tuple(dict.fromkeys(notes)), framework=framework,
                          by_framework={name: (kept[name] or [None])[0] for name in targets}
                          if framework == "any" else {})


def _targets(framework: str | None) -> dict:
    """The frameworks a search keeps plans for: none (None), one, or all of them ("any")."""
    from pase.frameworks import FRAMEWORKS, framework as named

    if framework is None:
        return {}
    return dict(FRAMEWORKS) if framework == "any" else {framework: named(framework)}


def _rules(targets: dict, framework: str | None, par: Callable[[], Parallelism], precision: str, attention: str,
           experts: bool) -> list:
    """How ``par()`` enters the search (``experts``: the model has a mixture of experts): per way of cutting its
    stages (None: anywhere; a framework's name: as it cuts), the kept lists the plan may join ("" the best and
    runners-up, a framework's name its best). ``par`` is only built when a framework is asked for."""
    if not targets:
        return [(None, ("",))]
    par = par()
    runs = [name for name, f in targets.items()
            if f.runs(par, precision=precision, attention=attention, experts=experts)]
    if framework != "any":
        return [(framework, ("",))] if runs else []
    # Megatron-LM and torchtitan take any whole-block cut (the balanced one); DeepSpeed partitions uniformly.
    balanced = ("", *(n for n in runs if n != "deepspeed"))
    return [("balanced", balanced)] + ([("deepspeed", ("deepspeed",))] if "deepspeed" in runs else [])


def _block_cuts(lt: LayerTimes, cluster: Cluster, par: Parallelism, data_k: tuple, rule) -> tuple[int, ...]:
    """The cuts of ``par``'s ``p v`` virtual stages between whole blocks, as framework ``rule`` cuts them (None:
    balanced over the blocks); memoised on ``lt``."""
    from pase.frameworks import block_layout
    from pase.frameworks.base import balanced_block_cuts

    if "blocks" not in lt.memo:
        lt.memo["blocks"] = block_layout([l.name for l in lt.layers])
    pieces = par.pipeline * par.virtual_stages
    key = ("block cuts", getattr(rule, "name", None), pieces,
           tuple(data_k) if par.zero == 3 and par.data > 1 else None, par.overlap)
    if key not in lt.memo:
        weights = cut_weights_s(lt, cluster, data_k, par.zero, par.overlap)
        lt.memo[key] = (balanced_block_cuts(weights, pieces, lt.memo["blocks"]) if rule is None
                        else rule.cuts(weights, pieces, lt.memo["blocks"]))
    return lt.memo[key]


def _expert_layouts(experts: set[int], t: int, stage: int, expert: Sequence[int] | None,
                    expert_tensor: Sequence[int] | None,
                    dispatchers: Sequence[str] = ("alltoall",)) -> list[tuple[int, int | None, tuple[str, ...]]]:
    """(EP, ETP, dispatchers) to try on a stage of ``stage`` devices and tensor parallelism ``t``: ``[(1, None,
    ("alltoall",))]`` for a model without experts (``experts`` their counts), else every EP dividing the experts
    (or in ``expert``) and ETP 1 or ``t`` (or in ``expert_tensor``) with ETP x EP dividing the stage, each with
    those of ``dispatchers`` that apply (DeepEP only where EP exchanges tokens, EP > 1)."""
    if not experts:
        return [(1, None, ("alltoall",))]
    count = min(experts)
    eps = [e for e in (divisors(count) if expert is None else expert) if all(n % e == 0 for n in experts)]
    etps = sorted({1, t}) if expert_tensor is None else list(expert_tensor)
    out = []
    for x in etps:
        for e in eps:
            vias = tuple(via for via in dispatchers if via == "alltoall" or e > 1)
            if stage % (e * x) == 0 and vias:
                out.append((e, x, vias))
    return out


def _time_s(times: dict) -> float:
    """The layers' compute and communication seconds of one microbatch in ``times`` (a recomputation mode's
    :class:`~pase.model.training.LayerTimes` per mode), to rank dispatchers that differ in nothing else."""
    lt = next(iter(times.values()))
    return float(np.sum(lt.forward_s) + np.sum(lt.backward_s) + np.sum(lt.recompute_s))


def _bound(found: list[TrainingPlan], keep: int) -> float | None:
    """Skip what cannot enter the kept list: slower than its last entry once it is full."""
    return found[-1].step_time_s if len(found) > keep else None


def _intra_search(graph: Graph, cluster: Cluster, par: Parallelism, microbatches: int, options: ConfigOptions,
                  notes: list[str]) -> dict | None:
    """The per-layer optimum of one microbatch on ``par``'s group, weight gradients counted once a step."""
    group = group_cluster(cluster, par)
    try:
        model = build_cost_model(graph, group, options)
        result = exact()(model.cost_graph(gradient_share=1.0 / microbatches))
    except SearchTooLargeError as exc:
        notes.append(f"per-layer search skipped on {group.devices} devices: {exc}")
        return None
    return {layer.name: tuple(int(f) for f in model.configs[layer.name][int(result.assignment[i])])
            for i, layer in enumerate(model.layers)}


def training_baselines(build: Callable[[int], Graph], cluster: Cluster, global_batch: int, *,
                       options: ConfigOptions = ConfigOptions(), memory: MemoryOptions = MemoryOptions(),
                       memory_limit_bytes: float | None = None, tp_overlap: bool = False,
                       tp_comm_overlap: bool = False,
                       cache: dict | None = None) -> dict[str, TrainingPlan]:
    """What practitioners would run, in the same model, each at its best microbatch (1 to 8) that fits.

    * ``data parallel``: every device a replica (t = p = 1), recomputation none or full;
    * ``ZeRO-3 / FSDP``: the same with parameters, gradients and optimizer state sharded;
    * ``Megatron``: tensor parallelism over a node (the largest power of two up to the node that
      divides the model), the fewest pipeline stages that fit, full recomputation, the interleaved
      schedule with 2 chunks where the microbatches allow it, microbatch 1.

    A baseline none of whose variants fits reports its smallest-memory variant
    (``fits_memory`` False); one that cannot be placed at all is left out.
    ``tp_overlap``, ``tp_comm_overlap`` and ``cache`` as for :func:`search_training`.
    """
    cache = {} if cache is None else cache
    capacity = cluster.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    N = cluster.devices
    overlap = cluster.efficiency is not None

    def best(candidates):
        got = []
        for par in candidates:
            try:
                got.append(evaluate_training(build, cluster, par, options=options, memory=memory,
                                             memory_limit_bytes=capacity, cache=cache))
            except ConfigurationError:
                continue
        fitting = [g for g in got if g.fits_memory is not False]
        if fitting:
            return min(fitting, key=lambda g: g.step_time_s)
        return min(got, key=lambda g: g.memory_per_device_bytes) if got else None

    micro = [b for b in divisors(global_batch // N) if b <= 8] if global_batch % N == 0 else []
    out = {
        "data parallel": best(Parallelism(data=N, microbatch_size=b, global_batch=global_batch, recompute=r,
                                          overlap=overlap) for b in micro for r in ("none", "full")),
        "ZeRO-3 / FSDP": best(Parallelism(data=N, microbatch_size=b, global_batch=global_batch, recompute=r, zero=3,
                                          overlap=overlap) for b in micro for r in ("none", "full")) if N > 1 else None,
    }
    node = cluster.mesh.shape[-1]
    for t in sorted((t for t in divisors(node) if t & (t - 1) == 0), reverse=True):
        plans = []
        for p in divisors(N // t):
            d = N // (t * p)
            if global_batch % d:
                continue
            m = global_batch // d
            v = 2 if p > 1 and m % p == 0 else 1
            got = best([Parallelism(tensor=t, pipeline=p, data=d, virtual_stages=v, global_batch=global_batch,
                                    recompute="full", overlap=overlap, tp_overlap=tp_overlap,
                                    tp_comm_overlap=tp_comm_overlap)])
            if got is not None:
                plans.append(got)
                if got.fits_memory is not False:
                    break
        if plans:
            out["Megatron"] = plans[-1]
            break
    return {name: plan for name, plan in out.items() if plan is not None}
