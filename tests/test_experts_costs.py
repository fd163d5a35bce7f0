"""What an expert block's kernels cost (pase.model.experts): Megatron-Core's local sort and the grouped products,
against a simulated permutation, hand counts and published timings."""

from __future__ import annotations

import numpy as np
import pytest

from pase.hardware.cluster import preset
from pase.model.experts import block_costs, expert_layout, moe_blocks
from pase.model.roofline import matrix_kernel_s, vector_kernel_s
from pase.model.training import Parallelism
from pase.models.moe import moe_decoder

# Qwen3-30B-A3B's expert blocks (its config.json: hidden 2048, 128 experts of 768, top-8), one sequence of 4,096.
QWEN3_30B = dict(layers=1, hidden=2048, heads=32, kv_heads=4, experts=128, top_k=8, expert_ffn=768, vocab=1024,
                 head_dim=128)


def _block(batch: int = 1, **sizes):
    return moe_blocks(moe_decoder("block", batch=batch, seq=4096, **{**QWEN3_30B, **sizes}))[0]


def test_the_local_sort_moves_what_megatrons_transpose_moves():
    # Megatron-Core 0.14, MoEAlltoAllTokenDispatcher.dispatch_postprocess under token-drop with padding: the received
    # rows, [source rank][local expert][capacity], are made local-expert-major by transpose(0, 1).contiguous().
    # Simulate it on row numbers and count the rows that move: each is read and written once.
    c = preset("dgx-b200", 8, calibrated=True)
    par = Parallelism(data=8, global_batch=8, ep=8, etp=1, capacity_factor=1.0)
    block = _block()
    ep, local = 8, block.experts // 8
    capacity = block.s * block.top_k // block.experts  # Megatron's get_capacity at factor 1: 256
    received = np.arange(ep * local * capacity).reshape(ep, local, capacity)
    sorted_rows = np.ascontiguousarray(received.transpose(1, 0, 2)).ravel()
    moved = int(np.sum(sorted_rows != received.ravel()))
    rows = ep * local * capacity
    assert rows == 32768 and moved == rows - 2 * capacity  # all but the first and the last block of rows move
    # Each pass reads and writes every row (d BF16 elements; a contiguous copy writes the rows that stay, too):
    # tokens and their FP32 gates after the dispatch, the expert outputs before the combine; the backward the same.
    tokens = 2 * rows * block.d * 2
    gates = 2 * rows * 4
    hand = 2 * float(vector_kernel_s(np.zeros(3), np.array([tokens, gates, tokens]), c.efficiency).sum())
    costs = block_costs(block, par, c, expert_layout(par, c.mesh), "fp8")
    assert costs["sort_s"] == pytest.approx(hand)
    # 268 MB read and written a pass, four passes at the B200's achieved HBM rate: 150 us, a small part of the
    # block's compute.
    assert 4 * tokens / c.efficiency.memory_Bps < costs["sort_s"] < 0.25 * costs["compute_s"]


def test_no_sort_with_one_local_expert_or_one_source():
    c = preset("dgx-b200", 8, calibrated=True)
    one_each = _block(experts=8, top_k=2)
    par = Parallelism(data=8, global_batch=8, ep=8, etp=1, capacity_factor=1.0)
    assert block_costs(one_each, par, c, expert_layout(par, c.mesh), "fp8")["sort_s"] == 0.0
    alone = Parallelism(data=8, global_batch=8, capacity_factor=1.0)  # EP 1: the rows arrive expert-major
    assert block_costs(_block(), alone, c, expert_layout(alone, c.mesh), "fp8")["sort_s"] == 0.0


def test_grouped_products_are_priced_one_kernel_at_a_time_as_published_loops_run():
    # Transformer Engine's GroupedLinear runs one cuBLASLt product per local expert. A cuBLAS loop over
    # Qwen3-30B-A3B's 128 expert up projections of 512 tokens (K 2048, N 1536) on one H100 reached 129.5 TFLOP/s in
    # BF16 (tgale96/grouped_gemm#37): 24.9 us an expert. The model's product of one such expert, alone, on the H100's
    # measured curve is within a factor of 2 of that, where crediting 4 concurrent streams (one product of 4 times
    # the FLOPs, a quarter of its time each) is over 2.5 times faster than published.
    c = preset("dgx-h100", 8, calibrated=True)
    flops, nbytes = 2.0 * 512 * 2048 * 1536, (512 * 2048 + 2048 * 1536 + 512 * 1536) * 2
    alone = float(matrix_kernel_s(np.array([flops]), np.array([nbytes]), c.peak_flops, c.efficiency)[0])
    four = float(matrix_kernel_s(np.array([4 * flops]), np.array([4 * nbytes]), c.peak_flops, c.efficiency)[0]) / 4
    published = flops / 129.5e12
    assert published / 2 < alone < 2 * published and four < published / 2.5
    # The block prices its experts so: at the same rows per expert, twice the local experts take twice the products'
    # time (EP 1 and ETP 1: no dispatch and no sort).
    par = Parallelism(data=8, global_batch=8, capacity_factor=1.0)
    layout = expert_layout(par, c.mesh)
    few = block_costs(_block(experts=64, top_k=4), par, c, layout, "bf16")
    many = block_costs(_block(batch=2, experts=128, top_k=4), par, c, layout, "bf16")
    assert few["expert_tokens"] == many["expert_tokens"] == 256
    act = lambda costs: costs["act_forward_s"]
    assert many["compute_s"] - 2 * act(many) == pytest.approx(2 * (few["compute_s"] - 2 * act(few)), rel=0.05)


