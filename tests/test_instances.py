"""The 20 shared instances (../shared/instances): the search reaches every manifest optimum.

The instances were produced by the paper's own prototype; their optima come from
an exact solver and match the prototype wherever it finished. Missing instances
are a failure, not a skip: CI keeps ../shared beside the repository.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pase.costgraph import load_instance
from pase.errors import SearchTooLargeError
from pase.search import estimate, solve

INSTANCES = Path(__file__).resolve().parents[1].parent / "shared" / "instances"


def _manifest() -> list[dict]:
    path = INSTANCES / "manifest.json"
    if not path.is_file():
        return []
    return json.loads(path.read_text())


MANIFEST = _manifest()


@pytest.fixture(scope="module")
def instances_dir() -> Path:
    if not MANIFEST:
        pytest.fail(f"shared instances not found at {INSTANCES} (expected ../shared/instances beside the repository)")
    return INSTANCES


def test_all_twenty_instances_are_listed(instances_dir):
    assert len(MANIFEST) == 20
    for entry in MANIFEST:
        assert (instances_dir / entry["file"]).is_file(), entry["file"]


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"].split(".")[0] for e in MANIFEST])
def test_instance_reaches_manifest_optimum(instances_dir, entry):
    g, meta = load_instance(instances_dir / entry["file"])
    assert meta["name"] == entry["name"] and meta["devices"] == entry["devices"]
    assert g.num_nodes == entry["nodes"] and len(g.edges) == entry["edges"]
    assert max(g.config_counts) == entry["max_configs"] and sum(g.config_counts) == entry["total_configs"]
    assert all(len(node["configs"]) == k for node, k in zip(meta["nodes"], g.config_counts, strict=True))
    result = solve(g)
    optimum = entry["optimal_cost"]
    assert abs(result.cost - optimum) / optimum < 1e-9, (result.cost, optimum)
    assert result.cost == g.cost_of(result.assignment)


@pytest.mark.parametrize("name", ["alexnet-p16", "rnnlm-p16", "inception3-p4", "transformer-p4"])
def test_every_ordering_and_unpruned_search_agree(instances_dir, name):
    entry = next(e for e in MANIFEST if e["file"].startswith(name + "."))
    g, _ = load_instance(instances_dir / entry["file"])
    orderings = ["generateseq", "min-table", "min-fill"] + (["bfs"] if name.startswith(("alexnet", "rnnlm")) else [])
    for ordering in orderings:
        for prune in (False, True):
            cost = solve(g, ordering=ordering, prune=prune).cost
            assert abs(cost - entry["optimal_cost"]) / entry["optimal_cost"] < 1e-9, (ordering, prune)


@pytest.mark.parametrize("name", ["inception3-p4", "transformer-p4"])
def test_breadth_first_is_refused_where_the_paper_ran_out_of_memory(instances_dir, name):
    entry = next(e for e in MANIFEST if e["file"].startswith(name + "."))
    g, _ = load_instance(instances_dir / entry["file"])
    assert estimate(g, ordering="bfs").max_dependent_set >= 10
    with pytest.raises(SearchTooLargeError, match="GiB"):
        solve(g, ordering="bfs", memory_budget_bytes=16 * 2**30)
