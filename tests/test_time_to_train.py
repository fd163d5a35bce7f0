"""Time to train with failures and checkpoints: the goodput model against an event simulation, checkpoint bytes
against hand counts of ZeRO-1 and ZeRO-3 plans, energy and cost against hand counts."""

import math

import numpy as np
import pytest

from pase.analysis.time_to_train import (
    CheckpointSize, FailureModel, PowerModel, checkpoint_size, goodput, optimal_interval, time_to_train,
    time_to_train_job, young_daly_interval,
)
from pase.analysis.throughput import ThroughputError
from pase.hardware.cluster import Cluster
from pase.model.training import Parallelism, evaluate_training
from pase.models.llama import llama


def simulate(segments: int, tau: float, pause: float, lag: float, restart: float, rate: float,
             rng: np.random.Generator) -> float:
    """Wall seconds to finish ``segments`` segments of ``tau`` s of work, each followed by a ``pause`` s
    checkpoint that is durable ``lag`` s after the pause, under exponential failures at ``rate`` a second while
    running (each followed by ``restart`` s of downtime, then a restart from the last durable checkpoint).
    An event simulation: it knows nothing of the closed form."""
    t = 0.0
    done = 0  # segments whose work and pause have run since the last restart point
    durable = 0  # segments covered by a durable checkpoint
    pending: list[tuple[float, int]] = []  # (time the write completes, segments it covers)
    next_failure = rng.exponential(1 / rate)
    while done < segments:
        end = t + tau + pause  # run the next segment and its checkpoint pause
        if next_failure < end:
            # Roll back to the latest checkpoint whose write completed before the failure.
            for when, covers in pending:
                if when <= next_failure:
                    durable = max(durable, covers)
            pending = []
            done = durable
            t = next_failure + restart
            next_failure = t + rng.exponential(1 / rate)
            continue
        t = end
        done += 1
        durable = max([durable] + [c for w, c in pending if w <= t])
        pending = [(w, c) for w, c in pending if w > t] + [(t + lag, done)]
    return t


@pytest.mark.parametrize("pause, lag", [(10.0, 0.0), (1.0, 60.0)], ids=["synchronous", "asynchronous"])
def test_goodput_matches_an_event_simulation_of_failures_and_checkpoints(pause, lag):
    tau, restart, rate, segments = 100.0, 50.0, 1 / 1000, 200
    rng = np.random.default_rng(29)
    walls = np.array([simulate(segments, tau, pause, lag, restart, rate, rng) for _ in range(300)])
    simulated = segments * tau / walls.mean()
    standard_error = simulated * walls.std() / walls.mean() / math.sqrt(len(walls))
    modelled = goodput(tau, pause, restart, rate, lag)
    assert abs(modelled - simulated) < 4 * standard_error + 0.003, (modelled, simulated)
    assert 0.5 < modelled < 0.95  # failures matter at these figures: the check has teeth


def test_the_optimal_interval_beats_shorter_and_longer_ones_in_simulation():
    step, pause, restart, rate = 1.0, 20.0, 30.0, 1 / 2000
    k = optimal_interval(step, pause, restart, rate)
    rng = np.random.default_rng(7)

    def simulated(interval: float) -> float:
        segments = int(40_000 / interval)
        return segments * interval / np.mean([simulate(segments, interval, pause, 0.0, restart, rate, rng)
                                              for _ in range(40)])

    best = simulated(k * step)
    assert best > simulated(k * step / 4) and best > simulated(k * step * 4)


def test_young_daly_agrees_only_while_the_checkpoint_is_cheap_against_the_mtbf():
    mtbf = 10_000.0
    cheap = optimal_interval(0.01, 1.0, 0.0, 1 / mtbf) * 0.01
    assert cheap == pytest.approx(young_daly_interval(1.0, mtbf), rel=0.02)
    dear = optimal_interval(0.01, mtbf / 2, 0.0, 1 / mtbf) * 0.01
    assert abs(dear / young_daly_interval(mtbf / 2, mtbf) - 1) > 0.2


