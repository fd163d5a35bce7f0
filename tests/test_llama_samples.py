"""Meta's Llama 3 samples against the paper and hand counts: parameters, vertices, FLOPs, Megatron's rule, memory.

References, written here independently of the builder:

* sizes and published parameter counts: "The Llama 3 Herd of Models" (Meta 2024), Table 3
  (8B: 32 layers, hidden 4096, FFN 14336, 32 heads; 70B: 80, 8192, 28672, 64; 405B: 126, 16384, 53248, 128;
  8 key/value heads and vocabulary 128,256 for all); published 8.03B, 70.6B, 405.9B;
* parameters by hand, per block: q and out ``d x d`` each, k and v ``d x (8 c)`` each (``c = d / heads``),
  gate, up and down ``d x F`` each, two RMSNorm scales ``d``; plus embedding and output ``V d`` each
  (untied) and the final norm ``d``;
* matrix-product forward FLOPs of one block, 2 FLOPs per multiply-add: q and out ``2 b s d^2`` each, k and
  v ``2 b s d (d kv / heads)`` each, three FFN products ``2 b s d F`` each, scores and context
  ``2 b s^2 d`` each (every (s, k) pair): ``2 b s (d^2 (2 + 2 kv / heads) + 3 d F) + 4 b s^2 d``.
"""

from __future__ import annotations


import numpy as np
import pytest

from pase.errors import ConfigurationError, GraphError
from pase.hardware.cluster import Cluster, preset
from pase.model.memory import build_memory_model
from pase.model.training import Parallelism, attention_core, blocks, evaluate_training
from pase.models import LANGUAGE_MODELS, SAMPLES, batch_builder, sample
from pase.models.llama import llama
from pase.ops import OPS, saved_tensors, training_flops
from pase.strategies.baselines import tensor_parallel_strategy

V = 128256
# name: (layers, hidden, heads, kv heads, FFN, published parameters)
TABLE3 = {
    "llama3-8b": (32, 4096, 32, 8, 14336, 8.03e9),
    "llama3-70b": (80, 8192, 64, 8, 28672, 70.6e9),
    "llama3-405b": (126, 16384, 128, 8, 53248, 405.9e9),
}


def by_hand(layers: int, d: int, heads: int, kv: int, ffn: int, vocab: int = V) -> int:
    c = d // heads
    block = d * d + 2 * d * kv * c + d * d + 3 * d * ffn + 2 * d
    return layers * block + 2 * vocab * d + d


BLOCK = [
    ("attn_norm", "RMSNorm"), ("attn.q", "Einsum"), ("attn.k", "Einsum"), ("attn.v", "Einsum"),
    ("attn.scores", "Einsum"), ("attn.softmax", "Softmax"), ("attn.context", "Einsum"), ("attn.out", "Einsum"),
    ("add1", "Elementwise"), ("ffn_norm", "RMSNorm"), ("ffn.gate", "Einsum"), ("ffn.up", "Einsum"),
    ("ffn.swiglu", "Elementwise"), ("ffn.down", "Einsum"), ("add2", "Elementwise"),
]


def tiny(layers=2, d=64, heads=8, kv=2, ffn=96, vocab=100, batch=2, seq=16):
    return llama("tiny", layers, d, heads, kv, ffn, vocab, batch=batch, seq=seq)


def test_samples_are_registered_as_language_models():
    assert set(TABLE3) <= set(SAMPLES) and set(TABLE3) <= set(LANGUAGE_MODELS)
    for name in TABLE3:
        assert "arameters" in SAMPLES[name].__doc__ and "2048" in SAMPLES[name].__doc__


