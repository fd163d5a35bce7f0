"""The Learn page's walk-through (ui.walkthrough) against hand counts, and the guided first visit (ui.tour).

The walk-through's numbers come from pase's memory and cost models; here they are
checked against counts by hand of the tiny model (pase.models.teaching.tiny_lm):
its parameters, its activations' sizes and the ring collectives' 2 (p - 1) / p rule.
"""

from __future__ import annotations

import math

import pytest
from streamlit.testing.v1 import AppTest

from pase.model.cost import build_cost_model
from pase.models.teaching import tiny_lm, tiny_lm_parameters
from pase.strategies.baselines import tensor_parallel_strategy
from ui import walkthrough as wt
from ui.palette import MEMORY_COLORS, PARALLELISM_COLORS
from pase.model.training import group_cluster
from test_app import charts, new_app  # the app tests' helpers: run app.py once, find a chart by its key


# The model's sizes (tiny_lm's defaults) and the cluster's: two nodes of four GPUs, bf16.
SEQ, HIDDEN, FFN, VOCAB, BLOCKS = 256, 512, 2048, 4096, 2
PARAMS = tiny_lm_parameters(HIDDEN, FFN, VOCAB, BLOCKS)
P = PARAMS["split"] + PARAMS["replicated"]
BPE = 2  # bytes per bf16 element
ADAM = 12  # fp32 master copy and two moments, bytes per parameter
GPUS, NODES = 4, 2
ACTIVATION = 1 * SEQ * HIDDEN * BPE  # one sequence's (b s d) activation, in bytes


def ring(p: int) -> float:
    """A ring all-reduce: each device sends 2 (p - 1) / p of the block."""
    return 2 * (p - 1) / p


def on(step: wt.WalkStep, axis: str, kind: str | None = None, stage: int = 0) -> float:
    return sum(t.step_bytes for t in step.transfers
               if t.axis == axis and t.stage == stage and (kind is None or t.kind == kind))


def test_the_model_and_cluster_are_the_ones_counted_here():
    graph = wt.walk_graph()
    assert graph.parameter_count == P == 2 * VOCAB * HIDDEN + 2 * BLOCKS * HIDDEN * FFN + 2 * HIDDEN * (BLOCKS + 1)
    cluster = wt.walk_cluster()
    assert cluster.devices == GPUS * NODES and cluster.mesh.shape == (NODES, GPUS)
    assert cluster.bytes_per_element == BPE


def test_data_parallelism_holds_everything_and_all_reduces_the_gradients():
    step = wt.walk_step("Data parallelism")
    p = step.parallelism.data
    assert p == 8
    for n in range(p):
        s = step.stage_of(n)
        assert s.weights_bytes == s.gradient_bytes == P * BPE
        assert s.optimizer_bytes == P * ADAM
    grad = P * BPE
    total = on(step, "gpu", "data") + on(step, "node", "data")
    assert total == pytest.approx(ring(p) * grad, rel=1e-12)
    # Hierarchically: the node's four GPUs first, then a quarter of the block between the two nodes.
    assert on(step, "gpu") == pytest.approx(ring(GPUS) * grad, rel=1e-12)
    assert on(step, "node") == pytest.approx(ring(NODES) * grad / GPUS, rel=1e-12)
    assert {t.collective for t in step.transfers} == {"all-reduce"}


@pytest.mark.parametrize("name", ["Tensor parallelism", "Sequence parallelism"])
def test_tensor_parallelism_holds_a_quarter_of_the_split_weights(name):
    step = wt.walk_step(name)
    t, d = step.parallelism.tensor, step.parallelism.data
    assert (t, d) == (GPUS, NODES)
    shard = PARAMS["split"] // t + PARAMS["replicated"]
    for n in range(t * d):
        assert step.stage_of(n).weights_bytes == shard * BPE
        assert step.stage_of(n).optimizer_bytes == shard * ADAM
    # Only the gradient all-reduce of the shard crosses the network (between the two replicas).
    assert on(step, "node") == on(step, "node", "data") == pytest.approx(ring(d) * shard * BPE, rel=1e-12)
    kind = "sequence" if step.parallelism.sequence_parallel else "tensor"
    moves = [x for x in step.transfers if x.kind == kind and "→" in x.what]
    assert moves and all(x.axis == "gpu" and x.times == step.parallelism.microbatches for x in moves)
    if kind == "tensor":
        # ff2's and the embedding's partial sums (forward), ff1's and the head's input gradients (backward).
        assert len(moves) == 2 + 2 * BLOCKS
        assert {x.collective for x in moves} == {"all-reduce"}
        assert all(x.bytes_per_device == pytest.approx(ring(t) * ACTIVATION) for x in moves)
    else:
        # Each all-reduce is a reduce-scatter and an all-gather, each (t - 1) / t of the activation.
        assert len(moves) == 2 * (2 + 2 * BLOCKS)
        assert {x.collective for x in moves} == {"reduce-scatter", "all-gather"}
        assert all(x.bytes_per_device == pytest.approx(ring(t) / 2 * ACTIVATION) for x in moves)
        tensor_only = wt.walk_step("Tensor parallelism")
        assert step.stage_of(0).activation_bytes < tensor_only.stage_of(0).activation_bytes


