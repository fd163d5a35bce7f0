"""Graph IR validation and the JSON file format."""

import json

import pytest

from pase import ops as L
from pase.errors import FormatError, GraphError
from pase.ir.graph import Graph
from pase.io.graph_json import dumps_graph, graph_to_dict, load_graph, loads_graph, save_graph


def _mlp():
    g = Graph("mlp")
    g.add_layer(L.fully_connected("fc1", b=8, n=16, c=4, pointwise=1))
    g.add_layer(L.fully_connected("fc2", b=8, n=16, c=16), inputs=["fc1"])
    g.add_layer(L.elementwise("add", (8, 16), ("b", "n")), inputs=["fc1", "fc2"])
    g.add_layer(L.softmax_cross_entropy("loss", (8, 16)), inputs=["add"])
    return g


def test_valid_graph_passes_and_is_topological():
    g = _mlp()
    g.validate()
    assert [l.name for l in g] == ["fc1", "fc2", "add", "loss"]
    assert g.parameter_count == 16 * 4 + 16 + 16 * 16 + 16


def test_duplicate_name_is_refused():
    g = _mlp()
    with pytest.raises(GraphError, match="'fc1' is used twice"):
        g.add_layer(L.fully_connected("fc1", b=8, n=16, c=4))


def test_unknown_producer_is_refused():
    with pytest.raises(GraphError, match="no earlier layer named 'ghost'"):
        Graph().add_layer(L.fully_connected("fc", b=8, n=16, c=4), inputs=["ghost"])


def test_shape_mismatch_names_the_edge():
    g = Graph("bad")
    g.add_layer(L.fully_connected("fc1", b=8, n=16, c=4))
    g.add_layer(L.fully_connected("fc2", b=8, n=16, c=32), inputs=["fc1"])
    with pytest.raises(GraphError, match="fc1.*produces shape \\(8, 16\\).*'fc2'"):
        g.validate()


def test_disconnected_graph_is_refused():
    g = Graph("two")
    g.add_layer(L.fully_connected("a", b=8, n=16, c=4))
    g.add_layer(L.fully_connected("b", b=8, n=16, c=4))
    with pytest.raises(GraphError, match="not connected"):
        g.validate()


def test_no_cycle_can_be_built():
    g = _mlp()
    # A layer reads only layers added before it, so the order of addition is a topological order.
    with pytest.raises(GraphError, match="no earlier layer named 'later'"):
        g.add_layer(L.fully_connected("early", b=8, n=16, c=4), inputs=["later"])
    order = [l.name for l in g.layers]
    assert all(order.index(e.src) < order.index(e.dst) for e in g.edges)
    # The networkx view is a copy: a cycle drawn into it leaves the graph as it was.
    view = g.nx
    view.add_edge("loss", "fc1")
    g.validate()
    assert len(g.nx.edges) == len(g.edges) == len(view.edges) - 1


def test_round_trip_preserves_every_layer_and_edge():
    g = _mlp()
    back = loads_graph(dumps_graph(g))
    assert back.name == g.name
    assert back.layers == g.layers
    assert back.edges == g.edges


def test_save_and_load_file(tmp_path):
    path = tmp_path / "mlp.json"
    save_graph(_mlp(), path)
    assert load_graph(path).layers == _mlp().layers


def test_hand_written_example_in_docs_loads():
    from pathlib import Path

    g = load_graph(Path(__file__).resolve().parents[1] / "docs" / "example-graph.json")
    g.validate()
    assert len(g) >= 3


def _corrupt(mutate):
    data = graph_to_dict(_mlp())
    mutate(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    "text,error,match",
    [
        ("{", FormatError, "not valid JSON"),
        ("[]", FormatError, "JSON object"),
        (_corrupt(lambda d: d.update(format="onnx")), FormatError, "'format'"),
        (_corrupt(lambda d: d.update(layers=[])), FormatError, "'layers'"),
        (_corrupt(lambda d: d["layers"][1].update(op=7)), FormatError, "layer 1 \\('fc2'\\): field 'op'"),
        (_corrupt(lambda d: d["layers"][1].update(op="Magic")), GraphError, "'fc2'.*unknown op"),
        (_corrupt(lambda d: d["layers"][1]["params"].update(n=-3)), GraphError, "'fc2'.*n must be a positive"),
        (_corrupt(lambda d: d["layers"][1]["params"].update(bogus=1)), GraphError, "'fc2'.*bogus"),
        (_corrupt(lambda d: d["layers"][1].update(inputs=[{"x": 1}])), FormatError, "inputs\\[0\\]"),
        (_corrupt(lambda d: d["layers"][1].update(inputs=["loss"])), GraphError, "no earlier layer named 'loss'"),
        (_corrupt(lambda d: d["layers"][1].update(inputs=["fc1", "fc1"])), GraphError, "2 were connected"),
    ],
)
def test_invalid_files_name_the_layer_and_field(text, error, match):
    with pytest.raises(error, match=match):
        loads_graph(text)


def test_oversized_file_is_refused_before_parsing():
    from pase.limits import MAX_FILE_BYTES

    with pytest.raises(FormatError, match="MiB"):
        loads_graph(" " * (MAX_FILE_BYTES + 1))


def test_a_graph_past_the_layer_limit_is_refused_while_it_is_built():
    # The app's model-size inputs once built a sample of 2**24 layers until memory ran out.
    from pase.limits import MAX_LAYERS
    from pase.models import sample

    with pytest.raises(GraphError, match=f"more than {MAX_LAYERS:,} layers"):
        sample("gpt", layers=2**24, d_model=64, heads=2, seq=16, vocab=100, batch=2)
