"""The ONNX converter registry: every registered operator imports, the registry is the
one place that decides what maps, and the checks a registration declares hold.

Each registered operator gets a tiny model built with ``onnx.helper`` in which it
must map to the pase layer the package docstring promises (a pointwise op fused
into the GEMM before it, a crop as a Split...). A new registration without a case
here fails :func:`test_every_registered_operator_has_a_case`.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("CI"):
    import onnx  # noqa: F401  (CI installs the test extra: these tests must run there, never skip)
else:
    pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from pase.errors import FormatError
from pase.io.onnx import SUPPORTED_OPS, OnnxImportWarning, from_onnx
from pase.io.onnx.convert import CONVERTERS, Converter, converter
from pase.io.onnx.values import Act

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def w(name, *shape, value=None, dtype=np.float32):
    arr = np.ones(shape, dtype) if value is None else np.asarray(value, dtype)
    return numpy_helper.from_array(arr, name)


def node(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(op, inputs, outputs, name=name or outputs[0], **attrs)


def model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def fc(out="h", n=8, x="x"):
    """``x (4, 8) @ W (8, n)``: a FullyConnected layer ``fc`` to build on."""
    return node("MatMul", [x, f"W_{out}"], [out], name=f"fc_{out}"), w(f"W_{out}", 8, n)


X = vi("x", [4, 8])
IMG = vi("x", [2, 3, 8, 8])

UNARY = ["Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf", "Exp",
         "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Softplus", "Softsign", "Mish", "Clip", "Sin", "Cos", "Sign", "Floor",
         "Ceil", "Round", "Not", "ThresholdedRelu", "IsNaN", "IsInf", "Swish", "PRelu"]
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less", "Greater",
          "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "BitwiseAnd", "BitwiseOr"]
REDUCE = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
          "ReduceSumSquare"]


def _pointwise(op):
    # After a GEMM, a pointwise op is a parameter of the GEMM, not a layer.
    mm, wh = fc()
    extra = ["slope"] if op == "PRelu" else []
    m = model([mm, node(op, ["h", *extra], ["y"])], [X], [vi("y", [4, 8])], [wh, w("slope", 8)])
    return m, lambda g: [layer.op for layer in g] == ["FullyConnected"] and g.layer("fc_h").param_dict["pointwise"] == 1


def _binary(op):
    # Two different activations: one Elementwise layer reading both.
    (m1, w1), (m2, w2) = fc("h1"), fc("h2")
    ins = ["h1", "h1", "h2"] if op == "Where" else ["h1", "h2"]
    m = model([m1, m2, node(op, ins, ["y"], name="op")], [X], [vi("y", [4, 8])], [w1, w2])
    return m, lambda g: g.layer("op").op == "Elementwise" and g.layer("op").param_dict["inputs"] == 2


def _pass_through(op):
    mm, wh = fc()
    attrs = {"to": F} if op == "Cast" else {}
    ins = ["h", "like"] if op == "CastLike" else ["h"]
    m = model([mm, node(op, ins, ["y"], **attrs)], [X], [vi("y", [4, 8])], [wh, w("like", 1)])
    return m, lambda g: [layer.op for layer in g] == ["FullyConnected"] and g.layer("fc_h").param_dict["pointwise"] == 0


def _bias_from(nodes, inits=()):
    # A constant computed by ``nodes`` into "c" (shape (8,) or (1, 8)), added to a GEMM: its bias.
    mm, wh = fc()
    m = model([mm, *nodes, node("Add", ["h", "c"], ["y"])], [X], [vi("y", [4, 8])], [wh, *inits])
    return m, lambda g: [layer.op for layer in g] == ["FullyConnected"] and g.layer("fc_h").param_dict["bias"]


def _reduce(op):
    mm, wh = fc()
    m = model([mm, node(op, ["h", "axes"], ["y"], name="red", keepdims=0)], [X], [vi("y", [4])],
              [wh, w("axes", 1, value=[1], dtype=np.int64)])
    return m, lambda g: g.layer("red").op == "ReduceMean" and g.layer("red").param_dict["reduce"] == ["n"]


def _index_tensor(nodes, inits=()):
    # An index tensor "i" computed from a GEMM's output (no layer, no gradient) scaling that
    # output: the product is a pointwise op of the GEMM.
    mm, wh = fc()
    tail = [node("Cast", ["i"], ["f"], to=F), node("Mul", ["h", "f"], ["y"])]
    m = model([mm, *nodes, *tail], [X], [vi("y", [4, 8])], [wh, *inits])
    return m, lambda g: [layer.op for layer in g] == ["FullyConnected"] and g.layer("fc_h").param_dict["pointwise"] == 1


def _named(nodes, inputs, outputs, inits, layer, op):
    m = model(nodes, inputs, outputs, inits)
    return m, lambda g: g.layer(layer).op == op


def _case(op):
    """``(model, check)``: a tiny model using ``op``, and a check of the graph it imports to."""
    if op in UNARY:
        return _pointwise(op)
    if op in BINARY:
        return _binary(op)
    if op in ("Identity", "Dropout", "Cast", "CastLike"):
        return _pass_through(op)
    if op in REDUCE:
        return _reduce(op)
    i64 = dict(dtype=np.int64)
    mm, wh = fc()
    narrow, wn = fc(n=1)
    conv = node("Conv", ["x", "K"], ["h"], name="conv", pads=[1, 1, 1, 1])
    kernel = w("K", 4, 3, 3, 3)
    cases = {
        "Constant": lambda: _bias_from([helper.make_node("Constant", [], ["c"], value=w("v", 8))]),
        "ConstantOfShape": lambda: _bias_from([node("ConstantOfShape", ["s"], ["c"])], [w("s", 1, value=[8], **i64)]),
        "Range": lambda: _bias_from([node("Range", ["r0", "r1", "r2"], ["c"])],
                                    [w("r0", value=0), w("r1", value=8), w("r2", value=1)]),
        "NonZero": lambda: _bias_from([node("NonZero", ["nz"], ["c"])], [w("nz", 8)]),
        "Shape": lambda: _named([mm, node("Shape", ["h"], ["s"]), node("Reshape", ["h", "s"], ["y"], name="rs")],
                                [X], [vi("y", [4, 8])], [wh], "fc_h", "FullyConnected"),
        "Size": lambda: _named([mm, node("Size", ["h"], ["n"]), node("Unsqueeze", ["n", "ax"], ["s"]),
                                node("Reshape", ["h", "s"], ["y"], name="rs")],
                               [X], [vi("y", [32])], [wh, w("ax", 1, value=[0], **i64)], "rs", "Reshape"),
        "Gemm": lambda: _named([node("Gemm", ["x", "W"], ["y"], name="gemm", transB=1)], [X], [vi("y", [4, 16])],
                               [w("W", 16, 8)], "gemm", "FullyConnected"),
        "MatMul": lambda: _named([mm], [X], [vi("h", [4, 8])], [wh], "fc_h", "FullyConnected"),
        "Einsum": lambda: _named([node("Einsum", ["x", "W"], ["y"], name="es", equation="bc,cn->bn")], [X],
                                 [vi("y", [4, 16])], [w("W", 8, 16)], "es", "Einsum"),
        "Conv": lambda: _named([conv], [IMG], [vi("h", [2, 4, 8, 8])], [kernel], "conv", "Conv2D"),
        "BatchNormalization": lambda: _named(
            [node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], name="bn")], [IMG], [vi("y", [2, 3, 8, 8])],
            [w(n, 3) for n in "gbmv"], "bn", "BatchNorm"),
        "InstanceNormalization": lambda: _named(
            [node("InstanceNormalization", ["x", "g", "b"], ["y"], name="in")], [IMG], [vi("y", [2, 3, 8, 8])],
            [w(n, 3) for n in "gb"], "in", "BatchNorm"),
        "LayerNormalization": lambda: _named([node("LayerNormalization", ["x", "g"], ["y"], name="ln")], [X],
                                             [vi("y", [4, 8])], [w("g", 8)], "ln", "LayerNorm"),
        "Softmax": lambda: _named([node("Softmax", ["x"], ["y"], name="sm")], [X], [vi("y", [4, 8])], [], "sm",
                                  "Softmax"),
        "LogSoftmax": lambda: _named([node("LogSoftmax", ["x"], ["y"], name="sm")], [X], [vi("y", [4, 8])], [], "sm",
                                     "Softmax"),
        "SoftmaxCrossEntropyLoss": lambda: _named(
            [node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"], name="loss", reduction="none")],
            [X, vi("t", [4], I64)], [vi("y", [4])], [], "loss", "SoftmaxCrossEntropy"),
        # LogSoftmax then the NLL loss: one vertex, named after the LogSoftmax.
        "NegativeLogLikelihoodLoss": lambda: _named(
            [node("LogSoftmax", ["x"], ["p"], name="sm"), node("NegativeLogLikelihoodLoss", ["p", "t"], ["y"],
                                                                reduction="none")],
            [X, vi("t", [4], I64)], [vi("y", [4])], [], "sm", "SoftmaxCrossEntropy"),
        "Concat": lambda: _named([*[n for n, _ in (fc("h1"), fc("h2"))], node("Concat", ["h1", "h2"], ["y"], name="cat",
                                                                                 axis=1)],
                                 [X], [vi("y", [4, 16])], [fc("h1")[1], fc("h2")[1]], "cat", "Concat"),
        "Split": lambda: _named([mm, node("Split", ["h"], ["y1", "y2"], name="split", axis=1, num_outputs=2)], [X],
                                [vi("y1", [4, 4]), vi("y2", [4, 4])], [wh], "split", "Split"),
        "Slice": lambda: _named([mm, node("Slice", ["h", "s0", "s1", "ax"], ["y"], name="sl")], [X], [vi("y", [4, 3])],
                                [wh, w("s0", 1, value=[0], **i64), w("s1", 1, value=[3], **i64),
                                 w("ax", 1, value=[1], **i64)], "sl", "Split"),
        "Reshape": lambda: _named([mm, node("Reshape", ["h", "s"], ["y"], name="rs")], [X], [vi("y", [4, 2, 4])],
                                  [wh, w("s", 3, value=[4, 2, 4], **i64)], "rs", "Reshape"),
        "Flatten": lambda: _named([conv, node("Flatten", ["h"], ["y"], name="flat")], [IMG], [vi("y", [2, 256])],
                                  [kernel], "flat", "Reshape"),
        "Squeeze": lambda: _named([narrow, node("Squeeze", ["h", "ax"], ["y"], name="sq")], [X], [vi("y", [4])],
                                  [wn, w("ax", 1, value=[1], **i64)], "sq", "Reshape"),
        "Unsqueeze": lambda: _named([mm, node("Unsqueeze", ["h", "ax"], ["y"], name="unsq")], [X],
                                    [vi("y", [4, 1, 8])], [wh, w("ax", 1, value=[1], **i64)], "unsq", "Reshape"),
        "Transpose": lambda: _named([mm, node("Transpose", ["h"], ["y"], name="tr", perm=[1, 0])], [X],
                                    [vi("y", [8, 4])], [wh], "tr", "Transpose"),
        "Gather": lambda: _named([node("Gather", ["E", "ids"], ["y"], name="emb")], [vi("ids", [4, 5], I64)],
                                 [vi("y", [4, 5, 16])], [w("E", 100, 16)], "emb", "Embedding"),
        "LSTM": lambda: _named([node("LSTM", ["x", "Wl", "Rl"], ["y"], name="lstm", hidden_size=16)],
                               [vi("x", [5, 4, 8])], [vi("y", [5, 1, 4, 16])], [w("Wl", 1, 64, 8), w("Rl", 1, 64, 16)],
                               "lstm", "LSTM"),
        "Expand": lambda: _named([narrow, node("Expand", ["h", "s"], ["y"], name="ex")], [X], [vi("y", [4, 8])],
                                 [wn, w("s", 2, value=[4, 8], **i64)], "ex", "Concat"),
        "Tile": lambda: _named([mm, node("Tile", ["h", "r"], ["y"], name="tile")], [X], [vi("y", [4, 16])],
                               [wh, w("r", 2, value=[1, 2], **i64)], "tile", "Concat"),
        "Pad": lambda: _named([mm, node("Pad", ["h", "p"], ["y"], name="pad")], [X], [vi("y", [4, 10])],
                              [wh, w("p", 4, value=[0, 1, 0, 1], **i64)], "pad", "Concat"),
        # Routing: TopK's values a crop, its indices, ArgMax and OneHot index tensors,
        # gathers at computed indices crops, scatters element-wise with their updates.
        "TopK": lambda: _named([mm, node("TopK", ["h", "k"], ["v", "i"], name="topk", axis=1),
                                node("MatMul", ["v", "W2"], ["y"], name="fc2")], [X], [vi("y", [4, 3])],
                               [wh, w("k", 1, value=[4], **i64), w("W2", 4, 3)], "topk", "Split"),
        "ArgMax": lambda: _index_tensor([node("ArgMax", ["h"], ["i"], axis=1)]),
        "ArgMin": lambda: _index_tensor([node("ArgMin", ["h"], ["i"], axis=1)]),
        # A full-size mask times the GEMM's output: an Elementwise layer whose mask input no edge feeds.
        "OneHot": lambda: (_index_tensor([node("ArgMax", ["h"], ["a"], axis=1, keepdims=0),
                                          node("OneHot", ["a", "depth", "vals"], ["i"])],
                                         [w("depth", value=8, **i64), w("vals", 2, value=[0, 1], **i64)])[0],
                           lambda g: g.layer("y").op == "Elementwise" and len(g.in_edges("y")) == 1),
        "CumSum": lambda: _named([mm, node("CumSum", ["h", "ax"], ["y"])], [X], [vi("y", [4, 8])],
                                 [wh, w("ax", value=1, **i64)], "fc_h", "FullyConnected"),
        "GatherElements": lambda: _named([mm, node("GatherElements", ["h", "gi"], ["y"], name="ge", axis=1)], [X],
                                         [vi("y", [4, 3])], [wh, w("gi", 4, 3, value=np.zeros((4, 3)), **i64)],
                                         "ge", "Split"),
        "GatherND": lambda: _named([mm, node("GatherND", ["h", "ni"], ["y"], name="gnd", batch_dims=1)], [X],
                                   [vi("y", [4, 3])], [wh, w("ni", 4, 3, 1, value=np.zeros((4, 3, 1)), **i64)],
                                   "gnd", "Split"),
        "ScatterElements": lambda: _named(
            [mm, fc("u", n=2)[0], node("ScatterElements", ["h", "si", "u"], ["y"], name="sc", axis=1)], [X],
            [vi("y", [4, 8])], [wh, fc("u", n=2)[1], w("si", 4, 2, value=np.zeros((4, 2)), **i64)], "sc", "Elementwise"),
        "ScatterND": lambda: _named(
            [mm, fc("u")[0], node("ScatterND", ["h", "ni", "u"], ["y"], name="sc")], [X], [vi("y", [4, 8])],
            [wh, fc("u")[1], w("ni", 4, 1, value=[[0], [1], [2], [3]], **i64)], "sc", "Elementwise"),
    }
    for pool in ("MaxPool", "AveragePool", "LpPool"):
        cases[pool] = lambda pool=pool: _named([node(pool, ["x"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])],
                                               [IMG], [vi("y", [2, 3, 4, 4])], [], "pool", "Pooling")
    for pool in ("GlobalAveragePool", "GlobalMaxPool"):
        cases[pool] = lambda pool=pool: _named([node(pool, ["x"], ["y"], name="pool")], [IMG], [vi("y", [2, 3, 1, 1])],
                                               [], "pool", "Pooling")
    return cases[op]() if op in cases else None


def test_every_registered_operator_has_a_case():
    assert sorted(op for op in SUPPORTED_OPS if _case(op) is None) == []


@pytest.mark.parametrize("op", sorted(SUPPORTED_OPS))
def test_every_registered_operator_imports(op):
    m, check = _case(op)
    g = from_onnx(m)  # unsupported="error": a node that did not map would raise
    g.validate()
    assert check(g), [str(layer) for layer in g]


def test_an_unregistered_operator_is_unsupported():
    mm, wh = fc()
    m = model([mm, node("Hardmax", ["h"], ["y"], name="hm")], [X], [vi("y", [4, 8])], [wh])
    assert "Hardmax" not in CONVERTERS
    with pytest.raises(FormatError, match=r"cannot import: Hardmax x1, e.g. 'hm'"):
        from_onnx(m)
    with pytest.warns(OnnxImportWarning, match="Hardmax x1"):
        g = from_onnx(m, unsupported="elementwise")
    assert g.layer("hm").op == "Elementwise"


def test_a_registered_operator_in_another_domain_is_unsupported():
    mm, wh = fc()
    relu = helper.make_node("Relu", ["h"], ["y"], name="r", domain="com.example")
    m = model([mm, relu], [X], [vi("y", [4, 8])], [wh])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(FormatError, match=r"Relu \(domain 'com.example'\)"):
        from_onnx(m)


def _softmax_hardmax(imp, ins, attrs):
    x = ins[0]
    spec = imp.emit("Softmax", dict(shape=list(x.shape), dims=["b", "n"], axis="n"), [x])
    return [Act.of(spec, 0, x.batch_axis)]


def test_registering_a_converter_is_all_it_takes_to_map_an_operator(monkeypatch):
    monkeypatch.setitem(CONVERTERS, "Hardmax", Converter(_softmax_hardmax, act_first=True))
    mm, wh = fc()
    m = model([mm, node("Hardmax", ["h"], ["y"], name="hm")], [X], [vi("y", [4, 8])], [wh])
    g = from_onnx(m)
    assert [layer.op for layer in g] == ["FullyConnected", "Softmax"]
    assert g.layer("hm").inputs[0].shape == (4, 8)


class _Probe:
    """A converter that records its calls."""

    def __init__(self):
        self.calls = []

    def __call__(self, imp, ins, attrs):
        self.calls.append([type(v).__name__ for v in ins])
        return [ins[0]]


def _probe_model(inputs):
    mm, wh = fc()
    return model([mm, node("Probe", inputs, ["p"], name="probe"), node("Relu", ["p"], ["y"])], [X],
                 [vi("y", [4, 8])], [wh, w("c", 8)])


def test_a_registration_s_input_count_is_checked_before_the_converter(monkeypatch):
    probe = _Probe()
    monkeypatch.setitem(CONVERTERS, "Probe", Converter(probe, inputs=2))
    with pytest.raises(FormatError, match=r"'probe' \(Probe\): needs 2 input\(s\), has 1"):
        from_onnx(_probe_model(["h"]))
    monkeypatch.setitem(CONVERTERS, "Probe", Converter(probe, inputs=lambda opset: 3 if opset >= 18 else 2))
    with pytest.raises(FormatError, match=r"needs 3 input\(s\), has 2"):
        from_onnx(_probe_model(["h", "c"]))
    assert probe.calls == []


def test_act_first_refuses_a_constant_first_input(monkeypatch):
    probe = _Probe()
    monkeypatch.setitem(CONVERTERS, "Probe", Converter(probe, inputs=2, act_first=True))
    with pytest.raises(FormatError, match="input 0 must be an activation, but it is a constant"):
        from_onnx(_probe_model(["c", "h"]))
    assert probe.calls == []
    monkeypatch.setitem(CONVERTERS, "Probe", Converter(probe, inputs=2))
    from_onnx(_probe_model(["c", "h"]))
    assert probe.calls == [["Const", "Act"]]


def test_constant_inputs_are_folded_unless_the_converter_takes_them(monkeypatch):
    probe = _Probe()
    mm, wh = fc()
    m = model([mm, node("Probe", ["c"], ["p"], name="probe"), node("Add", ["h", "p"], ["y"])], [X],
              [vi("y", [4, 8])], [wh, w("c", 8)])
    monkeypatch.setitem(CONVERTERS, "Probe", Converter(probe))
    from_onnx(m)
    assert probe.calls == []
    monkeypatch.setitem(CONVERTERS, "Probe", Converter(probe, on_constants=True))
    g = from_onnx(m)
    assert probe.calls == [["Const"]]
    assert g.layer("fc_h").param_dict["bias"]  # the converter's constant became the bias


def test_an_operator_cannot_be_registered_twice():
    before = dict(CONVERTERS)
    with pytest.raises(ValueError, match="already have a converter"):
        converter("Hardmax", "Relu")(_softmax_hardmax)
    assert CONVERTERS == before
