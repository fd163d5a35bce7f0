"""Command-line interface: ``pase COMMAND ...`` (also ``python -m pase``).

Each sub-command is registered by an ``_add_<name>`` function that builds its
parser and sets ``func``; a handler returns the process exit status. Errors of
pase (:class:`pase.errors.PaseError`) print one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys

from pase.errors import PaseError

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of every sub-command."""
    parser = argparse.ArgumentParser(
        prog="pase",
        description="Find per-layer parallelization strategies for DNN training (PaSE).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_solve_instance,):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PaseError as exc:
        print(f"pase: error: {exc}", file=sys.stderr)
        return 2