def test_pipeline_stages_hold_their_layers_and_send_the_boundary_activation():
    step = wt.walk_step("Pipeline parallelism")
    par = step.parallelism
    t, m = par.tensor, par.microbatches
    assert (par.pipeline, t, m) == (2, GPUS, 8)
    assert step.plan.stages[0].layers == (("embed", "h.0.add"),)
    assert step.plan.stages[1].layers == (("h.1.ln", "loss"),)
    # Stage 0: the embedding table and block 0; stage 1: block 1, the final LayerNorm and the head's table.
    block_split, norm = 2 * HIDDEN * FFN, 2 * HIDDEN
    stage0 = (VOCAB * HIDDEN + block_split) // t + norm
    stage1 = (block_split + VOCAB * HIDDEN) // t + 2 * norm
    for n in range(par.devices):
        expected = stage0 if step.coordinates[n][3] == 0 else stage1
        assert step.stage_of(n).weights_bytes == expected * BPE
    sends = [x for x in step.transfers if x.kind == "pipeline"]
    assert [(x.stage, x.axis, x.collective, x.times) for x in sends] == [(0, "node", "send", m), (1, "node", "send", m)]
    # Each GPU of a stage sends its 1/t of the boundary activation (Megatron's scatter-gather), per microbatch.
    assert all(x.bytes_per_device == ACTIVATION / t for x in sends)
    assert on(step, "node", stage=0) == m * ACTIVATION / t


@pytest.mark.parametrize("zero", wt.ZERO_STAGES)
def test_zero_shards_the_state_over_the_replicas(zero):
    step = wt.walk_step("ZeRO", zero)
    d = step.parallelism.data
    s = step.stage_of(0)
    assert s.optimizer_bytes == pytest.approx(P * ADAM / d)
    assert s.gradient_bytes == pytest.approx(P * BPE / (d if zero >= 2 else 1))
    assert s.weights_bytes == pytest.approx(P * BPE / (d if zero == 3 else 1))
    total = sum(step.bytes_by_axis().values())
    # ZeRO-1 and 2: a reduce-scatter and an all-gather, the all-reduce's bytes; ZeRO-3 adds a second all-gather.
    collectives = 2 if zero < 3 else 3
    assert total == pytest.approx(collectives * ring(d) / 2 * P * BPE * step.parallelism.microbatches, rel=1e-12)
    assert {t.kind for t in step.transfers} == {"ZeRO"}


