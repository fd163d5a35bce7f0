"""Pipeline schedules against a discrete-event simulation and the published closed forms."""

from __future__ import annotations

import heapq
import random

import pytest

from pase.errors import ConfigurationError
from pase.model.pipeline import device_orders, in_flight, simulate


def _orders(schedule, S, m, v):
    """The schedule's per-device orders, written from Megatron-LM's and GPipe's definitions."""
    out = []
    for rank in range(S):
        if schedule == "gpipe":
            out.append([("F", 0, j) for j in range(m)] + [("B", 0, j) for j in range(m)])
            continue
        if schedule == "1f1b":
            warm = min(S - rank - 1, m)
            fw = [("F", 0, j) for j in range(m)]
            bw = [("B", 0, j) for j in range(m)]
            order = fw[:warm]
            for k in range(m - warm):
                order += [fw[warm + k], bw[k]]
            out.append(order + bw[m - warm:])
            continue

        def chunk_id(i, forward):  # Megatron's get_model_chunk_id
            c = (i % (S * v)) // S
            return c if forward else v - c - 1

        def mb(i):
            return (i // (S * v)) * S + i % S

        total = m * v
        warm = min((S - rank - 1) * 2 + (v - 1) * S, total)
        order = [("F", chunk_id(i, True), mb(i)) for i in range(warm)]
        for k in range(total - warm):
            order += [("F", chunk_id(warm + k, True), mb(warm + k)), ("B", chunk_id(k, False), mb(k))]
        out.append(order + [("B", chunk_id(k, False), mb(k)) for k in range(total - warm, total)])
    return out


def _event_simulation(schedule, f, b, m, v, send, reduce, overlap, w=None, orders=None):
    """Devices as processes, messages as timed events in a heap; returns the step time. With ``w`` (weight
    gradients) and ``orders`` (per device its (kind, chunk, microbatch) list): a zero-bubble schedule, ``B``
    the input gradient taking ``b - w`` and ``W`` taking ``w`` once its ``B`` is done."""
    Q = len(f)
    S = Q // v
    orders = _orders(schedule, S, m, v) if orders is None else orders
    w = [0.0] * Q if w is None else w
    arrived = set()  # (kind, virtual stage, microbatch) whose input has arrived at its device
    events = [(0.0, 0, ("arrive", ("F", 0, j))) for j in range(m)]
    heapq.heapify(events)
    seq = m
    busy_until = [0.0] * S
    pos = [0] * S
    running = [False] * S
    finish = [0.0] * S
    last_b = [0.0] * S
    now = 0.0

    def try_start(s):
        nonlocal seq
        if running[s] or pos[s] == len(orders[s]):
            return
        kind, c, j = orders[s][pos[s]]
        q = c * S + s
        if (kind, q, j) not in arrived:
            return
        running[s] = True
        duration = {"F": f[q], "B": b[q] - w[q], "W": w[q]}[kind]
        seq += 1
        heapq.heappush(events, (now + duration, seq, ("done", (s, kind, q, j))))

    while events:
        now, _, (what, payload) = heapq.heappop(events)
        if what == "arrive":
            kind, q, j = payload
            arrived.add((kind, q, j))
            try_start(q % S)
            continue
        s, kind, q, j = payload
        running[s] = False
        pos[s] += 1
        finish[s] = now
        if kind in "BW":
            last_b[s] = b[q] - w[q] if kind == "B" else w[q]
        seq += 1
        if kind == "B" and any(o[0] == "W" for o in orders[s]):  # a zero-bubble device's W may follow
            heapq.heappush(events, (now, seq, ("arrive", ("W", q, j))))
            seq += 1
        if kind == "W":
            try_start(s)
            continue
        if kind == "F" and q < Q - 1:
            heapq.heappush(events, (now + send[q], seq, ("arrive", ("F", q + 1, j))))
        elif kind == "F":
            heapq.heappush(events, (now, seq, ("arrive", ("B", q, j))))
        elif q > 0:
            heapq.heappush(events, (now + send[q - 1], seq, ("arrive", ("B", q - 1, j))))
        try_start(s)
    assert pos == [len(o) for o in orders]
    ends = [t + (max(0.0, r - lb) if overlap else r) for t, r, lb in zip(finish, reduce, last_b)]
    return max(ends)


CASES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 3)]


