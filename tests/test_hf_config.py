"""Graphs from Hugging Face config.json files against transformers' own modules and the published counts.

References, independent of pase's builders:

* parameters: the torch module transformers instantiates from the same config (random weights,
  tiny sizes), ``sum(p.numel() for p in model.parameters())`` (a tied table counted once), of
  those the loss reaches (a gradient after backward: transformers 5 keeps an unused copy of
  BERT's output bias when the output table is untied);
* training FLOPs: torch's ``FlopCounterMode`` over one forward and backward of that module with the
  eager ("math") attention, which multiplies every query-key pair as pase's graphs count them;
* published sizes: Meta's Llama 3 8B and 70B config.json files (8.03B and 70.6B parameters, "The
  Llama 3 Herd of Models", Table 3), Mistral 7B v0.1's (7.24B, the model card), Mixtral 8x7B v0.1's
  (46.7B, "Mixtral of Experts", Jiang et al. 2024) and DeepSeekMoE 16B base's (16.4B, Dai et al. 2024;
  a remote-code model transformers has no class for).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from pase import from_hf_config
from pase.cli import main
from pase.errors import FormatError, GraphError
from pase.io.hf_config import FAMILIES, hf_batch_builder, is_hf_config
from pase.models import sample
from pase.ops import training_flops

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

DATA = Path(__file__).parent / "data" / "hf"
TINY_LLAMA = DATA / "tiny-llama" / "config.json"
LLAMA3_8B_FILE = DATA / "llama3-8b" / "config.json"

VOCAB = 512
# Tiny sizes: 2 layers of width 256, so that a module instantiates and runs in a fraction of a second;
# token ids stay inside the vocabulary.
DECODER = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=8, intermediate_size=688,
               vocab_size=VOCAB, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
TINY = {
    "llama": dict(DECODER, model_type="llama", architectures=["LlamaForCausalLM"], num_key_value_heads=2),
    "llama-tied-biases": dict(DECODER, model_type="llama", num_key_value_heads=4, tie_word_embeddings=True,
                              attention_bias=True, mlp_bias=True),
    # Mistral NeMo's shape: a head width (48) other than hidden / heads (32); key/value heads left to
    # Mistral's default (8).
    "mistral-head-dim": dict(DECODER, model_type="mistral", head_dim=48),
    "qwen2-tied": dict(DECODER, model_type="qwen2", num_key_value_heads=2, tie_word_embeddings=True),
    "qwen2": dict(DECODER, model_type="qwen2", num_key_value_heads=8),
    "gpt2": dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_embd=256, n_layer=2, n_head=4,
                 vocab_size=VOCAB, n_positions=128, bos_token_id=1, eos_token_id=2),
    "gpt2-inner": dict(model_type="gpt2", n_embd=256, n_layer=2, n_head=8, n_inner=640, vocab_size=VOCAB,
                       n_positions=96, bos_token_id=1, eos_token_id=2),
    "gpt_neox": dict(DECODER, model_type="gpt_neox", rotary_pct=0.25),
    "gpt_neox-serial-unbiased-tied": dict(DECODER, model_type="gpt_neox", use_parallel_residual=False,
                                          attention_bias=False, tie_word_embeddings=True),
    "bert": dict(DECODER, model_type="bert", architectures=["BertForMaskedLM"], type_vocab_size=2),
    "bert-untied": dict(DECODER, model_type="bert", type_vocab_size=3, tie_word_embeddings=False),
}

LLAMA3_8B = json.loads(LLAMA3_8B_FILE.read_text())
LLAMA3_70B = dict(LLAMA3_8B, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                  num_hidden_layers=80)
MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000,
}
# Mixture-of-experts configs, the released files' keys and values.
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1e6, "router_aux_loss_coef": 0.02, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0",
    "use_cache": True, "vocab_size": 32000,
}
DEEPSEEK_MOE_16B = {
    "architectures": ["DeepseekForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944, "max_position_embeddings": 4096,
    "model_type": "deepseek", "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_routed_experts": 64,
    "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6,
    "num_hidden_layers": 28, "num_key_value_heads": 16, "pretraining_tp": 1, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 10000, "scoring_func": "softmax", "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.36.0", "use_cache": True, "vocab_size": 102400,
}
TINY_MIXTRAL = dict(DECODER, model_type="mixtral", architectures=["MixtralForCausalLM"], num_key_value_heads=2,
                    num_local_experts=4, num_experts_per_tok=2)


def torch_model(config: dict):
    """transformers' training module for ``config``: the causal LM, or BERT's masked LM; eager attention."""
    hf = transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    torch.manual_seed(0)
    if config["model_type"] == "bert":
        hf._attn_implementation = "eager"
        return transformers.BertForMaskedLM(hf)
    return transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="eager")


def torch_training_flops(model, batch: int, seq: int) -> int:
    ids = torch.randint(0, VOCAB, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("key", sorted(TINY))
def test_parameters_and_training_flops_match_the_transformers_module(key):
    config = TINY[key]
    model = torch_model(config)
    batch, seq = 2, 64
    graph = from_hf_config(config, batch=batch, seq=seq)
    reference = torch_training_flops(model, batch, seq)
    assert graph.parameter_count == sum(p.numel() for p in model.parameters() if p.grad is not None)
    assert sum(training_flops(layer) for layer in graph) == pytest.approx(reference, rel=0.02)


@pytest.mark.parametrize("config, published", [(LLAMA3_8B, 8.03e9), (LLAMA3_70B, 70.6e9), (MISTRAL_7B, 7.24e9)],
                         ids=["llama3-8b", "llama3-70b", "mistral-7b"])
def test_full_size_configs_have_the_published_parameter_counts(config, published):
    assert from_hf_config(config, batch=1, seq=128).parameter_count == pytest.approx(published, rel=1e-3)


def test_llama3_8b_config_builds_the_llama3_8b_sample():
    graph, reference = from_hf_config(LLAMA3_8B_FILE, batch=4, seq=8192), sample("llama3-8b", batch=4)
    assert [(l.name, l.op, l.sizes) for l in graph] == [(l.name, l.op, l.sizes) for l in reference]
    assert graph.parameter_count == reference.parameter_count


def test_defaults_and_sources():
    """A path, the file's bytes and the parsed dict give one graph; seq defaults to the position count."""
    config = json.loads(TINY_LLAMA.read_text())
    graphs = [from_hf_config(s, batch=3) for s in (TINY_LLAMA, TINY_LLAMA.read_bytes(), config)]
    assert len({(tuple((l.name, l.sizes) for l in g), g.parameter_count) for g in graphs}) == 1
    assert graphs[0].layer("embedding").size_of["s"] == config["max_position_embeddings"]
    assert graphs[0].layer("embedding").size_of["b"] == 3
    # Llama 3's 8,192 positions, a long-context config's 131,072 capped at 8,192.
    assert from_hf_config(dict(LLAMA3_8B, max_position_embeddings=131072), batch=1).layer("embedding").size_of["s"] \
        == 8192
    assert from_hf_config(dict(config, _name_or_path="org/tiny"), batch=1).name == "org/tiny"


