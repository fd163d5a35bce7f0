"""A Hugging Face config.json uploaded in the sidebar is planned in 3-D on every page (the Training page, What-if,
Compare), as ``pase solve config.json`` plans it, and what cannot be planned is refused in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pase.errors import FormatError
from pase.hardware.cluster import preset
from pase.io.hf_config import hf_batch_builder
from pase.search.stages import search_training
from ui.fmt import fmt_time
from ui.hfupload import uploaded_config

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TINY = ROOT / "tests" / "data" / "hf" / "tiny-llama" / "config.json"
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64,
           "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
           "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 64}


def app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.sidebar.radio(key="in_graph_kind").set_value("Upload").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def upload(at: AppTest, name: str, data: bytes, page: str = "pages/training.py") -> AppTest:
    at.sidebar.file_uploader(key="in_upload").upload(name, data, "application/json").run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown(element) -> str:
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", element.value)


def test_the_sidebar_asks_for_a_file_before_planning():
    at = app()
    at.switch_page("pages/training.py").run()
    assert any("config.json" in shown(i) for i in at.info), [i.value for i in at.info]
    assert "tr_search" not in [b.key for b in at.button]
    assert not at.error


def test_an_uploaded_config_is_searched_as_the_cli_searches_it():
    at = upload(app(), "config.json", TINY.read_bytes())
    assert not at.error, [e.value for e in at.error]
    assert at.sidebar.number_input(key="in_config_batch").value == 512  # the CLI's default global batch for a config
    at.sidebar.number_input(key="in_devices").set_value(8).run()
    at.sidebar.number_input(key="in_config_batch").set_value(8).run()
    at.button(key="tr_search").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    calibrated = at.sidebar.radio(key="in_model").value == "calibrated"  # the sidebar's step-time model
    # The page's default framework is "any" (pase solve --framework any): every configuration cut between blocks.
    expected = search_training(hf_batch_builder(TINY), preset("dgx-h100", 8, calibrated=calibrated), 8,
                               framework="any").best
    step = next(m for m in at.metric if m.label == "Step time")
    assert step.value == fmt_time(expected.step_time_s), (step.value, expected.label)
    assert any("llama" in shown(m) for m in at.markdown)
    # The same problem on the Explorer: the 3-D search (cached), not the per-layer one.
    at.switch_page("pages/explorer.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("joint 3-D search" in shown(c) for c in at.caption), [c.value for c in at.caption]


def test_two_uploads_of_one_name_are_planned_apart():
    first = uploaded_config(TINY.read_bytes(), "config.json")
    wider = json.loads(TINY.read_text()) | {"hidden_size": 512, "intermediate_size": 1376}
    second = uploaded_config(json.dumps(wider).encode(), "config.json")
    assert first.name == second.name and first.digest != second.digest
    assert second.build(1).parameter_count > first.build(1).parameter_count


def test_a_mixture_of_experts_config_is_planned_in_3d_with_its_experts_view():
    """An uploaded Mixtral config.json: the Training page searches it in 3-D (expert parallelism among the knobs),
    as `pase solve config.json` does, and shows the experts' layout."""
    at = upload(app(), "mixtral.json", json.dumps(MIXTRAL).encode())
    assert not at.error, [e.value for e in at.error]
    at.sidebar.number_input(key="in_devices").set_value(8).run()
    at.sidebar.number_input(key="in_config_batch").set_value(8).run()
    at.button(key="tr_search").click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    calibrated = at.sidebar.radio(key="in_model").value == "calibrated"
    expected = search_training(hf_batch_builder(json.dumps(MIXTRAL).encode()),
                               preset("dgx-h100", 8, calibrated=calibrated), 8, framework="any").best
    step = next(m for m in at.metric if m.label == "Step time")
    assert step.value == fmt_time(expected.step_time_s), (step.value, expected.label)
    assert any(h.value == "Experts" for h in at.subheader), [h.value for h in at.subheader]  # ui/moe.py's view


@pytest.mark.parametrize("name,data,message", [
    ("example-graph.json", (ROOT / "docs" / "example-graph.json").read_bytes(), "is a pase graph file"),
])
def test_what_the_3d_search_does_not_plan_is_planned_per_layer(name, data, message):
    """A pase graph is the sidebar's problem too, planned per layer: the Training page says so, no error."""
    with pytest.raises(FormatError, match=message):
        uploaded_config(data, name)
    at = upload(app(), name, data)
    assert not at.error, [e.value for e in at.error]
    assert any("not a language model" in i.value for i in at.info), [i.value for i in at.info]


@pytest.mark.parametrize("name,data,message", [
    ("broken.json", b"{not json", "not valid JSON"),
    ("bert-ish.json", json.dumps({"model_type": "nosuchfamily"}).encode(), "nosuchfamily"),
])
def test_what_cannot_be_read_is_refused_in_one_line(name, data, message):
    at = upload(app(), name, data)
    assert len(at.error) == 1 and message in shown(at.error[0]) and shown(at.error[0]).startswith(
        "Cannot use the uploaded file"), [e.value for e in at.error]
    assert "\n" not in shown(at.error[0])
