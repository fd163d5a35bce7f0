"""Named strategies (data parallelism, Megatron, OWT...) as pure rules over a graph."""
