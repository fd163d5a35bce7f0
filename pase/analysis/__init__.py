"""Analyses over plans: baselines costed beside PaSE's plan (:mod:`.baselines`), sweeps (:mod:`.sweep`)."""
