"""Size limits shared by every reader and search: what a file, a graph, a tensor or a search may be at most.

Uploads come from users of a shared app server, so every reader refuses
absurd input with these bounds before it allocates for it, and the planner
refuses a cluster or a search beyond them before it enumerates or tabulates.
"""

__all__ = ["check_layer_size", "MAX_FILE_BYTES", "MAX_ONNX_BYTES", "MAX_LAYERS", "MAX_NODES", "MAX_DIM", "MAX_TENSOR_ELEMENTS",
           "MAX_FOLD_ELEMENTS", "MAX_LAYER_INPUTS", "MAX_INSTANCE_BYTES", "MAX_DEVICES", "MAX_BATCH",
           "MIN_PEAK_FLOPS", "MAX_PEAK_FLOPS", "MIN_BANDWIDTH_BPS", "MAX_BANDWIDTH_BPS", "MIN_MEMORY_BYTES",
           "MAX_MEMORY_BYTES", "MAX_LATENCY_S", "MAX_SEARCH_DEVICES", "MAX_LAYER_CONFIGS",
           "MAX_DEPENDENT_SET", "MAX_RANK", "MAX_NODE_OUTPUTS", "MAX_ATTRIBUTE_VALUES", "MAX_FOLD_BYTES",
           "MAX_ONNX_PARSE_BYTES", "default_memory_budget_bytes"]

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
# Axes a tensor may have (numpy's own limit; models use a handful).
MAX_RANK = 64
# Outputs one ONNX node may have (a Split's parts); its inputs are bounded by MAX_LAYER_INPUTS.
MAX_NODE_OUTPUTS = 4096
# Values one ONNX attribute may list (``ints``, ``floats``, ``strings``): each becomes a
# Python object when read; models list a few (pads, perm, axes).
MAX_ATTRIBUTE_VALUES = 2**20
# Bytes the folded ONNX constants of one import hold together (each at most
# MAX_FOLD_ELEMENTS elements); past half of it, large constants are kept as shapes only,
# the rest stays for the small ones (reshape targets, axes) that imports need as values.
MAX_FOLD_BYTES = 2**29
# Estimated memory protobuf takes to parse an ONNX file, checked on its bytes before
# parsing: tiny messages cost a hundred times their size once parsed (a 256 MB file of
# empty nodes would take tens of GB). The largest graph MAX_NODES allows is estimated
# at half of this.
MAX_ONNX_PARSE_BYTES = 2**30
# An instance file (``pase solve-instance``), compressed or not, and its uncompressed
# contents, are refused past this size (the largest shared instance, transformer p=64,
# is 213 MB uncompressed).
MAX_INSTANCE_BYTES = 256 * 2**20
# Devices, and the batch size of a sample model, that the CLI and the app accept. At
# batch MAX_BATCH every sample's tensors stay below MAX_TENSOR_ELEMENTS, so no cost
# overflows (at 10**15 one did: "a cost is negative").
MAX_DEVICES = 16384  # Llama 3 405B trained on 16,384 H100s
MAX_BATCH = 2**20
# Physically plausible hardware figures (:class:`pase.hardware.cluster.Cluster`), bounds
# included: peak FLOP/s of one device (a microcontroller to beyond any accelerator),
# bytes per second of a link (a modem to beyond any interconnect), bytes of memory of one
# device, and seconds of latency of one collective step.
MIN_PEAK_FLOPS, MAX_PEAK_FLOPS = 1e6, 1e18
MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS = 1e3, 1e15
MIN_MEMORY_BYTES, MAX_MEMORY_BYTES = 1e3, 1e15
MAX_LATENCY_S = 1.0
MAX_SMS = 4096  # streaming multiprocessors of one device (a B200 has 148)

# Devices the configuration enumeration (pase.ir.configs) accepts, whatever built the
# cluster (2**20 = 1,048,576; MAX_DEVICES above is the app's tighter bound). Past this
# the device mesh has more prime digits than placement tracks and configuration counts
# explode; plan for a group of the cluster (one data-parallel replica) instead.
MAX_SEARCH_DEVICES = 2**20
# Configurations of one layer, counted before they are listed (pase.ir.configs). A
# transformer at 1024 devices has at most about 2,600; one edge between two layers of
# this many would take 80 GB.
MAX_LAYER_CONFIGS = 100_000
# Largest dependent set the exact search tabulates: a step's arrays have one axis per
# vertex of the set plus one for the vertex eliminated, and numpy 1.26 (the oldest numpy
# pase supports) allows 32 axes. Denser graphs go to the approximate search.
MAX_DEPENDENT_SET = 31


def check_layer_size(layer, where: str, fix: str = "") -> None:
    """Refuse a layer whose dimensions or tensors pass these limits, whichever reader built it.

    A dimension above :data:`MAX_DIM`, or a tensor (input, output or weight)
    with an axis above it or more than :data:`MAX_TENSOR_ELEMENTS` elements,
    raises :class:`~pase.errors.FormatError` naming ``where`` (the layer's
    place in its file) and ending with ``fix`` (what to check).
    """
    from pase.errors import FormatError

    for d, n in zip(layer.dims, layer.sizes):
        if n > MAX_DIM:
            raise FormatError(f"{where}: dimension {d} = {n} of its {layer.op} layer is absurdly large "
                              f"(at most {MAX_DIM}){fix}")
    for t in layer.inputs + layer.outputs + layer.weights:
        if max(t.shape, default=0) > MAX_DIM or t.size > MAX_TENSOR_ELEMENTS:
            raise FormatError(f"{where}: tensor {t.name!r} of shape {t.shape} of its {layer.op} layer is absurdly "
                              f"large (at most {MAX_DIM} per axis, {MAX_TENSOR_ELEMENTS:.3g} elements){fix}")


# Fraction of the available memory a search may use by default.
_BUDGET_FRACTION = 0.5


def default_memory_budget_bytes() -> int:
    """Half of the memory the system reports available (``MemAvailable``), or 4 GiB if it cannot tell."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(int(line.split()[1]) * 1024 * _BUDGET_FRACTION)
    except (OSError, ValueError, IndexError):
        pass
    return 4 << 30
