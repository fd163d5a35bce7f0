"""``pase sweep`` says per point and strategy whether the plan fits device memory (text and JSON), and never
shows the time of a plan that does not fit as a result."""

from __future__ import annotations

import json
import re

import pytest

from pase.cli import main

# AlexNet (batch 128) on 1 and 4 devices of 1 GB, no reserve (a real GPU's, about 4 GB, would leave these toy
# devices nothing): on one device nothing fits (1.35 GB); on four, PaSE's plan fits and data parallelism's does not.
MIXED = ["sweep", "alexnet", "-p", "1", "4", "--memory-gb", "1", "--reserve-gb", "0"]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def table(text: str) -> tuple[list[str], list[dict[str, str]], list[str]]:
    """(header cells, rows as header -> cell, the lines after the table) of ``pase sweep``'s text."""
    lines = text.splitlines()
    header = re.split(r"\s{2,}", lines[0].strip())
    rows, rest = [], []
    for line in lines[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
        else:
            rest.append(line)
    return header, rows, rest


@pytest.fixture(scope="module")
def records():
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*MIXED, "--json"]) == 0
    return json.loads(out.getvalue())


def test_json_records_say_whether_each_plan_fits(records):
    assert {type(r["fits_memory"]) for r in records} == {bool}
    for r in records:
        assert r["fits_memory"] == (r["memory_per_device_bytes"] <= r["memory_capacity_bytes"]), r
    fits = {(r["devices"], r["strategy"]): r["fits_memory"] for r in records}
    assert fits[(1, "PaSE")] is False and fits[(4, "PaSE")] is True and fits[(4, "data parallel")] is False


def test_the_text_has_a_fits_column_that_agrees_with_the_json(capsys, records):
    code, out, _ = run(capsys, *MIXED)
    assert code == 0
    header, rows, rest = table(out)
    assert "fits" in header and header.index("fits") < header.index("step time (ms)")
    assert len(rows) == len(records)
    for row, r in zip(rows, records):
        assert (row["devices"], row["strategy"]) == (str(r["devices"]), r["label"])
        if r["fits_memory"]:
            assert row["fits"] == "yes"
            assert row["step time (ms)"] == f"{r['step_time_s'] * 1e3:.2f}"
        else:
            need = r["memory_per_device_bytes"] / 1e9
            assert row["fits"] == f"no ({need:.3g} of 1 GB)"
            # Not a result: the time and speedup of a plan that cannot run are marked.
            assert row["step time (ms)"] == f"[{r['step_time_s'] * 1e3:.2f}]"
            assert row["speedup over DP"] == f"[{r['speedup_over_dp']:.2f}]"
    assert any("does not fit device memory" in line for line in rest)


def test_without_a_capacity_nothing_is_marked(capsys):
    code, out, _ = run(capsys, "sweep", "alexnet", "-p", "2")  # paper-model: no memory limit
    assert code == 0
    _, rows, rest = table(out)
    assert rows and {row["fits"] for row in rows} == {"no limit"}
    assert not any("[" in row["step time (ms)"] for row in rows)
    assert not any("does not fit" in line for line in rest)


def test_a_need_of_hundreds_of_gb_reads_in_whole_gb(capsys):
    code, out, _ = run(capsys, "sweep", "alexnet", "-p", "1", "--memory-gb", "1", "--batch", "65536")
    assert code == 0
    _, rows, _ = table(out)
    assert all(re.fullmatch(r"no \(\d{1,3}(,\d{3})* of 1 GB\)", row["fits"]) for row in rows), rows
