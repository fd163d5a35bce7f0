"""NVIDIA's published layouts for a problem, priced by pase: is the searched plan better than a known recipe?

Megatron-Bridge's performance tables (:mod:`pase.hardware.published_runs`) give, per run, the problem (model, system,
GPUs, global batch, sequence, precision) and its parallel layout (TP, PP, CP, VP, EP, microbatch, FSDP), not the
rest of its recipe (recomputation, dispatcher, overlaps, stage cuts). :func:`published_layouts` takes each layout
NVIDIA published for the problem a search solved and lets the 3-D search (:func:`~pase.search.stages.search_training`)
choose only what the tables leave out, as Megatron-LM runs it (whole-block cuts): pase's best at NVIDIA's layout,
beside what NVIDIA measured for it, release by release. A layout several releases ran is priced once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pase.analysis.throughput import sequence_length
from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster
from pase.hardware.published_runs import PublishedRun, published_runs
from pase.ir.configs import ConfigOptions
from pase.ir.graph import Graph
from pase.model.layer_times import cached_graph
from pase.model.memory import InsufficientMemoryError
from pase.model.training_plan import TrainingPlan
from pase.search.stages import search_training

__all__ = ["PublishedLayout", "published_layouts"]


@dataclass(frozen=True)
class PublishedLayout:
    """One parallel layout NVIDIA published for a problem: the runs that used it (oldest release first), and pase's
    best plan at it (None, with ``problem`` saying why, where pase finds none: it does not fit, say)."""

    runs: tuple[PublishedRun, ...]
    plan: TrainingPlan | None
    problem: str | None = None

    @property
    def layout(self) -> str:
        """The layout in the tables' terms (:attr:`PublishedRun.layout`)."""
        return self.runs[0].layout

    def to_dict(self) -> dict:
        """The layout, its releases and measured steps, and pase's plan at it (its label and step) or why none."""
        return {"layout": self.layout,
                "measured": [{"release": r.release, "tokens_per_gpu_s": r.tokens_per_gpu_s, "step_s": r.step_s}
                             for r in self.runs],
                "label": None if self.plan is None else self.plan.label,
                "step_time_s": None if self.plan is None else self.plan.step_time_s, "problem": self.problem}


def published_layouts(build: Callable[[int], Graph], cluster: Cluster, global_batch: int, *, options: ConfigOptions,
                      cache: dict | None = None, **search: object) -> list[PublishedLayout]:
    """Each layout NVIDIA published for this problem (``build``'s model, by its graph's name and sequence, on
    ``cluster``'s preset system, as many GPUs, ``global_batch`` sequences, ``options.precision``), with pase's
    best plan at it.

    ``search`` passes on to :func:`~pase.search.stages.search_training` (the routing, dispatchers and overlaps
    the caller searched with); the layout fixes TP, PP, CP, the microbatch, the virtual stages (the interleaved
    schedule where VP > 1), EP, sequence parallelism wherever TP > 1 (as Megatron-Core requires for its overlap)
    and ZeRO 3 where the run used FSDP, else the distributed optimizer (ZeRO 1). Empty where NVIDIA published
    none.
    """
    cache = {} if cache is None else cache
    graph = cached_graph(build, 1, cache)
    problem = (cluster.devices, global_batch, sequence_length(graph), options.precision)
    layouts: dict[tuple, list[PublishedRun]] = {}
    for r in published_runs(graph.name, cluster.name):
        if (r.gpus, r.gbs, r.seq, r.precision) == problem:
            layouts.setdefault((r.tp, r.pp, r.cp, r.vp, r.ep, r.mbs, bool(r.fsdp)), []).append(r)
    found = []
    for (tp, pp, cp, vp, ep, mbs, fsdp), runs in layouts.items():
        try:
            plan = search_training(
                build, cluster, global_batch, options=options, cache=cache, framework="megatron", runners_up=0,
                tensor=(tp,), pipeline=(pp,), context=(cp,), microbatch_sizes=(mbs,), virtual_stages=(vp,),
                schedules=("interleaved",) if vp > 1 else ("1f1b",), zero=(3,) if fsdp else (1,),
                sequence_parallel=(tp > 1,), expert=(ep,) if ep > 1 else None, **search).best
            found.append(PublishedLayout(tuple(runs), plan))
        except (ConfigurationError, InsufficientMemoryError) as exc:
            found.append(PublishedLayout(tuple(runs), None, str(exc)))
    return found
