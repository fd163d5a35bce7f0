"""Long GPipe and 1F1B pipelines timed level by level: :func:`pase.model.pipeline.simulate`'s arithmetic, vectorised.

:func:`pase.model.pipeline.simulate` times a step as one pass over the
schedule's operations, each ending at ``max(end of the previous operation on
its device, end of the one it waits for + the send) + its duration``: a
Python loop of ``2 S m`` steps, over a second at 641 stages and 2,520
microbatches. Here the operations are grouped into levels such that every
operation waits only on operations of earlier levels (a topological layering
of the same dependency graph), and each level is a few vectorised steps: the
same additions and maxima on the same numbers, so every end time, and the
step, are equal to the loop's bit for bit (a test compares every operation's
end).

The layering, for operation ``F(s, j)`` / ``B(s, j)`` of microbatch ``j`` on
stage ``s`` of ``S`` with ``m`` microbatches:

* GPipe: ``F`` at ``s + j``, ``B`` at ``(S + m - 1) + (S - 1 - s) + j``;
* 1F1B (``w_s = min(S - s - 1, m)`` warm-up forwards): ``F`` at ``s + j`` up
  to ``j = w_s``, then ``s + 2 j``; ``B`` at ``2 S - 1 - s + 2 j``

(the start slots of the schedule with unit times). Every operation waits on
an operation of the level just before it (the previous microbatch's forward
one stage up, the backward one stage down, the last stage's backward on its
own forward; a GPipe last stage's backward on a forward of long before), and
a device runs at most one operation a level, so the operation it waits on is
the latest its stage ran; its predecessor on its own device is the latest of
its own stage. So one vector of each stage's latest end is the whole state:
a level's operations are a run of every stage or every other one, and its
step is a few numpy operations on strided views of that vector (read before
any is written), no per-operation index arrays.
"""

from __future__ import annotations

import numpy as np

from pase.model.pipeline import ScheduleResult, in_flight

__all__ = ["simulate_levels", "LEVEL_SCHEDULES", "worth_levels"]

LEVEL_SCHEDULES = ("gpipe", "1f1b")


def worth_levels(schedule: str, stages: int, microbatches: int, chunks: int) -> bool:
    """Whether :func:`simulate_levels` is the faster way: a GPipe or 1F1B schedule long and deep enough that a
    level's vectorised steps do the work of many loop steps."""
    return schedule in LEVEL_SCHEDULES and chunks == 1 and stages >= 16 and stages * microbatches >= 20_000


def _ends(schedule: str, forward_s, backward_s, microbatches: int, send_s,
          record: dict | None = None) -> np.ndarray:
    """Per stage, when its last operation (its last microbatch's backward) ends; with ``record`` (a dict), every
    operation's end is kept under ``("F" or "B", stage, microbatch)``."""
    S, M = len(forward_s), microbatches
    last = np.zeros(S + 2)  # stage s's latest end at s + 1; 0: before the first stage, S + 1: a last backward's wait
    f, b = np.asarray(forward_s, dtype=float), np.asarray(backward_s, dtype=float)
    sends = np.asarray(send_s, dtype=float)
    # The send a forward of stage s waits on is s - 1's, a backward's s's; none (0) for the first forward and the
    # last stage's backward.
    send_f, send_b = np.concatenate(([0.0], sends)), np.concatenate((sends, [0.0]))
    gpipe = schedule == "gpipe"
    last_forwards = np.zeros(M)  # GPipe: the last stage's forwards, which its backwards wait on

    def run(lo: int, count: int, step: int, wait: int, waits: np.ndarray, durations: np.ndarray, kind: str,
            micro: int, micro_step: int):
        # `count` operations on stages lo, lo + step, ...: the end of the one each waits on (stage s + wait) plus
        # its send, or its stage's latest end if later, plus its duration. Returns where they go and their ends.
        if count <= 0:
            return None
        stop = lo + step * count
        ends = last[lo + 1 + wait:stop + 1 + wait:step] + waits[lo:stop:step]
        here = slice(lo + 1, stop + 1, step)
        np.maximum(last[here], ends, out=ends)
        ends += durations[lo:stop:step]
        if record is not None:
            for k, end in enumerate(ends.tolist()):
                record[kind, lo + step * k, micro + micro_step * k] = end
        return here, ends

    warm = S + M - 1 if gpipe else S  # levels of forwards alone, F(s, L - s)
    for L in range(warm):
        lo = max(0, L - M + 1)
        here, ends = run(lo, min(S - 1, L) - lo + 1, 1, -1, send_f, f, "F", L - lo, -1)
        last[here] = ends
        if gpipe and L >= S - 1:
            last_forwards[L - S + 1] = last[S]
    for L in range(warm, 2 * S + 2 * M - 2):
        if gpipe:  # B(s, L - 2 S - M + 2 + s)
            lo, j = max(0, 2 * S + M - 2 - L), L - (S + M - 1)
            if j < M:
                last[S + 1] = last_forwards[j]
            done = run(lo, min(S - 1, 2 * S + 2 * M - 3 - L) - lo + 1, 1, 1, send_b, b, "B",
                       L - 2 * S - M + 2 + lo, 1)
            last[done[0]] = done[1]
            continue
        last[S + 1] = last[S]  # the last stage's backward waits on its own forward, the level before
        # Steady forwards F(s, (L - s) / 2), s of L's parity; backwards B(s, (L - 2 S + 1 + s) / 2), the other.
        lo = max(2 * S - L, L - 2 * M + 2, 0)
        lo += (lo - L) % 2
        forwards = run(lo, (S - 1 - lo) // 2 + 1, 2, -1, send_f, f, "F", (L - lo) // 2, -1)
        lo = max(0, 2 * S - 1 - L)
        lo += (lo - L - 1) % 2
        backwards = run(lo, (min(S - 1, 2 * M + 2 * S - 3 - L) - lo) // 2 + 1, 2, 1, send_b, b, "B",
                        (L - 2 * S + 1 + lo) // 2, 1)
        for done in (forwards, backwards):
            if done is not None:
                last[done[0]] = done[1]
    return last[1:S + 1]


def simulate_levels(schedule: str, forward_s: list[float], backward_s: list[float], microbatches: int,
                    send_s: list[float], reduce_s: list[float], overlap: bool) -> ScheduleResult:
    """:func:`pase.model.pipeline.simulate` of a GPipe or 1F1B schedule (one stage per device; no record of
    the operations), equal to it bit for bit."""
    S = len(forward_s)
    free = _ends(schedule, forward_s, backward_s, microbatches, send_s).tolist()
    exposed = tuple(max(0.0, r - lb) if overlap else r for r, lb in zip(reduce_s, backward_s))
    busy = tuple(microbatches * (forward_s[s] + backward_s[s]) for s in range(S))
    return ScheduleResult(step_time_s=max(t + e for t, e in zip(free, exposed)), finish_s=tuple(free), busy_s=busy,
                          exposed_reduce_s=exposed, in_flight=in_flight(schedule, S, microbatches, 1))
