"""How far a preset's step-time model is from published training runs, so outputs can say it beside the step.

``data/validation.json`` holds, per published run of section 3 of the design's published measurements
(NeMo 24.07 and Megatron-Bridge 25.09 on DGX H100 and B200) and of the later runs beside them (GPT-OSS in
Megatron-Bridge 26.02), its measured step (from the published tokens per second per GPU) and the step pase's
calibrated model predicts for the same configuration, out of sample: no figure of the calibrations was fitted
to these runs. ``benchmarks/validate_today.py`` writes it, and a test
keeps it equal to what the model predicts now.

:func:`accuracy` summarises the runs on one preset, with or without experts, as a user planning on that
preset should read a step: how far off it was on average, at most, and which way.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from pase.hardware.cluster import CALIBRATIONS, Cluster

__all__ = ["VALIDATION", "validation_rows", "accuracy"]

VALIDATION = Path(__file__).resolve().parent / "data" / "validation.json"


@functools.cache
def validation_rows() -> tuple[dict, ...]:
    """The published runs and the model's steps for them (``data/validation.json``'s ``rows``); empty when the
    file is missing."""
    if not VALIDATION.exists():
        return ()
    return tuple(json.loads(VALIDATION.read_text())["rows"])


def accuracy(cluster: Cluster, experts: bool) -> dict | None:
    """How the model pricing ``cluster`` did on the published runs of its preset (``experts``: the
    mixture-of-experts runs, else the dense ones), or None where it prices none of them (peak rates, another
    calibration, a preset without published runs of that kind).

    Returns ``runs`` (how many), ``preset``, ``mean_abs_error`` and ``largest_error`` (the signed error of the
    furthest run; model step over measured, less 1), ``short`` (runs whose model step was shorter than
    measured) and ``text``, one sentence saying it.
    """
    preset = next((name for name, e in CALIBRATIONS.items() if e is not None and e == cluster.efficiency), None)
    rows = [r for r in validation_rows() if r["cluster"] == preset and r["experts"] == experts]
    if preset is None or not rows:
        return None
    errors = [r["model_step_s"] / r["measured_step_s"] - 1 for r in rows]
    mean = sum(map(abs, errors)) / len(errors)
    largest = max(errors, key=abs)
    short = sum(e < 0 for e in errors)
    kind = "mixture-of-experts" if experts else "dense"
    way = ("shorter than measured in all of them" if short == len(rows) else
           f"shorter than measured in {short} of them" if short else "longer than measured in all of them")
    # "3b Megatron-Bridge 25.09": the section's label is the design notes', the rest the release.
    sources = " and ".join(sorted({re.sub(r"^\d[a-z] ", "", r["source"]) for r in rows}))
    text = (f"against {len(rows)} published {kind} training runs on {preset} ({sources}), "
            f"this model's step was {mean:.0%} off on average and {largest:+.0%} at most, {way}: predicted out of "
            "sample, no figure fitted to them (BENCHMARKS.md, \"Today's runs against the model\")")
    return {"runs": len(rows), "preset": preset, "mean_abs_error": mean, "largest_error": largest, "short": short,
            "text": text}
