"""A misspelt model or cluster preset name gets one line naming it and the closest known names: in the library,
the CLI and the app (a link's ``?model=...&cluster=...``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pase.cli import main
from pase.errors import ClusterError, GraphError, did_you_mean
from pase.hardware.cluster import PRESETS, preset
from pase.limits import MAX_DEVICES
from pase.models import SAMPLES, sample
from ui.links import Link, parse_link

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- the helper ------------------------------------------------------------------------------------


def test_the_closest_names_come_first_ignoring_case():
    assert did_you_mean("lama3-8b", SAMPLES).startswith("did you mean 'llama3-8b'")
    assert did_you_mean("ALEXNETT", SAMPLES) == "did you mean 'alexnet'?"
    assert did_you_mean("dgx-h10", PRESETS).startswith("did you mean 'dgx-h100'")


def test_several_names_read_as_a_list_and_at_most_the_limit():
    hint = did_you_mean("lama3-8b", ["llama3-8b", "llama3-70b", "llama3-405b", "llama3-8c"], limit=3)
    assert hint.count("'") == 6 and ", " in hint and " or " in hint and hint.endswith("?")
    assert did_you_mean("x", ["x1", "x2"], limit=1).count("'") == 2


def test_nothing_close_or_no_string_gives_no_hint():
    assert did_you_mean("zzzzzz", SAMPLES) == ""
    assert did_you_mean(3, ["3", "4"]) == ""
    assert did_you_mean("anything", []) == ""


# -- the library -----------------------------------------------------------------------------------


def test_sample_names_the_misspelt_model_and_the_closest():
    with pytest.raises(GraphError, match=r"unknown sample graph 'lama3-8b' \(did you mean 'llama3-8b'.*\); known "):
        sample("lama3-8b")
    with pytest.raises(GraphError, match="^unknown sample graph 'zzzzzz'; known samples: alexnet"):
        sample("zzzzzz")


def test_preset_names_the_misspelt_preset_and_the_closest():
    with pytest.raises(ClusterError, match=r"unknown cluster preset 'dgx-h10' \(did you mean 'dgx-h100'"):
        preset("dgx-h10")


# -- the CLI ---------------------------------------------------------------------------------------


def test_a_misspelt_model_is_one_line_with_the_closest_samples(capsys):
    code, out, err = run(capsys, "solve", "lama3-8b", "-p", "8")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("pase: error: 'lama3-8b' is neither a sample nor an existing file; did you mean "
                          "'llama3-8b'")
    assert "alexnet" not in err  # the closest names, not the whole list


def test_an_unknown_model_with_nothing_close_still_lists_the_samples(capsys):
    code, _, err = run(capsys, "solve", "zzzzzz", "-p", "8")
    assert code == 2 and err.count("\n") == 1 and "alexnet" in err and "did you mean" not in err


@pytest.mark.parametrize("argv", [["solve", "llama3-8b", "-p", "8", "--cluster", "dgx-h10"],
                                  ["sweep", "alexnet", "-p", "2", "--cluster", "dgx-h10"]])
def test_a_misspelt_cluster_preset_is_one_line_with_the_closest(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "argument --cluster: invalid choice: 'dgx-h10'; did you mean 'dgx-h100'" in err
    assert "(choose from 'dgx-a100'" in err  # argparse's list is kept, after the hint


def test_a_misspelt_command_is_told_the_closest(capsys):
    code, _, err = run(capsys, "solv", "alexnet", "-p", "2")
    assert code == 2 and "invalid choice: 'solv'; did you mean 'solve'" in err


def test_number_choices_get_no_hint(capsys):
    code, _, err = run(capsys, "solve", "alexnet", "-p", "2", "--bytes-per-element", "3")
    assert code == 2 and "did you mean" not in err
    assert "--bytes-per-element: invalid choice: 3 (choose from 1, 2, 4, 8)" in err


# -- the app: a link's model, cluster and devices ---------------------------------------------------


def test_parse_link_keeps_known_names_and_tells_each_unknown_one():
    assert parse_link({"model": "llama3-8b", "cluster": "dgx-a100", "devices": "64"}) == Link(
        "llama3-8b", "dgx-a100", 64)
    assert parse_link({}) == Link()
    bad = parse_link({"model": "lama3-8b", "cluster": "dgx-h10", "devices": "lots"})
    assert (bad.model, bad.preset, bad.devices) == (None, None, None) and len(bad.errors) == 3
    assert "lama3" in bad.errors[0] and "did you mean" in bad.errors[0] and "llama3" in bad.errors[0]
    assert "dgx" in bad.errors[1] and "h100" in bad.errors[1]
    assert f"from 1 to {MAX_DEVICES:,}" in bad.errors[2]
    assert parse_link({"devices": str(MAX_DEVICES + 1)}).errors
    assert parse_link({"model": ["alexnet", "gpt"]}).model == "gpt"  # a repeated key: its last value


def test_a_hostile_link_is_quoted_short_and_escaped():
    line = parse_link({"model": "![x](http://evil)" + "a" * 500}).errors[0]
    assert len(line) < 200 and "![" not in line and "](" not in line


def _app_with(**params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_link_opens_the_app_on_its_problem():
    at = _app_with(model="llama3-8b", cluster="dgx-a100", devices="64")
    assert at.selectbox(key="in_sample").value == "llama3-8b"
    assert at.selectbox(key="in_preset").value == "dgx-a100"
    assert at.number_input(key="in_devices").value == 64
    assert at.number_input(key="in_memory").value == pytest.approx(PRESETS["dgx-a100"].memory_bytes / 1e9)
    assert not at.sidebar.error and not at.warning


def test_a_misspelt_link_says_so_in_the_sidebar_and_keeps_the_defaults():
    from ui.sidebar import DEFAULT_PRESET, DEFAULT_SAMPLE

    at = _app_with(model="lama3-8b", cluster="dgx-h10")
    errors = [e.value.replace("\\", "") for e in at.sidebar.error]
    assert len(errors) == 2, errors
    assert "Unknown model 'lama3-8b'" in errors[0] and "did you mean 'llama3-8b'" in errors[0]
    assert "Unknown cluster preset 'dgx-h10'" in errors[1] and "'dgx-h100'" in errors[1]
    assert at.selectbox(key="in_sample").value == DEFAULT_SAMPLE
    assert at.selectbox(key="in_preset").value == DEFAULT_PRESET
    assert at.button(key="solve")  # the page still works on the defaults
