"""CostGraph validation, cost_of, and the instance loader (gzip and plain JSON, malformed files)."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest

from pase.io.instance import load_instance
from pase.ir.costgraph import CostGraph
from pase.errors import FormatError


def _two_nodes(**overrides):
    args = {
        "node_costs": (np.array([1.0, 2.0]), np.array([0.0, 5.0, 1.0])),
        "edges": ((0, 1, np.arange(6.0).reshape(2, 3)),),
    }
    args.update(overrides)
    return CostGraph(**args)


def test_basic_properties_and_cost_of():
    g = _two_nodes(names=("a", "b"))
    assert g.num_nodes == 2
    assert g.config_counts == (2, 3)
    assert g.cost_of([1, 2]) == 2.0 + 1.0 + 5.0
    assert g.cost_of(np.array([0, 0])) == 1.0
    assert g.label(1) == "node 1 (b)"


def test_arrays_are_float64_read_only_views():
    costs = np.array([1, 2])  # integers are converted
    g = _two_nodes(node_costs=(costs, np.zeros(3)))
    assert g.node_costs[0].dtype == np.float64
    with pytest.raises(ValueError):
        g.node_costs[1][0] = 3.0
    m = np.ones((2, 3))
    g = _two_nodes(edges=((0, 1, m),))
    assert m.flags.writeable  # the caller's array is left alone
    assert not g.edges[0][2].flags.writeable


def test_cost_of_is_the_correctly_rounded_sum():
    g = CostGraph((np.array([1e16]), np.array([1.0]), np.array([1.0])), ())
    assert g.cost_of([0, 0, 0]) == math.fsum([1e16, 1.0, 1.0])


@pytest.mark.parametrize("assignment", [[0], [0, 3], [-1, 0], [0, 0, 0], [0.0, 1.0]])
def test_cost_of_rejects_bad_assignments(assignment):
    with pytest.raises(ValueError):
        _two_nodes().cost_of(assignment)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"node_costs": (np.array([1.0, -2.0]), np.zeros(3))}, "node 0: a cost is negative"),
        ({"node_costs": (np.array([1.0, np.nan]), np.zeros(3))}, "node 0: a cost is NaN or infinite"),
        ({"node_costs": (np.zeros(2), np.array([np.inf, 0, 0]))}, "node 1: a cost is NaN or infinite"),
        ({"node_costs": (np.zeros(2), np.zeros(0))}, "node 1 has no configuration"),
        ({"node_costs": (np.zeros((2, 1)), np.zeros(3))}, "node 0: costs must be a 1-D array"),
        ({"node_costs": (["x", 1], np.zeros(3))}, "node 0: costs are not"),
        ({"edges": ((0, 1, np.zeros((3, 2))),)},
         r"edge 0 \(0 -> 1\): cost matrix has shape \(3, 2\), expected \(2, 3\)"),
        ({"edges": ((0, 2, np.zeros((2, 3))),)}, "edge 0 target is 2, but node ids are 0..1"),
        ({"edges": ((-1, 1, np.zeros((2, 3))),)}, "edge 0 source is -1"),
        ({"edges": (("0", 1, np.zeros((2, 3))),)}, "edge 0 source is '0', not a node id"),
        ({"edges": ((0, 0, np.zeros((2, 2))),)}, "edge 0 is a self loop on node 0"),
        ({"edges": ((0, 1),)}, "edge 0 is not a"),
        ({"edges": ((0, 1, np.zeros((2, 3))), (0, 1, np.zeros((2, 3))))}, "edge 1 .* duplicates"),
        ({"edges": ((0, 1, np.zeros((2, 3))), (1, 0, np.zeros((3, 2))))}, "edge 1 .* duplicates"),
        ({"edges": ((0, 1, -np.ones((2, 3))),)}, r"edge 0 \(0 -> 1\): a cost is negative"),
        ({"edges": ((0, 1, np.zeros(6)),)}, "must be a 2-D array"),
        ({"node_costs": (np.full(2, 1e300), np.full(3, 1e300))}, "overflow"),
        ({"names": ("a",)}, "1 names for 2 nodes"),
    ],
)
def test_invalid_graphs_name_the_fault(overrides, message):
    with pytest.raises(FormatError, match=message):
        _two_nodes(**overrides)


def test_zero_and_huge_costs_are_accepted():
    g = _two_nodes(node_costs=(np.array([0.0, 1e250]), np.zeros(3)))
    assert g.cost_of([1, 0]) == 1e250


def _instance_doc():
    return {
        "name": "tiny",
        "devices": 2,
        "nodes": [
            {"id": 1, "op": "Softmax", "dims": [4], "configs": [[1], [2]], "cost": [3.5, 1.25]},
            {"id": 0, "op": "FC", "dims": [4, 8], "configs": [[1, 1], [2, 1], [1, 2]], "cost": [4, 2, 2.5e3]},
        ],
        "edges": [{"src": 0, "dst": 1, "cost": [[0.0, 1.0], [2.0, 0.0], [1e-3, 7]]}],
    }


def _check_tiny(g, meta):
    assert g.config_counts == (3, 2)
    np.testing.assert_array_equal(g.node_costs[0], [4, 2, 2500])
    np.testing.assert_array_equal(g.node_costs[1], [3.5, 1.25])
    (u, v, m), = g.edges
    assert (u, v) == (0, 1)
    np.testing.assert_array_equal(m, [[0.0, 1.0], [2.0, 0.0], [1e-3, 7]])
    assert meta["name"] == "tiny" and meta["devices"] == 2
    assert meta["nodes"][0] == {"op": "FC", "dims": [4, 8], "configs": [[1, 1], [2, 1], [1, 2]]}
    assert meta["nodes"][1]["op"] == "Softmax"


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("compress", [False, True])
def test_load_instance_plain_or_gzip_compact_or_indented(tmp_path, indent, compress):
    text = json.dumps(_instance_doc(), indent=indent).encode()
    path = tmp_path / "tiny.json"
    path.write_bytes(gzip.compress(text) if compress else text)
    _check_tiny(*load_instance(path))


def test_load_instance_without_metadata(tmp_path):
    path = tmp_path / "bare.json"
    path.write_text(json.dumps({"nodes": [{"id": 0, "cost": [1]}, {"id": 1, "cost": [2, 3]}],
                                "edges": [{"src": 1, "dst": 0, "cost": [[5], [6]]}]}))
    g, meta = load_instance(path)
    assert g.config_counts == (1, 2) and meta["name"] is None and meta["nodes"][0]["configs"] is None


def _mutated(change):
    doc = _instance_doc()
    change(doc)
    return json.dumps(doc)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "top level is not a JSON object"),
        (_mutated(lambda d: d.pop("edges")), "missing or invalid 'edges'"),
        (_mutated(lambda d: d["nodes"][0].pop("cost")), "node 1 has no 'cost'"),
        (_mutated(lambda d: d["nodes"][0].update(id=5)), r"nodes\[0\] has id 5"),
        (_mutated(lambda d: d["nodes"][1].update(id=1)), "node id 1 appears twice"),
        (_mutated(lambda d: d["nodes"][0].update(cost=[1.0, -1.0])), "node 1: a cost is negative"),
        (_mutated(lambda d: d["nodes"][0].update(cost=[1.0, "x"])), "node 1: costs are not"),
        (_mutated(lambda d: d["edges"][0].update(cost=[[0.0, 1.0], [2.0], [1, 2]])),
         r"edge 0 \(0 -> 1\): costs are not"),
        (_mutated(lambda d: d["edges"][0].update(cost=[[0.0, 1.0], [2.0, 0.0]])), r"shape \(2, 2\), expected \(3, 2\)"),
        (_mutated(lambda d: d["edges"][0].update(dst=7)), "edge 0 target is 7"),
        (_mutated(lambda d: d["edges"][0].pop("src")), r"edges\[0\] is not an object with 'src' and 'dst'"),
        (_mutated(lambda d: d["nodes"][1].update(configs=[[1]])), "node 0 lists 1 configurations but 3 costs"),
        (_mutated(lambda d: d["edges"][0].update(cost=[[[0.0]]])), r"edge 0 \(0 -> 1\): costs must be a 2-D array"),
        ('{"nodes": [{"id": 0, "cost": [NaN]}], "edges": []}', "node 0: a cost is NaN or infinite"),
    ],
)
def test_load_instance_malformed(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(FormatError, match=message):
        load_instance(path)


def test_load_instance_unreadable(tmp_path):
    with pytest.raises(FormatError, match="cannot read instance"):
        load_instance(tmp_path / "missing.json.gz")
    broken = tmp_path / "broken.json.gz"
    data = gzip.compress(json.dumps(_instance_doc()).encode())
    for damaged in (data[:-6], data[:12] + bytes(b ^ 0xFF for b in data[12:30]) + data[30:]):
        broken.write_bytes(damaged)
        with pytest.raises(FormatError, match="cannot read instance"):
            load_instance(broken)
