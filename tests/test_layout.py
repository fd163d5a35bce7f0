"""Layouts with pending sums under the corrected cost model, against volumes computed by hand.

Every expected time below is written out from the collective's definition
(a ring over k devices moves (k - 1) / k of the gathered or scattered block
per device), not taken from the code.
"""

import numpy as np
import pytest

from pase import ops as L
from pase.hardware.cluster import Cluster
from pase.hardware.mesh import MeshAxis
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.model.cost import build_cost_model
from pase.model.layout import place, placeable

B_, S_, D_, F_ = 8, 16, 32, 64
BPE = 2
BW = 100e9


def _flat(devices=4):
    return Cluster(devices, 100e12, BW, bytes_per_element=BPE)


def _edge_s(graph, cluster, strategy, options=ConfigOptions()):
    """Seconds of the one edge of a two-layer graph under a fixed strategy (layer -> configuration)."""
    configs = {name: np.array([cfg]) for name, cfg in strategy.items()}
    model = build_cost_model(graph, cluster, options, configs=configs)
    (_, table), = model.edge_tables
    return float(table[0, 0])


def _directions(graph, cluster, strategy, src="fc1", dst="fc2"):
    """(forward, backward) seconds of the edge src -> dst: the tensor from the producer's output layout
    to the consumer's input layout, and its gradient from the consumer's input-gradient layout to
    the producer's output layout (pending sums read as replicated)."""
    from pase.model.layout import redistribute_s, tensor_layout

    model = build_cost_model(graph, cluster, configs={k: np.array([v]) for k, v in strategy.items()})
    a, b = graph.layer(src), graph.layer(dst)
    pa, pb = model.placements[src], model.placements[dst]
    forward = redistribute_s(tensor_layout(a, a.outputs[0], pa, partial=True),
                             tensor_layout(b, b.inputs[0], pb, partial=False), cluster.mesh, BPE)
    backward = redistribute_s(tensor_layout(b, b.inputs[0], pb, partial=True),
                              tensor_layout(a, a.outputs[0], pa, partial=False), cluster.mesh, BPE)
    return float(forward[0, 0]), float(backward[0, 0])


def _row_parallel_then_norm():
    """Megatron's row-parallel linear (the reduction f split) feeding a LayerNorm."""
    g = Graph("rowparallel")
    g.add_layer(L.einsum("proj", "bsf,df->bsd", {"b": B_, "s": S_, "f": F_, "d": D_}, weights=[1]))
    g.add_layer(L.layer_norm("norm", (B_, S_, D_), ("b", "s", "d")), inputs=["proj"])
    return g


T_YBYTES = B_ * S_ * D_ * BPE  # the projection's output


def test_partial_output_finished_by_a_reduce_scatter_into_a_sequence_sharded_consumer():
    # proj dims b s f d: f split 4 ways leaves y partial; norm dims b s d: s split 4 ways.
    seconds = _edge_s(_row_parallel_then_norm(), _flat(), {"proj": (1, 1, 4, 1), "norm": (1, 4, 1)})
    reduce_scatter = 3 / 4 * T_YBYTES / BW
    # Backward: the norm's input gradient is sharded on s; the projection's partial blocks each need all of dy.
    all_gather = 3 / 4 * T_YBYTES / BW
    assert seconds == pytest.approx(reduce_scatter + all_gather)


def test_partial_output_into_a_replicated_consumer_is_an_all_reduce():
    seconds = _edge_s(_row_parallel_then_norm(), _flat(), {"proj": (1, 1, 4, 1), "norm": (1, 1, 1)})
    all_reduce = 2 * 3 / 4 * T_YBYTES / BW
    assert seconds == pytest.approx(all_reduce)  # the replicated gradient is already everywhere


def test_the_paper_model_all_reduces_partial_sums_inside_the_layer_instead():
    g, c = _row_parallel_then_norm(), _flat()
    strategy = {"proj": (1, 1, 4, 1), "norm": (1, 1, 1)}
    paper = build_cost_model(g, c, ConfigOptions(cost_model="paper"),
                             configs={k: np.array([v]) for k, v in strategy.items()})
    # y's partial sums and x's gradient? x = (b, s, f) is indexed by f: only y is partial.
    assert float(paper.comm_s["proj"][0]) == pytest.approx(2 * 3 / 4 * T_YBYTES / BW)
    corrected = build_cost_model(g, c, configs={k: np.array([v]) for k, v in strategy.items()})
    assert float(corrected.comm_s["proj"][0]) == 0.0


