"""Memory model (hand counts), memory-feasible search (brute force), plan and CLI surface."""

import io
import itertools
import json
from dataclasses import replace
from contextlib import redirect_stdout
from types import SimpleNamespace

import numpy as np
import pytest

from pase import ops as L
from pase.cli import main
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.ir.costgraph import CostGraph
from pase.errors import ConfigurationError, PaseError
from pase.ir.graph import Graph
from pase.model.memory import InsufficientMemoryError, MemoryOptions, build_memory_model, saved_tensors
from pase.search.memory import least_memory, mix, peak_memory, solve_within_memory
from pase.planner import PlanOptions, evaluate, plan

FP32 = Cluster(4, 10e12, 16e9, bytes_per_element=4)
FP16 = Cluster(4, 10e12, 16e9, bytes_per_element=2)


def _mlp():
    g = Graph("mlp")
    g.add_layer(L.fully_connected("fc1", b=8, n=16, c=4))
    g.add_layer(L.fully_connected("fc2", b=8, n=2, c=16), inputs=["fc1"])
    return g


def _one(g, cluster, strategy, options=MemoryOptions()):
    configs = {name: np.array([cfg]) for name, cfg in strategy.items()}
    return build_memory_model(g, cluster, options, configs=configs).report({name: 0 for name in strategy})


# -- the memory model against hand counts ---------------------------------------------------------


@pytest.mark.parametrize(
    "optimizer,bpe,expected",
    [
        ("sgd", 4, (4, 4, 0)), ("momentum", 4, (4, 4, 4)), ("adam", 4, (4, 4, 8)),
        ("sgd", 2, (2, 2, 4)), ("momentum", 2, (2, 2, 8)), ("adam", 2, (2, 2, 12)),
    ],
)
def test_bytes_per_parameter(optimizer, bpe, expected):
    counts = MemoryOptions(optimizer=optimizer).bytes_per_parameter(bpe)
    assert (counts["weights"], counts["gradients"], counts["optimizer"]) == expected


def test_master_weights_can_be_forced():
    assert MemoryOptions(master_weights=True).bytes_per_parameter(4)["optimizer"] == 12
    assert MemoryOptions(master_weights=False).bytes_per_parameter(2)["optimizer"] == 8


def test_unknown_optimizer_is_refused():
    with pytest.raises(ConfigurationError, match="unknown optimizer 'lamb'"):
        MemoryOptions(optimizer="lamb")


def test_mlp_weights_gradients_adam_state_by_hand():
    g = _mlp()
    params = (16 * 4 + 16) + (2 * 16 + 2)  # 114
    report = _one(g, FP32, {"fc1": (1, 1, 1), "fc2": (1, 1, 1)})
    t = report.totals()
    assert t["weights_bytes"] == 4 * params
    assert t["gradient_bytes"] == 4 * params
    assert t["optimizer_bytes"] == 8 * params  # Adam m and v in fp32
    mixed = _one(g, FP16, {"fc1": (1, 1, 1), "fc2": (1, 1, 1)}).totals()
    assert (mixed["weights_bytes"], mixed["gradient_bytes"], mixed["optimizer_bytes"]) == (2 * params, 2 * params, 12 * params)
    sgd = _one(g, FP32, {"fc1": (1, 1, 1), "fc2": (1, 1, 1)}, MemoryOptions(optimizer="sgd")).totals()
    assert sgd["optimizer_bytes"] == 0


def test_mlp_weight_blocks_follow_the_configuration():
    g = _mlp()
    # fc1 splits n 2 ways: weight 16x4 and bias 16 halve; batch splits replicate weights.
    report = _one(g, FP32, {"fc1": (2, 2, 1), "fc2": (4, 1, 1)})
    fc1, fc2 = report.layers
    assert fc1.weights_bytes == 4 * (16 * 4 + 16) / 2
    assert fc2.weights_bytes == 4 * (2 * 16 + 2)


