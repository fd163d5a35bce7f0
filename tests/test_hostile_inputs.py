"""Hostile and absurd input to the CLI and the app: one line on stderr, exit status 2, never a traceback.

One test (or a few) per reproduced failure: a closed stdout, an unknown
ordering, numbers out of range or not numbers, implausible hardware, the
memory limit of 0, a graph that does no work, malformed instance files,
deep nesting, devices and directories as files, gzip bombs, and names that
carry terminal escapes.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pase.cli import main
from pase.errors import ClusterError, FormatError
from pase.hardware.cluster import PRESETS, Cluster
from pase.hardware.mesh import MeshAxis
from pase.io.files import read_limited
from pase.io.graph_json import loads_graph
from pase.limits import MAX_BATCH, MAX_INSTANCE_BYTES
from pase.planner import plan
from pase.io.instance import load_instance

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = ROOT / "tests" / "data" / "instances" / "alexnet-p4.json.gz"
# A graph whose only layer moves data: no FLOPs, so a step can take 0 s.
NO_WORK = {"format": "pase-graph", "version": 1, "name": "flat", "layers": [
    {"name": "r", "op": "Reshape", "params": {"shape": [8, 4, 4], "dims": ["b", "h", "w"], "out_shape": [8, 16]},
     "inputs": [None]}]}
TINY_INSTANCE = {
    "name": "tiny", "devices": 2,
    "nodes": [{"id": 0, "op": "FC", "dims": [4, 8], "configs": [[1, 1], [2, 1]], "cost": [4.0, 2.0]},
              {"id": 1, "op": "Softmax", "dims": [4], "configs": [[1], [2]], "cost": [3.5, 1.25]}],
    "edges": [{"src": 0, "dst": 1, "cost": [[0.0, 1.0], [2.0, 0.0]]}],
}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *argv: str) -> str:
    """Run ``pase argv``, check it exits 2 with one line on stderr and nothing on stdout; return that line."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (code, err)
    assert not out and err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    return err


def strict_json(text: str):
    """``text`` parsed as JSON, refusing NaN and Infinity (which json.loads would accept)."""
    def refuse(name):
        raise AssertionError(f"{name} in JSON output")
    return json.loads(text, parse_constant=refuse)


def write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return str(path)


