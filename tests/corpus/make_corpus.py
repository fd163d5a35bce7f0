"""Write the broken-file corpus of this folder: files that pase must refuse with a clear message.

Run from the repository root (needs onnx): ``python tests/corpus/make_corpus.py``.

Every file here is refused by ``pase.io.load_model_file`` and by
``pase solve FILE --devices 4`` with a :class:`pase.errors.PaseError` whose
one-line message matches the regular expression recorded for it in
``expected.json`` (``tests/test_corpus.py`` checks both). The files are small;
cases that need a large file (over the size limit, too many layers) are made
by the test itself.
"""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
F, I64 = TensorProto.FLOAT, TensorProto.INT64

EXAMPLE = json.loads((ROOT / "docs" / "example-graph.json").read_text())


def graph_doc(**changes) -> dict:
    doc = copy.deepcopy(EXAMPLE)
    doc.update(changes)
    return doc


def layer(name, op, params, inputs=()):
    return {"name": name, "op": op, "params": params, "inputs": list(inputs)}


def fc(name, b=8, n=16, c=16, inputs=()):
    return layer(name, "FullyConnected", {"b": b, "n": n, "c": c}, inputs)


def json_cases() -> dict[str, tuple[bytes, str]]:
    text = json.dumps(EXAMPLE)
    cases = {
        "empty.json": (b"", "not valid JSON"),
        "whitespace.json": (b"   \n\t  ", "not valid JSON"),
        "truncated.json": (text[: len(text) // 2].encode(), "not valid JSON"),
        "binary.json": (bytes(range(256)) * 4, "not valid JSON"),
        "pickle.json": (pickle.dumps({"format": "pase-graph", "layers": [1, 2]}), "not valid JSON"),
        "deeply_nested.json": (b"[" * 40000 + b"]" * 40000, "nested too deeply"),
        "huge_integer.json": (('{"format": "pase-graph", "version": 1, "layers": [' + "9" * 6000 + "]}").encode(),
                              "not valid JSON"),
        "array.json": (b"[1, 2, 3]", "must hold a JSON object"),
        "wrong_format.json": (json.dumps(graph_doc(format="onnx")).encode(), "field 'format'"),
        "wrong_version.json": (json.dumps(graph_doc(version=99)).encode(), "field 'version'"),
        "no_layers.json": (json.dumps(graph_doc(layers=[])).encode(), "'layers' must be a non-empty list"),
        "layer_not_object.json": (json.dumps(graph_doc(layers=["fc1"])).encode(), "layer 0: must be an object"),
        "unknown_op.json": (json.dumps(graph_doc(layers=[layer("x", "Teleport", {})])).encode(), "unknown op 'Teleport'"),
        "missing_param.json": (json.dumps(graph_doc(layers=[layer("fc", "FullyConnected", {"b": 8, "n": 4})])).encode(),
                               "missing .*'c'"),
        "unknown_param.json": (json.dumps(graph_doc(layers=[layer("fc", "FullyConnected",
                                                                   {"b": 8, "n": 4, "c": 4, "colour": 1})])).encode(),
                               "unexpected keyword argument 'colour'"),
        "string_size.json": (json.dumps(graph_doc(layers=[fc("fc", b="64")])).encode(), "b must be a positive integer"),
        "float_size.json": (json.dumps(graph_doc(layers=[fc("fc", b=6.5)])).encode(), "b must be a positive integer"),
        "nan_size.json": (b'{"format": "pase-graph", "version": 1, "layers": [{"name": "fc", "op": "FullyConnected", '
                          b'"params": {"b": NaN, "n": 2, "c": 2}}]}', "b must be a positive integer"),
        "zero_sized.json": (json.dumps(graph_doc(layers=[fc("fc", b=0)])).encode(), "b must be a positive integer"),
        "negative_size.json": (json.dumps(graph_doc(layers=[fc("fc", n=-4)])).encode(), "n must be a positive integer"),
        "absurd_size.json": (json.dumps(graph_doc(layers=[fc("fc", b=10**15)])).encode(), "absurdly large"),
        "absurd_tensor.json": (json.dumps(graph_doc(layers=[layer("e", "Elementwise", {
            "shape": [2**30, 2**30, 2**30], "dims": ["b", "s", "d"], "inputs": 1})])).encode(), "elements"),
        "wrong_param_type.json": (json.dumps(graph_doc(layers=[layer("s", "Softmax", {"shape": 5, "dims": "bn"})])).encode(),
                                  "bad params for 'Softmax'|Softmax"),
        "bad_letters.json": (json.dumps(graph_doc(layers=[layer("s", "Softmax", {"shape": [8, 4], "dims": ["b"]})])).encode(),
                             "1 dimension names"),
        "bad_einsum.json": (json.dumps(graph_doc(layers=[layer("e", "Einsum", {"equation": "ab->c",
                                                                               "sizes": {"a": 2, "b": 2, "c": 2}})])).encode(),
                            "uses letters no operand has"),
        "bad_inputs_type.json": (json.dumps(graph_doc(layers=[fc("fc1"), fc("fc2", inputs=[5])])).encode(),
                                 r"inputs\[0\] must be null, a layer name"),
        "bad_output_index.json": (json.dumps(graph_doc(layers=[fc("fc1"), fc("fc2", inputs=[["fc1", 3]])])).encode(),
                                  "has no output 3"),
        "unknown_producer.json": (json.dumps(graph_doc(layers=[fc("fc1"), fc("fc2", inputs=["fc0"])])).encode(),
                                  "no earlier layer named 'fc0'"),
        "self_loop.json": (json.dumps(graph_doc(layers=[fc("fc1", inputs=["fc1"])])).encode(), "own output: a cycle"),
        "cyclic.json": (json.dumps(graph_doc(layers=[fc("a", inputs=["b"]), fc("b", inputs=["a"])])).encode(),
                        "listed later.*cycle"),
        "duplicate_name.json": (json.dumps(graph_doc(layers=[fc("fc"), fc("fc", inputs=["fc"])])).encode(), "used twice"),
        "too_many_inputs.json": (json.dumps(graph_doc(layers=[fc("a"), fc("b"), fc("c", inputs=["a", "b"])])).encode(),
                                 "has 1 input"),
        "disconnected.json": (json.dumps(graph_doc(layers=[fc("a"), fc("b")])).encode(), "not connected"),
        "shape_mismatch.json": (json.dumps(graph_doc(layers=[fc("a", n=16), fc("b", c=32, inputs=["a"])])).encode(),
                                "produces shape"),
        "unknown_suffix.txt": (b"\x89PNG\r\n\x1a\n not a model", "unknown file type '.txt'"),
        "model.pkl": (pickle.dumps(EXAMPLE), "unknown file type '.pkl'"),
    }
    return cases


# -- ONNX ------------------------------------------------------------------------------------------


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def w(name, *shape):
    return numpy_helper.from_array(np.zeros(shape, np.float32), name)


def model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, "corpus", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def mlp() -> onnx.ModelProto:
    return model([helper.make_node("Gemm", ["x", "W"], ["h"], name="fc", transB=1),
                  helper.make_node("Relu", ["h"], ["y"], name="relu")],
                 [vi("x", [4, 8])], [vi("y", [4, 8])], [w("W", 8, 8)])


def onnx_cases() -> dict[str, tuple[bytes, str]]:
    good = mlp().SerializeToString()
    cases: dict[str, tuple[onnx.ModelProto | bytes, str]] = {
        "empty.onnx": (b"", "the file is empty"),
        "garbage.onnx": (bytes(range(256)) * 8, "not a valid ONNX file|no graph|no opset|no nodes"),
        "truncated.onnx": (good[: len(good) // 2], "not a valid ONNX file"),
        "json_renamed.onnx": (json.dumps(EXAMPLE).encode(), "not a valid ONNX file"),
        "pickle.onnx": (pickle.dumps(EXAMPLE), "not a valid ONNX file"),
    }
    no_graph = onnx.ModelProto()
    no_graph.ir_version = 8
    cases["no_graph.onnx"] = (no_graph, "it has no graph")
    cases["no_nodes.onnx"] = (model([], [vi("x", [2, 2])], [vi("x", [2, 2])]), "no nodes")
    no_opset = mlp()
    del no_opset.opset_import[:]
    cases["no_opset.onnx"] = (no_opset, "declares no opset")
    cases["cycle.onnx"] = (model([helper.make_node("Relu", ["b"], ["a"], name="r1"),
                                  helper.make_node("Relu", ["a"], ["b"], name="r2")],
                                 [vi("x", [2, 2])], [vi("a", [2, 2])]), "has a cycle")
    cases["dangling_input.onnx"] = (model([helper.make_node("Relu", ["ghost"], ["y"], name="r")],
                                          [vi("x", [2, 2])], [vi("y", [2, 2])]), "reads tensor 'ghost'")
    cases["duplicate_output.onnx"] = (model([helper.make_node("Relu", ["x"], ["y"], name="r1"),
                                             helper.make_node("Relu", ["x"], ["y"], name="r2")],
                                            [vi("x", [2, 2])], [vi("y", [2, 2])]), "produced twice")
    cases["zero_sized_input.onnx"] = (model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [0, 8])],
                                            [vi("y", [0, 8])]), "zero-sized")
    cases["absurd_input.onnx"] = (model([helper.make_node("MatMul", ["x", "W"], ["y"], name="fc")],
                                        [vi("x", [2**40, 8])], [vi("y", [2**40, 4])], [w("W", 8, 4)]), "absurdly large")
    huge_weight = onnx.TensorProto()
    huge_weight.name, huge_weight.data_type = "W", F
    huge_weight.dims.extend([2**40, 2**40])
    cases["absurd_weight.onnx"] = (model([helper.make_node("MatMul", ["x", "W"], ["y"], name="fc")],
                                         [vi("x", [2, 2**40])], [vi("y", [2, 2**40])], [huge_weight]), "absurdly large")
    cases["no_inputs.onnx"] = (model([helper.make_node("Relu", ["W"], ["y"])], [], [vi("y", [8, 8])], [w("W", 8, 8)]),
                               "has no inputs")
    cases["sequence_input.onnx"] = (model([helper.make_node("SequenceLength", ["xs"], ["y"])],
                                          [helper.make_tensor_sequence_value_info("xs", F, [2, 2])],
                                          [vi("y", [], I64)]), "is not a tensor")
    cases["input_without_shape.onnx"] = (model([helper.make_node("Relu", ["x"], ["y"])],
                                               [helper.make_tensor_value_info("x", F, None)], [vi("y", [2])]), "has no shape")
    cases["symbolic_batch.onnx"] = (model([helper.make_node("MatMul", ["x", "W"], ["y"], name="fc")],
                                          [vi("x", ["N", 8])], [vi("y", ["N", 4])], [w("W", 8, 4)]),
                                    "symbolic batch dimension 'N'")
    cases["unsupported_ops.onnx"] = (model([helper.make_node("MatMul", ["x", "W"], ["h"], name="fc"),
                                            helper.make_node("Hardmax", ["h"], ["a"], name="hardmax"),
                                            helper.make_node("Resize", ["a", "", "scales"], ["y"], name="resize")],
                                           [vi("x", [1, 2, 4, 8])], [vi("y", [1, 2, 8, 16])],
                                           [w("W", 8, 8), numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32),
                                                                                  "scales")]),
                                     "operators pase cannot import: Hardmax x1.*Resize x1")
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "b", [], [vi("z", [2, 2])])
    cases["control_flow.onnx"] = (model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch,
                                                          else_branch=branch)],
                                        [vi("x", [2, 2]), vi("c", [], TensorProto.BOOL)], [vi("y", [2, 2])]),
                                  "operators pase cannot import: If")
    cases["custom_domain.onnx"] = (model([helper.make_node("Attention", ["x"], ["y"], name="attn", domain="com.microsoft")],
                                         [vi("x", [2, 4, 8])], [vi("y", [2, 4, 8])]), "domain 'com.microsoft'")
    cases["inner_dims_differ.onnx"] = (model([helper.make_node("MatMul", ["x", "W"], ["y"], name="fc")],
                                             [vi("x", [2, 8])], [vi("y", [2, 4])], [w("W", 6, 4)]),
                                       "'fc' \\(MatMul\\): inner dimensions differ")
    cases["conv_channels.onnx"] = (model([helper.make_node("Conv", ["x", "W"], ["y"], name="conv")],
                                         [vi("x", [2, 3, 8, 8])], [vi("y", [2, 4, 6, 6])], [w("W", 4, 5, 3, 3)]),
                                   "expects 5 input channels, input has 3")
    cases["bad_reshape.onnx"] = (model([helper.make_node("MatMul", ["x", "W"], ["h"], name="fc"),
                                        helper.make_node("Reshape", ["h", "shape"], ["y"], name="reshape")],
                                       [vi("x", [2, 8])], [vi("y", [5, 3])],
                                       [w("W", 8, 8), numpy_helper.from_array(np.array([5, 3], np.int64), "shape")]),
                                 "'reshape' \\(Reshape\\): cannot reshape \\(2, 8\\) to \\[5, 3\\]")
    runtime = model([helper.make_node("MatMul", ["x", "W"], ["h"], name="fc"),
                     helper.make_node("Reshape", ["h", "shape"], ["y"], name="reshape")],
                    [vi("x", [2, 8]), vi("shape", [2], I64)], [vi("y", [4, 4])], [w("W", 8, 8)])
    cases["runtime_shape.onnx"] = (runtime, "target shape is computed at run time")
    cases["disconnected.onnx"] = (model([helper.make_node("MatMul", ["x", "W"], ["a"], name="f1"),
                                         helper.make_node("MatMul", ["z", "W"], ["b"], name="f2")],
                                        [vi("x", [2, 8]), vi("z", [2, 8])], [vi("a", [2, 8]), vi("b", [2, 8])],
                                        [w("W", 8, 8)]), "not connected")
    cases["only_shape_ops.onnx"] = (model([helper.make_node("Shape", ["x"], ["y"])], [vi("x", [2, 2])],
                                          [vi("y", [2], I64)]), "has no layers")
    bad_data = mlp()
    bad_data.graph.initializer[0].raw_data = b"\x00" * 7
    cases["short_tensor_data.onnx"] = (bad_data, "initializer 'W': tensor data cannot be read")
    out = {}
    for name, (value, pattern) in cases.items():
        out[name] = (value if isinstance(value, bytes) else value.SerializeToString(), pattern)
    return out


def main() -> None:
    expected = {}
    for name, (data, pattern) in {**json_cases(), **onnx_cases()}.items():
        (HERE / name).write_bytes(data)
        expected[name] = pattern
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print(f"{len(expected)} files")


if __name__ == "__main__":
    main()
