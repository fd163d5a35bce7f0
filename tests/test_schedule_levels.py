"""Long pipelines timed level by level (pase.model.schedule_levels) against the operation-by-operation loop."""

from __future__ import annotations

import random

import pytest

from pase.model import schedule_levels
from pase.model.pipeline import _dependencies, simulate
from pase.model.schedule_levels import _layered, _structure, simulate_levels


def _fields(r):
    return r.step_time_s, r.finish_s, r.busy_s, r.exposed_reduce_s, r.in_flight


@pytest.mark.parametrize("seed", range(40))
def test_equal_to_the_loop_bit_for_bit(seed):
    # Random stage, send and reduction times, zeros among them (ties between the two inputs of an operation),
    # from one stage to many and from one microbatch (no steady state) to more than the stages.
    rng = random.Random(seed)
    for _ in range(10):
        S, m, schedule = rng.randint(1, 40), rng.randint(1, 70), rng.choice(["gpipe", "1f1b"])
        f = [rng.choice([0.0, 1.0, rng.random()]) for _ in range(S)]
        b = [rng.choice([0.0, 2.0, rng.random() * 2]) for _ in range(S)]
        send = [rng.choice([0.0, rng.random() * 0.1]) for _ in range(S - 1)]
        reduce = [rng.random() for _ in range(S)]
        overlap = rng.random() < 0.5
        loop = simulate(schedule, f, b, m, send_s=send, reduce_s=reduce, overlap=overlap)
        levels = simulate_levels(schedule, f, b, m, send, reduce, overlap)
        assert levels is not None, (schedule, S, m)
        assert _fields(levels) == _fields(loop), (schedule, S, m)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_structure_is_the_loops_and_its_levels_order_it(schedule):
    # Per operation, the predecessor on its device, the operation it waits for and the send are those the loop
    # builds from the schedule's device orders (pipeline._dependencies), and both lie on earlier levels.
    for S in range(1, 14):
        for m in range(1, 2 * S + 4):
            plan = _dependencies(schedule, S, m, 1)
            level, prev, dep, send = (a.tolist() for a in _structure(schedule, S, m))
            N = 2 * S * m
            for i, x in enumerate(plan.ids):
                want_prev = plan.ids[plan.prev[i]] if plan.prev[i] >= 0 else N
                want_dep = plan.ids[plan.dep[i]] if plan.dep[i] >= 0 else N
                want_send = plan.send[i] if plan.send[i] >= 0 else S - 1
                assert (prev[x], dep[x], send[x]) == (want_prev, want_dep, want_send), (schedule, S, m, x)
                for before in (prev[x], dep[x]):
                    assert before == N or level[before] < level[x]
            assert _layered(schedule, S, m) is not None


def test_a_search_through_the_levels_equals_brute_force(monkeypatch):
    # The joint search with every GPipe and 1F1B schedule timed level by level keeps the plans of the loop.
    from tests.test_training import SPACE, _brute_force, _cluster, BUILD
    from pase.search.stages import search_training

    monkeypatch.setattr("pase.model.training.worth_levels",
                        lambda schedule, stages, microbatches, chunks: schedule in ("gpipe", "1f1b") and chunks == 1)
    cluster = _cluster(8, 4, None)
    found = search_training(BUILD, cluster, 16, **SPACE)
    every = [r for r in _brute_force(cluster, 16) if r.fits_memory is not False]
    kept = [found.best, *found.runners_up]
    assert [r.step_time_s for r in kept] == pytest.approx(sorted(r.step_time_s for r in every)[:len(kept)],
                                                          rel=1e-12)


def test_worth_it_only_for_long_deep_pipelines():
    assert schedule_levels.worth_levels("1f1b", 641, 2520, 1)
    assert not schedule_levels.worth_levels("interleaved", 64, 2520, 2)
    assert not schedule_levels.worth_levels("1f1b", 8, 64, 1)
