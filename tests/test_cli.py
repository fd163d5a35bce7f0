"""The pase command: solve, evaluate, show, sweep; errors exit 2 with one line."""

import json
import re
import subprocess
import sys

import pytest

import pase
from pase.cli import main
from pase.models import LANGUAGE_MODELS, SAMPLES


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


def test_sweep_batches_records_every_batch(capsys):
    code, out, _ = run(capsys, "sweep", "alexnet", "--devices", "2", "4", "--batches", "32", "64", "--json")
    assert code == 0
    records = json.loads(out)
    assert {(r["batch"], r["devices"]) for r in records} == {(32, 2), (32, 4), (64, 2), (64, 4)}
    # Each batch's numbers are those of a plain sweep of the model at that batch.
    code, out, _ = run(capsys, "sweep", "alexnet", "--devices", "2", "4", "--batch", "64", "--json")
    alone = json.loads(out)
    assert [{k: v for k, v in r.items() if k != "batch"} for r in records if r["batch"] == 64] == alone


def test_sweep_batches_text_has_a_batch_column(capsys):
    code, out, err = run(capsys, "sweep", "rnnlm", "--devices", "2", "--batches", "16", "32")
    assert code == 0
    assert out.split()[0] == "batch" and "solved 2/2" in err


# -- pase evaluate -----------------------------------------------------------------------------------


def solved_plan(capsys, tmp_path, *argv) -> tuple[dict, str]:
    """``pase solve --json`` with ``argv``, saved to a file: (its JSON, the file's path)."""
    code, out, _ = run(capsys, "solve", *argv, "--json")
    assert code == 0
    path = tmp_path / "plan.json"
    path.write_text(out)
    return json.loads(out), str(path)


@pytest.mark.parametrize("argv", [
    ["alexnet", "--devices", "8"],
    ["transformer", "--devices", "16", "--cluster", "dgx-a100", "--peak-rates", "--batch", "16"],
    ["rnnlm", "--devices", "8", "--cost-model", "paper", "--bandwidth", "4"],
])
def test_a_solved_plan_evaluated_on_the_same_cluster_reproduces_its_step_time(capsys, tmp_path, argv):
    solved, path = solved_plan(capsys, tmp_path, *argv)
    code, out, err = run(capsys, "evaluate", *argv, "--plan", path, "--json")
    assert code == 0, err
    evaluated = json.loads(out)
    assert evaluated["step_time_s"] == pytest.approx(solved["step_time_s"], rel=1e-9)
    assert [(l["name"], l["config"]) for l in evaluated["layers"]] == [(l["name"], l["config"]) for l in solved["layers"]]
    assert evaluated["label"] == "plan.json" and evaluated["devices"] == solved["devices"]


def test_a_plan_recosted_on_other_hardware_matches_pase_evaluate(capsys, tmp_path):
    solved, path = solved_plan(capsys, tmp_path, "alexnet", "--devices", "8")
    code, out, _ = run(capsys, "evaluate", "alexnet", "--devices", "16", "--cluster", "dgx-a100", "--peak-rates", "--plan", path,
                       "--json")
    assert code == 0
    strategy = {l["name"]: tuple(l["config"]) for l in solved["layers"]}
    expected = pase.evaluate(pase.sample("alexnet"), pase.preset("dgx-a100", devices=16, calibrated=False), strategy)
    assert json.loads(out)["step_time_s"] == pytest.approx(expected.step_time_s, rel=1e-12)


def test_evaluate_prints_the_solve_table_and_says_which_layers_are_data_parallel(capsys, tmp_path):
    path = tmp_path / "mine.json"
    path.write_text('{"fc6": [1, 8, 1]}')
    code, out, _ = run(capsys, "evaluate", "alexnet", "--devices", "8", "--plan", str(path))
    assert code == 0
    assert out.split()[:6] == ["layer", "op", "dims", "configuration", "parallelism", "time"]
    assert "fc6" in out and "(1, 8, 1)" in out and "estimated step time" in out
    assert "1 of 13 layers configured by mine.json; the other 12 data parallel" in out


