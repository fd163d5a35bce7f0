"""The cost model: edge costs, per-layer vectors, breakdowns, clusters."""

import numpy as np
import pytest

from pase import ops as L
from pase.errors import ClusterError, ConfigurationError, SearchTooLargeError
from pase.hardware.cluster import PRESETS, Cluster, preset
from pase.ir.configs import ConfigOptions, check_config, layer_configs
from pase.ir.graph import Graph
from pase.model.cost import build_cost_model

ALL = ConfigOptions(min_shard=1)
PAPER = ConfigOptions(min_shard=1, cost_model="paper")
B = 16e9  # link bandwidth of the flat clusters, bytes/s


def _fc_pair(b=32, n=64, c=64):
    g = Graph("pair")
    g.add_layer(L.fully_connected("fc1", b=b, n=n, c=c))
    g.add_layer(L.fully_connected("fc2", b=b, n=n, c=n), inputs=["fc1"])
    return g


def _edge_s(g, src_cfgs, dst_cfgs, *, devices=8, bpe=4, options=PAPER, src="fc1", dst="fc2"):
    """Seconds of the one edge ``src -> dst`` for the given configurations on a flat cluster."""
    cluster = Cluster(devices, 10e12, B, bytes_per_element=bpe)
    configs = {src: np.atleast_2d(src_cfgs), dst: np.atleast_2d(dst_cfgs)}
    model = build_cost_model(g, cluster, options, configs=configs)
    [(edge, table)] = model.edge_tables
    assert (edge.src, edge.dst) == (src, dst)
    return table


def _all_edges(g, p, bpe=4, options=PAPER):
    cs, cd = layer_configs(g.layer("fc1"), p, options), layer_configs(g.layer("fc2"), p, options)
    return cs, cd, _edge_s(g, cs, cd, devices=p, bpe=bpe, options=options)


# -- the paper's edge rule (seconds = bytes / bandwidth on a flat cluster) --------------------------


def test_identical_layouts_cost_nothing():
    cs, cd, m = _all_edges(_fc_pair(), 8)
    checked = 0
    for i, a in enumerate(cs):
        for j, b in enumerate(cd):
            # fc1 output (b, n) vs fc2 input (b, c): same splits and no extra devices.
            if a[0] == b[0] and a[1] == b[2] and np.prod(b) <= np.prod(a):
                assert m[i, j] == 0
                checked += 1
    assert checked > 10


@pytest.mark.parametrize("options", [PAPER, ALL], ids=["paper", "corrected"])
def test_data_parallel_edges_are_free(options):
    m = _edge_s(_fc_pair(), [8, 1, 1], [8, 1, 1], options=options)
    assert m[0, 0] == 0


def test_paper_alternating_fc_splits_need_no_redistribution():
    g = _fc_pair(b=128, n=4096, c=4096)
    assert _edge_s(g, [1, 4, 8], [1, 8, 4], devices=32)[0, 0] == 0


def test_edge_cost_is_needed_minus_held_both_directions():
    g = _fc_pair(b=32, n=64)
    # Producer splits n 4 ways; consumer wants the whole input on 1 device: it holds a quarter.
    m = _edge_s(g, [1, 4, 1], [1, 1, 1])
    assert m[0, 0] == pytest.approx(2 * (32 * 64 - 32 * 16) * 4 / B)


def test_more_consumer_devices_than_producer_devices_move_everything():
    g = _fc_pair(b=32, n=64)
    m = _edge_s(g, [1, 1, 1], [4, 1, 1])
    assert m[0, 0] == pytest.approx(2 * (8 * 64) * 4 / B)


def test_more_pieces_than_the_producer_cut_move_the_whole_block():
    # fc1 leaves its output in 2 pieces (each on 16 devices); fc2 wants 4: the paper's rule moves it all.
    g = _fc_pair(b=128, n=4096, c=4096)
    m = _edge_s(g, [[1, 2, 16], [1, 4, 8]], [1, 8, 4], devices=32)
    assert m[0, 0] == pytest.approx(2 * 128 * 1024 * 4 / B)
    assert m[1, 0] == 0


