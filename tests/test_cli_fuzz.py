"""Property-based fuzzing of the command line: every input ends in a result or in one line on stderr.

Over the numeric options (valid, zero, negative, huge, tiny, infinite, NaN,
not numbers) and over mutated graph and instance files (fields dropped,
replaced or retyped, text truncated), ``pase`` either exits 0 with a valid
result (strict JSON under ``--json``: no NaN, no Infinity) or exits 2 with
exactly one line on stderr and nothing on stdout. Never a traceback, never
another status. Most cases run
in-process through :func:`pase.cli.main`; a handful run as subprocesses under
an address-space limit. The runs are derandomized, so CI sees the same cases.
"""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pase.cli import main
from pase.limits import MAX_BATCH, MAX_DEVICES

ROOT = Path(__file__).resolve().parents[1]
GRAPH = json.loads((ROOT / "docs" / "example-graph.json").read_text())
INSTANCE = {
    "name": "tiny", "devices": 2,
    "nodes": [{"id": 0, "op": "FC", "dims": [4, 8], "configs": [[1, 1], [2, 1]], "cost": [4.0, 2.0]},
              {"id": 1, "op": "Softmax", "dims": [4], "configs": [[1], [2]], "cost": [3.5, 1.25]},
              {"id": 2, "op": "Loss", "dims": [4], "configs": [[1]], "cost": [0.5]}],
    "edges": [{"src": 0, "dst": 1, "cost": [[0.0, 1.0], [2.0, 0.0]]}, {"src": 1, "dst": 2, "cost": [[0.0], [1.5]]}],
}
# Seconds after which a subprocess case is stopped: a guard against a hang, far above any machine's time (the
# interpreter's start included), not a goal; no case's duration is asserted.
SUBPROCESS_HANG_S = 600
# Address space of a subprocess case: room for the interpreter, numpy and one file at its size limit.
ADDRESS_SPACE_BYTES = 2 * 2**30

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    """``pase argv`` in this process: (status, stdout, stderr); an exception escaping ``main`` fails the case."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _limit_address_space() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def run_subprocess(argv: list[str]) -> tuple[int, str, str]:
    """``python -m pase argv`` under an address-space limit and a hang guard: (status, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "pase", *argv], capture_output=True, text=True, cwd=ROOT,
                          preexec_fn=_limit_address_space, timeout=SUBPROCESS_HANG_S)
    return proc.returncode, proc.stdout, proc.stderr


def check_outcome(argv: list[str], code: int, out: str, err: str) -> None:
    """Status 0 with a valid result, or status 2 with exactly one line on stderr; nothing else."""
    assert "Traceback" not in err, (argv, err)
    if code == 0:
        if "--json" in argv:
            def refuse(name):
                raise AssertionError(f"{argv}: {name} in JSON output")
            json.loads(out, parse_constant=refuse)
        else:
            assert out.strip(), argv
        return
    assert code == 2, (argv, code, err)
    assert not out and err.endswith("\n") and err.count("\n") == 1, (argv, err)
    assert err.startswith("pase"), (argv, err)


# -- numeric options ----------------------------------------------------------------------------------

ODD = ["0", "-1", "-0", "nan", "inf", "-inf", "1e309", "1e-320", "x", "", "1e30", "0x10", "٣"]


