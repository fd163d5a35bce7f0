"""Each layer's runner-up against brute force: moving one layer to it changes the step by exactly what is said."""

from __future__ import annotations

import pytest

from pase import ops as L
from pase.analysis.explain import explain_strategy
from pase.hardware.cluster import Cluster
from pase.ir.configs import ConfigOptions, layer_configs
from pase.ir.graph import Graph
from pase.models import sample
from pase.planner import PlanOptions, evaluate, plan

CLUSTER = Cluster(4, 10e12, 16e9, 4, None, "t", 2, 4e9)


def _mlp() -> Graph:
    g = Graph("mlp")
    g.add_layer(L.fully_connected("fc1", b=64, n=512, c=256))
    g.add_layer(L.fully_connected("fc2", b=64, n=128, c=512), ["fc1"])
    g.add_layer(L.fully_connected("fc3", b=64, n=512, c=128), ["fc2"])
    return g


def test_the_runner_up_is_the_best_single_layer_change_by_brute_force():
    g = _mlp()
    best = plan(g, CLUSTER)
    why = explain_strategy(g, CLUSTER, best.strategy)
    for layer in g:
        times = {}
        for cfg in layer_configs(layer, CLUSTER.devices, ConfigOptions()):
            cfg = tuple(int(f) for f in cfg)
            if cfg == best.strategy[layer.name]:
                continue
            times[cfg] = evaluate(g, CLUSTER, {**best.strategy, layer.name: cfg}).step_time_s
        runner = min(times, key=times.get)
        w = why[layer.name]
        assert w.config == best.strategy[layer.name]
        assert times[w.runner_up] == pytest.approx(times[runner])
        assert w.slower_s == pytest.approx(times[runner] - best.step_time_s, abs=1e-15)
        assert w.slower_s >= -1e-15  # the optimum of an unconstrained search is a local optimum too


def test_explanations_of_a_transformer_match_re_evaluation():
    g = sample("transformer", batch=8, seq=16, vocab=512, encoder_layers=1, decoder_layers=1)
    cluster = CLUSTER.with_devices(8)
    best = plan(g, cluster, PlanOptions())
    why = explain_strategy(g, cluster, best.strategy)
    assert set(why) == set(best.strategy)
    for name in list(why)[::7]:
        w = why[name]
        if w.runner_up is None:
            continue
        moved = evaluate(g, cluster, {**best.strategy, name: w.runner_up})
        assert moved.step_time_s == pytest.approx(best.step_time_s + w.slower_s, rel=1e-9, abs=1e-15)
