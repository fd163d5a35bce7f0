"""The sidebar's inputs as a browser that missed a run would draw them: at the value the session holds.

Streamlit sends a keyed widget's session value to the browser only in the run that set it (``set_value``); on
later runs the browser keeps what it has, and a browser that never received that run (a rerun it asked for
first, on a busy server, drops the run's pending messages) draws the widget at the element's own default and
sends that back as the user's input. Before the fix those defaults were the inputs' minimums: a new session
on a server busy with another session's What-if sweep came up with "8 x 1e-06 TFLOP/s, no memory limit".
Here every run's sidebar element is read as such a browser would read it, against the value in the session.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pase.hardware.cluster import PRESETS
from ui.stepmodel import PEAK

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT_S = 120
# The cluster's inputs whose values the sidebar sets from a preset (ui.sidebar._preset_figures), with the
# preset's figure in the input's units.
FIGURES = {"in_tflops": lambda c: c.peak_flops / 1e12, "in_bandwidth": lambda c: c.bandwidth_Bps / 1e9,
           "in_memory": lambda c: (c.memory_bytes or 0) / 1e9, "in_node": lambda c: c.devices_per_node or 0}


def drawn_by_a_fresh_browser(widget):
    """What a browser that mounts ``widget``'s element now, holding no value of its own, shows: the value the
    element sets (``set_value``), else the element's default; as the option's label for a choice."""
    proto = widget.proto
    if widget.type == "number_input":
        return proto.value if proto.set_value else proto.default
    if widget.type in ("selectbox", "radio"):
        return proto.raw_value if proto.set_value else proto.options[proto.default]
    if widget.type == "checkbox":
        return proto.value if proto.set_value else proto.default
    raise AssertionError(f"no reading for {widget.type}")


def session_value(widget):
    """The value the session holds for ``widget``, as the browser shows it (the option's label for a choice)."""
    if widget.type in ("selectbox", "radio"):
        return widget.options[widget.index]
    return widget.value


SIDEBAR = {"in_preset", "in_devices", "in_tflops", "in_memory", "in_bpe", "in_model"}


def keyed_inputs(block) -> list:
    kinds = ("number_input", "selectbox", "radio", "checkbox")
    return [w for kind in kinds for w in block.get(kind) if getattr(w, "key", None)]


def assert_drawn_as_held(at: AppTest, where: str, block=None, keys=SIDEBAR) -> None:
    """Every keyed input of ``block`` (the sidebar), ``keys`` among them, is drawn by a fresh browser as held."""
    assert not at.exception, [e.value for e in at.exception]
    inputs = keyed_inputs(at.sidebar if block is None else block)
    assert keys <= {w.key for w in inputs}, sorted(w.key for w in inputs)
    wrong = {w.key: (drawn_by_a_fresh_browser(w), session_value(w)) for w in inputs
             if drawn_by_a_fresh_browser(w) != session_value(w)}
    assert not wrong, f"{where}: drawn (fresh browser), held (session): {wrong}"


@pytest.fixture()
def app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.run()
    return at


def test_a_new_sessions_second_run_draws_the_presets_figures_not_the_minimums(app):
    """The failing case: the first run's messages never reached the browser, the second run's did."""
    at = app.run()
    assert_drawn_as_held(at, "second run")
    h100 = PRESETS["dgx-h100"]
    assert at.number_input(key="in_tflops").proto.default == pytest.approx(h100.peak_flops / 1e12)
    assert at.number_input(key="in_memory").proto.default == pytest.approx(h100.memory_bytes / 1e9)


def test_a_preset_chosen_then_a_rerun_draws_that_presets_figures(app):
    at = app.selectbox(key="in_preset").set_value("dgx-a100").run()
    at = at.run()  # the run after the preset's callback: no value is set any more, only held
    assert_drawn_as_held(at, "dgx-a100, next run")
    a100 = PRESETS["dgx-a100"]
    for key, figure in FIGURES.items():
        assert at.number_input(key=key).value == pytest.approx(figure(a100)), key


def test_edited_figures_and_choices_are_drawn_as_edited(app):
    at = app.number_input(key="in_tflops").set_value(500.0).run()
    at = at.selectbox(key="in_bpe").set_value(4).run()
    at = at.radio(key="in_model").set_value(PEAK).run()
    at = at.run()
    assert_drawn_as_held(at, "edited, next run")
    assert at.selectbox(key="in_preset").value == "custom"
    assert at.number_input(key="in_tflops").value == 500.0


def test_a_link_to_other_hardware_is_drawn_as_linked():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.query_params.update({"cluster": "dgx-a100", "devices": "32", "model": "llama3-8b"})
    at.run().run()
    assert_drawn_as_held(at, "a link's second run")
    assert at.number_input(key="in_devices").proto.default == 32
    assert at.selectbox(key="in_preset").value == "dgx-a100"


def test_the_training_pages_configuration_is_drawn_as_held():
    """The Training page keeps its inputs in the session too (pages/training.py, kept): tensor t at 8, not 1."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.query_params.update({"model": "megatron-1.7b", "devices": "8"})
    at.run()
    at.switch_page("pages/training.py").run()
    at = at.radio(key="tr_mode").set_value("Evaluate a configuration").run()
    at = at.run()
    assert_drawn_as_held(at, "Training page, Evaluate, next run", block=at.main,
                         keys={"tr_mode", "tr_t", "tr_p", "tr_recompute", "tr_zero", "tr_sp"})
    assert at.number_input(key="tr_t").proto.default == 8