@pytest.mark.parametrize("name", sorted(TABLE3))
def test_parameter_count_matches_the_hand_formula_and_the_published_size(name):
    layers, d, heads, kv, ffn, published = TABLE3[name]
    g = sample(name, batch=1)
    assert g.name == name
    assert g.parameter_count == by_hand(layers, d, heads, kv, ffn)
    assert g.parameter_count == pytest.approx(published, rel=0.005)
    assert sum(layer.name.endswith(".attn_norm") for layer in g) == layers
    assert g.layer("layers.0.attn.q").size_of == {"b": 1, "s": 8192, "d": d, "h": 8, "r": heads // 8, "c": 128}
    assert g.layer(f"layers.{layers - 1}.ffn.gate").size_of == {"b": 1, "s": 8192, "d": d, "e": ffn}
    assert f"layers.{layers}.attn_norm" not in g
    # Untied: embedding and output projection are two tables.
    assert not g.layer("embedding").weights[0].tied and not g.layer("projection").weights[0].tied


def test_default_batch_is_the_published_16m_tokens():
    g = SAMPLES["llama3-8b"]()
    assert g.layer("embedding").size_of["b"] * g.layer("embedding").size_of["s"] == 2048 * 8192 == 2**24


def test_one_block_has_exactly_these_vertices_and_wiring():
    g = tiny()
    block = [(layer.name[len("layers.1."):], layer.op) for layer in g if layer.name.startswith("layers.1.")]
    assert block == BLOCK
    assert len(g) == 2 * len(BLOCK) + 4
    assert [layer.op for layer in g if not layer.name.startswith("layers.")] == [
        "Embedding", "RMSNorm", "Einsum", "SoftmaxCrossEntropy"]
    eq = {name: g.layer(f"layers.1.{name}").param_dict["equation"] for name, op in BLOCK if op == "Einsum"}
    assert eq == {"attn.q": "bsd,hrcd->bshrc", "attn.k": "bsd,hcd->bshc", "attn.v": "bsd,hcd->bshc",
                  "attn.scores": "bshrc,bkhc->bhrsk", "attn.context": "bhrsk,bkhc->bshrc",
                  "attn.out": "bshrc,hrcd->bsd", "ffn.gate": "bsd,ed->bse", "ffn.up": "bsd,ed->bse",
                  "ffn.down": "bse,de->bsd"}
    assert not any(layer.param_dict.get("bias") for layer in g if layer.op == "Einsum")
    assert g.layer("layers.1.attn.softmax").param_dict["axis"] == "k"
    assert [e.src for e in g.in_edges("layers.1.attn.scores")] == ["layers.1.attn.q", "layers.1.attn.k"]
    assert [e.src for e in g.in_edges("layers.1.attn.context")] == ["layers.1.attn.softmax", "layers.1.attn.v"]
    assert [e.src for e in g.in_edges("layers.1.ffn.swiglu")] == ["layers.1.ffn.gate", "layers.1.ffn.up"]
    assert sorted(e.dst for e in g.edges if e.src == "layers.0.add2") == ["layers.1.add1", "layers.1.attn_norm"]
    assert [e.src for e in g.in_edges("layers.0.attn_norm")] == ["embedding"]
    assert [e.src for e in g.in_edges("projection")] == ["norm"]
    swiglu = g.layer("layers.1.ffn.swiglu").param_dict
    assert swiglu["pointwise"] == 1 and swiglu["gated"] is True and swiglu["dims"] == ["b", "s", "e"]


def test_no_dropout_and_rope_changes_no_layer_but_says_so_on_the_softmax():
    g = tiny()
    assert "Dropout" not in {layer.op for layer in g}
    plain = llama("tiny", 2, 64, 8, 2, 96, 100, batch=2, seq=16, rope=False)
    def shape(graph):
        return [(l.name, l.op, l.dims, l.sizes, l.inputs, l.outputs, l.weights) for l in graph.layers]

    assert shape(plain) == shape(g) and plain.parameter_count == g.parameter_count
    assert {l.name for l in g.layers if l != plain.layer(l.name)} == {"layers.0.attn.softmax", "layers.1.attn.softmax"}
    assert dict(g.layer("layers.0.attn.softmax").params)["rotary"] is True
    with pytest.raises(GraphError, match="rope"):
        llama("tiny", 2, 64, 8, 2, 96, 100, batch=2, seq=16, rope=1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(heads=8, kv=3), "kv_heads"), (dict(d=60, heads=8), "multiple of heads"), (dict(ffn=0), "ffn")])
def test_bad_sizes_are_graph_errors(kwargs, match):
    with pytest.raises(GraphError, match=match):
        tiny(**kwargs)


@pytest.mark.parametrize("b, s, d, heads, kv, ffn", [(2, 16, 64, 8, 2, 96), (3, 8, 128, 16, 8, 352)])
def test_block_matrix_product_forward_flops_are_the_hand_count(b, s, d, heads, kv, ffn):
    g = tiny(layers=1, d=d, heads=heads, kv=kv, ffn=ffn, batch=b, seq=s)
    products = [g.layer(f"layers.0.{n}") for n, op in BLOCK if op == "Einsum"]
    assert len(products) == 9
    forward = sum(float(OPS["Einsum"].flops(x, np.asarray(x.sizes, float)[None, :]).forward[0]) for x in products)
    assert forward == 2 * b * s * (d * d * (2 + 2 * kv / heads) + 3 * d * ffn) + 4 * b * s**2 * d
    # Training: the forward and two backward products of the same size (no biases).
    assert sum(training_flops(x) for x in products) == 3 * forward