def test_mlp_activations_by_hand():
    g = _mlp()
    report = _one(g, FP32, {"fc1": (1, 1, 1), "fc2": (1, 1, 1)})
    fc1, fc2 = report.layers
    assert fc1.activation_bytes == 4 * 8 * 4  # its input x[b, c]
    assert fc2.activation_bytes == 4 * 8 * 16  # fc1's output, its input
    split = _one(g, FP32, {"fc1": (4, 1, 1), "fc2": (2, 1, 2)})
    assert split.layers[0].activation_bytes == 4 * 8 * 4 / 4
    assert split.layers[1].activation_bytes == 4 * 8 * 16 / 4


def test_convolution_activation_bytes_by_hand():
    conv = L.conv2d("conv", b=2, c=3, height=8, width=8, n=4, r=3, pad=1, pointwise=1)
    g = Graph("conv")
    g.add_layer(conv)
    x, y = 2 * 3 * 8 * 8, 2 * 4 * 8 * 8  # input kept for dW, output kept for the ReLU
    assert _one(g, FP32, {"conv": (1,) * 7}).layers[0].activation_bytes == 4 * (x + y)
    assert _one(g, FP32, {"conv": (2, 1, 1, 1, 1, 1, 1)}).layers[0].activation_bytes == 4 * (x + y) / 2
    # Splitting out-channels n: the whole input on every device, a quarter of the output.
    assert _one(g, FP32, {"conv": (1, 1, 1, 1, 4, 1, 1)}).layers[0].activation_bytes == 4 * (x + y / 4)
    # A BatchNorm after it keeps the output as its input: counted there, not twice.
    g2 = Graph("conv-bn")
    g2.add_layer(conv)
    g2.add_layer(L.batch_norm("bn", b=2, c=4, h=8, w=8), inputs=["conv"])
    r = _one(g2, FP32, {"conv": (1,) * 7, "bn": (1, 1, 1, 1)})
    assert [m.activation_bytes for m in r.layers] == [4 * x, 4 * y]


def test_a_tensor_kept_by_several_consumers_is_counted_once():
    g = Graph("qkv")
    g.add_layer(L.layer_norm("ln", (2, 4, 8), ("b", "s", "d")))
    for name in "qkv":
        g.add_layer(L.einsum(name, "bsd,ed->bse", {"b": 2, "s": 4, "d": 8, "e": 8}, weights=[1]), inputs=["ln"])
    r = _one(g, FP32, {"ln": (1, 1, 1), "q": (1, 1, 1, 1), "k": (1, 1, 1, 1), "v": (1, 1, 1, 1)})
    acts = {m.name: m.activation_bytes for m in r.layers}
    assert acts["q"] + acts["k"] + acts["v"] == pytest.approx(4 * 2 * 4 * 8)


def test_softmax_output_kept_once_by_its_consumer():
    g = Graph("attn")
    g.add_layer(L.softmax("sm", (2, 4, 4), ("b", "s", "k")))
    g.add_layer(L.einsum("ctx", "bsk,bkc->bsc", {"b": 2, "s": 4, "k": 4, "c": 8}), inputs=["sm"])
    r = _one(g, FP32, {"sm": (1, 1, 1), "ctx": (1, 1, 1, 1)})
    sm, ctx = r.layers
    assert sm.activation_bytes == 0
    assert ctx.activation_bytes == 4 * (2 * 4 * 4 + 2 * 4 * 8)
    alone = Graph("sm")
    alone.add_layer(L.softmax("sm", (2, 4, 4), ("b", "s", "k")))
    assert _one(alone, FP32, {"sm": (1, 1, 1)}).layers[0].activation_bytes == 4 * 32


def test_saved_tensor_rules():
    assert saved_tensors(L.concat("cat", [(2, 3), (2, 5)], ("b", "c"), "c")) == (frozenset(), frozenset())
    assert saved_tensors(L.softmax("sm", (2, 4), ("b", "n"))) == (frozenset(), frozenset({0}))
    assert saved_tensors(L.pooling("avg", 2, 3, 8, 8, 2, mode="avg")) == (frozenset(), frozenset())
    assert saved_tensors(L.pooling("max", 2, 3, 8, 8, 2)) == (frozenset({0}), frozenset())
    assert saved_tensors(L.softmax_cross_entropy("x", (4, 10))) == (frozenset({1}), frozenset())


