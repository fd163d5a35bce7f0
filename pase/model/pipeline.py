"""Pipeline schedules: the step time of ``S`` stages training on ``m`` microbatches.

A pipeline cuts the model into ``S`` stages, each on its own devices, and
feeds them ``m`` microbatches. Under the interleaved schedule each device
holds ``v`` chunks (virtual stages): virtual stage ``q = c S + s`` is chunk
``c`` of device ``s``, so a microbatch visits every device ``v`` times.

The model
---------
Every device runs its operations in the schedule's fixed order (below). An
operation is the forward ``F(q, j)`` or backward ``B(q, j)`` of microbatch
``j`` on virtual stage ``q``; it starts when its device has finished the
previous operation in its order and its input has arrived:

* ``F(q, j)`` after ``F(q - 1, j)`` plus the send between the two stages;
* ``B(q, j)`` after ``B(q + 1, j)`` plus the send back; ``B(Q - 1, j)``
  after ``F(Q - 1, j)``.

Sends run on their own stream: they delay the receiver, not the sender.
This is exact for the schedule (a longest path through its dependency
graph), whatever the stage times; the published closed forms follow for
equal stages (``(m + S - 1)(f + b)`` for GPipe and 1F1B, a bubble of
``(S - 1)/v`` stage times interleaved) and tests check both against an
event simulation.

After its last backward a device reduces its gradients over its
data-parallel group (``reduce_s``): serially (the paper's model) or, with
``overlap``, alongside that last backward (bucketed reduction, as DDP and
Megatron do), exposing only what outlasts it. The step ends when the last
device finishes; the optimizer step is not modelled.

Orders (Megatron-LM's ``schedules.py`` and GPipe)
--------------------------------------------------
``gpipe``
    All ``m`` forwards, then all ``m`` backwards. Every device keeps ``m``
    microbatches of activations.
``1f1b``
    Device ``s`` runs ``min(S - s - 1, m)`` warm-up forwards, then alternates
    one forward and one backward, then drains the backwards. Device ``s``
    keeps at most ``min(S - s, m)`` microbatches.
``interleaved``
    Megatron's interleaved 1F1B: ``(S - s - 1) 2 + (v - 1) S`` warm-up
    forwards, then 1F1B; forward number ``i`` of a device is chunk
    ``(i // S) mod v`` of microbatch ``(i // (S v)) S + i mod S``, backwards
    visit the chunks in reverse. Needs ``m`` a multiple of ``S``. Device 0
    keeps ``S + (S - 1)/v`` microbatches' worth of activations (each chunk
    holding ``1/v``), Korthikanti et al.'s ``S (1 + (S - 1)/(S v))``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pase.errors import ConfigurationError

__all__ = ["SCHEDULES", "Operation", "ScheduleResult", "device_orders", "in_flight", "simulate"]

SCHEDULES = ("1f1b", "interleaved", "gpipe")


@dataclass(frozen=True)
class Operation:
    """One forward (``kind`` ``"F"``) or backward (``"B"``) of a microbatch on a chunk of a device; times in seconds."""

    device: int
    chunk: int
    microbatch: int
    kind: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class ScheduleResult:
    """Timing of one training step under a schedule.

    Attributes
    ----------
    step_time_s : float
        From the first forward to the end of the last gradient reduction.
    finish_s : tuple of float
        Per device, when its last backward ends.
    busy_s : tuple of float
        Per device, seconds of forward and backward work.
    exposed_reduce_s : tuple of float
        Per device, gradient-reduction seconds not hidden behind its backward.
    in_flight : tuple of float
        Per device, the most microbatches' worth of activations it holds at once
        (a chunk of an interleaved stage counts ``1/v``).
    operations : tuple of Operation
        Every operation with its start and end (empty unless asked for).
    """

    step_time_s: float
    finish_s: tuple[float, ...]
    busy_s: tuple[float, ...]
    exposed_reduce_s: tuple[float, ...]
    in_flight: tuple[float, ...]
    operations: tuple[Operation, ...] = ()

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the busiest device's step, ``1 - busy / step time``."""
        return 1.0 - max(self.busy_s) / self.step_time_s if self.step_time_s > 0 else 0.0


