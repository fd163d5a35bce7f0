"""PaSE: parallelization strategies for efficient DNN training."""