def test_integer_inputs_take_index_bytes():
    g = Graph("emb")
    g.add_layer(L.embedding("emb", b=2, s=4, d=8, v=16))
    r = _one(g, FP16, {"emb": (1, 1, 1, 1)}, MemoryOptions(index_bytes=8))
    assert r.layers[0].activation_bytes == 8 * 2 * 4


def test_buffer_is_the_largest_collective_and_transient():
    g = _mlp()
    # fc1 splits c 4 ways: y[b, n] is all-reduced; fc2 splits b 2 ways: its weight (2 x 16) and
    # bias (2) gradients are, one collective each, so the buffer is the larger.
    r = _one(g, FP32, {"fc1": (1, 1, 4), "fc2": (2, 1, 1)})
    assert r.layers[0].buffer_bytes == 4 * 8 * 16
    assert r.layers[1].buffer_bytes == 4 * 2 * 16
    assert r.peak_buffer_bytes == 4 * 8 * 16
    resident = sum(m.resident_bytes for m in r.layers)
    assert r.per_device_bytes == resident + 4 * 8 * 16
    assert sum(r.totals().values()) == pytest.approx(r.per_device_bytes)
    assert _one(g, FP32, {"fc1": (1, 1, 1), "fc2": (1, 1, 1)}).peak_buffer_bytes == 0


def test_reserved_bytes_add_to_every_strategy():
    g = _mlp()
    base = _one(g, FP32, {"fc1": (1, 1, 1), "fc2": (1, 1, 1)})
    more = _one(g, FP32, {"fc1": (1, 1, 1), "fc2": (1, 1, 1)}, MemoryOptions(reserved_bytes=1000))
    assert more.per_device_bytes == base.per_device_bytes + 1000


def test_memory_never_grows_when_a_split_is_added():
    from pase.models import sample
    g = sample("transformer")
    cluster = Cluster(8, 10e12, 16e9)
    m = build_memory_model(g, cluster, config_options=ConfigOptions(powers_of_two=True))
    for layer in g:
        cfgs = m.configs[layer.name]
        total = m.resident_bytes(layer.name)
        unsplit = total[np.flatnonzero((cfgs == 1).all(axis=1))[0]]
        assert np.all(total <= unsplit * (1 + 1e-12)), layer.name


# -- the memory-feasible search against brute force ------------------------------------------------


def _brute_solver(cg, **kwargs):
    best = min((cg.cost_of(list(a)), a) for a in itertools.product(*[range(len(c)) for c in cg.node_costs]))
    return SimpleNamespace(cost=best[0], assignment=np.array(best[1]))


