"""Fitting calibrations to kernel timings (pase.calibrate.fit) and the presets' calibrations built from them."""

import json
from pathlib import Path

import numpy as np
import pytest

from pase.calibrate.fit import calibrate, fit_curve, fit_efficiency, fit_links, fit_memory
from pase.hardware.cluster import CALIBRATIONS, PRESETS
from pase.hardware.efficiency import curve_fraction

DATA = Path(__file__).resolve().parents[1] / "pase" / "hardware" / "data"
H200_ROWS = json.loads((DATA / "h200-kernels.json").read_text())


def test_a_known_curve_is_recovered_from_timings_it_generates():
    # Kernels of 0.1 .. 10,000 GFLOP timed on a device of 100 TFLOP/s whose products reach the known fractions
    # (a curve with knots at decades), each kernel paying 5 us; the memory traffic left out (no bytes).
    known = ((1e9, 0.2), (1e10, 0.55), (1e11, 0.7), (1e12, 0.78), (1e13, 0.8))
    flops = np.logspace(8, 13, 41)
    times = flops / (100e12 * curve_fraction(known, flops)) + 5e-6
    curve = fit_curve(flops, 0.0, times, 100e12, 1e12, 5e-6)
    probe = np.logspace(8, 13.5, 50)
    assert np.allclose(curve_fraction(curve, probe), curve_fraction(known, probe), rtol=1e-3)


def test_copies_give_back_the_bandwidth_and_overhead_that_made_them():
    rows = [{"kind": "copy", "m": 1, "h": 1, "bytes": b, "s": b / 3e12 + 7e-6} for b in (1e7, 1e8, 1e9)]
    bandwidth, overhead = fit_memory(rows)
    assert bandwidth == pytest.approx(3e12, rel=1e-9) and overhead == pytest.approx(7e-6, rel=1e-6)


def test_ring_collectives_give_back_the_bus_bandwidth_and_latency_that_made_them():
    # An all-reduce among 8 ranks is 14 ring steps and moves 2 x 7/8 of its bytes; an all-gather half of each.
    rows = []
    for m in (1e6, 1e8, 1e9):
        rows.append({"op": "all_reduce", "ranks": 8, "scope": "intra", "bytes": m, "s": 14 * 4e-6 + 1.75 * m / 360e9})
        rows.append({"op": "all_gather", "ranks": 8, "scope": "intra", "bytes": m, "s": 7 * 4e-6 + 0.875 * m / 360e9})
    (scope, link), = fit_links(rows).items()
    assert scope == "intra" and link.bus_Bps == pytest.approx(360e9) and link.latency_s == pytest.approx(4e-6)


@pytest.fixture(scope="module")
def h200_fit():
    return fit_efficiency(H200_ROWS, 989e12, 1979e12, source="the H200 file")


def test_the_fitted_h200_curves_reproduce_the_measured_kernel_times(h200_fit):
    # Measurement against fit, each measured kernel against the time its fitted curve gives it: the matrix
    # products' FLOPs alone do not fix their speed (shapes of equal FLOPs differ by up to ~30%), so the median
    # is held tight and the largest loosely; attention, FP8 and copies are fitted closely.
    bounds = {"gemm_fwd": (0.03, 0.35), "gemm_dgrad": (0.03, 0.35), "gemm_wgrad": (0.03, 0.35),
              "gemm_fp8": (0.02, 0.20), "attention_fwd": (0.02, 0.10), "attention_bwd": (0.05, 0.10),
              "copy": (0.01, 0.01), "norm": (0.15, 0.25)}
    for section, (median, largest) in bounds.items():
        err = np.abs(h200_fit.errors(section))
        assert err.size and np.median(err) <= median and err.max() <= largest, (section, np.median(err), err.max())
    assert abs(np.mean(h200_fit.errors("gemm_fwd"))) < 0.01  # no bias


def test_the_fit_reads_the_measured_rates(h200_fit):
    e = h200_fit.efficiency
    # HBM: the copies move 3.7 to 4.1 TB/s including their launch; the fit separates a few microseconds of it.
    assert 3.7e12 < e.memory_Bps < 4.8e12 and 0 < e.kernel_overhead_s < 10e-6
    # The largest BF16 products reach about 70% of the 989 TFLOP/s peak (the file: 0.69 to 0.72).
    assert 0.66 < e.matmul_fraction(1e13) < 0.74
    # Attention forward at 1.1 TFLOP: 1,100 GFLOP in 1.72 ms is 64% of peak.
    assert curve_fraction(e.attention_curve, 1.1e12) == pytest.approx(1.0995e12 / 1.716e-3 / 989e12, rel=0.05)