def test_rms_norm_and_swiglu_flops_and_what_the_backward_keeps():
    b, s, d, ffn = 2, 16, 64, 96
    g = tiny(layers=1, d=d, ffn=ffn, batch=b, seq=s)
    assert training_flops(g.layer("layers.0.attn_norm")) == 13 * b * s * d
    assert training_flops(g.layer("layers.0.ffn.swiglu")) == 6 * b * s * ffn
    assert g.layer("layers.0.attn_norm").weight_count == d  # a scale, no shift
    assert saved_tensors(g.layer("layers.0.ffn.swiglu")) == (frozenset({0, 1}), frozenset())
    model = build_memory_model(g, Cluster(1, 1e12, 1e9, bytes_per_element=2),
                               configs={x.name: np.ones((1, len(x.dims)), int) for x in g})
    acts = {name: float(v[0]) for name, v in model.activation_bytes.items()}
    # silu(gate) * up keeps gate's and up's outputs (no one else does); down keeps the product.
    assert acts["layers.0.ffn.swiglu"] == 2 * b * s * ffn * 2
    assert acts["layers.0.ffn.down"] == b * s * ffn * 2
    # gate and up share ffn_norm's output, one half each; neither keeps its own output.
    assert acts["layers.0.ffn.gate"] == acts["layers.0.ffn.up"] == b * s * d
    # Residual adds keep nothing; the norm keeps its input.
    assert acts["layers.0.add2"] == 0 and acts["layers.0.ffn_norm"] == b * s * d * 2


def test_rms_norm_all_reduces_one_statistic_each_way_when_its_axis_is_split():
    from pase.ops import collectives, rms_norm

    layer = rms_norm("n", (2, 4, 8), ("b", "s", "d"))
    (stats,) = [c for c in collectives(layer, np.array([[1, 1, 2]])) if c.what == "statistics"]
    assert stats.dims == ("d",) and stats.elements[0] == 2 * (2 * 4)
    (grad,) = [c for c in collectives(layer, np.array([[2, 1, 1]])) if c.weight_gradient]
    assert grad.dims == ("b", "s") and grad.elements[0] == 8


def test_megatrons_rule_splits_kv_heads_and_ffn_eight_ways():
    g = sample("llama3-8b", batch=1)
    strategy = tensor_parallel_strategy(g, 8)

    def split(name):
        layer = g.layer(name)
        return {d: k for d, k in zip(layer.dims, strategy[name]) if k > 1}

    for name in ("attn.q", "attn.k", "attn.v", "attn.scores", "attn.softmax", "attn.context", "attn.out"):
        assert split(f"layers.5.{name}") == {"h": 8}, name
    for name in ("ffn.gate", "ffn.up", "ffn.swiglu", "ffn.down"):
        assert split(f"layers.5.{name}") == {"e": 8}, name
    for name in ("embedding", "projection", "softmax"):
        assert split(name) == {"v": 8}, name
    for name in ("layers.5.attn_norm", "layers.5.add1", "norm"):
        assert split(name) == {}
    with pytest.raises(ConfigurationError, match="dimension 'h'"):
        tensor_parallel_strategy(g, 16)


def test_recomputation_blocks_and_attention_core():
    g = tiny()
    assert set(blocks(g).values()) == {"layers.0", "layers.1"}
    assert {n for n in attention_core(g) if n.startswith("layers.0.")} == {"layers.0.attn.scores",
                                                                             "layers.0.attn.softmax"}


def test_8b_trains_on_64_h100s_within_80_gb():
    plan = evaluate_training(batch_builder("llama3-8b"), preset("dgx-h100", 64, calibrated=False),
                             Parallelism(tensor=8, data=8, global_batch=64, microbatch_size=1, recompute="full"))
    assert plan.fits_memory
    assert 0 < plan.memory_per_device_bytes < 80e9


def test_405b_builds():
    # Build times belong in benchmarks/, not in a test (tests pass on any machine, however loaded).
    g = sample("llama3-405b")
    assert len(g) == 126 * len(BLOCK) + 4
