"""Size limits shared by every reader: what a file, a graph or a tensor may be at most.

Uploads come from users of a shared app server, so every reader refuses
absurd input with these bounds before it allocates for it.
"""

__all__ = ["MAX_FILE_BYTES", "MAX_ONNX_BYTES", "MAX_LAYERS", "MAX_NODES", "MAX_DIM", "MAX_TENSOR_ELEMENTS",
           "MAX_FOLD_ELEMENTS", "MAX_LAYER_INPUTS"]

# A pase graph file larger than this is refused before parsing (the largest sample is ~1 MB).
MAX_FILE_BYTES = 20 * 2**20
# An ONNX file larger than this is refused before parsing. Models with big weights can be
# saved with external data (onnx.save_model(..., save_as_external_data=True)): only the
# graph file is needed, pase never reads the weights.
MAX_ONNX_BYTES = 256 * 2**20
# Layers in a graph file, and nodes in an ONNX graph.
MAX_LAYERS = 20_000
MAX_NODES = 200_000
# No dimension above MAX_DIM, no tensor above MAX_TENSOR_ELEMENTS elements.
MAX_DIM = 2**31 - 1
MAX_TENSOR_ELEMENTS = 2**48
# ONNX constants up to this many elements are read and folded; larger ones are shapes only.
MAX_FOLD_ELEMENTS = 2**24
# Most input slots a layer may declare (an Elementwise layer's ``inputs``).
MAX_LAYER_INPUTS = 4096
