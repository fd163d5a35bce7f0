"""What every benchmark script shares: the machine's description and its section of BENCHMARKS.md."""

from __future__ import annotations

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