def _two_fc(n=64, c=32, b=16):
    g = Graph("two")
    g.add_layer(L.fully_connected("fc1", b=b, n=c, c=c, bias=False))
    g.add_layer(L.fully_connected("fc2", b=b, n=n, c=c, bias=False), inputs=["fc1"])
    return g, b * c * BPE  # the tensor between them, in bytes


def test_replicated_to_sharded_moves_nothing_forward_and_gathers_the_gradient_back():
    g, t = _two_fc()
    strategy = {"fc1": (1, 1, 1), "fc2": (4, 1, 1)}
    seconds = _edge_s(g, _flat(), strategy)
    # Forward 0: every device already holds the whole tensor. Backward: fc1 (replicated) needs
    # the whole gradient, which fc2 leaves sharded by batch: an all-gather.
    assert seconds == pytest.approx(3 / 4 * t / BW)
    assert _directions(g, _flat(), strategy) == (0.0, pytest.approx(3 / 4 * t / BW))


def test_sharded_to_replicated_is_an_all_gather_and_its_gradient_a_local_slice():
    g, t = _two_fc()
    seconds = _edge_s(g, _flat(), {"fc1": (4, 1, 1), "fc2": (1, 1, 1)})
    assert seconds == pytest.approx(3 / 4 * t / BW)


def test_a_shard_moved_to_another_dimension_is_an_all_to_all_both_ways():
    g, t = _two_fc()
    # fc1 shards its output by batch; fc2 splits its input features c (fc1's n).
    seconds = _edge_s(g, _flat(), {"fc1": (4, 1, 1), "fc2": (1, 1, 4)})
    # Each device keeps 1/16 of the tensor and sends 3 of its 4 sixteenths: (k - 1) / k of a quarter.
    one_way = 3 / 4 * (t / 4) / BW
    assert seconds == pytest.approx(2 * one_way)


def test_identical_layouts_cost_nothing():
    g, _ = _two_fc()
    for cfg in [(4, 1, 1), (1, 4, 1), (2, 2, 1)]:
        assert _edge_s(g, _flat(), {"fc1": cfg, "fc2": cfg if cfg[1] == 1 else (cfg[0], 1, cfg[1])}) == 0.0



def test_one_configuration_each_costs_what_the_whole_table_does():
    # redistribute_s of one layout each (a shortcut where they are the same and hold no pending sums) equals the
    # entry of the table over every configuration pair (the general steps), same layouts or not, on a two-level
    # mesh, for the tensor, its partial sums and its gradient.
    from pase.model.layout import Placement, redistribute_s, tensor_layout

    g, _ = _two_fc()
    cluster = _pod()
    model = build_cost_model(g, cluster)
    a, b = g.layer("fc1"), g.layer("fc2")
    pa, pb = model.placements["fc1"], model.placements["fc2"]

    def row(placement, k):
        return Placement(placement.mesh, placement.masks[k:k + 1], placement.factors[k:k + 1])

    same = 0
    for (src, sp, out, partial), (dst, dp, into) in [((a, pa, a.outputs[0], True), (b, pb, b.inputs[0])),
                                                    ((b, pb, b.inputs[0], True), (a, pa, a.outputs[0])),
                                                    ((a, pa, a.outputs[0], False), (a, pa, a.outputs[0]))]:
        whole = redistribute_s(tensor_layout(src, out, sp, partial=partial),
                               tensor_layout(dst, into, dp, partial=False), cluster.mesh, BPE)
        for i in range(len(sp.masks)):
            for j in range(len(dp.masks)):
                one = tensor_layout(src, out, row(sp, i), partial=partial)
                other = tensor_layout(dst, into, row(dp, j), partial=False)
                same += bool(np.array_equal(one.shard, other.shard) and not one.partial.any())
                assert redistribute_s(one, other, cluster.mesh, BPE)[0, 0] == whole[i, j], (i, j)
    assert same > 0


IN, OUT = 300e9, 25e9


def _pod():
    """2 nodes x 2 GPUs: NVLink inside a node, a slower network across."""
    axes = (MeshAxis("node", 2, OUT), MeshAxis("gpu", 2, IN))
    return Cluster(4, 100e12, IN, bytes_per_element=BPE, mesh_axes=axes)


def test_on_a_two_level_mesh_a_gather_sends_only_a_node_s_share_over_the_network():
    g, t = _two_fc()
    seconds = _edge_s(g, _pod(), {"fc1": (4, 1, 1), "fc2": (1, 1, 1)})
    # Hierarchical all-gather of the whole tensor: across nodes each device fetches the one quarter
    # its node lacks and its peer does not fetch; inside the node it then takes half from its peer.
    assert seconds == pytest.approx((t / 4) / OUT + (t / 2) / IN)