@pytest.mark.parametrize("name", wt.STEPS)
def test_the_transfers_add_up_to_the_cost_models_times(name):
    """The listed traffic is what the training model charges: per microbatch inside the group, once a step between
    replicas (the stage's gradient reduction)."""
    step = wt.walk_step(name)
    par, cluster = step.parallelism, wt.walk_cluster()
    graph = tiny_lm(batch=par.microbatch_size)
    strategy = tensor_parallel_strategy(graph, par.tensor, par.context, par.sequence_parallel)
    group = group_cluster(cluster, par)
    cuts = par.stage_cuts or ()
    per_stage = [0.0] * par.pipeline
    if group.devices > 1:
        model = build_cost_model(graph, group, configs={k: [v] for k, v in strategy.items()})
        for i, row in enumerate(model.breakdown({layer.name: 0 for layer in graph.layers})):
            stage = sum(i >= c for c in cuts)
            per_stage[stage] += row.intra_comm_s + row.edge_comm_s - float(model.gradient_comm_s[row.name][0])
    for s, report in enumerate(step.plan.stages):
        mine = [t for t in step.transfers if t.stage == s]
        group_kinds = ("tensor", "sequence")
        per_mb = sum(t.seconds for t in mine if t.kind in group_kinds and not t.what.endswith("weight gradient"))
        assert per_mb == pytest.approx(per_stage[s], rel=1e-9, abs=1e-15)
        if par.zero < 3:
            once = sum(t.seconds for t in mine if t.kind in ("data", "ZeRO") or t.what.endswith("weight gradient"))
            # ZeRO 1 and 2 run a reduce-scatter and an all-gather in the time of the all-reduce.
            assert once == pytest.approx(report.reduce_s, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("name", wt.STEPS)
def test_every_step_has_its_figures_and_words(name):
    step = wt.walk_step(name)
    holds = wt.holdings_figure(step)
    bars = {tr.name: tr for tr in holds.data if tr.type == "bar"}
    assert bars["weights"].marker.color == MEMORY_COLORS["weights"]
    assert list(bars["weights"].y) == [step.stage_of(n).weights_bytes / wt.MB for n in range(8)]
    traffic = wt.traffic_figure(step)
    assert traffic.data, "every step sends something"
    assert all(tr.marker.color == PARALLELISM_COLORS[tr.name] for tr in traffic.data)
    assert sum(sum(tr.x) for tr in traffic.data) == pytest.approx(sum(t.step_bytes for t in step.transfers) / wt.MB)
    story = " ".join(wt.step_story(step))
    assert wt.fmt_mb(step.plan.stages[0].weights_bytes) in story
    assert len(wt.transfer_rows(step)) == len(step.transfers)


@pytest.mark.parametrize("name", wt.STEPS)
def test_the_weight_table_adds_up_to_what_a_gpu_holds(name):
    step = wt.walk_step(name)
    rows = wt.weight_rows(step)
    assert len(rows) == 3 * (BLOCKS + 1) + 3  # embed, head, ff1 and ff2 per block; scale and shift per LayerNorm
    for s, report in enumerate(step.plan.stages):
        mine = [r for r in rows if r.get("stage", 0) == s]
        elements = 0.0
        for r in mine:
            share = 1.0 if r["GPU's share"] == "all" else 1 / int(r["GPU's share"].split("/")[1])
            elements += share * math.prod(int(n) for n in r["shape"].split(" × "))
        assert elements * BPE == pytest.approx(report.weights_bytes)


def test_data_and_tensor_parallelism_take_the_explorers_colours():
    from ui.palette import KIND_COLORS

    assert PARALLELISM_COLORS["data"] == KIND_COLORS["data"]
    assert PARALLELISM_COLORS["tensor"] == KIND_COLORS["tensor"]
    assert len(set(PARALLELISM_COLORS.values())) == len(PARALLELISM_COLORS)
    assert not set(PARALLELISM_COLORS.values()) & set(MEMORY_COLORS.values()), "both are drawn side by side"


# -- the app ------------------------------------------------------------------------------------------




def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_the_learn_page_walks_through_every_step():
    at = new_app()
    at.switch_page("pages/learn.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key="wt_step").value == "Data parallelism"
    for name in wt.STEPS:
        at.radio(key="wt_step").set_value(name).run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.error, [e.value for e in at.error]
        assert charts(at, "wt_holdings") and charts(at, "wt_traffic"), name
        weights = [d for d in at.dataframe if "GPU's share" in d.value.columns]
        assert len(weights) == 1 and len(weights[0].value) == len(wt.weight_rows(wt.walk_step(name, 3)))
        shown = metrics(at)
        step = wt.walk_step(name, 3)
        assert shown["Step time"], name
        assert any(wt.fmt_mb(step.stage_of(0).weights_bytes) in m.value for m in at.markdown), name
        if name == "Data parallelism":
            assert shown["Sent over NVLink per GPU"] == wt.fmt_mb(ring(GPUS) * P * BPE)
            assert shown["Sent over the network per GPU"] == wt.fmt_mb(ring(NODES) * P * BPE / GPUS)
        if name == "Pipeline parallelism":
            assert shown["Sent over the network per GPU"] == wt.fmt_mb(8 * ACTIVATION / GPUS)
    for zero in wt.ZERO_STAGES:
        at.radio(key="wt_zero").set_value(zero).run()
        assert not at.exception, [e.value for e in at.exception]
        state = wt.walk_step("ZeRO", zero).plan.stages[0]
        assert metrics(at)["Memory per GPU"] == wt.fmt_mb(state.memory_bytes)
        assert charts(at, "wt_holdings") and charts(at, "wt_traffic")


def tour_open(at: AppTest) -> bool:
    return any(b.key == "tour_dismiss" for b in at.button)


def test_the_tour_shows_on_the_first_visit_and_comes_back_from_the_sidebar():
    at = new_app()
    assert tour_open(at)
    assert any("Welcome" in m.value for m in at.markdown)
    at.button(key="tour_dismiss").click().run()
    assert not at.exception
    assert not tour_open(at)
    # Remembered across pages and reruns of the session.
    at.switch_page("pages/compare.py").run()
    assert not at.exception and not tour_open(at)
    at.run()
    assert not tour_open(at)
    at.sidebar.button(key="tour_show").click().run()
    assert not at.exception
    assert tour_open(at)


def test_the_walk_through_draws_only_in_palette_colours():
    import inspect
    import re

    assert not re.findall(r"#[0-9a-fA-F]{3,6}\b", inspect.getsource(wt))