def values(valid: list[str], invalid: list[str]) -> st.SearchStrategy[str]:
    """A valid value in about two cases of three, so that most cases get past the parser."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(invalid + ODD))


WHOLE = values(["1", "2", "4", "8", "٣"], [str(MAX_DEVICES + 1), "10" * 30, "2.0", "1e3"])
DEVICES = values(["1", "2", "3", "4", "8"], [str(MAX_DEVICES + 1), "1e9", "2.5"])
BATCH = values(["1", "7", "32", "128", str(MAX_BATCH)], [str(MAX_BATCH + 1), "1000000000000000"])
REAL = values(["1e-6", "0.001", "10", "16", "300", "1e6"], ["1e7", "1e-7"])
MEMORY = values(["0", "0.000001", "0.5", "11", "80", "1e6"], ["1e7", "1e-7"])
BYTES = values(["1", "2", "4", "8"], ["3", "16"])

OPTIONS = {
    "--batch": BATCH, "--tflops": REAL, "--bandwidth": REAL, "--memory-gb": MEMORY,
    "--bytes-per-element": BYTES, "--nodes": WHOLE, "--devices-per-node": WHOLE,
    "--intra-bandwidth": REAL, "--inter-bandwidth": REAL, "--min-shard": WHOLE,
}


@st.composite
def numeric_argv(draw) -> list[str]:
    command = draw(st.sampled_from(["solve", "solve", "show", "sweep"]))
    argv = [command, "alexnet", "--devices", draw(DEVICES)]
    if command == "sweep" and draw(st.booleans()):
        argv += [draw(DEVICES)]
    for option, values in OPTIONS.items():
        if command == "show" and option not in ("--batch", "--min-shard"):
            continue
        if draw(st.integers(0, 3)) == 0:  # each option in about one case of four
            argv.append(f"{option}={draw(values)}")  # "=" so that "-1" is read as the value
    if command == "sweep":
        argv.append("--json")  # text mode writes progress lines on stderr
    elif command == "solve" and draw(st.booleans()):
        argv.append("--json")
    return argv


@FUZZ
@given(numeric_argv())
def test_numeric_options_give_a_result_or_one_line(argv):
    check_outcome(argv, *run_in_process(argv))


@settings(max_examples=8, deadline=None, derandomize=True, database=None)
@given(numeric_argv())
def test_numeric_options_from_the_shell(argv):
    check_outcome(argv, *run_subprocess(argv))


# -- mutated files ----------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0, 2**31, 2**63, 10**18, 10**400]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4), st.sampled_from(["\x1b[2J", "\n", "b"]),
)
json_values = st.recursive(json_scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                             st.dictionaries(st.text(max_size=3), c, max_size=3)),
                           max_leaves=8)


def _containers(doc) -> list:
    """Every list and dict inside ``doc`` (itself included): the places a mutation may change."""
    out, todo = [], [doc]
    while todo:
        x = todo.pop()
        if isinstance(x, (list, dict)):
            out.append(x)
            todo.extend(x.values() if isinstance(x, dict) else x)
    return out


@st.composite
def mutated_text(draw, base: dict) -> bytes:
    """``base`` with up to three fields dropped, replaced, retyped, nudged (another value of the same type) or
    duplicated, or a field added, as JSON text, perhaps truncated."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 3))):
        places = _containers(doc)
        where = places[draw(st.integers(0, len(places) - 1))]
        keys = list(where) if isinstance(where, dict) else list(range(len(where)))
        if not keys:
            continue
        key = keys[draw(st.integers(0, len(keys) - 1))]
        action = draw(st.sampled_from(["drop", "replace", "retype", "duplicate", "nudge", "nudge", "add"]))
        if action == "nudge":
            v = where[key]
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                continue
            where[key] = draw(st.text(max_size=6) if isinstance(v, str) else
                              st.integers(0, 100) if isinstance(v, int) else st.floats(0, 1e6))
        elif action == "add" and isinstance(where, dict):
            where[draw(st.text(max_size=4))] = draw(json_values)
        elif action == "drop":
            del where[key]
        elif action == "replace":
            where[key] = draw(json_values)
        elif action == "retype":
            v = where[key]
            where[key] = {"list": str(v), "dict": list(v.values()) if isinstance(v, dict) else v}.get(
                type(v).__name__, [v])
        elif action == "duplicate" and isinstance(where, list):
            where.append(copy.deepcopy(where[key]))
    text = json.dumps(doc).encode()
    if draw(st.integers(0, 5)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


def _with_file(text: bytes, suffix: str, argv_of) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"fuzz{suffix}"
        path.write_bytes(text)
        argv = argv_of(str(path))
        check_outcome(argv, *run_in_process(argv))


@FUZZ
@given(mutated_text(GRAPH), st.sampled_from([["solve", "--json"], ["solve"], ["show"], ["sweep", "--json"]]))
def test_mutated_graph_files_give_a_result_or_one_line(text, command):
    _with_file(text, ".json", lambda path: [command[0], path, "--devices", "2", *command[1:]])


@FUZZ
@given(mutated_text(INSTANCE), st.booleans())
def test_mutated_instance_files_give_a_result_or_one_line(text, as_json):
    _with_file(text, ".json", lambda path: ["solve-instance", path, *(["--json"] if as_json else [])])


@FUZZ
@given(mutated_text({"fc1": [1, 2, 1], "fc2": [1, 1, 2]}))
def test_mutated_plan_files_give_a_result_or_one_line(text):
    graph = str(ROOT / "docs" / "example-graph.json")
    _with_file(text, ".json", lambda path: ["evaluate", graph, "--devices", "2", "--plan", path, "--json"])


def test_mutated_files_from_the_shell():
    """A handful of hostile files as subprocesses, under the address-space limit."""
    cases = [
        (b"[" * 100_000, ["solve-instance"]),
        (b"[" * 100_000, ["solve", "--devices", "2"]),
        (json.dumps({**INSTANCE, "nodes": [{**INSTANCE["nodes"][0], "cost": 5}]}).encode(), ["solve-instance"]),
        (json.dumps({**GRAPH, "name": "\x1b[2J\n"}).encode(), ["show", "--devices", "2"]),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for k, (text, command) in enumerate(cases):
            path = Path(tmp) / f"case{k}.json"
            path.write_bytes(text)
            argv = [command[0], str(path), *command[1:]]
            code, out, err = run_subprocess(argv)
            check_outcome(argv, code, out, err)
            assert "\x1b" not in out
