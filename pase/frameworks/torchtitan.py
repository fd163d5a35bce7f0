"""torchtitan: what it runs and its job TOML, as torchtitan 0.2.2 (its last release read by TOML job files) reads it.

torchtitan 0.2.2's ``torchtitan/config/job_config.py`` (``JobConfig``) and
``ConfigManager``, which refuses an unknown field; ``ParallelDims`` checks
``dp_replicate x dp_shard x cp x tp x pp = world size``. torchtitan 0.3
replaced TOML job files by Python config registries.

What pase's 3-D plans map to:

* data parallelism: DDP (``data_parallel_replicate_degree``) only as the one
  parallelism (``parallelize_llama``: "DDP has not supported > 1D
  parallelism"), else FSDP2 over ``data_parallel_shard_degree`` with
  ``fsdp_reshard_after_forward = "always"``: pase's ZeRO 3, the weights
  gathered before each microbatch's forward and backward. FSDP2 keeps no
  ZeRO 1 or 2 (without resharding it still gathers every microbatch);
* tensor parallelism always shards the norms over the sequence (pase's
  sequence parallelism); context parallelism is left out (torchtitan shards
  the weights over the context-parallel ranks as well, FSDP over ``dp_shard
  x cp``, which pase's ZeRO does not model);
* pipeline stages: ``module_fqns_per_model_part`` lists each virtual stage's
  modules (``tok_embeddings``, ``layers.N``, ``norm``, ``output``), so any
  whole-block cut runs; schedules ``1F1B``, ``GPipe``, with chunks
  ``Interleaved1F1B``, and torch's zero-bubble ``InterleavedZeroBubble``
  (pase's ``zb1p``, with one chunk a device or several: the model parts
  listed loop over the ranks; ZB-H1 with one). The V-shaped ``ZBVZeroBubble``
  and ``DualPipeV`` are not planned (:mod:`pase.model.pipeline`);
* recomputation ``none`` and ``full`` (every block); torchtitan's selective
  checkpointing (per operator, or every n-th block) keeps other activations
  than the attention-core recomputation pase prices as ``selective``;
* FP8: the ``quantize.linear.float8`` converter with the output layer left
  in BF16 (``filter_fqns``), as pase prices it; torchao's float8 scales each
  tensor as it casts it (its ``tensorwise`` recipe: current scaling, pase's
  ``fp8-cs``; it has no delayed scaling, and its MX converter is not
  planned); attention: SDPA's fused kernels only (pase's ``flash``);
* a mixture of experts: ``expert_parallel_degree`` and
  ``expert_tensor_parallel_degree`` (and ``expert_parallel_comm_backend =
  "deepep"`` for DeepEP's dispatch). ``ParallelDims`` takes ETP equal to TP
  or 1 only ("Currently we only support ETP=TP or ETP=1"), and folds the
  expert mesh ``(pp, dp_replicate, efsdp, ep, etp)`` out of the FSDP and
  tensor-parallel ranks, ``efsdp = dp_shard x cp x tp / (ep x etp)``: EP x
  ETP must divide ``dp_shard x cp x tp``, never spanning ``dp_replicate``
  (DDP). Without EP the experts are tensor-parallel over TP (ETP = TP).
"""

from __future__ import annotations

import json
import tomllib

from pase.errors import ConfigurationError, FormatError
from pase.frameworks.base import Framework, NotExpressibleError, TrainingSettings, launch_line
from pase.ir.configs import is_fp8
from pase.model.precision import fp8_recipe
from pase.model.training import Parallelism

__all__ = ["TORCHTITAN", "Torchtitan", "SCHEDULES", "read_toml"]

# pase's schedules as torch.distributed.pipelining names them (get_schedule_class).
SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe", "zb1p": "InterleavedZeroBubble"}


