"""Hardware: clusters, their presets and the device mesh they form."""
