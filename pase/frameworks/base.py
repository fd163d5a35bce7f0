"""What every framework module shares: the settings a plan exports, the stack of transformer blocks, the cuts.

A framework runs a transformer as a stack of whole blocks (Megatron-Core's
``TransformerLayer``, torchtitan's ``layers.N``, Megatron-DeepSpeed's
``ParallelTransformerLayerPipe``): a pipeline stage, or a chunk of one under
the interleaved schedule, holds whole blocks, the first one also the
embedding and the last one also the output layer and the loss. In pase's
layer order a block is the run of layers whose names share a numbered prefix
(``h.3`` for ``h.3.attn.q``, :func:`pase.model.roofline.blocks`); a stage cut
a framework can run falls where one block ends and the next begins.

:class:`~pase.model.stage_cuts.BlockLayout` holds those positions for a graph (pase's own default cuts use
it too, :mod:`pase.model.stage_cuts`); :func:`balanced_block_cuts`
cuts the blocks into the virtual stages with the smallest slowest one (what
pase's search does for Megatron-LM and torchtitan, which take any count per
stage), and :func:`uniform_block_cuts` as DeepSpeed's pipeline splits them
(``partition_method="type:transformer"``). :func:`stage_blocks` reads the
blocks of each virtual stage back from a plan's layer names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pase.errors import ConfigurationError, PaseError
from pase.model.stage_cuts import BlockLayout, balanced_cuts, block_index, block_layout
from pase.model.training import Parallelism

__all__ = ["NotExpressibleError", "TrainingSettings", "Framework", "BlockLayout", "block_layout", "block_index",
           "balanced_block_cuts", "uniform_block_cuts", "stage_blocks", "launch_line"]


class NotExpressibleError(PaseError):
    """The plan cannot be written in the target framework's settings; the message names what cannot."""


@dataclass(frozen=True)
class TrainingSettings:
    """A plan as global 3-D settings: what the Megatron-LM, torchtitan and DeepSpeed exports write.

    ``parallelism`` holds the sizes, batch, schedule, recomputation and ZeRO
    stage; ``expert`` the expert-parallel size (1 without experts);
    ``nodes`` the nodes the devices span (1 on a flat mesh); ``stages`` per
    virtual stage its first and last layer name (empty when unknown);
    ``searched`` whether the splits inside a stage were searched per layer
    rather than Megatron's rule; ``precision`` a name of :data:`pase.ir.configs.PRECISIONS`;
    ``attention`` ``"flash"``, ``"unfused"`` or ``""`` (not recorded);
    ``blocks`` the model's transformer blocks (None: not recorded);
    ``experts`` whether the model has a mixture of experts (the expert
    settings apply then, even at ``expert`` 1); ``label`` and ``model`` for
    comments.
    """

    parallelism: Parallelism
    model: str
    label: str = ""
    expert: int = 1
    nodes: int = 1
    stages: tuple[tuple[str, str], ...] = ()
    searched: bool = False
    precision: str = "bf16"
    attention: str = ""
    blocks: int | None = None
    experts: bool = False


class Framework:
    """What one framework runs at a stated version, and how it says it.

    Subclasses set ``name`` (the ``--framework`` value), ``title`` and
    ``version`` (what the checks and exports target), ``schedules`` (the
    pipeline schedules of :mod:`pase.model.pipeline` it runs over several
    stages), ``dispatchers`` (the token dispatchers of
    :data:`pase.model.parallelism.DISPATCHERS` it runs) and implement
    :meth:`problems`.
    """

    name = ""
    title = ""
    version = ""
    schedules: tuple[str, ...] = ()
    dispatchers: tuple[str, ...] = ("alltoall", "deepep")

    def problems(self, par: Parallelism, *, precision: str = "bf16", attention: str = "",
                 experts: bool = False) -> list[str]:
        """What of ``par`` the framework cannot run in ``precision`` (a name of
        :data:`pase.ir.configs.PRECISIONS`) with ``attention`` (``"flash"``, ``"unfused"``, ``""`` unknown) for
        a model with a mixture of experts (``experts``) or without, each naming the setting; [] if it runs."""
        raise NotImplementedError

    def runs(self, par: Parallelism, *, precision: str = "bf16", attention: str = "", experts: bool = False) -> bool:
        """Whether the framework runs ``par`` (:meth:`problems` is empty); the stage cuts are the caller's."""
        return not self.problems(par, precision=precision, attention=attention, experts=experts)

    def cuts(self, weights: Sequence[float], pieces: int, layout: "BlockLayout") -> tuple[int, ...]:
        """The stage cuts the framework would run for ``pieces`` virtual stages, layer ``i`` weighing
        ``weights[i]`` seconds: by default the balanced block cuts (the framework takes any count per stage)."""
        return balanced_block_cuts(weights, pieces, layout)

    def stage_counts(self, s: "TrainingSettings", unit: str = "blocks") -> tuple[int, ...]:
        """Transformer blocks on each of ``s``'s ``p x v`` virtual stages, for an export; NotExpressibleError
        naming the fix when a cut falls inside a block, or naming the missing record when the plan lists no
        layers per stage (``unit``: what the framework places on a stage, for that message)."""
        counts, inside = stage_blocks(s.stages, s.blocks)
        if inside:
            raise NotExpressibleError(f"the plan is not expressible in {self.title}: " + "; ".join(inside)
                                      + f"; plan it with --framework {self.name}")
        if len(counts) != s.parallelism.pipeline * s.parallelism.virtual_stages:
            raise NotExpressibleError(f"the plan is not expressible in {self.title}: it lists no layers per stage "
                                      f"(pipeline.stages_detail), so the {unit} per stage are unknown")
        return counts

    def __repr__(self) -> str:
        return f"{self.title} ({self.version})"


