"""Folded against unfolded: the exact search with and without min-plus folding of repeated blocks (issue 13).

For every sample model whose cost graph the exact search takes at ``p`` devices
of ``dgx-a100`` (the mesh split space, the preset's default), ``p`` in 8, 16,
32 and 64, it solves the cost graph twice: with :func:`pase.search.fold.solve`
(what :func:`pase.search.solver.exact` runs) and with the plain
:func:`pase.search.exact.solve`, and compares the optima (relative difference;
the terms are the same, only the order of the additions differs). It gives
the blocks folded and each search's time (median of ``RUNS``, the search
alone: the cost model is built once). A search the memory guard refuses is
marked so; the language models, which the CLI plans with the 3-D search, are
left out above 32 devices.

Usage: ``python benchmarks/bench_fold.py [--no-write]``.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time

from _report import machine, publish

from pase.errors import SearchTooLargeError
from pase.hardware.cluster import preset
from pase.ir.configs import ConfigOptions
from pase.model.cost import build_cost_model, options_on
from pase.models import SAMPLES, sample
from pase.search import exact, fold

SECTION = "## Folded against unfolded: the exact search on every sample (issue 13)"
RUNS = 3
DEVICES = (8, 16, 32, 64)
# Planned with the 3-D search by the CLI; their per-layer graphs at 64 devices are large for a benchmark.
LANGUAGE_MODELS = ("llama3", "megatron-", "gpt3", "mixtral", "deepseek")


def _timed(search, graph) -> tuple[float, object]:
    """Median seconds of ``RUNS`` searches and the last result."""
    times, result = [], None
    for _ in range(RUNS):
        began = time.perf_counter()
        result = search(graph)
        times.append(time.perf_counter() - began)
    return statistics.median(times), result


def run() -> str:
    rows, worst = [], 0.0
    for name in SAMPLES:
        for p in DEVICES:
            if name.startswith(LANGUAGE_MODELS) and p > 32:
                continue
            cluster = preset("dgx-a100", p, calibrated=False)
            graph = build_cost_model(sample(name), cluster, options_on(ConfigOptions(), cluster)).cost_graph()
            try:
                t_fold, folded = _timed(fold.solve, graph)
                t_plain, plain = _timed(exact.solve, graph)
            except SearchTooLargeError:
                rows.append(f"| {name} | {p} | refused by the memory guard | | | | |")
                continue
            diff = abs(folded.cost - plain.cost) / max(abs(plain.cost), 1e-300)
            worst = max(worst, diff)
            blocks = getattr(folded, "blocks_folded", 0)
            rows.append(f"| {name} | {p} | {plain.cost:.6g} | {diff:.1e} | {blocks} | {t_plain:.3f} | {t_fold:.3f} |")
            print(rows[-1], file=sys.stderr)
    header = ("| sample | p | optimum (FLOP-equivalents) | relative difference | blocks folded | unfolded search s | "
              "folded search s |\n| --- | --- | --- | --- | --- | --- | --- |")
    return (f"{SECTION}\n\n`python benchmarks/bench_fold.py`, {datetime.date.today()}, {machine()}. The cost graph "
            f"of each sample on `dgx-a100` (mesh split space), solved with and without folding; search time only, "
            f"median of {RUNS}.\n\n{header}\n" + "\n".join(rows)
            + f"\n\nThe largest relative difference between the two optima is {worst:.1e}: the same optimum "
            "wherever both run. Folding is skipped where it would not pay (0 blocks: short chains, as ResNet's "
            "stages at small p, or a fold saving fewer sums than it costs).\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    publish(run(), parser.parse_args().no_write)


if __name__ == "__main__":
    main()
