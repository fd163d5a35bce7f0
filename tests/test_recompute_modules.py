"""Megatron-Core's selective module recomputation (pase.model.recompute) against hand counts."""

from __future__ import annotations

import numpy as np
import pytest

from pase.cli import main
from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster
from pase.model.recompute import module_plan
from pase.model.training import Parallelism, layer_times
from pase.models import batch_builder
from pase.models.moe import MLA, moe_decoder
from pase.strategies.baselines import tensor_parallel_strategy

B, S, D, E, F, K, X = 2, 32, 64, 96, 128, 2, 8  # batch, sequence, hidden, dense width, expert width, top-k, experts
BPE = 2
TOKENS = B * S


def decoder(mla: MLA | None = None):
    """Block 0 dense (SwiGLU of width E), block 1 a mixture of X experts, top-K."""
    return moe_decoder("tiny", layers=2, hidden=D, heads=4, kv_heads=2 if mla is None else 4, experts=X, top_k=K,
                       expert_ffn=F, vocab=256, batch=B, seq=S, dense_layers=1, dense_ffn=E, mla=mla)


def cluster() -> Cluster:
    return Cluster(8, 100e12, 100e9, BPE, 80e9, "test", 4, 10e9)


def times(graph, modules=None, recompute="selective", ep=1):
    par = Parallelism(data=8, global_batch=8 * B, microbatch_size=B, recompute=recompute,
                      recompute_modules=modules, ep=ep, etp=1 if ep > 1 else None)
    lt = layer_times(graph, cluster(), tensor_parallel_strategy(graph, 1), par)
    return {l.name: i for i, l in enumerate(lt.layers)}, lt


def kept(lt, index, names) -> float:
    return float(sum(lt.activations[index[n]] for n in names))


def test_mlp_keeps_only_the_residual_entering_it():
    # A dense SwiGLU MLP keeps (norm input d) + (norm output d, shared by gate and up) + (gate and up outputs 2E)
    # + (activation E); checkpointed, with the norm fused into fc1, only the residual entering it (d).
    g = decoder()
    mlp = ["layers.0.ffn_norm", "layers.0.ffn.gate", "layers.0.ffn.up", "layers.0.ffn.swiglu", "layers.0.ffn.down"]
    index, plain = times(g, recompute="none")
    _, checkpointed = times(g, ("mlp",))
    assert kept(plain, index, mlp) == TOKENS * (2 * D + 3 * E) * BPE
    assert kept(checkpointed, index, mlp) == TOKENS * D * BPE
    # It reruns the MLP's three products (2 t d E FLOPs each) and the activation (2 FLOPs an element).
    flops = sum(checkpointed.recompute_flops[index[n]] for n in mlp)
    assert flops == pytest.approx(3 * 2 * TOKENS * D * E + 2 * TOKENS * E, rel=0.02)
    # The MoE block is no MLP: its layers are untouched.
    assert all(checkpointed.recompute_s[i] == 0 for n, i in index.items() if n.startswith("layers.1."))


def test_moe_act_frees_the_experts_activation():
    # Each of the T k routed rows keeps its activation (F elements) for fc2's weight gradient, unless recomputed.
    g = decoder()
    index, plain = times(g, recompute="none")
    _, act = times(g, ("moe_act",))
    i = index["layers.1.moe.experts"]
    assert plain.activations[i] - act.activations[i] == TOKENS * K * F * BPE
    assert act.recompute_flops[i] - plain.recompute_flops[i] == 2 * TOKENS * K * F  # SwiGLU forward, 2 an element


def test_moe_keeps_its_input_and_reruns_its_dispatch():
    g = decoder()
    index, lt = times(g, ("moe",), ep=8)
    layers = ["layers.1.moe.router", "layers.1.moe.experts", "layers.1.moe.combine"]
    assert kept(lt, index, layers) == TOKENS * D * BPE  # the normalised tokens entering the layer, once
    i = index["layers.1.moe.experts"]
    assert lt.recompute_s[i] == lt.forward_s[i] > 0  # the forward again, its all-to-alls included
    assert lt.block_transient["layers.1.moe"] > 0  # held again while its backward runs


