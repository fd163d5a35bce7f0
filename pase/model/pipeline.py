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

Zero bubble (torch.distributed.pipelining, as torchtitan runs it)
------------------------------------------------------------------
``zb1p``
    Qi et al.'s ZB-1P (arXiv 2401.10241), as torch's
    ``ScheduleInterleavedZeroBubble`` orders it (torch 2.13, torchtitan
    0.2.2's ``InterleavedZeroBubble``): the backward splits into ``B``, the
    input gradient the previous stage waits for, and ``W``, the weight
    gradient, which waits only for its ``B`` and is deferred to fill the
    bubble. With ``R = max(1, m // S)`` rounds of ``r = m / R`` microbatches
    (``m`` a multiple of ``R``), device ``s`` runs ``(v - 1) r + S - s - 1``
    warm-up forwards, then a forward and a ``B`` in turn, adding the oldest
    deferred ``W`` after each pair once ``s`` pairs have passed, then the
    remaining ``B`` and ``W``; forward number ``i`` is chunk ``(i // r) mod v``.
    With one chunk per device this is ZB-H1: the bubble shrinks from 1F1B's
    ``(S - 1)(f + b)`` to about ``(S - 1)(f + b - 2 w)`` (``w`` the weight
    gradient's share of ``b``). A microbatch's activations are held from its
    forward until its ``W`` (the weight gradient reads the stored inputs of
    the products; pase counts the whole microbatch, an upper bound): every
    device then holds at most ``S`` microbatches, 1F1B's first stage's.

Megatron-Core 0.16 has no zero-bubble schedule; torch's V-shaped ``ZBVZeroBubble``
and ``DualPipeV`` place two chunks a device in a V, which pase's chunk
placement (chunk ``c`` of device ``s`` is virtual stage ``c S + s``) does not
model.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pase.errors import ConfigurationError

__all__ = ["SCHEDULES", "ZERO_BUBBLE", "CHUNKED", "TITLES", "Operation", "ScheduleResult", "device_orders", "in_flight",
           "simulate", "schedule_problem"]

SCHEDULES = ("1f1b", "interleaved", "gpipe", "zb1p")
# Schedules that split the backward into the input gradient and the deferred weight gradient.
ZERO_BUBBLE = ("zb1p",)
# Schedules that may hold several chunks per device.
CHUNKED = ("interleaved", "zb1p")
# How messages name each schedule.
TITLES = {"1f1b": "1F1B", "interleaved": "interleaved 1F1B", "gpipe": "GPipe", "zb1p": "zero-bubble (zb1p)"}


@dataclass(frozen=True)
class Operation:
    """One forward (``kind`` ``"F"``), backward (``"B"``; under a zero-bubble schedule the input gradient only) or
    weight gradient (``"W"``, zero-bubble schedules) of a microbatch on a chunk of a device; times in seconds."""

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


def schedule_problem(schedule: str, stages: int, microbatches: int, chunks: int) -> str | None:
    """Why ``schedule`` cannot run ``microbatches`` over ``stages`` devices of ``chunks`` chunks each (the
    microbatch count's rule, ``None`` when it runs): interleaved 1F1B needs ``m`` a multiple of ``S``; zero
    bubble a multiple of its rounds ``max(1, m // S)`` (torch's ``ScheduleInterleavedZeroBubble``)."""
    if schedule == "interleaved" and microbatches % stages:
        return (f"the interleaved schedule needs the number of microbatches ({microbatches}) to be a multiple of "
                f"the pipeline stages ({stages}); choose a global batch or microbatch size that makes it one")
    rounds = max(1, microbatches // stages)
    if schedule in ZERO_BUBBLE and microbatches % rounds:
        return (f"the {schedule} schedule runs the microbatches in {rounds} rounds (microbatches // stages) and "
                f"needs them ({microbatches}) to be a multiple of it; choose a global batch or microbatch size "
                "that makes it one")
    return None


def _check(schedule: str, stages: int, microbatches: int, chunks: int) -> None:
    if schedule not in SCHEDULES:
        raise ConfigurationError(f"unknown pipeline schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    for name, value in (("stages", stages), ("microbatches", microbatches), ("virtual stages per device", chunks)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigurationError(f"pipeline {name} must be a positive integer, not {value!r}")
    if schedule not in CHUNKED and chunks != 1:
        raise ConfigurationError(
            f"the {schedule} schedule has one stage per device; {chunks} virtual stages per device need "
            "the interleaved schedule (or zb1p)")
    problem = schedule_problem(schedule, stages, microbatches, chunks)
    if problem:
        raise ConfigurationError(problem)


def device_orders(schedule: str, stages: int, microbatches: int, chunks: int = 1) -> list[list[tuple[str, int, int]]]:
    """Per device, its operations in order as ``(kind, chunk, microbatch)``, kind ``"F"``, ``"B"`` or ``"W"``;
    see the module docstring.

    Raises
    ------
    ConfigurationError
        An unknown schedule, a count below 1, ``chunks > 1`` with a schedule
        of one stage per device, or a microbatch count the schedule does not
        take (:func:`schedule_problem`).
    """
    return [[("FBW"[k], int(c), int(j)) for k, c, j in zip(*order)]
            for order in _order_arrays(schedule, stages, microbatches, chunks)]


def _order_arrays(schedule: str, S: int, m: int, v: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per device, its operations in order as arrays: kind (0 forward, 1 backward, 2 weight gradient), chunk,
    microbatch (:func:`device_orders`).

    Raises ``ConfigurationError`` as :func:`device_orders`.
    """
    _check(schedule, S, m, v)
    if schedule in ZERO_BUBBLE:
        return [_zero_bubble_order(S, m, v, s) for s in range(S)]
    total = m * v
    i = np.arange(total)
    if schedule == "gpipe":
        order = (np.repeat([0, 1], m), np.zeros(2 * m, dtype=np.int64), np.tile(np.arange(m), 2))
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
        kinds = np.zeros(2 * total, dtype=np.int64)
        chunks, micros = np.empty(2 * total, dtype=np.int64), np.empty(2 * total, dtype=np.int64)
        kinds[at_b] = 1
        chunks[at_f], chunks[at_b] = chunk, v - 1 - chunk
        micros[at_f], micros[at_b] = micro, micro
        orders.append((kinds, chunks, micros))
    return orders


def _zero_bubble_order(S: int, m: int, v: int, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Device ``s``'s operations under ``zb1p`` (module docstring): kinds, chunks, microbatches."""
    r = m // max(1, m // S)  # microbatches per round
    total = m * v
    warmup = min((v - 1) * r + S - 1 - s, total)
    ops: list[tuple[int, int]] = []  # (kind, chunk); each chunk's microbatches are numbered in order per kind
    backward_chunks: list[int] = []
    weights = 0
    for step in range(total + warmup):
        if step < total:
            ops.append((0, (step // r) % v))
        if step >= warmup:
            chunk = v - 1 - ((step - warmup) // r) % v
            ops.append((1, chunk))
            backward_chunks.append(chunk)
            if step - warmup >= s:  # the first s pairs defer their weight gradients
                ops.append((2, backward_chunks[weights]))
                weights += 1
    ops += [(2, c) for c in backward_chunks[weights:]]
    seen: dict[tuple[int, int], int] = {}
    micros = []
    for key in ops:
        micros.append(seen.get(key, 0))
        seen[key] = micros[-1] + 1
    kinds, chunks = zip(*ops)
    return np.array(kinds, dtype=np.int64), np.array(chunks, dtype=np.int64), np.array(micros, dtype=np.int64)


def in_flight(schedule: str, stages: int, microbatches: int, chunks: int = 1) -> tuple[float, ...]:
    """Per device, the most microbatches' worth of activations held at once (a chunk counts ``1/chunks``).

    The peak of forwards begun and backwards not yet done in the device's
    order (:func:`device_orders`): its warm-up forwards plus the first
    steady-state one, or every forward when there is no steady state. Under
    a zero-bubble schedule a microbatch is held until its weight gradient.

    Raises ``ConfigurationError`` as :func:`device_orders`.
    """
    _check(schedule, stages, microbatches, chunks)
    S, m, v = stages, microbatches, chunks
    if schedule == "gpipe":
        return (float(m),) * S
    if schedule in ZERO_BUBBLE:
        # +1 at each forward, -1 at each weight gradient: the running count's peak.
        return tuple(float(np.cumsum(np.select([k == 0, k == 2], [1, -1], 0)).max()) / v
                     for k, _, _ in _order_arrays(schedule, S, m, v))
    out = []
    for s in range(S):
        warmup = (S - s - 1) if v == 1 else (S - s - 1) * 2 + (v - 1) * S
        out.append(min(m * v, warmup + 1) / v)
    return tuple(out)


@dataclass(frozen=True)
class _Plan:
    """A schedule's operations in an order that respects every dependency, and per operation (as indices into
    that order, -1 for none) the previous operation on its device, the one whose output it waits for, the
    send between them (a stage boundary) and its duration (``q`` forward, ``Q + q`` backward, ``2 Q + q``
    weight gradient).

    An operation's id is ``d M + j`` for microbatch ``j`` of ``M``, with ``d = q`` for the forward of virtual
    stage ``q``, ``d = Q + q`` for its backward and ``d = 2 Q + q`` for its weight gradient (zero-bubble
    schedules): ``d`` also indexes the durations.
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
    devices = [(((chunk * S + s) + kind * Q) * M + micro).tolist()
               for s, (kind, chunk, micro) in enumerate(_order_arrays(schedule, S, M, chunks))]
    pos = [-1] * (3 * Q * M)
    ids: list[int] = []
    prev: list[int] = []
    dep: list[int] = []
    send: list[int] = []
    last = [-1] * S
    nxt = [0] * S
    remaining = sum(len(order) for order in devices)
    while remaining:
        progressed = False
        for s in range(S):
            order, k = devices[s], nxt[s]
            while k < len(order):
                x = order[k]
                d = x // M
                if d < Q:  # F(q, j) waits for F(q - 1, j) and the send between them
                    wait, delay = (x - M, d - 1) if d else (-1, -1)
                elif d == 2 * Q - 1 or d >= 2 * Q:  # B(Q - 1, j) waits for F(Q - 1, j); W(q, j) for B(q, j)
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
    weight_s: Sequence[float] | None = None,
) -> ScheduleResult:
    """Time one training step under ``schedule`` (see the module docstring for the model).

    Parameters
    ----------
    forward_s, backward_s : sequence of float
        Seconds of one microbatch's forward and backward on each virtual stage
        ``q = c S + s`` (``S x chunks`` entries; ``S`` stages when ``chunks`` is 1).
    weight_s : sequence of float, optional
        Of each backward, the weight gradient's seconds, which a zero-bubble
        schedule runs as its own deferred operation (default none: the whole
        backward is the input gradient's); other schedules ignore it.
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
        time vectors have the wrong length or a negative entry, or a weight
        gradient exceeds its backward.
    """
    f, b = [float(x) for x in forward_s], [float(x) for x in backward_s]
    Q = len(f)
    w = [0.0] * Q if weight_s is None or schedule not in ZERO_BUBBLE else [float(x) for x in weight_s]
    if len(w) != Q or any(not 0 <= wq <= bq for wq, bq in zip(w, b)):
        raise ConfigurationError(f"pipeline: {len(w)} weight-gradient times for {Q} virtual stages, each between 0 "
                                 "and its stage's backward")
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
    # Under a zero-bubble schedule B is the input gradient, W the rest of the backward.
    durations = f + [bq - wq for bq, wq in zip(b, w)] + w
    delays = sends + [0.0]  # index -1: no send
    end = [0.0] * (len(plan.ids) + 1)  # index -1: nothing to wait for
    for i, (prev, dep, send, op) in enumerate(zip(plan.prev, plan.dep, plan.send, plan.duration)):
        start, ready = end[prev], end[dep] + delays[send]
        end[i] = (start if start > ready else ready) + durations[op]
    ops: list[Operation] = []
    if record:
        for i, (x, d, prev, dep, send) in enumerate(zip(plan.ids, plan.duration, plan.prev, plan.dep, plan.send)):
            q = d % Q
            ops.append(Operation(q % S, q // S, x % microbatches, "FBW"[d // Q],
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
