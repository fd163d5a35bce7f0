"""``pase calibrate --out FILE [--quick]``: measure this machine's GPU, fit and write a calibration file.

Checks, before timing anything, that the output can be written and that torch and a GPU are there; writes the
file whole or not at all (:func:`pase.hardware.calibration.save_calibration`). Every failure is one line
(a :class:`~pase.errors.PaseError`, which the CLI prints).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pase.errors import ClusterError

__all__ = ["add_parser", "launch_lines", "run"]

HELP = "measure this machine's GPU (and its links) and write a calibration file pase plans with"


def add_parser(sub, help: str = HELP) -> None:
    """The ``calibrate`` sub-command's options."""
    p = sub.add_parser("calibrate", help=help, description=HELP + ". Needs PyTorch with CUDA (pase[torch]); under "
                       "torchrun across nodes it times the network too. Then: pase evaluate ... --cluster PRESET "
                       "--calibration FILE.")
    p.add_argument("--out", required=True, metavar="FILE", help="the calibration file to write (JSON)")
    p.add_argument("--quick", action="store_true", help="a smaller grid (under a minute on one GPU)")
    p.add_argument("--peak-tflops", type=float, metavar="TFLOPS",
                   help="the GPU's dense BF16 tensor-core peak (needed for a GPU pase does not know)")
    p.add_argument("--fp8-peak-tflops", type=float, metavar="TFLOPS",
                   help="the GPU's dense FP8 tensor-core peak (for a GPU pase does not know)")
    p.set_defaults(func=run)


def _check_writable(path: Path) -> None:
    """``ClusterError`` unless a file can be written at ``path`` (checked before minutes of timing)."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ClusterError(f"--out {str(path)!r} is a folder; give a file name")
    if not parent.is_dir():
        raise ClusterError(f"--out {str(path)!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ClusterError(f"--out {str(path)!r}: cannot write there (permission denied)")


def launch_lines(cases: list[dict]) -> list[str]:
    """The launch cases (:func:`pase.calibrate.fit.launch_cases`) as lines: microseconds per kernel each way."""
    if not cases:
        return []
    lines = ["  launch, us per kernel: alone | GPU's own | host's issue | back to back | CUDA graph | pase prices"]

    def us(case: dict, key: str) -> str:
        return f"{case[key] * 1e6:7.1f}" if key in case else "      -"
    for c in cases:
        lines.append(f"    {c['case'][:52]:52s} " + " ".join(us(c, k) for k in ("alone_s", "gpu_s", "host_s",
                                                                                 "stream_s", "graph_s", "model_s"))
                     + ("  host-bound eager" if c["bound"] == "host" else ""))
    return lines


def run(args: argparse.Namespace) -> int:
    """Measure, fit, write; 0 when written (or on a torchrun rank other than 0, which writes nothing)."""
    out = Path(args.out)
    _check_writable(out)
    for name in ("peak_tflops", "fp8_peak_tflops"):
        value = getattr(args, name)
        if value is not None and not 1 <= value <= 1e6:
            raise ClusterError(f"--{name.replace('_', '-')} must be from 1 to 1e6 TFLOP/s, got {value:g}")
    from pase.calibrate import profile  # late: torch is imported only here, and only by this command

    torch = profile.require_gpu()
    name = torch.cuda.get_device_name(int(os.environ.get("LOCAL_RANK", 0)))
    peak, fp8_peak = profile.device_peaks(name, args.peak_tflops, args.fp8_peak_tflops)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    say(f"calibrating {name} ({'quick grid' if args.quick else 'full grid'}); peaks {peak / 1e12:g} TFLOP/s BF16"
        + (f", {fp8_peak / 1e12:g} FP8" if fp8_peak else ", no FP8"))
    measurements, about = profile.measure(args.quick, say)
    if not about["is_writer"]:
        return 0
    if fp8_peak is None:
        measurements.pop("gemm_fp8", None)
    from pase.calibrate.fit import calibrate
    from pase.hardware.calibration import save_calibration

    cal = calibrate(measurements, peak_flops=peak, fp8_peak_flops=fp8_peak, device=about["device"],
                    date=about["date"], where=f"pase calibrate{' --quick' if args.quick else ''}, raw timings in "
                                                 f"the file", environment=about["environment"],
                    memory_bytes=about["memory_bytes"])
    save_calibration(cal, out)
    for section, quality in cal.fit.items():
        if section != "launch":
            say(f"  {section:14s} {quality['rows']:4d} rows, fitted within a median "
                f"{quality['median_abs_error']:.1%} (largest {quality['max_abs_error']:.1%})")
    for line in launch_lines(cal.fit.get("launch", {}).get("cases", [])):
        say(line)
    print(f"wrote {out}: use it with --calibration {out}")
    return 0
