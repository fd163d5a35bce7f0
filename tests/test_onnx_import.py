"""ONNX import: operator mapping on small hand-built models, and hardening against bad files.

Each test builds an ONNX model with ``onnx.helper`` and checks the pase graph it
imports to: which layers, which dimensions, what was fused or folded, and that
the graph validates. The models exported from torch modules are in
``test_onnx_models.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

if os.environ.get("CI"):
    import onnx  # CI installs the test extra: these tests must run there, never skip
else:
    onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from pase.errors import FormatError, GraphError, PaseError
from pase.ops import training_flops
from pase.io.onnx import SUPPORTED_OPS, OnnxImportWarning, from_onnx, importer, reader
from pase.limits import MAX_ATTRIBUTE_VALUES, MAX_DIM, MAX_NODES, MAX_ONNX_BYTES, MAX_ONNX_PARSE_BYTES

F = TensorProto.FLOAT
I64 = TensorProto.INT64


# -- building models ------------------------------------------------------------------------------


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def w(name, *shape, value=None):
    arr = np.zeros(shape, np.float32) if value is None else np.asarray(value)
    return numpy_helper.from_array(arr, name)


def const(name, value, dtype=np.int64):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype=dtype)),
                            name=f"const_{name}")


def node(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(op, inputs, outputs, name=name or outputs[0], **attrs)


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ops(graph):
    return [layer.op for layer in graph]


# -- GEMMs and fusion ---------------------------------------------------------------------------------


def test_gemm_with_bias_and_relu_is_one_fully_connected_layer():
    m = model([node("Gemm", ["x", "W", "B"], ["h"], name="fc", transB=1), node("Relu", ["h"], ["y"])],
              [vi("x", [32, 64])], [vi("y", [32, 10])], [w("W", 10, 64), w("B", 10)])
    g = from_onnx(m)
    (fc,) = g.layers
    assert str(fc) == "fc: FullyConnected(b=32 n=10 c=64)"
    assert fc.param_dict["bias"] is True and fc.param_dict["pointwise"] == 1
    assert g.parameter_count == 10 * 64 + 10


def test_matmul_then_bias_add_on_a_sequence_is_an_einsum_with_bias():
    m = model([node("MatMul", ["x", "W"], ["h"], name="proj"), node("Add", ["h", "B"], ["y"])],
              [vi("x", [8, 16, 32])], [vi("y", [8, 16, 48])], [w("W", 32, 48), w("B", 48)])
    (layer,) = from_onnx(m).layers
    assert layer.op == "Einsum"
    assert layer.param_dict["equation"] == "bsd,de->bse"
    assert layer.param_dict["bias"] is True
    assert layer.size_of == {"b": 8, "s": 16, "d": 32, "e": 48}


def test_gelu_decomposition_fuses_into_the_linear_layer():
    # x * 0.5 * (1 + erf(x / sqrt(2))), as torch exports nn.GELU before opset 20.
    nodes = [
        node("Gemm", ["x", "W"], ["h"], name="fc", transB=1),
        const("c2", 1.4142135, np.float32), const("c1", 1.0, np.float32), const("c05", 0.5, np.float32),
        node("Div", ["h", "c2"], ["d"]), node("Erf", ["d"], ["e"]), node("Add", ["e", "c1"], ["a"]),
        node("Mul", ["h", "a"], ["m"]), node("Mul", ["m", "c05"], ["y"]),
    ]
    g = from_onnx(model(nodes, [vi("x", [4, 8])], [vi("y", [4, 8])], [w("W", 8, 8)]))
    assert ops(g) == ["FullyConnected"]
    assert g.layer("fc").param_dict["pointwise"] == 5


def test_residual_add_of_two_layers_is_an_elementwise_layer():
    nodes = [node("MatMul", ["x", "W1"], ["a"], name="fc1"), node("MatMul", ["a", "W2"], ["b"], name="fc2"),
             node("Add", ["a", "b"], ["y"], name="residual")]
    g = from_onnx(model(nodes, [vi("x", [4, 8])], [vi("y", [4, 8])], [w("W1", 8, 8), w("W2", 8, 8)]))
    assert ops(g) == ["FullyConnected", "FullyConnected", "Elementwise"]
    assert {e.src for e in g.in_edges("residual")} == {"fc1", "fc2"}


def test_attention_matmuls_are_two_input_einsums():
    b, h, s, d = 2, 4, 16, 8
    nodes = [
        node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        node("MatMul", ["q", "kt"], ["scores"], name="scores"),
        node("Softmax", ["scores"], ["p"], name="softmax", axis=-1),
        node("MatMul", ["p", "v"], ["y"], name="context"),
    ]
    pre = [node("MatMul", [f"{t}0", f"W{t}"], [t], name=f"proj_{t}") for t in "qkv"]
    m = model(pre + nodes, [vi(f"{t}0", [b, h, s, d]) for t in "qkv"], [vi("y", [b, h, s, d])],
              [w(f"W{t}", d, d) for t in "qkv"])
    g = from_onnx(m)
    scores = g.layer("scores")
    assert scores.op == "Einsum" and len(scores.inputs) == 2 and not scores.weights
    assert scores.param_dict["equation"] == "bhsd,bhdt->bhst"
    assert g.layer("softmax").op == "Softmax"
    # Splitting nothing: FLOPs of a batched product, forward and backward.
    assert training_flops(scores) == pytest.approx(6 * b * h * s * s * d)


# -- convolutions -----------------------------------------------------------------------------------


def test_conv_batchnorm_relu_pool_gemm():
    nodes = [
        node("Conv", ["x", "Wc", "Bc"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2], kernel_shape=[3, 3]),
        node("BatchNormalization", ["c", "s", "t", "m", "v"], ["n"], name="bn"),
        node("Relu", ["n"], ["r"]),
        node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        node("GlobalAveragePool", ["p"], ["gap"], name="gap"),
        node("Flatten", ["gap"], ["f"], name="flatten"),
        node("Gemm", ["f", "Wf"], ["y"], name="fc", transB=1),
    ]
    inits = [w("Wc", 16, 3, 3, 3), w("Bc", 16), w("s", 16), w("t", 16), w("m", 16), w("v", 16), w("Wf", 10, 16)]
    g = from_onnx(model(nodes, [vi("x", [8, 3, 32, 32])], [vi("y", [8, 10])], inits))
    assert ops(g) == ["Conv2D", "BatchNorm", "Pooling", "Pooling", "Reshape", "FullyConnected"]
    conv = g.layer("conv")
    assert conv.size_of == {"b": 8, "c": 3, "h": 16, "w": 16, "n": 16, "r": 3, "s": 3}
    assert conv.param_dict["pointwise"] == 1  # the ReLU after its batch norm
    pool = g.layer("pool")
    assert pool.outputs[0].shape == (8, 16, 8, 8)  # ceil mode: ceil((16 + 0 - 3) / 2) + 1 = 8
    assert g.layer("gap").outputs[0].shape == (8, 16, 1, 1)
    # Weights, not layers: conv weight + bias, bn scale + shift, fc weight.
    assert g.parameter_count == 16 * 27 + 16 + 2 * 16 + 160


def test_conv1d_goes_through_a_2d_convolution():
    m = model([node("Conv", ["x", "W"], ["y"], name="conv", pads=[2, 2], kernel_shape=[5])],
              [vi("x", [4, 8, 100])], [vi("y", [4, 16, 100])], [w("W", 16, 8, 5)])
    g = from_onnx(m)
    conv = g.layer("conv")
    assert conv.size_of == {"b": 4, "c": 8, "h": 1, "w": 100, "n": 16, "r": 1, "s": 5}
    assert ops(g) == ["Reshape", "Conv2D", "Reshape"] or ops(g) == ["Conv2D", "Reshape"]


def test_same_padding_and_asymmetric_pads():
    m = model([node("Conv", ["x", "W"], ["y"], name="conv", auto_pad="SAME_UPPER", strides=[2, 2])],
              [vi("x", [2, 3, 31, 31])], [vi("y", [2, 4, 16, 16])], [w("W", 4, 3, 3, 3)])
    assert from_onnx(m).layer("conv").outputs[0].shape == (2, 4, 16, 16)


def test_grouped_convolution_is_a_grouped_conv_layer():
    m = model([node("Conv", ["x", "W"], ["y"], name="dw", group=8)],
              [vi("x", [2, 8, 16, 16])], [vi("y", [2, 8, 14, 14])], [w("W", 8, 1, 3, 3)])
    layer = from_onnx(m).layer("dw")
    assert layer.op == "GroupedConv2D" and layer.size_of["g"] == 8 and layer.outputs[0].shape == (2, 8, 14, 14)


# -- normalisation, softmax, losses ---------------------------------------------------------------


def test_layer_norm_over_last_and_last_two_axes():
    nodes = [node("LayerNormalization", ["x", "s", "t"], ["a"], name="ln1", axis=-1),
             node("LayerNormalization", ["a", "s2", "t2"], ["y"], name="ln2", axis=-2)]
    g = from_onnx(model(nodes, [vi("x", [4, 10, 6])], [vi("y", [4, 10, 6])],
                        [w("s", 6), w("t", 6), w("s2", 10, 6), w("t2", 10, 6)]))
    assert g.layer("ln1").param_dict["axis"] == "d"
    assert g.layer("ln2").inputs[0].shape == (4, 60)  # merged axes
    assert g.layers[-1].outputs[0].shape == (4, 10, 6)


def test_logsoftmax_then_nll_loss_is_one_softmax_cross_entropy():
    nodes = [node("MatMul", ["x", "W"], ["logits"], name="proj"),
             node("LogSoftmax", ["logits"], ["lp"], name="logsoftmax", axis=1),
             node("NegativeLogLikelihoodLoss", ["lp", "labels"], ["loss"], name="nll")]
    g = from_onnx(model(nodes, [vi("x", [32, 64]), vi("labels", [32], I64)], [vi("loss", [])], [w("W", 64, 100)]))
    assert ops(g) == ["FullyConnected", "SoftmaxCrossEntropy"]
    loss = g.layers[-1]
    assert loss.inputs[0].shape == (32, 100) and loss.inputs[1].differentiable is False


def test_softmax_cross_entropy_loss_operator():
    nodes = [node("MatMul", ["x", "W"], ["logits"], name="proj"),
             node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"], name="xent", reduction="mean")]
    g = from_onnx(model(nodes, [vi("x", [32, 64]), vi("labels", [32], I64)], [vi("loss", [])], [w("W", 64, 100)]))
    assert ops(g) == ["FullyConnected", "SoftmaxCrossEntropy"]


def test_softmax_before_opset_13_flattens_trailing_axes():
    m = model([node("MatMul", ["x", "W"], ["h"], name="proj"), node("Softmax", ["h"], ["y"], name="sm", axis=1)],
              [vi("x", [4, 6, 8])], [vi("y", [4, 6, 8])], [w("W", 8, 8)], opset=11)
    g = from_onnx(m)
    assert g.layer("sm").inputs[0].shape == (4, 48)


# -- data movement and folding ----------------------------------------------------------------------


def test_shape_arithmetic_is_folded_not_turned_into_layers():
    # y = reshape(fc(x), [shape(h)[0], -1]) through Shape -> Gather -> Unsqueeze -> Concat.
    nodes = [
        node("MatMul", ["x", "W"], ["h"], name="fc"),
        node("Shape", ["h"], ["shape"]), const("zero", 0), node("Gather", ["shape", "zero"], ["n"], axis=0),
        const("axes", [0]), node("Unsqueeze", ["n", "axes"], ["n1"]), const("minus1", [-1]),
        node("Concat", ["n1", "minus1"], ["target"], axis=0), node("Cast", ["target"], ["target64"], to=I64),
        node("Reshape", ["h", "target64"], ["y"], name="flatten"),
    ]
    g = from_onnx(model(nodes, [vi("x", [4, 3, 8])], [vi("y", [4, 24])], [w("W", 8, 8)]))
    assert ops(g) == ["Einsum", "Reshape"]
    assert g.layer("flatten").outputs[0].shape == (4, 24)


def test_transposes_and_squeezes_that_cancel_leave_no_layers():
    nodes = [
        node("MatMul", ["x", "W"], ["h"], name="fc"),
        node("Transpose", ["h"], ["t"], perm=[1, 0, 2]), const("ax", [1]), node("Unsqueeze", ["t", "ax"], ["u"]),
        node("Squeeze", ["u", "ax"], ["sq"]), node("Transpose", ["sq"], ["back"], perm=[1, 0, 2]),
        node("Identity", ["back"], ["i"]), node("Dropout", ["i"], ["dr"]),
        node("MatMul", ["dr", "W"], ["y"], name="fc2"),
    ]
    g = from_onnx(model(nodes, [vi("x", [4, 5, 8])], [vi("y", [4, 5, 8])], [w("W", 8, 8)]))
    assert ops(g) == ["Einsum", "Einsum"]
    assert [str(e) for e in g.edges] == ["fc[0] -> fc2[0]"]


def test_concat_and_split():
    nodes = [
        node("MatMul", ["x", "W1"], ["a"], name="fc1"), node("MatMul", ["x", "W2"], ["b"], name="fc2"),
        node("Concat", ["a", "b"], ["c"], name="cat", axis=1),
        node("Split", ["c", "parts"], ["p", "q"], name="split", axis=1),
        node("Add", ["p", "q"], ["y"], name="add"),
    ]
    inits = [w("W1", 8, 6), w("W2", 8, 10), numpy_helper.from_array(np.array([8, 8], np.int64), "parts")]
    g = from_onnx(model(nodes, [vi("x", [4, 8])], [vi("y", [4, 8])], inits))
    assert ops(g) == ["FullyConnected", "FullyConnected", "Concat", "Split", "Elementwise"]
    assert g.layer("cat").outputs[0].shape == (4, 16)
    assert g.layer("cat").param_dict["axis"] == "n"
    assert [t.shape for t in g.layer("split").outputs] == [(4, 8), (4, 8)]


def test_slice_and_gather_of_an_activation_become_splits():
    nodes = [
        node("MatMul", ["x", "W"], ["h"], name="qkv"),
        const("starts", [0]), const("ends", [4]), const("axes", [2]),
        node("Slice", ["h", "starts", "ends", "axes"], ["s"], name="slice"),
        const("i", 0), node("Gather", ["h", "i"], ["first"], name="first", axis=1),
        node("MatMul", ["s", "W2"], ["y1"], name="use_slice"), node("MatMul", ["first", "W3"], ["y2"], name="use_first"),
    ]
    g = from_onnx(model(nodes, [vi("x", [2, 5, 8])], [vi("y1", [2, 5, 3]), vi("y2", [2, 3])],
                        [w("W", 8, 12), w("W2", 4, 3), w("W3", 12, 3)]))
    g.validate()
    assert "Split" in ops(g)
    assert g.layer("use_slice").inputs[0].shape == (2, 5, 4)
    assert g.layer("use_first").inputs[0].shape == (2, 12)


def test_gather_on_a_weight_is_an_embedding():
    nodes = [node("Gather", ["table", "ids"], ["e"], name="embedding"), node("MatMul", ["e", "W"], ["y"], name="fc")]
    g = from_onnx(model(nodes, [vi("ids", [8, 20], I64)], [vi("y", [8, 20, 16])], [w("table", 1000, 32), w("W", 32, 16)]))
    emb = g.layer("embedding")
    assert str(emb) == "embedding: Embedding(b=8 s=20 d=32 v=1000)"
    assert g.parameter_count == 1000 * 32 + 32 * 16


def test_reduce_mean_keepdims():
    nodes = [node("MatMul", ["x", "W"], ["h"], name="fc"),
             node("ReduceMean", ["h"], ["m"], name="mean", axes=[1], keepdims=1),
             node("Sub", ["h", "m"], ["y"], name="center")]
    g = from_onnx(model(nodes, [vi("x", [4, 10, 8])], [vi("y", [4, 10, 8])], [w("W", 8, 8)], opset=13))
    mean = g.layer("mean")
    assert mean.op == "ReduceMean" and mean.param_dict["reduce"] == ["s"]
    # Broadcasting the mean back is a two-input einsum (h minus m over s).
    assert g.layer("center").op == "Einsum"


def test_lstm_chain_becomes_one_multilayer_lstm():
    def lstm(i, x, d, e):
        return node("LSTM", [x, f"W{i}", f"R{i}", f"B{i}"], [f"y{i}", f"h{i}", f"c{i}"], name=f"lstm{i}", hidden_size=e)

    nodes = [
        node("Gather", ["table", "ids"], ["emb"], name="embedding"),
        node("Transpose", ["emb"], ["x0"], perm=[1, 0, 2]),
        lstm(0, "x0", 32, 64), const("one", [1]), node("Squeeze", ["y0", "one"], ["x1"]),
        lstm(1, "x1", 64, 64), node("Squeeze", ["y1", "one"], ["x2"]),
        node("Transpose", ["x2"], ["out"], perm=[1, 0, 2]),
        node("MatMul", ["out", "Wp"], ["y"], name="projection"),
    ]
    inits = [w("table", 500, 32), w("Wp", 64, 500)]
    for i, d in ((0, 32), (1, 64)):
        inits += [w(f"W{i}", 1, 256, d), w(f"R{i}", 1, 256, 64), w(f"B{i}", 1, 512)]
    g = from_onnx(model(nodes, [vi("ids", [8, 20], I64)], [vi("y", [8, 20, 500])], inits))
    assert ops(g) == ["Embedding", "LSTM", "Einsum"]
    lstm_layer = g.layers[1]
    assert lstm_layer.size_of == {"l": 2, "b": 8, "s": 20, "d": 32, "e": 64}
    assert [str(e) for e in g.edges] == ["embedding[0] -> lstm1[0]", "lstm1[0] -> projection[0]"]


def test_bidirectional_lstm_is_two_lstms_and_a_concat():
    nodes = [node("LSTM", ["x", "W", "R"], ["y", "h", "c"], name="bi", hidden_size=16, direction="bidirectional"),
             node("Transpose", ["y"], ["t"], perm=[0, 2, 1, 3]), const("shape", [10, 4, 32]),
             node("Reshape", ["t", "shape"], ["r"]), node("MatMul", ["r", "Wp"], ["out"], name="proj")]
    g = from_onnx(model(nodes, [vi("x", [10, 4, 8])], [vi("out", [10, 4, 5])],
                        [w("W", 2, 64, 8), w("R", 2, 64, 16), w("Wp", 32, 5)]))
    assert ops(g).count("LSTM") == 2 and "Concat" in ops(g)


# -- unsupported operators and options ------------------------------------------------------------------


def _with_unsupported():
    nodes = [node("MatMul", ["x", "W"], ["h"], name="fc"), node("Hardmax", ["h"], ["a"], name="hm1"),
             node("Hardmax", ["a"], ["b"], name="hm2"), node("Resize", ["b", "", "", "sizes"], ["v"], name="resize"),
             node("MatMul", ["v", "W2"], ["y"], name="fc2")]
    inits = [w("W", 8, 8), numpy_helper.from_array(np.array([2, 4], np.int64), "sizes"), w("W2", 4, 3)]
    return model(nodes, [vi("x", [2, 8])], [vi("y", [2, 3])], inits)


def test_unsupported_operators_are_all_listed():
    with pytest.raises(FormatError) as info:
        from_onnx(_with_unsupported())
    message = str(info.value)
    assert "Hardmax x2, e.g. 'hm1'" in message and "Resize x1, e.g. 'resize'" in message
    assert "unsupported='elementwise'" in message


def test_unsupported_operators_as_elementwise_with_a_warning():
    with pytest.warns(OnnxImportWarning, match="Hardmax x2"):
        g = from_onnx(_with_unsupported(), unsupported="elementwise")
    g.validate()
    assert g.layer("hm1").op == "Elementwise"
    # Resize changes the shape (2, 8) -> (2, 4): a crop, then an element-wise layer.
    assert g.layer("resize").outputs[0].shape == (2, 4)
    assert g.layer("fc2").inputs[0].shape == (2, 4)


def test_other_domains_are_unsupported():
    n = helper.make_node("FusedGemm", ["x", "W"], ["y"], name="fused", domain="com.microsoft")
    m = model([n], [vi("x", [2, 8])], [vi("y", [2, 8])], [w("W", 8, 8)])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(FormatError, match="FusedGemm \\(domain 'com.microsoft'\\)"):
        from_onnx(m)


def test_supported_ops_cover_the_issue_list():
    wanted = {"Gemm", "MatMul", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization",
              "LayerNormalization", "Softmax", "Relu", "Gelu", "Sigmoid", "Tanh", "Add", "Mul", "Concat", "Split",
              "Reshape", "Flatten", "Transpose", "Gather", "LSTM", "ReduceMean", "Dropout", "Identity", "Shape",
              "Slice", "Cast", "Unsqueeze", "Constant"}
    assert wanted <= SUPPORTED_OPS


def _symbolic_model():
    x = helper.make_tensor_value_info("x", F, ["N", 8])
    return model([node("MatMul", ["x", "W"], ["y"], name="fc")], [x], [vi("y", [None, 4])], [w("W", 8, 4)])


def test_symbolic_batch_needs_a_batch_size():
    with pytest.raises(FormatError, match="symbolic batch dimension 'N'.*batch="):
        from_onnx(_symbolic_model())
    assert from_onnx(_symbolic_model(), batch=128).layer("fc").size_of["b"] == 128


def test_other_symbolic_dimensions_need_sizes():
    x = helper.make_tensor_value_info("x", F, [2, "seq", 8])
    m = model([node("MatMul", ["x", "W"], ["y"], name="fc")], [x], [vi("y", [2, None, 4])], [w("W", 8, 4)])
    with pytest.raises(FormatError, match="symbolic dimension 'seq'"):
        from_onnx(m)
    assert from_onnx(m, symbols={"seq": 50}).layer("fc").size_of["s"] == 50


def test_batch_override_rescales_reshape_targets_fixed_at_export():
    nodes = [node("MatMul", ["x", "W"], ["h"], name="fc"), const("shape", [4 * 6, 8]),
             node("Reshape", ["h", "shape"], ["y"], name="flatten")]
    m = model(nodes, [vi("x", [4, 6, 8])], [vi("y", [24, 8])], [w("W", 8, 8)])
    g = from_onnx(m, batch=16)
    assert g.layer("flatten").outputs[0].shape == (96, 8)
    with pytest.raises(GraphError, match="positive integer"):
        from_onnx(m, batch=0)


# -- safety: external data, malformed and hostile files ---------------------------------------------


def _external(location):
    t = onnx.TensorProto()
    t.name, t.data_type = "W", F
    t.dims.extend([8, 4])
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "128")):
        e = t.external_data.add()
        e.key, e.value = key, value
    return model([node("MatMul", ["x", "W"], ["y"], name="fc")], [vi("x", [2, 8])], [vi("y", [2, 4])], [t])


@pytest.mark.parametrize("location", ["weights.bin", "/etc/passwd", "../../../../etc/shadow", "/dev/zero"])
def test_external_data_is_never_read(location, monkeypatch, tmp_path):
    import builtins

    data = _external(location).SerializeToString()
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        assert str(file) == str(path), f"the importer opened {file!r}"
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    g = from_onnx(path)
    assert g.parameter_count == 32
    g = from_onnx(data)
    assert g.layer("fc").weights[0].shape == (4, 8)


def test_a_reshape_target_in_external_data_is_reported():
    t = onnx.TensorProto()
    t.name, t.data_type = "shape", I64
    t.dims.extend([2])
    t.data_location = onnx.TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", "x.bin"
    nodes = [node("MatMul", ["x", "W"], ["h"], name="fc"), node("Reshape", ["h", "shape"], ["y"], name="reshape")]
    m = model(nodes, [vi("x", [2, 8])], [vi("y", [4, 4])], [w("W", 8, 8), t])
    with pytest.raises(FormatError, match="'reshape' \\(Reshape\\).*target shape.*external data"):
        from_onnx(m)


def _mlp_bytes():
    nodes = [node("Gemm", ["x", "W"], ["h"], name="fc", transB=1), node("Relu", ["h"], ["y"])]
    return model(nodes, [vi("x", [4, 8])], [vi("y", [4, 8])], [w("W", 8, 8)]).SerializeToString()


@pytest.mark.parametrize("data, message", [
    (b"", "empty"),
    (b"\x00\x01\x02garbage\xff\xfe" * 10, "not a valid ONNX file|no graph|no nodes|no opset"),
    (b'{"format": "pase-graph"}', "not a valid ONNX file|no graph|no nodes|no opset"),
])
def test_garbage_is_refused(data, message):
    with pytest.raises(FormatError, match=message):
        from_onnx(data)


def test_every_truncation_of_a_model_gives_a_pase_error():
    data = _mlp_bytes()
    for cut in range(0, len(data), 7):
        try:
            from_onnx(data[:cut])
        except PaseError as exc:
            assert str(exc)
        # A protobuf cut at a field boundary may still parse into a (smaller) valid model.


def test_size_limit():
    data = _mlp_bytes()
    with pytest.raises(FormatError, match="at most 0 MiB|MiB; at most"):
        from_onnx(data, max_bytes=100)
    assert MAX_ONNX_BYTES >= 100 * 2**20


def test_cycle_dangling_input_and_duplicate_output_are_refused():
    cyc = model([node("Relu", ["b"], ["a"], name="r1"), node("Relu", ["a"], ["b"], name="r2")],
                [vi("x", [2, 2])], [vi("a", [2, 2])])
    with pytest.raises(FormatError, match="cycle"):
        from_onnx(cyc)
    dangling = model([node("Relu", ["ghost"], ["y"], name="r")], [vi("x", [2, 2])], [vi("y", [2, 2])])
    with pytest.raises(FormatError, match="reads tensor 'ghost'"):
        from_onnx(dangling)
    dup = model([node("Relu", ["x"], ["y"], name="r1"), node("Relu", ["x"], ["y"], name="r2")],
                [vi("x", [2, 2])], [vi("y", [2, 2])])
    with pytest.raises(FormatError, match="produced twice"):
        from_onnx(dup)


def test_zero_sized_and_absurd_inputs_are_refused():
    zero = model([node("Relu", ["x"], ["y"])], [vi("x", [0, 8])], [vi("y", [0, 8])])
    with pytest.raises(FormatError, match="zero-sized"):
        from_onnx(zero)
    huge = model([node("MatMul", ["x", "W"], ["y"], name="fc")], [vi("x", [2**40, 8])], [vi("y", [2**40, 4])],
                 [w("W", 8, 4)])
    with pytest.raises(FormatError, match="absurdly large"):
        from_onnx(huge)


def test_a_model_without_layers_or_connections():
    only_shapes = model([node("Shape", ["x"], ["y"])], [vi("x", [2, 2])], [vi("y", [2], I64)])
    with pytest.raises(GraphError, match="no layers"):
        from_onnx(only_shapes)
    two = model([node("MatMul", ["x", "W"], ["a"], name="f1"), node("MatMul", ["z", "W"], ["b"], name="f2")],
                [vi("x", [2, 8]), vi("z", [2, 8])], [vi("a", [2, 8]), vi("b", [2, 8])], [w("W", 8, 8)])
    with pytest.raises(GraphError, match="not connected"):
        from_onnx(two)


def test_no_warnings_on_a_clean_import():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_onnx(_mlp_bytes())


def test_masks_from_constants_fold_whatever_the_operator():
    # A causal mask: Trilu of a constant (not an operator pase maps) is just a constant.
    nodes = [
        node("MatMul", ["x", "W"], ["scores"], name="scores"),
        const("shape", [6, 6]), node("ConstantOfShape", ["shape"], ["ones"], value=numpy_helper.from_array(
            np.array([1.0], np.float32))),
        node("Trilu", ["ones"], ["mask"], upper=0),
        node("Mul", ["scores", "mask"], ["y"], name="masked"),
    ]
    g = from_onnx(model(nodes, [vi("x", [2, 6, 8])], [vi("y", [2, 6, 6])], [w("W", 8, 6)]))
    assert ops(g) == ["Einsum"] and g.layer("scores").param_dict["pointwise"] == 1


def test_an_op_combining_a_tensor_with_a_function_of_itself_is_fused():
    # x * sigmoid(x) (SiLU) after a linear layer: two pointwise ops of that layer.
    nodes = [node("MatMul", ["x", "W"], ["h"], name="fc"), node("Sigmoid", ["h"], ["s"]),
             node("Mul", ["h", "s"], ["y"])]
    g = from_onnx(model(nodes, [vi("x", [4, 8])], [vi("y", [4, 8])], [w("W", 8, 8)]))
    assert ops(g) == ["FullyConnected"] and g.layer("fc").param_dict["pointwise"] == 2


def test_constant_folding_never_builds_huge_arrays():
    # (2^20, 1) + (1, 2^20) would be 2^40 elements: kept as a shape, not computed.
    a = numpy_helper.from_array(np.zeros((2**20, 1), np.float32), "a")
    b = numpy_helper.from_array(np.zeros((1, 2**20), np.float32), "b")
    nodes = [node("Add", ["a", "b"], ["big"]), node("Shape", ["big"], ["s"]),
             node("MatMul", ["x", "W"], ["y"], name="fc")]
    g = from_onnx(model(nodes, [vi("x", [2, 8])], [vi("y", [2, 8]), vi("s", [2], I64)], [a, b, w("W", 8, 8)]))
    assert ops(g) == ["FullyConnected"]


# -- hostile models: memory and size bounds -------------------------------------------------------

# from_onnx(path, unsupported=...) under a 4 GB address-space cap, warnings off; prints "ok" or the
# message, then the process's peak memory in KiB (VmHWM: this program's own, whereas a child's
# ru_maxrss also counts the parent it was forked from, a large test process).
_CAPPED_IMPORT = """
import resource, sys, warnings
hard = resource.getrlimit(resource.RLIMIT_AS)[1]
cap = 4 << 30 if hard == resource.RLIM_INFINITY else min(4 << 30, hard)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
warnings.simplefilter("ignore")
from pase.errors import PaseError
from pase.io.onnx import from_onnx
try:
    from_onnx(sys.argv[1], unsupported=sys.argv[2])
    print("ok")