def balanced_block_cuts(weights: Sequence[float], pieces: int, layout: BlockLayout) -> tuple[int, ...]:
    """Cut the blocks into ``pieces`` runs of whole blocks minimising the slowest run's weight, the slack
    spread evenly (:func:`pase.model.stage_cuts.balanced_cuts`).

    ``weights`` are per layer (seconds); returns layer positions of the cuts.
    Raises ``ConfigurationError`` when there are fewer blocks than pieces.
    """
    if pieces > layout.blocks:
        raise ConfigurationError(f"{pieces} pipeline stages (x virtual stages) need at least {pieces} transformer "
                                 f"blocks; the model has {layout.blocks}")
    if pieces == 1:
        return ()
    units = balanced_cuts(layout.units(weights), pieces)
    return tuple(layout.starts[u - 1] for u in units)


def uniform_block_cuts(pieces: int, layout: BlockLayout) -> tuple[int, ...]:
    """The cuts of DeepSpeed's uniform partition of the blocks (``deepspeed.runtime.utils.partition_uniform``):
    ``L // pieces`` blocks a stage, the first ``L % pieces`` stages one more.

    Raises ``ConfigurationError`` when there are fewer blocks than pieces.
    """
    if pieces > layout.blocks:
        raise ConfigurationError(f"{pieces} pipeline stages need at least {pieces} transformer blocks; the model "
                                 f"has {layout.blocks}")
    size, extra = divmod(layout.blocks, pieces)
    return layout.cuts_of([size + (q < extra) for q in range(pieces)])


def stage_blocks(stages: Sequence[tuple[str, str]], total: int | None = None) -> tuple[tuple[int, ...], list[str]]:
    """Blocks per virtual stage of a plan, from each stage's first and last layer name (``stages_detail``) and
    the model's ``total`` blocks (None: unknown, then read from the names only when the last stage ends in a block).

    Returns ``(counts, problems)``: ``problems`` names each cut that falls
    inside a block (no framework runs part of a block on one stage and the
    rest on the next), and ``counts`` is empty then or when the blocks are
    unknown.
    """
    if not stages:
        return (), []
    known = [k for k in (block_index(n) for run in stages for n in run) if k is not None]
    if total is None:
        if not known or block_index(stages[-1][1]) is None:
            return (), []
        total = max(known) + 1
    problems = []
    counts = []
    Q = len(stages)
    for q, (first, last) in enumerate(stages):
        a, b = block_index(first), block_index(last)
        if q > 0:
            before = block_index(stages[q - 1][1])
            if a is not None and before == a:
                problems.append(f"virtual stage {q} begins at {first!r}, inside block {a} (the stage before ends at "
                                f"{stages[q - 1][1]!r}); frameworks cut between whole blocks")
        lo = a if a is not None else (0 if q == 0 else total)  # a stage opening outside the blocks: the head
        hi = b if b is not None else (total - 1 if q == Q - 1 else -1)  # one closing outside them: the embedding
        counts.append(max(0, hi - lo + 1))
    return (tuple(counts) if not problems else ()), problems


def launch_line(s: TrainingSettings, program: str) -> str:
    """``torchrun`` over the plan's nodes and devices per node running ``program`` (its arguments follow)."""
    per_node = s.parallelism.devices // s.nodes
    return f"torchrun --nnodes {s.nodes} --nproc-per-node {per_node} {program}"
