"""DeepSpeed: what it runs and its JSON configuration, as DeepSpeed 0.16 to 0.19 parses it.

The JSON holds the ZeRO stage and the batch arithmetic
(``train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps
x data-parallel size``), which ``deepspeed.runtime.config.DeepSpeedConfig``
checks against the world size it is given; the tensor, context and pipeline
sizes are the launcher's (Megatron-DeepSpeed's Megatron-LM arguments).

What pase's 3-D plans map to:

* ZeRO 0 to 3; with pipeline stages DeepSpeed's ``PipelineEngine`` takes
  ZeRO 0 and 1 only;
* its pipeline runs one schedule (``TrainSchedule``, 1F1B), no chunks, and
  partitions the stack uniformly (``PipelineModule(partition_method="uniform")``
  over the blocks, ``deepspeed.runtime.utils.partition_uniform``): ``L // p``
  blocks a stage, the first ``L % p`` stages one more;
* no context parallelism (DeepSpeed's sequence parallelism, Ulysses,
  exchanges heads by all-to-all) and no FP8 setting;
* bf16 mixed precision, as pase's memory model counts it;
* a mixture of experts through DeepSpeed-MoE (``deepspeed.moe.layer.MoE(ep_size=)``,
  Megatron-DeepSpeed's ``--moe-expert-parallel-size``): its engine refuses
  native MoE layers under ZeRO 3 ("Native DeepSpeed MoE is not supported
  with ZeRO Stage 3"); ``deepspeed.utils.groups`` forms the expert-parallel
  groups inside the data-parallel ranks of a stage (EP divides the data
  size) and, with tensor parallelism, splits each expert over the
  tensor-parallel ranks (ETP = TP).
"""

from __future__ import annotations

from typing import Sequence

from pase.frameworks.base import (
    BlockLayout, Framework, NotExpressibleError, TrainingSettings, stage_blocks, uniform_block_cuts,
)
from pase.ir.configs import is_fp8
from pase.model.pipeline import TITLES
from pase.model.training import Parallelism

__all__ = ["DEEPSPEED", "DeepSpeed"]


class DeepSpeed(Framework):
    """DeepSpeed 0.16 to 0.19: see the module docstring."""

    name = "deepspeed"
    title = "DeepSpeed"
    version = "0.16-0.19, tensor and pipeline sizes through Megatron-DeepSpeed"
    schedules = ("1f1b",)
    dispatchers = ("alltoall",)  # DeepSpeed-MoE's own all-to-all

    def problems(self, par: Parallelism, *, precision: str = "bf16", attention: str = "",
                 experts: bool = False) -> list[str]:
        """Settings of ``par`` DeepSpeed does not run (module docstring)."""
        out = []
        if par.dispatcher not in self.dispatchers:
            out.append("DeepEP's dispatch: DeepSpeed-MoE exchanges tokens with its own all-to-all; re-cost with "
                       "--dispatcher alltoall")
        if par.expert_overlap:
            out.append("the all-to-all overlap (Megatron-Core's overlap_moe_expert_parallel_comm): DeepSpeed-MoE runs no "
                       "such schedule; re-cost without --ep-overlap")
        if par.shared_expert_overlap:
            out.append("the shared experts beside the all-to-all (Megatron-Core's moe_shared_expert_overlap): "
                       "DeepSpeed-MoE runs no such overlap; re-cost without --shared-expert-overlap")
        if experts or par.ep > 1:
            if par.zero == 3 and par.data > 1:
                out.append("ZeRO stage 3 with a mixture of experts: DeepSpeed's engine does not run native "
                           "DeepSpeed-MoE layers under ZeRO stage 3; re-cost with --zero 2")
            if par.expert_tensor != par.tensor:
                out.append(f"expert tensor parallel {par.expert_tensor} at tensor parallel {par.tensor}: "
                           "DeepSpeed-MoE splits each expert over the tensor-parallel ranks (ETP = TP)")
            if par.data % par.ep:
                out.append(f"expert parallel {par.ep} over data parallel {par.data}: DeepSpeed-MoE forms its "
                           "expert-parallel groups inside the data-parallel ranks, so EP must divide them")
        if par.zero >= 2 and par.pipeline > 1:
            out.append(f"ZeRO stage {par.zero} with {par.pipeline} pipeline stages: DeepSpeed's pipeline engine "
                       "supports ZeRO stages 0 and 1 only")
        if par.pipeline > 1 and par.schedule not in self.schedules:
            out.append(f"the {TITLES[par.schedule]} schedule: DeepSpeed's pipeline engine runs its 1F1B train "
                       "schedule only")
        if par.virtual_stages > 1 and par.pipeline == 1:
            out.append(f"{par.virtual_stages} virtual stages on one pipeline stage")
        if par.context > 1:
            out.append(f"context parallel {par.context}: DeepSpeed's sequence parallelism (Ulysses) exchanges heads "
                       "by all-to-all, not pase's context parallelism")
        if is_fp8(precision):
            out.append("FP8 training: DeepSpeed's configuration has no FP8 setting; re-cost with --precision bf16")
        return out

    def cuts(self, weights: Sequence[float], pieces: int, layout: BlockLayout) -> tuple[int, ...]:
        """DeepSpeed's uniform partition of the blocks (module docstring), whatever the layers weigh."""
        return uniform_block_cuts(pieces, layout)

    def config(self, s: TrainingSettings) -> dict:
        """DeepSpeed's configuration of ``s``.

        Raises :class:`NotExpressibleError` naming what DeepSpeed does not run
        (:meth:`problems`), stages whose blocks differ from its uniform
        partition, or layer splits searched per layer.
        """
        p = s.parallelism
        problems = ([f"its layer splits inside a stage were searched per layer ({s.label!r}), which the training "
                     "plan does not record and global flags cannot express"] if s.searched else [])
        problems += self.problems(p, precision=s.precision, attention=s.attention, experts=s.experts)
        if p.pipeline > 1:
            counts, inside = stage_blocks(s.stages, s.blocks)
            problems += inside
            if counts:
                size, extra = divmod(sum(counts), len(counts))
                uniform = tuple(size + (q < extra) for q in range(len(counts)))
                if counts != uniform:
                    problems.append(f"its stages hold {list(counts)} transformer blocks, where DeepSpeed's uniform "
                                    f"partition gives {list(uniform)}; plan it with --framework deepspeed")
        if problems:
            raise NotExpressibleError("the plan is not expressible in DeepSpeed: " + "; ".join(problems))
        return {"train_batch_size": p.global_batch, "train_micro_batch_size_per_gpu": p.microbatch_size,
                "gradient_accumulation_steps": p.microbatches, "zero_optimization": {"stage": p.zero},
                "bf16": {"enabled": True}}

    def launch(self, s: TrainingSettings) -> str:
        """The ``deepspeed`` launcher line of ``s`` (nodes, GPUs per node)."""
        p = s.parallelism
        return (f"deepspeed --num_nodes {s.nodes} --num_gpus {p.devices // s.nodes} pretrain_gpt.py "
                f"--tensor-model-parallel-size {p.tensor} --pipeline-model-parallel-size {p.pipeline} "
                + (f"--moe-expert-parallel-size {s.expert} " if s.expert > 1 else "")
                + "--deepspeed --deepspeed_config ds_config.json")


DEEPSPEED = DeepSpeed()