@pytest.mark.parametrize(
    "content,match",
    [
        ("{not json", "bad.json: not valid JSON"),
        ('{"fc6": [1, 2.5, 1]}', "bad.json: layer 'fc6': split factor 2.5"),
        ('{"fc6": [1, 8, 1], "fc6": [8, 1, 1]}', "bad.json: key 'fc6' appears twice"),
        ('{"nosuchlayer": [1, 8, 1]}', "bad.json: .*nosuchlayer"),
        ('{"fc6": [1, 3, 1]}', "bad.json: layer 'fc6': n = 4096 cannot be split 3 ways"),
        ('{"fc6": [1, 8]}', "bad.json: layer 'fc6'.* has 2 factors"),
        ("[" * 100_000, "bad.json: not valid JSON: nested too deeply"),
    ],
)
def test_a_bad_plan_file_exits_2_with_one_line_naming_the_problem(capsys, tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, out, err = run(capsys, "evaluate", "alexnet", "--devices", "8", "--plan", str(path))
    assert code == 2 and not out
    assert re.search(match, err) and err.count("\n") == 1 and "Traceback" not in err


def test_a_graph_file_given_as_the_plan_says_so(capsys):
    code, _, err = run(capsys, "evaluate", "alexnet", "--devices", "8", "--plan", "sample_graphs/alexnet.json")
    assert code == 2 and "that is a graph file" in err


def test_a_bad_plan_file_from_the_shell_gives_no_traceback(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"fc6": [1, NaN, 1]}')
    proc = subprocess.run([sys.executable, "-m", "pase", "evaluate", "alexnet", "--devices", "8", "--plan", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("pase: error: bad.json: layer 'fc6': split factor nan")
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "argv,match",
    [
        (["evaluate", "alexnet", "--devices", "8", "--plan", "no/such/plan.json"], "cannot read"),
        (["sweep", "sample_graphs/alexnet.json", "--devices", "2", "--batches", "32"], "--batches applies to sample"),
        (["sweep", "alexnet", "--devices", "2", "--batches", "0", "32"],
         "argument --batches: expected a batch size: a whole number from 1 to 1048576, got '0'"),
        (["sweep", "alexnet", "--devices", "2", "--batch", "8", "--batches", "32"], "not both"),
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
# The Megatron-LM models share one builder (pase.models.megatron); the smallest stands for them here.
@pytest.mark.parametrize("name", sorted(set(SAMPLES) - set(LANGUAGE_MODELS) | {"megatron-1.7b"}))
def test_every_sample_solves_at_p8_from_the_cli(capsys, name):
    code, out, _ = run(capsys, "solve", name, "--devices", "8", "--search", "layers", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["devices"] == 8 and d["step_time_s"] > 0 and len(d["layers"]) == len(SAMPLES[name]().layers)


def test_solve_reports_throughput_and_mfu_in_text_and_strict_json(capsys):
    code, out, _ = run(capsys, "solve", "gpt", "-p", "4", "--json")
    assert code == 0
    d = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    for key in ("samples_per_s", "tokens_per_s", "model_flops_per_step", "model_flops_per_device_per_s", "mfu"):
        assert isinstance(d[key], float) and d[key] > 0
    assert d["tokens_per_s"] == pytest.approx(d["samples_per_s"] * 1024, rel=1e-12)
    assert 0 < d["mfu"] <= 1
    code, out, _ = run(capsys, "solve", "gpt", "-p", "4")
    assert code == 0 and re.search(r"samples/s, [\d,]+ tokens/s, model FLOPs per step .*MFU [\d.]+% of peak", out)
    code, out, _ = run(capsys, "solve", "alexnet", "-p", "2", "--json")
    assert json.loads(out)["tokens_per_s"] is None


def test_sweep_clusters_puts_gpu_types_side_by_side(capsys):
    code, out, _ = run(capsys, "sweep", "alexnet", "--devices", "2", "4", "--clusters", "dgx-a100", "dgx-h100",
                       "--json")
    assert code == 0
    records = json.loads(out)
    assert {(r["cluster"], r["devices"]) for r in records} == {(c, p) for c in ("dgx-a100", "dgx-h100") for p in (2, 4)}
    peak = {r["cluster"]: r["peak_flops"] for r in records}
    assert peak == {"dgx-a100": 312e12, "dgx-h100": 989e12}, "each GPU type keeps its preset's figures"
    code, out, _ = run(capsys, "sweep", "alexnet", "--devices", "2", "--clusters", "dgx-a100", "dgx-h100")
    assert code == 0 and out.split()[:2] == ["GPU", "type"]


def test_sweep_per_device_batch_grows_the_global_batch_with_the_devices(capsys):
    code, out, _ = run(capsys, "sweep", "alexnet", "--devices", "2", "4", "8", "--batch", "16", "--per-device-batch",
                       "--json")
    assert code == 0
    records = json.loads(out)
    assert {(r["devices"], r["batch"]) for r in records} == {(2, 32), (4, 64), (8, 128)}
    assert all(r["batch_mode"] == "per device" and r["per_device_batch"] == 16 for r in records)
    assert all(r["global_batch"] == r["batch"] and r["batch_per_device"] == 16 for r in records)


@pytest.mark.parametrize("argv, message", [
    (["sweep", "alexnet", "--devices", "2", "--per-device-batch"], "needs the per-device batch"),
    (["sweep", "alexnet", "--devices", "2", "--clusters", "dgx-a100", "dgx-h100", "--tflops", "100"],
     "drop the options"),
])
def test_sweep_refuses_a_per_device_batch_or_gpu_types_it_cannot_honour(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err
