"""Streamlit glue: the problem the user has chosen, and per-process result caches.

A :class:`Problem` (graph source, cluster, search options) is a frozen,
hashable value; solved plans, baselines and sweeps are kept per problem in
small LRU stores created once per server process with
``st.cache_resource``, so asking the same question again (on any page, in
any browser tab) is instant. The stores hold pase objects as they are; Plans
are immutable. Every graph is built, and every search run, in a worker
process (:mod:`ui.jobs`). An upload's bytes stay in its session, so another
session filling the shared caches never loses it.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable, Hashable

import streamlit as st

from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.io.graph_json import load_model_file
from pase.planner import Plan, PlanOptions
from ui import jobs

__all__ = [
    "GraphSource",
    "Problem",
    "LRUStore",
    "stores",
    "load_graph",
    "cached_plan",
    "solve",
    "is_language_model",
    "global_batch",
    "training_builder",
    "cached_training",
    "solve_training",
    "training_shares",
    "free_cores",
    "merge_training",
    "data_parallel_plan",
    "baseline_plans",
    "sweep",
    "current_problem",
    "set_current_problem",
    "throttled_progress",
]


@dataclass(frozen=True)
class GraphSource:
    """Where the graph comes from: a sample with its parameters, or an uploaded file (by content digest).

    ``kind``: ``"sample"``; ``"upload"``, a pase graph, an ONNX model or a Hugging Face config of a mixture
    of experts (planned per layer, at its default batch); ``"config"``, a Hugging Face ``config.json`` of a
    dense language model (planned in 3-D, as ``pase solve config.json``), whose ``params`` hold its global
    ``batch``.
    """

    kind: str
    name: str
    params: tuple[tuple[str, int], ...] = ()
    digest: str = ""

    def __str__(self) -> str:
        if self.kind == "sample":
            args = ", ".join(f"{k}={v}" for k, v in self.params)
            return f"{self.name}({args})"
        if self.kind == "config":
            return f"{self.name} (uploaded Hugging Face config, batch {dict(self.params)['batch']:,})"
        return f"{self.name} (uploaded)"

    def with_params(self, **params: int) -> "GraphSource":
        """The same sample with ``params`` (``batch=32``...) set; the others kept, in their order."""
        return replace(self, params=tuple({**dict(self.params), **params}.items()))

    @staticmethod
    def for_upload(filename: str, data: bytes) -> "GraphSource":
        return GraphSource("upload", filename, (), hashlib.sha256(data).hexdigest())

    @staticmethod
    def for_config(filename: str, data: bytes, batch: int) -> "GraphSource":
        """A dense language model's Hugging Face ``config.json`` at a global ``batch`` (kind ``"config"``)."""
        return GraphSource("config", filename, (("batch", int(batch)),), hashlib.sha256(data).hexdigest())


@dataclass(frozen=True)
class Problem:
    """A question to answer: which graph, on which cluster, with which split options."""

    source: GraphSource
    cluster: Cluster
    options: ConfigOptions = ConfigOptions()


