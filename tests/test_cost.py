"""The cost model: edge costs, per-layer vectors, breakdowns, clusters."""

import numpy as np
import pytest

from pase import layers as L
from pase.cluster import PRESETS, Cluster, preset
from pase.configs import ConfigOptions, check_config, layer_configs
from pase.cost import build_cost_model, edge_bytes
from pase.errors import ClusterError, ConfigurationError, SearchTooLargeError
from pase.graph import Graph

ALL = ConfigOptions(min_shard=1)


def _fc_pair(b=32, n=64, c=64):
    g = Graph("pair")
    g.add_layer(L.fully_connected("fc1", b=b, n=n, c=c))
    g.add_layer(L.fully_connected("fc2", b=b, n=n, c=n), inputs=["fc1"])
    return g


def _edge(g, p, bpe=4):
    src, dst = g.layer("fc1"), g.layer("fc2")
    cs, cd = layer_configs(src, p, ALL), layer_configs(dst, p, ALL)
    return cs, cd, edge_bytes(src, 0, cs, dst, 0, cd, bpe)


def test_identical_layouts_cost_nothing():
    cs, cd, m = _edge(_fc_pair(), 8)
    for i, a in enumerate(cs):
        for j, b in enumerate(cd):
            # fc1 output (b, n) vs fc2 input (b, c): same splits and no extra devices.
            if a[0] == b[0] and a[1] == b[2] and np.prod(b) <= np.prod(a):
                assert m[i, j] == 0


def test_data_parallel_edges_are_free():
    cs, cd, m = _edge(_fc_pair(), 8)
    i = np.flatnonzero((cs == [8, 1, 1]).all(axis=1))[0]
    j = np.flatnonzero((cd == [8, 1, 1]).all(axis=1))[0]
    assert m[i, j] == 0


def test_paper_alternating_fc_splits_need_no_redistribution():
    g = _fc_pair(b=128, n=4096, c=4096)
    src, dst = g.layer("fc1"), g.layer("fc2")
    m = edge_bytes(src, 0, np.array([[1, 4, 8]]), dst, 0, np.array([[1, 8, 4]]), 4)
    assert m[0, 0] == 0


def test_edge_cost_is_needed_minus_held_both_directions():
    g = _fc_pair(b=32, n=64)
    src, dst = g.layer("fc1"), g.layer("fc2")
    # Producer splits n 4 ways; consumer wants the whole input on 1 device: it holds a quarter.
    m = edge_bytes(src, 0, np.array([[1, 4, 1]]), dst, 0, np.array([[1, 1, 1]]), 4)
    assert m[0, 0] == pytest.approx(2 * (32 * 64 - 32 * 16) * 4)


def test_more_consumer_devices_than_producer_devices_move_everything():
    g = _fc_pair(b=32, n=64)
    src, dst = g.layer("fc1"), g.layer("fc2")
    m = edge_bytes(src, 0, np.array([[1, 1, 1]]), dst, 0, np.array([[4, 1, 1]]), 4)
    assert m[0, 0] == pytest.approx(2 * (8 * 64) * 4)


def test_more_pieces_than_the_producer_cut_move_the_whole_block():
    # fc1 leaves its output in 2 pieces (each on 16 devices); fc2 wants 4: the paper's rule moves it all.
    g = _fc_pair(b=128, n=4096, c=4096)
    src, dst = g.layer("fc1"), g.layer("fc2")
    m = edge_bytes(src, 0, np.array([[1, 2, 16], [1, 4, 8]]), dst, 0, np.array([[1, 8, 4]]), 4)
    assert m[0, 0] == pytest.approx(2 * 128 * 1024 * 4)
    assert m[1, 0] == 0


def test_edge_cost_grows_with_bytes_moved():
    _, _, small = _edge(_fc_pair(b=32), 8)
    _, _, big = _edge(_fc_pair(b=64), 8, bpe=4)
    _, _, wide = _edge(_fc_pair(b=32), 8, bpe=8)
    assert np.allclose(wide, 2 * small)
    assert np.all(big >= small) and big.sum() > small.sum()