@pytest.mark.parametrize("schedule,v", CASES)
@pytest.mark.parametrize("seed", range(12))
def test_random_stage_times_match_event_simulation(schedule, v, seed):
    rng = random.Random(seed * 31 + v)
    S = rng.randint(1, 6)
    m = S * rng.randint(1, 4) if schedule == "interleaved" else rng.randint(1, 12)
    Q = S * v
    f = [rng.uniform(0.1, 3.0) for _ in range(Q)]
    b = [rng.uniform(0.1, 6.0) for _ in range(Q)]
    send = [rng.uniform(0.0, 0.8) for _ in range(Q - 1)]
    reduce = [rng.uniform(0.0, 4.0) for _ in range(S)]
    overlap = bool(seed % 2)
    got = simulate(schedule, f, b, m, chunks=v, send_s=send, reduce_s=reduce, overlap=overlap)
    assert got.step_time_s == pytest.approx(_event_simulation(schedule, f, b, m, v, send, reduce, overlap), rel=1e-12)


@pytest.mark.parametrize("schedule,v", CASES)
def test_orders_are_the_published_ones(schedule, v):
    for S, m in ((1, 4), (4, 8), (3, 9), (5, 5)):
        assert device_orders(schedule, S, m, v) == _orders(schedule, S, m, v)


@pytest.mark.parametrize("S,m", [(1, 1), (2, 8), (4, 4), (8, 32), (6, 3)])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_equal_stages_take_m_plus_s_minus_one_stage_times(schedule, S, m):
    # Narayanan et al.: bubble (p - 1)/m of the ideal m (f + b).
    f, b = 1.5, 3.0
    got = simulate(schedule, [f] * S, [b] * S, m)
    assert got.step_time_s == pytest.approx((m + S - 1) * (f + b))
    assert got.bubble_fraction == pytest.approx((S - 1) / (m + S - 1))


@pytest.mark.parametrize("S,v,m", [(2, 2, 4), (4, 2, 8), (4, 4, 16), (8, 3, 24)])
def test_interleaving_divides_the_bubble_by_v(S, v, m):
    # Narayanan et al.: bubble (1/v)(p - 1)/m; each chunk takes 1/v of a stage.
    f, b = 2.0, 4.0
    got = simulate("interleaved", [f / v] * (S * v), [b / v] * (S * v), m, chunks=v)
    assert got.step_time_s == pytest.approx((m + (S - 1) / v) * (f + b))


def test_in_flight_microbatches_as_published():
    # 1F1B: stage s keeps min(S - s, m); GPipe: m; interleaved: S (1 + (S - 1)/(S v)) on the first stage.
    assert in_flight("1f1b", 4, 8) == (4, 3, 2, 1)
    assert in_flight("1f1b", 4, 2) == (2, 2, 2, 1)
    assert in_flight("gpipe", 3, 5) == (5, 5, 5)
    for S, v in ((4, 2), (8, 3), (2, 4)):
        assert in_flight("interleaved", S, 4 * S, v)[0] == pytest.approx(S * (1 + (S - 1) / (S * v)))


@pytest.mark.parametrize("schedule,v", CASES)
def test_in_flight_is_the_peak_of_the_order(schedule, v):
    for S, m in ((1, 4), (4, 8), (3, 9), (5, 5), (4, 4)):
        peaks = []
        for order in _orders(schedule, S, m, v):
            held = peak = 0
            for kind, _, _ in order:
                held += 1 if kind == "F" else -1
                peak = max(peak, held)
            peaks.append(peak / v)
        assert in_flight(schedule, S, m, v) == pytest.approx(tuple(peaks))


