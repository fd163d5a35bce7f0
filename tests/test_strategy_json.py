"""Strategy files read back (pase.io.strategy_json): both forms, the costs they give, and every bad file named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import pase
from pase import ops as L
from pase.analysis.baselines import evaluate_strategy
from pase.errors import FormatError, GraphError
from pase.hardware.cluster import Cluster
from pase.io.strategy_json import load_strategy, loads_strategy, strategy_from_dict
from pase.ir.graph import Graph
from pase.limits import MAX_FILE_BYTES, MAX_LAYERS
from pase.planner import evaluate, plan
from pase.strategies.baselines import data_parallel_config

CLUSTER = Cluster(devices=4, peak_flops=10e12, bandwidth_Bps=16e9, name="test")
DOC = Path(__file__).resolve().parents[1] / "docs" / "plan-format.md"


def _mlp() -> Graph:
    g = Graph("mlp")
    g.add_layer(L.fully_connected("fc1", b=64, n=256, c=128))
    g.add_layer(L.fully_connected("fc2", b=64, n=256, c=256), inputs=["fc1"])
    g.add_layer(L.softmax_cross_entropy("loss", (64, 256)), inputs=["fc2"])
    return g


# -- the two forms ----------------------------------------------------------------------------


def test_a_hand_written_strategy_costs_what_evaluate_gives():
    g = _mlp()
    text = '{"fc1": [1, 4, 1], "fc2": [1, 1, 4], "loss": [4, 1]}'
    strategy = loads_strategy(text)
    assert strategy == {"fc1": (1, 4, 1), "fc2": (1, 1, 4), "loss": (4, 1)}
    direct = pase.evaluate(g, CLUSTER, {"fc1": (1, 4, 1), "fc2": (1, 1, 4), "loss": (4, 1)})
    recosted = evaluate_strategy(g, CLUSTER, strategy)
    assert recosted.step_time_s == pytest.approx(direct.step_time_s, rel=1e-12)
    assert recosted.strategy == direct.strategy


def test_layers_a_file_leaves_out_are_data_parallel():
    g = _mlp()
    partial = evaluate_strategy(g, CLUSTER, loads_strategy(b'{"fc2": [1, 4, 1]}'))
    full = {layer.name: data_parallel_config(layer, CLUSTER.devices) for layer in g}
    full["fc2"] = (1, 4, 1)
    assert partial.strategy == full
    assert partial.step_time_s == pytest.approx(evaluate(g, CLUSTER, full).step_time_s, rel=1e-12)


@pytest.mark.parametrize("marker", [{}, {"format": "pase-plan", "version": 1}])
def test_a_plan_document_reads_back_as_its_strategy(marker):
    found = plan(_mlp(), CLUSTER)
    text = json.dumps({**marker, **found.to_dict()})
    strategy = loads_strategy(text)
    assert strategy == found.strategy
    assert evaluate_strategy(_mlp(), CLUSTER, strategy).step_time_s == pytest.approx(found.step_time_s, rel=1e-9)


def test_an_empty_strategy_is_data_parallelism():
    assert loads_strategy("{}") == {} and loads_strategy('{"layers": []}') == {}


def test_a_layer_named_layers_with_a_configuration_is_a_mapping():
    assert loads_strategy('{"layers": [2, 1]}') == {"layers": (2, 1)}


def test_non_standard_numbers_outside_configurations_are_ignored():
    # json.dumps writes Infinity for an infinite speedup; the file must still read.
    assert loads_strategy('{"cost": Infinity, "layers": [{"name": "fc1", "config": [1, 4, 1]}]}') == {"fc1": (1, 4, 1)}


def test_the_documented_examples_read():
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 2
    assert loads_strategy(blocks[0]) == {"conv1": (8, 1, 1, 1, 1, 1, 1), "fc6": (1, 2, 4)}
    assert loads_strategy(blocks[1]) == {"fc6": (1, 8, 1), "fc7": (1, 1, 8)}


# -- bad files ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,match",
    [
        ("{not json", "not valid JSON"),
        (b"\xff\xfe\x00{", "not valid JSON"),
        ("", "not valid JSON"),
        ("[[1, 8, 1]]", "must hold a JSON object.*not list"),
        ("3", "must hold a JSON object.*not int"),
        ('"fc1"', "must hold a JSON object.*not str"),
        ('{"fc1": 8}', "layer 'fc1': the configuration must be a non-empty list"),
        ('{"fc1": []}', "layer 'fc1': the configuration must be a non-empty list"),
        ('{"fc1": "1, 4, 1"}', "layer 'fc1': the configuration must be a non-empty list"),
        ('{"fc1": [1, true, 1]}', "split factor True .* is not a positive integer"),
        ('{"fc1": [1, 2.5, 1]}', "split factor 2.5 .* is not a positive integer"),
        ('{"fc1": [1, 2.0, 1]}', "split factor 2.0 .* is not a positive integer"),
        ('{"fc1": [1, Infinity, 1]}', "split factor inf .* is not a positive integer"),
        ('{"fc1": [1, -Infinity, 1]}', "split factor -inf .* is not a positive integer"),
        ('{"fc1": [1, NaN, 1]}', "split factor nan .* is not a positive integer"),
        ('{"fc1": [1, 1e400, 1]}', "split factor inf .* is not a positive integer"),
        ('{"fc1": [1, -4, 1]}', "split factor -4 .* is not a positive integer"),
        ('{"fc1": [1, 0, 1]}', "split factor 0 .* is not a positive integer"),
        ('{"fc1": [1, "4", 1]}', "split factor '4' .* is not a positive integer"),
        ('{"fc1": [1, [4], 1]}', r"split factor \[4\] .* is not a positive integer"),
        ('{"fc1": [1, 99999999999999999999, 1]}', "split factor 99999999999999999999 .* is not a positive integer"),
        ('{"fc1": [1, ' + "9" * 5000 + ', 1]}', "not valid JSON"),
        ('{"fc1": [1, 4, 1], "fc1": [4, 1, 1]}', "key 'fc1' appears twice"),
        ('{"layers": [{"name": "fc1", "config": [1, 4, 1]}, {"name": "fc1", "config": [4, 1, 1]}]}',
         r"layers\[1\]: layer 'fc1' is listed twice"),
        ('{"layers": [{"name": "fc1", "name": "fc2", "config": [1]}]}', "key 'name' appears twice"),
        ('{"format": "pase-graph", "version": 1, "layers": []}', "'format' must be 'pase-plan'.*graph file"),
        ('{"format": "pase-plan", "version": 2, "layers": []}', "'version' must be 1"),
        ('{"format": "pase-plan", "version": true, "layers": []}', "'version' must be 1"),
        ('{"format": "pase-plan"}', "'layers' must be a list"),
        ('{"format": "pase-plan", "layers": [3]}', r"layers\[0\] must be an object"),
        ('{"layers": [{"config": [1, 4, 1]}]}', r"layers\[0\]: field 'name' must be a layer name"),
        ('{"layers": [{"name": "", "config": [1, 4, 1]}]}', r"layers\[0\]: field 'name' must be a layer name"),
        ('{"layers": [{"name": "fc1"}]}', r"layers\[0\] \('fc1'\) has no field 'config'"),
        ('{"layers": [{"name": "fc1", "config": [1, 0.5]}]}', "layer 'fc1': split factor 0.5"),
    ],
)
def test_a_bad_file_names_the_problem(text, match):
    with pytest.raises(FormatError, match=match):
        loads_strategy(text)


@pytest.mark.parametrize("opener,closer", [("[", "]"), ('{"a":', "}")])
def test_deeply_nested_json_is_a_format_error_not_a_recursion_error(opener, closer):
    depth = 200_000
    with pytest.raises(FormatError, match="nested too deeply"):
        loads_strategy(opener * depth + "1" + closer * depth)


def test_an_oversized_text_is_refused_before_parsing():
    with pytest.raises(FormatError, match="at most 20 MiB"):
        loads_strategy(b" " * (MAX_FILE_BYTES + 1))


def test_too_many_layers_are_refused():
    mapping = {f"l{i}": [1] for i in range(MAX_LAYERS + 1)}
    with pytest.raises(FormatError, match=f"at most {MAX_LAYERS}"):
        strategy_from_dict(mapping)
    with pytest.raises(FormatError, match=f"at most {MAX_LAYERS}"):
        strategy_from_dict({"layers": [{"name": k, "config": v} for k, v in mapping.items()]})


def test_a_name_the_graph_lacks_is_an_error_naming_it():
    with pytest.raises(GraphError, match="nosuchlayer"):
        evaluate_strategy(_mlp(), CLUSTER, loads_strategy('{"nosuchlayer": [1, 4, 1]}'))


# -- files ----------------------------------------------------------------------------------------


def test_load_strategy_reads_a_file_and_prefixes_errors_with_its_name(tmp_path):
    good = tmp_path / "plan.json"
    good.write_text(json.dumps(plan(_mlp(), CLUSTER).to_dict()))
    assert set(load_strategy(good)) == {"fc1", "fc2", "loss"}
    bad = tmp_path / "bad.json"
    bad.write_text('{"fc1": [1, 2.5, 1]}')
    with pytest.raises(FormatError, match=r"^bad\.json: layer 'fc1': split factor 2\.5"):
        load_strategy(bad)
    with pytest.raises(FormatError, match="cannot read"):
        load_strategy(tmp_path / "missing.json")


def test_load_strategy_refuses_an_oversized_file_without_reading_it(tmp_path):
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing written
    with pytest.raises(FormatError, match=r"big\.json is 20\.0 MiB; at most 20 MiB"):
        load_strategy(big)

