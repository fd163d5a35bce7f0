"""Megatron-LM: what it runs and its arguments, as Megatron-LM main of 2026 (with megatron-core 0.16) spells them.

Targets Megatron-LM's ``megatron/training/arguments.py`` at NVIDIA/Megatron-LM
d98e8a6 (2026-08) and megatron-core 0.16.1's ``TransformerConfig`` /
``ModelParallelConfig`` / ``DistributedDataParallelConfig``, whose field names
Megatron-LM's argument factory turns into its flags.

What pase's 3-D plans map to:

* ``t c p`` and the implied data size (world / ``t c p``): ``--tensor-model-parallel-size``,
  ``--context-parallel-size``, ``--pipeline-model-parallel-size``;
* ``v`` chunks per device: ``--num-virtual-stages-per-pipeline-rank`` (the old
  ``--virtual-pipeline-model-parallel-size`` is gone from the command line);
* blocks per (virtual) stage: nothing when they split evenly (Megatron's
  default), ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
  when only the first and last of several stages differ (no chunks), else
  ``--pipeline-model-parallel-layout`` (``E`` the embedding, ``t`` a block,
  ``L`` the loss, stages split by ``|``, chunk-major as Megatron orders them);
* ZeRO 1: the distributed optimizer (``--use-distributed-optimizer``); ZeRO 2
  and 3: Megatron-FSDP (``--use-megatron-fsdp --data-parallel-sharding-strategy
  optim_grads`` / ``optim_grads_params``), which Megatron-LM runs without
  pipeline stages only (torch FSDP2 there refuses them outright:
  ``--use-torch-fsdp2 is not supported with pipeline parallelism``);
* schedules 1F1B and, with chunks, interleaved 1F1B (no GPipe);
* recomputation: ``selective`` (its default ``--recompute-modules core_attn``,
  the attention core pase's selective mode recomputes), ``full`` (every block,
  ``uniform`` over 1 layer);
* FP8: ``--fp8-format hybrid`` with the recipe pase priced, ``--fp8-recipe
  delayed`` (``--precision fp8``), ``tensorwise`` (``fp8-cs``, current
  scaling, as NVIDIA's recipes run it on Hopper) or ``mxfp8``; Transformer
  Engine's linear layers in the blocks; the embedding and output layer stay
  BF16, as pase prices them. Delayed scaling does not recompute ``moe_act``
  or ``layernorm`` (``TransformerConfig`` refuses them);
* sequence parallelism ``--sequence-parallel``; flash or unfused attention
  ``--attention-backend``;
* a mixture of experts: ``--expert-model-parallel-size`` and
  ``--expert-tensor-parallel-size`` (and ``--moe-grouped-gemm``, the grouped
  products pase prices; Megatron-Core needs it to recompute ``moe_act``) as
  Megatron-Core's MoE parallel folding
  takes them: ``etp x ep`` devices of a stage's ``t c d`` (megatron-core
  0.16.1's ``initialize_model_parallel`` needs ``etp x ep x pp`` to divide
  the world), ETP free of the TP size, EP not a divisor of the data size;
  the experts a multiple of EP (``MoELayer``: ``num_moe_experts % ep_size``);
  the dispatcher pase priced (``--moe-token-dispatcher-type alltoall``, or
  ``flex`` with ``--moe-flex-dispatcher-backend deepep``; Megatron-Core's own
  default is ``allgather``) and token drop padded to capacity
  (``--moe-expert-capacity-factor``, ``--moe-pad-expert-input-to-capacity``),
  which DeepEP does not run (``TransformerConfig`` refuses the pair).
  Megatron-LM's ``validate_args`` further requires sequence parallelism for
  a mixture of experts under tensor parallelism ("When using MoE and tensor
  parallelism, sequence parallelism must be used"). Megatron-Core 0.16 has
  no zero-bubble pipeline schedule (its ``delay_wgrad_compute`` defers
  weight gradients only to overlap the expert all-to-all in its combined
  1F1B, not to fill the pipeline's bubble).
"""

