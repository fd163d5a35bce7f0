"""Long pipelines timed level by level (pase.model.schedule_levels) against the operation-by-operation loop."""

from __future__ import annotations

import random

import pytest

from pase.model import schedule_levels
from pase.model.pipeline import simulate
from pase.model.schedule_levels import _ends, simulate_levels


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
        assert _fields(levels) == _fields(loop), (schedule, S, m)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_every_operation_ends_when_the_loop_ends_it(schedule):
    # Every forward's and backward's end equals the loop's record of it, bit for bit: from
    # one stage to 30, fewer microbatches than stages (warm-ups cut short, every forward first) and more.
    rng = random.Random(schedule)
    for S in range(1, 31):
        for m in sorted({1, 2, max(1, S - 2), S - 1 or 1, S, S + 1, 2 * S + 3, rng.randint(1, 3 * S + 4)}):
            f = [rng.choice([0.0, rng.random()]) for _ in range(S)]
            b = [rng.choice([0.0, rng.random() * 2]) for _ in range(S)]
            send = [rng.choice([0.0, rng.random() * 0.1]) for _ in range(S - 1)]
            loop = simulate(schedule, f, b, m, send_s=send, record=True)
            ends: dict = {}
            _ends(schedule, f, b, m, send, record=ends)
            assert len(ends) == len(loop.operations) == 2 * S * m
            for op in loop.operations:
                assert ends[op.kind, op.device, op.microbatch] == op.end_s, (schedule, S, m, op)


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