def test_model_type_may_be_left_to_the_architecture():
    config = {k: v for k, v in TINY["gpt2"].items() if k != "model_type"}
    assert from_hf_config(config, batch=1, seq=8).parameter_count == \
        sum(p.numel() for p in torch_model(TINY["gpt2"]).parameters())


def test_batch_builder_pickles_and_rebuilds_at_any_batch():
    build = pickle.loads(pickle.dumps(hf_batch_builder(TINY_LLAMA, seq=32)))
    for batch in (1, 6):
        graph = build(batch)
        assert graph.layer("layers.0.attn.q").size_of["b"] == batch and graph.layer("embedding").size_of["s"] == 32


def test_every_family_has_an_entry():
    assert {"llama", "mistral", "qwen2", "gpt2", "gpt_neox", "bert", "mixtral", "deepseek"} <= set(FAMILIES)


# -- mixtures of experts ------------------------------------------------------------------


@pytest.mark.parametrize("config", [
    TINY_MIXTRAL,
    # Mistral's default 8 key/value heads, a head width other than hidden / heads, a tied table, top-1.
    dict({k: v for k, v in TINY_MIXTRAL.items() if k != "num_key_value_heads"}, head_dim=48, tie_word_embeddings=True,
         num_experts_per_tok=1),
], ids=["mixtral", "mixtral-head-dim-tied-top1"])
def test_mixtral_parameters_match_the_transformers_module(config):
    model = torch_model(config)
    assert isinstance(model, transformers.MixtralForCausalLM)
    graph = from_hf_config(config, batch=2, seq=64)
    assert graph.parameter_count == sum(p.numel() for p in model.parameters())
    experts = graph.layer("layers.1.moe.experts")
    assert experts.size_of["x"] == 4 and experts.size_of["f"] == config["intermediate_size"]


