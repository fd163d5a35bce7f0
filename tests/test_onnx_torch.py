"""from_torch: live export of torch modules (the test extra installs torch's CPU build).

The same four models as the committed fixtures (built by
``tests/data/onnx/make_fixtures.py``) are exported now and imported; the graphs
must match the fixtures', so the fixtures stay representative of what
``from_torch`` does with this torch.
"""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
from collections import Counter
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import torch  # CI installs the test extra: run, never skip
else:
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")

import pase.io.torch
from pase.errors import FormatError
from pase.ops import training_flops
from pase.io.onnx import from_onnx
from pase.io.torch import from_torch

DATA = Path(__file__).resolve().parent / "data" / "onnx"
RECORD = json.loads((DATA / "fixtures.json").read_text())


def _fixture_module():
    spec = importlib.util.spec_from_file_location("make_fixtures", DATA / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def models():
    return _fixture_module().models()


@pytest.mark.parametrize("name", sorted(RECORD))
def test_from_torch_matches_the_committed_fixture(models, name):
    module, inputs = models[name]
    live = from_torch(module, inputs, name=name)
    fixture = from_onnx(DATA / f"{name}.onnx")
    assert Counter(layer.op for layer in live) == Counter(layer.op for layer in fixture)
    assert [str(layer) for layer in live] == [str(layer) for layer in fixture]
    assert live.parameter_count == fixture.parameter_count


def test_mlp_flops_against_the_live_flop_counter(models):
    from torch.utils.flop_counter import FlopCounterMode

    module, inputs = models["mlp"]
    with FlopCounterMode(display=False) as counter:
        module(*inputs)
    graph = from_torch(module, inputs)
    assert sum(training_flops(layer) for layer in graph) == pytest.approx(3 * counter.get_total_flops(), rel=0.02)


def test_module_mode_is_restored_and_batch_override(models):
    module, inputs = models["cnn"]
    module.eval()
    graph = from_torch(module, inputs, batch=32)
    assert not module.training
    assert graph.layers[0].size_of["b"] == 32
    assert "BatchNorm" in {layer.op for layer in graph}  # the training graph keeps batch norm


def test_inference_export_also_imports(models):
    module, inputs = models["cnn"]
    graph = from_torch(module, inputs, training=False)
    graph.validate()
    assert "Conv2D" in {layer.op for layer in graph}


def test_export_failure_is_a_format_error():
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    with pytest.raises(FormatError, match="torch could not export Broken"):
        from_torch(Broken(), torch.zeros(2, 2))


def test_docstring_examples():
    failures, _ = doctest.testmod(pase.io.torch)
    assert failures == 0


@pytest.mark.parametrize("name", sorted(RECORD))
def test_the_dynamo_exporter_imports_too(models, name):
    module, inputs = models[name]
    graph = from_torch(module, inputs, dynamo=True)
    graph.validate()
    fixture = from_onnx(DATA / f"{name}.onnx")
    main_ops = {"FullyConnected", "Einsum", "Conv2D", "Embedding", "LSTM", "LayerNorm", "Softmax", "SoftmaxCrossEntropy"}
    assert {layer.op for layer in graph} & main_ops == {layer.op for layer in fixture} & main_ops
    # This exporter optimises the graph (batch norm folded away, some biases elsewhere): close, not equal.
    assert graph.parameter_count == pytest.approx(fixture.parameter_count, rel=0.01)
