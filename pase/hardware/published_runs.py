"""What NVIDIA measured for a model on a system, release after release: published runs to read beside a plan.

``data/megatron-bridge-runs.json`` holds every pre-training run of Megatron-Bridge's published performance tables
(NVIDIA, one table per NeMo container release from 25.09 on: tokens/s/GPU of its performance recipes on DGX
H100, B200, B300, GB200 and GB300), extracted with its commit by ``benchmarks/extract_bridge_releases.py``.

:func:`published_runs` gives a sample's runs on a preset's system; :func:`beside` sets a plan against them: which
runs of its model and system there are, which of them ran the plan's own configuration, and the plan's step
against each of those. The measured throughput of one configuration can move between releases, by up to a factor
of two for the mixtures of experts (BENCHMARKS.md, "Section 3b's runs release after release"): a user reads
pase's step beside what the framework reached, release by release, rather than against one number.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RUNS", "PRESET_SYSTEMS", "PublishedRun", "published_runs", "beside"]

RUNS = Path(__file__).resolve().parent / "data" / "megatron-bridge-runs.json"
# The systems of the tables that pase has a preset of.
PRESET_SYSTEMS = {"dgx-h100": "H100", "dgx-b200": "B200"}


@dataclass(frozen=True)
class PublishedRun:
    """One published run: its release, system, the model's table name and variant, precision (pase's names, or
    ``fp8-blockwise`` / ``nvfp4``, which pase does not price), configuration, and tokens/s/GPU."""

    release: str
    system: str
    model: str
    variant: str
    precision: str
    gpus: int
    gbs: int
    mbs: int
    seq: int
    fsdp: int
    tp: int
    pp: int
    cp: int
    vp: int
    ep: int
    tokens_per_gpu_s: float

    @property
    def step_s(self) -> float:
        """The step its throughput implies, seconds: GBS x sequence / (tokens/s/GPU x GPUs)."""
        return self.gbs * self.seq / (self.tokens_per_gpu_s * self.gpus)

    @property
    def configuration(self) -> str:
        """Its configuration in the tables' terms, one line."""
        return (f"{self.gpus:,} GPUs, GBS {self.gbs}, MBS {self.mbs}, sequence {self.seq:,}, TP {self.tp} PP {self.pp} "
                f"CP {self.cp} VP {self.vp} EP {self.ep}" + (f", FSDP {self.fsdp}" if self.fsdp else ""))

    @property
    def layout(self) -> str:
        """Its parallel layout alone (the problem's GPUs, batch and sequence left out), one line."""
        return (f"TP {self.tp} PP {self.pp} CP {self.cp} VP {self.vp} EP {self.ep}, MBS {self.mbs}"
                + (f", FSDP {self.fsdp}" if self.fsdp else ""))

    def ran(self, plan) -> bool:
        """Whether this run is ``plan``'s configuration (a :class:`~pase.model.training_plan.TrainingPlan`): the
        same GPUs, global and micro batch, sequence, TP, PP, CP, VP, EP, precision, and FSDP where ZeRO-3."""
        p = plan.parallelism
        return ((self.gpus, self.gbs, self.mbs, self.seq, self.tp, self.pp, self.cp, self.vp, self.ep,
                 self.precision, bool(self.fsdp))
                == (p.devices, p.global_batch, p.microbatch_size, plan.tokens_per_sample, p.tensor, p.pipeline,
                    p.context, p.virtual_stages, p.ep, plan.precision, p.zero == 3))


@functools.cache
def _document() -> dict:
    return json.loads(RUNS.read_text()) if RUNS.exists() else {"source": "", "runs": []}


def _release_order(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


@functools.cache
def published_runs(sample: str, cluster: str) -> tuple[PublishedRun, ...]:
    """The published runs of pase sample ``sample`` on the system of preset ``cluster`` (:data:`PRESET_SYSTEMS`),
    oldest release first; empty where there are none (another model or system)."""
    system = PRESET_SYSTEMS.get(cluster)
    fields = PublishedRun.__dataclass_fields__
    runs = [PublishedRun(**{k: v for k, v in r.items() if k in fields}) for r in _document()["runs"]
            if system is not None and r["sample"] == sample and r["system"] == system]
    return tuple(sorted(runs, key=lambda r: (_release_order(r.release), r.precision, r.gpus, r.gbs)))


def beside(plan) -> dict | None:
    """``plan`` (a :class:`~pase.model.training_plan.TrainingPlan`) beside the published runs of its model on its
    preset's system, or None where there are none.

    Returns ``system``, ``source``, ``model_tokens_per_gpu_s`` (the plan's own tokens/s/GPU), ``runs`` (each run's release, model and variant as the table names them,
    precision, configuration (its sizes, and in words), tokens/s/GPU, the step it implies, ``same_configuration`` and, where it is the
    plan's, ``model_error``: the plan's step over the run's, less 1) and ``text``, one sentence for outputs.
    """
    runs = published_runs(plan.graph_name, plan.cluster.name)
    if not runs:
        return None
    rows, same = [], []
    for r in runs:
        mine = r.ran(plan)
        error = plan.step_time_s / r.step_s - 1 if mine else None
        if mine:
            same.append((r, error))
        rows.append({"release": r.release, "model": r.model, "variant": r.variant, "precision": r.precision,
                     "gpus": r.gpus, "global_batch": r.gbs, "microbatch_size": r.mbs, "sequence": r.seq,
                     "tp": r.tp, "pp": r.pp, "cp": r.cp, "vp": r.vp, "ep": r.ep, "fsdp": r.fsdp,
                     "configuration": r.configuration, "tokens_per_gpu_s": r.tokens_per_gpu_s, "step_s": r.step_s,
                     "same_configuration": mine,
                     "model_error": error})
    releases = sorted({r.release for r in runs}, key=_release_order)
    text = (f"NVIDIA published {len(runs)} run{'s' if len(runs) > 1 else ''} of {plan.graph_name} on DGX "
            f"{PRESET_SYSTEMS[plan.cluster.name]} (Megatron-Bridge "
            f"{releases[0] if len(releases) == 1 else f'{releases[0]} to {releases[-1]}'})")
    if same:
        text += "; this configuration ran in " + ", ".join(
            f"{r.release} at {r.tokens_per_gpu_s:,.0f} tokens/s/GPU (a {r.step_s:.3f} s step; this plan's "
            f"{error * 100:+.1f}%)" for r, error in same)
    else:
        text += "; none in this configuration"
    p = plan.parallelism
    tokens = p.global_batch * plan.tokens_per_sample / (plan.step_time_s * p.devices) if plan.tokens_per_sample else None
    return {"system": PRESET_SYSTEMS[plan.cluster.name], "source": _document()["source"], "runs": rows,
            "model_tokens_per_gpu_s": tokens, "text": text}