def test_mixtral_8x7b_config_has_the_published_count_and_builds_the_sample():
    graph = from_hf_config(MIXTRAL_8X7B, batch=2, seq=256)
    assert graph.parameter_count == pytest.approx(46.7e9, rel=0.002)
    assert graph.parameter_count == 46_702_792_704  # the released checkpoint's num_parameters()
    reference = sample("mixtral-8x7b", batch=2, seq=256)
    assert [(l.name, l.op, l.sizes) for l in graph] == [(l.name, l.op, l.sizes) for l in reference]
    # The class name alone places the config.
    untyped = {k: v for k, v in MIXTRAL_8X7B.items() if k != "model_type"}
    assert from_hf_config(untyped, batch=1, seq=64).parameter_count == graph.parameter_count


def test_deepseek_moe_16b_config_has_the_published_count_and_builds_the_sample():
    # Not a transformers class (remote code): the published count is the reference.
    assert "deepseek" not in transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES
    graph = from_hf_config(DEEPSEEK_MOE_16B, batch=2, seq=256)
    assert graph.parameter_count == pytest.approx(16.4e9, rel=0.002)
    reference = sample("deepseek-moe-16b", batch=2, seq=256)
    assert [(l.name, l.op, l.sizes) for l in graph] == [(l.name, l.op, l.sizes) for l in reference]
    assert graph.layer("layers.0.ffn.down").size_of["e"] == 10944
    assert graph.layer("layers.1.shared.down").size_of["e"] == 2 * 1408
    # No leading dense block and no shared experts: every block routed, nothing else beside the experts.
    plain = from_hf_config(dict(DEEPSEEK_MOE_16B, first_k_dense_replace=0, n_shared_experts=None), batch=1, seq=64)
    names = {layer.name for layer in plain}
    assert "layers.0.moe.experts" in names and not any(".shared." in n or ".ffn." in n for n in names)
    assert graph.parameter_count - plain.parameter_count == \
        3 * 2048 * 10944 - (64 * 2048 + 3 * 64 * 2048 * 1408) + 27 * 3 * 2048 * 2 * 1408


@pytest.mark.parametrize("config, error, words", [
    (dict(TINY_MIXTRAL, num_experts_per_tok=5), GraphError, "num_experts_per_tok 5 is more than num_local_experts 4"),
    ({k: v for k, v in TINY_MIXTRAL.items() if k != "num_local_experts"}, FormatError, "no 'num_local_experts'"),
    (dict(TINY_MIXTRAL, num_key_value_heads=3), GraphError, "num_key_value_heads 3 does not divide"),
    (dict(TINY_MIXTRAL, architectures=["MixtralForSequenceClassification"]), FormatError, "MixtralForCausalLM"),
    (dict(DEEPSEEK_MOE_16B, moe_layer_freq=2), FormatError, "moe_layer_freq 2"),
    (dict(DEEPSEEK_MOE_16B, attention_bias=True), FormatError, "attention_bias True"),
    (dict(DEEPSEEK_MOE_16B, first_k_dense_replace=29), FormatError, "'first_k_dense_replace' must be an integer"),
    (dict(DEEPSEEK_MOE_16B, n_shared_experts=-1), FormatError, "'n_shared_experts' must be an integer of at least 0"),
], ids=["top-k", "no-experts", "kv-heads", "other-head", "interleaved", "attention-bias", "dense-layers",
        "shared-experts"])