def test_edge_cost_grows_with_bytes_moved():
    _, _, small = _all_edges(_fc_pair(b=32), 8)
    _, _, big = _all_edges(_fc_pair(b=64), 8, bpe=4)
    _, _, wide = _all_edges(_fc_pair(b=32), 8, bpe=8)
    assert np.allclose(wide, 2 * small)
    assert np.all(big >= small) and big.sum() > small.sum()


def test_edge_cost_falls_with_bandwidth():
    g = _fc_pair()
    cs, cd = layer_configs(g.layer("fc1"), 8, PAPER), layer_configs(g.layer("fc2"), 8, PAPER)
    tables = [build_cost_model(g, Cluster(8, 10e12, bw), PAPER, configs={"fc1": cs, "fc2": cd}).edge_tables[0][1]
              for bw in (16e9, 64e9)]
    assert np.allclose(tables[1] * 4, tables[0]) and tables[0].max() > 0


def test_non_differentiable_inputs_move_one_way():
    g = Graph("labels")
    g.add_layer(L.reduce_mean("labels", (8, 4), ("b", "x"), ["x"]))
    g.add_layer(L.softmax_cross_entropy("loss", (8, 16)), inputs=[None, "labels"])
    m = _edge_s(g, [1, 1], [2, 1], src="labels", dst="loss")
    assert m[0, 0] == pytest.approx(4 * 4 / B)  # a 4-label block forward, no gradient back


# -- the corrected model's edges --------------------------------------------------------------------


def test_corrected_edge_finishes_the_producers_pending_sums():
    b, n = 32, 64
    g = _fc_pair(b=b, n=n)
    cluster = Cluster(4, 10e12, B)
    configs = {"fc1": np.array([[1, 1, 4]]), "fc2": np.array([[1, 1, 1]])}
    corrected = build_cost_model(g, cluster, ALL, configs=configs)
    paper = build_cost_model(g, cluster, PAPER, configs=configs)
    y_bytes = b * n * 4
    allreduce = 2 * 3 / 4 * y_bytes / B
    # Under the paper's model fc1 all-reduces its partial y itself and the edge moves nothing ...
    assert paper.comm_s["fc1"][0] == pytest.approx(allreduce)
    assert paper.edge_tables[0][1][0, 0] == 0
    # ... under the corrected one the edge does it, into fc2's replicated input; the gradient is
    # replicated on both sides and does not move.
    assert corrected.comm_s["fc1"][0] == 0
    assert corrected.edge_tables[0][1][0, 0] == pytest.approx(allreduce)


def test_corrected_replicated_producer_feeds_a_split_consumer_for_free_and_gathers_the_gradient():
    b, n = 32, 64
    g = _fc_pair(b=b, n=n)
    configs = {"fc1": np.array([[1, 1, 1]]), "fc2": np.array([[4, 1, 1]])}
    model = build_cost_model(g, Cluster(4, 10e12, B), ALL, configs=configs)
    # Forward: every device slices its batch block of the replicated y. Backward: each device
    # holds the gradient of its quarter of the batch; the replicated fc1 needs all of it.
    assert model.edge_tables[0][1][0, 0] == pytest.approx(3 / 4 * b * n * 4 / B)


def test_corrected_model_keeps_only_configurations_that_tile_the_mesh():
    conv = L.conv2d("c", b=12, c=6, height=9, width=9, n=10, r=3, pad=1)
    for p in (1, 3, 8, 12):
        paper = layer_configs(conv, p, PAPER)
        corrected = layer_configs(conv, p, ALL)
        assert np.all(p % np.prod(corrected, axis=1) == 0)
        # The corrected rows are exactly the paper's rows whose device count divides p.
        keep = paper[p % np.prod(paper, axis=1) == 0]
        assert keep.tolist() == corrected.tolist()
    assert np.any(8 % np.prod(layer_configs(conv, 8, PAPER), axis=1))  # e.g. 3 or 6 of 8 devices


