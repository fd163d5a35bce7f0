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

from pase.model.pipeline import ScheduleResult, _order_arrays, in_flight

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
    Q, N = S, 2 * S * M
    x = np.arange(N, dtype=np.int32)
    d, j = np.divmod(x, np.int32(M))
    forward = d < Q
    s = np.where(forward, d, d - Q)
    if schedule == "gpipe":
        level = np.where(forward, s + j, (S + M - 1) + (S - 1 - s) + j)
    else:
        w = np.minimum(S - s - 1, M)
        level = np.where(forward, np.where(j <= w, s + j, s + 2 * j), 2 * S - 1 - s + 2 * j)
    # What each operation waits for (as pipeline._dependencies): the previous stage's forward, the next
    # stage's backward, or (the last stage's backward) its own forward; N for nothing.
    dep = np.where(forward, np.where(d > 0, x - M, N), np.where(d == 2 * Q - 1, x - Q * M, x + M))
    send = np.where(forward, np.where(d > 0, d - 1, Q - 1), np.where(d == 2 * Q - 1, Q - 1, d - Q))
    # The previous operation on the device, from the op's position in the device's order (pipeline.device_orders):
    # GPipe: F(j) at j, B(j) at m + j; 1F1B: w warm-up forwards, then F(w + i), B(i) in turn, then the drain.
    if schedule == "gpipe":
        w = np.zeros_like(s)
        pos = np.where(forward, j, M + j)
    else:
        pos = np.where(forward, np.where(j < w, j, 2 * j - w), np.where(j < M - w, w + 2 * j + 1, M + j))
    k = pos - 1
    if schedule == "gpipe":
        prev_f, prev_j = k < M, np.where(k < M, k, k - M)
    else:
        steady = (k >= w) & (k < 2 * M - w)
        prev_f = (k < w) | (steady & ((k - w) % 2 == 0))
        prev_j = np.where(k < w, k, np.where(steady, np.where(prev_f, w + (k - w) // 2, (k - w - 1) // 2), k - M))
    prev = np.where(k < 0, N, np.where(prev_f, s, Q + s) * M + prev_j)
    return level, prev, dep, send


@functools.lru_cache(maxsize=2)
def _layered(schedule: str, S: int, M: int):
    """The schedule's operations in level order: per operation (by its rank in that order) the rank of the
    previous operation on its device and of the one it waits for (``N``: none, ``N`` the operation count), the
    send it waits for (``S - 1``: none, the index of the appended zero) and its duration index (``q`` forward,
    ``S + q`` backward); the level boundaries; per device the rank of its last operation. None when the
    layering does not order every dependency (see the module docstring)."""
    N = 2 * S * M
    level, prev, dep, send = _structure(schedule, S, M)
    last = (S + np.arange(S, dtype=np.int32)) * M + (M - 1)  # every device ends with its last microbatch's backward
    levels = np.append(level, -1)  # nothing to wait for: level -1
    if (levels[prev] >= level).any() or (levels[dep] >= level).any():
        return None
    order = np.argsort(level.astype(np.uint16) if level.max() < 2 ** 16 else level, kind="stable")
    rank = np.empty(N + 1, dtype=np.int32)
    rank[order] = np.arange(N, dtype=np.int32)
    rank[N] = N
    bounds = np.concatenate(([0], np.cumsum(np.bincount(level[order])))).tolist()
    return rank[prev[order]], rank[dep[order]], send[order], (order // M).astype(np.int32), bounds, rank[last]


def simulate_levels(schedule: str, forward_s: list[float], backward_s: list[float], microbatches: int,
                    send_s: list[float], reduce_s: list[float], overlap: bool) -> ScheduleResult | None:
    """:func:`pase.model.pipeline.simulate` of a GPipe or 1F1B schedule (one stage per device; no record of
    the operations), equal to it bit for bit; None where the layering does not apply (then call it)."""
    S = len(forward_s)
    layered = _layered(schedule, S, microbatches)
    if layered is None:
        return None
    P, D, SEND, DUR, bounds, last = layered
    durations = np.array(forward_s + backward_s, dtype=float)
    delays = np.array(send_s + [0.0], dtype=float)
    du, dl = durations[DUR], delays[SEND]
    end = np.zeros(len(P) + 1)  # the last entry: nothing to wait for, 0
    for a, b in zip(bounds[:-1], bounds[1:]):
        x = end[D[a:b]]
        x += dl[a:b]
        np.maximum(end[P[a:b]], x, out=x)
        x += du[a:b]
        end[a:b] = x
    free = end[last].tolist()
    last_backward = durations[DUR[last]].tolist()
    exposed = tuple(max(0.0, r - lb) if overlap else r for r, lb in zip(reduce_s, last_backward))
    busy = tuple(microbatches * (forward_s[s] + backward_s[s]) for s in range(S))
    return ScheduleResult(step_time_s=max(t + e for t, e in zip(free, exposed)), finish_s=tuple(free), busy_s=busy,
                          exposed_reduce_s=exposed, in_flight=in_flight(schedule, S, microbatches, 1))
