"""Import PyTorch modules as pase graphs: :func:`from_torch`, through torch's ONNX exporter.

Needs the optional extra ``pase[torch]`` (torch's CPU build, onnx, onnxscript).
The module is exported to ONNX in memory by ``torch.onnx.export`` (the
TorchScript exporter by default, or ``dynamo=True`` for the torch.export-based
one), in training mode by default so that batch normalisation and dropout stay
in the graph as they run during training, then imported by
:func:`pase.io.onnx.from_onnx`. The dynamo exporter's graph is optimised as
``optimize=True`` would, but with the module's parameters seen as unknown values,
so that no parameter is folded, merged or dropped as a constant (see
:func:`_optimize_keeping_parameters`), and initializers that are no parameter
(masks, rotary tables) are never counted as parameters. Nothing is written to disk, and the model is
handed over in memory (never serialised), so the file size limit for uploads
(:data:`~pase.limits.MAX_ONNX_BYTES`) does not apply to a module's own weights.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Any, Mapping

from pase.errors import FormatError
from pase.ir.graph import Graph
from pase.io.onnx import from_onnx

__all__ = ["from_torch", "export_onnx_bytes", "export_onnx_model", "DEFAULT_OPSET"]

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
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    if dynamo:
        return _export_dynamo(torch, module, args, training=training, opset=max(opset, 18),
                              input_names=input_names).SerializeToString()
    return _export_torchscript(torch, module, args, training=training, opset=opset, input_names=input_names)


def export_onnx_model(module, example_inputs, *, training: bool = True, opset: int = DEFAULT_OPSET,
                      dynamo: bool = False, input_names=None, fallback: bool = True):
    """The ONNX model of ``module`` called on ``example_inputs``, as an ``onnx.ModelProto``
    held in memory: :func:`~pase.io.onnx.from_onnx` takes it without the size limit of
    uploaded files, which a module's own weights would exceed past 256 MiB.

    With ``fallback``, a module the TorchScript exporter refuses (an operator it lacks,
    such as ``aten::diff`` in the masks of transformers' decoders) is exported by the
    dynamo exporter instead. Other arguments as :func:`export_onnx_bytes`.

    Raises
    ------
    FormatError
        torch could not export the module (the message is torch's; both exporters'
        with ``fallback``).
    """
    return _export_model(module, example_inputs, training=training, opset=opset, dynamo=dynamo,
                         input_names=input_names, fallback=fallback)[0]


def _export_model(module, example_inputs, *, training, opset, dynamo, input_names=None, fallback=True):
    """:func:`export_onnx_model`'s model, and whether the dynamo exporter made it."""
    import onnx

    torch = _torch()
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    if dynamo:
        return _export_dynamo(torch, module, args, training=training, opset=max(opset, 18),
                              input_names=input_names), True
    try:
        data = _export_torchscript(torch, module, args, training=training, opset=opset, input_names=input_names)
        return onnx.load_model_from_string(data), False
    except FormatError as first:
        if not fallback:
            raise
        try:
            return _export_dynamo(torch, module, args, training=training, opset=max(opset, 18),
                                  input_names=input_names), True
        except FormatError as second:
            raise FormatError(f"{first}; with dynamo=True: {second}") from None


def _export_torchscript(torch, module, args, *, training, opset, input_names) -> bytes:
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


def _export_dynamo(torch, module, args, *, training, opset, input_names):
    was_training = module.training
    module.train(training)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(module, args, dynamo=True, opset_version=opset, optimize=False,
                                        input_names=None if input_names is None else list(input_names))
            _optimize_keeping_parameters(program.model, module)
        model = program.model_proto
        _tie_transposed_copies(model)
        return model
    except Exception as exc:
        raise FormatError(f"torch could not export {type(module).__name__} to ONNX (dynamo): {type(exc).__name__}: "
                          f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from None
    finally:
        module.train(was_training)


def _optimize_keeping_parameters(model, module) -> None:
    """Run onnxscript's optimiser on the exported ``model`` (an ``onnx_ir`` model, in place), as
    ``torch.onnx.export(optimize=True)`` does, but blind to the values of ``module``'s
    parameters.

    Seeing them, the optimiser treats trainable tensors as constants: it folds operations
    on them into new initializers of other names and shapes (the rows of a position table
    gathered at ``arange(seq)``, GPT-2's ``wpe``, counted at ``seq`` rows; T5's relative
    position bias gathered at fixed buckets), which the importer can no longer trace to
    their parameter nor tell from a folded mask; it drops a bias that is all zeros (a
    fresh model's, from a Gemm); and it merges initializers of equal values (every fresh
    LayerNorm scale, all ones) into one parameter. With the parameters' values hidden for
    the while, it still folds shape computations, masks and tables built from buffers, and
    rewrites what it rewrites; the importer folds what reads a parameter itself, keeping
    track of the parameter behind each value.
    """
    try:
        from onnxscript import optimizer
    except ImportError:  # pragma: no cover - onnxscript comes with the dynamo exporter
        return
    parameters = {name for name, _ in module.named_parameters(remove_duplicate=False)}
    hidden = {name: v.const_value for name, v in model.graph.initializers.items() if name in parameters}
    for name in hidden:
        model.graph.initializers[name].const_value = None
    quiet = logging.getLogger("onnx_ir")  # it warns of every initializer without a value
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        optimizer.optimize_ir(model)
        failed = False
    except Exception:  # an optimiser that needs every initializer's value: optimise as torch does
        failed = True
    finally:
        quiet.setLevel(level)
        for name, value in hidden.items():
            if name in model.graph.initializers:
                model.graph.initializers[name].const_value = value
    if failed:
        optimizer.optimize_ir(model)


def _tie_transposed_copies(model) -> None:
    """Replace every initializer of ``model`` that holds the transpose of another (the
    optimiser's pre-transposed copy of a table the LM head shares with the embedding) by a
    Transpose node of that other, so that the importer sees one parameter read twice.

    The importer finds such copies by their values only up to the size it reads
    (:data:`~pase.limits.MAX_FOLD_ELEMENTS`); here the model is the module's own, so
    tables of any size are compared. Equal copies in the same orientation are left alone
    (cloned layers of a fresh model start equal).
    """
    import numpy as np
    from onnx import helper, numpy_helper

    matrices: dict[tuple, list] = {}
    for t in model.graph.initializer:
        if len(t.dims) == 2 and t.dims[0] != t.dims[1] and t.data_type in (1, 10, 11, 16):
            matrices.setdefault(tuple(t.dims), []).append(t)
    copies = {}
    for shape, tall in matrices.items():
        wide = matrices.get(shape[::-1], []) if shape[0] > shape[1] else []
        for w in wide:
            w_t = numpy_helper.to_array(w).T
            original = next((t for t in tall if np.array_equal(numpy_helper.to_array(t), w_t)), None)
            if original is not None:
                copies[w.name] = original.name
    if not copies:
        return
    kept = [t for t in model.graph.initializer if t.name not in copies]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    inputs = [i for i in model.graph.input if i.name not in copies]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    transposes = [helper.make_node("Transpose", [original], [copy], perm=[1, 0], name=f"{copy}/tied")
                  for copy, original in copies.items()]
    nodes = transposes + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _buffer_initializers(model, module) -> set[str]:
    """Names of the initializers of ``model`` that hold a buffer of ``module`` (not
    trainable): the buffers' own names, and the constants the dynamo exporter's optimiser
    folds from one (a cached rotary table cut to the sequence length: the buffer's
    leading part along one axis, under a new name)."""
    import numpy as np
    from onnx import numpy_helper

    buffers = dict(module.named_buffers())
    parameters = {name for name, _ in module.named_parameters()}
    names = set(buffers) & {t.name for t in model.graph.initializer}
    floats = [b.detach().cpu().numpy() for b in buffers.values() if b.is_floating_point() and b.numel() > 1]
    for t in model.graph.initializer:
        if t.name in names or t.name in parameters or t.data_type not in (1, 10, 11, 16):
            continue
        shape = tuple(t.dims)
        candidates = [b for b in floats if b.ndim == len(shape)
                      and sum(d != e for d, e in zip(b.shape, shape)) <= 1 and all(d >= e for d, e in zip(b.shape, shape))]
        if not candidates:
            continue
        value = numpy_helper.to_array(t)
        if any(np.array_equal(b[tuple(slice(0, e) for e in shape)].astype(value.dtype), value) for b in candidates):
            names.add(t.name)
    return names


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
        TorchScript one (needs onnxscript). A module the TorchScript exporter
        refuses is exported with it anyway.

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
    model, by_dynamo = _export_model(module, example_inputs, training=training, opset=opset, dynamo=dynamo)
    buffers = _buffer_initializers(model, module)
    if by_dynamo or training:
        # Neither exporter folds a parameter into a new initializer here (the TorchScript
        # one exports training graphs unfolded, the dynamo one folds no node reading a
        # parameter: _optimize_keeping_parameters), so an initializer not named after a
        # parameter holds no trainable value: a mask or a rotary table folded from buffers
        # and constants, which would otherwise count as parameters.
        parameters = {n for n, _ in module.named_parameters(remove_duplicate=False)}
        buffers |= {t.name for t in model.graph.initializer if t.name not in parameters}
    return from_onnx(model, batch=batch, unsupported=unsupported, symbols=symbols,
                     name=name or type(module).__name__.lower(), buffers=buffers)
