"""The MoE view (ui/moe.py): what an MoE plan shows, against hand counts, and the view under AppTest."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from pase.hardware.cluster import Cluster
from pase.model.training import Parallelism, evaluate_training
from pase.models import batch_builder
from pase.models.moe import moe_decoder
from ui.moe import moe_figure, moe_rows

B, S, K, X = 2, 32, 2, 8  # microbatch, sequence, top-k, experts


def build(b):
    return moe_decoder("tiny-moe", layers=2, hidden=64, heads=4, kv_heads=2, experts=X, top_k=K, expert_ffn=128,
                       vocab=256, batch=b, seq=S)


CLUSTER = Cluster(8, 100e12, 100e9, 2, 80e9, "test", 4, 10e9)


def moe_plan(global_batch: int = 8, **change):
    par = Parallelism(tensor=2, pipeline=2, data=2, microbatch_size=B, global_batch=global_batch,
                      sequence_parallel=True, ep=4, etp=1, **change)
    return evaluate_training(build, CLUSTER, par)


def test_the_table_reads_the_expert_layout_as_counted_by_hand():
    rows = {r["quantity"]: r["value"] for r in moe_rows(moe_plan())}
    # EP 4 x ETP 1 on a stage's t d = 4 devices: expert-DP 1; 8 experts over EP 4: 2 per device.
    assert rows["expert parallelism (EP)"].startswith("4 (")
    assert rows["expert tensor parallelism (ETP)"] == "1 (one device)"
    assert rows["expert data parallelism (expert-DP)"] == "1 (one device)"
    assert rows["experts per device"] == f"2 of {X} (top-{K})"
    # A device routes its b s / t = 32 tokens' top-2 copies, 64, and keeps the 1/4 bound for its own experts.
    assert rows["tokens each all-to-all moves (per device, block, microbatch)"] == (
        "48 sent, 0 of them to other nodes, for 64 routed copies")
    assert rows["link the all-to-all crosses"] in ("gpu", "node")
    assert "exposed" in rows["dispatch and combine per step (busiest device)"]


def test_the_bars_are_each_stages_dispatch_and_compute_per_step():
    plan = moe_plan()
    fig = moe_figure(plan)
    m = plan.parallelism.microbatches
    dispatch, compute = (list(t.y) for t in fig.data)
    assert dispatch == [s.dispatch_s * m for s in plan.stages]
    assert compute == [s.expert_compute_s * m for s in plan.stages]
    assert all(x > 0 for x in dispatch + compute)


def test_under_the_overlap_the_bars_show_what_of_the_dispatch_stays_exposed():
    overlapped = moe_plan(global_batch=64, expert_overlap=True)  # 16 microbatches: most passes merged
    names = [t.name for t in moe_figure(overlapped).data]
    assert names == ["dispatch and combine", "of them exposed (overlap)", "experts' compute"]
    dispatch, exposed, _ = (list(t.y) for t in moe_figure(overlapped).data)
    # Hidden behind another microbatch's layer, less of each stage's exchanges is exposed than they take.
    assert all(0 <= x < d for x, d in zip(exposed, dispatch))
    rows = {r["quantity"]: r["value"] for r in moe_rows(overlapped)}
    assert "overlapped with another microbatch's layer" in rows["dispatch and combine per step (busiest device)"]


def test_a_dense_plan_has_no_expert_view():
    plan = evaluate_training(batch_builder("gpt", layers=2, d_model=64, heads=4, seq=32, vocab=256),
                             Cluster(8, 100e12, 100e9, 2, 80e9, "test", 4, 10e9), Parallelism(data=8, global_batch=8))
    assert moe_rows(plan) == []


def _view():
    from tests.test_moe_view import moe_plan
    from ui.moe import show_moe

    show_moe(moe_plan(), "t")


def test_an_moe_plan_shows_the_view_in_the_app():
    at = AppTest.from_function(_view, default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [h.value for h in at.subheader] == ["Experts"]
    (table,) = at.dataframe
    assert "experts per device" in list(table.value["quantity"])
    (chart,) = at.get("plotly_chart")
    assert [t["name"] for t in json.loads(chart.proto.spec)["data"]] == ["dispatch and combine", "experts' compute"]