class Torchtitan(Framework):
    """torchtitan 0.2.2: see the module docstring."""

    name = "torchtitan"
    title = "torchtitan"
    version = "0.2.2, TOML job files"
    schedules = ("1f1b", "interleaved", "gpipe", "zb1p")

    def problems(self, par: Parallelism, *, precision: str = "bf16", attention: str = "",
                 experts: bool = False) -> list[str]:
        """Settings of ``par`` torchtitan does not run as pase prices them (module docstring)."""
        out = []
        if precision in ("fp8", "mxfp8"):
            out.append(f"FP8 with {fp8_recipe(precision).title}: torchtitan's float8 converter (torchao), which pase "
                       "exports, scales each tensor as it casts it; re-cost with --precision fp8-cs")
        if par.expert_overlap:
            out.append("the all-to-all overlap (Megatron-Core's overlap_moe_expert_parallel_comm): torchtitan runs no "
                       "such schedule; re-cost without --ep-overlap")
        if par.shared_expert_overlap:
            out.append("the shared experts beside the all-to-all (Megatron-Core's moe_shared_expert_overlap): "
                       "torchtitan runs no such overlap; re-cost without --shared-expert-overlap")
        if experts or par.ep > 1:
            etp, ep = par.expert_tensor, par.ep
            if ep > 1 and etp not in (1, par.tensor):
                out.append(f"expert tensor parallel {etp} at tensor parallel {par.tensor}: torchtitan's ParallelDims "
                           "takes an expert tensor-parallel degree equal to the tensor-parallel degree or 1")
            elif ep == 1 and etp != par.tensor:
                out.append(f"expert tensor parallel {etp} without expert parallelism at tensor parallel "
                           f"{par.tensor}: torchtitan splits the experts over the tensor-parallel ranks then")
            folded = (1 if par.zero == 0 else par.data) * par.context * par.tensor
            if ep > 1 and folded % (ep * etp):
                out.append(f"expert parallel {ep} x expert tensor parallel {etp}: torchtitan folds them out of its "
                           f"dp_shard x cp x tp = {folded} ranks (never over DDP's dp_replicate), which "
                           f"{ep * etp} does not divide")
        if par.data > 1 and par.zero in (1, 2):
            out.append(f"ZeRO stage {par.zero}: torchtitan's FSDP2 shards the weights too (ZeRO 3), and without "
                       "resharding still gathers them every microbatch; re-cost with --zero 3, or plan with "
                       "--framework torchtitan")
        if par.data > 1 and par.zero == 0 and par.group * par.pipeline > 1:
            out.append("ZeRO stage 0 (DDP) beside tensor, context or pipeline parallelism: torchtitan runs DDP only "
                       "as the one parallelism (else FSDP2); re-cost with --zero 3")
        if par.tensor > 1 and not par.sequence_parallel:
            out.append(f"tensor parallel {par.tensor} without sequence parallelism: torchtitan's tensor-parallel "
                       "plans always shard the norms and dropouts over the sequence; re-cost with --sp")
        if par.context > 1:
            out.append(f"context parallel {par.context}: torchtitan shards the weights over the context-parallel "
                       "ranks too (FSDP over dp_shard x cp), which pase does not model")
        if par.recompute == "selective":
            out.append("selective recomputation: torchtitan's selective checkpointing (per operator or every n-th "
                       "block) keeps other activations than the attention core pase recomputes; re-cost with "
                       "--recompute full or none")
        if par.virtual_stages > 1 and par.pipeline == 1:
            out.append(f"{par.virtual_stages} virtual stages on one pipeline stage: torchtitan interleaves chunks "
                       "across several stages only")
        if attention == "unfused":
            out.append("unfused attention: torchtitan runs SDPA's fused kernels; re-cost with --attention flash")
        return out

    def model_parts(self, s: TrainingSettings) -> list[list[str]]:
        """Per virtual stage (torchtitan's model part, looped over the ranks as pase's chunks are), its modules.

        Raises :class:`NotExpressibleError` when a cut falls inside a block or
        the stages' layers are not recorded.
        """
        p = s.parallelism
        Q = p.pipeline * p.virtual_stages
        counts = self.stage_counts(s, "modules")
        parts, first = [], 0
        for q, n in enumerate(counts):
            part = (["tok_embeddings"] if q == 0 else []) + [f"layers.{k}" for k in range(first, first + n)]
            parts.append(part + (["norm", "output"] if q == Q - 1 else []))
            first += n
        return parts

    def toml(self, s: TrainingSettings) -> str:
        """torchtitan's job TOML of ``s``, the launch line in its first comment.

        Raises :class:`NotExpressibleError` naming what torchtitan does not
        run (:meth:`problems`), a cut inside a block, or layer splits searched
        per layer.
        """
        p = s.parallelism
        problems = ([f"its layer splits inside a stage were searched per layer ({s.label!r}), which the training "
                     "plan does not record and global flags cannot express"] if s.searched else [])
        problems += self.problems(p, precision=s.precision, attention=s.attention, experts=s.experts)
        if problems:
            raise NotExpressibleError("the plan is not expressible in torchtitan: " + "; ".join(problems))
        replicate, shard = (p.data, 1) if p.zero == 0 else (1, p.data)
        lines = [f"# torchtitan ({self.version}) job for pase plan {s.label or p.describe()!r} of "
                 f"{s.model or 'the model'}; world size {p.devices} = dp_replicate {replicate} x dp_shard {shard} x "
                 f"cp {p.context} x tp {p.tensor} x pp {p.pipeline}. Launch with",
                 f"# {launch_line(s, '-m torchtitan.train')} --job.config_file THIS.toml",
                 "# Add the model's own [model] and [training] settings (name, flavor, seq_len, dataset).",
                 "", "[parallelism]",
                 f"data_parallel_replicate_degree = {replicate}",
                 f"data_parallel_shard_degree = {shard}"]
        if shard > 1:
            lines.append('fsdp_reshard_after_forward = "always"')
        lines += [f"tensor_parallel_degree = {p.tensor}",
                  f"context_parallel_degree = {p.context}",
                  f"expert_parallel_degree = {s.expert}",
                  *([f"expert_tensor_parallel_degree = {p.expert_tensor}"] if s.expert > 1 else []),
                  *(['expert_parallel_comm_backend = "deepep"'] if p.dispatcher == "deepep" and s.expert > 1 else []),
                  f"pipeline_parallel_degree = {p.pipeline}"]
        if p.pipeline > 1:
            lines += [f'pipeline_parallel_schedule = "{SCHEDULES[p.schedule]}"',
                      f"pipeline_parallel_microbatch_size = {p.microbatch_size}",
                      "module_fqns_per_model_part = " + json.dumps(self.model_parts(s))]
        # Without stages torchtitan accumulates gradients over local batches; with stages a local batch is one
        # pipeline pass of all its microbatches.
        local = p.microbatch_size if p.pipeline == 1 else p.global_batch // p.data
        lines += ["", "[training]",
                  f"local_batch_size = {local}",
                  f"global_batch_size = {p.global_batch}",
                  'mixed_precision_param = "bfloat16"',
                  "", "[activation_checkpoint]",
                  f'mode = "{p.recompute}"']
        if is_fp8(s.precision):
            lines += ["", "[model]", 'converters = ["quantize.linear.float8"]',
                      "", "[quantize.linear.float8]", 'filter_fqns = ["output"]']
        return "\n".join(lines) + "\n"


