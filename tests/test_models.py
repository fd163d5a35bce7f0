"""The sample graphs: they build, validate, and match the published networks.

Parameter counts are checked against published figures, and for the
Transformer and GPT against closed forms written here independently of the
builders. Training FLOPs of the CNNs are checked against 3 x (forward) x 2
FLOPs per published multiply-add, which catches wrong convolution shapes.
"""

from __future__ import annotations

import pytest

from pase.ir.configs import ConfigOptions, layer_configs
from pase.errors import GraphError
from pase.ops import training_flops
from pase.models import SAMPLES, sample
from pase.models import alexnet, densenet121, gpt, inception3, resnet101, rnnlm, transformer, transformer_large

REQUIRED = {"alexnet", "inception3", "resnet101", "rnnlm", "transformer", "densenet121", "gpt"}


@pytest.fixture(scope="module")
def graphs():
    """Every sample with its default sizes, built once."""
    return {name: builder() for name, builder in SAMPLES.items()}


def test_registry_names():
    assert REQUIRED <= set(SAMPLES)
    megatron = {"megatron-1.7b", "megatron-3.6b", "megatron-7.5b", "megatron-18b", "megatron-39b", "megatron-76b",
                "megatron-146b", "megatron-310b", "megatron-530b", "megatron-1t", "megatron-22b", "gpt3-175b"}
    llama = {"llama3-8b", "llama3-70b", "llama3-405b"}  # tests/test_llama_samples.py
    moe = {"mixtral-8x7b", "deepseek-moe-16b",  # tests/test_moe.py
           "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b"}  # tests/test_experts.py
    today = {"gpt3-5b", "gpt3-20b", "llama2-7b", "llama2-13b", "llama2-70b", "nemotron4-340b"}  # test_today_samples.py
    assert set(SAMPLES) - REQUIRED == {"transformer_large"} | megatron | llama | moe | today  # test_megatron_samples.py


def test_unknown_sample_lists_known_names():
    with pytest.raises(GraphError) as err:
        sample("lenet")
    assert "lenet" in str(err.value)
    for name in SAMPLES:
        assert name in str(err.value)


def test_unknown_parameter_is_a_graph_error():
    with pytest.raises(GraphError, match="alexnet"):
        sample("alexnet", depth=3)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_batch_is_a_graph_error(bad):
    with pytest.raises(GraphError, match="batch"):
        sample("resnet101", batch=bad)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_builds_and_validates(graphs, name):
    g = graphs[name]
    g.validate()  # acyclic, connected, shapes agree along every edge
    assert g.name == name
    assert SAMPLES[name].__doc__ and "arameters" in SAMPLES[name].__doc__


def test_sample_by_name_passes_parameters():
    g = sample("transformer", batch=8, seq=32, encoder_layers=1, decoder_layers=1)
    assert g.layer("encoder.embedding").size_of == {"b": 8, "s": 32, "d": 512, "v": 50000}


# -- parameter counts ---------------------------------------------------------------------


@pytest.mark.parametrize("name, published", [
    ("alexnet", 61.1e6),
    ("resnet101", 44.5e6),
    ("inception3", 23.8e6),
    ("densenet121", 8.0e6),
])
def test_cnn_parameter_counts_match_published(graphs, name, published):
    assert graphs[name].parameter_count == pytest.approx(published, rel=0.02)


def test_cnn_parameter_counts_match_torchvision_exactly(graphs):
    # torchvision's counts (trainable parameters; BatchNorm scale and shift, no running stats).
    assert graphs["alexnet"].parameter_count == 61_100_840
    assert graphs["resnet101"].parameter_count == 44_549_160
    assert graphs["inception3"].parameter_count == 23_834_568
    assert graphs["densenet121"].parameter_count == 7_978_856


def test_classes_change_only_the_classifier():
    base, ten = alexnet(classes=1000).parameter_count, alexnet(classes=10).parameter_count
    assert base - ten == 990 * (4096 + 1)


def rnnlm_params(vocab, hidden, layers):
    embedding = vocab * hidden
    lstm = layers * (4 * hidden * hidden + 4 * hidden * hidden + 4 * hidden)  # input, recurrent, bias
    projection = hidden * vocab + vocab
    return embedding + lstm + projection


