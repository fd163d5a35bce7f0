"""The Training page plans an uploaded Hugging Face config.json in 3-D, as ``pase solve config.json`` does, and
refuses what it cannot plan in one line."""

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
YOUR_MODEL = "your model (Hugging Face config.json)"  # pages/training.py's choice
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64,
           "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
           "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 64}


def page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("pages/training.py").run()
    at.selectbox(key="tr_model").set_value(YOUR_MODEL).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader(key="tr_hf_config").upload(name, data, "application/json").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown(element) -> str:
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", element.value)


def test_the_page_asks_for_a_config_before_planning():
    at = page()
    assert any("config.json" in i.value for i in at.info), [i.value for i in at.info]
    assert "tr_search" not in [b.key for b in at.button]
    assert not at.error


def test_an_uploaded_config_is_searched_as_the_cli_searches_it():
    at = upload(page(), "config.json", TINY.read_bytes())
    assert not at.error, [e.value for e in at.error]
    assert at.number_input(key="tr_batch_llama").value == 512  # the CLI's default global batch for a config
    at.number_input(key="tr_devices").set_value(8).run()
    at.number_input(key="tr_batch_llama").set_value(8).run()
    at.button(key="tr_search").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    calibrated = at.radio(key="tr_step_model").value == "calibrated"  # the page's step-time model (ui.stepmodel)
    expected = search_training(hf_batch_builder(TINY), preset("dgx-a100", 8, calibrated=calibrated), 8).best
    step = next(m for m in at.metric if m.label == "Step time")
    assert step.value == fmt_time(expected.step_time_s), (step.value, expected.label)
    assert any("llama" in shown(m) for m in at.markdown)


def test_two_uploads_of_one_name_are_planned_apart():
    first = uploaded_config(TINY.read_bytes(), "config.json")
    wider = json.loads(TINY.read_text()) | {"hidden_size": 512, "intermediate_size": 1376}
    second = uploaded_config(json.dumps(wider).encode(), "config.json")
    assert first.name == second.name and first.digest != second.digest
    assert second.build(1).parameter_count > first.build(1).parameter_count


@pytest.mark.parametrize("name,data,message", [
    ("example-graph.json", (ROOT / "docs" / "example-graph.json").read_bytes(), "is a pase graph file"),
    ("mixtral.json", json.dumps(MIXTRAL).encode(), "mixture of experts"),
    ("broken.json", b"{not json", "not valid JSON"),
    ("bert-ish.json", json.dumps({"model_type": "nosuchfamily"}).encode(), "nosuchfamily"),
])
def test_what_cannot_be_planned_is_refused_in_one_line(name, data, message):
    with pytest.raises(FormatError, match=message):
        uploaded_config(data, name)
    at = upload(page(), name, data)
    assert len(at.error) == 1 and message in shown(at.error[0]) and shown(at.error[0]).startswith(
        f"Cannot plan {name}"), [e.value for e in at.error]
    assert "\n" not in shown(at.error[0])
