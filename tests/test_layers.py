"""The op library: hand-counted FLOPs, split invariants, intra-layer communication."""

import numpy as np
import pytest

from pase import ops as L
from pase.errors import GraphError
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions, layer_configs
from pase.ir.graph import Graph
from pase.model.cost import build_cost_model, layer_compute_flops

PAPER = ConfigOptions(cost_model="paper")
B = 1e9  # link bandwidth of the flat test cluster, bytes/s


def ring_allreduce_s(nbytes, k, bandwidth=B):
    """Flat ring all-reduce of ``nbytes`` over ``k`` devices: 2 (k - 1) / k M / B."""
    return 2 * (k - 1) / k * nbytes / bandwidth


def ring_allgather_s(nbytes, k, bandwidth=B):
    """Flat ring all-gather of a result of ``nbytes`` over ``k`` devices: (k - 1) / k M / B."""
    return (k - 1) / k * nbytes / bandwidth


def one_layer(layer):
    g = Graph(layer.name)
    g.add_layer(layer)
    return g


def comm_s(layer, configs, *, devices=8, bytes_per_element=4, options=PAPER):
    """Seconds of communication inside ``layer`` per configuration on a flat cluster (paper model by default)."""
    cluster = Cluster(devices, 1e12, B, bytes_per_element=bytes_per_element)
    model = build_cost_model(one_layer(layer), cluster, options, configs={layer.name: np.array(configs)})
    return model.comm_s[layer.name]


# One small layer of every op, with its training FLOPs counted by hand (a multiply-add is 2 FLOPs;
# forward + backward, every input's gradient included). The per-element figures of the normalising
# ops are the library's modelling choices, written out: norm 8 forward + 3 scale/shift gradients +
# 9 input gradient = 20; softmax 5 + 4 = 9; cross-entropy 6 + 5 = 11; LSTM gates and cell 30 per unit.
HAND_COUNTED = [
    (L.fully_connected("fc", b=8, n=6, c=4, bias=False), 6 * 8 * 6 * 4),
    # bias: 1 per output forward, 1 backward; a fused ReLU: value forward, derivative and product backward.
    (L.fully_connected("fcb", b=8, n=6, c=4, pointwise=1), 6 * 8 * 6 * 4 + (1 + 1) * 8 * 6 + 3 * 8 * 6),
    (L.einsum("ff", "bsd,ed->bse", {"b": 2, "s": 4, "d": 8, "e": 16}, weights=[1]), 6 * 2 * 4 * 8 * 16),
    (L.einsum("att", "bshc,bkhc->bhsk", {"b": 2, "s": 4, "h": 2, "c": 8, "k": 4}), 6 * 2 * 4 * 2 * 8 * 4),
    (L.conv2d("conv", b=2, c=3, height=8, width=8, n=4, r=3, pad=1, bias=False), 6 * 2 * 4 * 3 * 8 * 8 * 9),
    # stride 2, no pad: (8 - 3) // 2 + 1 = 3 output rows and columns.
    (L.conv2d("convs", b=2, c=3, height=8, width=8, n=4, r=3, stride=2, bias=False), 6 * 2 * 4 * 3 * 3 * 3 * 9),
    # Max pooling: 4 compares per output forward, one routed gradient per output backward.
    (L.pooling("pool", b=2, c=3, height=8, width=8, kernel=2), 2 * 3 * 4 * 4 * (4 + 1)),
    # Average pooling spreads each output's gradient over its 4 inputs.
    (L.pooling("avgpool", b=2, c=3, height=8, width=8, kernel=2, mode="avg"), 2 * 3 * 4 * 4 * (4 + 4)),
    (L.elementwise("add", (4, 5), ("b", "n"), inputs=2, pointwise=1), 20 * (1 + 3)),
    (L.elementwise("relu", (4, 5), ("b", "n"), inputs=1, pointwise=1), 20 * 3),
    (L.batch_norm("bn", b=2, c=3, h=4, w=4), 20 * 2 * 3 * 4 * 4),
    (L.layer_norm("ln", (2, 4, 8), ("b", "s", "d")), 20 * 2 * 4 * 8),
    (L.softmax("sm", (4, 10), ("b", "n")), 9 * 4 * 10),
    (L.softmax_cross_entropy("xent", (4, 10)), 11 * 4 * 10),
    # A gather forward, a scatter-add backward: one op per output element each.
    (L.embedding("emb", b=2, s=4, d=8, v=100), 2 * 2 * 4 * 8),
    # Per layer and step: gates [x; h] (b x (d + e)) @ (4e x (d + e)), 6 FLOPs per multiply-add
    # forward + backward, plus 30 per hidden unit; 2 layers x 4 steps.
    (L.lstm("lstm", l=2, b=2, s=4, d=8, e=8), 2 * 4 * (6 * 2 * 4 * 8 * (8 + 8) + 30 * 2 * 8)),
    (L.concat("cat", [(2, 3, 4, 4), (2, 5, 4, 4)], ("b", "c", "h", "w"), "c"), 0),
    (L.split("split", (2, 8, 4), ("b", "c", "h"), "c", [3, 5]), 0),
    (L.reshape("flat", (2, 4, 3, 3), ("b", "c", "h", "w"), (2, 36)), 0),
    (L.transpose("tr", (2, 4, 8), ("b", "s", "d"), (1, 0, 2)), 0),
    # One add per input element forward, one broadcast copy backward.
    (L.reduce_mean("mean", (2, 4, 8), ("b", "s", "d"), ["s"]), 2 * 2 * 4 * 8),
]
IDS = [layer.name for layer, _ in HAND_COUNTED]