def test_serial_reduction_adds_and_overlap_hides_it():
    serial = simulate("1f1b", [1.0] * 2, [2.0] * 2, 4, reduce_s=[1.5, 1.5])
    hidden = simulate("1f1b", [1.0] * 2, [2.0] * 2, 4, reduce_s=[1.5, 1.5], overlap=True)
    bare = simulate("1f1b", [1.0] * 2, [2.0] * 2, 4)
    assert serial.step_time_s == pytest.approx(bare.step_time_s + 1.5)
    assert hidden.step_time_s == pytest.approx(bare.step_time_s)


def test_recorded_operations_never_overlap_on_a_device():
    got = simulate("interleaved", [1, 2, 1, 2], [2, 3, 2, 1], 4, chunks=2, send_s=[0.1, 0.2, 0.3], record=True)
    assert len(got.operations) == 2 * 4 * 4
    for s in range(2):
        ops = sorted((o for o in got.operations if o.device == s), key=lambda o: o.start_s)
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in zip(ops, ops[1:]))


@pytest.mark.parametrize("args,match", [
    (("zigzag", [1], [1], 1), "unknown pipeline schedule"),
    (("interleaved", [1] * 4, [1] * 4, 3), "multiple of the pipeline stages"),
    (("1f1b", [1, 1], [1], 2), "one of each per virtual stage"),
    (("1f1b", [1], [1], 0), "positive integer"),
    (("1f1b", [1, -1], [1, 1], 2), "must not be negative"),
])
def test_bad_configurations_are_named(args, match):
    kwargs = {"chunks": 2} if args[0] == "interleaved" else {}
    with pytest.raises(ConfigurationError, match=match):
        simulate(*args, **kwargs)


# -- zero bubble: torch.distributed.pipelining's ScheduleInterleavedZeroBubble (torchtitan's InterleavedZeroBubble) --