def test_layernorm_frees_the_norm_before_the_experts_only():
    # The norm before the experts is a kernel of its own: its output (d a token) is not kept by the router. The
    # attention norm before a fused QKV product and the dense block's norm are fused by Transformer Engine.
    g = decoder()
    index, plain = times(g, recompute="none")
    _, norm = times(g, ("layernorm",))
    assert plain.activations.sum() - norm.activations.sum() == TOKENS * D * BPE
    assert module_plan(g, ("layernorm",)).discarded == {"layers.1.ffn_norm"}


def test_mla_up_proj_drops_the_cores_q_k_v():
    # Heads h = 4, each query and key (nope + rope) = 16 + 8 wide, each value 16: the unfused core keeps q and k
    # (scores) and v (context); recomputing the up projections keeps none of them, in both blocks.
    mla = MLA(q_rank=32, kv_rank=24, nope=16, rope=8, v_dim=16)
    g = decoder(mla)
    assert module_plan(g, ("mla_up_proj",)).discarded == {
        f"layers.{i}.attn.{n}" for i in (0, 1) for n in ("q_b", "k_b", "v_b", "k_rope_heads", "k")}
    index, plain = times(g, recompute="none")
    _, up = times(g, ("mla_up_proj",))
    assert plain.activations.sum() - up.activations.sum() == 2 * TOKENS * 4 * (2 * (16 + 8) + 16) * BPE


def test_refusals_name_the_fix(capsys):
    g = decoder()
    with pytest.raises(ConfigurationError, match="multi-latent attention"):
        module_plan(g, ("mla_up_proj",))
    with pytest.raises(ConfigurationError, match="unknown recompute module"):
        Parallelism(recompute="selective", recompute_modules=("attention",))
    with pytest.raises(ConfigurationError, match="selective"):
        Parallelism(recompute="full", recompute_modules=("mlp",))
    dense = batch_builder("llama3-8b", seq=128)(1)
    with pytest.raises(ConfigurationError, match="no experts"):
        module_plan(dense, ("moe",))
    assert main(["evaluate", "llama3-8b", "--devices", "8", "--cluster", "dgx-h100", "--seq", "128",
                 "--global-batch", "8", "--recompute-modules", "mla_up_proj"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mla_up_proj" in err[0] and "Traceback" not in err[0]


def test_default_selective_is_megatrons_core_attn():
    g = decoder()
    _, default = times(g, None)
    _, named = times(g, ("core_attn",))
    assert np.array_equal(default.activations, named.activations)
    assert np.array_equal(default.recompute_s, named.recompute_s)


def test_a_hugging_face_mixture_of_experts_is_planned_in_3d_by_default(tmp_path, capsys):
    import json

    config = dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], hidden_size=256,
                  num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=128, decoder_sparse_step=1, mlp_only_layers=[],
                  vocab_size=1024, tie_word_embeddings=False, max_position_embeddings=4096)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["solve", str(path), "--devices", "8", "--cluster", "dgx-h100", "--seq", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["experts"]["ep"] * out["experts"]["etp"] * out["experts"]["edp"] == out["tensor_parallel"] * out[
        "context_parallel"] * out["data_parallel"]


def test_a_plan_with_modules_exports_to_megatron_and_reads_back():
    from pase.frameworks.megatron import read_script
    from pase.io.export import export_plan, training_from_dict
    from pase.model.training import evaluate_training

    g = decoder()
    par = Parallelism(data=8, global_batch=8 * B, microbatch_size=B, recompute="selective",
                      recompute_modules=("moe_act", "layernorm"), ep=8, etp=1)
    data = evaluate_training(g, cluster(), par).to_dict()
    assert data["recompute_modules"] == ["moe_act", "layernorm"]
    assert training_from_dict(data).parallelism.recompute_modules == ("moe_act", "layernorm")
    script = export_plan(data, "megatron")
    words = " ".join(w for w in script.split() if w != "\\")
    assert "--recompute-granularity selective --recompute-modules moe_act layernorm --" in words
    assert read_script(script)[0].parallelism.recompute_modules == ("moe_act", "layernorm")
    assert "model.recompute_modules=[moe_act,layernorm]" in export_plan(data, "megatron-bridge")
