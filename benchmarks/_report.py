"""What every benchmark script shares: the machine's description and its section of BENCHMARKS.md."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def machine() -> str:
    """CPU model, cores, Python and numpy versions, and the load average before the run."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            model = names[0]
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    import numpy

    return (f"{model}, {cores} cores, Python {platform.python_version()}, numpy {numpy.__version__}, "
            f"load average before the run {os.getloadavg()[0]:.1f}")


def write_section(text: str, path: Path = BENCHMARKS) -> None:
    """Replace the section ``text`` starts with (its first line, a level-2 heading) in ``path``, up to
    the next level-2 heading, or append it."""
    section = text.splitlines()[0]
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(section)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: text + "\n", old)
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new.rstrip("\n") + "\n")


def publish(text: str, no_write: bool) -> None:
    """Print the section (``no_write``) or write it into BENCHMARKS.md."""
    if no_write:
        print(text)
    else:
        write_section(text)
        print(f"wrote {text.splitlines()[0]!r} in {BENCHMARKS}")


def audit_table(audits: dict[str, dict[str, tuple[float, float | None]]], hand: str) -> list[str]:
    """The rows of an audit's table: per class (each audit's keys, in order), seconds a step as pase prices it and
    by hand (blank where there is no hand estimate); ``hand`` heads each hand column after the audit's label."""
    head = "| class (seconds a step, busiest device) | " + " | ".join(f"{l} pase | {hand.format(l)}" for l in audits)
    lines = [head + " |", "| --- |" + " ---: | ---: |" * len(audits)]
    for cls in next(iter(audits.values())):
        cells = []
        for a in audits.values():
            p, h = a[cls]
            cells += [f"{p if abs(p) > 5e-4 else 0.0:.3f}", "" if h is None else f"{h:.3f}"]
        name = "step (hand: the published step)" if cls == "step" else cls
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def audit_main(section: str, script: str, doc: str, run) -> int:
    """An audit script's command line: ``run()`` gives (table, seconds); the section is ``section``, the line that
    says how and where it ran, ``doc``'s second paragraph on (up to ``Usage``) and the table."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    table, elapsed = run()
    publish("\n".join([section, "", f"`python benchmarks/{script}` on {datetime.date.today().isoformat()} "
                       f"({elapsed:.0f} s); {machine()}.", "", doc.split("\n\n", 1)[1].split("\nUsage")[0].strip(),
                       "", table, ""]), args.no_write)
    return 0
