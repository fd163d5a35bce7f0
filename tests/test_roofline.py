"""Calibrated clusters: achievable rates, the roofline of kernels, links at their efficiency, by hand counts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pase import ops as L
from pase.errors import ClusterError
from pase.hardware.cluster import CALIBRATIONS, PRESETS, preset
from pase.hardware.efficiency import CALCULON_A100, Efficiency
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.model.cost import build_cost_model
from pase.model.roofline import layer_times_s
from pase.models import sample
from pase.planner import PlanOptions, plan

EFF = Efficiency(matmul_curve=((1e9, 0.5), (100e9, 0.9)), vector_flops=50e12, memory_Bps=1e12,
                 kernel_overhead_s=4e-6, intra_efficiency=0.5, inter_efficiency=0.8, intra_latency_s=2e-6,
                 inter_latency_s=8e-6)
PEAK = 300e12


def test_matrix_efficiency_interpolates_in_log_flops_and_holds_at_the_ends():
    f = CALCULON_A100.matmul_fraction([1e6, 1e9, 4e9, 16e9, 128e9, 1e15])
    assert f[[0, 1, 3, 4, 5]].tolist() == pytest.approx([0.60, 0.60, 0.90, 0.95, 0.95])
    assert f[2] == pytest.approx(0.60 + 0.30 * np.log10(4) / np.log10(16))


@pytest.mark.parametrize("kwargs,match", [
    (dict(intra_efficiency=1.5), "intra_efficiency"),
    (dict(matmul_curve=((1e9, 0.5), (1e8, 0.9))), "ascending"),
    (dict(matmul_curve=((1e9, 0.0),)), "fractions of peak"),
    (dict(memory_Bps=0.0), "memory_Bps"),
    (dict(kernel_overhead_s=-1.0), "kernel_overhead_s"),
])
def test_implausible_calibrations_are_refused(kwargs, match):
    with pytest.raises(ClusterError, match=match):
        replace(EFF, **kwargs)


def test_a_large_product_is_compute_bound_at_its_size_efficiency():
    fc = L.fully_connected("fc", b=8192, n=8192, c=8192, bias=False)
    fwd, bwd = layer_times_s(fc, np.array([[1, 1, 1]]), PEAK, EFF, 2)
    flops = 2 * 8192 ** 3  # 1.1 TFLOP per kernel: 90% of peak
    assert fwd[0] == pytest.approx(flops / (0.9 * PEAK) + 4e-6)
    assert bwd[0] == pytest.approx(2 * (flops / (0.9 * PEAK) + 4e-6))  # weight and input gradients
    # A graph input takes no gradient: one backward kernel.
    _, alone = layer_times_s(fc, np.array([[1, 1, 1]]), PEAK, EFF, 2, needs_gradient=[False])
    assert alone[0] == pytest.approx(flops / (0.9 * PEAK) + 4e-6)


def test_memory_time_not_overlapped_with_compute_adds_its_share():
    # The same product with its memory time only partly hidden behind its compute: max + (1 - overlap) min.
    fc = L.fully_connected("fc", b=8192, n=8192, c=8192, bias=False)
    flops, nbytes = 2 * 8192 ** 3, 3 * 8192 ** 2 * 2  # x, W and y, fp16, once each
    for overlap in (1.0, 0.25, 0.0):
        fwd, _ = layer_times_s(fc, np.array([[1, 1, 1]]), PEAK, replace(EFF, memory_overlap=overlap), 2)
        assert fwd[0] == pytest.approx(flops / (0.9 * PEAK) + (1 - overlap) * nbytes / 1e12 + 4e-6)
    with pytest.raises(ClusterError, match="memory_overlap"):
        replace(EFF, memory_overlap=1.5)


def test_the_experts_products_run_at_the_matrix_rate():
    # Slots N = b c x = 4 * 256 * 8; every kernel over 100 GFLOP, so 90% of peak; compute-bound (the
    # weights, 0.8 GB, and the slots, 0.13 GB, take under a third of the products' time).
    b, c, x, d, f = 4, 256, 8, 4096, 4096
    experts = L.moe_experts("experts", b, c, x, d, f)
    for split in (1, 2):  # whole, and expert parallel over two devices
        n = b * c * x / split
        fwd, bwd = layer_times_s(experts, np.array([[1, 1, split, 1, 1]]), PEAK, EFF, 2)
        forward = 3 * 2 * n * d * f + 2 * n * f  # gate, up and down; the SwiGLU's 2 FLOPs per hidden element
        weights = 4 * 2 * n * d * f + 4 * n * f  # three weight gradients and dh; the rest of the SwiGLU
        inputs = 2 * 2 * n * d * f  # dx through gate and up
        assert fwd[0] == pytest.approx(forward / (0.9 * PEAK) + 4e-6)
        assert bwd[0] == pytest.approx(weights / (0.9 * PEAK) + 4e-6 + inputs / (0.9 * PEAK) + 4e-6)


def test_elementwise_is_memory_bound():
    add = L.elementwise("add", (4096, 4096), ("b", "n"))
    fwd, bwd = layer_times_s(add, np.array([[1, 1], [2, 1]]), PEAK, EFF, 2)
    moved = 3 * 4096 * 4096 * 2  # two inputs read, one output written, 2 bytes each
    assert fwd.tolist() == pytest.approx([moved / 1e12 + 4e-6, moved / 2 / 1e12 + 4e-6])
    assert bwd[0] == pytest.approx(1.5 * moved / 1e12 + 4e-6)


def test_reshapes_take_no_time():
    r = L.reshape("flat", (4, 4, 2, 2), ("b", "c", "h", "w"), (4, 16))
    fwd, bwd = layer_times_s(r, np.array([[1] * len(r.dims)]), PEAK, EFF, 2)
    assert fwd[0] == bwd[0] == 0.0


def test_calibrated_links_run_at_their_efficiency_with_a_latency_per_step():
    c = replace(preset("dgx-a100", 16, calibrated=False), efficiency=EFF)
    node, gpu = c.mesh.axes
    assert (gpu.efficiency, gpu.latency_s, node.efficiency, node.latency_s) == (0.5, 2e-6, 0.8, 8e-6)
    # Ring all-reduce over the 8 GPUs of a node: 2 (k - 1)/k bytes at 300 GB/s x 0.5, 2 (k - 1) steps.
    got = float(c.mesh.allreduce_s(1e8, np.array([1, 8])))
    assert got == pytest.approx(2 * 7 / 8 * 1e8 / (300e9 * 0.5) + 2 * 7 * 2e-6)


def test_the_paper_model_ignores_the_calibration():
    g = sample("gpt", batch=4, layers=2, d_model=64, heads=4, seq=32, vocab=256)
    plain, calibrated = preset("dgx-a100", 8, calibrated=False), preset("dgx-a100", 8, calibrated=True)
    options = PlanOptions(configs=ConfigOptions(cost_model="paper"))
    assert plan(g, plain, options).step_time_s == pytest.approx(plan(g, calibrated, options).step_time_s)


def test_calibration_slows_compute_down_and_the_search_still_finds_the_optimum_of_its_model():
    g = Graph("mlp")
    g.add_layer(L.fully_connected("fc1", b=256, n=1024, c=1024))
    g.add_layer(L.fully_connected("fc2", b=256, n=1024, c=1024), ["fc1"])
    plain, calibrated = preset("dgx-a100", 4, calibrated=False), preset("dgx-a100", 4, calibrated=True)
    fast, slow = plan(g, plain), plan(g, calibrated)
    assert slow.step_time_s > fast.step_time_s
    # Brute force over every pair of configurations under the calibrated model.
    model = build_cost_model(g, calibrated)
    graph = model.cost_graph()
    (u, v, table), = graph.edges
    best = min(graph.node_costs[0][i] + graph.node_costs[1][j] + table[i, j]
               for i in range(len(graph.node_costs[0])) for j in range(len(graph.node_costs[1])))
    assert slow.cost == pytest.approx(best)


def test_every_modern_preset_has_a_calibration_with_sources():
    assert set(CALIBRATIONS) == {"dgx-a100", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "dgx-b200",
                                 "paper-1080ti", "paper-2080ti"} <= set(PRESETS)
    for name, e in CALIBRATIONS.items():
        assert set(e.sources) >= {"matmul_curve", "vector_flops", "memory_Bps", "intra_efficiency",
                                  "inter_efficiency"}, name
    with pytest.raises(ClusterError, match="has no calibration"):
        preset("paper-model", calibrated=True)


def test_a_calibrated_step_ends_with_the_memory_bound_optimizer_update():
    from pase.model.training import Parallelism, evaluate_training
    from pase.models import batch_builder

    build = batch_builder("gpt", layers=2, d_model=64, heads=4, seq=32, vocab=256)
    params = build(1).parameter_count
    cluster = preset("dgx-a100", 2, calibrated=True)
    for zero, shard in ((0, 1), (1, 2)):
        got = evaluate_training(build, cluster, Parallelism(data=2, global_batch=4, zero=zero))
        (stage,) = got.stages
        # Adam in mixed precision: 28 bytes a parameter at the calibrated memory bandwidth, over the ZeRO shard.
        assert stage.optimizer_s == pytest.approx(params / shard * 28 / cluster.efficiency.memory_Bps)
        assert got.step_time_s == pytest.approx(got.schedule.step_time_s + stage.optimizer_s)
    plain = evaluate_training(build, preset("dgx-a100", 2, calibrated=False), Parallelism(data=2, global_batch=4))
    assert plain.stages[0].optimizer_s == 0 and plain.step_time_s == plain.schedule.step_time_s
