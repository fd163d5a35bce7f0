"""Issue 14's first acceptance line, on real architectures exported here from torch.

GPT-2, BERT, Llama, Qwen2, Mistral, T5 and ViT (transformers models from tiny configurations:
2 layers, hidden 128, a small vocabulary, random weights, eager attention), an LSTM and an
``nn.TransformerEncoder``, a ResNet-style residual block (torchvision's ResNet-50 does not
import here) and the MobileNetV2-style and dilated models of ``test_import_fixes``. Each is
exported at batch 2 by ``from_torch``, with the default exporter and with ``dynamo=True``:

* its parameters are within 1% of ``sum(p.numel() for p in module.parameters())`` (tied
  weights counted once, as torch does), and equal to it but for the LSTM's second bias;
* its training FLOPs (:func:`pase.analysis.throughput.model_flops`: forward and backward of
  one step) are within 2% of torch's ``FlopCounterMode`` count of a forward and backward
  pass of the same module on the same inputs (math attention backend);
* imported at batch 6 from the batch-2 export (the ``--batch`` path), it keeps its
  parameters, its FLOPs are torch's at batch 6 (three times the batch-2 count), and
  ``pase.plan`` solves it on four devices.

The graph JSON round trip of an imported model keeps the importer's extra weights (folded
trainable tensors: position tables, class tokens), hence its parameters and costs.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import jsonschema
    import torch  # CI installs the test extra: run, never skip
    import transformers
else:
    jsonschema = pytest.importorskip("jsonschema")
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    transformers = pytest.importorskip("transformers")

from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from pase import evaluate, plan, preset
from pase.errors import FormatError, GraphError
from pase.analysis.throughput import model_flops
from pase.io.graph_json import dumps_graph, graph_to_dict, loads_graph
from pase.io.torch import from_torch
from test_import_fixes import DilatedNet, InvertedResidual, TinyViT

SCHEMA = Path(__file__).resolve().parents[1] / "docs" / "graph.schema.json"
EXPORT_BATCH, OTHER_BATCH, SEQ, VOCAB, HIDDEN = 2, 6, 16, 256, 128


def _parameters(module) -> int:
    return sum(p.numel() for p in module.parameters())  # a tied parameter once


def _torch_training_flops(module, x) -> int:
    """torch's count of one forward and backward pass, attention by the math backend."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        module(x).float().sum().backward()
    module.zero_grad()
    return counter.get_total_flops()


class Logits(nn.Module):
    """A transformers model called on one tensor, returning its first output as a tensor
    (T5 decodes the same ids it encodes)."""

    def __init__(self, model, key: str, encoder_decoder: bool = False):
        super().__init__()
        self.model, self.key, self.encoder_decoder = model, key, encoder_decoder

    def forward(self, x):
        if self.encoder_decoder:
            return self.model(input_ids=x, decoder_input_ids=x)[self.key]
        return self.model(x)[self.key]


def _hf(config_class, model_class, key="logits", encoder_decoder=False, **config):
    config = config_class(**config)
    config._attn_implementation = "eager"
    config.use_cache = False
    for field in ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop",
                  "dropout_rate", "attention_dropout"):
        if hasattr(config, field):
            setattr(config, field, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Logits(model_class(config), key, encoder_decoder)


def _decoder(config_class, model_class):
    return lambda: _hf(config_class, model_class, vocab_size=VOCAB, hidden_size=HIDDEN,
                       intermediate_size=4 * HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64)


def _ids(b):
    return torch.randint(0, VOCAB, (b, SEQ))


def _images(b):
    return torch.randn(b, 3, 32, 32)


class LSTMNet(nn.Module):
    """Token embedding, a 2-layer LSTM, a vocabulary projection."""

    def __init__(self, vocab=VOCAB, d=HIDDEN, layers=2):
        super().__init__()
        self.emb, self.lstm, self.head = nn.Embedding(vocab, d), nn.LSTM(d, d, layers, batch_first=True), nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.lstm(self.emb(x))[0])

    def unrolled(self, x):
        """The same computation, step by step in matrix products FlopCounterMode counts (it
        does not look inside torch's LSTM kernel)."""
        h = self.emb(x)
        for k in range(self.lstm.num_layers):
            w_ih, w_hh = getattr(self.lstm, f"weight_ih_l{k}"), getattr(self.lstm, f"weight_hh_l{k}")
            bias = getattr(self.lstm, f"bias_ih_l{k}") + getattr(self.lstm, f"bias_hh_l{k}")
            state = c = h.new_zeros(h.shape[0], w_hh.shape[1])
            steps = []
            for t in range(h.shape[1]):
                i, f, g, o = (h[:, t] @ w_ih.T + state @ w_hh.T + bias).chunk(4, -1)
                c = f.sigmoid() * c + i.sigmoid() * g.tanh()
                state = o.sigmoid() * c.tanh()
                steps.append(state)
            h = torch.stack(steps, 1)
        return self.head(h)


