"""Acceptance: ONNX exports of models built from torch's own modules import, validate and solve.

The fixtures in ``tests/data/onnx`` were exported by ``make_fixtures.py`` (the
same exporter path as :func:`pase.from_torch`) from an MLP, a small CNN, an
embedding + 2-layer ``nn.LSTM`` + linear language model with its loss, and an
``nn.TransformerEncoder``. ``fixtures.json`` records torch's parameter counts and
the forward FLOPs of ``torch.utils.flop_counter`` at generation time, so these
tests need only onnx. Their weights are references to an external data file
that is not shipped: importing must never need it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import onnx  # noqa: F401  (CI installs the test extra: run, never skip)
else:
    pytest.importorskip("onnx")

from pase.io.graph_json import load_model_file
from pase.ops import training_flops
from pase.io.onnx import from_onnx

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "onnx"
RECORD = json.loads((DATA / "fixtures.json").read_text())
NAMES = sorted(RECORD)


def total_flops(graph) -> float:
    return sum(training_flops(layer) for layer in graph)


@pytest.fixture(scope="module")
def graphs():
    return {name: from_onnx(DATA / f"{name}.onnx") for name in NAMES}


def test_the_four_fixtures_are_there():
    assert NAMES == ["cnn", "mlp", "rnnlm", "transformer"]


@pytest.mark.parametrize("name", NAMES)
def test_fixture_imports_and_validates(graphs, name):
    graph = graphs[name]
    graph.validate()
    assert graph.name == name
    batch = RECORD[name]["inputs"][0][0]
    # The batch of the first input reaches the first layer.
    assert graph.layers[0].sizes[graph.layers[0].dims.index("b")] == batch


def test_mlp_layers_and_training_flops(graphs):
    g = graphs["mlp"]
    assert [str(layer) for layer in g] == [
        "0/Gemm: FullyConnected(b=64 n=512 c=784)",
        "2/Gemm: FullyConnected(b=64 n=512 c=512)",
        "4/Gemm: FullyConnected(b=64 n=10 c=512)",
    ]
    assert [layer.param_dict["pointwise"] for layer in g] == [1, 1, 0]  # the ReLUs, fused
    # The acceptance criterion: 3 x torch's forward count within 2%.
    assert total_flops(g) == pytest.approx(3 * RECORD["mlp"]["forward_flops"], rel=0.02)


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_parameter_counts_match_torch(graphs, name):
    assert graphs[name].parameter_count == RECORD[name]["parameters"]


def test_rnnlm_is_embedding_lstm_projection_loss(graphs):
    g = graphs["rnnlm"]
    assert [layer.op for layer in g] == ["Embedding", "LSTM", "Einsum", "Reshape", "SoftmaxCrossEntropy"]
    lstm = g.layers[1]
    assert lstm.size_of == {"l": 2, "b": 8, "s": 20, "d": 128, "e": 128}
    assert g.layers[2].param_dict["bias"] is True
    # torch keeps two biases per LSTM layer, pase one: 2 layers x 4 gates x 128.
    assert g.parameter_count == RECORD["rnnlm"]["parameters"] - 2 * 4 * 128


def test_cnn_layers(graphs):
    g = graphs["cnn"]
    assert Counter(layer.op for layer in g) == Counter(
        {"Conv2D": 3, "BatchNorm": 2, "Pooling": 3, "Reshape": 1, "FullyConnected": 1})
    convs = [layer for layer in g if layer.op == "Conv2D"]
    assert [c.param_dict["pointwise"] for c in convs] == [1, 1, 1]  # each ReLU fused
    assert convs[2].size_of["h"] == 4 and convs[2].param_dict["stride"] == 2


def test_transformer_layers(graphs):
    g = graphs["transformer"]
    counts = Counter(layer.op for layer in g)
    assert counts["LayerNorm"] == 4 and counts["Softmax"] == 2
    # Per encoder layer: the packed q/k/v projection, two attention products, the output projection
    # and the two feed-forward GEMMs.
    assert counts["Einsum"] + counts["FullyConnected"] == 2 * 6
    ff1 = g.layer("layers.0/linear1/MatMul")
    assert ff1.param_dict["equation"] == "bsd,de->bse" and ff1.param_dict["pointwise"] == 1


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_training_flops_cover_torchs_count(graphs, name):
    # torch counts only GEMMs and convolutions; pase adds normalisation, softmax and pointwise ops.
    ratio = total_flops(graphs[name]) / (3 * RECORD[name]["forward_flops"])
    assert 1.0 <= ratio <= 1.1


def test_batch_override(graphs):
    g = from_onnx(DATA / "transformer.onnx", batch=16)
    assert {layer.size_of["b"] for layer in g if layer.op == "LayerNorm"} == {16}
    assert total_flops(g) == pytest.approx(2 * total_flops(graphs["transformer"]))
    lm = from_onnx(DATA / "rnnlm.onnx", batch=32)
    assert lm.layers[1].size_of["b"] == 32


def test_load_model_file_dispatches_by_suffix(graphs):
    data = (DATA / "mlp.onnx").read_bytes()
    g = load_model_file(data, "upload.onnx")
    assert [str(layer) for layer in g] == [str(layer) for layer in graphs["mlp"]]
    assert g.name == "upload"
    assert load_model_file(DATA / "cnn.onnx", batch=4).layers[0].size_of["b"] == 4


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "pase", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.mark.parametrize("name", NAMES)
def test_cli_solves_the_onnx_model(graphs, name):
    proc = _cli("solve", DATA / f"{name}.onnx", "--devices", 4, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["step_time_s"] > 0
    assert [r["name"] for r in out["layers"]] == [layer.name for layer in graphs[name]]


def test_cli_batch_for_onnx_and_show():
    proc = _cli("show", DATA / "transformer.onnx", "--devices", 4, "--batch", 16)
    assert proc.returncode == 0, proc.stderr
    assert "b=16" in proc.stdout
