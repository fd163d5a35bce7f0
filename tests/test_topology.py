"""Two-level clusters: placement, hierarchical collectives, edges, and equality with the flat model."""

import numpy as np
import pytest

from pase import layers as L
from pase import topology as T
from pase.cli import _cluster, build_parser
from pase.cluster import PRESETS, Cluster, preset
from pase.configs import ConfigOptions, layer_configs
from pase.cost import build_cost_model, edge_bytes, layer_comm_bytes
from pase.errors import ClusterError
from pase.graph import Graph
from pase.models import SAMPLES, sample
from pase.planner import evaluate, plan

ALL = ConfigOptions(min_shard=1)
FLAT = Cluster(16, 10e12, 16e9)

# One small layer of every op (the layer library's hand-counted set, plus Split and Transpose).
EVERY_OP = [
    L.fully_connected("fc", b=8, n=6, c=4),
    L.einsum("ff", "bsd,ed->bse", {"b": 2, "s": 4, "d": 8, "e": 16}, weights=[1], bias=True),
    L.einsum("att", "bshc,bkhc->bhsk", {"b": 2, "s": 4, "h": 2, "c": 8, "k": 4}),
    L.conv2d("conv", b=4, c=4, height=8, width=8, n=4, r=3, pad=1),
    L.pooling("pool", b=4, c=4, height=8, width=8, kernel=2),
    L.elementwise("add", (4, 8), ("b", "n"), inputs=2, pointwise=1),
    L.batch_norm("bn", b=4, c=4, h=4, w=4),
    L.layer_norm("ln", (2, 4, 8), ("b", "s", "d")),
    L.softmax("sm", (4, 16), ("b", "n")),
    L.softmax_cross_entropy("xent", (4, 16)),
    L.embedding("emb", b=4, s=4, d=8, v=64),
    L.lstm("lstm", l=4, b=4, s=4, d=8, e=8),
    L.concat("cat", [(4, 4, 4, 4), (4, 8, 4, 4)], ("b", "c", "h", "w"), "c"),
    L.split("split", (4, 8, 4), ("b", "c", "h"), "c", [3, 5]),
    L.reshape("flat", (4, 4, 2, 2), ("b", "c", "h", "w"), (4, 16)),
    L.transpose("tr", (4, 4, 8), ("b", "s", "d"), (1, 0, 2)),
    L.reduce_mean("mean", (4, 4, 8), ("b", "s", "d"), ["s"]),
]


def _two_level(devices=16, per_node=4, intra=16e9, inter=16e9, **kw):
    return Cluster(devices, 10e12, intra, devices_per_node=per_node, inter_bandwidth_Bps=inter, **kw)


# -- the cluster -----------------------------------------------------------------------------------


def test_cluster_topology_fields():
    c = _two_level(16, 4, 100e9, 10e9)
    assert (c.nodes, c.node_size, c.is_flat) == (4, 4, False)
    assert c.intra_bandwidth_Bps == 100e9 and c.network_bandwidth_Bps == 10e9
    assert "4 nodes x 4" in str(c)
    assert FLAT.nodes == 1 and FLAT.is_flat and str(FLAT) == "16 x 10 TFLOP/s, 16 GB/s links"
    assert _two_level(16, 4, 16e9, 16e9).is_flat  # equal bandwidths
    assert _two_level(4, 8, 16e9, 1e9).is_flat  # one (partly used) node
    assert _two_level(12, 8).nodes == 2


@pytest.mark.parametrize("kwargs,match", [
    ({"devices_per_node": 0}, "devices_per_node"),
    ({"inter_bandwidth_Bps": 0}, "inter_bandwidth"),
    ({"inter_bandwidth_Bps": float("inf")}, "inter_bandwidth"),
])
def test_impossible_topologies_are_refused(kwargs, match):
    with pytest.raises(ClusterError, match=match):
        Cluster(8, 1e12, 1e9, **kwargs)


def test_presets_carry_nodes_and_networks():
    for name in ("dgx1-v100", "dgx-a100", "dgx-h100", "paper-1080ti", "paper-2080ti"):
        c = PRESETS[name]
        assert c.node_size == 8 and c.nodes == 1 and c.memory_bytes > 0
        assert c.network_bandwidth_Bps < c.bandwidth_Bps
    assert preset("dgx-a100", 32).nodes == 4
    assert PRESETS["paper-model"].is_flat and PRESETS["paper-model"].memory_bytes is None


# -- placement and collectives -----------------------------------------------------------------------


def test_node_factors_place_the_last_dimension_innermost():
    cfg = np.array([[4, 2, 1], [2, 8, 2], [16, 1, 1], [1, 1, 16], [2, 2, 4]])
    assert T.node_factors(cfg, 8).tolist() == [[1, 1, 1], [2, 2, 1], [2, 1, 1], [1, 1, 2], [2, 1, 1]]
    # The product of a row is the number of nodes the configuration uses.
    assert np.prod(T.node_factors(cfg, 4), axis=1).tolist() == [2, 8, 4, 4, 4]


