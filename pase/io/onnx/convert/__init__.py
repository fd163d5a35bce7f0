"""ONNX operator converters, one module per family as in :mod:`pase.ops`.

:mod:`.registry` defines the :func:`~.registry.converter` decorator and
:data:`~.registry.CONVERTERS`; the families register their operators on
import: :mod:`.gemm` (Gemm, MatMul, Einsum), :mod:`.conv` (Conv, pooling),
:mod:`.norm` (element-wise operators, normalisation, softmax, losses),
:mod:`.sequence` (LSTM, and the embedding lookup behind a Gather from a weight),
:mod:`.movement` (Reshape, Transpose, Concat, Split, Slice, Gather, Pad...,
reductions), :mod:`.routing` (TopK, OneHot, CumSum, gathers and scatters at
computed indices: a mixture-of-experts router's bookkeeping) and :mod:`.tensor`
(constants, shape queries, pass-through).

Mapping another operator is one decorated function in its family's module
(a new family module is also added to the import below), for instance::

    @converter("Hardmax", act_first=True)
    def hardmax(imp, ins, attrs):
        x = ins[0]
        dims = letters(len(x.shape), x.batch_axis, x.image)
        spec = imp.emit("Softmax", dict(shape=list(x.shape), dims=list(dims), axis=dims[-1]), [x])
        return [Act.of(spec, 0, x.batch_axis, x.image)]
"""

from pase.io.onnx.convert import conv, gemm, movement, norm, routing, sequence, tensor  # noqa: F401  (they register on import)
from pase.io.onnx.convert.registry import CONVERTERS, Converter, Unsupported, converter

__all__ = ["CONVERTERS", "Converter", "Unsupported", "converter"]
