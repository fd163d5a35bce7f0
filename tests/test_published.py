"""The calibrated model against published measurements (issue 12), through ``benchmarks/validate_published.py``.

Korthikanti et al.'s Table 5 and Megatron-LM's Table 1 are evaluated exactly as the
script evaluates them (its ``cases`` and ``predict``) and must stay within the issue's
goal: Table 5's eight iteration times within 3.5% on average and 8% each, Table 1's ten
throughputs within 5% on average and 10% each. Plus hand counts of
the modelling rules the calibration rests on: a tensor several layers read in one
layout is redistributed once (Megatron's fused QKV), ZeRO-3's flat ring, and the
asynchronous tensor-parallel backward of Table 5's Megatron-LM. Table 2, not fitted,
must be ranked as measured. The A100's matrix curve comes from published kernel figures
(the best A100 product measured bounds it), and each of Tables 5 and 1 is predicted out of
sample, within issue 25's goal, by the three figures fitted to the other alone.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from validate_published import cases, predict, schedule_evidence  # noqa: E402

from fit_calibration import errors  # noqa: E402

from pase.hardware.cluster import CALIBRATIONS, preset  # noqa: E402
from pase.hardware.efficiency import A100_KERNEL_CURVE  # noqa: E402
from pase.ir.configs import ConfigOptions  # noqa: E402
from pase.model.cost import build_cost_model  # noqa: E402
from pase.model.roofline import matrix_kernel_s  # noqa: E402
from pase.model.training import zero3_ring_s  # noqa: E402
from pase.models import batch_builder  # noqa: E402
from pase.strategies.baselines import tensor_parallel_strategy  # noqa: E402

# Issue 12's goals: mean and largest absolute relative error of a table's rows.
GOALS = {"Korthikanti Table 5": (0.035, 0.08), "Megatron Table 1": (0.05, 0.10)}


@pytest.mark.parametrize("table", GOALS)
def test_a_published_table_is_predicted_within_the_goal(table):
    mean_goal, largest_goal = GOALS[table]
    errors = {}
    for _, label, sample, gpus, par, measured, unit, layers, hidden in (c for c in cases() if c[0] == table):
        value, plan = predict(sample, gpus, par, unit, layers, hidden, True)
        assert plan.cluster.efficiency == CALIBRATIONS["dgx-a100"]
        errors[label] = value / measured - 1
    assert len(errors) == {"Korthikanti Table 5": 8, "Megatron Table 1": 10}[table]
    shown = ", ".join(f"{label} {e * 100:+.1f}%" for label, e in errors.items())
    assert np.mean(np.abs(list(errors.values()))) <= mean_goal, shown
    assert max(abs(e) for e in errors.values()) <= largest_goal, shown


def test_the_a100_prices_its_best_measured_product_no_faster_than_measured():
    # ml-engineering's "maximum achievable matmul FLOPS" table: the best bf16 product measured on an A100 SXM,
    # 6912 x 16384 x 2048, ran at 267.9 TFLOP/s. The calibration's curve is fixed from it (not fitted to step
    # times): its kernel for that shape may not beat the measurement, and its memory term (the fitted overlap
    # adds almost all of the operands' HBM time) leaves it within 15% below.
    cluster = preset("dgx-a100", 8, calibrated=True)
    m, n, k = 6912, 16384, 2048
    flops, nbytes = 2 * m * n * k, 2 * (m * k + k * n + m * n)
    rate = flops / float(matrix_kernel_s(flops, nbytes, cluster.peak_flops, cluster.efficiency))
    assert 0.85 * 267.9e12 <= rate <= 267.9e12
    assert cluster.efficiency.matmul_curve == A100_KERNEL_CURVE


# Issue 25's goals for the A100 tables out of sample (mean, largest absolute error), and the three figures (HBM
# fraction, NVLink efficiency, memory overlap) `benchmarks/validate_out_of_sample.py --iterations 250` fitted to
# each table alone (BENCHMARKS.md, "The A100 calibration out of sample").
OUT_OF_SAMPLE = {"Megatron Table 1": ("Korthikanti Table 5", (0.7656, 0.4854, 0.0041)),
                 "Korthikanti Table 5": ("Megatron Table 1", (0.6832, 0.5556, 0.0))}


@pytest.mark.parametrize("held_out", OUT_OF_SAMPLE)
def test_each_a100_table_is_predicted_by_the_calibration_fitted_to_the_other(held_out):
    fitted, figures = OUT_OF_SAMPLE[held_out]
    rows = [c for c in cases() if c[0] == held_out]
    got = [abs(e) for e in errors(np.array(figures), rows)]
    assert len(got) == {"Korthikanti Table 5": 8, "Megatron Table 1": 10}[held_out]
    assert np.mean(got) <= 0.05 and max(got) <= 0.10, (fitted, got)


def test_q_k_and_v_reading_the_norm_output_reduce_its_gradient_once():
    # Megatron's split of one block on the 8 GPUs of a node: the norm's output is replicated and q, k, v are
    # column-parallel, so the forward moves nothing and the backward all-reduces the input gradient, once for
    # the fused QKV product, not once per reader.
    graph = batch_builder("gpt", layers=1, d_model=256, heads=8, seq=128, vocab=512)(2)
    cluster = preset("dgx-a100", 8, calibrated=True)
    configs = {k: np.array([v]) for k, v in tensor_parallel_strategy(graph, 8).items()}
    eff = cluster.efficiency
    nbytes = 2 * 128 * 256 * 2  # batch x sequence x hidden, fp16
    by_hand = 2 * (7 / 8 * nbytes / (300e9 * eff.intra_efficiency) + 7 * eff.intra_latency_s)
    for shared, readers in ((True, 1), (False, 3)):
        model = build_cost_model(graph, cluster, ConfigOptions(), configs=configs, shared_reads=shared)
        got = sum(float(t[0, 0]) for e, t in model.edge_tables if e.src == "h.0.ln1")
        assert got == pytest.approx(readers * by_hand)


def test_zero3_gathers_are_one_flat_ring_over_the_data_parallel_ranks():
    cluster = preset("dgx-a100", 32, calibrated=True)  # 4 nodes of 8
    eff = cluster.efficiency
    got = zero3_ring_s(cluster.mesh, (4, 8), np.array([3.2e9, 0.0]))
    # 31 ring steps of 1/32 of the bytes each, at one GPU's network bandwidth: the ring runs through the 8 GPUs
    # of each node in turn, so 3 of its steps cross the network and 28 (7 in each of 4 nodes) stay on NVLink.
    by_hand = 31 / 32 * 3.2e9 / (25e9 * eff.inter_efficiency) + 3 * eff.inter_latency_s + 28 * eff.intra_latency_s
    assert got.tolist() == pytest.approx([by_hand, 0.0])
    across = zero3_ring_s(cluster.mesh, (4, 1), np.array([3.2e9]))  # one GPU per node: every step on the network
    assert across[0] == pytest.approx(3 / 4 * 3.2e9 / (25e9 * eff.inter_efficiency) + 3 * eff.inter_latency_s)
    inside = zero3_ring_s(cluster.mesh, (1, 8), np.array([3.2e9]))
    assert inside[0] == pytest.approx(7 / 8 * 3.2e9 / (300e9 * eff.intra_efficiency) + 7 * eff.intra_latency_s)


def test_table_2_zero3_falls_with_the_gpus_while_ptd_p_holds():
    rows = {}
    for _, label, sample, gpus, par, measured, unit, layers, hidden in (
            c for c in cases() if c[0] == "Megatron Table 2"):
        rows[label] = (predict(sample, gpus, par, unit, layers, hidden, True)[0], measured)
    zero3 = [rows[f"gpt3-175b ZeRO-3 {g} GPUs"][0] for g in (384, 768, 1536)]
    # Measured 144, 88 and 44 TFLOP/s: ZeRO-3's gathers do not shrink as its per-GPU work does.
    assert zero3[0] > 1.3 * zero3[1] > 1.3 ** 2 * zero3[2]
    assert all(abs(p / m - 1) <= 0.08 for label, (p, m) in rows.items() if "ZeRO-3" in label), rows
    ptd_p = {label: v for label, v in rows.items() if "PTD-P" in label}
    assert len(ptd_p) == 6 and all(abs(p / m - 1) <= 0.04 for p, m in ptd_p.values()), ptd_p
    pairs = [(a, b) for a in rows for b in rows if a < b]
    wrong = [(a, b) for a, b in pairs if (rows[a][0] - rows[b][0]) * (rows[a][1] - rows[b][1]) < 0]
    # Issue 12's goal: every pair ordered as measured, the closest 2% apart (ZeRO-3 on 384 GPUs 144 TFLOP/s,
    # PTD-P 175B on 1,536 141).
    assert wrong == [], wrong


def test_table_2_measurements_imply_the_plain_1f1b_schedule():
    # Table 2 does not say which schedule PTD-P ran: the per-step constant its own measurements imply (two runs
    # at m1 and m2 microbatches per pipeline, a step m tau + K) is the model's under 1F1B, not the interleaved
    # schedule's, whose bubble is v times smaller.
    evidence = schedule_evidence()
    assert [e[0] for e in evidence] == ["gpt3-175b", "megatron-530b"]
    for sample, measured, plain, interleaved in evidence:
        assert interleaved < 0.5 * measured and abs(plain / measured - 1) <= 0.2, (sample, measured, plain, interleaved)


@pytest.mark.parametrize("sp", [False, True])
def test_the_asynchronous_tensor_parallel_backward_hides_each_input_gradient_reduction_once(sp):
    # One wide block on the 8 GPUs of a node, Megatron's split: each column-parallel product (the fused QKV, the
    # first feed-forward one) reduces its input gradient, an all-reduce (under sequence parallelism a
    # reduce-scatter, after re-gathering its input), of the block's b x s x h activation. With tp_overlap these
    # run during the product's own backward, which here outlasts them: each is hidden, QKV's once, not thrice.
    from pase.model.training import Parallelism, layer_times

    b, s, h = 2, 1024, 12288
    graph = batch_builder("gpt", layers=1, d_model=h, heads=96, seq=s, vocab=512)(b)
    cluster = preset("dgx-a100", 8, calibrated=True)
    eff = cluster.efficiency
    strategy = tensor_parallel_strategy(graph, 8, sequence_parallel=sp)
    times = {overlap: layer_times(graph, cluster, strategy, Parallelism(
        tensor=8, global_batch=b, microbatch_size=b, sequence_parallel=sp, tp_overlap=overlap))
        for overlap in (False, True)}
    names = [l.name for l in times[False].layers]
    hidden = dict(zip(names, times[False].backward_s - times[True].backward_s))
    nbytes = b * s * h * 2
    one_way = 7 / 8 * nbytes / (300e9 * eff.intra_efficiency) + 7 * eff.intra_latency_s  # ring, 8 GPUs
    by_hand = 2 * one_way  # all-reduce; under sp a re-gather plus a reduce-scatter
    assert hidden["h.0.attn.q"] == pytest.approx(by_hand)
    assert hidden["h.0.ff1"] == pytest.approx(by_hand)
    assert hidden["h.0.attn.k"] == hidden["h.0.attn.v"] == 0.0
    assert np.array_equal(times[False].forward_s, times[True].forward_s)
    assert all(x >= 0 for x in hidden.values())