# -- tables, breakdowns, budgets --------------------------------------------------------------------


@pytest.mark.parametrize("options", [ALL, PAPER], ids=["corrected", "paper"])
def test_cost_graph_matches_breakdown(options):
    g = _fc_pair()
    cluster = Cluster(4, 10e12, B)
    model = build_cost_model(g, cluster, options)
    cg = model.cost_graph()
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = [int(rng.integers(len(v))) for v in cg.node_costs]
        assignment = {l.name: a[i] for i, l in enumerate(model.layers)}
        rows = model.breakdown(assignment)
        total_s = sum(r.total_s for r in rows)
        assert total_s * cluster.peak_flops == pytest.approx(cg.cost_of(a))
        assert model.strategy_cost(rows) == pytest.approx(cg.cost_of(a))
        assert sum(model.edge_costs_s(assignment).values()) == pytest.approx(sum(r.edge_comm_s for r in rows))


def test_edge_table_budget_refuses_before_building():
    with pytest.raises(SearchTooLargeError, match="GiB"):
        build_cost_model(_fc_pair(), Cluster(64, 10e12, B), ALL, table_budget_bytes=1000)


def test_given_configurations_must_tile_the_mesh_under_the_corrected_model():
    g = _fc_pair(b=24)
    configs = {"fc1": np.array([[3, 1, 1]]), "fc2": np.array([[1, 1, 1]])}
    build_cost_model(g, Cluster(8, 10e12, B), PAPER, configs=configs)  # 3 of 8 devices: the paper lets 5 idle
    with pytest.raises(ConfigurationError, match="tile"):
        build_cost_model(g, Cluster(8, 10e12, B), ALL, configs=configs)


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


