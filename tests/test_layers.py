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


# One small layer of every op but the LSTM (below), with its training FLOPs (forward + backward,
# every input's gradient included) counted by hand as literals. Conventions: a multiply-add is
# 2 FLOPs; every add, multiply, compare, exp or log of one element is 1; per-row (or per-channel)
# scalars such as 1 / N and the reciprocal square root are not counted (a row holds many elements).
HAND_COUNTED = [
    # y = x W^T, x 8 x 4, W 6 x 4: 8 * 6 * 4 = 192 multiply-adds = 384 forward; dx = dy W and
    # dW = dy^T x are 384 each: 1152.
    (L.fully_connected("fc", b=8, n=6, c=4, bias=False), 1152),
    # The same GEMMs (1152), + bias: one add per output forward and one per output for its gradient
    # (a sum of dy over the batch): 2 * 48; + fused ReLU: max(0, y) forward, its derivative and the
    # product with dy backward: 3 * 48. 1152 + 96 + 144 = 1392.
    (L.fully_connected("fcb", b=8, n=6, c=4, pointwise=1), 1392),
    # Iteration space b s d e = 2 * 4 * 8 * 16 = 1024 multiply-adds = 2048 forward; the weight's and
    # the input's gradients are one product of that size each: 3 * 2048 = 6144.
    (L.einsum("ff", "bsd,ed->bse", {"b": 2, "s": 4, "d": 8, "e": 16}, weights=[1]), 6144),
    # Attention scores q k^T: b s h c k = 2 * 4 * 2 * 8 * 4 = 512 points, 1024 forward; both operands
    # are activations, so two gradient products: 3 * 1024 = 3072.
    (L.einsum("att", "bshc,bkhc->bhsk", {"b": 2, "s": 4, "h": 2, "c": 8, "k": 4}), 3072),
    # 3x3, pad 1: 8 x 8 outputs. Multiply-adds b n c h w r s = 2 * 4 * 3 * 64 * 9 = 13824 = 27648
    # forward; data and weight gradients as much each: 82944.
    (L.conv2d("conv", b=2, c=3, height=8, width=8, n=4, r=3, pad=1, bias=False), 82944),
    # Stride 2, no pad: (8 - 3) // 2 + 1 = 3 output rows and columns: 2 * 4 * 3 * 9 * 9 = 1944
    # multiply-adds = 3888 forward, 11664 in all.
    (L.conv2d("convs", b=2, c=3, height=8, width=8, n=4, r=3, stride=2, bias=False), 11664),
    # 4 groups of 2 input and 3 output channels, 3x3, pad 1: multiply-adds b g n c h w r s =
    # 2 * 4 * 3 * 2 * 64 * 9 = 27648 = 55296 forward; data and weight gradients as much each: 165888.
    (L.build_layer("GroupedConv2D", "gconv", b=2, g=4, c=2, height=8, width=8, n=3, r=3, pad=1, bias=False), 165888),
    # 2x2 max pooling of 8 x 8: 2 * 3 * 4 * 4 = 96 outputs. Forward: the library's documented
    # convention counts every window element once, 4 per output (a strict count of compares would
    # be 3); backward: the gradient is routed to the one winner, 1 per output. 96 * 5 = 480.
    (L.pooling("pool", b=2, c=3, height=8, width=8, kernel=2), 480),
    # Average pooling: 3 adds and a multiply by 1/4 per output forward; backward dy / 4 spread over
    # the 4 window elements, 4 per output. 96 * 8 = 768.
    (L.pooling("avgpool", b=2, c=3, height=8, width=8, kernel=2, mode="avg"), 768),
    # 20 elements: the add (1), the fused op's value (1); backward the add's gradients are copies (0),
    # the fused op's derivative and product (2). 20 * 4 = 80.
    (L.elementwise("add", (4, 5), ("b", "n"), inputs=2, pointwise=1), 80),
    # A key of 4 x 5 copied to 3 heads (b h n = 60 outputs): no forward FLOPs; backward the gradient summed over
    # the heads, one add per summed element as a bias gradient is counted: 60.
    (L.broadcast("bcast", (4, 3, 5), ("b", "h", "n"), ["h"]), 60),
    # One input: no add; value, derivative, product: 20 * 3 = 60.
    (L.elementwise("relu", (4, 5), ("b", "n"), inputs=1, pointwise=1), 60),
    # A gate, y = silu(x0) * x1 over 20 elements: forward silu's value (1) and the product (1); backward
    # dx1 = dy * silu(x0) (1), dx0 = dy * x1 (1) times silu's derivative (derivative and product, 2).
    # 20 * 6 = 120.
    (L.elementwise("swiglu", (4, 5), ("b", "n"), inputs=2, pointwise=1, gated=True), 120),
    # Batch norm of 2 * 3 * 4 * 4 = 96 elements, per element (the two-pass form):
    #   forward 8: mean (1 add); variance (x - mu, square, add: 3); xhat = (x - mu) * rstd
    #     (subtract again, multiply: 2); y = gamma xhat + beta (2);
    #   scale and shift gradients 3: dgamma += dy * xhat (2), dbeta += dy (1);
    #   input gradient 9, the compact form dx = rstd / N (N g - sum g - xhat sum(g xhat)) with
    #     g = dy gamma: g (1), sum g (1), g xhat and its sum (2), N g (1), two subtracts (2),
    #     xhat * sum (1), * rstd / N (1).
    # 8 + 3 + 9 = 20 per element: 1920.
    (L.batch_norm("bn", b=2, c=3, h=4, w=4), 1920),
    # Layer norm: the same count per element over 2 * 4 * 8 = 64 elements: 1280.
    (L.layer_norm("ln", (2, 4, 8), ("b", "s", "d")), 1280),
    # RMS norm, y = g x / rms(x), the same count without the mean and the shift, per element:
    #   forward 4: x^2 (1), sum (1), xhat = x * rstd (1), g xhat (1);
    #   scale gradient 2: dg += dy * xhat (2);
    #   input gradient 7, dx = rstd / N (N u - xhat sum(u xhat)) with u = dy g: u (1), u xhat and its
    #     sum (2), N u (1), one subtract (1), xhat * sum (1), * rstd / N (1).
    # 4 + 2 + 7 = 13 per element over 64 elements: 832.
    (L.rms_norm("rms", (2, 4, 8), ("b", "s", "d")), 832),
    # Softmax of 4 rows of 10, per element: forward max (1 compare), subtract (1), exp (1), sum (1),
    # divide (1) = 5; backward dx = y (dy - sum(dy y)): dy y (1), sum (1), subtract (1), * y (1) = 4.
    # 40 * 9 = 360.
    (L.softmax("sm", (4, 10), ("b", "n")), 360),
    # Dropout: the mask's product forward and backward, 2 per element: 2 * 4 * 10 = 80.
    (L.dropout("drop", (4, 10), ("b", "n")), 80),
    # Unfused GeLU: value forward, derivative and chain-rule product backward, 3 per element: 120.
    (L.gelu("gelu", (4, 10), ("b", "n")), 120),
    # Cross-entropy as softmax, log and pick: forward softmax (5) + log of every probability (1) = 6
    # per logit; backward the log's derivative d / p (1) then the softmax backward (4) = 5. The
    # labels take no gradient. 40 * 11 = 440.
    (L.softmax_cross_entropy("xent", (4, 10)), 440),
    # A gather forward, a scatter-add backward: one op per output element each, 2 * (2 * 4 * 8) = 128.
    (L.embedding("emb", b=2, s=4, d=8, v=100), 128),
    # Data movement: no arithmetic.
    (L.concat("cat", [(2, 3, 4, 4), (2, 5, 4, 4)], ("b", "c", "h", "w"), "c"), 0),
    (L.split("split", (2, 8, 4), ("b", "c", "h"), "c", [3, 5]), 0),
    (L.reshape("flat", (2, 4, 3, 3), ("b", "c", "h", "w"), (2, 36)), 0),
    (L.transpose("tr", (2, 4, 8), ("b", "s", "d"), (1, 0, 2)), 0),
    # Mean over s of 2 x 4 x 8: 16 outputs of 4 values, 3 adds and a divide each = 64 forward;
    # backward dy / 4 broadcast to each of the 64 inputs = 64. 128.
    (L.reduce_mean("mean", (2, 4, 8), ("b", "s", "d"), ["s"]), 128),
    # Router of 2 x 8 tokens of width 8 to 4 experts, top 2, 4 slots per expert and sequence: the logits
    # GEMM 16 * 8 * 4 = 512 multiply-adds = 1024, with the weight's and the input's gradients 3072;
    # softmax over 64 logits 5 + 4 per logit = 576; top-2, two compare passes over the logits = 128;
    # the dispatch copies 2 * 4 * 4 slots of 8 = 256 elements forward and gathers their gradients
    # back (256). 3072 + 576 + 128 + 512 = 4288.
    (L.moe_router("router", b=2, s=8, d=8, experts=4, top_k=2, capacity=4), 4288),
    # 4 SwiGLU experts on 2 x 4 slots each (32 slots), d 8, f 16: each of the gate, up and down
    # products 32 * 8 * 16 = 4096 multiply-adds = 8192; forward 3 of them + silu and product on 512
    # hidden elements (2 each) = 25600; backward the three weight gradients, the hidden gradient
    # through down and the input's through gate and up: 6 products = 49152, and the SwiGLU's
    # derivative, chain rule and factor products (4 each) = 2048. 25600 + 49152 + 2048 = 76800.
    (L.moe_experts("experts", b=2, capacity=4, experts=4, d=8, f=16), 76800),
    # Combine the same 256 slot elements: gate times slot and add into the token, 2 each (512);
    # backward the slot's gradient gate * dy (256) and the gate's, a dot product over d (512). 1280.
    (L.moe_combine("combine", b=2, s=8, d=8, experts=4, top_k=2, capacity=4), 1280),
]
IDS = [layer.name for layer, _ in HAND_COUNTED]
# The LSTM's pointwise work is a modelling constant: its GEMMs are checked against torch and the rest
# against bounds from a hand count (test_lstm_flops_are_its_gemms_plus_a_bounded_pointwise_part).
LSTM = L.lstm("lstm", l=2, b=2, s=4, d=8, e=8)
EVERY_LAYER = [layer for layer, _ in HAND_COUNTED] + [LSTM]
EVERY_ID = IDS + ["lstm"]


