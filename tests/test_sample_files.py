"""The committed sample_graphs/*.json files equal the builders' output and load back."""

from pathlib import Path

import pytest

from pase.io.graph_json import dumps_graph, load_graph
from pase.models import SAMPLES, sample

FILES = Path(__file__).resolve().parents[1] / "sample_graphs"


def test_every_sample_has_a_file_and_no_file_is_stale():
    assert {p.stem for p in FILES.glob("*.json")} == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_file_equals_builder_and_round_trips(name):
    graph = sample(name)
    assert (FILES / f"{name}.json").read_text() == dumps_graph(graph) + "\n", "run: python -m pase.models"
    loaded = load_graph(FILES / f"{name}.json")
    assert loaded.layers == graph.layers
    assert loaded.edges == graph.edges