def test_on_a_two_level_mesh_a_partial_sum_reduce_scatters_inside_then_across():
    seconds = _edge_s(_row_parallel_then_norm(), _pod(), {"proj": (1, 1, 4, 1), "norm": (1, 4, 1)})
    # Reduce-scatter over the node's 2 GPUs on the whole block, then over the 2 nodes on half of it;
    # the backward all-gather mirrors it.
    one_way = 1 / 2 * T_YBYTES / IN + 1 / 2 * (T_YBYTES / 2) / OUT
    assert seconds == pytest.approx(2 * one_way)


def test_on_a_two_level_mesh_an_all_to_all_inside_a_node_stays_off_the_network():
    g, t = _two_fc()
    # fc1: batch over nodes (2) and features over GPUs (2); fc2: batch over nodes, its input features over GPUs.
    # fc1's output y[b, n] has n on the GPUs: fc2 wants x[b, c] with c = fc1's n on the GPUs too: no move.
    assert _edge_s(g, _pod(), {"fc1": (2, 2, 1), "fc2": (2, 1, 2)}) == pytest.approx(
        # backward: fc2's c split leaves dx sharded as fc1's output is: nothing either
        0.0)
    # fc1 batch over all four devices; fc2 batch over the nodes, features over the GPUs:
    # only the GPU digit changes dimension, an all-to-all among the node's 2 devices on a quarter block.
    seconds = _edge_s(g, _pod(), {"fc1": (4, 1, 1), "fc2": (2, 1, 2)})
    one_way = 1 / 2 * (t / 4) / IN
    assert seconds == pytest.approx(2 * one_way)


def test_placement_fills_the_inner_axis_with_the_last_dimension_first():
    cluster = _pod()
    cfgs = np.array([[2, 2, 1], [4, 1, 1], [1, 1, 4], [2, 1, 1]])
    p = place(cfgs, cluster.mesh)
    # factors[k, dim, axis]: axis 0 = node, 1 = gpu
    assert p.factors[0].tolist() == [[2, 1], [1, 2], [1, 1]]
    assert p.factors[1].tolist() == [[2, 2], [1, 1], [1, 1]]
    assert p.factors[2].tolist() == [[1, 1], [1, 1], [2, 2]]
    assert p.factors[3].tolist() == [[1, 2], [1, 1], [1, 1]]  # one GPU digit; the nodes replicate it
    assert placeable(np.array([[3, 1, 1], [2, 2, 1]]), 4).tolist() == [False, True]


def test_a_graph_input_takes_no_gradient_under_the_corrected_model():
    g = Graph("one")
    g.add_layer(L.fully_connected("fc", b=8, n=16, c=32, bias=False))
    ones = {"fc": np.array([[1, 1, 1]])}
    corrected = build_cost_model(g, _flat(1), configs=ones)
    paper = build_cost_model(g, _flat(1), ConfigOptions(cost_model="paper"), configs=ones)
    assert float(corrected.compute_flops["fc"][0]) == 4 * 8 * 16 * 32
    assert float(paper.compute_flops["fc"][0]) == 6 * 8 * 16 * 32


def test_batchnorm_statistics_follow_the_sync_option():
    g = Graph("bn")
    g.add_layer(L.batch_norm("bn", b=8, c=4, h=2, w=2))
    cfg = {"bn": np.array([[4, 1, 1, 1]])}
    local = build_cost_model(g, _flat(), configs=cfg)
    synced = build_cost_model(g, _flat(), ConfigOptions(sync_batchnorm=True), configs=cfg)
    # The scale and shift gradients (2 x 4 elements) are all-reduced either way; with SyncBatchNorm also
    # 2 statistics forward and 2 backward per channel.
    weights = 2 * 3 / 4 * (2 * 4 * BPE) / BW
    stats = 2 * 3 / 4 * (4 * 4 * BPE) / BW
    assert float(local.comm_s["bn"][0]) == pytest.approx(weights)
    assert float(synced.comm_s["bn"][0]) == pytest.approx(weights + stats)