@pytest.mark.parametrize("layer,flops", HAND_COUNTED, ids=IDS)
def test_unsplit_flops_match_hand_count(layer, flops):
    assert L.training_flops(layer) == pytest.approx(flops)


def test_every_op_is_hand_counted():
    assert {layer.op for layer, _ in HAND_COUNTED} == set(L.OPS)


@pytest.mark.parametrize("layer,flops", HAND_COUNTED, ids=IDS)
def test_splitting_never_reduces_total_flops(layer, flops):
    # The paper's options allow any device count up to 8 (3, 5, 6, 7 included), not only divisors.
    cfgs = layer_configs(layer, 8, ConfigOptions(min_shard=1, spatial_split=True, cost_model="paper"))
    assert len(cfgs) > 1
    total = layer_compute_flops(layer, cfgs) * np.prod(cfgs, axis=1)
    assert np.all(total >= flops * (1 - 1e-12))


@pytest.mark.parametrize("layer,flops", HAND_COUNTED, ids=IDS)
def test_flops_split_into_forward_backward_and_input_gradients(layer, flops):
    block = np.asarray(layer.sizes, dtype=float)[None, :]
    parts = L.OPS[layer.op].flops(layer, block)
    assert len(parts.inputs) == len(layer.inputs)
    pieces = [parts.forward, parts.backward, *parts.inputs]
    assert all(p.shape == (1,) and p[0] >= 0 for p in pieces)
    assert sum(float(p[0]) for p in pieces) == pytest.approx(flops)
    # Dropping an input's gradient removes exactly its share.
    for i in range(len(layer.inputs)):
        keep = [j != i for j in range(len(layer.inputs))]
        assert parts.total(keep)[0] == pytest.approx(flops - parts.inputs[i][0])


def test_a_graph_input_takes_no_gradient_under_the_corrected_model():
    b, n, c = 8, 6, 4
    g = Graph("two")
    g.add_layer(L.fully_connected("fc1", b=b, n=n, c=c, bias=False))
    g.add_layer(L.fully_connected("fc2", b=b, n=n, c=n, bias=False), inputs=["fc1"])
    cluster = Cluster(4, 1e12, B)
    corrected = build_cost_model(g, cluster, ConfigOptions())
    paper = build_cost_model(g, cluster, PAPER)
    for model in (corrected, paper):
        assert (model.configs["fc1"][0] == 1).all() and (model.configs["fc2"][0] == 1).all()
    # fc1 reads the data: forward 2bnc and the weight gradient 2bnc, but no dx.
    assert corrected.compute_flops["fc1"][0] == pytest.approx(4 * b * n * c)
    # The paper's equation 1 computes every input gradient.
    assert paper.compute_flops["fc1"][0] == pytest.approx(6 * b * n * c)
    # fc2's input is fc1's output: its gradient is needed under both models.
    assert corrected.compute_flops["fc2"][0] == pytest.approx(6 * b * n * n)
    assert paper.compute_flops["fc2"][0] == pytest.approx(6 * b * n * n)


@pytest.mark.parametrize("kernel,stride", [(2, 2), (3, 1), (3, 2)])
def test_max_pooling_backward_is_one_flop_per_output(kernel, stride):
    pool = L.pooling("pool", b=2, c=3, height=9, width=9, kernel=kernel, stride=stride)
    out = (9 - kernel) // stride + 1
    outputs = 2 * 3 * out * out
    assert pool.outputs[0].shape == (2, 3, out, out)
    flops = L.OPS["Pooling"].flops(pool, np.asarray(pool.sizes, dtype=float)[None, :])
    assert flops.inputs[0][0] == outputs
    assert flops.forward[0] == outputs * kernel * kernel
    avg = L.pooling("avg", b=2, c=3, height=9, width=9, kernel=kernel, stride=stride, mode="avg")
    assert L.OPS["Pooling"].flops(avg, np.asarray(avg.sizes, dtype=float)[None, :]).inputs[0][0] == \
        outputs * kernel * kernel


