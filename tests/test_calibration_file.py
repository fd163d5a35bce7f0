"""Calibration files (pase.hardware.calibration), --calibration on the CLI, and pase calibrate's refusals."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pase
from pase.cli import main
from pase.errors import ClusterError
from pase.hardware.calibration import Calibration, load_calibration, save_calibration
from pase.hardware.efficiency import Efficiency
from pase.io.graph_json import save_graph
from pase.ir.graph import Graph
from pase.ops.gemm import fully_connected

ROOT = Path(__file__).resolve().parents[1]
H200_FILE = ROOT / "pase" / "hardware" / "data" / "dgx-h200.json"


def _flat(fraction: float, overhead_s: float = 10e-6) -> Calibration:
    """A calibration whose every matrix product runs at ``fraction`` of a 100 TFLOP/s peak, memory free."""
    e = Efficiency(matmul_curve=((1e9, fraction),), vector_flops=1e13, memory_Bps=1e18, kernel_overhead_s=overhead_s)
    return Calibration(e, 100e12, None, "a test GPU", "2026-12-04")


def test_a_calibration_file_round_trips(tmp_path):
    cal = load_calibration(H200_FILE)
    save_calibration(cal, tmp_path / "c.json")
    again = load_calibration(tmp_path / "c.json")
    assert again == cal and again.efficiency.sources == cal.efficiency.sources
    assert again.measurements == cal.measurements and again.environment == cal.environment
    assert "measured on NVIDIA H200" in again.source and "2026-12-04" in again.source


def _broken(tmp_path, change) -> Path:
    data = json.loads(H200_FILE.read_text())
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("change, named", [
    (lambda d: d.update(schema_version=2), "schema_version"),
    (lambda d: d.pop("schema"), "not a pase calibration"),
    (lambda d: d["efficiency"].update(matmul_curve=[[1e9, 1.2]]), "matmul_curve"),
    (lambda d: d["efficiency"].update(attention_curve=[[1e9, 1.5]]), "attention_curve"),
    (lambda d: d["efficiency"].update(memory_Bps=-4e12), "memory_Bps"),
    (lambda d: d.update(links={"intra": {"bus_Bps": -1.0, "latency_s": 1e-6}}), "bus_Bps"),
    (lambda d: d.update(peak_flops="fast"), "peak_flops"),
    (lambda d: d["efficiency"].pop("vector_flops"), "vector_flops"),
])
def test_an_implausible_file_is_refused_naming_the_field(tmp_path, change, named):
    with pytest.raises(ClusterError, match=named) as exc:
        load_calibration(_broken(tmp_path, change))
    assert "\n" not in str(exc.value)


def test_an_unreadable_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "junk.json").write_text("{not json")
    for path in (tmp_path / "junk.json", tmp_path / "missing.json", tmp_path):
        with pytest.raises(ClusterError) as exc:
            load_calibration(path)
        assert "\n" not in str(exc.value)


def test_an_unwritable_destination_leaves_no_file(tmp_path):
    with pytest.raises(ClusterError, match="cannot write"):
        save_calibration(_flat(0.5), tmp_path / "no" / "such" / "folder" / "c.json")
    assert list(tmp_path.iterdir()) == []


def test_a_calibration_file_sets_pase_evaluate_s_step_time(tmp_path, capsys):
    # One 4096 x 4096 x 4096 fully connected layer (no bias) on one device: its forward y = x W^T and its weight
    # gradient dW = dy^T x, 2 x 4096^3 FLOPs each (x is the graph's input: no input gradient), each one kernel.
    # At half of 100 TFLOP/s with 10 us per kernel and memory free: 2 x (137.4 GFLOP / 50 TFLOP/s + 10 us).
    graph = Graph("one-fc")
    graph.add_layer(fully_connected("fc", 4096, 4096, 4096, bias=False))
    save_graph(graph, tmp_path / "g.json")
    (tmp_path / "p.json").write_text(json.dumps({"fc": [1, 1, 1]}))
    flops = 2 * 4096 ** 3
    for fraction in (0.5, 0.25):
        save_calibration(_flat(fraction), tmp_path / "c.json")
        code = main(["evaluate", str(tmp_path / "g.json"), "--devices", "1", "--cluster", "dgx-h100",
                     "--calibration", str(tmp_path / "c.json"), "--plan", str(tmp_path / "p.json"), "--json"])
        assert code == 0
        step = json.loads(capsys.readouterr().out)["step_time_s"]
        assert step == pytest.approx(2 * (flops / (100e12 * fraction) + 10e-6), rel=1e-9)


def test_a_preset_with_a_file_keeps_its_topology_and_takes_the_device(tmp_path):
    save_calibration(_flat(0.5), tmp_path / "c.json")
    cluster = pase.preset("dgx-h100", 16, calibration=tmp_path / "c.json")
    base = pase.preset("dgx-h100", 16, calibrated=True)
    assert (cluster.devices, cluster.nodes, cluster.bandwidth_Bps) == (16, 2, base.bandwidth_Bps)
    assert cluster.peak_flops == 100e12 and cluster.efficiency.matmul_fraction(1e12) == 0.5
    # The file measured no links: the preset's calibrated links stay, with their sources.
    assert cluster.efficiency.intra_efficiency == base.efficiency.intra_efficiency
    assert cluster.efficiency.sources["intra_efficiency"] == base.efficiency.sources["intra_efficiency"]


def test_measured_links_set_the_link_efficiency_of_the_cluster_they_join(tmp_path):
    cal = _flat(0.5)
    measured = Calibration(cal.efficiency, cal.peak_flops, None, cal.device, cal.date,
                           links={"intra": {"bus_Bps": 360e9, "latency_s": 3e-6, "ranks": [8]}})
    cluster = measured.apply(pase.preset("dgx-h200"))
    assert cluster.efficiency.intra_efficiency == pytest.approx(360 / 450)
    assert cluster.efficiency.intra_latency_s == 3e-6


def _run(args, env=None):
    return subprocess.run([sys.executable, "-m", "pase", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=300)


def test_pase_calibrate_without_torch_says_so_in_one_line(tmp_path):
    # torch hidden: an import hook refusing it, installed before pase runs.
    code = ("import sys, importlib.abc\n"
            "class NoTorch(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ImportError('no torch here')\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "from pase.cli import main\n"
            f"sys.exit(main(['calibrate', '--out', {str(tmp_path / 'c.json')!r}]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "PyTorch" in r.stderr, r.stderr
    assert not (tmp_path / "c.json").exists()


def test_pase_calibrate_without_a_gpu_says_so_in_one_line_and_leaves_the_old_file(tmp_path):
    old = tmp_path / "c.json"
    old.write_text("an earlier calibration")
    r = _run(["calibrate", "--out", str(old), "--quick"], env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "GPU" in r.stderr, r.stderr
    assert old.read_text() == "an earlier calibration" and [p.name for p in tmp_path.iterdir()] == ["c.json"]


@pytest.mark.parametrize("where", ["folder", "missing"])
def test_pase_calibrate_refuses_an_unwritable_output_before_timing(tmp_path, where):
    out = tmp_path if where == "folder" else tmp_path / "no" / "c.json"
    r = _run(["calibrate", "--out", str(out)])
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--out" in r.stderr, r.stderr


def test_a_bad_calibration_file_on_the_cli_is_one_line(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("[]")
    code = main(["show", "alexnet", "--devices", "8", "--calibration", str(tmp_path / "bad.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "not a pase calibration" in err
