"""The explorer's 3-D path under AppTest: a large language model is planned by the joint 3-D search, as
``pase solve`` plans it, and the graph shows one microbatch of the best plan on one t x c group."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pase.hardware.cluster import preset
from pase.models import batch_builder
from pase.search.stages import search_training

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT_S = 180


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def llama_app(devices: int = 8, batch: int | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.run()
    no_exception(at)
    at.selectbox(key="in_sample").set_value("llama3-8b").run()
    at.number_input(key="in_devices").set_value(devices).run()
    if batch is not None:
        at.number_input(key="in_llama3-8b_batch").set_value(batch).run()
    no_exception(at)
    return at


def graph_chart(at: AppTest):
    return [c for c in at.get("plotly_chart") if c.proto.id.endswith("graph_chart")]


def shown(text: str) -> str:
    """Markdown as the reader sees it: the app escapes user text with backslashes."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)


def test_a_language_model_is_solved_in_3d_and_its_group_graph_drawn():
    at = llama_app(devices=8, batch=64)
    # 40 GB per device: the fastest plan that fits is tensor parallel (calibrated: t2 with ZeRO-3's gathers hidden
    # behind the compute).
    at.sidebar.number_input(key="in_memory").set_value(40.0).run()
    texts = " ".join(c.value for c in at.caption)
    assert "global batch" in texts and "64 samples per step" in texts, texts
    at.button(key="solve").click().run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    cluster = at.session_state["_problem"].cluster
    expected = search_training(batch_builder("llama3-8b"), cluster, 64).best
    par = expected.parallelism
    assert par.tensor > 1, expected.label
    success = shown(" ".join(s.value for s in at.success))
    assert expected.label in success, success
    metrics = {m.label: m.value for m in at.metric}
    assert "Estimated step time" in metrics and "MFU (of peak)" in metrics, metrics
    assert metrics["Memory per device"] == f"{expected.memory_per_device_bytes / 1e9:.3g} GB"
    captions = shown(" ".join(c.value for c in at.caption))
    assert f"Tensor t = {par.tensor}" in captions and f"pipeline p = {par.pipeline}" in captions, captions
    assert f"data d = {par.data}" in captions and f"microbatch {par.microbatch_size} x" in captions
    assert f"ZeRO stage {par.zero}" in captions and f"recomputation {par.recompute}" in captions
    assert "one microbatch" in captions and "one t x c group" in captions, captions
    # The way to the schedule: the Training page plans the same problem, a custom cluster (the memory edited) too.
    assert any(link.proto.page == "training" for link in at.get("page_link"))
    # The strategy graph of one microbatch on the t x c group, coloured by each layer's split.
    charts = graph_chart(at)
    assert len(charts) == 1
    fig = json.loads(charts[0].proto.spec)
    kinds = {tr.get("name") for tr in fig["data"] if "markers" in (tr.get("mode") or "") and tr.get("x")}
    assert kinds & {"data", "tensor", "hybrid", "mixed"}, kinds
    assert "unsolved" not in kinds, kinds
    # Solving again is instant: the result is cached.
    at.button(key="solve").click().run()
    no_exception(at)
    assert expected.label in shown(" ".join(s.value for s in at.success))


def test_the_training_page_draws_the_same_problem():
    at = llama_app(devices=8, batch=64)
    at.radio(key="in_model").set_value("peak").run()
    at.button(key="solve").click().run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert any(link.proto.page == "training" for link in at.get("page_link"))
    at.switch_page("pages/training.py").run()  # as the link does
    no_exception(at)
    # The Training page plans the sidebar's problem (one problem, one planner): the same model, batch, devices and
    # step-time model, whose search the Explorer cached.
    assert [t.value for t in at.title] == ["Training plans"], [t.value for t in at.title]
    assert at.radio(key="tr_mode").value == "Search the best plan"
    at.button(key="tr_search").click().run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert any(m.value.startswith("**llama3\\-8b**, global batch 64") for m in at.markdown), \
        [m.value for m in at.markdown]
    assert at.sidebar.number_input(key="in_devices").value == 8
    assert at.sidebar.radio(key="in_model").value == "peak"
    assert any("Step-time model: **peak rates**" in c.value for c in at.caption)


