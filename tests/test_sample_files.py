"""The committed sample_graphs/*.json files equal the builders' output and load back.

The large language models (:data:`pase.models.LANGUAGE_MODELS`: Megatron-LM's, Llama's and
today's mixtures of experts) need no committed file: they are built by code in well under a
second, and their files would add megabytes of JSON (``python -m pase.models`` skips them). Where one is committed it is checked
like the others; where not, the graph round-trips in memory.
"""

from pathlib import Path

import pytest

from pase.io.graph_json import dumps_graph, load_graph, loads_graph
from pase.models import LANGUAGE_MODELS, SAMPLES, sample

BUILT_BY_CODE = set(LANGUAGE_MODELS)

FILES = Path(__file__).resolve().parents[1] / "sample_graphs"


def test_every_sample_has_a_file_and_no_file_is_stale():
    committed = {p.stem for p in FILES.glob("*.json")}
    assert committed <= set(SAMPLES), "a file of no sample"
    assert set(SAMPLES) - set(BUILT_BY_CODE) <= committed, "run: python -m pase.models"


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_file_equals_builder_and_round_trips(name):
    graph = sample(name)
    if name in BUILT_BY_CODE and not (FILES / f"{name}.json").exists():
        loaded = loads_graph(dumps_graph(graph))
        assert loaded.layers == graph.layers and loaded.edges == graph.edges
        return
    assert (FILES / f"{name}.json").read_text() == dumps_graph(graph) + "\n", "run: python -m pase.models"
    loaded = load_graph(FILES / f"{name}.json")
    assert loaded.layers == graph.layers
    assert loaded.edges == graph.edges
