"""The converter registry: for each ONNX operator, the function that maps its nodes and
what the importer checks before calling it.

A converter is ``fn(imp, ins, attrs) -> list``: ``imp`` is the running
:class:`~pase.io.onnx.importer.Importer` (``imp.node`` the node, ``imp.opset``,
``imp.emit`` to add a layer, ``imp.where()`` to name the node in messages, and
its data-movement helpers), ``ins`` holds one
:class:`~pase.io.onnx.values.Act`, :class:`~pase.io.onnx.values.Const` or None
per node input, ``attrs`` the node's attributes. It returns one value per node
output (the importer fills in missing trailing outputs), raises
:class:`Unsupported` for a node it cannot map (reported, or approximated with
``unsupported="elementwise"``) and a :class:`~pase.errors.FormatError` for a
malformed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class Unsupported(Exception):
    """This node cannot be mapped; the message says why (empty when the operator itself is the reason)."""


@dataclass(frozen=True)
class Converter:
    """A registered converter and the importer's checks before it runs.

    ``inputs``: how many leading inputs must be present, or a function of the
    opset giving it. ``act_first``: input 0 must be an activation.
    ``on_constants``: the converter also takes nodes whose inputs are all
    constants (otherwise the importer folds those). ``keeps_name``: the first
    layer it emits is named after the node, without the helper's suffix.
    ``const_shape``: the output shape of an all-constant node that cannot be
    folded, when shape inference gives none: ``"first"`` (input 0's) or
    ``"broadcast"`` (the inputs' broadcast).
    """

    fn: Callable
    inputs: int | Callable[[int], int] = 1
    act_first: bool = False
    on_constants: bool = False
    keeps_name: bool = False
    const_shape: str | None = None

    def min_inputs(self, opset: int) -> int:
        """The inputs a node must have at this opset."""
        return self.inputs(opset) if callable(self.inputs) else self.inputs


CONVERTERS: dict[str, Converter] = {}
"""ONNX operator type (default domain) -> its :class:`Converter`."""


def converter(*op_types: str, **checks):
    """Decorator registering a function as the converter of ONNX operators ``op_types``,
    with the :class:`Converter` fields ``checks``; stack it for ops that differ in those."""

    def register(fn):
        taken = [op for op in op_types if op in CONVERTERS]
        if taken:
            raise ValueError(f"ONNX operators {taken} already have a converter")
        entry = Converter(fn, **checks)
        for op in op_types:
            CONVERTERS[op] = entry
        return fn

    return register
