"""Baselines, partial plans and sweeps: all under the search's cost model, never better than the search."""

import pytest

from pase import ops as L
from pase.analysis.baselines import applicable_baselines, baseline_plan, data_parallel, evaluate_strategy
from pase.analysis.sweep import sweep
from pase.strategies.baselines import BASELINES, data_parallel_config
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions
from pase.errors import ConfigurationError, GraphError
from pase.ir.graph import Graph
from pase.models import SAMPLES, sample
from pase.planner import plan

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


def test_sweep_records_every_point_and_strategy():
    calls = []
    records = sweep(_mlp(), [2, 4], CLUSTER, bandwidths_Bps=[1e9, 16e9], progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
    points = {(r["devices"], r["bandwidth_Bps"]) for r in records}
    assert points == {(2, 1e9), (2, 16e9), (4, 1e9), (4, 16e9)}
    for r in records:
        if r["strategy"] == "data parallel":
            assert r["speedup_over_dp"] == pytest.approx(1.0)
        if r["strategy"] == "PaSE":
            assert r["speedup_over_dp"] >= 1 - 1e-9 and set(r["configs"]) == {"fc1", "fc2", "loss"}


# The acceptance check of the baselines issue: every sample, p = 4 to 64 (DenseNet
# through the approximate search, which starts from every baseline).
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_search_never_loses_to_any_baseline_on_samples(name):
    g = sample(name)
    for p in (4, 8, 16, 32, 64):
        cluster = CLUSTER.with_devices(p)
        best = plan(g, cluster)
        for base_name, base in applicable_baselines(g, cluster).items():
            assert best.cost <= base.cost * (1 + 1e-9), (name, p, base_name, best.cost, base.cost)
