"""Calibrated step times: element-wise chains fused into one kernel, and sequence parallelism's backward re-gather.

Hand counts of the roofline's fusion rule (:func:`pase.model.roofline.fused_chains`,
:func:`~pase.model.roofline.fused_times_s`) and of the all-gather Megatron repeats in the
backward under sequence parallelism (:func:`pase.model.training.layer_times`); neither
touches the peak-rate (uncalibrated) or the paper's model.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pase import ops as L
from pase.hardware.cluster import preset
from pase.hardware.efficiency import Efficiency
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.model.cost import build_cost_model
from pase.model.roofline import fused_chains
from pase.model.training import Parallelism, layer_times
from pase.models import batch_builder
from pase.models.megatron import megatron_gpt
from pase.strategies.baselines import tensor_parallel_strategy

EFF = Efficiency(matmul_curve=((1e9, 0.5), (100e9, 0.9)), vector_flops=50e12, memory_Bps=1e12,
                 kernel_overhead_s=4e-6, intra_efficiency=0.5, intra_latency_s=2e-6, memory_overlap=0.5)
B = N = 1024  # the element-wise layers' iteration space, b x n
ONE = {name: np.array([[1, 1]]) for name in ("drop", "add", "gelu")}


def _chain_graph() -> Graph:
    # fc -> dropout -> residual add (of fc's output) -> GeLU -> fc2: the dropout, add and GeLU are one chain.
    g = Graph("chain")
    g.add_layer(L.fully_connected("fc", b=B, n=N, c=N))
    g.add_layer(L.dropout("drop", (B, N), ("b", "n")), inputs=["fc"])
    g.add_layer(L.elementwise("add", (B, N), ("b", "n")), inputs=["drop", "fc"])
    g.add_layer(L.gelu("gelu", (B, N), ("b", "n")), inputs=["add"])
    g.add_layer(L.fully_connected("fc2", b=B, n=N, c=N), inputs=["gelu"])
    return g


def _configs(graph: Graph) -> dict:
    return {layer.name: np.array([[1] * len(layer.dims)]) for layer in graph.layers}


def _kernel(flops: float, nbytes: float) -> float:
    # The roofline with half the shorter time hidden (EFF.memory_overlap 0.5), one kernel overhead.
    c, m = flops / EFF.vector_flops, nbytes / EFF.memory_Bps
    return max(c, m) + 0.5 * min(c, m) + EFF.kernel_overhead_s


def test_a_chain_of_elementwise_layers_is_one_kernel_reading_its_inputs_and_writing_its_outputs_once():
    g = _chain_graph()
    assert fused_chains(g, _configs(g)) == [("drop", "add", "gelu")]
    cluster = replace(preset("dgx-a100", 1, calibrated=False), efficiency=EFF)
    fused = build_cost_model(g, cluster, configs=_configs(g), fuse_elementwise=True)
    apart = build_cost_model(g, cluster, configs=_configs(g))
    e = B * N
    # Forward: the dropout's input and the add's residual read, the GeLU's output written, and the add's output
    # (the GeLU's backward reads it) written once: 4 blocks of 2 bytes, against 2 + 3 + 2 apart.
    # FLOPs: 1 (dropout) + 1 (add) + 1 (GeLU) per element forward; 1 (dropout) + 0 + 2 (GeLU) backward.
    forward, backward = _kernel(3 * e, 4 * e * 2), _kernel(3 * e, 1.5 * 4 * e * 2)
    assert float(fused.forward_compute_s["gelu"][0]) == pytest.approx(forward)
    assert float(fused.compute_s["gelu"][0]) == pytest.approx(forward + backward)
    for name in ("drop", "add"):  # the chain's time is its last layer's
        assert float(fused.compute_s[name][0]) == float(fused.forward_compute_s[name][0]) == 0.0
    for name in ("fc", "fc2"):  # products are kernels of their own
        assert float(fused.compute_s[name][0]) == pytest.approx(float(apart.compute_s[name][0]))
    chain = sum(float(apart.compute_s[n][0]) for n in ("drop", "add", "gelu"))
    by_hand_apart = sum(_kernel(f, 2 * k * e) + _kernel(b, 1.5 * 2 * k * e)
                        for f, b, k in ((e, e, 2), (e, 0, 3), (e, 2 * e, 2)))
    assert chain == pytest.approx(by_hand_apart)
    assert float(fused.compute_s["gelu"][0]) < chain
    for name in fused.compute_flops:  # FLOPs are counted as ever
        assert fused.compute_flops[name].tolist() == apart.compute_flops[name].tolist()


def test_fusion_leaves_the_peak_and_the_paper_models_alone():
    g = _chain_graph()
    calibrated = replace(preset("dgx-a100", 1, calibrated=False), efficiency=EFF)
    for cluster, options in ((preset("dgx-a100", 1, calibrated=False), ConfigOptions()),
                             (calibrated, ConfigOptions(cost_model="paper"))):
        fused = build_cost_model(g, cluster, options, configs=_configs(g), fuse_elementwise=True)
        apart = build_cost_model(g, cluster, options, configs=_configs(g))
        for name in apart.compute_s:
            assert fused.compute_s[name].tolist() == apart.compute_s[name].tolist()


def test_a_second_reader_or_another_split_ends_the_chain():
    g = _chain_graph()
    configs = _configs(g)
    # The add's output gathered for a GeLU split otherwise is a redistribution, not a fused read.
    assert fused_chains(g, {**configs, "gelu": np.array([[2, 1]])}) == [("drop", "add")]
    # Several configurations (the search): whether a chain fuses depends on its choice, so none does.
    assert fused_chains(g, {**configs, "add": np.array([[1, 1], [2, 1]])}) == []
    h = Graph("fork")
    h.add_layer(L.dropout("drop", (B, N), ("b", "n")))
    h.add_layer(L.elementwise("add", (B, N), ("b", "n")), inputs=["drop", "drop"])
    h.add_layer(L.gelu("gelu", (B, N), ("b", "n")), inputs=["drop"])
    assert fused_chains(h, _configs(h)) == []  # the dropout's output has two readers: it is written


def test_megatron_block_fuses_bias_dropout_add_and_nothing_across_softmax_or_products():
    graph = megatron_gpt("tiny", layers=2, hidden=256, heads=8, batch=2, seq=128, vocab=512)
    for sp in (False, True):
        configs = {k: np.array([v]) for k, v in tensor_parallel_strategy(graph, 8, 1, sp).items()}
        chains = set(fused_chains(graph, configs))
        assert chains == {("embed", "embed.dropout"), *((f"h.{i}.attn.out_dropout", f"h.{i}.add1") for i in (0, 1)),
                          *((f"h.{i}.ff_dropout", f"h.{i}.add2") for i in (0, 1))}


def test_sequence_parallelism_gathers_the_norm_output_again_in_the_backward_once_for_q_k_and_v():
    graph = batch_builder("gpt", layers=1, d_model=256, heads=8, seq=128, vocab=512)(2)
    calibrated = preset("dgx-a100", 8, calibrated=True)
    eff = calibrated.efficiency
    # One all-gather of the norm's output (batch 2 x sequence 128 x hidden 256, fp16) over the node's 8 GPUs.
    by_hand = 7 / 8 * (2 * 128 * 256 * 2) / (300e9 * eff.intra_efficiency) + 7 * eff.intra_latency_s
    for cluster, sp, expected in ((calibrated, True, by_hand), (calibrated, False, 0.0),
                                  (preset("dgx-a100", 8, calibrated=False), True, 0.0)):
        par = Parallelism(tensor=8, global_batch=2, microbatch_size=2, sequence_parallel=sp)
        lt = layer_times(graph, cluster, tensor_parallel_strategy(graph, 8, 1, sp), par)
        at = {l.name: i for i, l in enumerate(lt.layers)}
        q, k, v = (at[f"h.0.attn.{n}"] for n in "qkv")
        # q, k and v are alike but for the edge from the norm (shared: q's) and the re-gather (q's, once):
        # the edge's time splits evenly between forward and backward, the re-gather is the backward's alone.
        extra = (lt.backward_s[q] - lt.backward_s[k]) - (lt.forward_s[q] - lt.forward_s[k])
        assert extra == pytest.approx(expected, abs=1e-12)
        assert lt.backward_s[k] == pytest.approx(lt.backward_s[v])