def _check(schedule: str, stages: int, microbatches: int, chunks: int) -> None:
    if schedule not in SCHEDULES:
        raise ConfigurationError(f"unknown pipeline schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    for name, value in (("stages", stages), ("microbatches", microbatches), ("virtual stages per device", chunks)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigurationError(f"pipeline {name} must be a positive integer, not {value!r}")
    if schedule != "interleaved" and chunks != 1:
        raise ConfigurationError(
            f"the {schedule} schedule has one stage per device; {chunks} virtual stages per device need "
            "the interleaved schedule")
    if schedule == "interleaved" and microbatches % stages:
        raise ConfigurationError(
            f"the interleaved schedule needs the number of microbatches ({microbatches}) to be a multiple of the "
            f"pipeline stages ({stages}); choose a global batch or microbatch size that makes it one")


def device_orders(schedule: str, stages: int, microbatches: int, chunks: int = 1) -> list[list[tuple[str, int, int]]]:
    """Per device, its operations in order as ``(kind, chunk, microbatch)``; see the module docstring.

    Raises
    ------
    ConfigurationError
        An unknown schedule, a count below 1, ``chunks > 1`` without the
        interleaved schedule, or ``microbatches`` not a multiple of ``stages``
        for it.
    """
    return [[("F" if f else "B", int(c), int(j)) for f, c, j in zip(*order)]
            for order in _order_arrays(schedule, stages, microbatches, chunks)]


def _order_arrays(schedule: str, S: int, m: int, v: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per device, its operations in order as arrays: forward or not, chunk, microbatch (:func:`device_orders`).

    Raises ``ConfigurationError`` as :func:`device_orders`.
    """
    _check(schedule, S, m, v)
    total = m * v
    i = np.arange(total)
    if schedule == "gpipe":
        order = (np.repeat([True, False], m), np.zeros(2 * m, dtype=np.int64), np.tile(np.arange(m), 2))
        return [order] * S
    # Forward number i of a device is chunk (i // S) mod v of microbatch (i // (S v)) S + i mod S; backwards
    # visit the chunks in reverse.
    group, within = np.divmod(i, S * v)
    chunk, micro = within // S, group * S + within % S
    orders = []
    for s in range(S):
        warmup = min(total, (S - s - 1) if v == 1 else (S - s - 1) * 2 + (v - 1) * S)
        steady = total - warmup
        # Warm-up forwards, then a forward and a backward in turn, then the remaining backwards.
        at_f = np.concatenate((np.arange(warmup), warmup + 2 * np.arange(steady)))
        at_b = np.concatenate((warmup + 2 * np.arange(steady) + 1, warmup + 2 * steady + np.arange(warmup)))
        forward = np.zeros(2 * total, dtype=bool)
        chunks, micros = np.empty(2 * total, dtype=np.int64), np.empty(2 * total, dtype=np.int64)
        forward[at_f] = True
        chunks[at_f], chunks[at_b] = chunk, v - 1 - chunk
        micros[at_f], micros[at_b] = micro, micro
        orders.append((forward, chunks, micros))
    return orders


def in_flight(schedule: str, stages: int, microbatches: int, chunks: int = 1) -> tuple[float, ...]:
    """Per device, the most microbatches' worth of activations held at once (a chunk counts ``1/chunks``).

    The peak of forwards begun and backwards not yet done in the device's
    order (:func:`device_orders`): its warm-up forwards plus the first
    steady-state one, or every forward when there is no steady state.

    Raises ``ConfigurationError`` as :func:`device_orders`.
    """
    _check(schedule, stages, microbatches, chunks)
    S, m, v = stages, microbatches, chunks
    if schedule == "gpipe":
        return (float(m),) * S
    out = []
    for s in range(S):
        warmup = (S - s - 1) if v == 1 else (S - s - 1) * 2 + (v - 1) * S
        out.append(min(m * v, warmup + 1) / v)
    return tuple(out)


@dataclass(frozen=True)
class _Plan:
    """A schedule's operations in an order that respects every dependency, and per operation (as indices into
    that order, -1 for none) the previous operation on its device, the one whose output it waits for, the
    send between them (a stage boundary) and its duration (``q`` forward, ``Q + q`` backward).

    An operation's id is ``d M + j`` for microbatch ``j`` of ``M``, with ``d = q`` for the forward of virtual
    stage ``q`` and ``d = Q + q`` for its backward: ``d`` also indexes the durations.
    """

    ids: list[int]
    prev: list[int]
    dep: list[int]
    send: list[int]
    duration: list[int]
    last: list[int]  # per device, the position of its last operation


@functools.lru_cache(maxsize=32)
def _dependencies(schedule: str, S: int, microbatches: int, chunks: int) -> _Plan:
    """The dependency structure of a schedule, which does not depend on the stage times (built once per
    schedule, stage count, microbatches and chunks; each step is then one pass in this order).

    Raises ``ConfigurationError`` as :func:`device_orders`, or when the order deadlocks.
    """
    M, Q = microbatches, S * chunks
    devices = [(((chunk * S + s) + np.where(forward, 0, Q)) * M + micro).tolist()
               for s, (forward, chunk, micro) in enumerate(_order_arrays(schedule, S, M, chunks))]
    pos = [-1] * (2 * Q * M)
    ids: list[int] = []
    prev: list[int] = []
    dep: list[int] = []
    send: list[int] = []
    last = [-1] * S
    nxt = [0] * S
    remaining = len(pos)
    while remaining:
        progressed = False
        for s in range(S):
            order, k = devices[s], nxt[s]
            while k < len(order):
                x = order[k]
                d = x // M
                if d < Q:  # F(q, j) waits for F(q - 1, j) and the send between them
                    wait, delay = (x - M, d - 1) if d else (-1, -1)
                elif d == 2 * Q - 1:  # B(Q - 1, j) waits for F(Q - 1, j)
                    wait, delay = x - Q * M, -1
                else:  # B(q, j) waits for B(q + 1, j) and the send back
                    wait, delay = x + M, d - Q
                if wait >= 0 and pos[wait] < 0:
                    break
                pos[x] = len(ids)
                ids.append(x)
                prev.append(last[s])
                dep.append(pos[wait] if wait >= 0 else -1)
                send.append(delay)
                last[s] = len(ids) - 1
                k += 1
            if k != nxt[s]:
                progressed = True
                remaining -= k - nxt[s]
                nxt[s] = k
        if not progressed:
            raise ConfigurationError(f"the {schedule} order deadlocks with {S} stages and {microbatches} microbatches")
    return _Plan(ids, prev, dep, send, [x // M for x in ids], last)


def simulate(
    schedule: str,
    forward_s: Sequence[float],
    backward_s: Sequence[float],
    microbatches: int,
    *,
    chunks: int = 1,
    send_s: Sequence[float] | None = None,
    reduce_s: Sequence[float] | None = None,
    overlap: bool = False,
    record: bool = False,
) -> ScheduleResult:
    """Time one training step under ``schedule`` (see the module docstring for the model).

    Parameters
    ----------
    forward_s, backward_s : sequence of float
        Seconds of one microbatch's forward and backward on each virtual stage
        ``q = c S + s`` (``S x chunks`` entries; ``S`` stages when ``chunks`` is 1).
    microbatches : int
        Microbatches per step, ``m``.
    chunks : int
        Virtual stages per device ``v`` (interleaved schedule only).
    send_s : sequence of float, optional
        Seconds to send one microbatch's activation (and, back, its gradient)
        from virtual stage ``q`` to ``q + 1``; ``Q - 1`` entries, default none.
    reduce_s : sequence of float, optional
        Per device, seconds of its gradient reduction after the last backward.
    overlap : bool
        Overlap each device's reduction with its last backward.
    record : bool
        Keep every operation's start and end in the result (for charts).

    Raises
    ------
    ConfigurationError
        The counts or schedule are invalid (:func:`device_orders`), or the
        time vectors have the wrong length or a negative entry.
    """
    f, b = [float(x) for x in forward_s], [float(x) for x in backward_s]
    Q = len(f)
    if not Q or len(b) != Q or Q % chunks:
        raise ConfigurationError(
            f"pipeline stage times: {len(f)} forward and {len(b)} backward entries for {chunks} virtual stage(s) "
            "per device; give one of each per virtual stage")
    S = Q // chunks
    sends = [0.0] * (Q - 1) if send_s is None else [float(x) for x in send_s]
    reduces = [0.0] * S if reduce_s is None else [float(x) for x in reduce_s]
    if len(sends) != Q - 1 or len(reduces) != S:
        raise ConfigurationError(f"pipeline: {len(sends)} send times for {Q - 1} stage boundaries and "
                                 f"{len(reduces)} reduction times for {S} devices")
    if min(f + b + sends + reduces) < 0:
        raise ConfigurationError("pipeline: stage, send and reduction times must not be negative")
    plan = _dependencies(schedule, S, microbatches, chunks)
    durations = f + b
    delays = sends + [0.0]  # index -1: no send
    end = [0.0] * (len(plan.ids) + 1)  # index -1: nothing to wait for
    for i, (prev, dep, send, op) in enumerate(zip(plan.prev, plan.dep, plan.send, plan.duration)):
        start, ready = end[prev], end[dep] + delays[send]
        end[i] = (start if start > ready else ready) + durations[op]
    ops: list[Operation] = []
    if record:
        for i, (x, d, prev, dep, send) in enumerate(zip(plan.ids, plan.duration, plan.prev, plan.dep, plan.send)):
            q = d if d < Q else d - Q
            ops.append(Operation(q % S, q // S, x % microbatches, "F" if d < Q else "B",
                                 max(end[prev], end[dep] + delays[send]), end[i]))
    free = [end[i] for i in plan.last]
    last_backward = [durations[plan.duration[i]] for i in plan.last]
    exposed = tuple(max(0.0, r - lb) if overlap else r for r, lb in zip(reduces, last_backward))
    busy = tuple(microbatches * sum(f[c * S + s] + b[c * S + s] for c in range(chunks)) for s in range(S))
    return ScheduleResult(
        step_time_s=max(t + e for t, e in zip(free, exposed)),
        finish_s=tuple(free), busy_s=busy, exposed_reduce_s=exposed,
        in_flight=in_flight(schedule, S, microbatches, chunks),
        operations=tuple(sorted(ops, key=lambda o: (o.start_s, o.device))),
    )