@pytest.mark.parametrize("layer,flops", HAND_COUNTED, ids=IDS)
def test_unsplit_flops_match_hand_count(layer, flops):
    assert L.training_flops(layer) == pytest.approx(flops)


def test_every_op_is_checked():
    assert {layer.op for layer in EVERY_LAYER} == set(L.OPS)
    assert "LSTM" not in {layer.op for layer, _ in HAND_COUNTED}


@pytest.fixture(scope="module")
def torch_flops():
    """``count(fn)``: FLOPs torch's own counter sees in ``fn()`` (forward and backward inside it)."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    def count(fn):
        with FlopCounterMode(display=False) as counter:
            fn(torch)
        return counter.get_total_flops()

    return count


def _torch_fc(b, n, c, x_grad=True):
    def run(torch):
        x = torch.randn(b, c, requires_grad=x_grad)
        w = torch.randn(n, c, requires_grad=True)
        torch.nn.functional.linear(x, w).sum().backward()
    return run


def _torch_einsum(equation, shapes, grads):
    def run(torch):
        ops = [torch.randn(*s, requires_grad=g) for s, g in zip(shapes, grads)]
        torch.einsum(equation, *ops).sum().backward()
    return run


def _torch_conv(b, c, hw, n, r, x_grad=True, **kw):
    def run(torch):
        x = torch.randn(b, c, hw, hw, requires_grad=x_grad)
        w = torch.randn(n, c, r, r, requires_grad=True)
        torch.nn.functional.conv2d(x, w, **kw).sum().backward()
    return run


# (layer, the same computation in torch): GEMM-like ops without bias or fused ops, which torch's
# counter sees whole (it counts matrix products and convolutions, not pointwise work).
TORCH_CHECKED = [
    (L.fully_connected("fc", b=8, n=6, c=4, bias=False), _torch_fc(8, 6, 4)),
    (L.fully_connected("wide", b=16, n=32, c=24, bias=False), _torch_fc(16, 32, 24)),
    (L.einsum("ff", "bsd,ed->bse", {"b": 2, "s": 4, "d": 8, "e": 16}, weights=[1]),
     _torch_einsum("bsd,ed->bse", [(2, 4, 8), (16, 8)], [True, True])),
    (L.einsum("att", "bshc,bkhc->bhsk", {"b": 2, "s": 4, "h": 2, "c": 8, "k": 4}),
     _torch_einsum("bshc,bkhc->bhsk", [(2, 4, 2, 8), (2, 4, 2, 8)], [True, True])),
    (L.einsum("ctx", "bhsk,bkhc->bshc", {"b": 2, "h": 2, "s": 4, "k": 4, "c": 8}),
     _torch_einsum("bhsk,bkhc->bshc", [(2, 2, 4, 4), (2, 4, 2, 8)], [True, True])),
    (L.conv2d("conv", b=2, c=3, height=8, width=8, n=4, r=3, pad=1, bias=False), _torch_conv(2, 3, 8, 4, 3, padding=1)),
    (L.conv2d("convs", b=2, c=3, height=8, width=8, n=4, r=3, stride=2, bias=False), _torch_conv(2, 3, 8, 4, 3, stride=2)),
    (L.conv2d("conv1", b=4, c=16, height=7, width=7, n=8, r=1, bias=False), _torch_conv(4, 16, 7, 8, 1)),
]


@pytest.mark.parametrize("layer,run", TORCH_CHECKED, ids=[l.name for l, _ in TORCH_CHECKED])
def test_gemm_and_conv_flops_match_torchs_counter(layer, run, torch_flops):
    assert L.training_flops(layer) == torch_flops(run)


def test_lstm_flops_are_its_gemms_plus_a_bounded_pointwise_part(torch_flops):
    l, b, s, d, e = LSTM.sizes

    def run(torch):
        # The library's LSTM: per layer and step the gates [x; h] (b x (d + e)) times W (4e x (d + e));
        # every layer's input is d wide (d = e here). Every operand takes a gradient.
        x = torch.randn(s, b, d, requires_grad=True)
        weights = [torch.randn(4 * e, d + e, requires_grad=True) for _ in range(l)]
        inputs = list(x)
        for w in weights:
            h, c, outputs = torch.zeros(b, e), torch.zeros(b, e), []
            for x_t in inputs:
                i, f, g, o = (torch.cat([x_t, h], dim=1) @ w.T).chunk(4, dim=1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outputs.append(h)
            inputs = outputs
        torch.stack(inputs).sum().backward()

    gemm = torch_flops(run)
    # What torch counts, the matrix products only: 2 FLOPs per multiply-add, forward and two gradients.
    assert gemm == 6 * b * 4 * e * (d + e) * l * s == 49152
    per_unit = (L.training_flops(LSTM) - gemm) / (l * b * s * e)
    # Pointwise work per hidden unit and step, by hand: forward, bias (4 adds), three sigmoids and a
    # tanh (4), c = f c' + i g (3), tanh(c) and h = o tanh(c) (2): 13; backward, do and the tanh(c)
    # path (dh tanh c; dh o (1 - t^2) + dc': 6), df di dg dc' (4), the gates' derivatives (3 each: 12)
    # and the bias gradient (4): 26. The model counts between the forward alone and the full 39.
    assert 13 <= per_unit <= 39


@pytest.mark.parametrize("layer", EVERY_LAYER, ids=EVERY_ID)
def test_splitting_never_reduces_total_flops(layer):
    # The paper's options allow any device count up to 8 (3, 5, 6, 7 included), not only divisors.
    cfgs = layer_configs(layer, 8, ConfigOptions(min_shard=1, spatial_split=True, cost_model="paper"))
    assert len(cfgs) > 1
    total = layer_compute_flops(layer, cfgs) * np.prod(cfgs, axis=1)
    assert np.all(total >= L.training_flops(layer) * (1 - 1e-12))


@pytest.mark.parametrize("layer", EVERY_LAYER, ids=EVERY_ID)
def test_flops_split_into_forward_backward_and_input_gradients(layer):
    flops = L.training_flops(layer)
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


def test_a_graph_input_takes_no_gradient_under_the_corrected_model(torch_flops):
    b, n, c = 8, 6, 4
    g = Graph("two")
    g.add_layer(L.fully_connected("fc1", b=b, n=n, c=c, bias=False))
    g.add_layer(L.fully_connected("fc2", b=b, n=n, c=n, bias=False), inputs=["fc1"])
    cluster = Cluster(4, 1e12, B)
    corrected = build_cost_model(g, cluster, ConfigOptions())
    paper = build_cost_model(g, cluster, PAPER)
    for model in (corrected, paper):
        assert (model.configs["fc1"][0] == 1).all() and (model.configs["fc2"][0] == 1).all()
    # fc1 reads the data: forward 2bnc = 384 and the weight gradient 384, but no dx: 768 = 4bnc,
    # what torch counts when the input does not require a gradient.
    assert corrected.compute_flops["fc1"][0] == 768 == torch_flops(_torch_fc(b, n, c, x_grad=False))
    # The paper's equation 1 computes every input gradient: 6bnc = 1152.
    assert paper.compute_flops["fc1"][0] == 1152 == torch_flops(_torch_fc(b, n, c))
    # fc2's input is fc1's output: its gradient is needed under both models, 6 * 8 * 6 * 6 = 1728.
    assert corrected.compute_flops["fc2"][0] == 1728 == paper.compute_flops["fc2"][0]


def test_a_first_convolution_takes_no_data_gradient_under_the_corrected_model(torch_flops):
    g = Graph("stem")
    g.add_layer(L.conv2d("conv", b=2, c=3, height=8, width=8, n=4, r=3, pad=1, bias=False))
    model = build_cost_model(g, Cluster(1, 1e12, B), ConfigOptions())
    # Forward 27648 and the weight gradient 27648 (see HAND_COUNTED), no data gradient.
    assert model.compute_flops["conv"][0] == 2 * 27648 == torch_flops(_torch_conv(2, 3, 8, 4, 3, x_grad=False, padding=1))


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


@pytest.mark.parametrize("layer", EVERY_LAYER, ids=EVERY_ID)
@pytest.mark.parametrize("model", ["paper", "corrected"])
def test_unsplit_layer_communicates_nothing(layer, model):
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


@pytest.mark.parametrize("layer", EVERY_LAYER, ids=EVERY_ID)
def test_collectives_are_among_the_layers_own_dimensions(layer):
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
