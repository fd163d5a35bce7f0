"""The layer library: hand-counted FLOPs, split invariants, intra-layer communication."""

import numpy as np
import pytest

from pase import layers as L
from pase.configs import ConfigOptions, layer_configs
from pase.cost import layer_comm_bytes, layer_compute_flops
from pase.errors import GraphError

# One small layer of every op, with its training FLOPs counted by hand.
HAND_COUNTED = [
    (L.fully_connected("fc", b=8, n=6, c=4, bias=False), 6 * 8 * 6 * 4),
    (L.fully_connected("fcb", b=8, n=6, c=4, pointwise=1), 6 * 8 * 6 * 4 + (2 + 3) * 8 * 6),
    (L.einsum("ff", "bsd,ed->bse", {"b": 2, "s": 4, "d": 8, "e": 16}, weights=[1]), 6 * 2 * 4 * 8 * 16),
    (L.einsum("att", "bshc,bkhc->bhsk", {"b": 2, "s": 4, "h": 2, "c": 8, "k": 4}), 6 * 2 * 4 * 2 * 8 * 4),
    (L.conv2d("conv", b=2, c=3, height=8, width=8, n=4, r=3, pad=1, bias=False), 6 * 2 * 4 * 3 * 8 * 8 * 9),
    (L.conv2d("convs", b=2, c=3, height=8, width=8, n=4, r=3, stride=2, bias=False), 6 * 2 * 4 * 3 * 3 * 3 * 9),
    (L.pooling("pool", b=2, c=3, height=8, width=8, kernel=2), 2 * 2 * 3 * 4 * 4 * 4),
    (L.elementwise("add", (4, 5), ("b", "n"), inputs=2, pointwise=1), 20 * (1 + 3)),
    (L.elementwise("relu", (4, 5), ("b", "n"), inputs=1, pointwise=1), 20 * 3),
    (L.batch_norm("bn", b=2, c=3, h=4, w=4), L.NORM_FLOPS_PER_ELEMENT * 96),
    (L.layer_norm("ln", (2, 4, 8), ("b", "s", "d")), L.NORM_FLOPS_PER_ELEMENT * 64),
    (L.softmax("sm", (4, 10), ("b", "n")), L.SOFTMAX_FLOPS_PER_ELEMENT * 40),
    (L.softmax_cross_entropy("xent", (4, 10)), L.XENT_FLOPS_PER_ELEMENT * 40),
    (L.embedding("emb", b=2, s=4, d=8, v=100), 2 * 2 * 4 * 8),
    (L.lstm("lstm", l=2, b=2, s=4, d=8, e=8), 2 * 2 * 4 * (6 * 4 * 8 * 16 + L.LSTM_POINTWISE_FLOPS * 8)),
    (L.concat("cat", [(2, 3, 4, 4), (2, 5, 4, 4)], ("b", "c", "h", "w"), "c"), 0),
    (L.split("split", (2, 8, 4), ("b", "c", "h"), "c", [3, 5]), 0),
    (L.reshape("flat", (2, 4, 3, 3), ("b", "c", "h", "w"), (2, 36)), 0),
    (L.transpose("tr", (2, 4, 8), ("b", "s", "d"), (1, 0, 2)), 0),
    (L.reduce_mean("mean", (2, 4, 8), ("b", "s", "d"), ["s"]), 2 * 64),
]


@pytest.mark.parametrize("layer,flops", HAND_COUNTED, ids=lambda x: getattr(x, "name", ""))
def test_unsplit_flops_match_hand_count(layer, flops):
    assert L.training_flops(layer) == pytest.approx(flops)


def test_every_op_is_hand_counted():
    assert {layer.op for layer, _ in HAND_COUNTED} == set(L.OPS)


@pytest.mark.parametrize("layer,flops", HAND_COUNTED, ids=lambda x: getattr(x, "name", ""))
def test_splitting_never_reduces_total_flops(layer, flops):
    cfgs = layer_configs(layer, 8, ConfigOptions(min_shard=1, spatial_split=True))
    total = layer_compute_flops(layer, cfgs) * np.prod(cfgs, axis=1)
    assert np.all(total >= flops * (1 - 1e-12))


@pytest.mark.parametrize("layer,flops", HAND_COUNTED, ids=lambda x: getattr(x, "name", ""))
def test_unsplit_layer_communicates_nothing(layer, flops):
    ones = np.ones((1, len(layer.dims)), dtype=np.int64)
    assert layer_comm_bytes(layer, ones, 4)[0] == 0


def test_gemm_reduction_split_allreduces_output():
    fc = L.fully_connected("fc", b=8, n=6, c=4, bias=False)
    k = 4
    cost = layer_comm_bytes(fc, np.array([[1, 1, k]]), 4)[0]
    assert cost == pytest.approx(2 * (k - 1) / k * 8 * 6 * 4)


def test_gemm_data_parallel_allreduces_weight_gradient():
    fc = L.fully_connected("fc", b=8, n=6, c=4, bias=False)
    cost = layer_comm_bytes(fc, np.array([[2, 1, 1]]), 4)[0]
    assert cost == pytest.approx(2 * (2 - 1) / 2 * 6 * 4 * 4)