def test_goodput_falls_as_failures_grow_and_rises_with_asynchronous_checkpoints():
    rates = [1e-6, 1e-5, 1e-4, 1e-3]
    best = [goodput(optimal_interval(1.0, 30.0, 60.0, r) * 1.0, 30.0, 60.0, r) for r in rates]
    assert best == sorted(best, reverse=True)
    sync = goodput(optimal_interval(1.0, 30.0, 60.0, 1e-4), 30.0, 60.0, 1e-4)
    k = optimal_interval(1.0, 0.1, 60.0, 1e-4, lag_s=30.0)
    assert goodput(k, 0.1, 60.0, 1e-4, 30.0) > sync


# -- checkpoint bytes against hand counts ---------------------------------------------------------------------

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, SEQ = 2, 64, 4, 2, 128, 256, 16
HEAD = HIDDEN // HEADS
# Hand count: per block q and out d^2, k and v (g c) d, three FFN matrices d F, two norm scales d; embedding and
# projection V d; the final norm d. Norm scales are not split by tensor parallelism.
NORMS = LAYERS * 2 * HIDDEN + HIDDEN
PARAMETERS = (LAYERS * (2 * HIDDEN**2 + 2 * KV_HEADS * HEAD * HIDDEN + 3 * HIDDEN * FFN + 2 * HIDDEN)
              + 2 * VOCAB * HIDDEN + HIDDEN)
CLUSTER = Cluster(devices=8, peak_flops=1e14, bandwidth_Bps=1e11, bytes_per_element=2, devices_per_node=8)


def _tiny(batch: int):
    return llama("tiny", LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, batch=batch, seq=SEQ)


def _plan(zero: int, tensor: int = 2, data: int = 4):
    return evaluate_training(_tiny, CLUSTER, Parallelism(tensor=tensor, data=data, global_batch=8,
                                                         microbatch_size=1, zero=zero))


@pytest.mark.parametrize("zero", [1, 3])
def test_checkpoint_bytes_of_zero_1_and_zero_3_plans_match_a_hand_count(zero):
    t, d = 2, 4
    size = checkpoint_size(_plan(zero, t, d), parameters=_tiny(1).parameter_count)
    # bf16 weights (2 bytes) and fp32 master weights and Adam moments (12 bytes): 14 bytes a parameter, once.
    assert size.total_bytes == 14 * PARAMETERS
    # A device holds the matrices split over t and the norms whole: bf16 weights whole under ZeRO 1, sharded
    # over the d replicas under ZeRO 3; its optimizer state sharded over d under both.
    per_rank = (PARAMETERS - NORMS) / t + NORMS
    held = per_rank * 2 + per_rank * 12 / d if zero == 1 else per_rank * 14 / d
    assert size.held_per_device_bytes == pytest.approx(held)
    # Written once, shared by the 8 devices of the one pipeline stage.
    assert size.per_device_bytes == pytest.approx(14 * PARAMETERS / 8)


def test_checkpoint_bytes_without_the_parameter_count_count_the_replicated_norms_per_tensor_rank():
    size = checkpoint_size(_plan(1))
    assert size.total_bytes == pytest.approx(14 * (PARAMETERS + NORMS))  # norms once per tensor rank (t = 2)


def test_checkpoint_size_does_not_depend_on_the_zero_stage_but_the_held_state_does():
    sizes = [checkpoint_size(_plan(z), parameters=PARAMETERS) for z in (0, 1, 2, 3)]
    assert len({s.total_bytes for s in sizes}) == 1
    held = [s.held_per_device_bytes for s in sizes]
    assert held[0] > held[1] == held[2] > held[3]


# -- time, energy and cost against hand counts ----------------------------------------------------------------

CKPT = CheckpointSize(total_bytes=2e12, per_device_bytes=1e9, held_per_device_bytes=4e9)


def test_energy_and_cost_match_a_hand_count():
    # 1,024 H100s in 128 DGX nodes: 1,024 x 700 W + 128 x (10,200 - 5,600) W = 716.8 + 588.8 kW = 1,305.6 kW.
    t = time_to_train_job(2.0, 4e6, 1024, CKPT, amount=4e12, cluster_name="dgx-h100", devices_per_node=8,
                          price_per_gpu_hour=2.5)
    hours = t.wall_s / 3600
    assert t.average_power_MW == pytest.approx(1.3056)
    assert t.energy_MWh == pytest.approx(1.3056 * hours)
    assert t.gpu_hours == pytest.approx(1024 * hours)
    assert t.cost == pytest.approx(2.5 * 1024 * hours)
    # 1e6 steps of 2 s, and the goodput's share of wall time.
    assert t.failure_free_s == pytest.approx(2e6)
    assert t.wall_s == pytest.approx(2e6 / t.goodput)
    half = time_to_train_job(2.0, 4e6, 1024, CKPT, amount=4e12, cluster_name="dgx-h100", devices_per_node=8,
                             power=PowerModel(gpu_W=500, node_overhead_W=0, power_fraction=0.5))
    assert half.average_power_MW == pytest.approx(1024 * 250 / 1e6)


