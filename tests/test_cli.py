"""The pase command: solve, show, sweep; errors exit 2 with one line."""

import json
import subprocess
import sys

import pytest

from pase.cli import main
from pase.models import SAMPLES


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_alexnet_p32_shows_the_papers_table_ii_pattern(capsys):
    code, out, _ = run(capsys, "solve", "alexnet", "--devices", "32", "--batch", "128",
                       "--tflops", "10", "--bandwidth", "16", "--cost-model", "paper", "--json")
    assert code == 0
    d = json.loads(out)
    assert {"model", "devices", "cost", "step_time_s", "search_time_s", "layers", "baselines"} <= set(d)
    layers = {l["name"]: l for l in d["layers"]}
    assert set(layers["fc6"]) >= {"name", "op", "dims", "sizes", "config", "flops", "compute_s", "intra_comm_s", "edge_comm_s"}
    assert layers["fc6"]["dims"] == "bnc"
    fcs = [layers[n]["config"] for n in ("fc6", "fc7", "fc8")]
    # The paper's Table II: no batch split; in- and out-channel splits alternate, so nothing
    # moves between the layers.
    assert fcs == [[1, 4, 8], [1, 8, 4], [1, 4, 8]]
    assert layers["fc7"]["edge_comm_s"] == 0 and layers["fc8"]["edge_comm_s"] == 0
    assert layers["conv1"]["config"][0] == 32 and layers["conv2"]["config"][0] == 32
    for name, b in d["baselines"].items():
        assert b["speedup"] >= 1 - 1e-9, name
        assert b["speedup"] == pytest.approx(b["step_time_s"] / d["step_time_s"])


def test_solve_text_output_is_a_table_with_totals(capsys):
    code, out, _ = run(capsys, "solve", "rnnlm", "--devices", "8", "--cluster", "paper-2080ti")
    assert code == 0
    assert "configuration" in out and "estimated step time" in out and "vs data parallel" in out


def test_show_lists_layers_and_configuration_counts(capsys):
    code, out, _ = run(capsys, "show", "alexnet", "--devices", "8")
    assert code == 0
    assert "conv1" in out and "configurations" in out and "13 layers" in out


def test_sweep_json_has_every_point(capsys):
    code, out, _ = run(capsys, "sweep", "alexnet", "--devices", "4", "8", "--json")
    assert code == 0
    records = json.loads(out)
    assert {r["devices"] for r in records} == {4, 8}
    assert all(r["speedup_over_dp"] >= 1 - 1e-9 for r in records if r["strategy"] == "PaSE")


@pytest.mark.parametrize(
    "argv,match",
    [
        (["solve", "nosuchmodel", "--devices", "8"], "neither a sample"),
        (["solve", "alexnet", "--devices", "0"], "devices"),
        (["solve", "alexnet", "--devices", "8", "--bandwidth", "0"], "bandwidth"),
        (["solve", "alexnet", "--devices", "8", "--batch", "0"], "batch"),
        (["show", "sample_graphs/alexnet.json", "--devices", "8", "--batch", "4"], "--batch"),
    ],
)
def test_errors_exit_2_with_a_message(capsys, argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert match in err and "Traceback" not in err


def test_python_dash_m_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "pase", "show", "rnnlm", "--devices", "4"],
                         capture_output=True, text=True, check=True).stdout
    assert "lstm" in out.lower()


# Acceptance: every sample loads, validates, round-trips (tests/test_sample_files.py) and solves at p = 8.
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_sample_solves_at_p8_from_the_cli(capsys, name):
    code, out, _ = run(capsys, "solve", name, "--devices", "8", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["devices"] == 8 and d["step_time_s"] > 0 and len(d["layers"]) == len(SAMPLES[name]().layers)