def transformer_params(vocab, d, ff, n_enc, n_dec):
    attention = 4 * (d * d + d)          # q, k, v, out projections with biases
    ffn = d * ff + ff + ff * d + d       # two linear layers with biases
    layer_norm = 2 * d
    encoder = attention + ffn + 2 * layer_norm
    decoder = 2 * attention + ffn + 3 * layer_norm
    embeddings = 2 * vocab * d           # source and target, untied
    projection = vocab * d               # untied, no bias
    return embeddings + n_enc * encoder + n_dec * decoder + projection


def gpt_params(vocab, seq, d, layers, ff):
    block = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * ff + ff) + (ff * d + d)
    return vocab * d + seq * d + layers * block + 2 * d + vocab * d


def test_rnnlm_parameter_count():
    assert rnnlm().parameter_count == rnnlm_params(100000, 2048, 2)
    assert rnnlm(vocab=1000, hidden=64, layers=3).parameter_count == rnnlm_params(1000, 64, 3)


@pytest.mark.parametrize("kwargs", [
    {},
    dict(d_model=256, heads=4, d_ff=1000, vocab=1234, encoder_layers=2, decoder_layers=3, seq=16),
])
def test_transformer_parameter_count_closed_form(kwargs):
    p = dict(d_model=512, d_ff=2048, vocab=50000, encoder_layers=6, decoder_layers=6) | kwargs
    expected = transformer_params(p["vocab"], p["d_model"], p["d_ff"], p["encoder_layers"], p["decoder_layers"])
    assert transformer(**kwargs).parameter_count == expected


def test_transformer_large_parameter_count_closed_form():
    g = transformer_large()
    assert g.name == "transformer_large"
    assert g.layer("encoder.0.ff1").size_of == {"b": 64, "s": 256, "d": 1024, "e": 4096}
    assert g.layer("encoder.0.self_attn.scores").size_of["h"] == 16
    assert g.parameter_count == transformer_params(50000, 1024, 4096, 6, 6)


def test_gpt_parameter_count_closed_form():
    assert gpt().parameter_count == gpt_params(50257, 1024, 1024, 24, 4096)
    # GPT-2 medium's published 354,823,168 (355M) with the projection tied to the embedding.
    assert gpt().parameter_count - 50257 * 1024 == 354_823_168
    g = gpt(batch=2, seq=64, d_model=96, layers=3, heads=3, vocab=777, d_ff=200)
    assert g.parameter_count == gpt_params(777, 64, 96, 3, 200)


# -- structure --------------------------------------------------------------------------


@pytest.mark.parametrize("name, low, high", [
    ("alexnet", 10, 20),
    ("inception3", 200, 240),
    ("resnet101", 200, 320),
    ("rnnlm", 4, 4),
    ("transformer", 150, 300),
    ("transformer_large", 150, 300),
    ("densenet121", 250, 400),
    ("gpt", 250, 400),
])
def test_layer_counts(graphs, name, low, high):
    assert low <= len(graphs[name]) <= high


def test_op_mix(graphs):
    def ops(name):
        out = {}
        for layer in graphs[name]:
            out[layer.op] = out.get(layer.op, 0) + 1
        return out

    assert ops("alexnet") == {"Conv2D": 5, "Pooling": 3, "Reshape": 1, "FullyConnected": 3, "SoftmaxCrossEntropy": 1}
    assert ops("inception3")["Conv2D"] == ops("inception3")["BatchNorm"] == 94
    assert ops("resnet101")["Conv2D"] == 104 and ops("resnet101")["Elementwise"] == 33
    assert ops("densenet121")["Conv2D"] == 120
    assert [layer.op for layer in graphs["rnnlm"]] == ["Embedding", "LSTM", "Einsum", "SoftmaxCrossEntropy"]


def test_alexnet_fc_layers_use_paper_letters(graphs):
    g = graphs["alexnet"]
    assert g.layer("fc6").size_of == {"b": 128, "n": 4096, "c": 9216}
    assert g.layer("conv1").dims == ("b", "c", "h", "w", "n", "r", "s")
    assert g.layer("softmax").size_of == {"b": 128, "n": 1000}
    assert [g.layer(f"fc{i}").param_dict["pointwise"] for i in (6, 7, 8)] == [1, 1, 0]


def test_rnnlm_letters(graphs):
    g = graphs["rnnlm"]
    assert g.layer("embedding").size_of == {"b": 64, "s": 256, "d": 2048, "v": 100000}
    assert g.layer("lstm").size_of == {"l": 2, "b": 64, "s": 256, "d": 2048, "e": 2048}
    assert g.layer("softmax").size_of == {"b": 64, "s": 256, "v": 100000}


