"""Command-line interface: ``pase COMMAND ...`` (also ``python -m pase``).

One module per sub-command (:mod:`.solve`, :mod:`.evaluate`, :mod:`.sweep`,
:mod:`.show`, :mod:`.instance`, :mod:`.export`; ``calibrate`` is
:mod:`pase.calibrate.command`), each with ``add_parser(sub, help)``, which
builds its parser and sets ``func``, and a handler returning the exit status.
What they share: :mod:`.options` (the options, bounded by :mod:`pase.limits`,
and what they build: the model, the cluster, the configuration options),
:mod:`.text` (tables and lines, every name from a file escaped) and
:mod:`.time_to_train`. Errors of pase (:class:`pase.errors.PaseError`) and of
the command line (an unknown option, a number out of range) print one line
on stderr and exit 2; ``--json`` output is strict JSON (no NaN or Infinity).

A sub-command's module is imported only when that sub-command runs (see
:func:`build_parser`), so a ``pase solve`` of a sample loads neither the
exporters nor the profiler.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

from pase.cli.text import printable
from pase.errors import PaseError

__all__ = ["build_parser", "main"]

# The cyclic collector's first-generation threshold while a command runs: a 3-D search builds models of ~10^5
# small objects that live until it ends, which at Python's default 700 would be scanned again and again (a fifth
# of the README case's CPU time); a command's garbage is small either way.
_GC_THRESHOLD = 100_000

# Each sub-command's one-line help (pase --help lists them) and the module adding its parser.
_HELP = {
    "solve": "find the best strategy for a model on a cluster",
    "evaluate": "cost a given strategy (a saved plan) for a model on a cluster",
    "show": "list a model's layers, dimensions and configuration counts",
    "sweep": "step time and speedup over data parallelism across device counts",
    "solve-instance": "solve a solver-level instance file (the ../shared/instances format)",
    "export": "write a plan as DTensor placements, JAX PartitionSpecs, Megatron-LM arguments, a Megatron-Bridge "
              "override, torchtitan or DeepSpeed settings, or its launch line",
    "calibrate": "measure this machine's GPU (and its links) and write a calibration file pase plans with",
}
_COMMANDS = {
    "solve": "pase.cli.solve", "evaluate": "pase.cli.evaluate", "show": "pase.cli.show", "sweep": "pase.cli.sweep",
    "solve-instance": "pase.cli.instance", "export": "pase.cli.export", "calibrate": "pase.calibrate.command",
}


def build_parser(command: str | None = None):
    """Return the argument parser of every sub-command (an :class:`argparse.ArgumentParser`).

    With ``command`` (a sub-command's name) only that sub-command gets its
    options; the others are listed, as ``pase --help`` shows them, without
    theirs. That parses ``command``'s arguments exactly as the full parser
    does, without importing the other sub-commands' modules.
    """
    from pase.cli.options import Parser

    parser = Parser(prog="pase", description="Find per-layer parallelization strategies for DNN training (PaSE).")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in _COMMANDS.items():
        if command in (None, name):
            importlib.import_module(module).add_parser(sub, _HELP[name])
        else:
            sub.add_parser(name, help=_HELP[name])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    0: done; 2: bad input (a usage error or a :class:`~pase.errors.PaseError`),
    told in one line on stderr; 1: stdout was closed by its reader (``pase
    show gpt -p 64 | head -1``), which ends the command quietly. ``--help``
    returns 0 after printing the help.
    """
    before = gc.get_threshold()
    gc.set_threshold(_GC_THRESHOLD, *before[1:])
    try:
        try:
            argv = sys.argv[1:] if argv is None else argv
            args = build_parser(argv[0] if argv and argv[0] in _COMMANDS else None).parse_args(argv)
        except SystemExit as exc:  # --help, or a usage error already told on stderr
            status = exc.code if isinstance(exc.code, int) else 2
        else:
            try:
                status = args.func(args)
            except PaseError as exc:
                print(f"pase: error: {printable(str(exc))}", file=sys.stderr)
                status = 2
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, rather than at exit
        return status
    except BrokenPipeError:
        return _stdout_closed()
    finally:
        gc.set_threshold(*before)


def _stdout_closed() -> int:
    """Status 1 after the reader of stdout went away, with stdout sent to /dev/null.

    As the Python documentation advises for SIGPIPE: the interpreter flushes
    stdout again at exit, which would fail and print a second error, so the
    descriptor is pointed at /dev/null first. The status is 1, not 0, because
    the output was cut short (as ``pipefail`` shells expect); nothing is
    printed, as for any program whose reader stopped reading.
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stream (tests) has no descriptor to redirect
        return 1
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return 1
