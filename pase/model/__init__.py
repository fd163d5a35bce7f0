"""The cost and memory models: what a strategy costs in time and bytes on a cluster."""