from __future__ import annotations

import re
import shlex

from pase.errors import ConfigurationError, FormatError
from pase.frameworks.base import Framework, NotExpressibleError, TrainingSettings, launch_line, stage_blocks
from pase.model.pipeline import TITLES
from pase.model.precision import RECIPES, fp8_recipe
from pase.model.training import Parallelism

__all__ = ["MEGATRON", "Megatron", "read_script"]

_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}


class Megatron(Framework):
    """Megatron-LM main (2026-08) with megatron-core 0.16: see the module docstring."""

    name = "megatron"
    title = "Megatron-LM"
    version = "main of 2026-08 (d98e8a6) with megatron-core 0.16"
    schedules = ("1f1b", "interleaved")

    def problems(self, par: Parallelism, *, precision: str = "bf16", attention: str = "",
                 experts: bool = False) -> list[str]:
        """Settings of ``par`` Megatron-LM does not run: ZeRO 2 or 3 with pipeline stages, GPipe or a zero-bubble
        schedule over stages, chunks on one stage, a mixture of experts under tensor parallelism without
        sequence parallelism, delayed FP8 scaling with ``moe_act`` or ``layernorm`` recomputed (module
        docstring)."""
        out = []
        unsupported = sorted({"moe_act", "layernorm"} & set(par.recompute_modules or ()))
        if precision == "fp8" and par.recompute == "selective" and unsupported:
            out.append(f"recomputing {' and '.join(unsupported)} under FP8 delayed scaling: Megatron-Core refuses it "
                       "(\"Delayed scaling does not support moe_act and layernorm recompute\"); re-cost with "
                       "--precision fp8-cs")
        if (experts or par.ep > 1) and par.tensor > 1 and not par.sequence_parallel:
            out.append(f"a mixture of experts at tensor parallel {par.tensor} without sequence parallelism: "
                       "Megatron-LM requires sequence parallelism with MoE and tensor parallelism; re-cost with "
                       "--sp")
        if par.zero >= 2 and par.data > 1 and par.pipeline > 1:
            out.append(f"ZeRO stage {par.zero} with {par.pipeline} pipeline stages: Megatron-LM shards gradients "
                       f"{'and weights ' if par.zero == 3 else ''}only through Megatron-FSDP, without pipeline "
                       "stages (its distributed optimizer shards the optimizer state: ZeRO 1); re-cost with --zero 1, "
                       "or plan with --framework megatron")
        if par.schedule not in self.schedules and par.pipeline > 1:
            out.append(f"the {TITLES[par.schedule]} schedule: Megatron-LM runs 1F1B or, with virtual stages, the "
                       "interleaved schedule")
        if par.virtual_stages > 1 and par.pipeline == 1:
            out.append(f"{par.virtual_stages} virtual stages on one pipeline stage: Megatron-LM interleaves chunks "
                       "across several stages only")
        if par.expert_overlap:  # TransformerConfig's checks of overlap_moe_expert_parallel_comm
            if par.ep == 1:
                out.append("the all-to-all overlap without expert parallelism: Megatron-Core overlaps only an "
                           "expert-parallel dispatch; add --ep")
            if par.pipeline > 1 and par.virtual_stages == 1:
                out.append("the all-to-all overlap over pipeline stages without virtual stages: Megatron-Core runs "
                           "it in the interleaved schedule only; add --vp")
            if par.recompute == "full":
                out.append("the all-to-all overlap with full recomputation: Megatron-Core refuses the pair; use "
                           "--recompute selective or none")
        return out

    # -- the export ------------------------------------------------------------------------------------

    def layer_arguments(self, s: TrainingSettings) -> list[str]:
        """The arguments placing the transformer blocks on the (virtual) stages (module docstring); [] for one
        stage. Raises :class:`NotExpressibleError` when a cut falls inside a block or the stages' layers are
        not recorded."""
        p = s.parallelism
        Q = p.pipeline * p.virtual_stages
        if Q == 1:
            return []
        counts = self.stage_counts(s)
        total = sum(counts)
        args = ["--num-layers", str(total)]
        if len(set(counts)) == 1:
            return args + (["--num-virtual-stages-per-pipeline-rank", str(p.virtual_stages)]
                           if p.virtual_stages > 1 else [])
        if p.virtual_stages == 1 and len(set(counts[1:-1])) <= 1 and min(counts) > 0:
            return args + ["--decoder-first-pipeline-num-layers", str(counts[0]),
                           "--decoder-last-pipeline-num-layers", str(counts[-1])]
        stages = []
        for q, n in enumerate(counts):
            body = "t" if n == 1 else f"t*{n}" if n else ""
            stages.append(("E" if q == 0 else "") + body + ("L" if q == Q - 1 else ""))
        return args + ["--pipeline-model-parallel-layout", "|".join(stages)]

    def arguments(self, s: TrainingSettings) -> list[str]:
        """Megatron-LM's command-line arguments of ``s`` (the data size is the world's, :meth:`script`).

        Raises :class:`NotExpressibleError` naming what Megatron-LM does not
        run (:meth:`problems`) or cannot place (:meth:`layer_arguments`), and
        layer splits searched per layer.
        """
        p = s.parallelism
        problems = _searched(s) + self.problems(p, precision=s.precision, attention=s.attention,
                                                experts=s.experts)
        if problems:
            raise NotExpressibleError("the plan is not expressible in Megatron-LM: " + "; ".join(problems))
        args = ["--tensor-model-parallel-size", str(p.tensor), "--pipeline-model-parallel-size", str(p.pipeline),
                "--context-parallel-size", str(p.context), "--expert-model-parallel-size", str(s.expert)]
        if s.expert > 1 or s.experts:  # each expert's width split as the plan splits it (by default: the TP size)
            args += ["--expert-tensor-parallel-size", str(p.expert_tensor)]
        if s.experts:  # pase prices the local experts' products as Transformer Engine's grouped linear layer
            args.append("--moe-grouped-gemm")
            for field, value in _moe_settings(p).items():
                args += [f"--{field.replace('_', '-')}"] + ([] if value is True else [str(value)])
        args += self.layer_arguments(s)
        if p.sequence_parallel and p.tensor > 1:
            args.append("--sequence-parallel")
        if p.recompute == "selective":
            args += ["--recompute-granularity", "selective"]
            if p.recompute_modules is not None:  # Megatron-Core's modules (pase.model.recompute), its nargs list
                args += ["--recompute-modules", *p.recompute_modules]
        elif p.recompute == "full":
            # pase's full recomputation keeps each transformer layer's input and recomputes the layer.
            args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
        if p.zero == 1 and p.data > 1:
            args.append("--use-distributed-optimizer")
        elif p.zero >= 2 and p.data > 1:
            args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", _SHARDING[p.zero]]
        args.append("--bf16")
        recipe = fp8_recipe(s.precision)
        if recipe is not None:
            args += ["--fp8-format", "hybrid", "--fp8-recipe", recipe.megatron]
        if s.attention in ("flash", "unfused"):
            args += ["--attention-backend", s.attention]
        args += ["--micro-batch-size", str(p.microbatch_size), "--global-batch-size", str(p.global_batch)]
        return args

    def script(self, s: TrainingSettings) -> str:
        """The ``torchrun`` line and Megatron-LM arguments of ``s``, as shell text with comments.

        The world size ``nodes x devices per node`` fixes Megatron-LM's data
        size, ``world / (t p c)``. Raises as :meth:`arguments`.
        """
        p = s.parallelism
        args = self.arguments(s)
        lines = [f"# Megatron-LM ({self.version}) for pase plan {s.label or p.describe()!r} of "
                 f"{s.model or 'the model'}: {s.nodes} nodes x {p.devices // s.nodes} GPUs = world size "
                 f"{p.devices}; data parallel {p.data} = {p.devices} / (tp {p.tensor} x pp {p.pipeline} x cp "
                 f"{p.context}).",
                 "# Add the model's own arguments (--hidden-size, --num-attention-heads, --seq-length ...) and data "
                 "paths."]
        if len(s.stages) > 1:
            counts, _ = stage_blocks(s.stages, s.blocks)
            lines.append(f"# Transformer blocks per (virtual) stage, in Megatron's chunk-major order: "
                         f"{', '.join(map(str, counts))}.")
        pairs = []
        i = 0
        while i < len(args):
            take = 2 if i + 1 < len(args) and not args[i + 1].startswith("--") else 1
            pairs.append(" ".join(shlex.quote(a) for a in args[i:i + take]))
            i += take
        lines.append(launch_line(s, "pretrain_gpt.py") + " \\")
        lines += [f"  {a} \\" for a in pairs[:-1]] + [f"  {pairs[-1]}"]
        return "\n".join(lines) + "\n"

    def bridge(self, s: TrainingSettings) -> str:
        """A Megatron-Bridge recipe override of ``s``: one ``section.field=value`` per line (Hydra syntax, as
        Bridge's training scripts take them after the recipe), with the launch line as a comment.

        The ``model.*`` fields are megatron-core's ``TransformerConfig``
        fields, ``ddp.*`` its ``DistributedDataParallelConfig``'s, ``optimizer.*``
        its ``OptimizerConfig``'s and ``train.*`` Bridge's ``TrainingConfig``'s.
        Raises as :meth:`arguments`.
        """
        args = self.arguments(s)  # refuses what Megatron cannot run, and places the layers
        p = s.parallelism
        flags = _flags(args)
        model = {"tensor_model_parallel_size": p.tensor, "pipeline_model_parallel_size": p.pipeline,
                 "context_parallel_size": p.context, "expert_model_parallel_size": s.expert,
                 **({"expert_tensor_parallel_size": p.expert_tensor} if s.expert > 1 or s.experts else {}),
                 "sequence_parallel": p.sequence_parallel and p.tensor > 1}
        if p.virtual_stages > 1 and "--pipeline-model-parallel-layout" not in flags:
            model["virtual_pipeline_model_parallel_size"] = p.virtual_stages
        for flag, field in (("--decoder-first-pipeline-num-layers", "num_layers_in_first_pipeline_stage"),
                            ("--decoder-last-pipeline-num-layers", "num_layers_in_last_pipeline_stage"),
                            ("--pipeline-model-parallel-layout", "pipeline_model_parallel_layout"),
                            ("--recompute-granularity", "recompute_granularity"),
                            ("--recompute-method", "recompute_method"),
                            ("--recompute-num-layers", "recompute_num_layers"),
                            ("--fp8-format", "fp8"), ("--fp8-recipe", "fp8_recipe")):
            if flag in flags:
                model[field] = flags[flag]
        if s.experts:
            model["moe_grouped_gemm"] = True
            model.update(_moe_settings(p))
        if p.recompute == "selective" and p.recompute_modules is not None:
            model["recompute_modules"] = "[" + ",".join(p.recompute_modules) + "]"
        lines = [f"# Megatron-Bridge overrides (model: megatron-core 0.16's TransformerConfig) for pase plan "
                 f"{s.label or p.describe()!r} of {s.model or 'the model'}; launch with",
                 f"# {launch_line(s, 'RECIPE_SCRIPT.py')} <these overrides>"]
        lines += [f"model.{k}={_hydra(v)}" for k, v in model.items()]
        lines += [f"train.micro_batch_size={p.microbatch_size}", f"train.global_batch_size={p.global_batch}"]
        distributed = p.zero >= 1 and p.data > 1
        lines += [f"ddp.use_distributed_optimizer={_hydra(distributed)}",
                  f"optimizer.use_distributed_optimizer={_hydra(distributed)}"]
        if "--use-megatron-fsdp" in flags:
            lines += ["ddp.use_megatron_fsdp=true",
                      f"ddp.data_parallel_sharding_strategy={flags['--data-parallel-sharding-strategy']}"]
        return "\n".join(lines) + "\n"