def test_non_differentiable_inputs_move_one_way():
    labels = L.reduce_mean("labels", (8, 4), ("b", "x"), ["x"])
    loss = L.softmax_cross_entropy("loss", (8, 16))
    m = edge_bytes(labels, 0, np.array([[1, 1]]), loss, 1, np.array([[2, 1]]), 4)
    assert m[0, 0] == 4 * 4  # a 4-label block forward, no gradient back


def test_cost_graph_matches_breakdown():
    g = _fc_pair()
    cluster = Cluster(4, 10e12, 16e9)
    model = build_cost_model(g, cluster, ALL)
    cg = model.cost_graph()
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = [int(rng.integers(len(v))) for v in cg.node_costs]
        rows = model.breakdown({l.name: a[i] for i, l in enumerate(model.layers)})
        total_s = sum(r.total_s for r in rows)
        assert total_s * cluster.peak_flops == pytest.approx(cg.cost_of(a))


def test_edge_table_budget_refuses_before_building():
    with pytest.raises(SearchTooLargeError, match="GiB"):
        build_cost_model(_fc_pair(), Cluster(64, 10e12, 16e9), ALL, table_budget_bytes=1000)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"devices": 0}, "devices"),
        ({"peak_flops": 0}, "peak_flops"),
        ({"bandwidth_Bps": -1}, "bandwidth"),
        ({"bytes_per_element": 3}, "bytes_per_element"),
    ],
)
def test_impossible_clusters_are_refused(kwargs, match):
    base = {"devices": 8, "peak_flops": 1e12, "bandwidth_Bps": 1e9}
    with pytest.raises(ClusterError, match=match):
        Cluster(**{**base, **kwargs})


def test_presets_have_published_figures():
    assert set(PRESETS) >= {"paper-1080ti", "paper-2080ti", "dgx1-v100", "dgx-a100", "dgx-h100"}
    assert preset("dgx-h100", 16).devices == 16
    with pytest.raises(ClusterError, match="unknown cluster preset"):
        preset("tpu")


def test_configs_respect_devices_and_divisibility():
    conv = L.conv2d("c", b=12, c=6, height=9, width=9, n=10, r=3, pad=1)
    for p in (1, 3, 8, 12):
        cfgs = layer_configs(conv, p, ALL)
        assert (cfgs[0] == 1).all()
        assert np.all(np.prod(cfgs, axis=1) <= p)
        assert np.all(np.asarray(conv.sizes) % cfgs == 0)
        # r, s never split; h, w only with spatial_split.
        assert np.all(cfgs[:, 2:4] == 1) and np.all(cfgs[:, 5:] == 1)
    spatial = layer_configs(conv, 9, ConfigOptions(min_shard=1, spatial_split=True))
    assert spatial[:, 2].max() == 9


def test_config_options_powers_of_two_and_min_shard():
    fc = L.fully_connected("fc", b=24, n=48, c=12)
    pow2 = layer_configs(fc, 16, ConfigOptions(powers_of_two=True, min_shard=1))
    assert set(np.unique(pow2)) <= {1, 2, 4, 8, 16}
    shard = layer_configs(fc, 16, ConfigOptions(min_shard=4))
    assert np.all(np.asarray(fc.sizes) / shard >= 4)


@pytest.mark.parametrize(
    "config,match",
    [((1, 1), "one per dimension"), ((5, 1, 1), "cannot be split 5 ways"), ((4, 4, 4), "uses 64 devices")],
)
def test_check_config_names_the_problem(config, match):
    fc = L.fully_connected("fc", b=8, n=8, c=8)
    with pytest.raises(ConfigurationError, match=match):
        check_config(fc, config, 8)


def test_plan_json_layer_costs_add_up_to_the_total_in_both_units():
    from pase.planner import plan

    g = _fc_pair()
    d = plan(g, Cluster(4, 10e12, 16e9)).to_dict()
    assert sum(l["cost_flop_eq"] for l in d["layers"]) == pytest.approx(d["cost"])
    assert sum(l["compute_s"] + l["intra_comm_s"] + l["edge_comm_s"] for l in d["layers"]) == pytest.approx(d["step_time_s"])