def test_group_sizes_split_devices_into_nodes():
    fc = L.fully_connected("fc", b=32, n=32, c=32)
    cfg = np.array([[4, 4, 1]])  # n innermost: n-groups stay in a node of 4, b-groups span 4 nodes
    assert [x.tolist() for x in T.group_sizes(fc, cfg, ("n",), 4)] == [[4.0], [4.0], [1.0]]
    assert [x.tolist() for x in T.group_sizes(fc, cfg, ("b",), 4)] == [[4.0], [1.0], [4.0]]
    assert [x.tolist() for x in T.group_sizes(fc, cfg, ("b", "n"), 8)] == [[16.0], [8.0], [2.0]]


def test_hierarchical_allreduce_by_hand():
    M, bi, bo = 1e6, 100e9, 10e9
    t = T.allreduce_time_s(M, 4, 2, bi, bo)
    assert t == pytest.approx(2 * 3 / 4 * M / bi + 2 * 1 / 2 * (M / 4) / bo)
    assert T.allreduce_time_s(M, 8, 1, bi, bo) == pytest.approx(2 * 7 / 8 * M / bi)
    # Equal bandwidths: the flat ring, 2 (k - 1) / k M / B.
    assert T.allreduce_time_s(M, 4, 2, bi, bi) == pytest.approx(2 * 7 / 8 * M / bi, rel=1e-14)
    assert T.allgather_time_s(M, 4, 2, bi, bi) == pytest.approx(7 / 8 * M / bi, rel=1e-14)
    assert T.exchange_time_s(M, 1, bi, bo) == M / bi and T.exchange_time_s(M, 2, bi, bo) == M / bo


@pytest.mark.parametrize("layer", EVERY_OP, ids=lambda l: l.op)
def test_layer_times_with_equal_bandwidths_are_the_flat_times(layer):
    # One list of collectives per op, priced twice: hierarchically here, on flat rings by layer_comm_bytes.
    cfgs = layer_configs(layer, 16, ConfigOptions(min_shard=1, spatial_split=True))
    c = _two_level(16, 4)
    assert np.allclose(T.layer_comm_time_s(layer, cfgs, c) * c.bandwidth_Bps, layer_comm_bytes(layer, cfgs, 4),
                       rtol=1e-12, atol=0)


def test_a_slower_network_never_speeds_a_layer_up():
    slow = _two_level(16, 4, 16e9, 2e9)
    for layer in EVERY_OP:
        cfgs = layer_configs(layer, 16, ConfigOptions(min_shard=1, spatial_split=True))
        flat = layer_comm_bytes(layer, cfgs, 4) / 16e9
        assert np.all(T.layer_comm_time_s(layer, cfgs, slow) >= flat * (1 - 1e-12))


# -- edges -------------------------------------------------------------------------------------------


def _pair(b=32, n=64):
    g = Graph("pair")
    g.add_layer(L.fully_connected("fc1", b=b, n=n, c=n))
    g.add_layer(L.fully_connected("fc2", b=b, n=n, c=n), inputs=["fc1"])
    return g


def test_edge_time_by_hand():
    g = _pair()
    src, dst = g.layer("fc1"), g.layer("fc2")
    c = _two_level(16, 8, 100e9, 10e9)
    elements = 32 * 64
    # Producer data parallel on 2 nodes, consumer on one device of node 0: node 0 holds half the
    # tensor (a 1/16 block on the device itself), the other half crosses the network.
    t = T.edge_time_s(src, 0, np.array([[16, 1, 1]]), dst, 0, np.array([[1, 1, 1]]), c)
    expected = 2 * 4 * ((elements / 2 - elements / 16) / 100e9 + (elements / 2) / 10e9)
    assert t[0, 0] == pytest.approx(expected)
    # Identical layouts move nothing; a layout change inside one node uses the fast links only.
    assert T.edge_time_s(src, 0, np.array([[16, 1, 1]]), dst, 0, np.array([[16, 1, 1]]), c)[0, 0] == 0
    inside = T.edge_time_s(src, 0, np.array([[1, 4, 1]]), dst, 0, np.array([[4, 1, 1]]), c)[0, 0]
    moved = edge_bytes(src, 0, np.array([[1, 4, 1]]), dst, 0, np.array([[4, 1, 1]]), 4)[0, 0]
    assert inside == pytest.approx(moved / 100e9)
    # Consumer on more nodes than the producer: everything it needs crosses the network.
    out = T.edge_time_s(src, 0, np.array([[8, 1, 1]]), dst, 0, np.array([[16, 1, 1]]), c)[0, 0]
    assert out == pytest.approx(2 * 4 * (elements / 16) / 10e9)