def test_the_committed_h200_calibration_is_the_fit_of_the_committed_timings():
    from benchmarks.fit_h200 import h200_calibration  # noqa: PLC0415 - the script that writes the file

    fresh = h200_calibration().efficiency
    committed = json.loads((DATA / "dgx-h200.json").read_text())["efficiency"]
    for name, value in fresh.to_dict().items():
        if name != "sources":
            assert np.allclose(np.asarray(committed[name], dtype=float), np.asarray(value, dtype=float),
                               rtol=1e-9), name


def test_the_h100_has_the_h200_s_compute_and_its_own_memory():
    h100, h200 = CALIBRATIONS["dgx-h100"], CALIBRATIONS["dgx-h200"]
    for name in ("matmul_curve", "matmul_dgrad_curve", "matmul_wgrad_curve", "fp8_matmul_curve", "attention_curve",
                 "attention_backward_curve", "vector_flops", "kernel_overhead_s"):
        assert getattr(h100, name) == getattr(h200, name), name
    # The same achieved fraction of each GPU's published HBM bandwidth (3.35 and 4.8 TB/s).
    assert h100.memory_Bps / 3.35e12 == pytest.approx(h200.memory_Bps / 4.8e12)


def test_the_vector_rate_is_not_scaled_by_the_tensor_core_peak():
    h200, b200 = CALIBRATIONS["dgx-h200"], CALIBRATIONS["dgx-b200"]
    tensor_ratio = PRESETS["dgx-b200"].peak_flops / PRESETS["dgx-h200"].peak_flops
    assert b200.vector_flops / h200.vector_flops < 0.6 * tensor_ratio
    # The H100's non-tensor BF16 peak is 133.8 TFLOP/s (NVIDIA): no calibration's vector rate exceeds it.
    assert CALIBRATIONS["dgx-h100"].vector_flops < 133.8e12


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-h200", "dgx-b200"])
def test_every_figure_of_the_new_presets_names_its_source(name):
    e = CALIBRATIONS[name]
    for field, value in e.to_dict().items():
        if field != "sources" and value is not None:
            assert e.sources.get(field), (name, field)
    words = " ".join(e.sources.values())
    assert ("measured on one NVIDIA H200" in words) and ("published" in words)
    if name == "dgx-b200":
        assert "assumed" in e.sources["matmul_curve"] and "not measured on a B200" in e.sources["matmul_curve"]


def test_links_are_the_published_nccl_bus_bandwidths():
    # NVLink 4: ~370 GB/s of 450; NVLink 5: ~722 of 900; NDR: 46-48 GB/s of 50 (the sources name where).
    assert CALIBRATIONS["dgx-h200"].intra_efficiency * 450e9 == pytest.approx(370e9, rel=0.01)
    assert CALIBRATIONS["dgx-b200"].intra_efficiency * 900e9 == pytest.approx(722e9, rel=0.01)
    assert 46e9 <= CALIBRATIONS["dgx-h100"].inter_efficiency * 50e9 <= 48e9


def test_calibrate_keeps_the_raw_timings_and_the_fit_quality():
    cal = calibrate(H200_ROWS, peak_flops=989e12, fp8_peak_flops=1979e12, device="NVIDIA H200", date="2026-12-04",
                    where="test")
    assert cal.measurements["gemm_bf16"]["rows"] == H200_ROWS["gemm_bf16"]["rows"]
    assert cal.fit["attention_fwd"]["rows"] == len(H200_ROWS["attention"]["rows"])
    assert "measured on one NVIDIA H200, 2026-12-04" in cal.efficiency.sources["matmul_curve"]


