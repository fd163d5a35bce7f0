"""The app's worker processes (ui/jobs.py): results and errors come back, limits hold, the server survives."""

import multiprocessing
import os
import threading
import time

import numpy as np
import pytest

from pase.errors import GraphError
from pase.hardware.cluster import Cluster
from pase.io.graph_json import dumps_graph
from pase.model.memory import InsufficientMemoryError
from pase.models import sample
from pase.planner import PlanOptions, plan
from ui import jobs, state

CLUSTER = Cluster(8, 10e12, 16e9)
# Seconds to wait for a stopped worker to end: a guard against a hang, far above any machine's time, not a goal.
HANG_S = 600


def test_a_plan_computed_in_a_worker_is_the_plan_computed_here():
    graph = sample("alexnet")
    steps = []
    there = jobs.run(plan, graph, CLUSTER, PlanOptions(), progress=lambda done, total: steps.append((done, total)))
    here = plan(graph, CLUSTER)
    assert there.step_time_s == here.step_time_s and there.strategy == here.strategy
    assert steps and steps[-1][0] == steps[-1][1]


def test_an_error_raised_in_the_worker_arrives_with_its_class_and_attributes():
    with pytest.raises(InsufficientMemoryError) as caught:
        jobs.run(plan, sample("alexnet"), CLUSTER, PlanOptions(memory_limit_bytes=1.0))
    assert caught.value.least_bytes > 1.0 and "least any strategy needs" in str(caught.value)
    with pytest.raises(GraphError, match="unknown sample"):
        jobs.run(sample, "no-such-model")


def test_a_job_past_the_memory_limit_is_an_error_naming_the_limit():
    with pytest.raises(jobs.JobError, match="GB of memory this server allows"):
        jobs.run(np.ones, 10**12, what="a huge array")


def test_a_worker_that_dies_is_reported_and_the_next_job_runs():
    with pytest.raises(jobs.JobError, match="stopped unexpectedly"):
        jobs.run(os._exit, 3, what="a dying job")
    assert jobs.run(sum, [1, 2, 3]) == 6


def test_a_job_past_the_time_limit_is_stopped(monkeypatch):
    monkeypatch.setattr(jobs, "JOB_TIME_S", 0.5)
    # Unstopped, the 30 s sleep would end normally and raise nothing; no duration is asserted.
    with pytest.raises(jobs.JobError, match="ran longer"):
        jobs.run(time.sleep, 30, what="a slow job")
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]


def test_jobs_beyond_the_worker_count_wait_for_a_free_worker(monkeypatch):
    monkeypatch.setattr(jobs, "_slots", threading.BoundedSemaphore(1))
    first = threading.Thread(target=jobs.run, args=(time.sleep, 1.5))
    first.start()
    time.sleep(0.3)
    waits = []
    assert jobs.run(sum, [1, 2], waiting=lambda: waits.append(1)) == 3
    first.join()
    assert waits


def test_an_upload_survives_other_sessions_filling_the_shared_cache():
    data = dumps_graph(sample("alexnet", batch=16)).encode()
    source = state.GraphSource.for_upload("mine.json", data)
    first = state.load_graph(source, data)
    graphs = state.stores()["graphs"]
    for i in range(graphs.maxsize + 2):
        graphs.put(("another session's upload", i), object())
    again = state.load_graph(source)
    assert [layer.name for layer in again] == [layer.name for layer in first]


def test_an_exception_from_the_heartbeat_stops_the_worker():
    # Streamlit stops a script (Cancel, leaving the page) by raising from its next call: the heartbeat.
    class Stopped(Exception):
        pass

    def stop():
        raise Stopped

    with pytest.raises(Stopped):
        jobs.run(time.sleep, 30, heartbeat=stop)
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]


def _rnnlm_problem(batch: int = 16) -> state.Problem:
    source = state.GraphSource("sample", "rnnlm", (("batch", batch), ("vocab", 1000), ("hidden", 64), ("seq", 8)))
    return state.Problem(source, CLUSTER)


@pytest.mark.parametrize("vary, values", [(None, []), ("bandwidth_Bps", [4.0, 16.0]), ("peak_flops", [10.0, 40.0]),
                                          ("batch", [16, 32])])
def test_a_sweep_point_by_point_gives_the_records_of_one_sweep(vary, values):
    from pase.analysis.sweep import batch_sweep, sweep
    from pase.models import batch_builder

    problem = _rnnlm_problem()
    graph = sample("rnnlm", batch=16, vocab=1000, hidden=64, seq=8)
    devices = [1, 2, 4]
    reports = []
    got = state.sweep(problem, graph, devices, CLUSTER, vary, values, progress=lambda *a: reports.append(a))
    if vary == "batch":
        want = batch_sweep(batch_builder("rnnlm", vocab=1000, hidden=64, seq=8), [16, 32], devices, CLUSTER)
    else:
        grid = {"bandwidth_Bps": {"bandwidths_Bps": [v * 1e9 for v in values]},
                "peak_flops": {"peak_flops": [v * 1e12 for v in values]}}.get(vary, {})
        want = sweep(graph, devices, CLUSTER, **grid)
    assert got == want
    total = len(devices) * max(len(values), 1)
    assert reports[-1][:2] == (total, total) and all(r[1] == total for r in reports)
    again = []
    assert state.sweep(problem, graph, devices, CLUSTER, vary, values, progress=lambda *a: again.append(a)) == want
    assert again == [(total, total, None)], "every point comes from the store the second time"


def test_a_cancelled_sweep_kills_its_workers_and_resumes_from_the_points_done():
    class Stopped(Exception):
        pass

    # Points of a fraction of a second to about two seconds each, so that the sweep is stopped mid-way.
    problem = state.Problem(state.GraphSource("sample", "transformer"), CLUSTER)
    graph = sample("transformer")
    devices = [1, 2, 4, 8, 16, 32]
    seen = []

    def progress(done, total, eta_s):
        seen.append(done)

    def stop_after_one():
        if seen and seen[-1] >= 1:
            raise Stopped

    with pytest.raises(Stopped):
        state.sweep(problem, graph, devices, CLUSTER, None, [], progress=progress, heartbeat=stop_after_one)
    deadline = time.monotonic() + HANG_S  # the stopped workers end (the pool may start one more first)
    while (alive := [p for p in multiprocessing.active_children() if p.is_alive()]) and time.monotonic() < deadline:
        alive[0].join(1)
    assert not alive
    resumed = []
    records = state.sweep(problem, graph, devices, CLUSTER, None, [], progress=lambda d, t, e: resumed.append((d, e)))
    assert resumed[0][0] >= 1, "the points solved before the cancel are reused"
    assert resumed[-1][0] == len(devices)
    assert sorted({r["devices"] for r in records}) == devices
