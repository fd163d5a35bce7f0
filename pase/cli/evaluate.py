"""``pase evaluate``: cost a given strategy -- a saved per-layer plan, a 3-D configuration given by its options,
a saved 3-D plan or a framework's export -- on the cluster the options describe."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pase.analysis.baselines import evaluate_strategy
from pase.cli import time_to_train
from pase.cli.options import (
    add_cluster_options,
    add_model_options,
    add_training_options,
    builder_of,
    check_tp_overlap,
    cluster_of,
    global_batch_of,
    load_model,
    options_of,
    training_asked,
)
from pase.cli.text import print_json, print_layers, print_memory, print_training, printable, short
from pase.errors import ConfigurationError, FormatError, GraphError
from pase.io.strategy_json import load_strategy


def add_parser(sub, help: str) -> None:
    """Add the sub-command's parser to ``sub`` (argparse's sub-parsers), ``help`` its line in ``pase --help``."""
    p = sub.add_parser("evaluate", help=help,
                       description="Cost the strategy of a plan file for MODEL on the cluster the options describe, "
                                   "e.g. a plan saved by `pase solve --json` or the app, on other hardware. Layers "
                                   "the plan leaves out are data parallel. docs/plan-format.md describes the file.")
    add_model_options(p, seq=False)
    add_cluster_options(p)
    p.add_argument("--plan", metavar="PLAN.json",
                   help="strategy file: a plan (pase solve --json, the app's download) or {layer: [factors...]}")
    add_training_options(p)
    p.add_argument("--json", action="store_true", help="print the evaluated plan as one JSON object")
    time_to_train.add_options(p)
    p.set_defaults(func=run)


def _evaluate_training(args) -> int:
    """``pase evaluate MODEL --tp ...``: one 3-D configuration; options left out are chosen and reported."""
    from pase.model.training import Parallelism, evaluate_training

    cluster = cluster_of(args)
    check_tp_overlap(args, cluster)
    build, batch = builder_of(args), global_batch_of(args)
    t, pp, cp = args.tp or 1, args.pp or 1, args.cp or 1
    if args.dp is None:
        if cluster.devices % (t * pp * cp):
            raise ConfigurationError(f"tp {t} x pp {pp} x cp {cp} = {t * pp * cp} does not divide the "
                                     f"{cluster.devices} devices; choose sizes whose product divides them")
        dp = cluster.devices // (t * pp * cp)
    else:
        dp = args.dp
    if t * pp * cp * dp != cluster.devices:
        raise ConfigurationError(f"tp {t} x pp {pp} x cp {cp} x dp {dp} = {t * pp * cp * dp:,} devices, but the "
                                 f"cluster has {cluster.devices:,}; choose sizes whose product is the device count")
    chosen = [] if args.microbatch_size is not None else ["microbatch size"]
    microbatches = [args.microbatch_size] if args.microbatch_size is not None else [
        b for b in (1, 2, 4, 8) if batch % (dp * b) == 0]
    schedule = args.schedule or ("interleaved" if args.vp and args.vp > 1 else "1f1b")
    if schedule == "interleaved" and args.vp is None:
        chosen.append("virtual stages")
    virtual = [args.vp] if args.vp is not None else ([2, 3, 4] if schedule == "interleaved" else [1])
    if not microbatches:
        raise ConfigurationError(f"the global batch {batch} does not split over {dp} data-parallel replicas; "
                                 "give a --global-batch that is a multiple of --dp")
    best, error = None, None
    if args.framework is not None:
        from pase.frameworks import framework, framework_cuts

        fw = None if args.framework == "any" else framework(args.framework)
    cache: dict = {}
    for b in microbatches:
        for v in virtual:
            try:
                par = Parallelism(tensor=t, pipeline=pp, data=dp, context=cp, virtual_stages=v, microbatch_size=b,
                                  global_batch=batch, sequence_parallel=args.sp,
                                  recompute=args.recompute or ("selective" if args.recompute_modules else "none"),
                                  recompute_modules=args.recompute_modules,
                                  zero=args.zero or 0, schedule=schedule, tp_overlap=args.tp_overlap,
                                  tp_comm_overlap=args.tp_comm_overlap, ep=args.ep or 1, etp=args.etp,
                                  expert_imbalance=args.expert_imbalance or 1.0,
                                  capacity_factor=args.capacity_factor, expert_overlap=args.ep_overlap,
                                  fp8_dispatch=args.fp8_dispatch, dispatcher=args.dispatcher or "alltoall",
                                  shared_expert_overlap=args.shared_expert_overlap,
                                  overlap=cluster.efficiency is not None if args.overlap is None else args.overlap)
                if args.framework is not None:
                    par = replace(par, stage_cuts=framework_cuts(fw, build, cluster, par, options_of(args), cache))
                got = evaluate_training(build, cluster, par, options=options_of(args), cache=cache)
            except ConfigurationError as exc:
                if len(microbatches) * len(virtual) == 1:
                    raise
                error = exc
                continue
            rank = (not got.fits_memory if got.fits_memory is not None else False, got.step_time_s)
            if best is None or rank < best[0]:
                best = (rank, got)
    if best is None:
        raise error
    result = replace(best[1], chosen=tuple(chosen))
    return _report_training(result, args, build)


def _report_training(result, args, build) -> int:
    """Print an evaluated 3-D plan (JSON or text) with its time to train when asked; the exit code, 0."""
    trained = time_to_train.when_asked(result, args, build(1).parameter_count)
    if args.json:
        print_json(result.to_dict() if trained is None else {**result.to_dict(), "time_to_train": trained.to_dict()})
        return 0
    print_training(result)
    time_to_train.print_estimate(trained)
    return 0


def _strategy(args) -> tuple[dict[str, tuple[int, ...]], str]:
    """The strategy ``pase evaluate`` costs (layer name -> configuration, possibly partial) and its label."""
    path = Path(args.plan)
    return load_strategy(path), path.name


def run(args) -> int:
    """``pase evaluate``: a saved plan (per-layer, 3-D or a framework's export) or a 3-D configuration costed;
    the exit status."""
    from pase.io.export import is_training_plan, load_plan_document

    time_to_train.checked(args)
    if training_asked(args):
        if args.plan is not None:
            raise GraphError("give either --plan PLAN.json or a 3-D configuration (--tp, --pp, --dp...), not both")
        return _evaluate_training(args)
    if args.plan is None:
        raise GraphError("give the strategy to cost: --plan PLAN.json, or a 3-D configuration "
                         "(--tp T --pp P --dp D ...)")
    try:
        document = load_plan_document(args.plan)
    except FormatError:
        document = None  # the strategy reader below reports the problem in its own words
        if _looks_exported(args.plan):
            return _evaluate_exported(args)
    if is_training_plan(document):
        return _evaluate_training_plan(args, document)
    if isinstance(document, dict) and "zero_optimization" in document and "train_batch_size" in document:
        return _evaluate_exported(args)  # a DeepSpeed configuration: says what it lacks
    graph, cluster, options = load_model(args), cluster_of(args), options_of(args)
    strategy, label = _strategy(args)
    try:
        result = evaluate_strategy(graph, cluster, strategy, options=options, label=label)
    except (GraphError, ConfigurationError) as exc:
        raise type(exc)(f"{label}: {exc}") from None
    trained = time_to_train.when_asked(result, args)
    if args.json:
        print_json(result.to_dict() if trained is None else {**result.to_dict(), "time_to_train": trained.to_dict()})
        return 0
    print_layers(result)
    given = sum(1 for layer in graph if layer.name in strategy)
    print(f"{given} of {len(graph)} layers configured by {printable(label)}" +
          ("" if given == len(graph) else f"; the other {len(graph) - given} data parallel"))
    print_memory(result)
    time_to_train.print_estimate(trained)
    return 0


def _looks_exported(path: str) -> bool:
    """Whether the file at ``path`` reads like a Megatron-LM or torchtitan export (pase.frameworks.read_export)."""
    from pase.io.files import read_limited
    from pase.limits import MAX_FILE_BYTES

    text = read_limited(Path(path), MAX_FILE_BYTES, what="plan file").decode("utf-8", "replace")
    return ("torchrun" in text and ".py" in text) or "[parallelism]" in text


def _evaluate_exported(args) -> int:
    """``pase evaluate MODEL --plan EXPORT``: a Megatron-LM or torchtitan export of a 3-D plan, re-costed on the
    cluster the options describe in the export's precision and attention (its stage cuts from its blocks per
    stage)."""
    from pase.frameworks import block_layout, read_export
    from pase.io.files import read_limited
    from pase.limits import MAX_FILE_BYTES
    from pase.model.training import evaluate_training

    label = Path(args.plan).name
    text = read_limited(Path(args.plan), MAX_FILE_BYTES, what="plan file").decode("utf-8", "replace")
    try:
        name, settings, counts = read_export(text)
    except FormatError as exc:
        raise FormatError(f"{label}: {exc}") from None
    build, cluster = builder_of(args), cluster_of(args)
    par = settings.parallelism
    try:
        cuts = None
        if par.pipeline * par.virtual_stages > 1:
            if not counts:
                raise FormatError("it gives no transformer blocks per stage (--num-layers or a layout)")
            cuts = block_layout([layer.name for layer in build(1).layers]).cuts_of(counts)
        par = replace(par, stage_cuts=cuts, overlap=cluster.efficiency is not None)
        options = replace(options_of(args), precision=settings.precision,
                          attention=settings.attention or options_of(args).attention)
        result = evaluate_training(build, cluster, par, options=options, label=f"{label} ({name}): {par.describe()}")
    except (GraphError, ConfigurationError, FormatError) as exc:
        raise type(exc)(f"{label}: {exc}") from None
    return _report_training(result, args, build)


def _evaluate_training_plan(args, document: dict) -> int:
    """``pase evaluate MODEL --plan TRAINING.json``: the plan's 3-D configuration, stage cuts included, re-costed
    on the cluster the options describe (the gradient reduction overlapped on a calibrated cluster)."""
    from pase.io.export import training_from_dict
    from pase.model.training import evaluate_training

    label = Path(args.plan).name
    try:
        settings = training_from_dict(document)
    except FormatError as exc:
        raise FormatError(f"{label}: {exc}") from None
    if settings.searched:
        raise GraphError(f"{label}: its layer splits inside a stage were searched per layer, and a training plan "
                         "does not record them; run pase solve --search 3d --intra-search on this cluster instead")
    build, cluster = builder_of(args), cluster_of(args)
    if settings.model and settings.model != build(1).name:
        raise GraphError(f"{label} is a plan for {short(settings.model)}, not {short(args.model)}; its stage cuts "
                         "are positions in that model's layers")
    par = replace(settings.parallelism, overlap=cluster.efficiency is not None)
    try:
        result = evaluate_training(build, cluster, par, options=options_of(args), label=f"{label}: {par.describe()}")
    except (GraphError, ConfigurationError) as exc:
        raise type(exc)(f"{label}: {exc}") from None
    return _report_training(result, args, build)