def test_a_configuration_that_does_not_tile_the_mesh_is_refused_with_the_fix():
    from pase.errors import ConfigurationError

    g, _ = _two_fc(b=12)
    with pytest.raises(ConfigurationError, match="do not tile a mesh of 4.*paper"):
        _edge_s(g, _flat(), {"fc1": (3, 1, 1), "fc2": (1, 1, 1)})
    assert _edge_s(g, _flat(), {"fc1": (3, 1, 1), "fc2": (1, 1, 1)}, ConfigOptions(cost_model="paper")) > 0


def test_a_producer_with_several_consumers_pays_each_edge_by_its_consumers_layout():
    b, c = 16, 32
    g = Graph("fanout")
    g.add_layer(L.fully_connected("fc1", b=b, n=c, c=c, bias=False))
    for name in ("same", "replicated", "model", "replicated_again"):
        g.add_layer(L.fully_connected(name, b=b, n=64, c=c, bias=False), inputs=["fc1"])
    t = b * c * BPE  # fc1's output, read by all four
    strategy = {"fc1": (4, 1, 1), "same": (4, 1, 1), "replicated": (1, 1, 1), "model": (1, 4, 1),
                "replicated_again": (1, 1, 1)}
    model = build_cost_model(g, _flat(), configs={k: np.array([v]) for k, v in strategy.items()})
    expected = {
        # The same batch shards both ways: nothing moves.
        ("fc1", "same"): 0.0,
        # Forward, an all-gather of the batch shards: each device receives the 3 quarters it lacks;
        # backward, the replicated gradient is sliced locally.
        ("fc1", "replicated"): 3 / 4 * t / BW,
        # Forward the same all-gather (the out-channel split needs the whole input on every device);
        # backward each device holds a partial sum of the whole input gradient, reduce-scattered into
        # fc1's batch shards: each device sends 3 quarters.
        ("fc1", "model"): 3 / 4 * t / BW + 3 / 4 * t / BW,
        # A second consumer wanting the same layout pays again (the pairwise model cannot share one
        # transfer between two edges, as pase.model.layout documents).
        ("fc1", "replicated_again"): 3 / 4 * t / BW,
    }
    costs = model.edge_costs_s({name: 0 for name in strategy})
    assert costs.keys() == expected.keys()
    for edge, seconds in expected.items():
        assert costs[edge] == pytest.approx(seconds, abs=1e-18), edge
    # Each edge is charged to its consumer, and the search sees four separate edge matrices.
    rows = {r.name: r for r in model.breakdown({name: 0 for name in strategy})}
    assert rows["fc1"].edge_comm_s == 0
    for (_, dst), seconds in expected.items():
        assert rows[dst].edge_comm_s == pytest.approx(seconds, abs=1e-18)
    cg = model.cost_graph()
    index = model.index
    assert sorted((u, v) for u, v, _ in cg.edges) == sorted((index["fc1"], index[d]) for _, d in expected)
    assert cg.cost_of([0] * len(strategy)) == pytest.approx(
        sum(model.layer_cost_vector(n)[0] for n in strategy) + model.cluster.peak_flops * sum(expected.values()))


def test_an_edge_whose_gradient_moves_less_than_its_activation():
    g, t = _two_fc()
    # fc1 splits its reduction c 4 ways: each device holds a partial sum of the whole output.
    # fc2 splits the batch 2 ways (on 4 devices: 2 replicas of each half).
    strategy = {"fc1": (1, 1, 4), "fc2": (2, 1, 1)}
    cluster = _flat()
    # Forward: each device needs its half of the batch fully summed. A ring reduce-scatter over the
    # 4 devices (each sends 3/4 of t) leaves every device a summed quarter; each pair then swaps
    # quarters to rebuild its half (t/4 each): t in all.
    forward = (3 / 4 * t + 1 / 4 * t) / BW
    # Backward: fc2 leaves the gradient split by batch halves; fc1 (partial over c, so every device
    # holds the whole output) needs all of it: an all-gather between the two halves, t/2 each.
    backward = (1 / 2 * t) / BW
    assert forward != backward
    assert _edge_s(g, cluster, strategy) == pytest.approx(forward + backward)
    assert _directions(g, cluster, strategy) == (pytest.approx(forward), pytest.approx(backward))
    # The paper's rule takes the backward volume equal to the forward one: fc1 has already
    # all-reduced its output inside the layer, and since fc2 cuts it into more pieces than fc1 does
    # the rule counts nothing held, so fc2's half block (t/2) moves forward and again backward.
    paper = build_cost_model(g, cluster, ConfigOptions(cost_model="paper"),
                             configs={k: np.array([v]) for k, v in strategy.items()})
    assert paper.edge_tables[0][1][0, 0] == pytest.approx(2 * (t / 2) / BW)
