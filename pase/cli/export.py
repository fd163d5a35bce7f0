"""``pase export``: a saved plan written in the form a framework reads (:mod:`pase.io.export`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pase.cli.options import BATCH, load_model
from pase.cli.text import printable, short
from pase.errors import ConfigurationError, FormatError, GraphError


def add_parser(sub, help: str) -> None:
    """Add the sub-command's parser to ``sub`` (argparse's sub-parsers), ``help`` its line in ``pase --help``."""
    from pase.io.export import FORMATS as EXPORT_FORMATS

    p = sub.add_parser("export", help=help,
                       description="Write a plan pase saved in the form a framework reads (pase.io.export; "
                                   "docs/plan-format.md). A per-layer plan (pase solve --json) exports to every "
                                   "format, to Megatron-LM, torchtitan and DeepSpeed when its layers split as "
                                   "Megatron-LM's rule does; a 3-D training plan (pase evaluate --tp ... --json, "
                                   "pase solve --search 3d --json) to every format, its dtensor and partitionspec "
                                   "on the mesh pp x dp_replicate x dp_shard x cp x tp. What the format cannot "
                                   "express is refused, naming the layers or settings (pase.frameworks: the "
                                   "versions each targets).")
    p.add_argument("plan", metavar="PLAN.json", help="a plan document pase wrote (either kind)")
    p.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="what to write")
    p.add_argument("--out", metavar="FILE", help="write to FILE (default: standard output)")
    p.add_argument("--model", help="the model of a per-layer plan: a sample name, a model file or a Hugging Face "
                                   "config.json (default: the sample the plan names, at the plan's batch)")
    p.add_argument("--batch", type=BATCH, help="the batch of --model (sample and ONNX models, Hugging Face configs)")
    p.set_defaults(func=run)


def run(args) -> int:
    """``pase export``: the plan file written in ``--format`` to ``--out`` or stdout; the exit status."""
    from pase.io.export import NotExpressibleError, export_plan, is_training_plan, load_plan_document

    label = Path(args.plan).name
    document = load_plan_document(args.plan)
    if args.model is None and args.batch is not None:
        raise GraphError("--batch applies to the model given with --model")
    if args.model is not None and is_training_plan(document) and args.format not in ("dtensor", "partitionspec"):
        raise GraphError(f"--model applies to per-layer plans and to the dtensor and partitionspec exports; "
                         f"{printable(label)} is a 3-D training plan, which names its model")
    graph = None if args.model is None else load_model(argparse.Namespace(model=args.model, batch=args.batch))
    try:
        text = export_plan(document, args.format, graph=graph)
    except (FormatError, GraphError, ConfigurationError, NotExpressibleError) as exc:
        raise type(exc)(f"{label}: {exc}") from None
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.out).write_text(text)
    except OSError as exc:
        raise FormatError(f"cannot write {short(args.out)}: {exc.strerror or exc}") from None
    print(f"wrote the {args.format} export of {printable(label)} to {printable(args.out)}", file=sys.stderr)
    return 0

