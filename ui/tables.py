"""Tables of plans as pandas DataFrames (the paper's Table II and comparisons)."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from pase.planner import Plan
from ui.fmt import compact_config, config_str, dims_str, round_sig
from ui.graphview import kind_of

__all__ = ["strategy_table", "comparison_table", "differing_layers", "totals_table"]


def strategy_table(plan: Plan, why: Mapping | None = None) -> pd.DataFrame:
    """One row per layer in graph order, like the paper's Table II plus the cost breakdown (ms).

    ``why`` (layer name -> :class:`~pase.analysis.explain.LayerWhy`) adds each layer's runner-up
    configuration and how many ms slower the step would be with it.
    """
    rows = []
    for r in plan.layers:
        extra = {}
        if why is not None:
            w = why.get(r.name)
            extra = {"runner_up": "" if w is None or w.runner_up is None else config_str(w.runner_up),
                     "runner_up_slower_ms": None if w is None or w.slower_s is None else w.slower_s * 1e3}
        rows.append({
            "layer": r.name,
            "op": r.op,
            "dims": dims_str(r.dims),
            "sizes": dims_str(r.dims, r.sizes),
            "configuration": config_str(r.config),
            "split": compact_config(r.dims, r.config),
            "parallelism": kind_of(r.dims, r.config),
            "devices": r.devices,
            "compute_ms": r.compute_s * 1e3,
            "intra_comm_ms": r.intra_comm_s * 1e3,
            "edge_comm_ms": r.edge_comm_s * 1e3,
            "total_ms": r.total_s * 1e3,
            **extra,
        })
    return pd.DataFrame(rows)


def differing_layers(plans: Mapping[str, Plan], reference: str) -> list[str]:
    """Layers whose configuration differs between ``plans[reference]`` and any other plan."""
    ref = plans[reference].strategy
    return [name for name in ref if any(p.strategy[name] != ref[name] for p in plans.values())]


def comparison_table(plans: Mapping[str, Plan], reference: str) -> pd.DataFrame:
    """Per layer: each plan's split and time (ms), and whether it differs from ``reference``."""
    labels = list(plans)
    base = plans[reference]
    by_label = {l: {r.name: r for r in plans[l].layers} for l in labels}
    rows = []
    for r in base.layers:
        row = {"layer": r.name, "op": r.op, "dims": dims_str(r.dims)}
        for l in labels:
            other = by_label[l][r.name]
            row[f"{l} split"] = compact_config(other.dims, other.config)
        for l in labels:
            row[f"{l} ms"] = by_label[l][r.name].total_s * 1e3
        row["differs"] = any(by_label[l][r.name].config != r.config for l in labels)
        rows.append(row)
    return pd.DataFrame(rows)


def totals_table(plans: Mapping[str, Plan], reference: str) -> pd.DataFrame:
    """Per plan, for reading on screen: variant label, step time and its parts (ms), the reference's speedup
    over it (×), and memory per device (GB) with whether it fits ("yes"/"no"), where the plans know it.

    Headers name their unit; numbers carry 3 significant figures (:func:`ui.fmt.round_sig`).
    """
    ref = plans[reference]
    rows = []
    for name, p in plans.items():
        t = p.totals_s()
        rows.append({
            "strategy": name,
            "variant": p.label,
            "step time (ms)": round_sig(p.step_time_s * 1e3),
            "compute (ms)": round_sig(t["compute_s"] * 1e3),
            "inside layers (ms)": round_sig(t["intra_comm_s"] * 1e3),
            "between layers (ms)": round_sig(t["edge_comm_s"] * 1e3),
            f"{reference} speedup (×)": round_sig(ref.speedup_over(p)),
        })
        memory = getattr(p, "memory_per_device_bytes", None)
        if memory is not None:
            rows[-1]["memory per device (GB)"] = round_sig(memory / 1e9)
            rows[-1]["fits memory"] = {True: "yes", False: "no", None: "no limit"}[p.fits_memory]
    return pd.DataFrame(rows)