def test_bad_mixture_of_experts_configs_are_refused(config, error, words):
    with pytest.raises(error, match=words):
        from_hf_config(config, batch=1, seq=8)


LLAMA = TINY["llama"]


@pytest.mark.parametrize("source, error, words", [
    (b'{"model_type": "llama", "hidden', FormatError, "not valid JSON"),
    (b"[1, 2]", FormatError, "one JSON object"),
    (b"[" * 100_000, FormatError, "not valid JSON"),
    ({"model_type": "t5"}, FormatError, "model_type 't5' is not a family"),
    ({"hidden_size": 64}, FormatError, "no 'model_type'"),
    ({k: v for k, v in LLAMA.items() if k != "intermediate_size"}, FormatError, "no 'intermediate_size'"),
    (dict(LLAMA, hidden_size="256"), FormatError, "'hidden_size' must be a positive integer"),
    (dict(LLAMA, num_hidden_layers=0), FormatError, "'num_hidden_layers' must be a positive integer"),
    (dict(LLAMA, num_hidden_layers=10**6), FormatError, "at most 20,000"),
    (dict(LLAMA, hidden_size=2**40), FormatError, "'hidden_size' must be a positive integer of at most"),
    (dict(LLAMA, tie_word_embeddings="yes"), FormatError, "'tie_word_embeddings' must be true or false"),
    (dict(LLAMA, hidden_size=250), GraphError, "num_attention_heads 8 does not divide hidden_size 250"),
    (dict(LLAMA, num_key_value_heads=3), GraphError, "num_key_value_heads 3 does not divide num_attention_heads 8"),
    (dict(LLAMA, architectures=["LlamaForSequenceClassification"]), FormatError, "LlamaForCausalLM"),
    (dict(LLAMA, architectures="LlamaForCausalLM"), FormatError, "list of class names"),
    (dict(TINY["bert"], position_embedding_type="relative_key"), FormatError, "position_embedding_type"),
    (dict(TINY["gpt2"], n_head=5), GraphError, "n_head 5 does not divide n_embd 256"),
], ids=["truncated", "not-an-object", "deep", "unknown-type", "no-type", "missing-key", "string-size", "zero-size",
        "huge-layers", "huge-width", "bad-flag", "heads", "kv-heads", "other-head", "architectures-type",
        "relative-positions", "gpt2-heads"])
def test_bad_configs_raise_pase_errors_naming_the_problem(source, error, words):
    with pytest.raises(error, match=words):
        from_hf_config(source, batch=1, seq=8)


def test_a_sequence_longer_than_a_learned_position_table_is_refused():
    with pytest.raises(GraphError, match="at most 128"):
        from_hf_config(TINY["gpt2"], batch=1, seq=256)
    with pytest.raises(GraphError, match="at most 128"):
        from_hf_config(TINY["bert"], batch=1, seq=129)


def test_only_hugging_face_json_files_are_taken_for_configs(tmp_path):
    pase_graph = Path(__file__).parents[1] / "docs" / "example-graph.json"
    mislabelled = tmp_path / "graph.json"
    mislabelled.write_text(json.dumps({"format": "pase-graph", "model_type": "llama"}))
    assert is_hf_config(TINY_LLAMA) and not is_hf_config(pase_graph) and not is_hf_config(mislabelled)
    assert not is_hf_config(tmp_path / "absent.json")


# -- the command line ---------------------------------------------------------------------


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_show_builds_the_config_at_batch_and_seq(capsys):
    code, out, _ = run(capsys, "show", TINY_LLAMA, "-p", "4", "--batch", "8", "--seq", "64")
    assert code == 0
    params = sum(p.numel() for p in torch_model(json.loads(TINY_LLAMA.read_text())).parameters())
    assert f"{params / 1e6:.1f}M parameters" in out
    assert "b=8 s=64" in out


def tiny_llama_flops(batch: int, seq: int) -> int:
    return torch_training_flops(torch_model(json.loads(TINY_LLAMA.read_text())), batch, seq)


