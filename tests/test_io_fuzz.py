"""Property-based fuzzing of the graph-file loaders: they only ever raise PaseError.

Whatever an upload holds (random text, random JSON, a valid graph with fields
mutated, layers of every op with parameters of every type), loading it either
returns a validated graph or raises a :class:`pase.errors.PaseError` whose
message is one non-empty line. Nothing else may escape: no TypeError from a
builder, no RecursionError, no numpy error.
"""

from __future__ import annotations

import copy
import inspect
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pase.io import graph_json as pio
from pase.errors import PaseError
from pase.ir.graph import Graph
from pase.ops import OPS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = json.loads((ROOT / "docs" / "example-graph.json").read_text())

FUZZ = settings(max_examples=int(__import__("os").environ.get("PASE_FUZZ_EXAMPLES", 150)), deadline=None, suppress_health_check=[HealthCheck.too_slow])



@pytest.fixture(autouse=True)
def memory_cap():
    """Cap this process's heap 3 GiB above its current size while fuzzing: an input that makes the
    loader allocate without bound fails the test with a MemoryError instead of exhausting the machine."""
    try:
        import resource

        vm_data = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmData:"))
        old = resource.getrlimit(resource.RLIMIT_DATA)
        cap = vm_data + 3 * 2**30
        if old[0] != resource.RLIM_INFINITY and old[0] < cap:
            cap = old[0]
        resource.setrlimit(resource.RLIMIT_DATA, (cap, old[1]))
    except (ImportError, OSError, StopIteration, ValueError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, old)


# -- strategies --------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, 3, 4, 7, 16, 64, 2**31, 2**63, 10**18]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["b", "n", "c", "h", "w", "s", "d", "bsd,ed->bse", "max", "avg", "", "->"]),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=5), st.dictionaries(st.text(max_size=5), children, max_size=5)),
    max_leaves=25,
)
small_ints = st.integers(min_value=-2, max_value=40)
letter_lists = st.lists(st.sampled_from(list("bnchwsdvkl") + ["", "bb", 3, None]), max_size=5)
int_lists = st.lists(st.one_of(small_ints, st.sampled_from([2**40, -1, 0, 1.5, "4", None])), max_size=5)
param_values = st.one_of(scalars, small_ints, letter_lists, int_lists, st.lists(int_lists, max_size=3),
                         st.dictionaries(st.sampled_from(list("bsdevhcn")), st.one_of(small_ints, scalars), max_size=5))


def _param_names(op: str) -> list[str]:
    return [p for p in inspect.signature(OPS[op].build).parameters if p != "name"]


@st.composite
def layer_specs(draw, names: list[str]):
    op = draw(st.one_of(st.sampled_from(sorted(OPS)), st.text(max_size=8)))
    keys = _param_names(op) if op in OPS else []
    params = {k: draw(param_values) for k in keys if draw(st.booleans()) or k in ("b", "shape", "dims")}
    if draw(st.integers(0, 9)) == 0:
        params[draw(st.text(max_size=4))] = draw(param_values)
    inputs = draw(st.lists(st.one_of(st.none(), st.sampled_from(names + ["nope"]),
                                     st.tuples(st.sampled_from(names + ["x"]), st.integers(-1, 3)).map(list),
                                     scalars), max_size=3))
    return {"name": draw(st.sampled_from(names)), "op": op, "params": params, "inputs": inputs}


@st.composite
def graph_dicts(draw):
    names = [f"l{i}" for i in range(6)]
    layers = draw(st.lists(layer_specs(names), min_size=1, max_size=6))
    return {"format": "pase-graph", "version": 1, "name": draw(st.text(max_size=5)), "layers": layers}


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


EXAMPLE_PATHS = [p for p in _paths(EXAMPLE) if p]


@st.composite
def mutated_examples(draw):
    doc = copy.deepcopy(EXAMPLE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(EXAMPLE_PATHS))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(param_values)
        except (KeyError, IndexError, TypeError):
            continue
    return doc


# -- the property -----------------------------------------------------------------------------


def _load_or_pase_error(text) -> None:
    try:
        graph = pio.loads_graph(text)
    except PaseError as exc:
        message = str(exc)
        assert message.strip(), "an error without a message"
        assert "\n" not in message, f"a multi-line message: {message!r}"
        assert "MemoryError" not in message, f"the loader ran out of memory: {message!r}"
        return
    assert isinstance(graph, Graph)
    graph.validate()


@FUZZ
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_random_text_and_bytes(data):
    _load_or_pase_error(data)


@FUZZ
@given(json_values)
def test_random_json_documents(value):
    _load_or_pase_error(json.dumps(value))


@FUZZ
@given(graph_dicts())
def test_random_graphs_of_every_op(doc):
    _load_or_pase_error(json.dumps(doc))


@FUZZ
@given(mutated_examples())
def test_mutated_example_graph(doc):
    _load_or_pase_error(json.dumps(doc))