def test_a_language_model_that_cannot_fit_shows_an_error_not_a_traceback():
    at = llama_app(devices=8)
    # 1 GB per device: no 3-D configuration of Llama 3 8B fits.
    at.sidebar.number_input(key="in_memory").set_value(1.0).run()
    no_exception(at)
    at.button(key="solve").click().run()
    no_exception(at)
    errors = [e.value for e in at.error]
    assert errors and re.search(r"no configuration .* fits", errors[0]), errors
    assert not graph_chart(at) or "strategy" not in str(graph_chart(at)[0].proto.id)


def test_other_models_keep_the_per_layer_search():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.run()
    at.selectbox(key="in_sample").set_value("alexnet").run()
    at.number_input(key="in_devices").set_value(4).run()
    at.button(key="solve").click().run()
    no_exception(at)
    assert not at.success
    assert "Speedup over data parallelism" in [m.label for m in at.metric]
    assert "global batch" not in " ".join(c.value for c in at.caption)


@pytest.mark.parametrize("model, devices, memory_gb, batch", [
    ("llama3-8b", 8, 40, 64), ("llama3-8b", 16, None, 2048), ("megatron-1.7b", 16, None, 512),
    ("megatron-1.7b", 8, 20, 96)])
def test_the_search_shared_out_over_workers_finds_what_one_search_finds(model, devices, memory_gb, batch):
    """ui.state.solve_training deals the microbatch sizes out to parallel workers; merged, the shares give
    the one search's best plan and runners-up."""
    import time

    from pase.errors import PaseError
    from ui.graphview import training_search_with_group_plan
    from ui.state import merge_training, training_shares

    cluster = preset("dgx-h100" if model.startswith("llama") else "dgx-a100", devices, calibrated=False)
    if memory_gb is not None:
        cluster = dataclasses.replace(cluster, memory_bytes=memory_gb * 1e9)
    one, one_plan = training_search_with_group_plan(batch_builder(model), cluster, batch)
    for workers in (2, 3, 4):
        shares = training_shares(batch, workers)
        assert len(shares) == min(workers, len([b for b in range(1, 9) if batch % b == 0]))
        assert sorted(b for share in shares for b in share) == [b for b in range(1, 9) if batch % b == 0]
        parts = []
        for sizes in shares:
            try:
                parts.append(training_search_with_group_plan(batch_builder(model), cluster, batch, None, sizes))
            except PaseError as exc:
                parts.append(exc)
        merged, plan = merge_training(parts, time.perf_counter())
        assert merged.best == one.best
        assert [r.label for r in merged.runners_up] == [r.label for r in one.runners_up]
        assert merged.gap_bound_s == pytest.approx(one.gap_bound_s, rel=1e-12, abs=1e-15)
        assert merged.configurations >= one.configurations
        assert plan.step_time_s == one_plan.step_time_s and plan.strategy == one_plan.strategy


def test_when_no_share_fits_the_error_gives_the_least_memory_of_all():
    import time

    from pase.model.memory import InsufficientMemoryError
    from ui.graphview import training_search_with_group_plan
    from ui.state import merge_training, training_shares

    cluster = dataclasses.replace(preset("dgx-h100", 8, calibrated=False), memory_bytes=16e9)
    with pytest.raises(InsufficientMemoryError) as whole:
        training_search_with_group_plan(batch_builder("llama3-8b"), cluster, 64)
    parts = []
    for sizes in training_shares(64, 2):
        try:
            training_search_with_group_plan(batch_builder("llama3-8b"), cluster, 64, None, sizes)
        except InsufficientMemoryError as exc:
            parts.append(exc)
    with pytest.raises(InsufficientMemoryError) as merged:
        merge_training(parts, time.perf_counter())
    assert merged.value.least_bytes == whole.value.least_bytes
    assert str(merged.value) == str(whole.value)


def test_free_cores_is_at_least_one_and_at_most_the_machines():
    import os

    from ui.state import free_cores

    assert 1 <= free_cores() <= (os.cpu_count() or 1)
