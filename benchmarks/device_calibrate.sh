#!/usr/bin/env bash
# One call on a machine with an NVIDIA GPU (the device tool's nvidia-h200: python3 with CUDA PyTorch, numpy and
# networkx; nothing to install): pase calibrate's full grid with its launch rows (issue 27: a small kernel's time
# alone against the GPU's own, the host's issue, back to back and from a CUDA graph) and its attention on torch's
# flash and cuDNN backends (the fit prices by cuDNN's, which Transformer Engine runs), the GPU's clocks and power
# limit beside it. Writes $OUT/gpu.txt, $OUT/calibration.json and $OUT/calibrate.log (its last lines: the launch
# table, microseconds per kernel each way beside what the calibration prices it at). Run it as the device tool's
# command: bash benchmarks/device_calibrate.sh, with timeout_s 600.
set -uo pipefail
OUT=${OUT:-/tmp/pase-device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
timeout 480 python3 -m pase calibrate --out "$OUT/calibration.json" 2>&1 | tee "$OUT/calibrate.log"