def _moe_settings(p: Parallelism) -> dict:
    """TransformerConfig fields of the token dispatch pase priced: the dispatcher (Megatron-Core defaults to
    ``allgather``; pase prices ``alltoall`` or DeepEP's flex dispatcher), token drop padded to capacity, the
    1F1B all-to-all overlap and the shared experts beside the all-to-all."""
    out: dict = ({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}
                 if p.dispatcher == "deepep" else {"moe_token_dispatcher_type": "alltoall"})
    if p.capacity_factor is not None:
        out.update(moe_expert_capacity_factor=p.capacity_factor, moe_pad_expert_input_to_capacity=True)
    if p.expert_overlap:
        out["overlap_moe_expert_parallel_comm"] = True
    if p.shared_expert_overlap:
        out["moe_shared_expert_overlap"] = True
    return out


def _searched(s: TrainingSettings) -> list[str]:
    return [f"its layer splits inside a stage were searched per layer ({s.label!r}), which the training plan does "
            "not record and global flags cannot express; export a plan with Megatron layer splits"
            ] if s.searched else []


def _flags(args: list[str]) -> dict[str, str | None]:
    """Flag -> its value (None for a switch) of an argument list."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
        out[args[i]] = args[i + 1] if has_value else None
        i += 2 if has_value else 1
    return out


def _recompute_modules(args: list[str]) -> tuple[str, ...] | None:
    """The values of ``--recompute-modules`` (a list flag) in an argument list, None without it."""
    if "--recompute-modules" not in args:
        return None
    rest = args[args.index("--recompute-modules") + 1:]
    return tuple(rest[:next((i for i, w in enumerate(rest) if w.startswith("--")), len(rest))])


def _hydra(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return f'"{text}"' if "|" in text or "*" in text else text


MEGATRON = Megatron()


def _layout_counts(layout: str) -> tuple[int, ...]:
    """Transformer blocks per stage of a ``--pipeline-model-parallel-layout`` as :meth:`Megatron.layer_arguments`
    writes it (``E``, ``t`` or ``t*n``, ``L`` per stage, ``|`` between stages)."""
    counts = []
    for stage in layout.split("|"):
        body = stage.removeprefix("E").removesuffix("L")
        if body and not re.fullmatch(r"t(\*\d+)?", body):
            raise FormatError(f"--pipeline-model-parallel-layout stage {stage!r} is not E, t, t*N, L in that order")
        counts.append(0 if not body else int(body[2:]) if "*" in body else 1)
    return tuple(counts)


def read_script(text: str) -> tuple[TrainingSettings, tuple[int, ...]]:
    """The settings and blocks per virtual stage of a Megatron-LM export (:meth:`Megatron.script`), for
    ``pase evaluate --plan`` (the blocks are empty when the export leaves them to Megatron's even split of a
    model whose layer count it does not give).

    Raises ``FormatError`` when the text has no ``torchrun ... pretrain_gpt.py`` line or its sizes are not whole
    numbers that make a valid configuration.
    """
    words = shlex.split(" ".join(line for line in text.replace("\\\n", " ").splitlines()
                                 if not line.lstrip().startswith("#")))
    if "torchrun" not in words or not any(w.endswith(".py") for w in words):
        raise FormatError("not a Megatron-LM export: no 'torchrun ... pretrain_gpt.py' line")
    script = next(i for i, w in enumerate(words) if w.endswith(".py"))
    launcher, flags = _flags(words[words.index("torchrun") + 1:script]), _flags(words[script + 1:])

    def whole(table: dict, flag: str, default: int | None = None) -> int:
        value = table.get(flag, default)
        if value is None or not str(value).isdigit() or int(value) < 1:
            raise FormatError(f"{flag} must be a positive whole number in a Megatron-LM export, got {value!r}")
        return int(value)

    world = whole(launcher, "--nnodes") * whole(launcher, "--nproc-per-node")
    t, p, c = (whole(flags, f"--{k}-parallel-size", 1) for k in ("tensor-model", "pipeline-model", "context"))
    if world % (t * p * c):
        raise FormatError(f"tp {t} x pp {p} x cp {c} does not divide the world size {world}")
    counts: tuple[int, ...] = ()
    v = whole(flags, "--num-virtual-stages-per-pipeline-rank", 1)
    layers = whole(flags, "--num-layers") if "--num-layers" in flags else None
    if "--pipeline-model-parallel-layout" in flags:
        counts = _layout_counts(str(flags["--pipeline-model-parallel-layout"]))
        v = len(counts) // p
    elif "--decoder-first-pipeline-num-layers" in flags and layers is not None:
        first = whole(flags, "--decoder-first-pipeline-num-layers")
        last = whole(flags, "--decoder-last-pipeline-num-layers")
        middle = (layers - first - last) // max(p - 2, 1)
        counts = (first, *[middle] * (p - 2), last)
    elif layers is not None and layers % (p * v) == 0:
        counts = (layers // (p * v),) * (p * v)
    zero = (1 if "--use-distributed-optimizer" in flags else 0) if "--use-megatron-fsdp" not in flags else {
        v_: k for k, v_ in _SHARDING.items()}.get(str(flags.get("--data-parallel-sharding-strategy")), 0)
    granularity = flags.get("--recompute-granularity")
    capacity = flags.get("--moe-expert-capacity-factor")
    try:
        capacity = float(capacity) if capacity else None
    except ValueError:
        raise FormatError(f"--moe-expert-capacity-factor must be a number in a Megatron-LM export, got "
                          f"{capacity!r}") from None
    try:
        par = Parallelism(tensor=t, pipeline=p, context=c, data=world // (t * p * c), virtual_stages=v,
                          microbatch_size=whole(flags, "--micro-batch-size"),
                          global_batch=whole(flags, "--global-batch-size"),
                          sequence_parallel="--sequence-parallel" in flags, recompute=granularity or "none",
                          recompute_modules=_recompute_modules(words[script + 1:]),
                          zero=zero, ep=whole(flags, "--expert-model-parallel-size", 1),
                          etp=whole(flags, "--expert-tensor-parallel-size") if "--expert-tensor-parallel-size" in flags
                          else None,
                          capacity_factor=capacity,
                          dispatcher="deepep" if flags.get("--moe-token-dispatcher-type") == "flex" else "alltoall",
                          expert_overlap="--overlap-moe-expert-parallel-comm" in flags,
                          shared_expert_overlap="--moe-shared-expert-overlap" in flags)
    except ConfigurationError as exc:
        raise FormatError(f"the Megatron-LM export is not a valid configuration: {exc}") from None
    attention = str(flags.get("--attention-backend") or "")
    precision = "bf16"
    if "--fp8-format" in flags:
        recipes = {r.megatron: r.precision for r in RECIPES.values()}
        recipe = str(flags.get("--fp8-recipe") or "delayed")  # Megatron-Core's default
        if recipe not in recipes:
            raise FormatError(f"--fp8-recipe {recipe}: pase prices the FP8 recipes {', '.join(recipes)} only; "
                              "export the plan with one of them")
        precision = recipes[recipe]
    return TrainingSettings(parallelism=par, model="", nodes=whole(launcher, "--nnodes"), precision=precision,
                            attention=attention if attention in ("flash", "unfused") else ""), counts