def test_transformer_cross_attention_reads_encoder_output(graphs):
    g = graphs["transformer"]
    memory = "encoder.5.norm2"
    readers = sorted(e.dst for e in g.edges if e.src == memory)
    assert readers == sorted(f"decoder.{i}.cross_attn.{t}" for i in range(6) for t in "kv")
    scores = g.layer("decoder.0.cross_attn.scores")
    assert scores.dims == ("b", "s", "h", "c", "k")
    assert scores.size_of == {"b": 64, "s": 256, "h": 8, "c": 64, "k": 256}
    assert g.layer("decoder.0.cross_attn.softmax").param_dict["axis"] == "k"
    assert g.layer("encoder.0.ff1").dims == ("b", "s", "d", "e")


def test_gpt_is_pre_layer_norm(graphs):
    g = graphs["gpt"]
    assert sorted(e.dst for e in g.edges if e.src == "h.0.ln1") == ["h.0.attn.k", "h.0.attn.q", "h.0.attn.v"]
    # The residual stream bypasses the norm: the block input feeds both ln1 and the add.
    assert sorted(e.dst for e in g.edges if e.src == "embed") == ["h.0.add1", "h.0.ln1"]
    assert [e.src for e in g.in_edges("projection")] == ["ln_f"]


def test_densenet_connectivity_is_dense(graphs):
    g = graphs["densenet121"]
    final = g.in_edges("denseblock4.concat")
    assert len(final) == 17  # block input + 16 layers
    # The first layer's output of a block feeds every later concatenation of that block.
    readers = {e.dst for e in g.edges if e.src == "denseblock3.denselayer1.conv2"}
    assert readers == {f"denseblock3.denselayer{i}.concat" for i in range(2, 25)} | {"denseblock3.concat"}
    assert g.layer("classifier").size_of == {"b": 128, "n": 1000, "c": 1024}


def test_inception_grid_sizes(graphs):
    g = graphs["inception3"]
    assert g.layer("Mixed_5b.concat").outputs[0].shape == (128, 256, 35, 35)
    assert g.layer("Mixed_6e.concat").outputs[0].shape == (128, 768, 17, 17)
    assert g.layer("Mixed_7c.concat").outputs[0].shape == (128, 2048, 8, 8)
    assert g.layer("Mixed_6b.branch7x7_2").param_dict["pad"] == [0, 3]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_batch_parameter_sets_b(name):
    small = {"gpt": dict(seq=32, layers=2), "transformer": dict(seq=32), "transformer_large": dict(seq=32),
             "rnnlm": dict(seq=32)}.get(name, {})
    g = SAMPLES[name](batch=12, **small)
    for layer in g:
        assert layer.size_of.get("b", 12) == 12, layer.name
        assert "b" in layer.dims, layer.name
    first = g.layers[0]
    assert first.inputs[0].shape[0] == 12


# -- FLOPs ------------------------------------------------------------------------------


@pytest.mark.parametrize("name, forward_macs", [
    ("alexnet", 0.714e9),
    ("resnet101", 7.80e9),
    ("inception3", 5.71e9),
    ("densenet121", 2.87e9),
])
def test_cnn_training_flops_match_published(name, forward_macs):
    batch = 4
    g = SAMPLES[name](batch=batch)
    flops = sum(training_flops(layer) for layer in g) / batch
    # forward + two backward products, 2 FLOPs per multiply-add
    assert flops == pytest.approx(3 * 2 * forward_macs, rel=0.12)


def test_transformer_training_flops_near_6_n_tokens():
    # Dense FLOPs of a decoder are about 6 x parameters x tokens plus attention's 12 L s d per token.
    g = gpt(batch=2, seq=128, d_model=256, layers=4, heads=4, vocab=1000)
    tokens = 2 * 128
    params = g.parameter_count - 128 * 256 - 1000 * 256  # lookups do no matrix work
    attention = 4 * 2 * 2 * 128 * 256  # per layer per token: scores + context, 2 FLOPs/MAC forward, x3 training
    expected = tokens * (6 * params + 3 * attention)
    total = sum(training_flops(layer) for layer in g)
    assert total == pytest.approx(expected, rel=0.1)


# -- graph size for the search ------------------------------------------------------------


def _distinct_layers(g):
    seen = {}
    for layer in g:
        seen.setdefault((layer.op, layer.dims, layer.sizes, layer.split_base), layer)
    return seen.values()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_configuration_counts_stay_small(graphs, name):
    most = max(len(layer_configs(layer, 64, ConfigOptions())) for layer in _distinct_layers(graphs[name]))
    assert 1 < most <= 1000
