"""Write the broken-file corpus of this folder: files that pase must refuse with a clear message.

Run from the repository root (needs onnx): ``python tests/corpus/make_corpus.py``.

Every file here is refused by ``pase.io.load_model_file`` and by
``pase solve FILE --devices 4`` with a :class:`pase.errors.PaseError` whose
one-line message matches the regular expression recorded for it in
``expected.json`` (``tests/test_corpus.py`` checks both). The files are small;
cases that need a large file (over the size limit, too many layers) are made
by the test itself.

The bombs (:func:`bomb_cases`) are small files that once made an import take
gigabytes or hours: a ``Range`` that ONNX's data propagation expanded, nested
local functions that inlining expanded, padding, tiling and concatenation to
absurd sizes, constant folding that kept building large arrays, nodes with
thousands of inputs or outputs, subgraphs nested past protobuf's depth limit.
``tests/test_corpus.py`` also runs every file through the CLI under a memory cap.
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
    cases.update(bomb_cases())
    out = {}
    for name, (value, pattern) in cases.items():
        out[name] = (value if isinstance(value, bytes) else value.SerializeToString(), pattern)
    return out


def i64(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


def constant(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.int64), name))


def with_fc(nodes, out, inits=(), inputs=(), opset=17) -> onnx.ModelProto:
    """A model whose input x (2, 8) goes through an 8x8 MatMul 'fc' to h, then ``nodes`` to ``out``."""
    return model([helper.make_node("MatMul", ["x", "W"], ["h"], name="fc"), *nodes],
                 [vi("x", [2, 8]), *inputs], [vi(out, None)], [w("W", 8, 8), *inits], opset)


def nested_functions(levels: int, calls: int) -> onnx.ModelProto:
    """Local function f0 is two Relus, f(k) calls f(k-1) ``calls`` times: 2 * calls**levels nodes inlined."""
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    functions = [helper.make_function("local", "f0", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["t"]),
                                                                     helper.make_node("Relu", ["t"], ["b"])], opsets)]
    for k in range(1, levels + 1):
        names = ["a"] + [f"t{j}" for j in range(calls - 1)] + ["b"]
        body = [helper.make_node(f"f{k - 1}", [names[j]], [names[j + 1]], domain="local") for j in range(calls)]
        functions.append(helper.make_function("local", f"f{k}", ["a"], ["b"], body, opsets))
    m = with_fc([helper.make_node(f"f{levels}", ["h"], ["y"], name="call", domain="local")], "y")
    m.opset_import.append(helper.make_opsetid("local", 1))
    m.functions.extend(functions)
    return m


def recursive_functions() -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    m = with_fc([helper.make_node("ping", ["h"], ["y"], name="call", domain="local")], "y")
    m.opset_import.append(helper.make_opsetid("local", 1))
    m.functions.extend([
        helper.make_function("local", "ping", ["a"], ["b"], [helper.make_node("pong", ["a"], ["b"], domain="local")],
                             opsets),
        helper.make_function("local", "pong", ["a"], ["b"], [helper.make_node("ping", ["a"], ["b"], domain="local")],
                             opsets),
    ])
    return m


def nested_ifs(depth: int) -> onnx.ModelProto:
    """An If whose then-branch is an If... ``depth`` deep (protobuf's Python parser stops near 33)."""
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "leaf", [], [vi("z", [2, 8])])
    body = leaf
    for k in range(depth - 1):
        body = helper.make_graph([helper.make_node("If", ["c"], ["z"], then_branch=body, else_branch=leaf)], f"if{k}",
                                 [], [vi("z", [2, 8])])
    return with_fc([helper.make_node("If", ["c"], ["y"], name="if", then_branch=body, else_branch=leaf)], "y",
                   inputs=[vi("c", [], TensorProto.BOOL)])