@pytest.mark.parametrize("layer,flops", HAND_COUNTED, ids=IDS)
@pytest.mark.parametrize("model", ["paper", "corrected"])
def test_unsplit_layer_communicates_nothing(layer, flops, model):
    ones = np.ones((1, len(layer.dims)), dtype=np.int64)
    assert comm_s(layer, ones, options=ConfigOptions(cost_model=model))[0] == 0


def test_gemm_reduction_split_allreduces_output():
    fc = L.fully_connected("fc", b=8, n=6, c=4, bias=False)
    k = 4
    # y (8 x 6) is a partial sum on each of the 4 devices.
    assert comm_s(fc, [[1, 1, k]])[0] == pytest.approx(ring_allreduce_s(8 * 6 * 4, k))


def test_gemm_data_parallel_allreduces_weight_gradient():
    fc = L.fully_connected("fc", b=8, n=6, c=4, bias=False)
    assert comm_s(fc, [[2, 1, 1]])[0] == pytest.approx(ring_allreduce_s(6 * 4 * 4, 2))


def test_gemm_out_channel_split_allreduces_input_gradient():
    fc = L.fully_connected("fc", b=8, n=6, c=4, bias=False)
    assert comm_s(fc, [[1, 2, 1]])[0] == pytest.approx(ring_allreduce_s(8 * 4 * 4, 2))


def test_comm_seconds_scale_with_element_size():
    fc = L.fully_connected("fc", b=8, n=6, c=4)
    cfgs = layer_configs(fc, 8, ConfigOptions(min_shard=1, cost_model="paper"))
    two, eight = comm_s(fc, cfgs, bytes_per_element=2), comm_s(fc, cfgs, bytes_per_element=8)
    assert np.allclose(eight, 4 * two) and two.max() > 0


def test_conv_halo_only_when_spatial_split():
    conv = L.conv2d("conv", b=2, c=3, height=8, width=8, n=4, r=3, pad=1, bias=False)
    cfgs = [[1, 1, 1, 1, 1, 1, 1], [1, 1, 2, 1, 1, 1, 1]]
    halo = comm_s(conv, cfgs)
    # Split 2 ways on h: each device's 4 input rows gain r - stride = 2 halo rows of 8 columns, for
    # 2 images x 3 channels, forward and backward, sent to a neighbour at link speed; and the
    # 4 x 3 x 3 x 3 weight gradient is all-reduced over the 2 row blocks.
    assert halo[0] == 0
    assert halo[1] == pytest.approx(2 * 2 * 3 * 2 * 8 * 4 / B + ring_allreduce_s(4 * 3 * 9 * 4, 2))


def test_embedding_vocab_split_allreduces_output_not_weights():
    emb = L.embedding("emb", b=2, s=4, d=8, v=100)
    vocab, data = comm_s(emb, [[1, 1, 1, 4], [2, 2, 1, 1]])
    assert vocab == pytest.approx(ring_allreduce_s(2 * 4 * 8 * 4, 4))
    # Batch and sequence split 2 x 2: the 100 x 8 weight gradient is all-reduced over all 4.
    assert data == pytest.approx(ring_allreduce_s(100 * 8 * 4, 4))


def test_collectives_name_their_group_and_price_to_the_hand_count():
    fc = L.fully_connected("fc", b=8, n=6, c=4)
    cfg = np.array([[2, 1, 1]])
    # Inside the layer: only the weight gradients' all-reduces over the batch.
    assert [(c.kind, c.dims, c.what) for c in L.collectives(fc, cfg)] == [
        ("allreduce", ("b",), "weight weight gradient"),
        ("allreduce", ("b",), "bias weight gradient"),
    ]
    # The pending sums of the contraction: the output over c, the input gradient over n.
    assert [(c.kind, c.dims, c.what) for c in L.partial_collectives(fc, cfg)] == [
        ("allreduce", ("c",), "y partial sums"),
        ("allreduce", ("n",), "x gradient"),
    ]
    assert [c.what for c in L.partial_collectives(fc, cfg, [False])] == ["y partial sums"]
    # Data parallel on 2: only the b-groups have 2 devices; each all-reduces W (6 x 4) and the bias (6).
    assert comm_s(fc, cfg)[0] == pytest.approx(ring_allreduce_s((6 * 4 + 6) * 4, 2))