def test_the_fit_prices_attention_by_cudnns_kernel_where_it_was_measured():
    # The H200 file's flash rows, and cuDNN rows of the same shapes 20% faster (as pase calibrate now times both):
    # the fitted attention is cuDNN's, which Transformer Engine runs, and its residuals are cuDNN's rows'.
    flash = H200_ROWS["attention"]["rows"]
    cudnn = [dict(r, backend="cudnn", fwd_s=0.8 * r["fwd_s"], fwd_bwd_s=0.8 * r["fwd_bwd_s"]) for r in flash]
    both = {**H200_ROWS, "attention": {"rows": [*flash, *cudnn]}}
    plain = fit_efficiency(H200_ROWS, 989e12, 1979e12, source="f").efficiency
    fitted = fit_efficiency(both, 989e12, 1979e12, source="f")
    e = fitted.efficiency
    big = max(r["fwd_flops"] for r in flash)
    assert curve_fraction(e.attention_curve, big) == pytest.approx(curve_fraction(plain.attention_curve, big) / 0.8,
                                                                   rel=0.05)
    assert "cuDNN" in e.sources["attention_curve"] and "cuDNN" in e.sources["attention_backward_curve"]
    assert "FlashAttention" in plain.sources["attention_curve"]
    assert len(fitted.errors("attention_fwd")) == len(cudnn)
    assert np.median(np.abs(fitted.errors("attention_fwd"))) <= 0.02


def test_an_mla_attention_row_counts_its_narrower_values_and_output_by_hand():
    from pase.calibrate.fit import _attention_bytes

    # DeepSeek-V3 at TP 1: 128 heads, 4,096 tokens, queries and keys 192 wide, values and the output 128, BF16.
    row = {"b": 1, "hq": 128, "hkv": 128, "s": 4096, "d": 192, "dv": 128}
    q = k = 128 * 4096 * 192 * 2
    v = o = 128 * 4096 * 128 * 2
    assert _attention_bytes(row) == (q + k + v + o, 2 * (q + k + v + o))
    assert _attention_bytes({**row, "dv": 192}) == _attention_bytes({key: x for key, x in row.items() if key != "dv"})


@pytest.mark.parametrize("d,dv", [(192, 128), (64, 64)])
def test_other_head_shapes_give_the_calibration_its_head_shape_rates_and_leave_the_128_wide_curves(d, dv):
    # pase calibrate times DeepSeek-V3's MLA kernels (queries and keys 192 wide, values 128) and GPT-OSS's 64-wide
    # heads beside 128-wide ones. Here: the H200 file's 128-wide rows and, at three of their sizes, rows of the other
    # shape whose forward runs at 0.95 and whose backward at 0.75 of the 128-wide rate at the same FLOPs.
    from pase.hardware.attention_kernels import shape_factor

    plain = fit_efficiency(H200_ROWS, 989e12, 1979e12, source="f").efficiency
    wide = sorted(H200_ROWS["attention"]["rows"], key=lambda r: r["fwd_flops"])
    mla = [dict(r, d=d, dv=dv, fwd_s=r["fwd_s"] / 0.95, fwd_bwd_s=r["fwd_s"] / 0.95 + (r["fwd_bwd_s"] - r["fwd_s"]) /
                0.75) for r in (wide[0], wide[len(wide) // 2], wide[-1])]
    fitted = fit_efficiency({**H200_ROWS, "attention": {"rows": [*wide, *mla]}}, 989e12, 1979e12, source="f")
    e = fitted.efficiency
    for name in ("attention_curve", "attention_backward_curve"):
        assert np.ravel(getattr(e, name)) == pytest.approx(np.ravel(getattr(plain, name)), rel=1e-6)
    flops = [r["fwd_flops"] for r in mla]
    assert shape_factor(e.attention_shapes, d, dv, False, flops) == pytest.approx([0.95] * 3, rel=1e-6)
    assert shape_factor(e.attention_shapes, d, dv, False, flops, backward=True) == pytest.approx([0.75] * 3,
                                                                                                 rel=1e-6)
    assert f"{d}/{dv}-wide heads" in e.sources["attention_shapes"]
    # The fit's report prices those rows with their rates: as near as the 128-wide rows they were made from.
    errors = dict(zip(("fwd", "bwd"), (np.abs(fitted.errors(f"attention_{p}")) for p in ("fwd", "bwd"))))
    assert len(errors["fwd"]) == len(wide) + 3 and max(errors["bwd"][-3:]) <= max(errors["bwd"]) + 1e-9