def test_gemm_out_channel_split_allreduces_input_gradient():
    fc = L.fully_connected("fc", b=8, n=6, c=4, bias=False)
    cost = layer_comm_bytes(fc, np.array([[1, 2, 1]]), 4)[0]
    assert cost == pytest.approx(2 * (2 - 1) / 2 * 8 * 4 * 4)


def test_allreduce_cheaper_than_allgather_plus_reduce_scatter_bound():
    # Ring all-reduce moves 2(k-1)/k of the data: less than twice the data for any k.
    k = np.arange(1, 65)
    assert np.all(L.allreduce(np.ones_like(k, dtype=float), k) < 2)


def test_conv_halo_only_when_spatial_split():
    conv = L.conv2d("conv", b=2, c=3, height=8, width=8, n=4, r=3, pad=1, bias=False)
    cfgs = np.array([[1, 1, 1, 1, 1, 1, 1], [1, 1, 2, 1, 1, 1, 1]])
    halo = layer_comm_bytes(conv, cfgs, 4)
    # Split 2 ways on h: each device's 4 input rows gain r - stride = 2 halo rows of 8 columns.
    assert halo[0] == 0
    assert halo[1] == pytest.approx(2 * 2 * 3 * 2 * 8 * 4 + 2 * (1 / 2) * 4 * 3 * 9 * 4)


def test_embedding_vocab_split_allreduces_output_not_weights():
    emb = L.embedding("emb", b=2, s=4, d=8, v=100)
    vocab = layer_comm_bytes(emb, np.array([[1, 1, 1, 4]]), 4)[0]
    data = layer_comm_bytes(emb, np.array([[4, 1, 1, 1]]), 4)[0]
    assert vocab == pytest.approx(2 * 3 / 4 * 2 * 4 * 8 * 4)
    assert data == pytest.approx(2 * 3 / 4 * 100 * 8 * 4)


def test_collectives_name_their_group_and_price_to_the_hand_count():
    fc = L.fully_connected("fc", b=8, n=6, c=4)
    parts = L.collectives(fc, np.array([[2, 1, 1]]))
    assert [(c.kind, c.dims, c.what) for c in parts] == [
        ("allreduce", ("c",), "y partial sums"),
        ("allreduce", ("n",), "x gradient"),
        ("allreduce", ("b",), "weight weight gradient"),
        ("allreduce", ("b",), "bias weight gradient"),
    ]
    # Data parallel on 2: only the b-groups have 2 devices; each sends half of W and bias.
    assert L.comm_elements(fc, np.array([[2, 1, 1]]))[0] == pytest.approx(2 * (2 - 1) / 2 * (6 * 4 + 6))


@pytest.mark.parametrize("layer,flops", HAND_COUNTED, ids=lambda x: getattr(x, "name", ""))
def test_collectives_are_among_the_layers_own_dimensions(layer, flops):
    cfgs = layer_configs(layer, 8, ConfigOptions(min_shard=1, spatial_split=True))
    for c in L.collectives(layer, cfgs):
        assert set(c.dims) <= set(layer.dims) and c.elements.shape == (len(cfgs),)


def test_unknown_collective_kind_is_refused():
    with pytest.raises(ValueError, match="'broadcast'"):
        L.Collective("broadcast", np.zeros(1), ("b",), "x")


def test_lstm_hidden_split_gathers_state_and_stage_split_exchanges():
    rnn = L.lstm("lstm", l=4, b=2, s=8, d=8, e=8)
    hidden, stages = layer_comm_bytes(rnn, np.array([[1, 1, 1, 1, 2], [2, 1, 1, 1, 1]]), 1)
    # e split 2: all-gather h (2 l s b e, half of it sent) plus the x gradient all-reduce (b s d).
    assert hidden == pytest.approx(1 / 2 * 2 * 4 * 8 * 2 * 8 + 2 * (1 / 2) * 2 * 8 * 8)
    # l split 2: activations and gradients of a stage's last layer, 2 b s e.
    assert stages == pytest.approx(2 * 2 * 8 * 8)


def test_lstm_layer_split_pipelines():
    rnn = L.lstm("lstm", l=4, b=2, s=8, d=8, e=8)
    flops = layer_compute_flops(rnn, np.array([[1, 1, 1, 1, 1], [4, 1, 1, 1, 1]]))
    # Four stages over 8 steps: 8 + 3 stage-steps of a quarter of the layers.
    assert flops[1] == pytest.approx(flops[0] / 4 * (8 + 3) / 8)


@pytest.mark.parametrize(
    "build",
    [
        lambda: L.fully_connected("bad", b=0, n=1, c=1),
        lambda: L.conv2d("bad", b=1, c=1, height=2, width=2, n=1, r=5),
        lambda: L.einsum("bad", "ab->", {"a": 2}),
        lambda: L.concat("bad", [(2, 3), (3, 3)], ("b", "c"), "c"),
        lambda: L.reshape("bad", (2, 3), ("a", "b"), (7,)),
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
    cfg = np.array([[1, 1, 4], [2, 1, 1]])
    extra = layer_comm_bytes(with_bias, cfg, 4) - layer_comm_bytes(without, cfg, 4)
    assert extra[0] == 0  # c split: every device holds the whole output gradient
    assert extra[1] == pytest.approx(2 * (2 - 1) / 2 * 6 * 4)  # b split: the bias gradient is all-reduced