def test_cli_solve_plans_a_config_in_3d_by_default_and_per_layer_on_request(capsys):
    code, out, _ = run(capsys, "solve", TINY_LLAMA, "-p", "8", "--seq", "32", "--cluster", "dgx-h100", "--peak-rates", "--json")
    assert code == 0
    plan = json.loads(out)
    sizes = ("tensor_parallel", "pipeline_parallel", "data_parallel", "context_parallel")
    assert plan["devices"] == 8 and plan[sizes[0]] * plan[sizes[1]] * plan[sizes[2]] * plan[sizes[3]] == 8
    # The default global batch of 512 sequences of the --seq length: torch's count of 2 sequences, 256 times.
    assert plan["pipeline"]["global_batch"] == 512
    assert plan["model_flops_per_step"] == pytest.approx(256 * tiny_llama_flops(2, 32), rel=0.02)
    code, out, _ = run(capsys, "solve", TINY_LLAMA, "-p", "4", "--batch", "8", "--seq", "32", "--search", "layers",
                       "--json")
    assert code == 0
    layers = {layer["name"]: layer for layer in json.loads(out)["layers"]}
    assert layers["layers.0.attn.q"]["sizes"][:2] == [8, 32]


def test_cli_evaluate_costs_a_3d_configuration_of_a_config(capsys):
    code, out, _ = run(capsys, "evaluate", TINY_LLAMA, "-p", "8", "--tp", "2", "--pp", "2", "--seq", "32",
                       "--global-batch", "64", "--cluster", "dgx-h100", "--peak-rates", "--json")
    assert code == 0
    plan = json.loads(out)
    assert (plan["tensor_parallel"], plan["pipeline_parallel"], plan["data_parallel"]) == (2, 2, 2)
    assert plan["model_flops_per_step"] == pytest.approx(32 * tiny_llama_flops(2, 32), rel=0.02)


@pytest.mark.parametrize("config, words", [
    (dict(LLAMA, num_key_value_heads=3), "num_key_value_heads 3 does not divide"),
    (dict(TINY_MIXTRAL, num_experts_per_tok=5), "num_experts_per_tok 5 is more than num_local_experts 4"),
    ({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}, "not a family pase builds"),
])
def test_cli_prints_config_errors_in_one_line(capsys, tmp_path, config, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    for argv in (("show", path, "-p", "4"), ("solve", path, "-p", "4")):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == ""
        assert err.startswith("pase: error: config.json: ") and words in err and err.count("\n") == 1
        assert "Traceback" not in err



def test_cli_evaluate_recosts_a_saved_per_layer_plan_of_a_config(capsys, tmp_path):
    code, out, _ = run(capsys, "solve", TINY_LLAMA, "-p", "4", "--batch", "4", "--search", "layers", "--json")
    assert code == 0
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    code, again, _ = run(capsys, "evaluate", TINY_LLAMA, "-p", "4", "--batch", "4", "--plan", plan, "--json")
    assert code == 0
    assert json.loads(again)["step_time_s"] == pytest.approx(json.loads(out)["step_time_s"], rel=1e-9)


def test_cli_sweeps_a_config_across_batch_sizes(capsys):
    code, out, _ = run(capsys, "sweep", TINY_LLAMA, "-p", "2", "4", "--batches", "4", "8", "--seq", "32", "--json")
    assert code == 0
    records = json.loads(out)
    assert {(r["batch"], r["devices"]) for r in records} == {(b, p) for b in (4, 8) for p in (2, 4)}


def test_cli_plans_a_mixtral_config_with_expert_parallelism_per_layer(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_MIXTRAL))
    # --search layers plans a mixture of experts per layer, where the experts are split.
    code, out, _ = run(capsys, "solve", path, "-p", "4", "--batch", "8", "--seq", "64", "--search", "layers",
                       "--cluster", "dgx-h100", "--peak-rates", "--json")
    assert code == 0
    layers = {layer["name"]: layer for layer in json.loads(out)["layers"]}
    experts = layers["layers.0.moe.experts"]
    assert experts["config"][experts["dims"].index("x")] > 1
