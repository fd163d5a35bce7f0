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