@FUZZ
@given(st.integers(min_value=1, max_value=len(json.dumps(EXAMPLE)) - 1))
def test_truncated_example_graph(cut):
    _load_or_pase_error(json.dumps(EXAMPLE)[:cut])


@pytest.mark.parametrize("text", [
    "[" * 100_000,
    '{"format": "pase-graph", "version": 1, "layers": [' + "[" * 50_000 + "]" * 50_000 + "]}",
    '{"format": "pase-graph", "version": 1, "layers": [{"name": "a", "op": "FullyConnected", "params": {"b": '
    + "9" * 5000 + ', "n": 2, "c": 2}}]}',
    '{"format": "pase-graph", "version": 1, "layers": [{"name": "a", "op": "FullyConnected", "params": {"b": 1e999, "n": 2, "c": 2}}]}',
    '{"format": "pase-graph", "version": 1, "layers": [{"name": "a", "op": "FullyConnected", "params": {"b": NaN, "n": 2, "c": 2}}]}',
    "\ufeff" + json.dumps(EXAMPLE),
    json.dumps(EXAMPLE).encode("utf-16"),
])
def test_pathological_documents(text):
    _load_or_pase_error(text)


def test_valid_example_still_loads():
    graph = pio.loads_graph(json.dumps(EXAMPLE))
    assert [layer.name for layer in graph] == ["fc1", "fc2", "fc3", "loss"]


# -- ONNX: mutated models only ever raise PaseError ------------------------------------------------

try:
    import onnx as _onnx
except ImportError:  # pragma: no cover - the test extra installs onnx
    _onnx = None

ONNX_FIXTURES = ROOT / "tests" / "data" / "onnx"
needs_onnx = pytest.mark.skipif(_onnx is None and not __import__("os").environ.get("CI"), reason="onnx not installed")


def _from_onnx_or_pase_error(source) -> None:
    from pase.io.onnx import from_onnx

    try:
        with __import__("warnings").catch_warnings():
            __import__("warnings").simplefilter("ignore")
            graph = from_onnx(source, unsupported="elementwise")
    except PaseError as exc:
        assert str(exc).strip() and "\n" not in str(exc), repr(str(exc))
        assert "MemoryError" not in str(exc), f"the importer ran out of memory: {exc}"
        return
    graph.validate()


@needs_onnx
@FUZZ
@given(st.sampled_from(["cnn", "transformer"]), st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)),
                                                          min_size=1, max_size=8))
def test_onnx_byte_flips(name, flips):
    data = bytearray((ONNX_FIXTURES / f"{name}.onnx").read_bytes())
    for where, value in flips:
        data[int(where * (len(data) - 1))] = value
    _from_onnx_or_pase_error(bytes(data))


ONNX_OPS = sorted({"Relu", "Add", "MatMul", "Gemm", "Conv", "Reshape", "Transpose", "Concat", "Split", "Slice",
                   "Gather", "LSTM", "Softmax", "LayerNormalization", "BatchNormalization", "MaxPool", "Flatten",
                   "Squeeze", "Unsqueeze", "ReduceMean", "Expand", "Pad", "Einsum", "Shape", "ConstantOfShape",
                   "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "GlobalAveragePool", "Where", "Tile"})


@needs_onnx
@FUZZ
@given(st.data())
def test_onnx_structural_mutations(data):
    model = _onnx.load_model_from_string((ONNX_FIXTURES / "transformer.onnx").read_bytes())
    nodes = model.graph.node
    for _ in range(data.draw(st.integers(1, 4))):
        n = nodes[data.draw(st.integers(0, len(nodes) - 1))]
        action = data.draw(st.sampled_from(["op", "drop_input", "swap_input", "attr", "dims"]))
        if action == "op":
            n.op_type = data.draw(st.sampled_from(ONNX_OPS))
        elif action == "drop_input" and len(n.input):
            del n.input[data.draw(st.integers(0, len(n.input) - 1))]
        elif action == "swap_input" and len(n.input):
            other = nodes[data.draw(st.integers(0, len(nodes) - 1))]
            if len(other.output):
                n.input[data.draw(st.integers(0, len(n.input) - 1))] = other.output[0]
        elif action == "attr" and len(n.attribute):
            a = n.attribute[data.draw(st.integers(0, len(n.attribute) - 1))]
            if a.ints:
                a.ints[data.draw(st.integers(0, len(a.ints) - 1))] = data.draw(st.integers(-5, 2**40))
            else:
                a.i = data.draw(st.integers(-5, 70))
        elif action == "dims":
            inp = model.graph.input[0].type.tensor_type.shape.dim
            inp[data.draw(st.integers(0, len(inp) - 1))].dim_value = data.draw(st.integers(0, 100))
    _from_onnx_or_pase_error(model)


def test_absurd_input_counts_are_refused_before_building():
    doc = {"format": "pase-graph", "version": 1, "layers": [
        {"name": "a", "op": "Elementwise", "params": {"shape": [2], "dims": ["n"], "inputs": 10**9}}]}
    with pytest.raises(PaseError, match="absurdly many"):
        pio.loads_graph(json.dumps(doc))