# -- 1. a closed stdout -----------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["show", "alexnet", "--devices", "8"],
    ["solve", "alexnet", "--devices", "2"],
    ["evaluate", "alexnet", "--devices", "2", "--plan", "PLAN"],
    ["sweep", "alexnet", "--devices", "2"],
    ["solve-instance", str(INSTANCE)],
    ["--help"],
])
def test_a_reader_that_stops_reading_ends_every_command_quietly_with_status_1(tmp_path, argv):
    plan_file = write(tmp_path, "plan.json", {"fc6": [1, 2, 1]})
    argv = [plan_file if a == "PLAN" else a for a in argv]
    proc = subprocess.Popen([sys.executable, "-m", "pase", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the command writes anything: its first write meets a closed pipe
    _, err = proc.communicate(timeout=60)
    # Only sweep's progress lines may be on stderr: no traceback, no "Exception ignored" from the final flush.
    # argparse swallows its own failure to write the help, so --help may end with 0.
    assert proc.returncode in ((0, 1) if argv == ["--help"] else (1,)) and b"Traceback" not in err and b"Error" not in err and b"Exception" not in err, err


# -- 2. an unknown ordering -------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["solve", "alexnet", "--devices", "8"], ["solve-instance", str(INSTANCE)]])
def test_an_unknown_ordering_names_the_known_ones(capsys, command):
    err = refused(capsys, *command, "--ordering", "nope")
    assert "invalid choice: 'nope'" in err and "'min-fill'" in err and "--ordering" in err


# -- 3. numbers out of range, and not numbers -------------------------------------------------------


@pytest.mark.parametrize("option,value,expected", [
    ("--batch", "1000000000000000", f"--batch: expected a batch size: a whole number from 1 to {MAX_BATCH}"),
    ("--batch", "1e30", f"--batch: expected a batch size: a whole number from 1 to {MAX_BATCH}, got '1e30'"),
    ("--batch", "-3", "--batch: expected a batch size"),
    ("--devices", "0", "--devices/-p: expected a device count: a whole number from 1 to 16384"),
    ("--devices", "10" * 3000, "--devices/-p: expected a device count"),
    ("--min-shard", "0", "--min-shard: expected a shard size"),
    ("--bytes-per-element", "3", "--bytes-per-element: invalid choice: 3 (choose from 1, 2, 4, 8)"),
    ("--nodes", "nan", "--nodes: expected a node count"),
])
def test_whole_number_options_are_bounded_and_say_what_they_expect(capsys, option, value, expected):
    argv = ["solve", "alexnet", "--devices", "8", option, value]
    assert expected in refused(capsys, *argv)


def test_the_largest_batch_still_gives_finite_positive_costs(capsys):
    code, out, _ = run(capsys, "solve", "alexnet", "--devices", "2", "--batch", str(MAX_BATCH), "--json")
    assert code == 0
    d = strict_json(out)
    assert 0 < d["step_time_s"] < 1e9 and all(b["speedup"] >= 1 - 1e-9 for b in d["baselines"].values())


def test_sweep_batches_are_bounded(capsys):
    err = refused(capsys, "sweep", "alexnet", "--devices", "2", "--batches", "32", "1e30")
    assert "--batches: expected a batch size" in err


# -- 4. implausible hardware, strict JSON ---------------------------------------------------------


@pytest.mark.parametrize("option,value,expected", [
    ("--tflops", "1e-320", "--tflops: expected peak TFLOP/s per device from 1e-06 to 1e+06 TFLOP/s, got '1e-320'"),
    ("--tflops", "inf", "--tflops: expected peak TFLOP/s"),
    ("--bandwidth", "nan", "--bandwidth: expected a bandwidth from 1e-06 to 1e+06 GB/s, got 'nan'"),
    ("--bandwidth", "fast", "--bandwidth: expected a bandwidth"),
    ("--inter-bandwidth", "1e300", "--inter-bandwidth: expected a bandwidth"),
    ("--memory-gb", "inf", "--memory-gb: expected memory per device from 1e-06 to 1e+06 GB, or 0 for no limit"),
    ("--memory-gb", "-1", "--memory-gb: expected memory per device"),
])
def test_hardware_options_are_bounded_and_name_the_range_and_unit(capsys, option, value, expected):
    assert expected in refused(capsys, "solve", "alexnet", "--devices", "8", option, value, "--json")


def test_sweep_hardware_lists_are_bounded(capsys):
    assert "--tflops-list: expected peak TFLOP/s" in refused(capsys, "sweep", "alexnet", "-p", "2", "--tflops-list",
                                                            "10", "0")
    assert "--bandwidths: expected a bandwidth" in refused(capsys, "sweep", "alexnet", "-p", "2", "16",
                                                          "--bandwidths=-inf")


@pytest.mark.parametrize("field,value,message", [
    ("peak_flops", 9.99e-309, "peak_flops must be from 1e+06 to 1e+18 FLOP/s, got 9.99e-309"),
    ("peak_flops", float("nan"), "peak_flops must be from 1e+06 to 1e+18 FLOP/s, got nan"),
    ("bandwidth_Bps", 1e16, "bandwidth_Bps must be from 1000 to 1e+15 bytes/s, got 1e+16"),
    ("inter_bandwidth_Bps", float("inf"), "inter_bandwidth_Bps must be from 1000 to 1e+15 bytes/s, got inf"),
    ("memory_bytes", float("inf"), "memory_bytes must be from 1000 to 1e+15 bytes, got inf"),
    ("memory_bytes", 0.0, "memory_bytes must be from 1000 to 1e+15 bytes, got 0.0; leave it unset"),
    ("bytes_per_element", True, "bytes_per_element must be 1, 2, 4 or 8"),
])
def test_a_cluster_refuses_implausible_figures_naming_field_value_range_and_unit(field, value, message):
    with pytest.raises(ClusterError, match=re.escape(message)):
        replace(PRESETS["dgx-a100"], **{field: value})


def test_every_preset_is_plausible_and_mesh_axes_are_held_to_the_same_bounds():
    for name, cluster in PRESETS.items():
        assert replace(cluster) == cluster, name  # construction re-runs the checks
    with pytest.raises(ClusterError, match="mesh axis 'gpu' bandwidth_Bps must be from 1000 to 1e\\+15 bytes/s"):
        Cluster(8, 10e12, 16e9, mesh_axes=(MeshAxis("gpu", 8, 1.0),))
    with pytest.raises(ClusterError, match="latency must be from 0 to 1 seconds, got 5"):
        MeshAxis("gpu", 8, 16e9, latency_s=5)
    with pytest.raises(ClusterError, match="latency must be from 0 to 1 seconds, got nan"):
        MeshAxis("gpu", 8, 16e9, latency_s=float("nan"))


@pytest.mark.parametrize("argv", [
    ["solve", "alexnet", "-p", "4", "--cluster", "dgx-a100", "--peak-rates", "--json"],
    ["solve", "alexnet", "-p", "4", "--memory-gb", "0.5", "--json"],
    ["evaluate", "alexnet", "-p", "4", "--plan", "PLAN", "--json"],
    ["sweep", "alexnet", "-p", "2", "4", "--json"],
    ["solve-instance", str(INSTANCE), "--json"],
])
def test_every_json_output_is_strict_json(capsys, tmp_path, argv):
    plan_file = write(tmp_path, "plan.json", {"fc6": [1, 2, 1]})
    code, out, err = run(capsys, *[plan_file if a == "PLAN" else a for a in argv])
    assert code in (0, 2) and "Traceback" not in err
    if code == 0:
        strict_json(out)


# -- 5. --memory-gb 0 is no limit, as in the app -------------------------------------------------------


def test_memory_gb_0_means_no_limit(capsys):
    code, out, _ = run(capsys, "solve", "alexnet", "-p", "4", "--cluster", "dgx-a100", "--peak-rates", "--memory-gb", "0", "--json")
    assert code == 0
    d = strict_json(out)
    assert d["cluster"]["memory_bytes"] is None and d["memory_capacity_bytes"] is None and d["fits_memory"] is None
    limited = strict_json(run(capsys, "solve", "alexnet", "-p", "4", "--cluster", "dgx-a100", "--peak-rates", "--json")[1])
    assert limited["cluster"]["memory_bytes"] == 81_920 * 2**20  # the preset's (an A100 80 GB's NVML total)
    code, out, _ = run(capsys, "solve", "--help")
    assert code == 0 and "0: no limit" in " ".join(out.split())


def test_the_app_reads_memory_0_as_no_limit_and_says_so():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.selectbox(key="in_preset").set_value("dgx-a100").run()
    assert at.session_state["_problem"].cluster.memory_bytes == 81_920 * 2**20  # an A100 80 GB's NVML total
    memory = at.number_input(key="in_memory")
    assert "0: unknown, no memory limit" in memory.help and "--memory-gb 0" in memory.help
    memory.set_value(0.0).run()
    assert not at.exception and at.session_state["_problem"].cluster.memory_bytes is None


# -- 6. a graph that does no work -----------------------------------------------------------------------


def test_speedup_over_a_zero_step_time():
    p = plan(loads_graph(json.dumps(NO_WORK)), PRESETS["paper-model"].with_devices(4))
    assert p.step_time_s == 0 and p.speedup_over(p) == 1.0
    slower = replace(p, cost=5.0)
    assert p.speedup_over(slower) == float("inf") and slower.speedup_over(p) == 0.0


def test_the_cli_reports_a_graph_that_does_no_work(capsys, tmp_path):
    path = write(tmp_path, "flat.json", NO_WORK)
    code, out, err = run(capsys, "solve", path, "-p", "4")
    assert code == 0 and not err
    assert "note: flat does no work: its layers only move data (Reshape)" in out and "PaSE is 1.00x faster" in out
    code, out, _ = run(capsys, "solve", path, "-p", "4", "--json")
    assert code == 0 and all(b["speedup"] == 1.0 for b in strict_json(out)["baselines"].values())
    err = refused(capsys, "sweep", path, "-p", "2", "4")
    assert "'flat' does no work" in err and "sweep a model with computing layers" in err


def test_the_what_if_page_reports_a_graph_that_does_no_work():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.radio(key="in_graph_kind").set_value("Upload").run()
    at.file_uploader(key="in_upload").upload("flat.json", json.dumps(NO_WORK).encode(), "application/json").run()
    at.switch_page("pages/what-if.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("does no work" in e.value for e in at.error)


@pytest.mark.parametrize("vary,text", [
    ("batch size", "32, inf"), ("batch size", "1e30"), ("batch size", "nan"), ("batch size", "2.5"),
    ("link bandwidth (GB/s)", "16, 1e300"), ("peak TFLOP/s", "1e-320"),
])
def test_the_what_if_page_bounds_its_values(vary, text):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.selectbox(key="in_sample").set_value("alexnet").run()
    at.switch_page("pages/what-if.py").run()
    at.selectbox(key="wi_vary").set_value(vary).run()
    key = {"batch size": "batch", "link bandwidth (GB/s)": "bandwidth_Bps", "peak TFLOP/s": "peak_flops"}[vary]
    at.text_input(key=f"wi_values_{key}").set_value(text).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.error and "is not a comma-separated list of" in at.error[0].value and " from " in at.error[0].value


# -- 7. malformed instance files ----------------------------------------------------------------------


def _mutated(change) -> dict:
    doc = json.loads(json.dumps(TINY_INSTANCE))
    change(doc)
    return doc


@pytest.mark.parametrize("change,message", [
    (lambda d: d["nodes"][0].update(cost=5), r"node 0: costs must be a 1-D array: field 'cost' must be a non-empty"),
    (lambda d: d["nodes"][0].update(cost="4, 2"), r"node 0: .*field 'cost'.*got '4, 2'"),
    (lambda d: d["nodes"][0].update(cost=[]), r"node 0: .*non-empty list"),
    (lambda d: d["nodes"][0].update(cost=[4.0, True]), r"node 0: costs are not numbers: field 'cost' holds True at \[1\]"),
    (lambda d: d["nodes"][0].update(cost=[4.0, "2"]), r"node 0: costs are not numbers: field 'cost' holds '2' at \[1\]"),
    (lambda d: d["nodes"][0].update(cost=[4.0, 10**400]), r"node 0: a cost is NaN or infinite"),
    (lambda d: d["nodes"][0].update(cost=[10**400, "x"]), r"node 0: a cost is NaN or infinite \(field 'cost' at \[0\]\)"),
    (lambda d: d["nodes"][0].update(cost={"__array__": 0}), r"node 0: .*got \{'__array__': 0\}"),
    (lambda d: d["nodes"][0].update(configs=[[1, 1]]), r"node 0 lists 1 configurations but 2 costs; field 'configs'"),
    (lambda d: d["nodes"][0].update(configs=[[1, 1], [2]]), r"node 0: configs\[1\] has 1 split factors for 2 dims"),
    (lambda d: d["nodes"][0].update(configs=[[1, 1], "2,1"]), r"node 0: configs\[1\] must be a list of split factors"),
    (lambda d: d["nodes"][0].update(dims="4x8"), r"node 0: field 'dims' must be a list"),
    (lambda d: d["nodes"][1].update(op=7), r"node 1: field 'op' must be a string, got 7"),
    (lambda d: d["nodes"][1].update(id="1"), r"nodes\[1\] has id '1'; ids must be 0..1"),
    (lambda d: d.update(name=["x"]), r"field 'name' must be a string"),
    (lambda d: d.update(devices=-2), r"field 'devices' must be a whole number >= 1, got -2"),
    (lambda d: d["edges"][0].update(src=[0]), r"edge 0 source is \[0\], not a node id 0..1 \(field 'src'\)"),
    (lambda d: d["edges"][0].update(dst=2), r"edge 0 target is 2, not a node id 0..1 \(field 'dst'\)"),
    (lambda d: d["edges"][0].update(cost=3), r"edge 0 \(0 -> 1\): costs must be a 2-D array: field 'cost'"),
    (lambda d: d["edges"][0].update(cost=[[0.0, 1.0], [2.0]]), r"edge 0 \(0 -> 1\): .*row 1 has 1 entries, row 0 has 2"),
    (lambda d: d["edges"][0].update(cost=[[0.0, "1"], [2.0, 0.0]]), r"edge 0 \(0 -> 1\): costs are not numbers.*\[0\]\[1\]"),
    (lambda d: d["edges"][0].update(cost=[[0.0, -1.0], [2.0, 0.0]]), r"edge 0 \(0 -> 1\): a cost is negative"),
    (lambda d: d["edges"][0].update(cost=[[0.0, 1.0]]), r"edge 0 \(0 -> 1\): cost matrix has shape \(1, 2\), expected \(2, 2\)"),
    (lambda d: d["edges"].append({"src": 1, "dst": 1, "cost": [[0.0, 0.0], [0.0, 0.0]]}), "edge 1 is a self loop"),
])
def test_load_instance_names_the_node_or_edge_and_field(tmp_path, capsys, change, message):
    path = write(tmp_path, "bad.json", _mutated(change))
    with pytest.raises(FormatError, match=message):
        load_instance(path)
    assert re.search(message, refused(capsys, "solve-instance", path))


def test_a_well_formed_tiny_instance_solves(capsys, tmp_path):
    code, out, _ = run(capsys, "solve-instance", write(tmp_path, "tiny.json", TINY_INSTANCE), "--json")
    assert code == 0 and strict_json(out)["cost"] == pytest.approx(2.0 + 1.25 + 0.0)


# -- 8. deep nesting --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [b"[" * 100_000, b'{"nodes": [{"id": 0, "cost": ' + b"[" * 100_000 + b"1" + b"]" * 100_000
                                  + b"}], \"edges\": []}"])
@pytest.mark.parametrize("role", ["model", "plan", "instance"])
def test_deep_nesting_is_refused_anywhere(capsys, tmp_path, role, text):
    path = write(tmp_path, "deep.json", text)
    argv = {"model": ["solve", path, "-p", "2"], "plan": ["evaluate", "alexnet", "-p", "2", "--plan", path],
            "instance": ["solve-instance", path]}[role]
    err = refused(capsys, *argv)
    assert "nested too deeply" in err or "must hold a JSON object" in err or "must be" in err, err


# -- 9. devices, directories, missing files ---------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("role,limit", [("model", "20 MiB"), ("plan", "20 MiB"), ("instance", "256 MiB")])
def test_a_device_as_a_file_is_read_with_a_limit(capsys, device, role, limit):
    argv = {"model": ["solve", device, "-p", "2"], "plan": ["evaluate", "alexnet", "-p", "2", "--plan", device],
            "instance": ["solve-instance", device]}[role]
    err = refused(capsys, *argv)
    assert f"is more than {limit}; at most {limit} is accepted" in err


def test_read_limited_stops_at_the_limit_whatever_stat_says(tmp_path):
    r, w = os.pipe()
    os.write(w, b"x" * 100)
    os.close(w)
    with pytest.raises(FormatError, match="more than 0 MiB"):
        read_limited(f"/dev/fd/{r}", 99)
    os.close(r)
    exact = tmp_path / "exact.json"
    exact.write_bytes(b"y" * 99)
    assert read_limited(exact, 99) == b"y" * 99


@pytest.mark.parametrize("role", ["model", "plan", "instance"])
def test_a_directory_or_a_missing_file_is_refused_clearly(capsys, tmp_path, role):
    for path, message in ((tmp_path, "it is a directory; give the path of a file"),
                          (tmp_path / "missing.json", "no such file; check the path")):
        argv = {"model": ["solve", str(path), "-p", "2"],
                "plan": ["evaluate", "alexnet", "-p", "2", "--plan", str(path)],
                "instance": ["solve-instance", str(path)]}[role]
        err = refused(capsys, *argv)
        assert message in err or (role == "model" and "nor an existing file" in err), err


# -- 10. gzip bombs --------------------------------------------------------------------------------


def test_a_gzip_bomb_is_refused_while_it_inflates(monkeypatch, tmp_path):
    monkeypatch.setattr("pase.io.instance.MAX_INSTANCE_BYTES", 4 * 2**20)
    member = gzip.compress(bytes(2**20))
    many = write(tmp_path, "many.json.gz", member * 64)  # 64 members of 1 MiB of zeros
    one = write(tmp_path, "one.json.gz", gzip.compress(bytes(16 * 2**20)))
    for path in (many, one):
        with pytest.raises(FormatError, match="is more than 4 MiB uncompressed; at most 4 MiB is accepted"):
            load_instance(path)
    # Members are read back to back, and a damaged or truncated stream is named as such.
    two = gzip.compress(json.dumps(TINY_INSTANCE)[:40].encode()) + gzip.compress(json.dumps(TINY_INSTANCE)[40:].encode())
    assert load_instance(write(tmp_path, "two.json.gz", two))[0].config_counts == (2, 2)
    with pytest.raises(FormatError, match="cannot read instance .*damaged gzip data"):
        load_instance(write(tmp_path, "cut.json.gz", gzip.compress(json.dumps(TINY_INSTANCE).encode())[:-4]))


def test_a_2_gb_gzip_bomb_from_the_shell_fails_in_bounded_memory(tmp_path):
    bomb = write(tmp_path, "bomb.json.gz", gzip.compress(bytes(2**20), 9) * 2048)  # 2 MB, 2 GiB inflated
    assert os.path.getsize(bomb) < 3 * 2**20
    limit = 3 * MAX_INSTANCE_BYTES + 512 * 2**20  # the uncompressed limit, its pieces joined, and the interpreter

    def cap():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    # The timeout only stops a hang (inflating all 2 GiB); it is no goal, so set far above any machine's time.
    proc = subprocess.run([sys.executable, "-m", "pase", "solve-instance", bomb], capture_output=True, text=True,
                          preexec_fn=cap, timeout=600, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == "pase: error: bomb.json.gz is more than 256 MiB uncompressed; at most 256 MiB is accepted\n"


# -- 11. names with terminal escapes --------------------------------------------------------------------


HOSTILE = "\x1b[2J\x1b]0;owned\x07evil\n\u202e"


def _hostile_graph() -> dict:
    return {"format": "pase-graph", "version": 1, "name": HOSTILE, "layers": [
        {"name": "fc" + HOSTILE, "op": "FullyConnected", "params": {"b": 8, "n": 8, "c": 8}, "inputs": [None]}]}


def _safe(text: str) -> bool:
    return all(c.isprintable() or c == "\n" for c in text)


@pytest.mark.parametrize("command", [["solve"], ["show"], ["evaluate", "--plan", "PLAN"]])
def test_names_from_files_are_printed_escaped(capsys, tmp_path, command):
    path = write(tmp_path, "evil.json", _hostile_graph())
    plan_file = write(tmp_path, "plan.json", {"fc" + HOSTILE: [1, 2, 1]})
    code, out, err = run(capsys, command[0], path, "-p", "2", *[plan_file if a == "PLAN" else a for a in command[1:]])
    assert code == 0 and not err
    assert _safe(out) and "\x1b" not in out and "\u202e" not in out
    assert "fc\\x1b[2J\\x1b]0;owned\\x07evil\\n\\u202e" in out


def test_instance_names_are_printed_escaped_and_json_escapes_them(capsys, tmp_path):
    doc = _mutated(lambda d: (d.update(name=HOSTILE), d["nodes"][0].update(op=HOSTILE)))
    path = write(tmp_path, "evil.json", doc)
    code, out, _ = run(capsys, "solve-instance", path)
    assert code == 0 and _safe(out) and "\\x1b[2J" in out
    code, out, _ = run(capsys, "solve-instance", path, "--json")
    assert code == 0 and out.isascii() and "\x1b" not in out and strict_json(out)["name"] == HOSTILE


def test_json_output_escapes_control_characters(capsys, tmp_path):
    code, out, _ = run(capsys, "solve", write(tmp_path, "evil.json", _hostile_graph()), "-p", "2", "--json")
    assert code == 0 and out.isascii() and "\x1b" not in out
    d = strict_json(out)
    assert d["model"] == HOSTILE and d["layers"][0]["name"] == "fc" + HOSTILE


def test_an_error_naming_a_hostile_name_is_one_escaped_line(capsys, tmp_path):
    plan_file = write(tmp_path, "plan.json", {"no" + HOSTILE: [1, 2, 1]})
    err = refused(capsys, "evaluate", "alexnet", "-p", "2", "--plan", plan_file)
    assert _safe(err) and "\x1b" not in err
