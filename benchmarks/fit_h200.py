"""Fit the ``dgx-h200`` preset's kernel calibration to the H200 kernel timings (issue 25, item 3).

Reads ``pase/hardware/data/h200-kernels.json`` (one H200 SXM, 2026-12-04; see its ``what``), fits every kernel
figure with :func:`pase.calibrate.fit.calibrate` and writes ``pase/hardware/data/dgx-h200.json``, the calibration
file the preset loads (``pase.hardware.cluster.CALIBRATIONS``). Prints each section's fit quality.
``tests/test_calibration_fit.py`` checks that the committed file is this script's output.

Usage: ``python benchmarks/fit_h200.py [--check]`` (``--check``: compare with the committed file, write nothing).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pase.calibrate.fit import calibrate  # noqa: E402
from pase.hardware.calibration import save_calibration  # noqa: E402

DATA = ROOT / "pase" / "hardware" / "data"
KERNELS = DATA / "h200-kernels.json"
OUT = DATA / "dgx-h200.json"
H200_BF16_PEAK = 989e12  # NVIDIA H200 SXM datasheet: dense BF16 tensor-core peak
H200_FP8_PEAK = 1979e12  # NVIDIA H200 SXM datasheet: dense FP8 tensor-core peak


def h200_calibration():
    """The calibration the H200 kernel file implies."""
    measurements = json.loads(KERNELS.read_text())
    return calibrate(measurements, peak_flops=H200_BF16_PEAK, fp8_peak_flops=H200_FP8_PEAK,
                     device="NVIDIA H200 SXM 141 GB", date="2026-12-04",
                     where="pase/hardware/data/h200-kernels.json; PyTorch 2.11.0+cu130, driver 580.159.04",
                     environment={"driver": "580.159.04", "torch": measurements.get("torch", "")},
                     memory_bytes=141e9)


def main(argv: list[str]) -> int:
    cal = h200_calibration()
    for section, quality in cal.fit.items():
        print(f"{section:14s} {quality['rows']:4d} rows  median |error| {quality['median_abs_error']:.1%}  "
              f"largest {quality['max_abs_error']:.1%}")
    if "--check" in argv:
        same = json.loads(OUT.read_text()) == json.loads(json.dumps(cal.to_dict()))
        print("the committed file is this fit" if same else f"{OUT} differs from this fit: rerun without --check")
        return 0 if same else 1
    save_calibration(cal, OUT)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