except PaseError as exc:
    print(exc)
print([line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")][0])
"""


def _import_capped(tmp_path, m, unsupported="error") -> tuple[str, float]:
    """``from_onnx`` of model ``m`` in a process of its own under a 4 GB cap, killed after
    two minutes: ("ok" or the error message, or the exit status and the output's end
    when the process failed; peak memory in MiB)."""
    path = tmp_path / "model.onnx"
    path.write_bytes(m.SerializeToString())
    proc = subprocess.Popen([sys.executable, "-c", _CAPPED_IMPORT, str(path), unsupported], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    killer = threading.Timer(120, proc.kill)
    killer.start()
    try:
        out = proc.stdout.read()
        proc.wait()
    finally:
        killer.cancel()
        proc.stdout.close()
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {out[-300:]}", float("nan")
    message, peak_kib = out.strip().rsplit("\n", 1)
    return message.strip(), int(peak_kib) / 1024


def test_shape_inference_holds_nothing_per_element_of_a_tensor(tmp_path):
    # ONNX's data propagation held an entry per element of the 2**30 ids once Cast read
    # them (over 4 GB); the Hardmax makes the importer run shape inference.
    nodes = [node("MatMul", ["x", "W"], ["y"], name="fc"), node("Cast", ["ids"], ["f"], to=F),
             node("Hardmax", ["f"], ["z"], name="hardmax")]
    m = model(nodes, [vi("x", [2, 8]), vi("ids", [2**30], I64)], [vi("y", [2, 8]), vi("z", None)], [w("W", 8, 8)])
    outcome, peak = _import_capped(tmp_path, m, "elementwise")  # first: a regression must not take this process
    assert outcome == "ok" and peak < 512, (outcome, peak)
    with pytest.warns(OnnxImportWarning, match="Hardmax"):
        assert ops(from_onnx(m, unsupported="elementwise")) == ["FullyConnected"]


def test_shapes_computed_from_folded_values_are_inferred_without_data_propagation():
    # Resize to sizes computed from the input's shape: pase's folded sizes stand in for
    # ONNX's data propagation, so the unsupported Resize still gets its (2, 4, 16, 16) shape.
    nodes = [node("Conv", ["x", "W"], ["h"], name="conv", pads=[1, 1, 1, 1]), node("Shape", ["h"], ["s"]),
             node("Slice", ["s", "zero", "two"], ["bc"]), node("Concat", ["bc", "hw"], ["sizes"], axis=0),
             node("Resize", ["h", "", "", "sizes"], ["up"], name="resize"), node("Conv", ["up", "W2"], ["y"], name="conv2")]
    inits = [w("W", 4, 3, 3, 3), w("W2", 4, 4, 1, 1), w("zero", 1, value=[0]), w("two", 1, value=[2]),
             w("hw", 2, value=[16, 16])]
    with pytest.warns(OnnxImportWarning, match="Resize"):
        g = from_onnx(model(nodes, [vi("x", [2, 3, 8, 8])], [vi("y", None)], inits), unsupported="elementwise")
    assert g.layer("resize").outputs[0].shape == (2, 4, 16, 16)
    assert g.layer("conv2").inputs[0].shape == (2, 4, 16, 16)


def _nested_functions(levels: int, calls: int, name: str = "f"):
    """Local function f0 is two Relus, f(k) calls f(k-1) ``calls`` times; the graph calls f(levels)
    after a MatMul and, in both branches of an If, once more."""
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    functions = [helper.make_function("local", f"{name}0", ["a"], ["b"],
                                      [helper.make_node("Relu", ["a"], ["t"]), helper.make_node("Relu", ["t"], ["b"])],
                                      opsets)]
    for k in range(1, levels + 1):
        names = ["a"] + [f"t{j}" for j in range(calls - 1)] + ["b"]
        functions.append(helper.make_function("local", f"{name}{k}", ["a"], ["b"], [
            helper.make_node(f"{name}{k - 1}", [names[j]], [names[j + 1]], domain="local") for j in range(calls)],
            opsets))
    top = f"{name}{levels}"
    branch = helper.make_graph([helper.make_node(top, ["h"], ["z"], domain="local")], "branch", [], [vi("z", [2, 8])])
    nodes = [node("MatMul", ["x", "W"], ["h"], name="fc"), helper.make_node(top, ["h"], ["y"], name="call", domain="local"),
             node("If", ["c"], ["u"], name="if", then_branch=branch, else_branch=branch)]
    m = model(nodes, [vi("x", [2, 8]), vi("c", [], TensorProto.BOOL)], [vi("y", None), vi("u", None)], [w("W", 8, 8)])
    m.opset_import.append(helper.make_opsetid("local", 1))
    m.functions.extend(functions)
    return m


def _all_nodes(graph) -> int:
    """Nodes of ``graph`` and of its subgraphs."""
    return sum(1 + sum(_all_nodes(a.g) for a in n.attribute if a.type == onnx.AttributeProto.GRAPH) for n in graph.node)


def test_local_functions_are_counted_before_inlining(tmp_path):
    # 2 * 8**13 = 1.1e12 nodes inlined, from a 4 KB file: the inliner aborted the process.
    outcome, peak = _import_capped(tmp_path, _nested_functions(13, 8))
    assert ("has 3.3e+12 nodes once its local functions are inlined (function 'local.f13' alone expands to "
            "1.1e+12)") in outcome
    assert f"at most {MAX_NODES:,} are accepted" in outcome and peak < 512, (outcome, peak)


def test_the_count_before_inlining_is_exact():
    from onnx import inliner

    m = _nested_functions(3, 3)
    n = _all_nodes(inliner.inline_local_functions(m).graph)
    assert n == 1 + 1 + 2 * 2 * 3**3 + 2 * 3**3  # MatMul, If, the If's branches, the call
    reader.check_expanded_size(m, limit=n)
    with pytest.raises(FormatError, match=f"has {n} nodes once its local functions are inlined "
                                          r"\(function 'local.f3' alone expands to 54\)"):
        reader.check_expanded_size(m, limit=n - 1)


def test_a_local_function_calling_itself_is_refused():
    m = _nested_functions(2, 2)
    m.functions[0].node[0].op_type, m.functions[0].node[0].domain = "f2", "local"
    with pytest.raises(FormatError, match="local function 'local.f2' calls itself .*'local.f2' -> 'local.f1' -> "
                                          "'local.f0'"):
        from_onnx(m)


def test_derived_sizes_are_held_to_the_limits_graph_files_get():
    conv = model([node("Conv", ["x", "W"], ["y"], name="conv", pads=[2**40, 0, 2**40, 0])], [vi("x", [2, 3, 8, 8])],
                 [vi("y", None)], [w("W", 4, 3, 3, 3)])
    with pytest.raises(FormatError, match=f"node 'conv' \\(Conv\\): dimension h = {2**41 + 6} of its Conv2D layer is "
                                          f"absurdly large \\(at most {MAX_DIM}\\)"):
        from_onnx(conv)
    concat = model([node("Concat", ["a", "b"], ["y"], name="cat", axis=0)], [vi("a", [2**30, 2]), vi("b", [2**30, 2])],
                   [vi("y", None)])
    with pytest.raises(FormatError, match=f"node 'cat' \\(Concat\\): dimension {2**31} .* absurdly large"):
        from_onnx(concat)
    # Every axis within MAX_DIM, but (2**31 - 1) x 2**18 outputs are more than MAX_TENSOR_ELEMENTS.
    weight = onnx.TensorProto(name="W", data_type=F, dims=[2**17, 2**18])
    fc = model([node("MatMul", ["x", "W"], ["y"], name="fc")], [vi("x", [2**31 - 1, 2**17])], [vi("y", None)], [weight])
    with pytest.raises(FormatError, match=r"node 'fc' \(MatMul\): tensor 'y' of shape \(2147483647, 262144\) of its "
                                          "FullyConnected layer is absurdly large"):
        from_onnx(fc)


def test_long_attribute_lists_are_refused():
    big = helper.make_node("Constant", [], ["k"], name="table", value_ints=[0] * (MAX_ATTRIBUTE_VALUES + 1))
    m = model([big, node("MatMul", ["x", "W"], ["y"], name="fc")], [vi("x", [2, 8])], [vi("y", None)], [w("W", 8, 8)])
    with pytest.raises(FormatError, match=f"node 'table' \\(Constant\\): attribute 'value_ints' lists "
                                          f"{MAX_ATTRIBUTE_VALUES + 1:,} values"):
        from_onnx(m)


def test_folded_constants_share_one_budget(monkeypatch):
    # A 1 MiB budget: the first 256 KiB constant fits its large half, later ones stay
    # shapes; the small reshape target computed at the end is still folded.
    monkeypatch.setattr(importer, "MAX_FOLD_BYTES", 2**20)
    nodes = [node("ConstantOfShape", ["n"], ["c0"], value=numpy_helper.from_array(np.array([1.0])))]
    nodes += [node("Neg", [f"c{i}"], [f"c{i + 1}"]) for i in range(4)]
    nodes += [node("MatMul", ["x", "W"], ["h"], name="fc"), node("Concat", ["four", "four"], ["target"], axis=0),
              node("Reshape", ["h", "target"], ["y"], name="reshape")]
    m = model(nodes, [vi("x", [2, 8])], [vi("y", None), vi("c4", None, TensorProto.DOUBLE)],
              [w("W", 8, 8), w("n", 1, value=[2**15]), w("four", 1, value=[4])])
    imp = importer.Importer(m, batch=None, symbols=None, unsupported="error", name="budget")
    g = imp.run()
    assert g.layer("reshape").outputs[0].shape == (4, 4)
    assert imp.values["c0"].value is not None and imp.values["c4"].value is None and imp.values["c4"].shape == (2**15,)
    assert imp.held_bytes <= 2**20


def test_long_messages_are_cut_in_the_middle():
    parts = [1] * 4000
    m = model([node("MatMul", ["x", "W"], ["h"], name="fc"),
               node("Split", ["h"], [f"y{i}" for i in range(4000)], name="split", axis=1, split=parts)],
              [vi("x", [2, 8])], [vi("y0", None)], [w("W", 8, 8)], opset=12)
    with pytest.raises(FormatError) as info:
        from_onnx(m)
    message = str(info.value)
    assert len(message) < 400 and message.startswith("node 'split' (Split): parts [1, 1")
    assert " ... " in message and message.endswith("do not split axis 1 of (2, 8) into 4000 outputs")


def test_the_parse_estimate_of_a_large_graph_is_within_the_limit():
    # 20,000 nodes with long names and a value_info each, scaled to MAX_NODES: within the limit.
    n = 20_000
    nodes, infos, prev = [], [], "x"
    for i in range(n):
        out = f"/model/layers.{i // 10}/mlp/act/Add_{i}_output_0"
        nodes.append(node("Add", [prev, "one"], [out], name=f"/model/layers.{i // 10}/mlp/act/Add_{i}"))
        infos.append(vi(out, ["batch", 128, 768]))
        prev = out
    graph = helper.make_graph(nodes, "long", [vi("x", ["batch", 128, 768])], [vi(prev, None)], [w("one", 1)],
                              value_info=infos)
    data = helper.make_model(graph).SerializeToString()
    assert reader.parse_cost(data, MAX_ONNX_PARSE_BYTES) * (MAX_NODES / n) < MAX_ONNX_PARSE_BYTES * 0.6


def test_docstring_examples():
    import doctest

    import pase.io.onnx

    failures, tried = doctest.testmod(pase.io.onnx)
    assert failures == 0 and tried > 0
