"""Long GPipe and 1F1B pipelines timed level by level: :func:`pase.model.pipeline.simulate`'s arithmetic, vectorised.

:func:`pase.model.pipeline.simulate` times a step as one pass over the
schedule's operations, each ending at ``max(end of the previous operation on
its device, end of the one it waits for + the send) + its duration``: a
Python loop of ``2 S m`` steps, over a second at 641 stages and 2,520
microbatches. Here the operations are grouped into levels such that every
operation waits only on operations of earlier levels (a topological layering
of the same dependency graph), and each level is one vectorised step: the
same additions and maxima on the same numbers, so every end time, and the
step, are equal to the loop's bit for bit (a test compares them).

The layering, for operation ``F(s, j)`` / ``B(s, j)`` of microbatch ``j`` on
stage ``s`` of ``S`` with ``m`` microbatches:

* GPipe: ``F`` at ``s + j``, ``B`` at ``(S + m - 1) + (S - 1 - s) + j``;
* 1F1B (``w_s = min(S - s - 1, m)`` warm-up forwards): ``F`` at ``s + j`` up
  to ``j = w_s``, then ``s + 2 j``; ``B`` at ``2 S - 1 - s + 2 j``

(the start slots of the schedule with unit times). Every dependency is
checked to point to an earlier level before the layering is used; where one
does not (a case the formulas do not cover), :func:`simulate_levels` returns
None and the caller runs the loop.
"""

from __future__ import annotations

import functools

import numpy as np

from pase.model.pipeline import ScheduleResult, in_flight

__all__ = ["simulate_levels", "LEVEL_SCHEDULES", "worth_levels"]

LEVEL_SCHEDULES = ("gpipe", "1f1b")


def worth_levels(schedule: str, stages: int, microbatches: int, chunks: int) -> bool:
    """Whether :func:`simulate_levels` is the faster way: a GPipe or 1F1B schedule long and deep enough that a
    level's vectorised step does the work of many loop steps."""
    return schedule in LEVEL_SCHEDULES and chunks == 1 and stages >= 16 and stages * microbatches >= 20_000


def _structure(schedule: str, S: int, M: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per operation id (``d M + j`` as :class:`pase.model.pipeline._Plan`: ``d = s`` forward, ``S + s``
    backward), its level, the id of the previous operation on its device and of the one it waits for (``N``,
    the operation count: none) and the send it waits for (``S - 1``, the index of an appended zero: none)."""
    N = 2 * S * M
    # Forwards (ids s M + j) and backwards (ids (S + s) M + j) as (S, M) arrays, joined at the end.
    s = np.arange(S, dtype=np.int32)[:, None]
    j = np.arange(M, dtype=np.int32)[None, :]
    fid = s * M + j
    bid = fid + S * M
    if schedule == "gpipe":
        level_f, level_b = s + j, (S + M - 1) + (S - 1 - s) + j
    else:
        w = np.minimum(S - s - 1, M)  # warm-up forwards
        level_f, level_b = np.where(j <= w, s + j, s + 2 * j), 2 * S - 1 - s + 2 * j
    # What each operation waits for (as pipeline._dependencies): the previous stage's forward, the next
    # stage's backward, or (the last stage's backward) its own forward; N for nothing.
    last = s == S - 1
    dep_f = np.where(s > 0, fid - M, N)
    dep_b = np.where(last, fid, bid + M)
    send_f = np.broadcast_to(np.where(s > 0, s - 1, S - 1), (S, M))
    send_b = np.broadcast_to(np.where(last, S - 1, s), (S, M))

    # The previous operation on the device in the schedule's order (pipeline.device_orders). GPipe: F(j - 1)
    # before F(j), F(m - 1) then B(j - 1) before B(j). 1F1B: w warm-up forwards, then F(w + i), B(i) in turn,
    # then the drain: F(j - 1) before F(j) up to j = w, B(j - w - 1) after; F(j + w) before a steady B(j), and
    # before a draining one B(j - 1), or F(m - 1) when it is the first backward.
    if schedule == "gpipe":
        prev_f = np.where(j > 0, fid - 1, N)
        prev_b = np.where(j > 0, bid - 1, s * M + (M - 1))
    else:
        prev_f = np.where(j == 0, N, np.where(j <= w, fid - 1, bid - w - 1))
        prev_b = np.where(j < M - w, fid + w, np.where(j > 0, bid - 1, s * M + (M - 1)))

    def joined(f: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.concatenate((np.ravel(f), np.ravel(b)))

    level, prev = joined(level_f, level_b), joined(prev_f, prev_b)
    dep, send = joined(dep_f, dep_b), joined(send_f, send_b)
    return level, prev, dep, send


@functools.lru_cache(maxsize=4)
def _layered(schedule: str, S: int, M: int):
    """The schedule's operations in level order: their ids, per operation the id of the previous operation on
    its device and of the one it waits for (``N``, the operation count: none), the send it waits for (``S -
    1``: none, the index of the appended zero) and its duration index (``q`` forward, ``S + q`` backward); the
    level boundaries. None when the layering does not order every dependency (see the module docstring)."""
    level, prev, dep, send = _structure(schedule, S, M)
    levels = np.append(level, -1)  # nothing to wait for: level -1
    if (levels[prev] >= level).any() or (levels[dep] >= level).any():
        return None
    order = np.argsort(level.astype(np.uint16) if level.max() < 2 ** 16 else level, kind="stable").astype(np.int32)
    bounds = np.concatenate(([0], np.cumsum(np.bincount(level)))).tolist()
    return order, prev[order], dep[order], send[order], order // M, bounds


def simulate_levels(schedule: str, forward_s: list[float], backward_s: list[float], microbatches: int,
                    send_s: list[float], reduce_s: list[float], overlap: bool) -> ScheduleResult | None:
    """:func:`pase.model.pipeline.simulate` of a GPipe or 1F1B schedule (one stage per device; no record of
    the operations), equal to it bit for bit; None where the layering does not apply (then call it)."""
    S, M = len(forward_s), microbatches
    layered = _layered(schedule, S, M)
    if layered is None:
        return None
    ids, P, D, SEND, DUR, bounds = layered
    durations = np.array(forward_s + backward_s, dtype=float)
    delays = np.array(send_s + [0.0], dtype=float)
    du, dl = durations[DUR], delays[SEND]
    end = np.zeros(2 * S * M + 1)  # by operation id; the last entry: nothing to wait for, 0
    for a, b in zip(bounds[:-1], bounds[1:]):
        x = end[D[a:b]]
        x += dl[a:b]
        np.maximum(end[P[a:b]], x, out=x)
        x += du[a:b]
        end[ids[a:b]] = x
    last = (S + np.arange(S)) * M + (M - 1)  # every device ends with its last microbatch's backward
    free = end[last].tolist()
    last_backward = backward_s
    exposed = tuple(max(0.0, r - lb) if overlap else r for r, lb in zip(reduce_s, last_backward))
    busy = tuple(microbatches * (forward_s[s] + backward_s[s]) for s in range(S))
    return ScheduleResult(step_time_s=max(t + e for t, e in zip(free, exposed)), finish_s=tuple(free), busy_s=busy,
                          exposed_reduce_s=exposed, in_flight=in_flight(schedule, S, microbatches, 1))
