"""The broken-file corpus: every file is refused with a useful one-line message, never a traceback.

``tests/corpus`` holds malformed, truncated, cyclic, disconnected, zero-sized,
absurdly large and otherwise hostile graph files (JSON and ONNX), written by
``tests/corpus/make_corpus.py``; ``expected.json`` gives, per file, a regular
expression the message must match. Each file goes through the loader (as a
path and as uploaded bytes) and through the CLI. Files too large to commit are
made here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import onnx  # noqa: F401  (CI installs the test extra: run, never skip)
else:
    pytest.importorskip("onnx")

from pase import cli
from pase.errors import PaseError
from pase.io.graph_json import load_model_file
from pase.limits import MAX_FILE_BYTES, MAX_LAYERS
from pase.limits import MAX_ONNX_BYTES

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
FILES = sorted(EXPECTED)


def test_corpus_matches_its_manifest():
    present = {p.name for p in CORPUS.iterdir() if p.name not in ("expected.json", "make_corpus.py", "__pycache__")}
    assert present == set(EXPECTED)
    assert sum(name.endswith(".json") for name in FILES) >= 20
    assert sum(name.endswith(".onnx") for name in FILES) >= 20


def _check_message(name: str, exc: BaseException) -> None:
    message = str(exc)
    assert isinstance(exc, PaseError), f"{name}: {type(exc).__name__}: {message}"
    assert "\n" not in message and message.strip(), f"{name}: message {message!r}"
    assert re.search(EXPECTED[name], message), f"{name}: {message!r} does not match {EXPECTED[name]!r}"
    assert len(message) < 400, f"{name}: message of {len(message)} characters"


@pytest.mark.parametrize("name", FILES)
def test_loader_refuses_with_a_useful_message(name):
    with pytest.raises(Exception) as info:
        load_model_file(CORPUS / name)
    _check_message(name, info.value)
    assert str(info.value).startswith(name)


@pytest.mark.parametrize("name", FILES)
def test_upload_refuses_with_a_useful_message(name):
    with pytest.raises(Exception) as info:
        load_model_file((CORPUS / name).read_bytes(), name)
    _check_message(name, info.value)


@pytest.mark.parametrize("name", FILES)
def test_cli_exits_2_with_one_line(name, capsys):
    status = cli.main(["solve", str(CORPUS / name), "--devices", "4"])
    out, err = capsys.readouterr()
    assert status == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pase: error: "), err
    assert re.search(EXPECTED[name], lines[0])


def _run_cli(path: Path):
    return subprocess.run([sys.executable, "-m", "pase", "solve", str(path), "--devices", "4"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("name", ["truncated.json", "cyclic.json", "absurd_size.json", "garbage.onnx",
                                  "unsupported_ops.onnx", "disconnected.onnx"])
def test_cli_process_prints_no_traceback(name):
    proc = _run_cli(CORPUS / name)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("pase: error: ")


@pytest.mark.parametrize("suffix, limit", [(".json", MAX_FILE_BYTES), (".onnx", MAX_ONNX_BYTES)])
def test_oversized_files_are_refused_before_reading(tmp_path, suffix, limit):
    path = tmp_path / f"huge{suffix}"
    with open(path, "wb") as f:
        f.truncate(limit + 1)  # sparse: costs no disk
    with pytest.raises(PaseError, match=r"MiB; at most \d+ MiB is accepted"):
        load_model_file(path)
    proc = _run_cli(path)
    assert proc.returncode == 2 and "MiB is accepted" in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(PaseError, match="MiB is accepted"):
        load_model_file(b"{" + b" " * limit, f"upload{suffix}")


def test_too_many_layers(tmp_path):
    layers = [{"name": "l0", "op": "Elementwise", "params": {"shape": [2], "dims": ["n"], "inputs": 1}}]
    layers += [{"name": f"l{i}", "op": "Elementwise", "params": {"shape": [2], "dims": ["n"], "inputs": 1},
                "inputs": [f"l{i - 1}"]} for i in range(1, MAX_LAYERS + 1)]
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"format": "pase-graph", "version": 1, "layers": layers}))
    with pytest.raises(PaseError, match=f"{MAX_LAYERS + 1} layers; at most {MAX_LAYERS}"):
        load_model_file(path)


def test_batch_is_refused_for_graph_files():
    with pytest.raises(PaseError, match="fixes its own batch size"):
        load_model_file(ROOT / "docs" / "example-graph.json", batch=8)
