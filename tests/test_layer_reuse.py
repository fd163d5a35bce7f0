"""Repeated blocks built once (:func:`pase.ops.registry.reusing_layers`): every sample model and Hugging Face config
built reusing layers equals the same model built layer by layer, at several microbatch sizes, to the parameters'
types; reused layers are refused where a fresh build refuses."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

import pase.io.hf_config as hf_config
import pase.models as models
from pase import ops as L
from pase.errors import GraphError
from pase.io.hf_config import from_hf_config
from pase.ir.graph import Graph
from pase.models import SAMPLES, sample
from pase.ops.registry import reusing_layers

HF = Path(__file__).parent / "data" / "hf"
# Hugging Face configs: a dense decoder (Llama 3 8B's released file, the tiny one), GPT-2 and a BERT (the GPT and
# BERT builders), a mixture of experts with shared experts (DeepSeek-MoE's keys, 4 layers).
HF_CONFIGS = {
    "llama3-8b": json.loads((HF / "llama3-8b" / "config.json").read_text()),
    "tiny-llama": json.loads((HF / "tiny-llama" / "config.json").read_text()),
    "gpt2": dict(model_type="gpt2", n_embd=256, n_layer=3, n_head=4, vocab_size=512, n_positions=512),
    "bert": dict(model_type="bert", hidden_size=256, num_hidden_layers=3, num_attention_heads=8,
                 intermediate_size=688, vocab_size=512, max_position_embeddings=512, type_vocab_size=2),
    "deepseek-moe": {
        "model_type": "deepseek", "first_k_dense_replace": 1, "hidden_size": 2048, "intermediate_size": 10944,
        "max_position_embeddings": 4096, "moe_intermediate_size": 1408, "moe_layer_freq": 1,
        "n_routed_experts": 64, "n_shared_experts": 2, "num_attention_heads": 16, "num_experts_per_tok": 6,
        "num_hidden_layers": 4, "num_key_value_heads": 16, "vocab_size": 102400},
}


def _same(reused: Graph, fresh: Graph) -> None:
    """The two graphs are one: name, layers in order (every field, and each parameter's type), edges, kinds."""
    assert reused.name == fresh.name
    assert reused.layers == fresh.layers
    for a, b in zip(reused.layers, fresh.layers):
        assert repr(a.params) == repr(b.params) and repr(a) == repr(b), a.name
        assert a.signature == b.signature
    assert reused.edges == fresh.edges
    assert [reused.kind(l.name) for l in reused] == [fresh.kind(l.name) for l in fresh]
    assert reused.parameter_count == fresh.parameter_count


@pytest.mark.parametrize("name", list(SAMPLES))
def test_samples_built_reusing_layers_equal_those_built_layer_by_layer(name, monkeypatch):
    for batch in (1, 3):
        reused = sample(name, batch=batch)
        with monkeypatch.context() as m:
            m.setattr(models, "reusing_layers", contextlib.nullcontext)
            fresh = sample(name, batch=batch)
        _same(reused, fresh)
        # Layers were in fact shared where the model repeats a block (not the CNNs' few distinct ones).
        if name.startswith(("megatron", "llama", "gpt3")):
            assert len({id(l.__dict__["dims"]) for l in reused}) < len(reused) / 4


@pytest.mark.parametrize("name", list(HF_CONFIGS))
def test_hugging_face_configs_built_reusing_layers_equal_those_built_layer_by_layer(name, monkeypatch):
    for batch in (1, 2, 5):
        reused = from_hf_config(HF_CONFIGS[name], batch=batch, seq=256)
        with monkeypatch.context() as m:
            m.setattr(hf_config, "reusing_layers", contextlib.nullcontext)
            fresh = from_hf_config(HF_CONFIGS[name], batch=batch, seq=256)
        _same(reused, fresh)


def test_a_reused_layer_takes_its_own_name_and_leaves_the_first_one_as_built():
    sizes = dict(b=2, s=8, d=16, e=64)
    with reusing_layers():
        first = L.einsum("h.0.ff1", "bsd,ed->bse", sizes, weights=(1,), bias=True)
        again = L.einsum("h.1.ff1", "bsd,ed->bse", sizes, weights=(1,), bias=True)
        wider = L.einsum("h.2.ff1", "bsd,ed->bse", dict(sizes, e=32), weights=(1,), bias=True)
    assert (first.name, again.name, wider.name) == ("h.0.ff1", "h.1.ff1", "h.2.ff1")
    assert again == L.einsum("h.1.ff1", "bsd,ed->bse", sizes, weights=(1,), bias=True)
    assert first.signature == again.signature != wider.signature
    assert wider.size_of["e"] == 32


@pytest.mark.parametrize("call", [
    lambda: L.einsum("y", "bsd,ed->bse", dict(b=2, s=8, d=16, e=64), weights=(1,), bias=1),  # bias must be a bool
    lambda: L.einsum("y", "bsd,ed->bse", dict(b=2, s=8, d=16, e=64), weights=(1,), bias=True, pointwise=1.0),
    lambda: L.einsum("y", "bsd,ed->bse", dict(b=2, s=8, d=16, e=64.0), weights=(1,), bias=True),
    lambda: L.einsum("", "bsd,ed->bse", dict(b=2, s=8, d=16, e=64), weights=(1,), bias=True),  # no name
])
def test_arguments_equal_only_in_value_are_not_taken_for_an_earlier_layer(call):
    """``True == 1`` and ``64.0 == 64``, but the builder refuses the second of each: so does a reused build."""
    with pytest.raises(GraphError):
        call()
    with reusing_layers():
        L.einsum("x", "bsd,ed->bse", dict(b=2, s=8, d=16, e=64), weights=(1,), bias=True, pointwise=1)
        L.einsum("x2", "bsd,ed->bse", dict(b=2, s=8, d=16, e=64), weights=(1,), bias=True)
        with pytest.raises(GraphError):
            call()
