"""The broken-file corpus: every file is refused with a useful one-line message, never a traceback.

``tests/corpus`` holds malformed, truncated, cyclic, disconnected, zero-sized,
absurdly large and otherwise hostile graph files (JSON and ONNX), written by
``tests/corpus/make_corpus.py``; ``expected.json`` gives, per file, a regular
expression the message must match. Each file goes through the loader (as a
path and as uploaded bytes) and through the CLI, in this process with its
address space bounded and in a process of its own under a 4 GB cap, where it
must end within a minute, below 1 GB, with one line on stderr. Files too large
to commit are made here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import onnx  # noqa: F401  (CI installs the test extra: run, never skip)
else:
    pytest.importorskip("onnx")

from pase import cli
from pase.errors import PaseError
from pase.io.graph_json import load_model_file
from pase.limits import MAX_FILE_BYTES, MAX_LAYERS, MAX_ONNX_BYTES, MAX_ONNX_PARSE_BYTES

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
FILES = sorted(EXPECTED)
# A hostile file's process gets this much address space, is killed after this many seconds
# (a guard against a hang, far above any machine's time: no test asserts a duration) and must
# peak below this much memory (the corpus peaks at 0.3 GB).
CAP_BYTES = 4 << 30
TIME_LIMIT_S = 600
PEAK_LIMIT_BYTES = 1 << 30


def _make_corpus():
    """The corpus generator as a module (tests/corpus is not a package), for its protobuf helpers."""
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bounded_memory():
    """This process may grow by at most 2 GB during the test: a regression that makes a
    corpus file allocate without bound fails with MemoryError instead of taking the machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (_within(size + (2 << 30), soft), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


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


def _within(cap: int, limit: int) -> int:
    """``cap``, or the address-space ``limit`` already in force when that is lower."""
    return cap if limit == resource.RLIM_INFINITY else min(cap, limit)


@pytest.mark.parametrize("name", FILES)
def test_loader_refuses_with_a_useful_message(name, bounded_memory):
    with pytest.raises(Exception) as info:
        load_model_file(CORPUS / name)
    _check_message(name, info.value)
    assert str(info.value).startswith(name)


@pytest.mark.parametrize("name", FILES)
def test_upload_refuses_with_a_useful_message(name, bounded_memory):
    with pytest.raises(Exception) as info:
        load_model_file((CORPUS / name).read_bytes(), name)
    _check_message(name, info.value)


@pytest.mark.parametrize("name", FILES)
def test_cli_exits_2_with_one_line(name, capsys, bounded_memory):
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


def run_capped(paths) -> list[dict]:
    """``pase solve PATH --devices 4`` for every path, each in a child process forked from
    this one under ``CAP_BYTES`` of address space and killed after ``TIME_LIMIT_S``, a
    few at a time: per path its exit status (negative: the signal that ended it), stdout,
    stderr and peak resident bytes.

    Run it in a fresh interpreter (:func:`_run_capped`): forking one that has pase
    imported spares every file the ~0.3 s of starting Python, and the child runs the
    CLI as ``python -m pase`` does, an escaping exception printed as a traceback.
    """
    from pase.cli import main
    import pase.io.onnx  # noqa: F401  (imported once, before forking)
    import onnx  # noqa: F401

    workers = max(2, 2 * (os.cpu_count() or 1))
    todo = list(enumerate(paths))
    running: dict[int, tuple] = {}
    results: list = [None] * len(todo)
    with tempfile.TemporaryDirectory() as scratch:
        while todo or running:
            while todo and len(running) < workers:
                i, path = todo.pop(0)
                out, err = os.path.join(scratch, f"{i}.out"), os.path.join(scratch, f"{i}.err")
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:  # the child: never returns
                    status = 1
                    try:
                        cap = _within(CAP_BYTES, resource.getrlimit(resource.RLIMIT_AS)[1])
                        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
                        signal.alarm(TIME_LIMIT_S)
                        for fd, name in ((1, out), (2, err)):
                            os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
                        try:
                            status = main(["solve", str(path), "--devices", "4"])
                        except SystemExit as exc:
                            status = exc.code if isinstance(exc.code, int) else 1
                        except BaseException:
                            traceback.print_exc()
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(status)
                running[pid] = (i, out, err)
            pid, status, usage = os.wait4(-1, 0)  # wait4: the peak memory of that child alone
            i, out, err = running.pop(pid)
            results[i] = dict(status=os.waitstatus_to_exitcode(status), out=Path(out).read_text(errors="replace"),
                              err=Path(err).read_text(errors="replace"), peak=usage.ru_maxrss * 1024)
    return results


def _run_capped(paths) -> list[dict]:
    """:func:`run_capped` in a fresh interpreter (this file run as a script), one thread
    of each numeric library so that forking it is safe."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, __file__, *map(str, paths)], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=TIME_LIMIT_S * len(paths) + 60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_file_ends_in_a_capped_process_with_one_line():
    for name, r in zip(FILES, _run_capped([CORPUS / name for name in FILES])):
        assert r["status"] in (0, 2), f"{name}: {r}"  # a hang ends in SIGALRM: a negative status
        assert "Traceback" not in r["err"] + r["out"], f"{name}: {r['err']}"
        assert r["peak"] < PEAK_LIMIT_BYTES, f"{name}: peaked at {r['peak'] / 2**20:.0f} MiB"
        if r["status"] == 2:
            lines = r["err"].splitlines()
            assert len(lines) == 1 and lines[0].startswith("pase: error: "), f"{name}: {r['err']!r}"
            assert re.search(EXPECTED[name], lines[0]), f"{name}: {lines[0]!r}"


def test_millions_of_tiny_nodes_are_refused_before_parsing(tmp_path):
    # 16 MB of empty nodes would take protobuf about 2 GB to parse; refused from the bytes.
    node = b"\x0a\x00"  # GraphProto field 1 (node), length 0
    graph = node * (8 << 20)
    path = tmp_path / "tiny_nodes.onnx"
    path.write_bytes(b"\x08\x08\x42\x02\x10\x11" + b"\x3a" + _make_corpus().varint(len(graph)) + graph)  # ir 8, opset 17, graph
    [r] = _run_capped([path])
    assert r["status"] == 2 and f"more than {MAX_ONNX_PARSE_BYTES / 2**30:.0f} GiB of memory" in r["err"], r
    assert r["peak"] < PEAK_LIMIT_BYTES, r


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


if __name__ == "__main__":  # the fresh interpreter of _run_capped
    print(json.dumps(run_capped(sys.argv[1:])))