def test_only_contractions_have_pending_sums():
    assert L.partial_collectives(L.softmax("sm", (4, 10), ("b", "n")), np.array([[2, 2]])) == []
    assert L.partial_collectives(L.lstm("lstm", l=2, b=2, s=4, d=8, e=8), np.array([[1, 2, 1, 2, 1]])) == []
    # Embedding ids take no gradient: only the output's sums are pending.
    emb = L.embedding("emb", b=2, s=4, d=8, v=100)
    assert [c.what for c in L.partial_collectives(emb, np.array([[1, 1, 1, 4]]))] == ["y partial sums"]


@pytest.mark.parametrize("layer,flops", HAND_COUNTED, ids=IDS)
def test_collectives_are_among_the_layers_own_dimensions(layer, flops):
    cfgs = layer_configs(layer, 8, ConfigOptions(min_shard=1, spatial_split=True, cost_model="paper"))
    for c in L.collectives(layer, cfgs) + L.partial_collectives(layer, cfgs):
        assert set(c.dims) <= set(layer.dims) and c.elements.shape == (len(cfgs),)
        assert np.all(c.elements >= 0)


def test_unknown_collective_kind_is_refused():
    with pytest.raises(ValueError, match="'broadcast'"):
        L.Collective("broadcast", np.zeros(1), ("b",), "x")


def test_lstm_hidden_split_gathers_state_and_stage_split_exchanges():
    rnn = L.lstm("lstm", l=4, b=2, s=8, d=8, e=8)
    hidden, stages = comm_s(rnn, [[1, 1, 1, 1, 2], [2, 1, 1, 1, 1]], bytes_per_element=1)
    # e split 2: all-gather h (l s b e, forward and backward: 2 x 4 x 8 x 2 x 8) plus the
    # x gradient all-reduce (b s d).
    assert hidden == pytest.approx(ring_allgather_s(2 * 4 * 8 * 2 * 8, 2) + ring_allreduce_s(2 * 8 * 8, 2))
    # l split 2: activations and gradients of a stage's last layer, 2 b s e, to the next stage.
    assert stages == pytest.approx(2 * 2 * 8 * 8 / B)


def test_lstm_layer_split_pipelines():
    rnn = L.lstm("lstm", l=4, b=2, s=8, d=8, e=8)
    flops = layer_compute_flops(rnn, np.array([[1, 1, 1, 1, 1], [4, 1, 1, 1, 1]]))
    # Four stages over 8 steps: 8 + 3 stage-steps of a quarter of the layers.
    assert flops[0] == pytest.approx(L.training_flops(rnn))
    assert flops[1] == pytest.approx(flops[0] / 4 * (8 + 3) / 8)


@pytest.mark.parametrize(
    "build",
    [
        lambda: L.fully_connected("bad", b=0, n=1, c=1),
        lambda: L.conv2d("bad", b=1, c=1, height=2, width=2, n=1, r=5),
        lambda: L.einsum("bad", "ab->", {"a": 2}),
        lambda: L.concat("bad", [(2, 3), (3, 3)], ("b", "c"), "c"),
        lambda: L.reshape("bad", (2, 3), ("a", "b"), (7,)),
        lambda: L.pooling("bad", b=1, c=1, height=4, width=4, kernel=2, mode="median"),
        lambda: L.build_layer("NoSuchOp", "bad"),
        lambda: L.build_layer("FullyConnected", "bad", b=1, n=1),
    ],
)
def test_invalid_layers_raise_graph_error_naming_the_layer(build):
    with pytest.raises(GraphError, match="bad"):
        build()


def test_reshape_only_splits_leading_axis_of_a_group():
    flat = L.reshape("flat", (8, 256, 6, 6), ("b", "c", "h", "w"), (8, 9216))
    assert flat.split_base == (8, 256, 1, 1)
    assert flat.outputs[0].axes == ("b", "c")
    heads = L.reshape("heads", (2, 4, 512), ("b", "s", "d"), (2, 4, 8, 64))
    assert heads.split_base == (2, 4, 8)
    assert heads.outputs[0].axes == ("b", "s", "d", None)


def test_bias_gradient_needs_no_exchange_across_an_in_channel_split():
    with_bias = L.fully_connected("fc", b=8, n=6, c=4)
    without = L.fully_connected("fc", b=8, n=6, c=4, bias=False)
    cfg = [[1, 1, 4], [2, 1, 1]]
    extra = comm_s(with_bias, cfg) - comm_s(without, cfg)
    assert extra[0] == pytest.approx(0, abs=1e-18)  # c split: every device holds the whole output gradient
    assert extra[1] == pytest.approx(ring_allreduce_s(6 * 4, 2))  # b split: the bias gradient is all-reduced
