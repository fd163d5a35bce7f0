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

(the start slots of the schedule with unit times). On a level the operations
of one kind form runs of stages, every stage or every other one, whose ends,
predecessors and inputs lie at fixed strides in one table of end times:
row ``s + 1`` holds ``F(s, .)``, row ``2 S - s`` holds ``B(s, .)`` (so the
operation any ``F`` or ``B`` waits for is one row up: ``F(s - 1, j)``,
``B(s + 1, j)``, and for the last stage's backward its own forward), column
``j + 1`` microbatch ``j``; row 0 and column 0 are zeros (nothing to wait
for), except that a backward's column 0 holds its stage's last forward, the
operation before its first backward when every forward comes first. Each run
is then a handful of numpy operations on strided views: no per-operation
index arrays are built.
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


def _run(table: np.ndarray, R: int, out: int, stride: int, prev: int, prev_stride: int, count: int,
         stage: int, stage_step: int, sends: np.ndarray, durations: np.ndarray) -> None:
    """End times of ``count`` operations of one level: the first at flat index ``out`` of ``table`` (rows of
    ``R``), then every ``stride``; each after its predecessor (from ``prev``, every ``prev_stride``) and the
    operation one row up plus its send, lasting its stage's duration (stages from ``stage`` every
    ``stage_step``). Strided views, none of whose stops is negative (``None``: to the start)."""
    if count <= 0:
        return
    stop = out + stride * count
    span = slice(out, stop if stop >= 0 else None, stride)
    stop -= R
    x = table[out - R:stop if stop >= 0 else None:stride] + sends[stage:stage + stage_step * count:stage_step]
    stop = prev + prev_stride * count
    np.maximum(table[prev:stop if stop >= 0 else None:prev_stride], x, out=x)
    x += durations[stage:stage + stage_step * count:stage_step]
    table[span] = x


def _ends(schedule: str, forward_s, backward_s, microbatches: int, send_s) -> np.ndarray:
    """The table of every operation's end (the module docstring's layout), shape ``(2 S + 1, m + 1)``."""
    S, M = len(forward_s), microbatches
    R = M + 1
    table = np.zeros((2 * S + 1) * R)
    f, b = np.asarray(forward_s, dtype=float), np.asarray(backward_s, dtype=float)
    sends = np.asarray(send_s, dtype=float)
    # The send a forward of stage s waits on is s - 1's, a backward's s's; none (0) for the first forward and the
    # last stage's backward.
    send_f, send_b = np.concatenate(([0.0], sends)), np.concatenate((sends, [0.0]))
    grid = table.reshape(2 * S + 1, R)
    warm = S + M - 1 if schedule == "gpipe" else S  # levels of forwards alone, at s + j
    for L in range(warm):
        lo, hi = max(0, L - M + 1), min(S - 1, L)
        out = (lo + 1) * R + L - lo + 1
        _run(table, R, out, R - 1, out - 1, R - 1, hi - lo + 1, lo, 1, send_f, f)
    # A backward's column 0: its stage's last forward, for the stages whose forwards all come first.
    first = S if schedule == "gpipe" else max(0, S - M)
    grid[2 * S - np.arange(first), 0] = grid[1 + np.arange(first), M]
    for L in range(warm, 2 * S + 2 * M - 2):
        if schedule == "gpipe":
            lo, hi = max(0, 2 * S + M - 2 - L), min(S - 1, 2 * S + 2 * M - 3 - L)
            out = (2 * S - lo) * R + L - 2 * S - M + 3 + lo
            _run(table, R, out, 1 - R, out - 1, 1 - R, hi - lo + 1, lo, 1, send_b, b)
            continue
        # Steady forwards F(s, (L - s) / 2), s of L's parity, after B(s, j - S + s).
        lo = max(2 * S - L, L - 2 * M + 2, 0)
        lo += (lo - L) % 2
        j = (L - lo) // 2
        _run(table, R, (lo + 1) * R + j + 1, 2 * R - 1, (2 * S - lo) * R + j - S + lo + 1, 1 - 2 * R,
             (S - 1 - lo) // 2 + 1, lo, 2, send_f, f)
        # Backwards B(s, (L - 2 S + 1 + s) / 2), s of the other parity: draining (after B(s, j - 1)) below
        # s = L - 2 m, after F(s, j + S - 1 - s) from there.
        lo, hi = max(0, 2 * S - 1 - L), min(S - 1, 2 * M + 2 * S - 3 - L)
        lo += (lo - L - 1) % 2
        split = max(lo, L - 2 * M)
        split += (split - lo) % 2
        j = (L - 2 * S + 1 + lo) // 2
        out = (2 * S - lo) * R + j + 1
        drained = (min(hi + 1, split) - lo + 1) // 2
        _run(table, R, out, 1 - 2 * R, out - 1, 1 - 2 * R, drained, lo, 2, send_b, b)
        lo, j = lo + 2 * drained, j + drained
        _run(table, R, (2 * S - lo) * R + j + 1, 1 - 2 * R, (lo + 1) * R + j + S - lo, 2 * R - 1,
             (hi - lo) // 2 + 1, lo, 2, send_b, b)
    return grid


def simulate_levels(schedule: str, forward_s: list[float], backward_s: list[float], microbatches: int,
                    send_s: list[float], reduce_s: list[float], overlap: bool) -> ScheduleResult:
    """:func:`pase.model.pipeline.simulate` of a GPipe or 1F1B schedule (one stage per device; no record of
    the operations), equal to it bit for bit."""
    S, M = len(forward_s), microbatches
    grid = _ends(schedule, forward_s, backward_s, M, send_s)
    free = grid[2 * S - np.arange(S), M].tolist()  # every device ends with its last microbatch's backward
    exposed = tuple(max(0.0, r - lb) if overlap else r for r, lb in zip(reduce_s, backward_s))
    busy = tuple(microbatches * (forward_s[s] + backward_s[s]) for s in range(S))
    return ScheduleResult(step_time_s=max(t + e for t, e in zip(free, exposed)), finish_s=tuple(free), busy_s=busy,
                          exposed_reduce_s=exposed, in_flight=in_flight(schedule, S, microbatches, 1))
