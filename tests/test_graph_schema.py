"""The graph format's schema: generated from the op specs, accepted by jsonschema, and in step with the loader.

The schema and the loader are two readers of the same format; these tests
feed both the same files (every sample, and mutations of their layers) and
require them to agree.
"""

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest

from pase.errors import PaseError
from pase.io.graph_json import loads_graph
from pase.io.onnx import SUPPORTED_OPS
from pase.io.schema import graph_schema
from pase.ops import OPS

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_graphs").glob("*.json"))
VALIDATOR = jsonschema.Draft202012Validator(graph_schema())


def _schema_accepts(doc) -> bool:
    return VALIDATOR.is_valid(doc)


def _loader_accepts(doc) -> bool:
    try:
        loads_graph(json.dumps(doc))
    except PaseError:
        return False
    return True


# One layer of every op, written by hand from docs/graph-format.md.
EXAMPLES = {
    "FullyConnected": {"b": 8, "n": 16, "c": 32, "pointwise": 1, "bias": True},
    "Einsum": {"equation": "bsd,ed->bse", "sizes": {"b": 2, "s": 4, "d": 8, "e": 8}, "weights": [1], "pointwise": 0,
               "bias": False},
    "Conv2D": {"b": 2, "c": 3, "height": 8, "width": 8, "n": 4, "r": 3, "s": 3, "stride": 1, "pad": 1,
               "pointwise": 1, "bias": True},
    "Pooling": {"b": 2, "c": 3, "height": 8, "width": 8, "kernel": 2, "stride": 2, "pad": 0, "mode": "max"},
    "Elementwise": {"shape": [2, 8], "dims": ["b", "n"], "inputs": 2, "pointwise": 1, "gated": True},
    "Dropout": {"shape": [2, 8], "dims": ["b", "n"]},
    "Gelu": {"shape": [2, 8], "dims": ["b", "n"]},
    "BatchNorm": {"b": 2, "c": 3, "h": 4, "w": 4},
    "LayerNorm": {"shape": [2, 4, 8], "dims": ["b", "s", "d"], "axis": "d"},
    "RMSNorm": {"shape": [2, 4, 8], "dims": ["b", "s", "d"], "axis": "d"},
    "Softmax": {"shape": [2, 8], "dims": ["b", "n"], "axis": "n"},
    "SoftmaxCrossEntropy": {"shape": [2, 10], "dims": ["b", "n"], "axis": "n"},
    "Embedding": {"b": 2, "s": 4, "d": 8, "v": 100},
    "LSTM": {"l": 2, "b": 2, "s": 4, "d": 8, "e": 8},
    "Concat": {"shapes": [[2, 3], [2, 5]], "dims": ["b", "n"], "axis": "n"},
    "Broadcast": {"shape": [2, 4, 3], "dims": ["b", "h", "n"], "axes": ["h"]},
    "Split": {"shape": [2, 8], "dims": ["b", "n"], "axis": "n", "parts": [3, 5]},
    "Reshape": {"shape": [2, 8], "dims": ["b", "n"], "out_shape": [2, 2, 4]},
    "Transpose": {"shape": [2, 8], "dims": ["b", "n"], "perm": [1, 0]},
    "ReduceMean": {"shape": [2, 4, 8], "dims": ["b", "s", "d"], "reduce": ["s"]},
    "GroupedConv2D": {"b": 2, "g": 4, "c": 1, "height": 8, "width": 8, "n": 2, "r": 3, "s": 3, "stride": 1, "pad": 2,
                      "pointwise": 1, "bias": True, "dilation": 2},
    "MoERouter": {"b": 2, "s": 8, "d": 8, "experts": 4, "top_k": 2, "capacity": 4},
    "MoEExperts": {"b": 2, "capacity": 4, "experts": 4, "d": 8, "f": 16},
    "MoECombine": {"b": 2, "s": 8, "d": 8, "experts": 4, "top_k": 2, "capacity": 4},
}


def _file(op: str, params: dict) -> dict:
    return {"format": "pase-graph", "version": 1, "name": op, "layers": [{"name": "x", "op": op, "params": params}]}


def test_the_committed_schema_is_the_generated_one():
    committed = json.loads((ROOT / "docs" / "graph.schema.json").read_text())
    assert committed == graph_schema(), "regenerate it: python -m pase.io.schema > docs/graph.schema.json"


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(graph_schema())


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_every_sample_file_satisfies_the_schema(path):
    errors = list(VALIDATOR.iter_errors(json.loads(path.read_text())))
    assert not errors, errors[0].message


def test_the_example_in_the_docs_satisfies_the_schema():
    assert _schema_accepts(json.loads((ROOT / "docs" / "example-graph.json").read_text()))


def test_there_is_an_example_of_every_op():
    assert set(EXAMPLES) == set(OPS)


def _mutations(op: str, params: dict):
    """(description, new params) pairs that both readers must refuse."""
    for key in OPS[op].params_schema()["required"]:
        yield f"without {key}", {k: v for k, v in params.items() if k != key}
    yield "with an unknown key", {**params, "bogus": 1}
    for key, value in params.items():
        if isinstance(value, (int, bool)):
            yield f"{key} as a string", {**params, key: str(value)}
        if isinstance(value, list):
            yield f"{key} as a number", {**params, key: 3}


@pytest.mark.parametrize("op", sorted(OPS))
def test_schema_and_loader_accept_the_example_and_refuse_its_broken_versions(op):
    assert _schema_accepts(_file(op, EXAMPLES[op])) and _loader_accepts(_file(op, EXAMPLES[op]))
    for what, params in _mutations(op, EXAMPLES[op]):
        assert not _schema_accepts(_file(op, params)), f"{op} {what}: the schema accepts it"
        assert not _loader_accepts(_file(op, params)), f"{op} {what}: the loader accepts it"


def test_each_ops_defaults_are_what_its_builder_assumes():
    # Leaving out every optional key builds the same layer as spelling out the schema's defaults.
    for op, params in EXAMPLES.items():
        fragment = OPS[op].params_schema()
        required = {k: v for k, v in params.items() if k in fragment["required"]}
        defaults = {k: p["default"] for k, p in fragment["properties"].items() if "default" in p}
        short, spelled = loads_graph(json.dumps(_file(op, required))), loads_graph(json.dumps(_file(op, {**required, **defaults})))
        assert short.layers[0].param_dict == spelled.layers[0].param_dict, op


def test_every_onnx_operator_an_op_names_is_one_the_importer_maps():
    for name, spec in OPS.items():
        assert set(spec.onnx) <= SUPPORTED_OPS, (name, set(spec.onnx) - SUPPORTED_OPS)


def test_the_docs_table_lists_every_op_with_its_params_and_onnx_sources():
    text = (ROOT / "docs" / "graph-format.md").read_text()
    table = text[text.index("## Ops and their parameters"):]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", table, re.M)}
    assert set(rows) == set(OPS)
    for op, spec in OPS.items():
        cells = rows[op].split("|")
        for key in spec.params_schema()["properties"]:
            assert re.search(rf"\b{key}\b", cells[2]), f"{op}: docs do not mention parameter {key!r}"
        assert re.findall(r"`(\w+)`", cells[4]) == list(spec.onnx), op