def _random_instance(rng, n, kmax, with_buffers):
    ks = rng.integers(1, kmax + 1, n)
    costs = tuple(rng.random(k) * 10 for k in ks)
    pairs = {(int(rng.integers(0, v)), v) for v in range(1, n)}
    for _ in range(n // 2):
        u, v = sorted(int(x) for x in rng.choice(n, 2, replace=False))
        pairs.add((u, v))
    edges = tuple((u, v, rng.random((ks[u], ks[v])) * 5) for u, v in sorted(pairs))
    resident = [rng.integers(1, 20, k).astype(float) for k in ks]
    transient = [rng.integers(0, 10, k).astype(float) for k in ks] if with_buffers else None
    return CostGraph(costs, edges), resident, transient


def _all(cg, resident, transient):
    transient = transient or [np.zeros_like(m) for m in resident]
    for a in itertools.product(*[range(len(c)) for c in cg.node_costs]):
        yield cg.cost_of(list(a)), peak_memory(resident, transient, a)


@pytest.mark.parametrize("with_buffers", [False, True])
@pytest.mark.parametrize("solver", ["search", "brute"])
def test_memory_search_equals_brute_force(with_buffers, solver):
    rng = np.random.default_rng(11 + with_buffers)
    kwargs = {} if solver == "search" else {"solver": _brute_solver}
    checked = 0
    for _ in range(60):
        cg, resident, transient = _random_instance(rng, int(rng.integers(2, 7)), 4, with_buffers)
        table = list(_all(cg, resident, transient))
        peaks = [p for _, p in table]
        capacity = float(rng.uniform(min(peaks), max(peaks)))
        r = solve_within_memory(cg, resident, capacity, transient=transient, max_solves=10_000, **kwargs)
        best = min(c for c, p in table if p <= capacity)
        assert r.memory_bytes <= capacity
        assert peak_memory(resident, transient or [np.zeros_like(m) for m in resident], r.assignment) == r.memory_bytes
        assert r.optimal and r.gap == 0
        assert r.cost == pytest.approx(best, rel=1e-9, abs=1e-12)
        assert r.lower_bound <= r.cost + 1e-9
        checked += 1
    assert checked == 60


def test_memory_search_bound_is_valid_when_stopped_early():
    rng = np.random.default_rng(5)
    stopped = 0
    for _ in range(80):
        cg, resident, transient = _random_instance(rng, int(rng.integers(4, 8)), 4, True)
        table = list(_all(cg, resident, transient))
        capacity = float(rng.uniform(min(p for _, p in table), max(p for _, p in table)))
        best = min(c for c, p in table if p <= capacity)
        r = solve_within_memory(cg, resident, capacity, transient=transient, max_solves=int(rng.integers(1, 5)))
        assert r.memory_bytes <= capacity
        assert r.lower_bound <= best + 1e-9 <= r.cost + 2e-9
        assert r.gap == pytest.approx((r.cost - r.lower_bound) / r.cost)
        stopped += not r.optimal
    assert stopped > 0


def test_memory_search_returns_the_unconstrained_optimum_when_it_fits():
    rng = np.random.default_rng(3)
    cg, resident, _ = _random_instance(rng, 5, 3, False)
    free = _brute_solver(cg)
    r = solve_within_memory(cg, resident, 1e9)
    assert r.solves == 1 and r.optimal and r.multiplier == 0
    assert list(r.assignment) == list(free.assignment)


def test_nothing_fits_names_the_least_memory():
    rng = np.random.default_rng(4)
    cg, resident, transient = _random_instance(rng, 4, 3, True)
    least = min(p for _, p in _all(cg, resident, transient))
    assert least_memory(resident, transient)[0] == least
    with pytest.raises(InsufficientMemoryError, match="least any strategy needs") as info:
        solve_within_memory(cg, resident, least - 0.5, transient=transient)
    assert info.value.least_bytes == least
    assert isinstance(info.value, PaseError)
    r = solve_within_memory(cg, resident, least, transient=transient)
    assert r.memory_bytes == least


def test_mix_switches_groups_until_it_fits():
    # Two independent vertices; a = (0, 0) too big, b = (1, 1) fits; switching one suffices.
    cg = CostGraph((np.array([0.0, 3.0]), np.array([0.0, 1.0])), ())
    resident = [np.array([10.0, 1.0]), np.array([10.0, 1.0])]
    zero = [np.zeros(2), np.zeros(2)]
    x = mix(cg, np.array([0, 0]), np.array([1, 1]), resident, zero, 12.0)
    assert list(x) == [0, 1]  # the cheaper switch per byte saved
    assert mix(cg, np.array([0, 0]), np.array([1, 1]), resident, zero, 1.0) is None


# -- plan(), evaluate() -----------------------------------------------------------------------


def _chain():
    g = Graph("chain")
    g.add_layer(L.fully_connected("fc1", b=64, n=512, c=512))
    g.add_layer(L.fully_connected("fc2", b=64, n=512, c=512), inputs=["fc1"])
    g.add_layer(L.fully_connected("fc3", b=64, n=512, c=512), inputs=["fc2"])
    return g


def test_no_capacity_means_the_paper_search_unchanged():
    g, cluster = _chain(), Cluster(8, 10e12, 16e9)
    p = plan(g, cluster)
    off = plan(g, Cluster(8, 10e12, 16e9, memory_bytes=1e3), PlanOptions(memory_limit_bytes=None))
    assert p.strategy == off.strategy and p.cost == off.cost
    assert p.memory_search is None and p.fits_memory is None
    assert p.memory_per_device_bytes == p.memory.per_device_bytes > 0
    assert off.fits_memory is False  # held against the cluster's capacity, not enforced
    d = p.to_dict()
    assert d["memory_per_device_bytes"] == p.memory_per_device_bytes
    assert all("memory_bytes" in layer for layer in d["layers"])


def test_a_capacity_the_optimum_fits_changes_nothing():
    g = _chain()
    free = plan(g, Cluster(8, 10e12, 16e9))
    roomy = plan(g, Cluster(8, 10e12, 16e9, memory_bytes=1e12))
    assert roomy.strategy == free.strategy and roomy.cost == free.cost
    assert roomy.fits_memory and roomy.memory_search.optimal and roomy.memory_search.solves == 1


def test_plan_fits_a_tight_capacity_and_says_when_nothing_fits():
    from pase.model.cost import build_cost_model

    # The search under a tight capacity, without a reserve (the model's vectors below hold none).
    g, cluster = _chain(), Cluster(8, 10e12, 16e9, reserved_bytes=0.0)
    free = plan(g, cluster)
    model = build_cost_model(g, cluster)
    memory = build_memory_model(g, cluster, configs=model.configs)
    resident, transient = memory.resident_vectors(), memory.buffer_vectors()
    least = least_memory(resident, transient)[0]
    need = free.memory_per_device_bytes
    assert least < need
    cap = (least + need) / 2
    tight = plan(g, replace(cluster, memory_bytes=cap), PlanOptions(memory_gap_tolerance=0.0, max_memory_solves=1000))
    assert tight.fits_memory and tight.memory_per_device_bytes <= cap
    assert tight.cost > free.cost
    assert tight.memory_search.optimal and tight.memory_search.capacity_bytes == cap
    assert tight.to_dict()["memory_search"]["gap"] == 0
    # Brute force over the whole (small) strategy space agrees.
    cg = model.cost_graph()
    best = min(
        cg.cost_of(list(a)) for a in itertools.product(*[range(len(c)) for c in cg.node_costs])
        if peak_memory(resident, transient, a) <= cap
    )
    assert tight.cost == pytest.approx(best, rel=1e-9)
    with pytest.raises(InsufficientMemoryError, match="least any strategy needs") as info:
        plan(g, replace(cluster, memory_bytes=least * 0.99))
    assert info.value.least_bytes == pytest.approx(least)


def test_evaluate_reports_memory_against_the_cluster():
    g = _chain()
    dp = {name: (8, 1, 1) for name in ("fc1", "fc2", "fc3")}
    small = evaluate(g, Cluster(8, 10e12, 16e9, memory_bytes=1e5), dp, label="data parallel")
    assert small.fits_memory is False and small.memory_capacity_bytes == 1e5
    assert evaluate(g, Cluster(8, 10e12, 16e9), dp).fits_memory is None
    params = 3 * (512 * 512 + 512)
    assert small.memory.totals()["weights_bytes"] == 4 * params  # replicated on every device


# -- the CLI ---------------------------------------------------------------------------------------


def _cli_json(argv):
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())


def test_cli_memory_gb_finds_a_gpt_strategy_that_fits_where_data_parallelism_does_not():
    # The command with the default reserve (about 3.9 GB per device, pase.model.memory.DEFAULT_RESERVE)
    # on top of 16 GB of the model's own. GPT-2 medium at its sample batch, 32 x 1024 tokens, in fp32: data
    # parallelism needs about 18.8 GB per device besides the reserve.
    d = _cli_json(["solve", "gpt", "--devices", "8", "--memory-gb", "20", "--json"])
    assert d["baselines"]["data parallel"]["fits_memory"] is False
    assert d["memory_per_device_bytes"] < 20e9 and d["fits_memory"]
    assert d["memory_capacity_bytes"] == 20e9
    from pase.analysis.baselines import data_parallel
    from pase.hardware.cluster import PRESETS
    from pase.models import sample
    dp = data_parallel(sample("gpt"), PRESETS["paper-model"].with_devices(8))
    assert dp.memory_per_device_bytes > 16e9


def test_cli_reports_when_nothing_fits(capsys):
    assert main(["solve", "alexnet", "--devices", "4", "--memory-gb", "0.01", "--json"]) == 2
    assert "least any strategy needs" in capsys.readouterr().err
