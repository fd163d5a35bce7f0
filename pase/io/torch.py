"""Import PyTorch modules as pase graphs: :func:`from_torch`, through torch's ONNX exporter.

Needs the optional extra ``pase[torch]`` (torch's CPU build, onnx, onnxscript).
The module is exported to ONNX in memory by ``torch.onnx.export`` (the
TorchScript exporter by default, or ``dynamo=True`` for the torch.export-based
one), in training mode by default so that batch normalisation and dropout stay
in the graph as they run during training, then imported by
:func:`pase.io.onnx.from_onnx`. Nothing is written to disk.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any, Mapping

from pase.errors import FormatError
from pase.ir.graph import Graph
from pase.io.onnx import from_onnx

__all__ = ["from_torch", "export_onnx_bytes", "DEFAULT_OPSET"]

# Opset 17 has LayerNormalization as one operator; the TorchScript exporter supports it.
DEFAULT_OPSET = 17


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("from_torch needs PyTorch: pip install 'pase[torch]' (or torch's CPU build)") from None
    return torch


def export_onnx_bytes(module, example_inputs, *, training: bool = True, opset: int = DEFAULT_OPSET,
                      dynamo: bool = False, input_names=None) -> bytes:
    """The ONNX serialisation of ``module`` called on ``example_inputs``.

    ``training=True`` exports the training graph (batch normalisation with
    batch statistics, dropout kept); ``False`` the inference graph, where
    the exporter may fold batch normalisation into convolutions.
    ``dynamo=True`` uses torch's torch.export-based exporter (needs
    onnxscript; opset 18 or later) instead of the TorchScript one.

    Raises
    ------
    FormatError
        torch could not export the module (the message is torch's).
    """
    torch = _torch()
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    args = tuple(example_inputs)
    if dynamo:
        return _export_dynamo(torch, module, args, training=training, opset=max(opset, 18), input_names=input_names)
    buf = io.BytesIO()
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    kwargs: dict[str, Any] = dict(training=mode, do_constant_folding=not training, opset_version=opset)
    if input_names is not None:
        kwargs["input_names"] = list(input_names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            try:
                torch.onnx.export(module, args, buf, dynamo=False, **kwargs)
            except TypeError as exc:  # torch before the dynamo switch
                if "dynamo" not in str(exc):
                    raise
                torch.onnx.export(module, args, buf, **kwargs)
        except Exception as exc:
            raise FormatError(f"torch could not export {type(module).__name__} to ONNX: {type(exc).__name__}: "
                              f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from None
    return buf.getvalue()


def _export_dynamo(torch, module, args, *, training, opset, input_names) -> bytes:
    was_training = module.training
    module.train(training)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(module, args, dynamo=True, opset_version=opset, optimize=True,
                                        input_names=None if input_names is None else list(input_names))
        return program.model_proto.SerializeToString()
    except Exception as exc:
        raise FormatError(f"torch could not export {type(module).__name__} to ONNX (dynamo): {type(exc).__name__}: "
                          f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from None
    finally:
        module.train(was_training)


def from_torch(
    module,
    example_inputs,
    *,
    batch: int | None = None,
    unsupported: str = "error",
    training: bool = True,
    opset: int = DEFAULT_OPSET,
    dynamo: bool = False,
    symbols: Mapping[str, int] | None = None,
    name: str | None = None,
) -> Graph:
    """Build a pase graph from a PyTorch module and example inputs.

    Parameters
    ----------
    module : torch.nn.Module
        The model; its forward pass is traced on ``example_inputs``.
    example_inputs : tensor or tuple of tensors
        Inputs of the shapes to plan for (the first dimension is the batch).
    batch, unsupported, symbols, name
        As for :func:`pase.io.onnx.from_onnx`.
    training : bool
        Export the training graph (default) or the inference graph.
    opset : int
        ONNX opset of the export.
    dynamo : bool
        Export with torch's torch.export-based exporter instead of the
        TorchScript one (needs onnxscript).

    Returns
    -------
    Graph
        Validated; layer names are the module paths (``layers.0/linear1/MatMul``).

    Raises
    ------
    ImportError
        torch is not installed.
    FormatError
        Export failed, or the exported graph uses operators pase cannot map.

    Examples
    --------
    >>> import torch
    >>> mlp = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    >>> g = from_torch(mlp, torch.randn(16, 64))
    >>> [layer.op for layer in g]
    ['FullyConnected', 'FullyConnected']
    >>> g.parameter_count == sum(p.numel() for p in mlp.parameters())
    True
    """
    data = export_onnx_bytes(module, example_inputs, training=training, opset=opset, dynamo=dynamo)
    return from_onnx(data, batch=batch, unsupported=unsupported, symbols=symbols,
                     name=name or type(module).__name__.lower())
