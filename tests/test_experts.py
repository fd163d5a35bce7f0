"""Expert parallelism in the 3-D model (pase.model.experts): hand counts, a simulated exchange, brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pase.cli import main
from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster
from pase.model.experts import block_costs, expert_layout, moe_blocks
from pase.model.training import Parallelism, evaluate_training
from pase.models import batch_builder, sample
from pase.models.moe import FRONTIER_MOE, graph_active_parameters, moe_decoder
from pase.search.stages import search_training

SIZES = dict(layers=2, hidden=64, heads=4, kv_heads=2, experts=8, top_k=2, expert_ffn=128, vocab=256)


def tiny(batch: int, seq: int = 32):
    return moe_decoder("tiny-moe", batch=batch, seq=seq, **SIZES)


def cluster(devices: int = 8, per_node: int = 4) -> Cluster:
    """A peak-rate two-level cluster: nodes of ``per_node`` devices, 100 GB/s inside, 10 GB/s between."""
    return Cluster(devices, 100e12, 100e9, 2, 80e9, "test", per_node, 10e9)


def test_dispatch_matches_a_simulated_exchange():
    # 8 ranks (2 nodes x 4), EP 8, ETP 1: route every token copy of every rank to its expert, count the bytes
    # each rank sends across each link, and price them as the mesh does.
    c = cluster()
    par = Parallelism(data=8, global_batch=8, ep=8)
    graph = tiny(1)
    block = moe_blocks(graph)[0]
    layout = expert_layout(par, c.mesh)
    E, k, d, T = block.experts, block.top_k, block.d, block.b * block.s
    owner = np.arange(E) // (E // 8)  # experts 0, 1 on rank 0, ...
    sent_node = np.zeros(8)
    sent_gpu = np.zeros(8)
    for rank in range(8):
        experts = (np.arange(T * k) + rank) % E  # balanced: every expert gets T k / E copies of each rank
        for dst in owner[experts]:
            if dst == rank:
                continue
            if dst // 4 != rank // 4:
                sent_node[rank] += d * c.bytes_per_element
            else:
                sent_gpu[rank] += d * c.bytes_per_element
    node, gpu = c.mesh.axes
    # The mesh's hierarchical all-to-all: the cross-node share at the network's rate, the rest on NVLink,
    # one latency per peer step on each axis.
    one = (sent_node.max() / node.effective_Bps + (2 - 1) * node.latency_s
           + sent_gpu.max() / gpu.effective_Bps + (4 - 1) * gpu.latency_s)
    costs = block_costs(block, par, c, layout)
    assert costs["dispatch_s"] == pytest.approx(4 * one)  # dispatch and combine, forward and backward
    assert costs["tokens"] == T * k
    assert costs["expert_tokens"] == T * k * 8 / E  # every rank's copies for this rank's experts


def test_dispatch_is_zero_without_expert_parallelism_and_fp8_dispatch_sends_fewer_bytes():
    c = cluster()
    block = moe_blocks(tiny(1))[0]
    alone = Parallelism(data=8, global_batch=8)
    assert block_costs(block, alone, c, expert_layout(alone, c.mesh))["dispatch_s"] == 0
    bf16 = Parallelism(data=8, global_batch=8, ep=4)
    fp8 = Parallelism(data=8, global_batch=8, ep=4, fp8_dispatch=True)
    a = block_costs(block, bf16, c, expert_layout(bf16, c.mesh))["dispatch_s"]
    b = block_costs(block, fp8, c, expert_layout(fp8, c.mesh))["dispatch_s"]
    assert b < a
    # Imbalance makes the busiest device receive and compute more.
    skew = Parallelism(data=8, global_batch=8, ep=4, expert_imbalance=1.5)
    s = block_costs(block, skew, c, expert_layout(skew, c.mesh))
    assert s["dispatch_s"] > a and s["expert_tokens"] == 1.5 * block_costs(block, bf16, c, expert_layout(
        bf16, c.mesh))["expert_tokens"]


def test_expert_memory_matches_a_hand_count():
    c = cluster()
    graph_params = tiny(1)
    experts = sum(w.size for l in graph_params.layers if l.op == "MoEExperts" for w in l.weights)
    dense = graph_params.parameter_count - experts
    for ep, etp, zero in ((1, None, 0), (4, None, 1), (8, None, 1), (2, 2, 2)):
        t = 2 if etp else 1
        par = Parallelism(tensor=t, data=8 // t, global_batch=8, ep=ep, etp=etp, zero=zero, sequence_parallel=t > 1)
        plan = evaluate_training(lambda b: tiny(b), c, par)
        stage = plan.stages[0]
        edp = 8 // ((etp or t) * ep)
        per_device = experts / (ep * (etp or t))
        assert stage.expert_params == pytest.approx(per_device)
        # Mixed-precision Adam: 2-byte weights, 2-byte gradients, 12 bytes of optimizer state; the distributed
        # optimizer shards the experts' state over their expert-data-parallel replicas.
        dense_device = stage.weights_bytes / 2 - per_device
        if t == 1:
            assert dense_device == dense
        else:
            assert dense / t < dense_device < dense  # tensor parallelism splits most dense weights
        assert stage.optimizer_bytes == pytest.approx(12 * (dense_device / (8 // t if zero >= 1 else 1)
                                                            + per_device / (edp if zero >= 1 else 1)))
        assert stage.gradient_bytes == pytest.approx(2 * (dense_device / (8 // t if zero >= 2 else 1)
                                                          + per_device / (edp if zero >= 2 else 1)))


def test_tensor_parallelism_splits_the_experts_as_megatron_does():
    # The bug: under TP alone every rank held every expert. Now ETP = TP by default: each rank holds 1/t.
    g = sample("mixtral-8x7b", batch=1, seq=256)
    experts = sum(w.size for l in g.layers if l.op == "MoEExperts" for w in l.weights)
    c = Cluster(8, 989e12, 450e9, 2, 80e9, "h100", 8, 50e9)
    plan = evaluate_training(batch_builder("mixtral-8x7b", seq=256), c,
                             Parallelism(tensor=8, global_batch=8, microbatch_size=1))
    e = plan.experts_dict()
    assert e["etp"] == 8 and e["ep"] == 1
    assert plan.stages[0].expert_params == pytest.approx(experts / 8)
    assert plan.stages[0].weights_bytes < g.parameter_count * 2 / 8 * 1.1  # about 1/8 of the model, not all experts
    one = evaluate_training(batch_builder("mixtral-8x7b", seq=256), c,
                            Parallelism(data=8, global_batch=8, microbatch_size=1))
    assert plan.stages[0].memory_bytes < one.stages[0].memory_bytes / 4


def test_the_search_equals_brute_force_over_a_small_moe_space():
    c = cluster()
    build = lambda b: tiny(b)  # noqa: E731
    knobs = dict(schedules=("1f1b",), recompute=("none",), zero=(0,), sequence_parallel=(False,), context=(1,),
                 microbatch_sizes=(1, 2))
    found = search_training(build, c, 8, runners_up=0, **knobs)
    best = None
    for t, p in itertools.product((1, 2, 4, 8), (1, 2, 4, 8)):
        if 8 % (t * p):
            continue
        d = 8 // (t * p)
        # Every dispatcher too: the search keeps the faster exchange of each layout, which must lose nothing.
        for b, ep, etp, via in itertools.product((1, 2), (1, 2, 4, 8), (1, t), ("alltoall", "deepep")):
            if via == "deepep" and ep == 1:
                continue
            try:
                plan = evaluate_training(build, c, Parallelism(tensor=t, pipeline=p, data=d, microbatch_size=b,
                                                               global_batch=8, ep=ep, etp=etp, dispatcher=via))
            except ConfigurationError:
                continue
            if plan.fits_memory and (best is None or plan.step_time_s < best.step_time_s):
                best = plan
    assert found.best.step_time_s == pytest.approx(best.step_time_s)


@pytest.mark.parametrize("name", sorted(FRONTIER_MOE))
def test_frontier_parameter_counts_match_the_published_totals(name):
    spec = FRONTIER_MOE[name]
    g = sample(name, batch=1, seq=64)
    active = graph_active_parameters(g)
    if name == "gpt-oss-120b":
        active -= g.layer("embedding").size_of["v"] * g.layer("embedding").size_of["d"]  # OpenAI counts no table
    # Published to 3 significant figures (DeepSeek's 37B to 2: 37.55B here).
    assert g.parameter_count == pytest.approx(spec.total, rel=0.005)
    assert active == pytest.approx(spec.active, rel=0.02)


def test_mla_counts_its_own_projections_and_runs_one_flash_kernel():
    from pase.model.attention import flash_units

    g = sample("deepseek-v3", batch=1, seq=64)
    h, d = 128, 7168
    per_layer = (d * 1536 + 1536 + 1536 * h * 192 + d * 512 + 512 + 512 * h * 128 * 2 + d * 64 + h * 128 * d + 2 * d)
    attention = sum(w.size for l in g.layers if l.name.startswith("layers.7.attn") for w in l.weights)
    assert attention + d == per_layer  # attention's norm is counted above, the feed-forward norm is not
    assert len(flash_units(g, explicit=True)) == 61


@pytest.mark.parametrize("change, words", [
    (dict(ep=3), "divide"),
    (dict(ep=16), "divide the 8 devices"),
    (dict(expert_imbalance=0.5), "at least 1"),
    (dict(capacity_factor=0), "positive"),
])
def test_bad_expert_settings_are_refused_with_a_message(change, words):
    with pytest.raises(ConfigurationError, match=words):
        evaluate_training(lambda b: tiny(b), cluster(), Parallelism(data=8, global_batch=8, **change))


def test_ep_that_does_not_divide_the_experts_is_refused():
    with pytest.raises(ConfigurationError, match="does not divide the 8 experts"):
        evaluate_training(lambda b: tiny(b, seq=48), Cluster(12, 100e12, 100e9, 2, 80e9, "t", 12, 10e9),
                          Parallelism(data=12, global_batch=12, ep=3))


def test_the_cli_refuses_bad_expert_settings_in_one_line(capsys):
    for extra in (["--ep", "3"], ["--ep", "8", "--etp", "2"], ["--expert-imbalance", "0.5"]):
        try:
            code = main(["evaluate", "mixtral-8x7b", "--devices", "8", "--cluster", "dgx-h100", "--global-batch", "8",
                         "--microbatch-size", "1", "--seq", "256", *extra])
        except SystemExit as exc:  # argparse's refusal of a malformed value
            code = exc.code
        assert code != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_cli_shows_an_moe_plan(capsys):
    assert main(["evaluate", "mixtral-8x7b", "--devices", "8", "--cluster", "dgx-h100", "--global-batch", "8",
                 "--microbatch-size", "1", "--seq", "256", "--ep", "8"]) == 0
    out = capsys.readouterr().out
    assert "EP 8" in out and "1 of 8 experts per device" in out and "dispatch and combine" in out
    assert main(["evaluate", "mixtral-8x7b", "--devices", "8", "--cluster", "dgx-h100", "--global-batch", "8",
                 "--microbatch-size", "1", "--seq", "256", "--ep", "8", "--json"]) == 0
    import json
    e = json.loads(capsys.readouterr().out)["experts"]
    assert e["ep"] == 8 and e["experts_per_device"] == 1 and e["tokens_sent_per_all_to_all"] == 256 * 2 * 7 / 8


# The released configs' sizes (deepseek-ai/DeepSeek-V3, Qwen/Qwen3-235B-A22B, openai/gpt-oss-120b config.json).
HF_CONFIGS = {
    "deepseek-v3": dict(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"], hidden_size=7168,
                        num_hidden_layers=61, num_attention_heads=128, q_lora_rank=1536, kv_lora_rank=512,
                        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=256,
                        num_experts_per_tok=8, moe_intermediate_size=2048, n_shared_experts=1,
                        first_k_dense_replace=3, intermediate_size=18432, vocab_size=129280, moe_layer_freq=1,
                        tie_word_embeddings=False, num_nextn_predict_layers=1, max_position_embeddings=163840,
                        n_group=8, topk_group=4),
    "qwen3-235b-a22b": dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], hidden_size=4096,
                            num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4, head_dim=128,
                            num_experts=128, num_experts_per_tok=8, moe_intermediate_size=1536,
                            decoder_sparse_step=1, mlp_only_layers=[], vocab_size=151936, tie_word_embeddings=False,
                            max_position_embeddings=40960),
    "gpt-oss-120b": dict(model_type="gpt_oss", architectures=["GptOssForCausalLM"], hidden_size=2880,
                         num_hidden_layers=36, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                         num_local_experts=128, num_experts_per_tok=4, intermediate_size=2880, sliding_window=128,
                         layer_types=["sliding_attention", "full_attention"] * 18, vocab_size=201088,
                         attention_bias=True, tie_word_embeddings=False, max_position_embeddings=131072),
}


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_the_released_configs_build_the_samples(name):
    from pase.io.hf_config import from_hf_config

    g = from_hf_config(HF_CONFIGS[name], batch=1, seq=256)
    s = sample(name, batch=1, seq=256)
    assert g.parameter_count == s.parameter_count
    assert [l.op for l in g.layers] == [l.op for l in s.layers]


def test_a_saved_moe_plan_keeps_its_expert_layout(tmp_path, capsys):
    import json

    args = ["evaluate", "mixtral-8x7b", "--devices", "8", "--cluster", "dgx-h100"]
    assert main([*args, "--seq", "256", "--global-batch", "8", "--microbatch-size", "1", "--ep", "4", "--etp", "1",
                 "--json"]) == 0
    saved = tmp_path / "plan.json"
    saved.write_text(capsys.readouterr().out)
    assert main([*args, "--plan", str(saved), "--json"]) == 0
    e = json.loads(capsys.readouterr().out)["experts"]
    assert (e["ep"], e["etp"], e["edp"]) == (4, 1, 2)
