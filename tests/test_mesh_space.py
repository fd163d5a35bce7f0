"""The mesh split space (ConfigOptions(split_space="mesh")): placements of whole mesh axes, checked by hand."""

from __future__ import annotations

import pytest

from pase import ops as L
from pase.cli import main
from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster, preset
from pase.ir.configs import ConfigOptions, layer_configs, mesh_shapes
from pase.model.cost import options_on
from pase.models import sample
from pase.planner import PlanOptions, plan

MESH = ConfigOptions(split_space="mesh")


def test_the_mesh_shapes_are_the_hierarchy_and_its_node_split_in_two():
    assert mesh_shapes((8, 8), 64) == [(8, 8), (8, 2, 4), (8, 4, 2)]
    assert mesh_shapes((), 6) == [(6,), (2, 3), (3, 2)]
    assert mesh_shapes((4, 2), 8) == [(4, 2)]  # two GPUs split no further
    with pytest.raises(ConfigurationError, match="does not hold"):
        mesh_shapes((4, 4), 8)


def test_mesh_configurations_of_a_gemm_on_eight_devices_by_hand():
    fc = L.fully_connected("fc", b=8, n=8, c=8)
    got = {tuple(r) for r in layer_configs(fc, 8, MESH.on_mesh((8,)))}
    # One axis of 8, or 2 x 4 (4 x 2 gives the same tuples): each part to b, n, c or none.
    one = {(1, 1, 1), (8, 1, 1), (1, 8, 1), (1, 1, 8)}
    two = {(2, 1, 1), (1, 2, 1), (1, 1, 2), (4, 1, 1), (1, 4, 1), (1, 1, 4),
           (2, 4, 1), (4, 2, 1), (2, 1, 4), (4, 1, 2), (1, 2, 4), (1, 4, 2)}
    assert got == one | two
    divisors = {tuple(r) for r in layer_configs(fc, 8, ConfigOptions())}
    # What the divisors add: 8 cut into three 2s, or a 4 cut in two across dimensions.
    assert divisors - got == {(2, 2, 1), (2, 1, 2), (1, 2, 2), (2, 2, 2)}
    assert layer_configs(fc, 8, MESH.on_mesh((8,)))[0].tolist() == [1, 1, 1]  # row 0 unsplit, as always


def test_the_mesh_space_respects_what_a_dimension_allows():
    # c = 4 cannot take a whole axis of 8; the 4 of a 2 x 4 node it can.
    fc = L.fully_connected("fc", b=16, n=8, c=4)
    got = {tuple(r) for r in layer_configs(fc, 16, MESH.on_mesh((2, 8)))}
    assert (1, 1, 8) not in got and (1, 2, 4) in got and (2, 2, 4) in got
    assert all(16 % (b * n * c) == 0 and 4 % c == 0 for b, n, c in got)


def test_auto_is_the_mesh_on_todays_presets_and_the_divisors_on_the_papers_and_hand_built_ones():
    auto = ConfigOptions(split_space="auto")
    assert options_on(auto, preset("paper-2080ti", devices=16)).split_space == "divisors"
    assert options_on(auto, preset("dgx-a100", devices=16, calibrated=False)) == ConfigOptions(split_space="mesh", mesh_shape=(2, 8))
    assert options_on(auto, Cluster(16, 1e12, 1e10, devices_per_node=8)).split_space == "divisors"
    assert ConfigOptions().split_space == "auto"


def test_the_mesh_optimum_is_never_below_the_divisors_and_lies_in_its_space():
    graph = sample("gpt", batch=8, seq=128, layers=2, vocab=8192)
    cluster = preset("dgx-a100", devices=16, calibrated=False)
    full = plan(graph, cluster)
    mesh = plan(graph, cluster, PlanOptions(configs=MESH))
    assert mesh.cost >= full.cost * (1 - 1e-12)
    space = MESH.on_mesh(cluster.mesh.shape)
    for row in mesh.layers:
        layer = graph.layer(row.name)
        assert list(row.config) in layer_configs(layer, 16, space).tolist()


def test_show_reports_both_counts(capsys):
    assert main(["show", "alexnet", "-p", "8", "--cluster", "dgx-a100", "--peak-rates"]) == 0
    out = capsys.readouterr().out
    assert "configurations (divisors)" in out and "configurations (mesh)" in out
    assert "divisors configurations" in out.splitlines()[-1] and "mesh configurations" in out.splitlines()[-1]