class LRUStore:
    """A small thread-safe least-recently-used dict."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, default=None):
        with self._lock:
            if key not in self._data:
                return default
            self._data.move_to_end(key)
            return self._data[key]

    def put(self, key: Hashable, value) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


@st.cache_resource(show_spinner=False)
def stores() -> dict[str, LRUStore]:
    """The process-wide result stores (created once per server process)."""
    return {
        "graphs": LRUStore(16),
        "plans": LRUStore(48),
        "dp": LRUStore(48),
        "baselines": LRUStore(24),
        "sweeps": LRUStore(16),
        "misc": LRUStore(32),
        "explanations": LRUStore(24),
        "training": LRUStore(16),
    }


def load_graph(source: GraphSource, data: bytes | None = None) -> Graph:
    """The graph of ``source``, built (sample) or parsed (upload ``data``: pase JSON, a Hugging Face
    ``config.json`` or ONNX, by the file name's suffix and content) in a worker process once, and cached.

    An upload's ``data`` is kept in this session (its latest upload only), so a later call
    without ``data`` rebuilds the graph even after other sessions evicted it from the cache.

    Raises
    ------
    PaseError
        The sample parameters or the uploaded file are invalid (the message says why).
    """
    store = stores()["graphs"]
    if source.kind in ("upload", "config"):
        uploads = st.session_state.setdefault("_uploads", {})
        if data is not None:
            # Only the latest upload of a session is kept; its bytes rebuild the graph if evicted.
            uploads.clear()
            uploads[source.digest] = data
        data = uploads.get(source.digest)
    graph = store.get(source)
    if graph is not None:
        return graph
    if source.kind == "sample":
        from pase.models import sample

        graph = jobs.run(sample, source.name, what=f"building sample {source.name}", **dict(source.params))
    else:
        if data is None:
            raise jobs.JobError(f"the upload {source.name!r} is no longer held by this session; upload it again")
        graph = jobs.run(load_model_file, data, source.name, what=f"reading {source.name}",
                         batch=dict(source.params).get("batch"))
    store.put(source, graph)
    return graph


def cached_plan(problem: Problem) -> Plan | None:
    """The solved plan for ``problem`` if it was solved before in this server process."""
    return stores()["plans"].get(problem)


def _cached(kind: str, problem: Problem, compute: Callable[[], object]):
    """The result in store ``kind`` for ``problem``, computed and kept on a miss."""
    store = stores()[kind]
    found = store.get(problem)
    if found is None:
        found = compute()
        store.put(problem, found)
    return found


def solve(problem: Problem, progress: Callable[[int, int], None] | None = None,
          waiting: Callable[[], None] | None = None, heartbeat: Callable[[], None] | None = None) -> Plan:
    """Find (or fetch) the best plan for ``problem`` in a worker process.

    ``progress(done, total)`` follows the search; ``waiting()`` and ``heartbeat()`` as in :func:`ui.jobs.run`.
    Data parallelism is costed in the same job and kept for :func:`data_parallel_plan` (the explorer shows
    both after one Solve; one worker start, not two).
    """
    from ui.solving import plan_and_data_parallel

    found = cached_plan(problem)
    if found is not None:
        return found
    options = PlanOptions(configs=problem.options, search_budget_bytes=jobs.SEARCH_BUDGET_BYTES)
    found, dp = jobs.run(plan_and_data_parallel, load_graph(problem.source), problem.cluster, options,
                         progress=progress, waiting=waiting, heartbeat=heartbeat, what="the search")
    stores()["plans"].put(problem, found)
    if isinstance(dp, Plan):  # else data_parallel_plan costs it again and raises its error on the page
        stores()["dp"].put(problem, dp)
    return found


def is_language_model(source: GraphSource) -> bool:
    """Whether ``source`` is one of the large language-model samples (:data:`pase.models.LANGUAGE_MODELS`) or
    a dense language model's uploaded Hugging Face config (kind ``"config"``), which every page plans as
    ``pase solve`` does: by the joint 3-D search, not the per-layer one (whose single strategy of the whole
    batch on every device cannot fit their memory)."""
    from pase.models import LANGUAGE_MODELS

    return source.kind == "config" or (source.kind == "sample" and source.name in LANGUAGE_MODELS)


def global_batch(source: GraphSource) -> int:
    """The samples per step of a language model's 3-D plan: the sidebar's batch size (else the sample's own)."""
    import inspect

    from pase.models import SAMPLES

    given = dict(source.params).get("batch")
    return int(given if given is not None else inspect.signature(SAMPLES[source.name]).parameters["batch"].default)


def training_builder(source: GraphSource) -> Callable[[int], Graph]:
    """``build(batch)`` of a language model (:func:`is_language_model`), picklable for the worker processes:
    the sample's builder with its other sidebar parameters, or the uploaded config's (its bytes held by this
    session, :func:`load_graph`).

    Raises
    ------
    PaseError
        The upload is no longer held by this session, or the config is refused (:func:`ui.hfupload.uploaded_config`).
    """
    if source.kind == "config":
        from ui.hfupload import uploaded_config

        data = st.session_state.get("_uploads", {}).get(source.digest)
        if data is None:
            raise jobs.JobError(f"the upload {source.name!r} is no longer held by this session; upload it again")
        return uploaded_config(data, source.name).build
    from pase.models import batch_builder

    return batch_builder(source.name, **{k: v for k, v in source.params if k != "batch"})


def cached_training(problem: Problem):
    """``(search, group plan)`` of :func:`solve_training` if it ran before in this server process, else None."""
    return stores()["training"].get(problem)


def solve_training(problem: Problem, progress: Callable[[int, int], None] | None = None,
                   waiting: Callable[[], None] | None = None, heartbeat: Callable[[], None] | None = None):
    """The 3-D search of a language model (as ``pase solve MODEL`` runs it) in worker processes, cached.

    Returns ``(search, plan)``: the :class:`pase.search.stages.TrainingSearch` at the global batch
    :func:`global_batch`, and the :class:`Plan` of one microbatch of its best configuration on one
    ``t x c`` group (:func:`ui.graphview.training_search_with_group_plan`) for the graph.
    ``progress(done, total)`` counts the (microbatch size, group) pairs modelled.

    The microbatch sizes are shared out over up to :data:`ui.jobs.MAX_JOBS` workers (at most one per
    core that other work leaves free, :func:`free_cores`), each searching its sizes
    (:func:`training_shares`), and the shares merged (:func:`merge_training`): the same best plan and
    runners-up as one search, sooner (Llama 3 70B on 64 GPUs: 2.2 s instead of 3.6 s on two idle cores;
    on cores busy with other work, shares only slow each other, so one search runs).
    """
    source = problem.source
    build = training_builder(source)
    batch = global_batch(source)
    shares = training_shares(batch, min(jobs.MAX_JOBS, free_cores()))
    return _cached("training", problem, lambda: _parallel_training(
        (build, problem.cluster, batch, problem.options), shares, progress, waiting, heartbeat))


def free_cores(window_s: float = 0.04, looks: int = 2) -> int:
    """The machine's cores that other processes leave idle now, at least 1: the cores less the CPU time
    all processes but this server used over ``window_s`` (Linux's ``/proc/stat`` and ``/proc/self/stat``),
    rounded, the most of ``looks`` windows in a row (a browser on this machine painting the click's
    reply is a moment's work; another job keeps every window busy); all cores where unknown. The
    server's own work (this very script run) does not count."""
    import os

    cores = os.cpu_count() or 1

    def ticks() -> tuple[int, int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            mine = f.read().rsplit(")", 1)[1].split()
        # all, idle + iowait (guest time is inside user), this process's user + system time
        return sum(fields[:8]), fields[3] + fields[4], int(mine[11]) + int(mine[12])

    best = 1
    try:
        before = ticks()
        for _ in range(looks):
            time.sleep(window_s)
            after = ticks()
            (all0, idle0, self0), (all1, idle1, self1) = before, after
            before = after
            if all1 <= all0:
                continue
            per_core = (all1 - all0) / cores  # ticks one core has had
            others = max(0, (all1 - all0) - (idle1 - idle0) - (self1 - self0)) / per_core
            best = max(best, min(cores, round(cores - others)))
    except (OSError, ValueError, IndexError):
        return cores
    return best


def training_shares(global_batch: int, workers: int) -> list[tuple[int, ...] | None]:
    """The microbatch sizes each of up to ``workers`` parallel shares of the 3-D search tries: the sizes the
    search would try (up to its ``max_microbatch`` and dividing ``global_batch``) dealt out in turn;
    ``[None]`` (one search of every size) when there is one worker or one size."""
    import inspect

    from pase.search.stages import search_training

    most = inspect.signature(search_training).parameters["max_microbatch"].default
    sizes = [b for b in range(1, most + 1) if global_batch % b == 0]
    n = min(workers, len(sizes))
    return [None] if n < 2 else [tuple(sizes[i::n]) for i in range(n)]


def merge_training(parts: list, started: float):
    """One ``(search, group plan)`` from the shares' results (``(search, plan)`` each, or the PaseError a share
    raised), as one :func:`pase.search.stages.search_training` over all of them would have found.

    The best is the fastest of the shares' bests (ties: less memory, then the smaller microbatch, the order
    the search meets them), the runners-up the next fastest of all shares; configurations and those
    skipped are summed (each share prunes by its own bound, so more are modelled than by one search);
    ``gap_bound_s`` is recomputed for the best as the search computes it; ``search_time_s`` is the wall
    time since ``started`` (``time.perf_counter()``). When every share failed, the error of the share
    whose least memory is the smallest (the message gives the least of all) is raised.
    """
    from pase.model.memory import InsufficientMemoryError
    from pase.search.stages import TrainingSearch

    done = [p for p in parts if not isinstance(p, BaseException)]
    if not done:
        errors = [e for e in parts if isinstance(e, InsufficientMemoryError) and e.least_bytes > 0]
        raise min(errors, key=lambda e: e.least_bytes) if errors else parts[0]
    keep = max(len(s.runners_up) for s, _ in done)
    plans = [(r, plan if r is s.best else None) for s, plan in done for r in (s.best, *s.runners_up)]
    plans.sort(key=lambda rp: (round(rp[0].step_time_s, 12), rp[0].memory_per_device_bytes,
                               rp[0].parallelism.microbatch_size))
    best, group_plan = plans[0]
    stages = best.stages
    lower = best.parallelism.microbatches * max(sum(s.forward_s + s.backward_s for s in stages) / len(stages), 0.0)
    search = TrainingSearch(
        best=best, runners_up=tuple(r for r, _ in plans[1:keep + 1]),
        configurations=sum(s.configurations for s, _ in done), skipped=sum(s.skipped for s, _ in done),
        search_time_s=time.perf_counter() - started, gap_bound_s=max(0.0, best.step_time_s - lower),
        notes=tuple(dict.fromkeys(n for s, _ in done for n in s.notes)))
    return search, group_plan


class _Cancelled(Exception):
    """Raised from a share's heartbeat once the 3-D search is cancelled: its job's worker is killed."""


def _parallel_training(args: tuple, shares: list, progress, waiting, heartbeat):
    """:func:`ui.graphview.training_search_with_group_plan` of ``args`` over ``shares`` of the microbatch
    sizes, one job per share (threads each calling :func:`ui.jobs.run`), merged (:func:`merge_training`).

    As in :func:`sweep`, the calling (script) thread alone calls ``progress`` (the shares' counts summed),
    ``waiting`` (while a share waits for a worker) and ``heartbeat``; when one raises (Streamlit stopping
    the script), the shares' workers are killed and the exception re-raised. A share's error other than
    finding nothing (a PaseError) or a failed job is raised as well.
    """
    from concurrent.futures import ThreadPoolExecutor

    from pase.errors import ConfigurationError
    from pase.model.memory import InsufficientMemoryError
    from ui.graphview import training_search_with_group_plan

    started = time.perf_counter()
    if len(shares) == 1:  # one search, as pase solve runs it
        return jobs.run(training_search_with_group_plan, *args, progress=progress, waiting=waiting,
                        heartbeat=heartbeat, what="the 3-D training search")
    cancelled = threading.Event()
    counts: dict[int, tuple[int, int]] = {}
    queued: set[int] = set()

    def check() -> None:
        if cancelled.is_set():
            raise _Cancelled("the 3-D search was cancelled")

    def one(i: int, sizes: tuple[int, ...]):
        def held_up() -> None:
            queued.add(i)
            check()

        def counted(done: int, total: int) -> None:
            queued.discard(i)
            counts[i] = (done, total)

        try:
            return jobs.run(training_search_with_group_plan, *args, sizes, progress=counted, waiting=held_up,
                            heartbeat=check, what="the 3-D training search")
        except (InsufficientMemoryError, ConfigurationError) as exc:  # nothing in this share: the others decide
            return exc

    pool = ThreadPoolExecutor(max_workers=len(shares), thread_name_prefix="pase-3d")
    futures = [pool.submit(one, i, sizes) for i, sizes in enumerate(shares)]
    last = time.monotonic()

    def tick(finished: set) -> None:
        nonlocal last
        now = time.monotonic()
        if progress is not None and counts and (finished or now - last > 0.1):
            last = now
            values = list(counts.values())
            # Shares not yet reporting count as their expected share of the total.
            total = sum(t for _, t in values) * len(shares) // len(values)
            progress(sum(d for d, _ in values), max(total, 1))
        if waiting is not None and queued and not counts:
            waiting()

    results = jobs.gather(pool, futures, cancelled, tick=tick, heartbeat=heartbeat, poll_s=0.1)
    search, plan = merge_training(results, started)
    note = (f"Searched by {len(shares)} worker processes at once, the microbatch sizes dealt out "
            f"({'; '.join(', '.join(map(str, sizes)) for sizes in shares)}); each skips by its own bound.")
    return replace(search, notes=(*search.notes, note)), plan


def explanations(problem: Problem, plan: Plan) -> dict:
    """Each layer's runner-up under ``plan`` (:func:`pase.analysis.explain.explain_strategy`), in a worker, cached."""
    from pase.analysis.explain import explain_strategy

    return _cached("explanations", problem, lambda: jobs.run(
        explain_strategy, load_graph(problem.source), problem.cluster, plan.strategy, problem.options,
        what="the runner-up of every layer"))


def data_parallel_plan(problem: Problem) -> Plan:
    """Data parallelism for ``problem`` under the same cost model (cached; costed in a worker)."""
    from pase.analysis.baselines import data_parallel

    return _cached("dp", problem, lambda: jobs.run(data_parallel, load_graph(problem.source), problem.cluster,
                                                     problem.options, what="costing data parallelism"))


def baseline_plans(problem: Problem) -> dict[str, Plan]:
    """Every baseline that applies to the problem's graph, name -> best Plan (cached; costed in a worker)."""
    from pase.analysis.baselines import applicable_baselines

    return _cached("baselines", problem, lambda: jobs.run(applicable_baselines, load_graph(problem.source),
                                                            problem.cluster, problem.options,
                                                            what="costing the baselines"))


class _SweepCancelled(Exception):
    """Raised from a sweep thread's heartbeat once the sweep is cancelled: its job's worker is killed."""


def _sweep_points(problem: Problem, graph: Graph, devices: list[int], cluster: Cluster, vary: str | None,
                  values: list[float]) -> list[tuple[Hashable, Callable, tuple, dict]]:
    """The sweep's points in the order of today's records: ``(point key, fn, args, kwargs)`` per point.

    One point is one device count (and one varied value): a call of :func:`pase.analysis.sweep.sweep`
    (or ``batch_sweep``) over that point alone, whose records are the whole sweep's records for it; for a
    language model (:func:`is_language_model`), of :func:`pase.analysis.sweep.training_sweep`: the 3-D
    search and its baselines, as ``pase sweep`` runs them.
    """
    from pase.analysis.sweep import batch_sweep, sweep as grid_sweep, training_sweep
    from pase.models import batch_builder

    options = problem.options
    if is_language_model(problem.source):
        build, batch = training_builder(problem.source), global_batch(problem.source)
        if vary == "batch":
            return [((int(v), p), training_sweep, (build, [p], cluster, int(v)), {"options": options})
                    for v in values for p in devices]
        if vary in ("bandwidth_Bps", "peak_flops"):
            name, scale = {"bandwidth_Bps": ("bandwidths_Bps", 1e9), "peak_flops": ("peak_flops", 1e12)}[vary]
            return [((p, v), training_sweep, (build, [p], cluster, batch), {"options": options, name: [v * scale]})
                    for p in devices for v in values]
        return [((p, None), training_sweep, (build, [p], cluster, batch), {"options": options}) for p in devices]
    if vary == "batch":
        others = {k: v for k, v in problem.source.params if k != "batch"}
        build = batch_builder(problem.source.name, **others)
        return [((int(v), p), batch_sweep, (build, [int(v)], [p], cluster), {"options": options})
                for v in values for p in devices]
    if vary in ("bandwidth_Bps", "peak_flops"):
        name, scale = {"bandwidth_Bps": ("bandwidths_Bps", 1e9), "peak_flops": ("peak_flops", 1e12)}[vary]
        return [((p, v), grid_sweep, (graph, [p], cluster), {"options": options, name: [v * scale]})
                for p in devices for v in values]
    return [((p, None), grid_sweep, (graph, [p], cluster), {"options": options}) for p in devices]


def sweep(problem: Problem, graph: Graph, devices: list[int], cluster: Cluster, vary: str | None, values: list[float],
          progress: Callable[..., None] | None = None, heartbeat: Callable[[], None] | None = None) -> list[dict]:
    """The what-if sweep, point by point in worker processes: ``graph`` at every device count, and at every value of ``vary``.

    ``vary``: ``None``, ``"bandwidth_Bps"`` (``values`` in GB/s), ``"peak_flops"`` (TFLOP/s) or
    ``"batch"`` (the problem's sample rebuilt at each batch size). Records as
    :func:`pase.analysis.sweep.sweep` returns them (same fields, same order).

    Each point (device count x value) is its own job, up to :data:`ui.jobs.MAX_JOBS` at once (threads
    each calling :func:`ui.jobs.run`); its records are kept in ``stores()["sweeps"]`` (one entry per
    problem, ``vary`` and cluster, holding a dict by point), so that a cancelled sweep resumes from the
    points already done. The calling (script) thread polls the points and alone calls
    ``progress(done, total, eta_s)`` (``eta_s``: the points left x the median seconds per point solved
    so far / the points run at once; None before the first) and ``heartbeat()``. When either raises
    (Streamlit stopping the script), or a point fails, the other points' workers are killed and the
    exception is re-raised.
    """
    import statistics
    from concurrent.futures import ThreadPoolExecutor

    points = _sweep_points(problem, graph, devices, cluster, vary, values)
    store = stores()["sweeps"]
    done_key = ("sweep-points", problem, vary, cluster)
    done: dict = store.get(done_key)
    if done is None:
        done = {}
        store.put(done_key, done)
    todo = [pt for pt in points if pt[0] not in done]
    total = len(points)
    cancelled = threading.Event()
    times: list[float] = []

    def check() -> None:
        if cancelled.is_set():
            raise _SweepCancelled("the sweep was cancelled")

    def one(point_key, fn, args, kwargs) -> None:
        t0 = time.perf_counter()
        records = jobs.run(fn, *args, heartbeat=check, waiting=check, what="the sweep", **kwargs)
        times.append(time.perf_counter() - t0)
        done[point_key] = records
        store.put(done_key, done)  # keep the points most recently used

    def report() -> None:
        if progress is None:
            return
        n = sum(pt[0] in done for pt in points)
        eta = None
        if times and n < total:
            at_once = min(jobs.MAX_JOBS, total - n)
            eta = statistics.median(times) * -(-(total - n) // at_once)
        progress(n, total, eta)

    report()
    if todo:
        pool = ThreadPoolExecutor(max_workers=min(jobs.MAX_JOBS, len(todo)), thread_name_prefix="pase-sweep")
        futures = [pool.submit(one, *pt) for pt in todo]
        jobs.gather(pool, futures, cancelled, tick=lambda finished: report() if finished else None,
                    heartbeat=heartbeat)
    return [r for key, *_ in points for r in done[key]]


def current_problem() -> tuple[Problem | None, str | None]:
    """The problem chosen in the sidebar on this run, or ``(None, why not)``."""
    return st.session_state.get("_problem"), st.session_state.get("_problem_error")


def set_current_problem(problem: Problem | None, error: str | None = None) -> None:
    st.session_state["_problem"] = problem
    st.session_state["_problem_error"] = error


def throttled_progress(bar, label: str, min_interval_s: float = 0.1) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback updating the Streamlit progress ``bar`` at most every ``min_interval_s``."""
    last = [0.0]

    def update(done: int, total: int) -> None:
        now = time.perf_counter()
        if done < total and now - last[0] < min_interval_s:
            return
        last[0] = now
        frac = min(max(done / total if total else 1.0, 0.0), 1.0)
        bar.progress(frac, text=f"{label}: {done} of {total}")

    return update
