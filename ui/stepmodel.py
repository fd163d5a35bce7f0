"""The step-time model the app prices with, and where its figures come from.

Two models, as ``pase --calibrated`` chooses between them:

* **calibrated**: the preset's calibration (:data:`pase.hardware.cluster.CALIBRATIONS`, an
  :class:`~pase.hardware.efficiency.Efficiency`) is attached to the cluster, so compute is priced by the
  roofline and links at their achievable efficiency and latency, and 3-D plans overlap the gradient
  reduction with the last backward and ZeRO-3's gathers with the compute (:mod:`pase.search.stages`);
* **peak rates**: no calibration, every FLOP at the peak and every byte at the nominal bandwidth (the
  paper's model).

The default is the calibrated model where the preset has a calibration, the paper's model on the paper's
presets (``paper-*``, even where they have one) and on hardware without a calibration. A calibration
belongs to a preset; on figures edited away from the preset's it is kept as it is: matrix products at its
fractions of the edited peak, links at its efficiencies of the edited bandwidths, its vector rate, memory
bandwidth and latencies unchanged (as the CLI's ``--calibrated`` with ``--tflops`` or ``--bandwidth``).
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from pase.errors import ClusterError
from pase.hardware.attention_kernels import shape_name
from pase.hardware.calibration import loads_calibration
from pase.hardware.cluster import CALIBRATIONS, Cluster, calibrated_by_default
from pase.hardware.efficiency import A100_FITTED, Efficiency
from ui.fmt import md

__all__ = ["CALIBRATED", "PEAK", "LABELS", "default_model", "with_model", "with_calibration_file", "model_choice",
           "calibration_name",
           "model_summary", "show_model", "sources_list"]

CALIBRATED = "calibrated"
PEAK = "peak"
LABELS = {CALIBRATED: "calibrated (measured or fitted kernels and links)", PEAK: "peak rates (the paper's)"}
HELP = ("Calibrated: compute priced by the roofline (matrix products at a fraction of the peak that grows with "
        "their size, other kernels at the vector rate, every kernel's bytes through memory) and links at their "
        "achievable efficiency and latency, from the preset's calibration (pase.hardware.cluster.CALIBRATIONS: "
        "dgx-a100 its matrix curve from published kernel figures and three figures fitted to Korthikanti et al.'s "
        "Table 5 and Megatron-LM's Table 1, dgx-h200 fitted to kernel "
        "timings measured on one H200, dgx-h100 the same chip with its own memory, dgx-b200 from published "
        "figures; a calibration file from `pase calibrate` may replace any; each page lists the figures and "
        "their sources); 3-D plans overlap the "
        "gradient reduction with the last backward and ZeRO-3's gathers with the compute. As `pase --calibrated`. Peak rates: every FLOP at the peak "
        "FLOP/s and every byte at the nominal link bandwidth, as the paper prices them; real runs are slower.")


def default_model(preset_name: str | None) -> str:
    """The model a preset opens with: :data:`CALIBRATED` where it has a calibration, except on the paper's
    presets (``paper-*``: the paper's model for the paper's hardware), else :data:`PEAK`."""
    return CALIBRATED if calibrated_by_default(preset_name) else PEAK


def with_model(cluster: Cluster, model: str, calibration_of: str | None) -> Cluster:
    """``cluster`` priced by ``model``: with preset ``calibration_of``'s calibration under :data:`CALIBRATED`
    (none where that preset has none), without one under :data:`PEAK`."""
    efficiency = CALIBRATIONS.get(calibration_of) if model == CALIBRATED else None
    return cluster if cluster.efficiency == efficiency else replace(cluster, efficiency=efficiency)


def with_calibration_file(cluster: Cluster, filename: str, data: bytes, calibration_of: str | None
                          ) -> tuple[Cluster, str]:
    """``cluster`` with the calibration file ``data`` applied (:meth:`pase.hardware.calibration.Calibration.apply`;
    links the file did not measure from preset ``calibration_of``'s calibration, if any) and one sentence saying
    where its figures come from; or ``cluster`` unchanged and the one-line reason the file was refused (starting
    "Calibration file refused")."""
    try:
        calibration = _parsed_calibration(filename, data)
        if cluster.efficiency is None and calibration_of in CALIBRATIONS:
            cluster = replace(cluster, efficiency=CALIBRATIONS[calibration_of])
        cluster = calibration.apply(cluster)
    except ClusterError as exc:
        return cluster, f"Calibration file refused: {md(str(exc))}"
    return cluster, (f"Kernels from the calibration file {md(filename)}: {md(calibration.source)}; the device's "
                     f"peak {calibration.peak_flops / 1e12:g} TFLOP/s"
                     + (f" ({calibration.fp8_peak_flops / 1e12:g} FP8)" if calibration.fp8_peak_flops else "")
                     + ", the topology from the figures above.")


def _parsed_calibration(filename: str, data: bytes):
    """The calibration in an uploaded file, parsed once per upload (kept in the session by its bytes)."""
    key = ("_calibration_upload", filename, hash(data))
    ss = st.session_state
    if ss.get("_calibration_key") != key:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ClusterError(f"{filename}: not a text (JSON) file") from None
        ss["_calibration_value"] = loads_calibration(text, filename)
        ss["_calibration_key"] = key
    return ss["_calibration_value"]


def model_choice(where, key: str, calibration_of: str | None, memory: dict, **radio) -> str:
    """Draw the "Step-time model" radio in ``where`` (a container) and return the model chosen.

    ``calibration_of``: the preset whose calibration the calibrated model would use (None: none). ``memory``:
    a dict kept in the session beside the widget, holding the user's explicit choice (``"chosen"``) and the
    preset the radio was last resolved for (``"for"``). When that preset changes (or the widget's state was
    dropped, on a page that did not draw it), the radio is reset to the user's explicit choice, or else to
    :func:`default_model`; without a calibration it shows peak rates, disabled, the explicit choice kept for
    the next preset that has one. ``radio``: more arguments of ``st.radio`` (``horizontal``...).
    """
    ss = st.session_state
    available = calibration_of in CALIBRATIONS
    if not available:
        ss[key] = PEAK
    elif key not in ss or memory.get("for") != calibration_of:
        ss[key] = memory.get("chosen") or default_model(calibration_of)
    memory["for"] = calibration_of

    def chose() -> None:
        memory["chosen"] = ss[key]

    why = "" if available else f" {calibration_of or 'This hardware'} has no calibration, so peak rates only."
    # The session's choice is the radio's default too (ui.held): a browser that missed the run setting it draws
    # that, not the first option.
    models = [CALIBRATED, PEAK]
    return where.radio("Step-time model", models, index=models.index(ss[key]), key=key, format_func=LABELS.get,
                       on_change=chose, disabled=not available, help=HELP + why, **radio)


def calibration_name(efficiency: Efficiency | None) -> str | None:
    """The preset whose calibration ``efficiency`` is (:data:`CALIBRATIONS`), or None (none, or not a preset's)."""
    if efficiency is None:
        return None
    return next((name for name, e in CALIBRATIONS.items() if e == efficiency), None)


def _origin(efficiency: Efficiency, name: str | None) -> str:
    """Where a calibration's figures come from, in words."""
    if name != "dgx-a100" and efficiency.matmul_curve == A100_FITTED.matmul_curve:
        # pase.hardware.cluster: the newer GPUs' calibrations are the A100's fit carried over (derated).
        return ("the A100's fit to Korthikanti et al.'s Table 5 and Megatron-LM's Table 1 (benchmarks/"
                "fit_calibration.py) carried over to this GPU: the A100's fractions, its vector rate scaled by "
                "the peak, memory at the A100's achieved fraction of this GPU's published HBM bandwidth; not "
                "validated against measurements of this GPU")
    return md(efficiency.sources.get("matmul_curve", "pase.hardware.efficiency"))


def model_summary(cluster: Cluster) -> str:
    """One markdown sentence: which step-time model prices ``cluster``, its figures, and where they come from."""
    e = cluster.efficiency
    if e is None:
        return (f"Step-time model: **peak rates** (the paper's): every FLOP at the peak "
                f"{cluster.peak_flops / 1e12:g} TFLOP/s per device, every byte at the nominal link bandwidth, no "
                "latency, so real runs are slower.")
    name = calibration_name(e)
    fractions = [f for _, f in e.matmul_curve]
    edited = name is not None and cluster.name != name
    return (f"Step-time model: **calibrated**, with {md(name or 'a custom')}'s calibration "
            "(pase.hardware.cluster.CALIBRATIONS): matrix products at "
            f"{min(fractions):.0%} to {max(fractions):.0%} of the peak {cluster.peak_flops / 1e12:g} TFLOP/s by "
            f"kernel size, other kernels at {e.vector_flops / 1e12:.3g} TFLOP/s, memory at "
            f"{e.memory_Bps / 1e9:,.0f} GB/s, links at {e.intra_efficiency:.0%} (inside a node) and "
            f"{e.inter_efficiency:.0%} (between nodes) of nominal with {e.intra_latency_s * 1e6:g} and "
            f"{e.inter_latency_s * 1e6:g} µs per collective step; 3-D plans overlap the gradient reduction and "
            "ZeRO-3's gathers. "
            f"Source: {_origin(e, name)}."
            + (f" The figures edited from {md(name)}'s keep its calibration: its fractions apply to the edited peak "
               "and bandwidths, its vector rate, memory bandwidth and latencies are unchanged." if edited else ""))


def sources_list(efficiency: Efficiency) -> str:
    """A markdown list of ``efficiency``'s figures that have a source: each figure's name, value and source."""
    def value(name: str) -> str:
        v = getattr(efficiency, name, None)
        if name.endswith("_curve"):  # (FLOPs per kernel, fraction of peak) points
            return "" if v is None else ", ".join(f"{f / 1e9:.3g} GFLOP: {x:.1%}" for f, x in v)
        if name == "attention_shapes":  # per head shape, its rates relative to 128-wide heads
            return "" if v is None else ", ".join(
                f"{shape_name((q, w, windowed))}: forward {min(a for _, a, _ in p):.2f}-"
                f"{max(a for _, a, _ in p):.2f}, backward {min(b for _, _, b in p):.2f}-{max(b for _, _, b in p):.2f}"
                for q, w, windowed, p in v)
        unit = {"vector_flops": " FLOP/s", "memory_Bps": " bytes/s"}.get(name, " s" if name.endswith("_s") else "")
        return "" if v is None else f"{v:.4g}{unit}"

    return "\n".join(f"- **{md(name)}** = {md(value(name))}: {md(text)}" for name, text in efficiency.sources.items())


def show_model(clusters: list[Cluster]) -> None:
    """Where a page names its hardware: which model prices each of ``clusters`` (a caption per distinct GPU type
    and model, named when there are several), and an expander per calibration listing its figures with their
    sources."""
    seen = {(c.name, c.efficiency): c for c in clusters}
    for c in seen.values():
        st.caption(model_summary(c) if len(seen) == 1 else f"**{md(c.name)}**: {model_summary(c)}")
    for e in dict.fromkeys(e for _, e in seen if e is not None):
        with st.expander(f"The figures of {calibration_name(e) or 'the'} calibration and their sources"):
            st.markdown(sources_list(e))