def _torch_zero_bubble(S, m, v):
    """Per rank, the operations torch's ScheduleInterleavedZeroBubble orders (its own generator, without its idle
    slots), as (kind, chunk, microbatch): F forward, B input gradient, W weight gradient."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    C = schedules._ComputationType
    zb = schedules.ScheduleInterleavedZeroBubble.__new__(schedules.ScheduleInterleavedZeroBubble)
    zb.pp_group_size, zb.n_local_stages, zb._n_microbatches = S, v, m
    zb.number_of_rounds = max(1, m // S)
    zb.microbatches_per_round = m // zb.number_of_rounds
    kind = {C.FORWARD: "F", C.BACKWARD_INPUT: "B", C.BACKWARD_WEIGHT: "W"}
    return [[(kind[a.computation_type], a.stage_index // S, a.microbatch_index)
             for a in zb._calculate_single_rank_operations(rank) if a is not None] for rank in range(S)]


ZB_SHAPES = [(S, m, v) for S in (1, 2, 3, 4, 8) for v in (1, 2, 3) for m in (1, 2, 3, 4, 6, 8, 12, 16)
             if m % max(1, m // S) == 0]


def test_zero_bubble_orders_are_torchs():
    for S, m, v in ZB_SHAPES:
        assert device_orders("zb1p", S, m, v) == _torch_zero_bubble(S, m, v), (S, m, v)


@pytest.mark.parametrize("v", [1, 2])
@pytest.mark.parametrize("seed", range(10))
def test_zero_bubble_random_stage_times_match_event_simulation(v, seed):
    rng = random.Random(seed * 17 + v)
    S = rng.randint(1, 6)
    m = rng.choice([k for k in range(1, 17) if k % max(1, k // S) == 0])
    Q = S * v
    f = [rng.uniform(0.1, 3.0) for _ in range(Q)]
    b = [rng.uniform(0.2, 6.0) for _ in range(Q)]
    w = [x * rng.uniform(0.0, 0.7) for x in b]
    send = [rng.uniform(0.0, 0.8) for _ in range(Q - 1)]
    reduce = [rng.uniform(0.0, 4.0) for _ in range(S)]
    overlap = bool(seed % 2)
    got = simulate("zb1p", f, b, m, chunks=v, send_s=send, reduce_s=reduce, overlap=overlap, weight_s=w)
    want = _event_simulation("zb1p", f, b, m, v, send, reduce, overlap, w=w, orders=_torch_zero_bubble(S, m, v))
    assert got.step_time_s == pytest.approx(want, rel=1e-12)


def test_zb_h1_by_hand():
    # Two stages, two microbatches, F = B = W = 1 (B the input gradient). Device 1: F0 [1,2] B0 [2,3] F1 [3,4]
    # B1 [4,5] W0 [5,6] W1 [6,7]; device 0: F0 [0,1] F1 [1,2] B0 [3,4] W0 [4,5] B1 [5,6] W1 [6,7]: 7, where 1F1B
    # takes (m + S - 1)(f + b) = 9.
    assert simulate("zb1p", [1.0] * 2, [2.0] * 2, 2, weight_s=[1.0] * 2).step_time_s == pytest.approx(7.0)
    assert simulate("1f1b", [1.0] * 2, [2.0] * 2, 2).step_time_s == pytest.approx(9.0)


@pytest.mark.parametrize("S,m", [(2, 8), (4, 4), (4, 8), (8, 8), (8, 32), (6, 12), (5, 5)])
def test_zb_h1_bubble_is_the_papers(S, m):
    # Qi et al. (ZB-H1): with F = B = W the bubble is (S - 1)(F + B - W), a third of 1F1B's (S - 1)(F + B + W).
    f = bi = wg = 1.25
    zb = simulate("zb1p", [f] * S, [bi + wg] * S, m, weight_s=[wg] * S)
    one = simulate("1f1b", [f] * S, [bi + wg] * S, m)
    ideal = m * (f + bi + wg)
    assert zb.step_time_s - ideal == pytest.approx((S - 1) * (f + bi - wg))
    assert one.step_time_s - ideal == pytest.approx((S - 1) * (f + bi + wg))


@pytest.mark.parametrize("seed", range(6))
def test_zero_bubble_without_weight_gradients_is_1f1b(seed):
    # Nothing to defer: one chunk a device, the order's forwards and backwards are 1F1B's, and so is its step.
    rng = random.Random(seed)
    S, m = rng.randint(1, 6), rng.randint(1, 12)
    if m % max(1, m // S):
        m = S
    f = [rng.uniform(0.1, 3.0) for _ in range(S)]
    b = [rng.uniform(0.1, 6.0) for _ in range(S)]
    send = [rng.uniform(0.0, 0.8) for _ in range(S - 1)]
    zb = simulate("zb1p", f, b, m, send_s=send, weight_s=[0.0] * S)
    assert zb.step_time_s == pytest.approx(simulate("1f1b", f, b, m, send_s=send).step_time_s, rel=1e-12)


def test_zero_bubble_holds_a_microbatch_until_its_weight_gradient():
    # The peak of forwards begun and weight gradients not yet done, counted on torch's own order; ZB-H1 keeps
    # every device at 1F1B's first stage's S microbatches (the deferred W's keep later stages fuller than 1F1B's).
    for S, m, v in ZB_SHAPES:
        peaks = []
        for order in _torch_zero_bubble(S, m, v):
            held = peak = 0
            for kind, _, _ in order:
                held += {"F": 1, "B": 0, "W": -1}[kind]
                peak = max(peak, held)
            peaks.append(peak / v)
        assert in_flight("zb1p", S, m, v) == pytest.approx(tuple(peaks)), (S, m, v)
        if v == 1 and m >= S:
            assert in_flight("zb1p", S, m, 1) == (S,) * S
            assert max(in_flight("zb1p", S, m, 1)) == max(in_flight("1f1b", S, m, 1))


@pytest.mark.parametrize("args,kwargs,match", [
    (("zb1p", [1] * 4, [1] * 4, 9), {}, "multiple of it"),
    (("zb1p", [1] * 2, [2] * 2, 2), {"weight_s": [3, 1]}, "between 0 and its stage's backward"),
    (("1f1b", [1] * 4, [1] * 4, 4), {"chunks": 2}, "the interleaved schedule \\(or zb1p\\)"),
])
def test_bad_zero_bubble_configurations_are_named(args, kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        simulate(*args, **kwargs)
