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
    "data_parallel_plan",
    "baseline_plans",
    "sweep",
    "current_problem",
    "set_current_problem",
    "throttled_progress",
]


@dataclass(frozen=True)
class GraphSource:
    """Where the graph comes from: a sample with its parameters, or an uploaded file (by content digest)."""

    kind: str  # "sample" or "upload"
    name: str
    params: tuple[tuple[str, int], ...] = ()
    digest: str = ""

    def __str__(self) -> str:
        if self.kind == "sample":
            args = ", ".join(f"{k}={v}" for k, v in self.params)
            return f"{self.name}({args})"
        return f"{self.name} (uploaded)"

    def with_params(self, **params: int) -> "GraphSource":
        """The same sample with ``params`` (``batch=32``...) set; the others kept, in their order."""
        return replace(self, params=tuple({**dict(self.params), **params}.items()))

    @staticmethod
    def for_upload(filename: str, data: bytes) -> "GraphSource":
        return GraphSource("upload", filename, (), hashlib.sha256(data).hexdigest())


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
    }


def load_graph(source: GraphSource, data: bytes | None = None) -> Graph:
    """The graph of ``source``, built (sample) or parsed (upload ``data``: pase JSON or ONNX, by the
    file name's suffix) in a worker process once, and cached.

    An upload's ``data`` is kept in this session (its latest upload only), so a later call
    without ``data`` rebuilds the graph even after other sessions evicted it from the cache.

    Raises
    ------
    PaseError
        The sample parameters or the uploaded file are invalid (the message says why).
    """
    store = stores()["graphs"]
    if source.kind == "upload":
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
        graph = jobs.run(load_model_file, data, source.name, what=f"reading {source.name}")
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
    """
    from pase.planner import plan

    options = PlanOptions(configs=problem.options, search_budget_bytes=jobs.SEARCH_BUDGET_BYTES)
    return _cached("plans", problem, lambda: jobs.run(plan, load_graph(problem.source), problem.cluster, options,
                                                        progress=progress, waiting=waiting, heartbeat=heartbeat,
                                                        what="the search"))


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


def sweep(problem: Problem, graph: Graph, devices: list[int], cluster: Cluster, vary: str | None, values: list[float],
          progress: Callable[[int, int], None] | None = None, heartbeat: Callable[[], None] | None = None) -> list[dict]:
    """The what-if sweep, in a worker process: ``graph`` at every device count, and at every value of ``vary``.

    ``vary``: ``None``, ``"bandwidth_Bps"`` (``values`` in GB/s), ``"peak_flops"`` (TFLOP/s) or
    ``"batch"`` (the problem's sample rebuilt at each batch size). Records as
    :func:`pase.analysis.sweep.sweep` returns them.
    """
    from pase.analysis.sweep import batch_sweep, sweep as grid_sweep
    from pase.models import batch_builder

    common = dict(progress=progress, heartbeat=heartbeat, what="the sweep")
    if vary == "batch":
        others = {k: v for k, v in problem.source.params if k != "batch"}
        return jobs.run(batch_sweep, batch_builder(problem.source.name, **others), [int(v) for v in values], devices,
                        cluster, options=problem.options, **common)
    grid = {"bandwidth_Bps": {"bandwidths_Bps": [v * 1e9 for v in values]},
            "peak_flops": {"peak_flops": [v * 1e12 for v in values]}}.get(vary, {})
    return jobs.run(grid_sweep, graph, devices, cluster, options=problem.options, **grid, **common)


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
