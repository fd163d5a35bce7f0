"""Baselines, partial plans and sweeps: all under the search's cost model, never better than the search."""

import numpy as np
import pytest

from pase import ops as L
from pase.analysis.baselines import applicable_baselines, baseline_plan, data_parallel, evaluate_strategy
from pase.analysis.sweep import sweep
from pase.strategies.baselines import BASELINES, data_parallel_config
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.errors import ConfigurationError, GraphError
from pase.ir.graph import Graph
from pase.models import LANGUAGE_MODELS, SAMPLES, sample
from pase.models.moe import MOE_SAMPLES
from pase.model.cost import build_cost_model
from pase.planner import PlanOptions, evaluate, plan
from pase.search.approx import improve

CLUSTER = Cluster(8, 10e12, 16e9)


def _mlp(b=64):
    g = Graph("mlp")
    g.add_layer(L.fully_connected("fc1", b=b, n=256, c=128, pointwise=1))
    g.add_layer(L.fully_connected("fc2", b=b, n=256, c=256), inputs=["fc1"])
    g.add_layer(L.softmax_cross_entropy("loss", (b, 256)), inputs=["fc2"])
    return g


def test_data_parallel_splits_batch_or_the_largest_allowed_split():
    fc = L.fully_connected("fc", b=96, n=8, c=8)
    assert data_parallel_config(fc, 8) == (8, 1, 1)
    paper = ConfigOptions(cost_model="paper")
    assert data_parallel_config(fc, 64, paper) == (48, 1, 1)  # the largest divisor of 96 up to 64
    assert data_parallel_config(fc, 64, ConfigOptions(min_shard=4, cost_model="paper")) == (24, 1, 1)  # 96 / 24 = 4
    # The corrected model tiles the mesh: the split must divide 64 too.
    assert data_parallel_config(fc, 64) == (32, 1, 1)
    assert data_parallel_config(fc, 64, ConfigOptions(min_shard=4)) == (16, 1, 1)
    assert data_parallel_config(fc, 64, ConfigOptions(powers_of_two=True, min_shard=1)) == (32, 1, 1)
    no_batch = L.elementwise("x", (8, 8), ("s", "d"))
    assert data_parallel_config(no_batch, 8) == (1, 1)


def test_partial_strategy_defaults_to_data_parallel():
    g = _mlp()
    dp = data_parallel(g, CLUSTER)
    same = evaluate_strategy(g, CLUSTER, {})
    assert same.cost == pytest.approx(dp.cost)
    mixed = evaluate_strategy(g, CLUSTER, {"fc2": (1, 8, 1)})
    assert mixed.strategy["fc2"] == (1, 8, 1) and mixed.strategy["fc1"] == (8, 1, 1)


@pytest.mark.parametrize(
    "strategy,error,match",
    [
        ({"fc9": (1, 1, 1)}, GraphError, "fc9"),
        ({"fc1": (3, 1, 1)}, ConfigurationError, "cannot be split 3 ways"),
        ({"fc1": (8, 2, 1)}, ConfigurationError, "uses 16 devices"),
    ],
)
def test_invalid_user_plans_name_the_problem(strategy, error, match):
    with pytest.raises(error, match=match):
        evaluate_strategy(_mlp(), CLUSTER, strategy)


def test_search_never_loses_to_a_baseline_on_small_graphs():
    for b in (8, 64):
        for p in (2, 4, 8):
            g, cluster = _mlp(b), CLUSTER.with_devices(p)
            best = plan(g, cluster)
            for name, base in applicable_baselines(g, cluster).items():
                assert best.cost <= base.cost * (1 + 1e-9), (b, p, name)


def test_baselines_say_where_they_apply():
    assert set(applicable_baselines(_mlp(), CLUSTER)) == {"data parallel", "parameter parallel"}
    with pytest.raises(ValueError, match="does not apply"):
        baseline_plan("OWT", _mlp(), CLUSTER)


def test_owt_is_data_parallel_convolutions_and_model_parallel_fc():
    g = sample("alexnet")
    owt = baseline_plan("OWT", g, CLUSTER)
    for row in owt.layers:
        if row.op == "Conv2D":
            assert row.config[0] == 8 and max(row.config[1:]) == 1
        if row.op == "FullyConnected":
            assert row.config == (1, 8, 1) or row.config[1] > 1


