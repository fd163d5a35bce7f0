"""The paper's benchmark instances: the search reaches every manifest optimum.

Ten of the 20 shared instances (``../shared/instances``) live in
``tests/data/instances`` with their manifest entries, so the tests need nothing
beside the repository; ``benchmarks/bench_search.py`` runs all 20. The
instances were produced by the paper's own prototype; their optima come from
an exact solver and match the prototype wherever it finished.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pase.io.instance import load_instance
from pase.errors import SearchTooLargeError
from pase.search.exact import estimate, solve

INSTANCES = Path(__file__).resolve().parent / "data" / "instances"
MANIFEST = json.loads((INSTANCES / "manifest.json").read_text())


@pytest.fixture(scope="module")
def instances_dir() -> Path:
    return INSTANCES


def test_every_listed_instance_is_in_the_repository(instances_dir):
    assert len(MANIFEST) == 10
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
