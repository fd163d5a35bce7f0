"""Batch sweeps (pase.analysis.sweep.batch_sweep): one sweep per batch size, one progress count over all."""

from __future__ import annotations

import pytest

from pase import ops as L
from pase.analysis.sweep import batch_sweep, sweep
from pase.errors import GraphError
from pase.hardware.cluster import Cluster
from pase.ir.graph import Graph

CLUSTER = Cluster(devices=2, peak_flops=10e12, bandwidth_Bps=16e9, name="test")


def _mlp(b: int) -> Graph:
    g = Graph("mlp")
    g.add_layer(L.fully_connected("fc1", b=b, n=256, c=128))
    g.add_layer(L.fully_connected("fc2", b=b, n=256, c=256), inputs=["fc1"])
    g.add_layer(L.softmax_cross_entropy("loss", (b, 256)), inputs=["fc2"])
    return g


def test_each_batch_gives_the_records_of_a_sweep_of_its_graph():
    built = []

    def build(batch: int) -> Graph:
        built.append(batch)
        return _mlp(batch)

    records = batch_sweep(build, [32, 128], [2, 4], CLUSTER, bandwidths_Bps=[1e9, 16e9])
    assert built == [32, 128]
    for batch in (32, 128):
        mine = [r for r in records if r["batch"] == batch]
        alone = sweep(_mlp(batch), [2, 4], CLUSTER, bandwidths_Bps=[1e9, 16e9])
        assert [{k: v for k, v in r.items() if k != "batch"} for r in mine] == alone
    assert [r["batch"] for r in records] == sorted(r["batch"] for r in records), "batch by batch, in the given order"


def test_the_batch_changes_the_step_time():
    records = batch_sweep(_mlp, [16, 256], [2], CLUSTER)
    dp = {r["batch"]: r["step_time_s"] for r in records if r["strategy"] == "data parallel"}
    assert dp[256] > dp[16]


def test_progress_counts_every_point_of_every_batch_up_to_its_total():
    calls = []
    batch_sweep(_mlp, [16, 32, 64], [2, 4], CLUSTER, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(i, 6) for i in range(1, 7)]


@pytest.mark.parametrize("batches", [[0], [32, -8], [True], [2.5], []])
def test_a_bad_batch_list_is_refused_before_anything_is_built(batches):
    def build(batch: int) -> Graph:
        raise AssertionError("nothing may be built for a bad batch list")

    with pytest.raises(GraphError, match="batch"):
        batch_sweep(build, batches, [2], CLUSTER)


def test_records_carry_throughput_and_mfu():
    from pase.analysis.sweep import records_csv, records_from_csv

    records = sweep(_mlp(32), [1, 2], CLUSTER)
    for r in records:
        assert r["samples_per_s"] == pytest.approx(32 / r["step_time_s"], rel=1e-12)
        assert r["tokens_per_s"] is None
        assert 0 < r["mfu"] <= 1 + 1e-12
        assert r["mfu"] == pytest.approx(r["model_flops_per_step"] / (r["devices"] * r["peak_flops"] * r["step_time_s"]))
    one = next(r for r in records if r["devices"] == 1 and r["strategy"] == "PaSE")
    assert one["mfu"] == pytest.approx(1.0, rel=1e-12)
    back = records_from_csv(records_csv(records))
    assert [r["mfu"] for r in back] == pytest.approx([r["mfu"] for r in records])


# -- GPU types side by side, a fixed per-device batch, training estimates ---------------------------

A100 = Cluster(devices=2, peak_flops=312e12, bandwidth_Bps=300e9, memory_bytes=80e9, name="a100-like")
H100 = Cluster(devices=2, peak_flops=989e12, bandwidth_Bps=450e9, memory_bytes=80e9, name="h100-like")


def _lm(b: int):
    from pase.models import sample

    return sample("gpt", batch=b, seq=16, d_model=32, layers=1, heads=2, vocab=50)


def test_clusters_are_the_outermost_axis_each_with_its_own_figures():
    records = sweep(_mlp(64), [2, 4], [A100, H100])
    assert [(r["cluster"], r["devices"]) for r in records if r["strategy"] == "PaSE"] == [
        ("a100-like", 2), ("a100-like", 4), ("h100-like", 2), ("h100-like", 4)]
    for c in (A100, H100):
        mine = [r for r in records if r["cluster"] == c.name]
        assert mine == sweep(_mlp(64), [2, 4], c), "one GPU type's records are those of its own sweep"
        assert {(r["peak_flops"], r["bandwidth_Bps"], r["memory_capacity_bytes"]) for r in mine} == {
            (c.peak_flops, c.bandwidth_Bps, c.memory_bytes)}
    fast = {r["devices"]: r["step_time_s"] for r in records if r["cluster"] == "h100-like" and r["strategy"] == "PaSE"}
    slow = {r["devices"]: r["step_time_s"] for r in records if r["cluster"] == "a100-like" and r["strategy"] == "PaSE"}
    assert all(fast[p] < slow[p] for p in (2, 4)), "the faster GPU takes less time a step"


@pytest.mark.parametrize("clusters, message", [([], "at least one"), ([A100, A100], "distinct names"),
                                               ([A100, "dgx-h100"], "Cluster values")])
