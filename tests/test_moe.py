"""Mixture of experts: router, experts and combine ops, the samples, and expert parallelism.

References are independent of the code's formulas: the papers' parameter
counts, hand counts of tensors, FLOPs and bytes, torch's FlopCounterMode on
an equivalent module, and brute force over every strategy of a small graph.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json

import numpy as np
import pytest

import pase
from pase import ops as L
from pase.cli import main
from pase.errors import GraphError
from pase.hardware.cluster import Cluster
from pase.ir.graph import Graph
from pase.model.cost import build_cost_model
from pase.models import LANGUAGE_MODELS, SAMPLES, sample
from pase.models.moe import active_parameters, moe_decoder, moe_parameters
from pase.ops import training_flops
from pase.planner import PlanOptions, evaluate, plan
from pase.strategies.baselines import tensor_parallel_strategy

BSD = ("b", "s", "d")


def _block(b=4, s=8, d=8, experts=4, top_k=2, f=8, capacity_factor=1.0) -> Graph:
    """norm -> router -> experts -> combine -> residual add: one MoE feed-forward block."""
    c = L.expert_capacity(s, experts, top_k, capacity_factor)
    g = Graph("moe-block")
    g.add_layer(L.rms_norm("norm", (b, s, d), BSD))
    g.add_layer(L.moe_router("router", b, s, d, experts, top_k, c), ["norm"])
    g.add_layer(L.moe_experts("experts", b, c, experts, d, f), [("router", 0)])
    g.add_layer(L.moe_combine("combine", b, s, d, experts, top_k, c), ["experts", ("router", 1)])
    g.add_layer(L.elementwise("add", (b, s, d), BSD), ["norm", "combine"])
    g.validate()
    return g


# -- parameters ---------------------------------------------------------------------------


@pytest.mark.parametrize("name, total, active, tolerance", [
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.002),  # Jiang et al. 2024, Table 1 and section 2
    ("deepseek-moe-16b", 16.4e9, 2.8e9, 0.015),  # Dai et al. 2024: "16.4B", "2.8B" (rounded to 0.1B)
])
def test_parameter_counts_are_the_published_ones(name, total, active, tolerance):
    g = sample(name, batch=1, seq=64)
    assert g.parameter_count == pytest.approx(total, rel=tolerance)
    layers = len({layer.name.split(".")[1] for layer in g if layer.name.startswith("layers.")})
    assert layers == {"mixtral-8x7b": 32, "deepseek-moe-16b": 28}[name]
    kwargs = {"mixtral-8x7b": dict(experts=8, top_k=2, ffn=14336, hidden=4096, dense=0),
              "deepseek-moe-16b": dict(experts=64, top_k=6, ffn=1408, hidden=2048, dense=1)}[name]
    unused = (layers - kwargs["dense"]) * 3 * (kwargs["experts"] - kwargs["top_k"]) * kwargs["hidden"] * kwargs["ffn"]
    assert g.parameter_count - unused == pytest.approx(active, rel=0.015)


def test_mixtral_has_exactly_the_released_checkpoints_parameter_count():
    # Mixtral-8x7B-v0.1 as released: 46,702,792,704 parameters (transformers' num_parameters()).
    assert sample("mixtral-8x7b", batch=1, seq=64).parameter_count == 46_702_792_704


def test_parameters_of_a_tiny_model_by_hand():
    g = moe_decoder("tiny", layers=2, hidden=8, heads=2, kv_heads=1, experts=4, top_k=2, expert_ffn=6, vocab=10,
                    batch=1, seq=8, shared_ffn=5, dense_layers=1, dense_ffn=7)
    per_block_attention = 8 * 8 + 4 * 8 + 4 * 8 + 8 * 8 + 8 + 8  # q, k, v (one kv head of width 4), out, 2 norms
    dense_ffn = 3 * 8 * 7
    moe = 4 * 8 + 4 * (6 * 8 + 6 * 8 + 8 * 6) + 3 * 8 * 5  # router, 4 experts' gate/up/down, shared network
    tables = 10 * 8 + 10 * 8 + 8  # embedding, projection, final norm
    assert g.parameter_count == 2 * per_block_attention + dense_ffn + moe + tables
    assert g.parameter_count == moe_parameters(2, 8, 2, 1, 4, 6, 10, shared_ffn=5, dense_layers=1, dense_ffn=7)
    assert active_parameters(2, 8, 2, 1, 4, 2, 6, 10, shared_ffn=5, dense_layers=1, dense_ffn=7) == \
        g.parameter_count - 2 * (6 * 8 + 6 * 8 + 8 * 6)  # two of the four experts unused by a token


def test_a_head_width_and_a_tied_table_change_only_attention_and_the_projection():
    # Heads of width 6 (not 8 / 2 = 4): q and out 8 x 12, k and v 8 x 6; the projection is the embedding's table.
    g = moe_decoder("tiny", layers=2, hidden=8, heads=2, kv_heads=1, experts=4, top_k=2, expert_ffn=6, vocab=10,
                    batch=1, seq=8, head_dim=6, tied=True)
    base = moe_decoder("tiny", layers=2, hidden=8, heads=2, kv_heads=1, experts=4, top_k=2, expert_ffn=6, vocab=10,
                       batch=1, seq=8)
    assert g.layer("layers.0.attn.q").size_of["c"] == 6
    assert g.parameter_count - base.parameter_count == 2 * (2 * 8 * 12 + 2 * 8 * 6 - (2 * 8 * 8 + 2 * 8 * 4)) - 10 * 8
    assert g.parameter_count == moe_parameters(2, 8, 2, 1, 4, 6, 10, head_dim=6, tied=True)
    assert [layer.name for layer in g] == [layer.name for layer in base]


@pytest.mark.parametrize("change, message", [
    (dict(heads=3), "multiple of heads"),
    (dict(kv_heads=3), "multiple of kv_heads"),
    (dict(top_k=5), "top_k"),
    (dict(dense_layers=1), "dense_ffn"),
    (dict(dense_layers=3, dense_ffn=8), "more than the 2 layers"),
    (dict(shared_ffn=-1), "shared_ffn"),
    (dict(capacity_factor=float("nan")), "capacity_factor"),
    (dict(capacity_factor=4.0), "more slots than the 8 tokens"),  # 4 * 8 * 2 / 4 = 16 slots of 8 tokens
    (dict(head_dim=0), "head_dim"),
    (dict(tied="yes"), "tied must be true or false"),
])
def test_bad_sizes_are_graph_errors_naming_the_problem(change, message):
    sizes = dict(layers=2, hidden=8, heads=2, kv_heads=1, experts=4, top_k=2, expert_ffn=6, vocab=10, batch=1, seq=8)
    with pytest.raises(GraphError, match=message):
        moe_decoder("bad", **{**sizes, **change})


def test_the_samples_capacity_factor_sets_the_slots():
    g = sample("mixtral-8x7b", batch=1, seq=4096, capacity_factor=1.25)
    assert g.layer("layers.0.moe.experts").size_of["c"] == 1280  # 1.25 * 4096 tokens * 2 of 8 experts


def test_moe_samples_are_registered_but_not_planned_in_3d_by_default():
    for name in ("mixtral-8x7b", "deepseek-moe-16b"):
        assert name in SAMPLES and name not in LANGUAGE_MODELS
    # Why: the 3-D search's layer splits (Megatron's rule) leave every expert on every device.
    g = sample("mixtral-8x7b", batch=8, seq=64)
    splits = tensor_parallel_strategy(g, 8)
    assert all(splits[layer.name][layer.dims.index("x")] == 1 for layer in g if layer.op == "MoEExperts")


# -- FLOPs --------------------------------------------------------------------------------


def test_expert_flops_count_k_of_e_experts_per_token():
    for name, k, d, f in (("mixtral-8x7b", 2, 4096, 14336), ("deepseek-moe-16b", 6, 2048, 1408)):
        g = sample(name, batch=2, seq=4096)
        tokens = 2 * 4096
        # Per token and chosen expert: three d x f products, 2 FLOPs a multiply-add, forward and two
        # backward products each (18 d f), plus SwiGLU's 6 per hidden element.
        dense = 18 * d * f + 6 * f
        experts = next(layer for layer in g if layer.op == "MoEExperts")
        assert training_flops(experts) == k * tokens * dense


def test_a_capacity_factor_pads_the_experts_work():
    base = training_flops(_block(capacity_factor=1.0).layer("experts"))
    assert training_flops(_block(capacity_factor=1.5).layer("experts")) == 1.5 * base
    assert L.expert_capacity(4096, 8, 2, 1.25) == 1280
    with pytest.raises(GraphError, match="capacity_factor"):
        L.expert_capacity(4096, 8, 2, 0.0)
    with pytest.raises(GraphError, match="top_k"):
        L.moe_router("r", 1, 8, 8, experts=2, top_k=3, capacity=8)


def test_flops_match_torchs_count_of_an_equivalent_module():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    b, s, d, experts, k, f = 2, 64, 128, 8, 2, 256
    c = L.expert_capacity(s, experts, k)
    torch.manual_seed(0)
    x = torch.randn(b, s, d, requires_grad=True)
    w_router = torch.randn(experts, d, requires_grad=True)
    w_gate, w_up = (torch.randn(experts, f, d, requires_grad=True) for _ in range(2))
    w_down = torch.randn(experts, d, f, requires_grad=True)
    # A balanced routing fixed in advance (the FLOPs do not depend on which tokens go where):
    # slot n = c * E + e holds token n // k, so every token has k slots.
    token = torch.arange(c * experts) // k
    expert = torch.arange(c * experts) % experts
    with FlopCounterMode(display=False) as counter:
        probs = (x @ w_router.T).softmax(-1)
        dispatched = x[:, token, :].reshape(b, c, experts, d)
        gates = probs[:, token, expert].reshape(b, c, experts)
        h = torch.nn.functional.silu(torch.einsum("bced,efd->bcef", dispatched, w_gate)) \
            * torch.einsum("bced,efd->bcef", dispatched, w_up)
        y = torch.einsum("bcef,edf->bced", h, w_down)
        out = torch.zeros(b, s, d).index_add(1, token, (y * gates[..., None]).reshape(b, c * experts, d))
        out.sum().backward()
    torch_flops = counter.get_total_flops()
    g = _block(b=b, s=s, d=d, experts=experts, top_k=k, f=f)
    ours = sum(training_flops(g.layer(n)) for n in ("router", "experts", "combine"))
    # torch counts the products only; ours adds the softmax, top-k, SwiGLU, dispatch and combine.
    assert torch_flops <= ours <= 1.01 * torch_flops


# -- communication -------------------------------------------------------------------------


def _costs(g: Graph, cluster: Cluster, strategy: dict):
    model = build_cost_model(g, cluster, configs={name: [cfg] for name, cfg in strategy.items()})
    return model, model.edge_costs_s({name: 0 for name in strategy})


TOKEN_PARALLEL = {"norm": (4, 1, 1), "router": (4, 1, 1), "combine": (4, 1, 1), "add": (4, 1, 1)}


def test_dispatch_and_combine_are_all_to_all_on_a_flat_mesh():
    g = _block()
    bandwidth = 1e9
    cluster = Cluster(4, 1e12, bandwidth, 2, None, "flat", None, None)
    _, edges = _costs(g, cluster, {**TOKEN_PARALLEL, "experts": (1, 1, 4, 1, 1)})
    # Slots [b=4, c=4, E=4, d=8] at 2 bytes: each device holds a quarter (one sequence) and keeps
    # the quarter bound for its own expert, sending 3/4 of its 128 elements to the other three.
    held = 4 * 4 * 4 * 8 / 4 * 2
    sent = held * 3 / 4
    assert edges[("router", "experts")] == pytest.approx(2 * sent / bandwidth)  # forward and gradient
    assert edges[("experts", "combine")] == pytest.approx(2 * sent / bandwidth)
    assert edges[("router", "combine")] == 0.0  # the gates stay where the tokens are
    # An all-gather would bring every device the whole tensor: four times the bytes it holds, less its own.
    gather = held * 4 * 3 / 4
    assert edges[("router", "experts")] < 2 * gather / bandwidth


def test_dispatch_crosses_the_network_only_for_other_nodes_experts():
    g = _block(b=8, experts=8, s=16)
    nvlink, network = 100e9, 10e9
    cluster = Cluster(8, 1e12, nvlink, 2, None, "two nodes", 4, network)
    strategy = {"norm": (8, 1, 1), "router": (8, 1, 1), "combine": (8, 1, 1), "add": (8, 1, 1),
                "experts": (1, 1, 8, 1, 1)}
    _, edges = _costs(g, cluster, strategy)
    c = L.expert_capacity(16, 8, 2)
    held = 8 * c * 8 * 8 / 8 * 2  # bytes of slots per device
    # To each of its 7 peers a device sends an eighth: 4 peers on the other node, 3 on its own.
    seconds = 4 * held / 8 / network + 3 * held / 8 / nvlink
    assert edges[("router", "experts")] == pytest.approx(2 * seconds)


def test_expert_weight_gradients_reduce_only_over_each_experts_replicas():
    g = _block()
    bandwidth = 1e9
    cluster = Cluster(4, 1e12, bandwidth, 2, None, "flat", None, None)
    strategy = {**TOKEN_PARALLEL, "experts": (2, 1, 2, 1, 1)}  # 2 expert groups, each replicated twice
    model, _ = _costs(g, cluster, strategy)
    # Each device holds 2 of the 4 experts (3 matrices of 8 x 8 each) and all-reduces them with the
    # one other device that holds the same 2: a ring all-reduce of 2 devices moves the block once.
    block = 2 * 3 * 8 * 8 * 2
    assert model.gradient_comm_s["experts"][0] == pytest.approx(2 * (2 - 1) / 2 * block / bandwidth)
    assert model.comm_s["experts"][0] == model.gradient_comm_s["experts"][0]


# -- memory ---------------------------------------------------------------------------------


def test_memory_counts_every_experts_weights():
    g = _block()
    cluster = Cluster(4, 1e12, 1e9, 2, 80e9, "flat", None, None)
    expert_bytes = 4 * 3 * 8 * 8 * 2  # 4 experts, gate/up/down of 8 x 8, 2 bytes
    for split, held in ((1, expert_bytes), (2, expert_bytes / 2), (4, expert_bytes / 4)):
        strategy = {**TOKEN_PARALLEL, "experts": (4 // split, 1, split, 1, 1)}
        report = evaluate(g, cluster, strategy).memory
        row = next(r for r in report.layers if r.name == "experts")
        assert row.weights_bytes == held


# -- the search -----------------------------------------------------------------------------


def test_search_equals_brute_force_on_a_small_moe_block():
    g = _block()
    cluster = Cluster(4, 1e12, 2e9, 2, None, "two nodes", 2, 0.5e9)
    model = build_cost_model(g, cluster)
    cg = model.cost_graph()
    best = np.inf
    counts = [len(c) for c in cg.node_costs]
    for assignment in itertools.product(*[range(n) for n in counts[:-1]]):
        # Vectorised over the last layer's configurations.
        last = np.arange(counts[-1])
        total = sum(cg.node_costs[v][a] for v, a in enumerate(assignment)) + cg.node_costs[-1]
        for u, v, m in cg.edges:
            pick = lambda node: last if node == len(counts) - 1 else assignment[node]
            total = total + m[pick(u), pick(v)]
        best = min(best, float(np.min(total)))
    assert plan(g, cluster, PlanOptions(memory_limit_bytes=None)).cost == pytest.approx(best, rel=1e-12)


def test_solving_mixtral_on_64_h100s_splits_the_experts_and_holds_all_its_parameters():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["solve", "mixtral-8x7b", "--devices", "64", "--cluster", "dgx-h100", "--peak-rates", "--json"]) == 0
    found = json.loads(out.getvalue())
    assert found["fits_memory"]
    layers = {r["name"]: r for r in found["layers"]}
    experts = [r for r in found["layers"] if r["op"] == "MoEExperts"]
    assert len(experts) == 32
    for r in experts:
        assert r["config"][r["dims"].index("x")] > 1, r
    # Re-cost the plan to read each layer's weights per device: times the number of distinct
    # shards of its weights, that is every parameter of the model, all 8 experts of every layer.
    g = sample("mixtral-8x7b")
    cluster = pase.preset("dgx-h100", devices=64, calibrated=False)
    report = evaluate(g, cluster, {name: tuple(r["config"]) for name, r in layers.items()}).memory
    total = 0.0
    for row in report.layers:
        layer = g.layer(row.name)
        if layer.weights:
            axes = {a for w in layer.weights for a in w.axes if a is not None}
            shards = np.prod([f for dim, f in zip(layer.dims, row.config) if dim in axes])
            total += row.weights_bytes / cluster.bytes_per_element * shards
    assert total == pytest.approx(46_702_792_704, rel=1e-9)