# Published figures, with their sources, in the units the presets use: FLOP/s per device, bytes
# per second one device sends one way, bytes of memory (decimal GB, as NVIDIA states them).
GB, TFLOPS, MiB = 1e9, 1e12, 2**20
EDR_Bps, HDR_Bps, NDR_Bps = 100e9 / 8, 200e9 / 8, 400e9 / 8  # InfiniBand EDR/HDR/NDR: 100/200/400 Gb/s per port
PCIE3_X16_Bps = 16 * 8e9 * 128 / 130 / 8  # PCIe 3.0: 8 GT/s per lane, 128b/130b coding: 15.75 GB/s one way
PUBLISHED = {
    # GeForce GTX 1080 Ti (NVIDIA product page): 3584 CUDA cores at 1582 MHz boost, 2 FLOPs per FMA
    # -> 11.34 TFLOP/s fp32; 11 GB GDDR5X. Peer-to-peer over PCIe 3.0 x16; nodes on one EDR adapter.
    "paper-1080ti": dict(flops=2 * 3584 * 1582e6, bpe=4, memory=11 * GB, link_max=PCIE3_X16_Bps,
                         network=EDR_Bps / 8),
    # GeForce RTX 2080 Ti (NVIDIA reference specification): 4352 CUDA cores at 1545 MHz boost
    # -> 13.45 TFLOP/s fp32; 11 GB GDDR6. No peer-to-peer: staged through host memory over PCIe 3.0.
    "paper-2080ti": dict(flops=2 * 4352 * 1545e6, bpe=4, memory=11 * GB, link_max=PCIE3_X16_Bps,
                         network=EDR_Bps / 8),
    # DGX-1 with V100 (NVIDIA V100 and DGX-1 datasheets): V100 SXM2 125 TFLOP/s tensor (fp16), 32 GB
    # HBM2, NVLink 2 300 GB/s bidirectional = 150 GB/s per direction; 4 x EDR per node of 8 GPUs.
    "dgx1-v100": dict(flops=125 * TFLOPS, bpe=2, memory=32 * GB, link=300 * GB / 2, network=4 * EDR_Bps / 8),
    # DGX A100 (NVIDIA A100 and DGX A100 datasheets): A100 SXM4 312 TFLOP/s dense bf16/fp16, 80 GB
    # HBM2e, NVLink 3 600 GB/s bidirectional = 300 GB/s per direction; 8 x HDR (one per GPU).
    # Memory: what NVML reports (Modal's published table of nvidia-smi totals: 81,920 MiB for an "80 GB" A100,
    # 81,559 MiB for an "80 GB" H100, 40,960 MiB for a 40 GB A100, 143,771 MiB for a 141 GB H200).
    "dgx-a100": dict(flops=312 * TFLOPS, bpe=2, memory=81_920 * MiB, link=600 * GB / 2, network=HDR_Bps),
    # DGX H100 (NVIDIA H100 and DGX H100 datasheets): H100 SXM5 989 TFLOP/s dense bf16 (1979 with
    # sparsity), 80 GB HBM3, NVLink 4 900 GB/s bidirectional = 450 GB/s per direction; 8 x NDR.
    "dgx-h100": dict(flops=989 * TFLOPS, bpe=2, memory=81_559 * MiB, link=900 * GB / 2, network=NDR_Bps),
    # The first DGX A100: the same A100 SXM4 with 40 GB of HBM2.
    "dgx-a100-40gb": dict(flops=312 * TFLOPS, bpe=2, memory=40_960 * MiB, link=600 * GB / 2, network=HDR_Bps),
    # DGX H200 (NVIDIA H200 datasheet): H200 SXM 989 TFLOP/s dense bf16, 141 GB HBM3e, NVLink 4 900 GB/s
    # bidirectional; 8 x NDR.
    "dgx-h200": dict(flops=989 * TFLOPS, bpe=2, memory=143_771 * MiB, link=900 * GB / 2, network=NDR_Bps),
    # DGX B200 (NVIDIA DGX B200 datasheet): 72 PFLOP/s fp8 training for 8 GPUs (sparse) = 2.25 PFLOP/s
    # dense bf16 per GPU, 1,440 GB HBM3e / 8, NVLink 5 1.8 TB/s bidirectional; 8 x 400 Gb/s ConnectX-7.
    "dgx-b200": dict(flops=72e15 / 8 / 2 / 2, bpe=2, memory=1440 * GB / 8, link=1800 * GB / 2, network=NDR_Bps),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_presets_have_published_figures(name):
    c, spec = PRESETS[name], PUBLISHED[name]
    assert c.name == name and (c.devices, c.node_size) == (8, 8)  # one node of 8 devices
    # Marketing peaks are rounded to 3 figures (11.34 -> 11.3, 13.45 -> 13.4).
    assert c.peak_flops == pytest.approx(spec["flops"], rel=5e-3)
    assert c.bytes_per_element == spec["bpe"]
    assert c.memory_bytes == pytest.approx(spec["memory"])
    if "link" in spec:
        assert c.bandwidth_Bps == pytest.approx(spec["link"])
    else:
        # An achieved PCIe figure: below the link's theoretical one-way rate.
        assert c.bandwidth_Bps < spec["link_max"]
    assert c.network_bandwidth_Bps == pytest.approx(spec["network"])
    # Across nodes the same 8 devices share the node's adapters: 16 devices make 2 nodes.
    two = preset(name, 16)
    assert (two.nodes, two.mesh.shape) == (2, (2, 8))
    assert [a.bandwidth_Bps for a in two.mesh.axes] == pytest.approx([spec["network"], c.bandwidth_Bps])


def test_every_preset_is_checked_and_unknown_ones_are_refused():
    assert set(PRESETS) == set(PUBLISHED) | {"paper-model"}
    # The paper's cost-model setting: 10 TFLOP/s and 16 GB/s, r = 625 FLOPs per byte, fp32, flat, no memory.
    model = PRESETS["paper-model"]
    assert (model.peak_flops, model.bandwidth_Bps, model.flops_per_byte) == (10e12, 16e9, 625.0)
    assert (model.bytes_per_element, model.memory_bytes, model.is_flat) == (4, None, True)
    assert preset("dgx-h100", 16, calibrated=False).devices == 16
    with pytest.raises(ClusterError, match="unknown cluster preset"):
        preset("tpu")


@pytest.mark.parametrize("options", [ALL, PAPER], ids=["corrected", "paper"])
def test_configs_respect_devices_and_divisibility(options):
    conv = L.conv2d("c", b=12, c=6, height=9, width=9, n=10, r=3, pad=1)
    for p in (1, 3, 8, 12):
        cfgs = layer_configs(conv, p, options)
        assert (cfgs[0] == 1).all()
        assert np.all(np.prod(cfgs, axis=1) <= p)
        assert np.all(np.asarray(conv.sizes) % cfgs == 0)
        # r, s never split; h, w only with spatial_split.
        assert np.all(cfgs[:, 2:4] == 1) and np.all(cfgs[:, 5:] == 1)
        assert len(np.unique(cfgs, axis=0)) == len(cfgs)
    spatial = layer_configs(conv, 9, ConfigOptions(min_shard=1, spatial_split=True, cost_model=options.cost_model))
    assert spatial[:, 2].max() == 9


def test_configs_are_every_allowed_factor_combination():
    # Brute force over all factor tuples: a divisor of each dimension (r, s unsplit), product <= p
    # (paper) or dividing p (corrected).
    from itertools import product

    conv = L.conv2d("c", b=12, c=6, height=9, width=9, n=10, r=3, pad=1)
    divisors = lambda n: [f for f in range(1, n + 1) if n % f == 0]
    for p in (6, 8):
        space = list(product(divisors(12), divisors(6), [1], [1], divisors(10), [1], [1]))
        paper = sorted(t for t in space if np.prod(t) <= p)
        corrected = sorted(t for t in space if p % np.prod(t) == 0)
        assert sorted(map(tuple, layer_configs(conv, p, PAPER).tolist())) == paper
        assert sorted(map(tuple, layer_configs(conv, p, ALL).tolist())) == corrected


def test_config_options_powers_of_two_and_min_shard():
    fc = L.fully_connected("fc", b=24, n=48, c=12)
    pow2 = layer_configs(fc, 16, ConfigOptions(powers_of_two=True, min_shard=1))
    assert set(np.unique(pow2)) <= {1, 2, 4, 8, 16}
    shard = layer_configs(fc, 16, ConfigOptions(min_shard=4))
    assert np.all(np.asarray(fc.sizes) / shard >= 4)


@pytest.mark.parametrize(
    "layer,config,options,match",
    [
        (dict(b=8, n=8, c=8), (1, 1), ALL, "one per dimension"),
        (dict(b=8, n=8, c=8), (5, 1, 1), ALL, "cannot be split 5 ways"),
        (dict(b=8, n=8, c=8), (4, 4, 4), ALL, "uses 64 devices"),
        (dict(b=8, n=8, c=8), (4, 4, 4), PAPER, "uses 64 devices"),
        (dict(b=6, n=8, c=8), (3, 1, 1), ALL, "do not tile a mesh of 8"),
    ],
)
def test_check_config_names_the_problem(layer, config, options, match):
    fc = L.fully_connected("fc", **layer)
    with pytest.raises(ConfigurationError, match=match):
        check_config(fc, config, 8, options)


def test_check_config_accepts_idle_devices_under_the_paper_model():
    fc = L.fully_connected("fc", b=6, n=8, c=8)
    assert check_config(fc, [3, 1, 1], 8, PAPER) == (3, 1, 1)


@pytest.mark.parametrize("model", ["corrected", "paper"])
def test_plan_json_layer_costs_add_up_to_the_total_in_both_units(model):
    from pase.planner import PlanOptions, plan

    g = _fc_pair()
    d = plan(g, Cluster(4, 10e12, B), PlanOptions(configs=ConfigOptions(cost_model=model))).to_dict()
    assert sum(l["cost_flop_eq"] for l in d["layers"]) == pytest.approx(d["cost"])
    assert sum(l["compute_s"] + l["intra_comm_s"] + l["edge_comm_s"] for l in d["layers"]) == pytest.approx(d["step_time_s"])