def test_no_price_means_no_cost_and_says_so():
    t = time_to_train_job(2.0, 4e6, 1024, CKPT, amount=4e12, cluster_name="dgx-h100")
    assert t.cost is None and any("no price" in n for n in t.notes)


def test_a_custom_cluster_has_no_energy_without_a_gpu_power():
    t = time_to_train_job(2.0, 4e6, 16, CKPT, amount=4e10, cluster_name="custom")
    assert t.energy_MWh is None and any("board power" in n for n in t.notes)


def test_doubling_the_devices_doubles_the_failure_rate_and_raises_interruptions_per_day():
    one, two = (time_to_train_job(2.0, 4e6, n, CKPT, amount=4e12, cluster_name="dgx-h100") for n in (8192, 16384))
    assert two.mtbf_s == pytest.approx(one.mtbf_s / 2)
    assert two.interruptions_per_day > one.interruptions_per_day
    assert two.goodput < one.goodput


def test_the_default_rate_reproduces_llama_3_s_interruptions():
    # 16,384 devices running 54 days: Llama 3's 419 unexpected interruptions, less the restarts' downtime.
    t = time_to_train_job(1.0, 1.0, 16384, CKPT, amount=54 * 86400.0, cluster_name="dgx-h100")
    assert 419 / 2 < t.interruptions_per_day * 54 <= 419


def test_a_given_interval_is_rounded_to_whole_steps_and_an_async_write_must_fit_in_it():
    t = time_to_train_job(2.0, 4e6, 1024, CKPT, amount=4e12, failures=FailureModel(interval_s=101.0))
    assert t.checkpoint_interval_steps == 50 and t.checkpoint_interval_s == 100.0
    with pytest.raises(ThroughputError, match="shorter than its asynchronous write"):
        # 20 TB at 2 TB/s: a 10 s write, longer than a checkpoint every step of 2 s.
        time_to_train_job(2.0, 4e6, 1024, CheckpointSize(2e13, 1e9, 4e9), amount=4e12,
                          failures=FailureModel(interval_s=2.0, async_checkpoint=True))


@pytest.mark.parametrize("kwargs, words", [
    (dict(interruptions_per_gpu_hour=0), "interruption rate"),
    (dict(interruptions_per_gpu_hour=-1e-5), "interruption rate"),
    (dict(storage_Bps=0), "storage bandwidth"),
    (dict(restart_s=float("nan")), "restart time"),
    (dict(interval_s=-5), "checkpoint interval"),
])
def test_bad_failure_figures_are_refused_naming_the_figure_and_the_fix(kwargs, words):
    with pytest.raises(ThroughputError, match=words) as info:
        FailureModel(**kwargs)
    assert ": give" in str(info.value)


@pytest.mark.parametrize("amount, price, words", [
    (0, None, "tokens to train on"), (-1e9, None, "tokens to train on"), (1e12, "ten", "price per GPU-hour"),
    (1e12, -1.0, "price per GPU-hour"),
])
def test_bad_amounts_and_prices_are_refused(amount, price, words):
    with pytest.raises(ThroughputError, match=words):
        time_to_train_job(2.0, 4e6, 1024, CKPT, amount=amount, price_per_gpu_hour=price)


def test_a_plan_is_priced_end_to_end():
    plan = _plan(1)
    t = time_to_train(plan, tokens=1e9, parameters=PARAMETERS, price_per_gpu_hour=1.0)
    assert t.steps == pytest.approx(1e9 / (8 * SEQ))
    assert t.checkpoint_bytes == 14 * PARAMETERS
    assert t.cost == pytest.approx(t.gpu_hours)
    with pytest.raises(ThroughputError, match="exactly one"):
        time_to_train(plan)