def test_a_bad_cluster_list_is_refused(clusters, message):
    from pase.errors import ClusterError

    with pytest.raises(ClusterError, match=message):
        sweep(_mlp(8), [2], clusters)


def test_a_fixed_global_batch_stays_the_same_at_every_device_count():
    records = sweep(_mlp(64), [1, 2, 4], CLUSTER)
    assert {r["batch_mode"] for r in records} == {"global"}
    assert {r["global_batch"] for r in records} == {64}
    assert {(r["devices"], r["batch_per_device"]) for r in records} == {(1, 64.0), (2, 32.0), (4, 16.0)}


def test_a_fixed_per_device_batch_doubles_the_global_batch_with_the_devices():
    built = []

    def build(batch: int) -> Graph:
        built.append(batch)
        return _mlp(batch)

    calls = []
    records = batch_sweep(build, [8], [1, 2, 4], [A100, H100], per_device=True,
                          progress=lambda done, total: calls.append((done, total)))
    assert built == [8, 16, 32]
    assert calls == [(i, 6) for i in range(1, 7)], "one count over every GPU type and device count"
    for r in records:
        assert r["batch"] == r["global_batch"] == 8 * r["devices"]
        assert r["per_device_batch"] == 8 and r["batch_per_device"] == 8
        assert r["batch_mode"] == "per device"
    alone = sweep(_mlp(32), [4], [A100, H100])
    assert [{k: v for k, v in r.items() if k not in ("batch", "per_device_batch")}
            for r in records if r["devices"] == 4] == [{**r, "batch_mode": "per device"} for r in alone]


def test_tokens_per_second_are_the_global_tokens_over_the_step_time():
    records = batch_sweep(_lm, [2], [1, 2, 4], CLUSTER, per_device=True)
    for r in records:
        assert r["tokens_per_s"] == pytest.approx(r["global_batch"] * 16 / r["step_time_s"], rel=1e-12)
        assert r["samples_per_s"] == pytest.approx(r["global_batch"] / r["step_time_s"], rel=1e-12)


def test_idle_devices_are_counted_when_p_exceeds_what_the_model_can_use():
    tiny = Graph("tiny")
    tiny.add_layer(L.fully_connected("fc1", b=4, n=4, c=4))
    tiny.add_layer(L.fully_connected("fc2", b=4, n=4, c=4), inputs=["fc1"])
    records = sweep(tiny, [2, 64], CLUSTER)
    for r in records:
        assert r["idle_devices"] == r["devices"] - r["devices_used"] >= 0
    assert all(r["idle_devices"] > 0 for r in records if r["devices"] == 64), "no layer splits 64 ways"
    dp = {r["devices"]: r["idle_devices"] for r in records if r["strategy"] == "data parallel"}
    assert dp == {2: 0, 64: 60}, "data parallelism splits a batch of 4 over 4 of the 64 devices"


def test_training_estimates_are_time_gpu_hours_and_cost_at_each_rate():
    from pase.analysis.sweep import with_training_estimates

    records = sweep(_lm(4), [1, 2, 4], [A100, H100])
    out = with_training_estimates(records, 1e9, unit="tokens", price_per_gpu_hour=2.5)
    assert [{k: v for k, v in r.items() if k in records[0]} for r in out] == records, "the fields are kept"
    for r in out:
        assert r["time_to_train_s"] == pytest.approx(1e9 / r["tokens_per_s"], rel=1e-12)
        assert r["gpu_hours"] == pytest.approx(r["devices"] * r["time_to_train_s"] / 3600, rel=1e-12)
        assert r["train_cost"] == pytest.approx(2.5 * r["gpu_hours"], rel=1e-12)
        assert (r["train_amount"], r["train_unit"]) == (1e9, "tokens")
    assert all(r["train_cost"] is None for r in with_training_estimates(records, 1e6, unit="samples"))


@pytest.mark.parametrize("kwargs, message", [
    ({"amount": 0}, "positive"), ({"amount": 1e9, "price_per_gpu_hour": -1}, "price"),
    ({"amount": 1e9, "unit": "steps"}, "tokens' or 'samples"), ({"amount": 1e9, "graph": "mlp"}, "samples instead"),
])
def test_training_estimates_refuse_what_they_cannot_estimate(kwargs, message):
    from pase.analysis.sweep import with_training_estimates
    from pase.analysis.throughput import ThroughputError

    graph = _mlp(8) if kwargs.pop("graph", None) else _lm(2)
    with pytest.raises(ThroughputError, match=message):
        with_training_estimates(sweep(graph, [2], CLUSTER), kwargs.pop("amount"), **kwargs)


def test_the_csv_has_the_new_columns_and_parses_back():
    from pase.analysis.sweep import records_csv, records_from_csv, with_training_estimates

    records = with_training_estimates(batch_sweep(_lm, [2], [1, 2], [A100, H100], per_device=True), 1e9,
                                      price_per_gpu_hour=3.0)
    text = records_csv(records)
    header = text.splitlines()[0].split(",")
    assert {"cluster", "batch_mode", "global_batch", "batch_per_device", "per_device_batch", "idle_devices",
            "memory_capacity_bytes", "time_to_train_s", "gpu_hours", "train_cost"} <= set(header)
    assert records_from_csv(text) == records