class Encoder(nn.Module):
    """``nn.TransformerEncoder`` (2 layers) and a classifier."""

    def __init__(self, d=HIDDEN):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        return self.head(self.encoder(x))


class ResidualNet(nn.Module):
    """ResNet's shape in small: a stem, a basic block with an identity shortcut, and a
    strided block whose shortcut is a 1x1 convolution; batch norm and ReLU throughout."""

    def __init__(self, c=64):
        super().__init__()

        def conv(i, o, k=3, stride=1):
            return [nn.Conv2d(i, o, k, stride, k // 2, bias=False), nn.BatchNorm2d(o)]

        self.stem = nn.Sequential(*conv(3, c), nn.ReLU())
        self.block = nn.Sequential(*conv(c, c), nn.ReLU(), *conv(c, c))
        self.down = nn.Sequential(*conv(c, 2 * c, 3, 2), nn.ReLU(), *conv(2 * c, 2 * c))
        self.shortcut = nn.Sequential(*conv(c, 2 * c, 1, 2))
        self.fc = nn.Linear(2 * c, 10)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        x = torch.relu(self.shortcut(x) + self.down(x))
        return self.fc(x.mean((2, 3)))


def _grouped_reference(block, x) -> int:
    """torch's count for a model with grouped convolutions: FlopCounterMode charges a
    grouped weight gradient as a dense one, so those take three times their forward count
    (see test_import_fixes)."""
    with FlopCounterMode(display=False) as counter:
        block(x).sum().backward()
    block.zero_grad()
    total = 0
    for name, counts in counter.get_flop_counts().items():
        module = block.get_submodule(name.split(".", 1)[1]) if "." in name else None
        if isinstance(module, nn.Conv2d):
            forward = sum(v for k, v in counts.items() if "backward" not in str(k))
            total += 3 * forward if module.groups > 1 else sum(counts.values())
    return total


T = transformers
ARCHITECTURES = {
    "gpt2": (lambda: _hf(T.GPT2Config, T.GPT2LMHeadModel, vocab_size=VOCAB, n_positions=64, n_embd=HIDDEN,
                         n_layer=2, n_head=4), _ids),
    "bert": (lambda: _hf(T.BertConfig, T.BertForMaskedLM, vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=4 * HIDDEN, max_position_embeddings=64), _ids),
    "llama": (_decoder(T.LlamaConfig, T.LlamaForCausalLM), _ids),
    "qwen2": (_decoder(T.Qwen2Config, T.Qwen2ForCausalLM), _ids),
    "mistral": (_decoder(T.MistralConfig, T.MistralForCausalLM), _ids),
    "t5": (lambda: _hf(T.T5Config, T.T5ForConditionalGeneration, encoder_decoder=True, vocab_size=VOCAB,
                       d_model=HIDDEN, d_kv=32, d_ff=4 * HIDDEN, num_layers=2, num_heads=4), _ids),
    "vit": (lambda: _hf(T.ViTConfig, T.ViTForImageClassification, image_size=32, patch_size=8, hidden_size=HIDDEN,
                        num_hidden_layers=2, num_attention_heads=4, intermediate_size=4 * HIDDEN, num_labels=10),
            _images),
    "lstm": (LSTMNet, _ids),
    "transformer-encoder": (Encoder, lambda b: torch.randn(b, SEQ, HIDDEN)),
    "resnet-block": (ResidualNet, lambda b: torch.randn(b, 3, 16, 16)),
    "mobilenetv2-block": (InvertedResidual, lambda b: torch.randn(b, 3, 16, 16)),
    "dilated": (DilatedNet, lambda b: torch.randn(b, 3, 24, 24)),
}


def _reference(name, module, x) -> int:
    if name == "lstm":
        with torch.no_grad():
            assert torch.allclose(module.unrolled(x), module(x), atol=1e-5)
        with FlopCounterMode(display=False) as counter:
            module.unrolled(x).sum().backward()
        module.zero_grad()
        return counter.get_total_flops()
    if name == "mobilenetv2-block":
        return _grouped_reference(module, x)
    return _torch_training_flops(module, x)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("dynamo", [False, True], ids=["default", "dynamo"])
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_architecture_imports_with_torch_counts_and_solves_at_another_batch(name, dynamo):
    make_module, make_input = ARCHITECTURES[name]
    module = make_module()
    module.train()
    x = make_input(EXPORT_BATCH)
    graph = from_torch(module, x, dynamo=dynamo)
    assert graph.parameter_count == pytest.approx(_parameters(module), rel=0.01)
    # The acceptance asks for 1%, but a folded mask counted as a parameter (0.7% of
    # Llama's) must not hide under it: exact, but for pase's LSTM, which holds one bias
    # vector per layer where torch holds two (b_ih and b_hh: 0.3% here).
    if not any(isinstance(m, nn.LSTM) for m in module.modules()):
        assert graph.parameter_count == _parameters(module)
    assert model_flops(graph) == pytest.approx(_reference(name, module, x), rel=0.02)

    other = from_torch(module, x, dynamo=dynamo, batch=OTHER_BATCH)
    assert other.parameter_count == graph.parameter_count
    assert model_flops(other) == pytest.approx(_reference(name, module, make_input(OTHER_BATCH)), rel=0.02)
    assert model_flops(other) == pytest.approx(model_flops(graph) * OTHER_BATCH / EXPORT_BATCH, rel=1e-6)
    solved = plan(other, preset("dgx-a100", devices=4, calibrated=False))
    assert set(solved.strategy) == {layer.name for layer in other}


# -- graph JSON keeps the importer's extra weights -------------------------------------------------


@pytest.mark.parametrize("model, make", [
    (TinyViT, _images),
    (lambda: ARCHITECTURES["gpt2"][0](), _ids),
], ids=["vit", "gpt2"])
def test_graph_json_round_trip_keeps_extra_weights_and_costs(model, make):
    module = model()
    graph = from_torch(module, make(EXPORT_BATCH))
    records = graph_to_dict(graph)["layers"]
    assert any(r.get("extra_weights") for r in records)  # a position table or a class token
    loaded = loads_graph(dumps_graph(graph))
    assert loaded.parameter_count == graph.parameter_count == _parameters(module)
    assert [layer.weights for layer in loaded] == [layer.weights for layer in graph]
    assert model_flops(loaded) == model_flops(graph)
    jsonschema.validate(json.loads(dumps_graph(graph)), json.loads(SCHEMA.read_text()))
    cluster = preset("dgx-a100", devices=4, calibrated=False)
    strategy = plan(graph, cluster).strategy
    before, after = evaluate(graph, cluster, strategy), evaluate(loaded, cluster, strategy)
    assert after.step_time_s == before.step_time_s
    assert after.memory.per_device_bytes == before.memory.per_device_bytes


@pytest.mark.parametrize("extra, error", [
    ("not a list", FormatError),
    ([{"name": "", "shape": [4], "axes": [None]}], FormatError),
    ([{"name": "pos", "shape": [0], "axes": [None]}], FormatError),
    ([{"name": "pos", "shape": [4, 2], "axes": [None]}], FormatError),
    ([{"name": "pos", "shape": [4], "axes": ["q"]}], FormatError),
    ([{"name": "pos", "shape": [4], "axes": [None], "tied": 3}], FormatError),
    # Tied to a parameter of another size: the graph's validation refuses it.
    ([{"name": "pos", "shape": [4], "axes": [None], "tied": "shared"}], GraphError),
])
def test_malformed_extra_weights_are_refused(extra, error):
    fc = {"name": "fc", "op": "FullyConnected", "params": {"b": 2, "n": 4, "c": 4}, "inputs": [None],
          "tied": {"weight": "shared"}, "extra_weights": extra}
    text = json.dumps({"format": "pase-graph", "version": 1, "layers": [fc]})
    with pytest.raises(error):
        loads_graph(text)
    good = dict(fc, extra_weights=[{"name": "pos", "shape": [4], "axes": ["n"]}])
    loaded = loads_graph(json.dumps({"format": "pase-graph", "version": 1, "layers": [good]}))
    assert loaded.parameter_count == 4 * 4 + 4 + 4


class FreshDecoder(nn.Module):
    """What the optimiser of the dynamo exporter took for constants in a fresh model: a
    position table gathered at ``arange(seq)``, equal LayerNorm scales (all ones), a bias
    that is all zeros (``addmm``, as GPT-2's Conv1D), and a causal mask folded from
    ``arange`` (no parameter at all)."""

    def __init__(self, vocab=VOCAB, positions=64, d=HIDDEN):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.weight, self.bias = nn.Parameter(torch.randn(d, d) * 0.02), nn.Parameter(torch.zeros(d))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        b, s = ids.shape
        at = torch.arange(s)
        x = self.ln1(self.tokens(ids) + self.positions(at)[None])
        y = torch.addmm(self.bias, x.reshape(b * s, -1), self.weight).reshape(b, s, -1)
        mask = torch.where(at[:, None] >= at[None, :], 0.0, float("-inf"))
        scores = (y @ x.transpose(1, 2) / y.shape[-1] ** 0.5 + mask).softmax(-1)
        return self.head(self.ln2(scores @ x))


@pytest.mark.parametrize("dynamo", [False, True], ids=["default", "dynamo"])
def test_no_parameter_is_folded_merged_or_dropped_and_no_mask_counted(dynamo):
    module = FreshDecoder()
    ids = _ids(EXPORT_BATCH)
    graph = from_torch(module, ids, dynamo=dynamo)
    assert graph.parameter_count == _parameters(module)
    assert not [w for layer in graph for w in layer.weights if w.tied]  # nothing shared
    other = from_torch(module, ids, dynamo=dynamo, batch=OTHER_BATCH)
    assert other.parameter_count == _parameters(module)
    assert model_flops(other) == pytest.approx(model_flops(graph) * OTHER_BATCH / EXPORT_BATCH, rel=1e-6)