def test_expert_casts_are_the_activations_a_microbatch_and_current_scaling_reads_each_once_more():
    # Qwen3-30B-A3B's block at EP 8 on one DGX H100: each device's 16 local experts get 2,048 rows each (32,768 in
    # all, capacity factor 1). Under current scaling each grouped cast first reads its BF16 input once for the amax
    # (2 bytes an element) and launches the amax and scale kernels: forward the fc1 input (d a row) and the fc2
    # input (f a row), backward the fc1 output gradient (2 f a row) and the fc2 output gradient (d a row). The
    # weights are cast once a step with the dense products' (TE's GroupedLinear takes Megatron-Core's
    # is_first_microbatch), not here: were they, the difference would grow by their 3 d f elements an expert.
    c = preset("dgx-h100", 8, calibrated=True)
    par = Parallelism(data=8, global_batch=8, ep=8, etp=1, capacity_factor=1.0)
    block = _block()
    costs = {p: block_costs(block, par, c, expert_layout(par, c.mesh), p) for p in ("fp8", "fp8-cs")}
    rows, d, f = 32768, 2048, 768
    eff = c.efficiency
    assert costs["fp8"]["expert_tokens"] * 16 == rows
    forward = costs["fp8-cs"]["forward_s"] - costs["fp8"]["forward_s"]
    backward = costs["fp8-cs"]["backward_s"] - costs["fp8"]["backward_s"]
    assert forward == pytest.approx(rows * (d + f) * 2 / eff.memory_Bps + 2 * 2 * eff.kernel_overhead_s, rel=1e-9)
    assert backward == pytest.approx(rows * (2 * f + d) * 2 / eff.memory_Bps + 2 * 2 * eff.kernel_overhead_s,
                                     rel=1e-9)


def test_expert_casts_write_both_copies_the_weight_gradient_needs():
    # TE's GroupedLinear quantises its input and its output gradient row-wise and column-wise (the weight gradient
    # reads them transposed): a cast-transpose under delayed scaling, 2 + 1 + 1 bytes an element; MXFP8 writes the
    # same two copies plus a 1-byte scale a block of 32 each way, 1/16 of a byte more, in one kernel as well.
    c = preset("dgx-b200", 8, calibrated=True)
    par = Parallelism(data=8, global_batch=8, ep=8, etp=1, capacity_factor=1.0)
    costs = {p: block_costs(_block(), par, c, expert_layout(par, c.mesh), p) for p in ("fp8", "mxfp8")}
    rows, d, f = 32768, 2048, 768
    bps = c.efficiency.memory_Bps
    assert costs["mxfp8"]["forward_s"] - costs["fp8"]["forward_s"] == pytest.approx(rows * (d + f) / 16 / bps,
                                                                                    rel=1e-9)
    assert costs["mxfp8"]["backward_s"] - costs["fp8"]["backward_s"] == pytest.approx(rows * (2 * f + d) / 16 / bps,
                                                                                      rel=1e-9)


def test_deepseek_v3_with_its_prediction_module_counts_the_published_685b():
    # deepseek-ai/DeepSeek-V3's README: 685B on Hugging Face, "671B of the Main Model weights and 14B of the
    # Multi-Token Prediction (MTP) Module weights"; the checkpoint stores the module's own copies of the embedding
    # and output tables (model.layers.61.embed_tokens, .shared_head.head), which training shares with the main model.
    from pase.models import sample

    main = sample("deepseek-v3", batch=1, seq=128)
    with_mtp = sample("deepseek-v3", batch=1, seq=128, mtp=1)
    tables = 2 * 129280 * 7168
    assert main.parameter_count == pytest.approx(671e9, rel=0.001)
    assert with_mtp.parameter_count + tables == pytest.approx(685e9, rel=0.002)
    # The module: a block as the main model's MoE blocks, the 2d -> d projection, three norms; its loss is a
    # second cross-entropy after the main model's, which stays last in the layer order.
    names = [layer.name for layer in with_mtp.layers]
    assert names[-3:] == ["norm", "projection", "softmax"] and "layers.61.moe.experts" in names
    assert sum(layer.op == "SoftmaxCrossEntropy" for layer in with_mtp.layers) == 2
