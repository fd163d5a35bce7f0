"""The calibrations of the paper's GTX 1080 Ti and RTX 2080 Ti nodes (issue 12) and what they do to Fig. 6."""

import numpy as np
import pytest

from pase import ops as L
from pase.analysis.baselines import applicable_baselines, evaluate_strategy
from pase.hardware.cluster import CALIBRATIONS, PRESETS, preset
from pase.hardware.efficiency import GTX1080TI_FP32, RTX2080TI_FP32
from pase.model.roofline import layer_times_s
from pase.models import sample
from pase.planner import PlanOptions, plan

PAPER_PRESETS = ("paper-1080ti", "paper-2080ti")


def _speedup_over_dp(graph, cluster) -> float:
    best = plan(graph, cluster, PlanOptions(memory_limit_bytes=None))
    return best.speedup_over(applicable_baselines(graph, cluster)["data parallel"])


def test_both_paper_presets_have_a_calibration_with_every_figure_sourced():
    assert CALIBRATIONS["paper-1080ti"] is GTX1080TI_FP32 and CALIBRATIONS["paper-2080ti"] is RTX2080TI_FP32
    for name in PAPER_PRESETS:
        e = CALIBRATIONS[name]
        assert set(e.sources) == {"matmul_curve", "vector_flops", "memory_Bps", "kernel_overhead_s",
                                  "intra_efficiency", "inter_efficiency", "intra_latency_s", "inter_latency_s",
                                  "memory_overlap"}, name
        assert all(text.strip() for text in e.sources.values()), name
        assert preset(name, calibrated=True).efficiency is e


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_the_figures_are_physically_meaningful(name):
    e, peak = CALIBRATIONS[name], PRESETS[name].peak_flops
    fractions = [f for _, f in e.matmul_curve] + [e.intra_efficiency, e.inter_efficiency, e.memory_overlap]
    assert all(0 < f <= 1 for f in fractions)
    # Latencies of kernels and collective steps: microseconds, not nanoseconds or milliseconds.
    assert all(1e-6 <= t <= 100e-6 for t in (e.kernel_overhead_s, e.intra_latency_s, e.inter_latency_s))
    # fp32 on CUDA cores: other kernels reach the same peak as products, and memory less than the
    # published GDDR bandwidth (484 GB/s, 616 GB/s); matrix products gain efficiency with size.
    assert e.vector_flops == peak
    assert 0 < e.memory_Bps < {"paper-1080ti": 484e9, "paper-2080ti": 616e9}[name]
    assert [f for _, f in e.matmul_curve] == sorted(f for _, f in e.matmul_curve)
    assert len(e.matmul_curve) * 2 + 8 < 15  # the "few": under 15 numbers a preset


@pytest.mark.parametrize("name", PAPER_PRESETS)
@pytest.mark.parametrize("size", [64, 512, 2048, 8192])
def test_a_calibrated_gemm_is_never_faster_than_at_peak(name, size):
    e, peak = CALIBRATIONS[name], PRESETS[name].peak_flops
    fc = L.fully_connected("fc", b=size, n=size, c=size, bias=False)
    configs = np.array([[1, 1, 1], [8, 1, 1], [1, 8, 1], [1, 1, 8]])
    fwd, bwd = layer_times_s(fc, configs, peak, e, 4)
    flops = 2 * size ** 3 / 8 * np.array([8, 1, 1, 1])  # one kernel's FLOPs on one device
    assert np.all(fwd > flops / peak) and np.all(bwd > 2 * flops / peak)


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_a_calibrated_strategy_takes_longer_than_at_peak(name):
    # The roofline only adds time to a kernel (its fraction of peak, memory, launch) and a calibrated link
    # is slower than nominal, so the same strategy costs more: data parallelism and PaSE's peak-model plan.
    graph = sample("alexnet")
    for devices in (8, 16):
        peak, calibrated = preset(name, devices), preset(name, devices, calibrated=True)
        found = plan(graph, peak, PlanOptions(memory_limit_bytes=None)).strategy
        dp = applicable_baselines(graph, peak)["data parallel"].strategy
        for strategy in (found, dp):
            assert (evaluate_strategy(graph, calibrated, strategy).step_time_s
                    > evaluate_strategy(graph, peak, strategy).step_time_s)


def test_calibration_narrows_alexnets_speedup_but_data_parallelism_stays_bound_by_its_all_reduce():
    # The peak model gives AlexNet 5.3x at p=8 and 14.1x at p=32 on the 1080 Ti nodes (BENCHMARKS.md,
    # "Modelled speedups"), the paper measured at most 1.85x. Calibrated, both fall, but at p=8 only
    # a little: DP's all-reduce of 61M fp32 weights (1.75 x 244 MB at 0.73 x 12 GB/s, 49 ms) dwarfs
    # its ~10 ms of compute on 16 images a device, and slowing kernels slows PaSE's mostly-compute step
    # too. So the calibrated figure is still 4-6.5x at the sample batch of 128, not the paper's 1.85x.
    graph = sample("alexnet")
    for devices, low, high in ((8, 4.0, 6.5), (32, 8.0, 13.0)):
        peak = _speedup_over_dp(graph, preset("paper-1080ti", devices))
        calibrated = _speedup_over_dp(graph, preset("paper-1080ti", devices, calibrated=True))
        assert calibrated < peak
        assert low <= calibrated <= high, (devices, calibrated)


def test_with_128_images_a_device_the_calibrated_alexnet_speedup_is_the_papers_size():
    # Compute grows with the batch and DP's all-reduce does not, so at 128 images a device (global
    # batch 1024 on 8 GPUs) compute weighs ~8x more: the calibrated speedup is then within about a
    # third of the paper's measured 1.85x on the 1080 Ti nodes (1.3x-2.5x), and larger on the 2080 Ti
    # nodes, whose host-staged 6 GB/s links slow DP's all-reduce twice as much (the paper's up to 4x).
    graph = sample("alexnet", batch=1024)
    gtx = _speedup_over_dp(graph, preset("paper-1080ti", 8, calibrated=True))
    rtx = _speedup_over_dp(graph, preset("paper-2080ti", 8, calibrated=True))
    assert 1.3 <= gtx <= 2.5
    assert rtx > gtx
