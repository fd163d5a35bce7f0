"""Reading and writing: the JSON graph format, ONNX and PyTorch import."""