def _brute_force_cost(graph, cluster):
    """Least cost over every strategy of the search space, by enumeration (no search involved)."""
    cg = build_cost_model(graph, cluster).cost_graph()
    grids = np.meshgrid(*[np.arange(k) for k in cg.config_counts], indexing="ij")
    a = [x.ravel() for x in grids]
    total = sum(c[a[v]] for v, c in enumerate(cg.node_costs))
    for u, v, m in cg.edges:
        total = total + m[a[u], a[v]]
    return float(np.min(total))


def test_sweep_records_agree_with_evaluate_and_brute_force():
    g = _mlp()
    calls = []
    records = sweep(g, [2, 4], CLUSTER, bandwidths_Bps=[1e9, 16e9], progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
    by_point = {}
    for r in records:
        by_point.setdefault((r["devices"], r["bandwidth_Bps"]), {})[r["strategy"]] = r
    assert set(by_point) == {(2, 1e9), (2, 16e9), (4, 1e9), (4, 16e9)}
    for (p, bw), recs in by_point.items():
        point = Cluster(p, 10e12, bw)
        # An MLP is neither a CNN, a Transformer nor an RNN: only the two generic baselines apply.
        assert set(recs) == {"PaSE", "data parallel", "parameter parallel"}
        # The baselines' strategies written out by hand: the batch split p ways, or each layer's
        # largest model dimension (fc1: n = 256 > c = 128; fc2: n = c = 256, the first; loss: n).
        dp = evaluate(g, point, {"fc1": (p, 1, 1), "fc2": (p, 1, 1), "loss": (p, 1)})
        pp = evaluate(g, point, {"fc1": (1, p, 1), "fc2": (1, p, 1), "loss": (1, p)})
        pase = evaluate(g, point, {k: tuple(v) for k, v in recs["PaSE"]["configs"].items()})
        assert set(recs["PaSE"]["configs"]) == {"fc1", "fc2", "loss"}
        for name, ref in (("data parallel", dp), ("parameter parallel", pp), ("PaSE", pase)):
            r = recs[name]
            assert (r["peak_flops"], r["fits_memory"]) == (10e12, None)
            assert r["step_time_s"] == pytest.approx(ref.step_time_s, rel=1e-12)
            assert r["cost"] == pytest.approx(ref.cost, rel=1e-12)
            assert r["memory_per_device_bytes"] == pytest.approx(ref.memory_per_device_bytes)
            assert r["speedup_over_dp"] == pytest.approx(dp.step_time_s / ref.step_time_s, rel=1e-12)
        # PaSE's record is the optimum over every strategy (enumerated here), so at least as fast as
        # data parallelism, which is one of them.
        assert recs["PaSE"]["cost"] == pytest.approx(_brute_force_cost(g, point), rel=1e-9)
        assert recs["PaSE"]["speedup_over_dp"] >= 1 - 1e-12
    for p in (2, 4):
        # A faster network never slows a strategy down; data parallelism all-reduces its weight
        # gradients, so it gets strictly faster.
        slow, fast = by_point[(p, 1e9)], by_point[(p, 16e9)]
        assert fast["PaSE"]["step_time_s"] <= slow["PaSE"]["step_time_s"] * (1 + 1e-12)
        assert fast["data parallel"]["step_time_s"] < slow["data parallel"]["step_time_s"]


@pytest.mark.parametrize("b,p", [(8, 2), (8, 4), (64, 4)])
def test_plan_is_the_brute_force_optimum_and_every_baseline_lies_in_its_space(b, p):
    g, cluster = _mlp(b), CLUSTER.with_devices(p)
    best = plan(g, cluster)
    assert best.exact and best.cost == pytest.approx(_brute_force_cost(g, cluster), rel=1e-9)
    model = build_cost_model(g, cluster)
    for name, baseline in BASELINES.items():
        if not baseline.applies(g):
            continue
        for label, strategy in baseline.candidates(g, p, ConfigOptions()):
            for layer in g:
                model.config_index(layer.name, strategy[layer.name])  # raises if outside the search space
            assert evaluate(g, cluster, strategy).cost >= best.cost * (1 - 1e-12), (name, label)


# The acceptance check of the baselines issue, where it can fail: on exact searches only (DenseNet-121
# goes to the approximate search, which starts from every baseline and so cannot lose to one), at
# reduced sizes so that it runs in seconds. Every strategy a baseline proposes must lie in the search
# space (so the optimum can never cost more) and cost no less than the optimum.
SMALL_SAMPLES = [
    ("alexnet", dict(batch=32), (4, 16), {"OWT"}),
    ("inception3", dict(batch=32), (8,), {"OWT"}),
    ("resnet101", dict(batch=32), (8,), {"OWT"}),
    ("rnnlm", dict(batch=64, seq=32, vocab=8192, hidden=512), (4, 16), {"GNMT"}),
    ("transformer", dict(batch=16, seq=64, vocab=8192, encoder_layers=1, decoder_layers=1), (4, 16),
     {"Mesh-TF", "Megatron"}),
    ("transformer_large", dict(batch=16, seq=64, vocab=8192, encoder_layers=1, decoder_layers=1), (8,),
     {"Mesh-TF", "Megatron"}),
    ("gpt", dict(batch=8, seq=128, layers=2, vocab=8192), (4, 16), {"Mesh-TF", "Megatron"}),
]
# The Megatron-LM models share one builder (pase.models.megatron); one small instance stands for all.
SMALL_SAMPLES.append(("megatron-1.7b", dict(batch=8), (4,), {"Mesh-TF", "Megatron"}))


def test_small_samples_cover_every_sample_the_exact_search_solves():
    # The mixtures of experts build no smaller than their published depth; tests/test_moe.py checks the
    # search on a small block of the same builder against brute force.
    assert {name for name, *_ in SMALL_SAMPLES} == set(SAMPLES) - {"densenet121"} - set(LANGUAGE_MODELS) - set(
        MOE_SAMPLES) | {"megatron-1.7b"}


@pytest.mark.parametrize("name,sizes,devices,specific", SMALL_SAMPLES, ids=[s[0] for s in SMALL_SAMPLES])
def test_exact_search_never_loses_to_any_baseline_on_samples(name, sizes, devices, specific):
    g = sample(name, **sizes)
    for p in devices:
        cluster = CLUSTER.with_devices(p)
        best = plan(g, cluster)
        assert best.exact
        model = build_cost_model(g, cluster)
        for baseline in BASELINES.values():
            if baseline.applies(g):
                for _, strategy in baseline.candidates(g, p, ConfigOptions()):
                    for layer in g:
                        model.config_index(layer.name, strategy[layer.name])
        bases = applicable_baselines(g, cluster)
        assert set(bases) == {"data parallel", "parameter parallel"} | specific
        for base_name, base in bases.items():
            assert best.cost <= base.cost * (1 + 1e-9), (name, p, base_name, best.cost, base.cost)


APPROX_CASES = [
    # A chain: every window of the local search holds the whole graph (each table is one layer's
    # configurations), so only the planner's fallback is checked.
    ("alexnet", dict(batch=32), 16, None),
    ("gpt", dict(batch=8, seq=128, layers=2, vocab=8192), 8, 200),
    ("inception3", dict(batch=32), 8, 200),
]


@pytest.mark.parametrize("name,sizes,p,window", APPROX_CASES, ids=[c[0] for c in APPROX_CASES])
def test_approximate_search_matches_the_exact_optimum_where_both_run(name, sizes, p, window):
    g, cluster = sample(name, **sizes), CLUSTER.with_devices(p)
    exact = plan(g, cluster)
    # A one-byte budget refuses the exact search: the planner falls back to local search seeded
    # with every baseline.
    approx = plan(g, cluster, PlanOptions(search_budget_bytes=1))
    assert exact.exact and not approx.exact
    assert approx.cost == pytest.approx(exact.cost, rel=1e-9)
    assert evaluate(g, cluster, approx.strategy).cost == pytest.approx(approx.cost, rel=1e-12)
    if window is None:
        return
    # The method itself: windows of at most 200 table entries cut the graph into many pieces. The
    # exact optimum bounds it from below and the best seed from above; on these graphs it reaches
    # the optimum (as BENCHMARKS.md's 'small windows' column reports).
    model = build_cost_model(g, cluster)
    seeds = [[model.config_index(l.name, s[l.name]) for l in model.layers]
             for b in BASELINES.values() if b.applies(g) for _, s in b.candidates(g, p, ConfigOptions())]
    small = improve(model.cost_graph(), seeds, window_table_entries=window)
    assert small.windows_solved >= 10 * small.rounds
    assert exact.cost * (1 - 1e-12) <= small.cost <= min(small.seed_costs) * (1 + 1e-12)
    assert small.cost == pytest.approx(exact.cost, rel=1e-9)