# -- the cost model on every sample -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_one_node_or_equal_bandwidths_equal_the_flat_model_exactly(name):
    g = sample(name)
    options = ConfigOptions(powers_of_two=True)
    flat = build_cost_model(g, Cluster(8, 10e12, 16e9), options).cost_graph()
    for cluster in (
        Cluster(8, 10e12, 16e9, devices_per_node=8, inter_bandwidth_Bps=1e9),  # one node
        Cluster(8, 10e12, 16e9, devices_per_node=2, inter_bandwidth_Bps=16e9),  # equal bandwidths
    ):
        two = build_cost_model(g, cluster, options).cost_graph()
        assert all(np.array_equal(a, b) for a, b in zip(flat.node_costs, two.node_costs))
        assert all(u1 == u2 and v1 == v2 and np.array_equal(m1, m2)
                   for (u1, v1, m1), (u2, v2, m2) in zip(flat.edges, two.edges))


@pytest.mark.parametrize("name", ["alexnet", "transformer", "rnnlm", "inception3"])
def test_hierarchical_formulas_with_equal_bandwidths_match_the_flat_tables(name):
    # The flat path is taken whenever bandwidths are equal; price the same tables through the
    # two-level formulas anyway and compare.
    g = sample(name)
    cluster = _two_level(8, 2, 16e9, 16e9)
    options = ConfigOptions(powers_of_two=True)
    model = build_cost_model(g, cluster, options)
    for layer in model.layers:
        cfgs = model.configs[layer.name]
        assert np.allclose(T.layer_comm_time_s(layer, cfgs, cluster) * 16e9, model.intra_bytes[layer.name],
                           rtol=1e-9, atol=1e-6)
    for e, table in model.edge_tables:
        t = T.edge_time_s(g.layer(e.src), e.src_output, model.configs[e.src],
                          g.layer(e.dst), e.dst_input, model.configs[e.dst], cluster)
        assert np.allclose(t * 16e9, table, rtol=1e-9, atol=1e-6)


def test_two_nodes_with_a_slower_network_raise_the_step_time():
    g = sample("transformer")
    options = ConfigOptions(powers_of_two=True)
    flat = Cluster(16, 10e12, 16e9)
    slow = Cluster(16, 10e12, 16e9, devices_per_node=8, inter_bandwidth_Bps=2e9)
    dp = {layer.name: tuple(16 if d == "b" else 1 for d in layer.dims) for layer in g}
    assert evaluate(g, slow, dp).step_time_s > evaluate(g, flat, dp).step_time_s
    best_flat, best_slow = plan(g, flat, options=options), plan(g, slow, options=options)
    assert best_slow.step_time_s > best_flat.step_time_s
    # The two-level plan is costed consistently: its breakdown adds up to its cost.
    assert sum(r.total_s for r in best_slow.layers) == pytest.approx(best_slow.step_time_s, rel=1e-12)
    again = evaluate(g, slow, best_slow.strategy)
    assert again.cost == pytest.approx(best_slow.cost, rel=1e-12)
    d = best_slow.to_dict()["cluster"]
    assert (d["nodes"], d["devices_per_node"], d["inter_bandwidth_Bps"]) == (2, 8, 2e9)


def test_cost_graph_matches_breakdown_on_two_levels():
    g = _pair()
    cluster = _two_level(16, 4, 100e9, 5e9)
    model = build_cost_model(g, cluster, ALL)
    cg = model.cost_graph()
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = [int(rng.integers(len(v))) for v in cg.node_costs]
        rows = model.breakdown({l.name: a[i] for i, l in enumerate(model.layers)})
        assert sum(r.total_s for r in rows) * cluster.peak_flops == pytest.approx(cg.cost_of(a))
        assert model.strategy_cost(rows) == pytest.approx(cg.cost_of(a))


# -- the CLI -----------------------------------------------------------------------------------------


def test_cli_topology_options():
    args = build_parser().parse_args(["solve", "alexnet", "--devices", "16", "--nodes", "2",
                                      "--intra-bandwidth", "150", "--inter-bandwidth", "12.5", "--memory-gb", "16"])
    c = _cluster(args)
    assert (c.nodes, c.node_size, c.bandwidth_Bps, c.network_bandwidth_Bps, c.memory_bytes) == (2, 8, 150e9, 12.5e9, 16e9)
    args = build_parser().parse_args(["solve", "alexnet", "--devices", "16", "--devices-per-node", "4"])
    assert _cluster(args).nodes == 4
    args = build_parser().parse_args(["solve", "alexnet", "--devices", "16", "--nodes", "3"])
    with pytest.raises(ClusterError, match="--nodes 3 does not divide 16 devices"):
        _cluster(args)