TORCHTITAN = Torchtitan()


def read_toml(text: str) -> tuple[TrainingSettings, tuple[int, ...]]:
    """The settings and blocks per virtual stage of a torchtitan job TOML (:meth:`Torchtitan.toml`), for
    ``pase evaluate --plan``.

    Raises ``FormatError`` when the text is no TOML with a ``[parallelism]``
    table, or its degrees and batch do not make a valid configuration.
    """
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"not a torchtitan job TOML: {exc}") from None
    par_t, train, ac = (doc.get(k) for k in ("parallelism", "training", "activation_checkpoint"))
    if not isinstance(par_t, dict) or not isinstance(train, dict):
        raise FormatError("not a torchtitan job TOML: it has no [parallelism] and [training] tables")

    def whole(table: dict, key: str, default: int | None = None) -> int:
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FormatError(f"{key} must be a positive whole number in a torchtitan job TOML, got {value!r}")
        return value

    t, c, p, ep = (whole(par_t, f"{k}_parallel_degree", 1) for k in ("tensor", "context", "pipeline", "expert"))
    replicate, shard = whole(par_t, "data_parallel_replicate_degree", 1), whole(par_t, "data_parallel_shard_degree", 1)
    parts = par_t.get("module_fqns_per_model_part") or []
    counts = tuple(sum(1 for m in part if isinstance(m, str) and m.startswith("layers.")) for part in parts)
    names = {v: k for k, v in SCHEDULES.items()}
    schedule = names.get(par_t.get("pipeline_parallel_schedule", "1F1B"))
    if p > 1 and schedule is None:
        raise FormatError(f"pipeline_parallel_schedule {par_t.get('pipeline_parallel_schedule')!r} is none of "
                          f"{', '.join(names)}")
    d = replicate * shard
    local = whole(train, "local_batch_size")
    micro = whole(par_t, "pipeline_parallel_microbatch_size", 1) if p > 1 else local
    mode = ac.get("mode", "none") if isinstance(ac, dict) else "none"
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    try:
        par = Parallelism(tensor=t, context=c, pipeline=p, data=d, virtual_stages=max(1, len(parts) // p) if parts
                          else 1, microbatch_size=micro, global_batch=whole(train, "global_batch_size"),
                          sequence_parallel=t > 1, recompute=mode, zero=3 if shard > 1 else 0,
                          schedule=schedule if p > 1 else None, ep=ep,
                          etp=whole(par_t, "expert_tensor_parallel_degree", 1) if ep > 1 else None,
                          dispatcher="deepep" if par_t.get("expert_parallel_comm_backend") == "deepep" else "alltoall")
    except ConfigurationError as exc:
        raise FormatError(f"the torchtitan job is not a valid configuration: {exc}") from None
    fp8 = "quantize.linear.float8" in (model.get("converters") or [])
    return TrainingSettings(parallelism=par, model="", precision="fp8-cs" if fp8 else "bf16", attention="flash"), counts
