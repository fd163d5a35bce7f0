"""Calibrating pase to a GPU: fit a calibration to kernel timings (:mod:`pase.calibrate.fit`, numpy only) and
measure them (:mod:`pase.calibrate.profile`, the only module of pase that imports torch, and only when run)."""