def varint(n: int) -> bytes:
    """``n`` as a protobuf varint."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (a string or a message)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def deep_if_bytes(depth: int) -> bytes:
    """A model whose If bodies nest ``depth`` deep, written on the wire: the Python API
    refuses to build one deeper than protobuf's parser reads."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "leaf", [], []).SerializeToString()
    for _ in range(depth):
        # AttributeProto: name (1), type (20, a varint), g (6); NodeProto: input (1), output (2),
        # op_type (4), attribute (5); GraphProto: node (1).
        attribute = field(1, b"then_branch") + varint(20 << 3) + varint(onnx.AttributeProto.GRAPH) + field(6, graph)
        graph = field(1, field(1, b"c") + field(2, b"z") + field(4, b"If") + field(5, attribute))
    # A second graph field (ModelProto field 7) merges into the first: the MatMul model plus the If.
    return with_fc([], "h").SerializeToString() + field(7, graph)


def bomb_cases() -> dict[str, tuple[onnx.ModelProto | bytes, str]]:
    """Small files that used to take gigabytes or hours to import (see the module docstring)."""
    cases: dict[str, tuple[onnx.ModelProto | bytes, str]] = {}
    # ONNX's data propagation held one entry per element of the Range (13 GB).
    cases["range_bomb.onnx"] = (with_fc([constant("start", 0), constant("limit", 2**62), constant("delta", 1),
                                         helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
                                         helper.make_node("Cast", ["r"], ["rf"], name="cast", to=F),
                                         helper.make_node("Add", ["h", "rf"], ["y"], name="add")], "y"),
                                r"'range' \(Range\): dimension 4611686018427387904 .*absurdly large")
    # The same through a graph input: 2**30 int64 ids cast, and an operator that needs shape inference.
    cases["cast_of_long_input.onnx"] = (with_fc([helper.make_node("Cast", ["ids"], ["f"], name="cast", to=F),
                                                 helper.make_node("Hardmax", ["f"], ["y"], name="hardmax")], "y",
                                                inputs=[vi("ids", [2**30], I64)]),
                                        "operators pase cannot import: Hardmax")
    cases["range_overflow.onnx"] = (with_fc([helper.make_node("Range", ["a", "b", "c"], ["r"], name="range"),
                                             helper.make_node("Add", ["h", "r"], ["y"], name="add")], "y",
                                            [i64("a", -2**63), i64("b", 2**63 - 1), i64("c", 1)]),
                                    r"'range' \(Range\): dimension 18446744073709551615")
    # 2 * 8**13 = 1.1e12 nodes once inlined: the inliner ran out of memory and aborted the process.
    cases["nested_functions.onnx"] = (nested_functions(13, 8),
                                      r"1\.1e\+12 nodes once its local functions are inlined \(function 'local\.f13'")
    cases["recursive_functions.onnx"] = (recursive_functions(), "local function 'local.p[io]ng' calls itself")
    cases["conv_huge_pads.onnx"] = (model([helper.make_node("Conv", ["x", "W"], ["y"], name="conv",
                                                            pads=[2**40, 0, 2**40, 0])],
                                          [vi("x", [2, 3, 8, 8])], [vi("y", None)], [w("W", 4, 3, 3, 3)]),
                                    r"'conv' \(Conv\): dimension h = 2199023255558 of its Conv2D layer is absurdly large")
    cases["pad_huge.onnx"] = (with_fc([helper.make_node("Pad", ["h", "p"], ["y"], name="pad")], "y",
                                      [i64("p", [0, 2**40, 0, 2**40])]),
                              r"'pad' \(Pad\): dimension 2199023255560 .*absurdly large")
    cases["constant_of_shape_huge.onnx"] = (with_fc([helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill"),
                                                     helper.make_node("Add", ["h", "c"], ["y"], name="add")], "y",
                                                    [i64("s", [2**31 - 1, 2**31 - 1, 8])]),
                                            r"'fill' \(ConstantOfShape\): shape .* has 3\.69e\+19 elements")
    cases["expand_huge.onnx"] = (with_fc([helper.make_node("Expand", ["h", "s"], ["y"], name="expand")], "y",
                                         [i64("s", [2**31 - 1, 2**31 - 1, 2, 8])]),
                                 r"'expand' \(Expand\): shape .* has 7\.38e\+19 elements")
    cases["tile_huge.onnx"] = (with_fc([helper.make_node("Tile", ["h", "r"], ["y"], name="tile")], "y",
                                       [i64("r", [2**40, 2**40])]),
                               r"'tile' \(Tile\): dimension 2199023255552 .*absurdly large")
    cases["reshape_huge.onnx"] = (with_fc([helper.make_node("Reshape", ["h", "s"], ["y"], name="reshape")], "y",
                                          [i64("s", [2**62, 16, 0])]),
                                  r"'reshape' \(Reshape\): cannot reshape \(2, 8\) to \[4611686018427387904, 16, 0\]")
    cases["concat_too_large.onnx"] = (model([helper.make_node("Concat", ["a", "b"], ["y"], name="concat", axis=0)],
                                            [vi("a", [2**30 + 1, 2]), vi("b", [2**30, 2])], [vi("y", None)]),
                                      r"'concat' \(Concat\): dimension 2147483649 .*absurdly large")
    cases["too_many_axes.onnx"] = (with_fc([helper.make_node("Unsqueeze", ["h", "axes"], ["y"], name="unsqueeze")], "y",
                                           [i64("axes", list(range(2, 102)))]),
                                   r"'unsqueeze' \(Unsqueeze\): a shape of 102 axes; at most 64")
    cases["many_inputs.onnx"] = (with_fc([helper.make_node("Concat", ["h"] * 5000, ["y"], name="concat", axis=0)], "y"),
                                 r"'concat' \(Concat\) has 5,000 inputs; at most 4,096")
    cases["many_outputs.onnx"] = (with_fc([helper.make_node("Split", ["h"], [f"y{i}" for i in range(5000)], name="split",
                                                            axis=1, num_outputs=5000)], "y0", opset=18),
                                  r"'split' \(Split\) has 5,000 outputs; at most 4,096")
    # Each Neg folded a new 128 MB array, and every one was kept (5 GB); NonZero of a
    # (2**24, 1, ..., 1) constant needs one index per axis and element (8 GB). Two
    # unconnected MatMuls make the files refused once everything is folded.
    def disconnected(nodes, inits, constant_out, dtype):
        m = with_fc([*nodes, helper.make_node("MatMul", ["x2", "W"], ["y2"], name="fc2")], "y2", inits,
                    inputs=[vi("x2", [2, 8])])
        m.graph.output.extend([vi("h", None), vi(constant_out, None, dtype)])
        return m

    chain = [helper.make_node("ConstantOfShape", ["n"], ["c0"], value=numpy_helper.from_array(np.array([1.0])))]
    chain += [helper.make_node("Neg", [f"c{i}"], [f"c{i + 1}"]) for i in range(40)]
    cases["fold_chain.onnx"] = (disconnected(chain, [i64("n", [2**24])], "c40", TensorProto.DOUBLE), "not connected")
    ones = numpy_helper.from_array(np.array([1.0], np.float32))
    cases["nonzero_bomb.onnx"] = (disconnected([helper.make_node("ConstantOfShape", ["n"], ["c"], value=ones),
                                                helper.make_node("NonZero", ["c"], ["nz"], name="nonzero")],
                                               [i64("n", [2**24] + [1] * 60)], "nz", I64), "not connected")
    cases["nested_ifs.onnx"] = (nested_ifs(30), "operators pase cannot import: If x1")
    cases["deep_if.onnx"] = (deep_if_bytes(200), "not a valid ONNX file")
    return cases


def main() -> None:
    expected = {}
    for name, (data, pattern) in {**json_cases(), **onnx_cases()}.items():
        (HERE / name).write_bytes(data)
        expected[name] = pattern
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print(f"{len(expected)} files")


if __name__ == "__main__":
    main()
