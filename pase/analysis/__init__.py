"""Analyses over plans: baselines costed beside PaSE's plan (:mod:`.baselines`), sweeps over clusters and batch sizes (:mod:`.sweep`)."""
